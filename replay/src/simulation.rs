//! The event-driven simulated cluster: requests arrive, are booked through the router, queue on
//! their worker, reuse, fetch or compute their KV, publish KV events, and complete — all in
//! virtual time, as fast as the CPU allows.

use crate::block_cache::{BlockCache, HashKeyed};
use crate::cluster::ResolvedCluster;
use crate::engine_block::{engine_block_hash, sequence_hash_of};
use crate::outcome::{BookingRecord, RequestTiming, SimulationResult, StageOutcome, WorkerUsage};
use crate::router_port::RouterPort;
use crate::workload::PreparedWorkload;
use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData,
    RouterEvent, SequenceHash,
};
use dynamo_kv_router::plugins::{KV_FETCH_ACTION_TYPE, KV_FETCH_ACTION_VERSION, KvFetchPayload};
use dynamo_kv_router::router::{
    Prompt, Role, RouteRequest, RouterError, WorkerCapabilities, WorkerId, WorkerInfo,
};
use dynamo_kv_router::wire::{KvHint, NumberedAction};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

/// The action type a simulated worker executes; every other type is counted and ignored.
pub const KV_FETCH: &str = KV_FETCH_ACTION_TYPE;

/// The source endpoint simulated worker `index` advertises.
pub fn worker_endpoint(index: usize) -> String {
    format!("tcp://sim-worker-{index}:23280")
}

/// A simulation that could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    /// No role to book.
    #[error(
        "the configuration books no role; add a `worker_selection` entry for aggregated, or for prefill and decode"
    )]
    NoStages,
    /// The router refused a simulated worker.
    #[error("the router refused simulated worker {worker}: {source}")]
    Register {
        /// The worker.
        worker: WorkerId,
        /// The router's error.
        source: RouterError,
    },
}

/// The roles a request passes through, in order, for a configuration that configures `roles`:
/// aggregated alone, or prefill then decode, or whichever of those is configured.
pub fn stages_for(roles: &[Role]) -> Vec<Role> {
    if roles.contains(&Role::Aggregated) || roles.is_empty() {
        return vec![Role::Aggregated];
    }
    [Role::Prefill, Role::Decode]
        .into_iter()
        .filter(|role| roles.contains(role))
        .collect()
}

/// A `kv.fetch` to execute: the source worker and its engine hashes, root-aligned (entry `i`
/// names request block `i`).
struct FetchOrder {
    source: u32,
    block_hashes: Vec<EngineBlockHash>,
}

struct Job {
    request: u32,
    stage: u8,
    arrived_us: u64,
    fetches: Vec<FetchOrder>,
    /// The prefix the router said the worker cached when it booked it.
    predicted_local: u32,
}

struct SimWorker {
    id: WorkerId,
    stage: u8,
    cache: BlockCache,
    next_event_id: u64,
    queue: VecDeque<Job>,
    running: Option<StageOutcome>,
    busy_us: u64,
    served: u64,
    /// Blocks named by this worker's `stored` events.
    stored_blocks: u64,
    /// Blocks named by this worker's `removed` events.
    removed_blocks: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    WorkDone { worker: u32 },
    DecodeDone { request: u32, stage: u8 },
}

struct Simulation<'a, R: RouterPort + ?Sized> {
    router: &'a R,
    workload: &'a PreparedWorkload,
    cluster: ResolvedCluster,
    stages: Vec<Role>,
    workers: Vec<SimWorker>,
    endpoints: HashKeyed<u32>,
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    sequence: u64,
    now: u64,
    stored_scratch: Vec<KvCacheStoredBlockData>,
    removed_scratch: Vec<u64>,
    new_scratch: Vec<bool>,
    slot_scratch: Vec<u32>,
    id_scratch: String,
    result: SimulationResult,
}

