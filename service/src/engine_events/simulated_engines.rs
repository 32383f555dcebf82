//! `serve --simulate N`: N engines in the service's process that register themselves, publish
//! real ZMQ msgpack KV events as they compute, and act on their hints, so the service can be
//! tried with `curl` on a machine without GPUs.
//!
//! An engine is booked through `/select_and_reserve` (it hears of its bookings in process). It
//! then runs the hint's `kv.fetch` actions (the named blocks count as copied), "computes" the
//! rest of the prompt at `prefill_tokens_per_s`, publishes `BlockStored` for the blocks it did
//! not hold (and `BlockRemoved` for what its LRU cache of `kv_blocks` evicts), and reports
//! `prefill_complete`. The client releases the booking (`DELETE /reservations/{id}`).

use crate::engine_events::engine_event::{
    BlockRemoved, BlockStored, EngineEvent, EngineEventBatch,
};
use crate::engine_events::engine_publisher::{EnginePublisher, encode_batch};
use crate::engine_events::event_transport::TransportError;
use crate::selection::selection_service::{BookedRequest, BookingObserver, SelectionService};
use crate::worker_record::{WireRole, WorkerRequest};
use dynamo_kv_router::kv::{SequenceHash, sequence_hashes_for_tokens};
use dynamo_kv_router::plugins::KvFetchPayload;
use dynamo_kv_router::router::Role;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What the simulated engines look like.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulationOptions {
    /// Engines to start (worker ids 1..=N).
    pub engines: usize,
    /// Tokens per block (the configuration's).
    pub block_size: u32,
    /// KV capacity of each engine, in blocks.
    pub kv_blocks: usize,
    /// Prefill throughput of each engine, tokens per second.
    pub prefill_tokens_per_s: f64,
}

impl Default for SimulationOptions {
    fn default() -> Self {
        Self {
            engines: 4,
            block_size: 16,
            kv_blocks: 16_384,
            prefill_tokens_per_s: 10_000.0,
        }
    }
}

/// Routes bookings to the simulated engine that was booked.
#[derive(Default)]
pub struct SimulatedBookings {
    engines: Mutex<HashMap<u64, mpsc::UnboundedSender<BookedRequest>>>,
}

impl BookingObserver for SimulatedBookings {
    fn booked(&self, booking: BookedRequest) {
        if let Some(engine) = self.engines.lock().get(&booking.worker.worker_id) {
            let _ = engine.send(booking);
        }
    }
}

/// The running engines; dropping it stops them.
pub struct SimulatedEngines {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The registration of each engine, as sent.
    pub registrations: Vec<WorkerRequest>,
}

impl Drop for SimulatedEngines {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl SimulatedEngines {
    /// Binds each engine's publisher on 127.0.0.1, registers it with `service` (which must
    /// have been built with `bookings` as its observer) and starts it.
    pub async fn start(
        service: &Arc<SelectionService>,
        bookings: &Arc<SimulatedBookings>,
        options: &SimulationOptions,
    ) -> Result<Self, TransportError> {
        let mut tasks = Vec::new();
        let mut registrations = Vec::new();
        for index in 0..options.engines {
            let worker_id = index as u64 + 1;
            let publisher = EnginePublisher::bind("127.0.0.1").await?;
            let registration = WorkerRequest {
                worker_id,
                model_name: crate::worker_record::DEFAULT_MODEL_NAME.to_owned(),
                routing_group: crate::worker_record::DEFAULT_ROUTING_GROUP.to_owned(),
                endpoint: Some(format!("sim://worker-{worker_id}")),
                kv_events_endpoint: Some(publisher.events_endpoint().to_owned()),
                kv_events_endpoints: BTreeMap::new(),
                replay_endpoint: Some(publisher.replay_endpoint().to_owned()),
                block_size: Some(options.block_size),
                data_parallel_start_rank: None,
                data_parallel_size: Some(1),
                max_num_batched_tokens: None,
                total_kv_blocks: Some(options.kv_blocks as u64),
                stable_routing_id: None,
                is_eagle: None,
                taints: Default::default(),
                topology_domains: Default::default(),
                kv_transfer_domain: None,
                kv_transfer_enforcement: None,
                kv_transfer_preferred_weight: None,
                router_hint_worker_type: Some("aggregated".to_owned()),
                router_hint_source_control_endpoints: BTreeMap::from([(
                    0,
                    format!("tcp://sim-worker-{worker_id}:23280"),
                )]),
                kv_event_source_mode: None,
                role: Some(WireRole(Role::Aggregated)),
            };
            let (sender, receiver) = mpsc::unbounded_channel();
            bookings.engines.lock().insert(worker_id, sender);
            let engine = Engine {
                worker_id,
                publisher,
                cache: LruBlocks::new(options.kv_blocks),
                options: options.clone(),
                service: Arc::clone(service),
            };
            tasks.push(tokio::spawn(engine.run(receiver)));
            service
                .upsert_worker(registration.clone())
                .map_err(|error| TransportError::Socket {
                    endpoint: format!("sim://worker-{worker_id}"),
                    message: error.to_string(),
                })?;
            registrations.push(registration);
        }
        Ok(Self {
            tasks,
            registrations,
        })
    }
}

/// An engine's KV cache: block → its engine id, least recently used first.
struct LruBlocks {
    capacity: usize,
    ids: HashMap<SequenceHash, u64>,
    order: VecDeque<SequenceHash>,
}

impl LruBlocks {
    fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ids: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn touch(&mut self, block: SequenceHash) {
        if let Some(position) = self.order.iter().rposition(|held| *held == block) {
            self.order.remove(position);
        }
        self.order.push_back(block);
    }