/// Replays `workload` through `router` on a cluster of `cluster.workers_per_role` workers for
/// each role of `stages`; `progress` is told how many requests arrived since its last call.
pub fn simulate<R: RouterPort + ?Sized>(
    router: &R,
    workload: &PreparedWorkload,
    cluster: &ResolvedCluster,
    stages: &[Role],
    progress: &mut dyn FnMut(u64),
) -> Result<SimulationResult, SimulationError> {
    if stages.is_empty() {
        return Err(SimulationError::NoStages);
    }
    let started = Instant::now();
    let mut workers = Vec::new();
    let mut endpoints = HashKeyed::default();
    for (stage, role) in stages.iter().enumerate() {
        for _ in 0..cluster.workers_per_role {
            let index = workers.len();
            let id = WorkerId::new(index as u64, 0);
            let capabilities = if cluster.router_hint {
                WorkerCapabilities::hint_source(worker_endpoint(index))
            } else {
                WorkerCapabilities::none()
            };
            router
                .register_worker(WorkerInfo::new(id, *role, capabilities))
                .map_err(|source| SimulationError::Register { worker: id, source })?;
            endpoints.insert(endpoint_key(&worker_endpoint(index)), index as u32);
            workers.push(SimWorker {
                id,
                stage: stage as u8,
                cache: BlockCache::new(cluster.kv_capacity_blocks),
                next_event_id: 0,
                queue: VecDeque::new(),
                running: None,
                busy_us: 0,
                served: 0,
                stored_blocks: 0,
                removed_blocks: 0,
            });
        }
    }
    let mut simulation = Simulation {
        router,
        workload,
        cluster: *cluster,
        stages: stages.to_vec(),
        workers,
        endpoints,
        heap: BinaryHeap::new(),
        sequence: 0,
        now: 0,
        stored_scratch: Vec::new(),
        removed_scratch: Vec::new(),
        new_scratch: Vec::new(),
        slot_scratch: Vec::new(),
        id_scratch: String::new(),
        result: SimulationResult {
            stages: stages.to_vec(),
            requests: workload
                .requests
                .iter()
                .map(|r| RequestTiming {
                    arrival_us: r.arrival_us,
                    ttft_us: None,
                })
                .collect(),
            stage_outcomes: Vec::with_capacity(workload.requests.len() * stages.len()),
            bookings: Vec::with_capacity(workload.requests.len() * stages.len()),
            ..SimulationResult::default()
        },
    };
    simulation.run(progress);
    let wall = started.elapsed();
    simulation.check_final_state();
    let mut result = simulation.result;
    result.workers = simulation
        .workers
        .iter()
        .map(|w| WorkerUsage {
            role: stages[w.stage as usize],
            busy_us: w.busy_us,
            served: w.served,
        })
        .collect();
    result.virtual_end_us = result.virtual_end_us.max(simulation.now);
    result.wall = wall;
    Ok(result)
}

/// Endpoints are looked up by a hash of their text, so the lookup allocates nothing.
fn endpoint_key(endpoint: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    endpoint.hash(&mut hasher);
    hasher.finish()
}

fn request_id(request: u32, stage: u8) -> String {
    let mut id = String::new();
    write_request_id(&mut id, request, stage);
    id
}

/// Writes the id of `request` in `stage` into `buffer` (replacing its content).
fn write_request_id(buffer: &mut String, request: u32, stage: u8) {
    use std::fmt::Write as _;
    buffer.clear();
    let _ = if stage == 0 {
        write!(buffer, "r{request}")
    } else {
        write!(buffer, "r{request}.{stage}")
    };
}

impl<R: RouterPort + ?Sized> Simulation<'_, R> {
    fn run(&mut self, progress: &mut dyn FnMut(u64)) {
        let mut next = 0usize;
        let mut unreported = 0u64;
        loop {
            let arrival = self.workload.requests.get(next).map(|r| r.arrival_us);
            let event_time = self.heap.peek().map(|Reverse((time, _, _))| *time);
            match (arrival, event_time) {
                (None, None) => break,
                (Some(arrival), Some(time)) if time <= arrival => self.next_event(),
                (Some(arrival), _) => {
                    self.now = self.now.max(arrival);
                    self.arrive(next as u32, 0);
                    next += 1;
                    unreported += 1;
                    if unreported == 256 {
                        progress(unreported);
                        unreported = 0;
                    }
                }
                (None, Some(_)) => self.next_event(),
            }
        }
        progress(unreported);
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.sequence += 1;
        self.heap.push(Reverse((at, self.sequence, event)));
    }

    fn next_event(&mut self) {
        let Some(Reverse((time, _, event))) = self.heap.pop() else {
            return;
        };
        self.now = self.now.max(time);
        match event {
            Event::WorkDone { worker } => self.work_done(worker as usize),
            Event::DecodeDone { request, stage } => {
                write_request_id(&mut self.id_scratch, request, stage);
                self.router.release(&self.id_scratch);
                self.result.virtual_end_us = self.result.virtual_end_us.max(self.now);
            }
        }
    }

    /// Books `request` for `stage` and queues it on the booked worker.
    fn arrive(&mut self, request: u32, stage: u8) {
        let prepared = &self.workload.requests[request as usize];
        let route = RouteRequest {
            request_id: request_id(request, stage),
            role: self.stages[stage as usize],
            prompt: Prompt::Blocks {
                sequence_hashes: prepared.sequence_hashes.clone(),
                prompt_tokens: prepared.prompt_tokens,
            },
            session: prepared.session.clone(),
            identity: Default::default(),
        };
        let started = Instant::now();
        let booked = self.router.book(&route);
        let latency = started.elapsed();
        let booking = match booked {
            Ok(booking) => booking,
            Err(error) => {
                tracing::debug!(request = route.request_id, "booking failed: {error}");
                *self
                    .result
                    .book_failures
                    .entry(error.reason().to_owned())
                    .or_default() += 1;
                return;
            }
        };
        let worker = booking.worker.worker_id as usize;
        let valid = booking.worker.dp_rank == 0
            && self.workers.get(worker).is_some_and(|w| w.stage == stage);
        if !valid {
            *self
                .result
                .book_failures
                .entry("booked_unknown_worker".to_owned())
                .or_default() += 1;
            self.router.release(&route.request_id);
            return;
        }
        let mut record = BookingRecord {
            latency_ns: latency.as_nanos().min(u128::from(u64::MAX)) as u64,
            actions_dropped: booking.stats.actions_dropped as u32,
            policy_failures: booking.stats.policy_failures as u32,
            ..BookingRecord::default()
        };
        let fetches = match &booking.hint {
            Some(hint) => self.read_hint(hint, &mut record),
            None => Vec::new(),
        };
        self.result.bookings.push(record);
        self.workers[worker].queue.push_back(Job {
            request,
            stage,
            arrived_us: self.now,
            fetches,
            predicted_local: booking.stats.cached_blocks.min(u32::MAX as usize) as u32,
        });
        if self.workers[worker].running.is_none() {
            self.start(worker);
        }
    }

    fn read_hint(&self, hint: &KvHint, record: &mut BookingRecord) -> Vec<FetchOrder> {
        record.hint = true;
        record.actions = hint.actions.len() as u32;
        let mut fetches = Vec::new();
        for action in &hint.actions {
            if action.action_type != KV_FETCH {
                record.other_actions += 1;
                continue;
            }
            match self.fetch_order(action) {
                Some(order) => {
                    record.fetch_actions += 1;
                    fetches.push(order);
                }
                None => record.unusable_fetch_actions += 1,
            }
        }
        fetches
    }

    /// The fetch a `kv.fetch@1.0` action asks for, read by its typed payload contract.
    fn fetch_order(&self, action: &NumberedAction) -> Option<FetchOrder> {
        if action.action_version != KV_FETCH_ACTION_VERSION {
            return None;
        }
        let payload = KvFetchPayload::from_payload(&action.payload).ok()?;
        let source = *self
            .endpoints
            .get(&endpoint_key(&payload.source_control_endpoint))?;
        Some(FetchOrder {
            source,
            block_hashes: payload.block_hashes,
        })
    }

    /// Starts the next queued job of `worker`: decides, at this moment, which blocks are local,
    /// which a fetch can copy, and which must be computed, and schedules the end of the work.
    fn start(&mut self, worker: usize) {
        let Some(job) = self.workers[worker].queue.pop_front() else {
            return;
        };
        let prepared = &self.workload.requests[job.request as usize];
        let hashes = SequenceHash::as_u64s(&prepared.sequence_hashes);
        let own = &self.workers[worker].cache;
        let held_at_start = own.prefix_len(hashes);
        let mut position = held_at_start;
        let mut local = position;
        let (mut fetched, mut copied, mut wasted, mut evicted) = (0usize, 0usize, 0usize, 0usize);
        for order in &job.fetches {
            let source = &self.workers[order.source as usize].cache;
            // The payload is root-aligned: the worker skips the entries of blocks it holds and
            // fetches only the suffix it lacks, from its frontier on.
            let named = order.block_hashes.len().min(hashes.len());
            while position < named {
                let sequence_hash = sequence_hash_of(order.block_hashes[position].0);
                if sequence_hash != hashes[position] {
                    // Not this request's block: the payload broke the contract; what the
                    // source still holds of the rest is copied for nothing.
                    wasted += order.block_hashes[position..]
                        .iter()
                        .filter(|engine| source.contains(sequence_hash_of(engine.0)))
                        .count();
                    copied += wasted;
                    break;
                }
                if own.contains(sequence_hash) {
                    local += 1;
                    position += 1;
                    continue;
                }
                if !source.contains(sequence_hash) {
                    // The source evicted it: the rest of the suffix cannot be used.
                    evicted += order.block_hashes[position..named]
                        .iter()
                        .filter(|engine| !own.contains(sequence_hash_of(engine.0)))
                        .count();
                    break;
                }
                copied += 1;
                fetched += 1;
                position += 1;
            }
            // A fetch can bridge a gap to blocks the worker still holds further on.
            while position < hashes.len() && own.contains(hashes[position]) {
                local += 1;
                position += 1;
            }
        }
        let recomputed = hashes.len() - position;
        let recount = recount_reuse(own, &self.workers, &job.fetches, &hashes[held_at_start..]);
        if recount != (local - held_at_start, fetched) {
            self.result.invariants.reuse_recount_mismatches += 1;
        }
        let cluster = &self.cluster;
        let mut duration = 0.0;
        if copied > 0 {
            duration += cluster.fetch_latency_us + copied as f64 / cluster.fetch_blocks_per_s * 1e6;
        }
        if job.stage > 0 {
            // A decode stage after a separate prefill receives the rest from the prefill worker.
            if recomputed > 0 {
                duration +=
                    cluster.fetch_latency_us + recomputed as f64 / cluster.fetch_blocks_per_s * 1e6;
            }
        } else {
            let cached_tokens = position * cluster.block_size as usize;
            let tokens = prepared.prompt_tokens.saturating_sub(cached_tokens).max(1);
            duration += tokens as f64 / cluster.prefill_tokens_per_s * 1e6;
        }
        let duration = (duration.round() as u64).max(1);
        let outcome = StageOutcome {
            request: job.request,
            stage: job.stage,
            worker: worker as u32,
            blocks: hashes.len() as u32,
            local: local as u32,
            fetched: fetched as u32,
            recomputed: recomputed as u32,
            fetch_wasted: wasted as u32,
            hint_blocks_evicted: evicted as u32,
            predicted_local: job.predicted_local,
            held_at_start: held_at_start as u32,
            arrived_us: job.arrived_us,
            start_us: self.now,
            done_us: self.now + duration,
        };
        let state = &mut self.workers[worker];
        state.running = Some(outcome);
        state.busy_us += duration;
        state.served += 1;
        self.schedule(
            self.now + duration,
            Event::WorkDone {
                worker: worker as u32,
            },
        );
    }

    /// Compares, once every event is delivered, each worker's cache with its event ledger and
    /// with the router's view of it.
    fn check_final_state(&mut self) {
        let invariants = &mut self.result.invariants;
        for worker in &self.workers {
            let ledger = worker.stored_blocks.checked_sub(worker.removed_blocks);
            if ledger != Some(worker.cache.len() as u64) {
                invariants.ledger_mismatches += 1;
            }
        }
        for outcome in &self.result.stage_outcomes {
            let worker = &self.workers[outcome.worker as usize];
            let hashes = &self.workload.requests[outcome.request as usize].sequence_hashes;
            let own = worker.cache.prefix_len(SequenceHash::as_u64s(hashes));
            if self.router.cached_prefix(worker.id, hashes) != own {
                invariants.router_view_mismatches_at_end += 1;
            }
        }
    }

    /// The worker finished a job: it now holds the prompt's blocks (evicting others), tells the
    /// router, and hands the request on.
    fn work_done(&mut self, worker: usize) {
        let Some(outcome) = self.workers[worker].running.take() else {
            return;
        };
        self.store_blocks(worker, outcome.request as usize);
        self.result.stage_outcomes.push(outcome);
        let (request, stage) = (outcome.request, outcome.stage);
        write_request_id(&mut self.id_scratch, request, stage);
        self.router.prefill_complete(&self.id_scratch);
        if (stage as usize) + 1 < self.stages.len() {
            self.router.release(&self.id_scratch);
            self.arrive(request, stage + 1);
        } else {
            let prepared = &self.workload.requests[request as usize];
            let timing = &mut self.result.requests[request as usize];
            timing.ttft_us = Some(self.now.saturating_sub(timing.arrival_us));
            let decode_us = prepared.output_tokens as f64 / self.cluster.decode_tokens_per_s * 1e6;
            self.schedule(
                self.now + decode_us.round() as u64,
                Event::DecodeDone { request, stage },
            );
        }
        self.start(worker);
    }

    /// Makes the worker hold every block of the request, publishing one `removed` event for
    /// what it evicted, then `stored` events for the new blocks (chained to their parents).
    fn store_blocks(&mut self, worker: usize, request: usize) {
        let prepared = &self.workload.requests[request];
        let hashes = SequenceHash::as_u64s(&prepared.sequence_hashes);
        let state = &mut self.workers[worker];
        let mut new = std::mem::take(&mut self.new_scratch);
        let mut evicted = std::mem::take(&mut self.removed_scratch);
        let mut slots = std::mem::take(&mut self.slot_scratch);
        evicted.clear();
        state
            .cache
            .store_chain(hashes, &mut new, &mut evicted, &mut slots);
        let not_held = hashes
            .iter()
            .zip(&new)
            .filter(|(hash, is_new)| **is_new && !state.cache.contains(**hash))
            .count();
        self.result.invariants.stored_not_held += not_held as u64;
        let events = &mut self.result.events;
        let event_ns = &mut self.result.event_ns;
        let router = self.router;
        if !evicted.is_empty() {
            let data = KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: evicted
                    .iter()
                    .map(|hash| EngineBlockHash(engine_block_hash(*hash)))
                    .collect(),
            });
            publish_event(router, state, events, event_ns, data);
        }
        let mut run = std::mem::take(&mut self.stored_scratch);
        run.clear();
        let mut parent = None;
        for (index, is_new) in new.iter().enumerate() {
            if *is_new {
                if run.is_empty() {
                    parent = index
                        .checked_sub(1)
                        .map(|p| EngineBlockHash(engine_block_hash(hashes[p])));
                }
                run.push(KvCacheStoredBlockData {
                    block_hash: EngineBlockHash(engine_block_hash(hashes[index])),
                    tokens_hash: prepared.local_hashes[index],
                    mm_extra_info: None,
                });
            } else if !run.is_empty() {
                run = publish_run(router, state, events, event_ns, parent, run);
            }
        }
        if !run.is_empty() {
            run = publish_run(router, state, events, event_ns, parent, run);
        }
        self.stored_scratch = run;
        self.removed_scratch = evicted;
        self.new_scratch = new;
        self.slot_scratch = slots;
    }
}