    /// Adds `block` under `id`; returns the engine ids evicted to make room.
    fn insert(&mut self, block: SequenceHash, id: u64) -> Vec<u64> {
        self.ids.insert(block, id);
        self.touch(block);
        let mut evicted = Vec::new();
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front()
                && let Some(id) = self.ids.remove(&oldest)
            {
                evicted.push(id);
            }
        }
        evicted
    }
}

struct Engine {
    worker_id: u64,
    publisher: EnginePublisher,
    cache: LruBlocks,
    options: SimulationOptions,
    service: Arc<SelectionService>,
}

impl Engine {
    async fn run(mut self, mut bookings: mpsc::UnboundedReceiver<BookedRequest>) {
        while let Some(booking) = bookings.recv().await {
            self.serve(booking).await;
        }
    }

    /// The engine's own id for a block: unique per engine.
    fn engine_id(&self, block: SequenceHash) -> u64 {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&block.get().to_le_bytes());
        bytes[8..].copy_from_slice(&self.worker_id.to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    async fn serve(&mut self, booking: BookedRequest) {
        let tokens = booking.token_ids.unwrap_or_default();
        let block_size = self.options.block_size as usize;
        let hashes = sequence_hashes_for_tokens(&tokens, self.options.block_size);
        let held = hashes
            .iter()
            .take_while(|hash| self.cache.ids.contains_key(hash))
            .count();
        let fetched = booking
            .hint
            .iter()
            .flat_map(|hint| &hint.actions)
            .filter_map(|action| {
                let action = dynamo_kv_router::plugins::HintAction::new(
                    action.action_type.clone(),
                    action.action_version.clone(),
                    action.payload.clone(),
                );
                KvFetchPayload::from_action(&action).ok()
            })
            .map(|payload| payload.block_hashes.len())
            .max()
            .unwrap_or(0)
            .min(hashes.len());
        let computed_from = held.max(fetched);
        let to_compute = tokens.len().saturating_sub(computed_from * block_size);
        let seconds = to_compute as f64 / self.options.prefill_tokens_per_s.max(1.0);
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        self.store(&tokens, &hashes, held).await;
        let _ = self.service.prefill_complete(&booking.selection_id);
    }

    /// Publishes the blocks from `first` on (fetched or computed), and the evictions.
    async fn store(&mut self, tokens: &[u32], hashes: &[SequenceHash], first: usize) {
        for hash in &hashes[..first] {
            self.cache.touch(*hash);
        }
        if first >= hashes.len() {
            return;
        }
        let block_size = self.options.block_size as usize;
        let ids: Vec<u64> = hashes[first..]
            .iter()
            .map(|hash| self.engine_id(*hash))
            .collect();
        let parent = first
            .checked_sub(1)
            .map(|index| self.engine_id(hashes[index]));
        let mut evicted = Vec::new();
        for (hash, id) in hashes[first..].iter().zip(&ids) {
            evicted.extend(self.cache.insert(*hash, *id));
        }
        let mut events = vec![EngineEvent::BlockStored(BlockStored {
            block_hashes: ids,
            parent_block_hash: parent,
            token_ids: tokens[first * block_size..hashes.len() * block_size].to_vec(),
            block_size,
            ..BlockStored::default()
        })];
        if !evicted.is_empty() {
            events.push(EngineEvent::BlockRemoved(BlockRemoved {
                block_hashes: evicted,
                ..BlockRemoved::default()
            }));
        }
        let batch = EngineEventBatch {
            ts: now(),
            events,
            data_parallel_rank: None,
        };
        if let Err(error) = self.publisher.publish(encode_batch(&batch)).await {
            tracing::warn!(worker = self.worker_id, %error, "simulated engine could not publish");
        }
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}