/// Recounts how the blocks past the prefix a worker held at start were obtained, walking the
/// prompt rather than the fetch orders: up to the first block neither the worker nor any fetch
/// source holds, a block the worker holds is local and one only a source holds is fetched.
/// Returns `(local, fetched)`.
fn recount_reuse(
    own: &BlockCache,
    workers: &[SimWorker],
    fetches: &[FetchOrder],
    rest: &[u64],
) -> (usize, usize) {
    if fetches.is_empty() {
        return (0, 0);
    }
    // (sequence hash, source) of every block a fetch names, sorted for lookups.
    let mut offered: Vec<(u64, u32)> = fetches
        .iter()
        .flat_map(|order| {
            let source = order.source;
            order
                .block_hashes
                .iter()
                .map(move |engine| (sequence_hash_of(engine.0), source))
        })
        .collect();
    offered.sort_unstable();
    let named = |hash: u64| {
        let first = offered.partition_point(|(offered, _)| *offered < hash);
        offered[first..]
            .iter()
            .take_while(|(offered, _)| *offered == hash)
            .any(|(_, source)| workers[*source as usize].cache.contains(hash))
    };
    let (mut local, mut fetched) = (0, 0);
    for hash in rest {
        if own.contains(*hash) {
            local += 1;
        } else if named(*hash) {
            fetched += 1;
        } else {
            break;
        }
    }
    (local, fetched)
}

/// Publishes a run of stored blocks and hands back the buffer, emptied for reuse.
fn publish_run<R: RouterPort + ?Sized>(
    router: &R,
    worker: &mut SimWorker,
    events: &mut u64,
    event_ns: &mut u64,
    parent_hash: Option<EngineBlockHash>,
    blocks: Vec<KvCacheStoredBlockData>,
) -> Vec<KvCacheStoredBlockData> {
    let data = KvCacheEventData::Stored(KvCacheStoreData {
        parent_hash,
        start_position: None,
        blocks,
    });
    let mut run = match publish_event(router, worker, events, event_ns, data) {
        KvCacheEventData::Stored(store) => store.blocks,
        _ => Vec::new(),
    };
    run.clear();
    run
}

/// Sends one event numbered by the worker's monotonic counter and returns its data for reuse.
fn publish_event<R: RouterPort + ?Sized>(
    router: &R,
    worker: &mut SimWorker,
    events: &mut u64,
    event_ns: &mut u64,
    data: KvCacheEventData,
) -> KvCacheEventData {
    match &data {
        KvCacheEventData::Stored(store) => worker.stored_blocks += store.blocks.len() as u64,
        KvCacheEventData::Removed(remove) => {
            worker.removed_blocks += remove.block_hashes.len() as u64;
        }
        KvCacheEventData::Cleared => {}
    }
    let event = RouterEvent::new(worker.id, worker.next_event_id, data);
    worker.next_event_id += 1;
    *events += 1;
    let started = Instant::now();
    router.apply_event(&event);
    *event_ns += started.elapsed().as_nanos() as u64;
    event.event.data
}
