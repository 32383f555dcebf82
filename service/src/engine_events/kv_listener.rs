//! One listener per worker rank: subscribes to the engine's KV-event publisher, decodes each
//! numbered batch and applies it to the partition's index. The index numbers the stream
//! (`seq`): a gap makes the worker await a replay, which the listener asks of the engine's
//! replay endpoint (the first message of a fresh listener with `seq` k > 0 asks for 0..k);
//! when the replay cannot be had the worker is reset and starts over; `seq` back at 0 is an
//! engine restart, which clears the worker. A publisher that goes quiet for `idle_reconnect`
//! is subscribed to afresh ([`Resubscription`]: the pure-Rust ZMQ socket does not notice a
//! vanished peer), so an engine that went away and came back is picked up again.
//!
//! After a resubscription the listener asks the replay endpoint for the last batch it applied:
//! the same batch (same number, same bytes) means the same engine, and the rest of the answer
//! fills whatever was published while it was away; anything else means the engine restarted
//! (and its `seq` 0 may have gone by unseen): the worker is cleared and rebuilt from the
//! engine's replay from 0.

use crate::engine_events::event_batch_reader::read_event_batch;
use crate::engine_events::event_conversion::convert_batch;
use crate::engine_events::event_transport::EventTransport;
use crate::engine_events::ingest_stats::IngestStats;
use crate::engine_events::resubscription::{Delivery, Resubscription, ResubscriptionTiming};
use crate::partition::Partition;
use bytes::Bytes;
use dynamo_kv_router::kv::IgnoreReason;
use dynamo_kv_router::router::{EventOutcome, WorkerId};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use xxhash_rust::xxh3::xxh3_64;

/// Timing of a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerOptions {
    /// Resubscribe after this long without a message (default 5 s).
    pub idle_reconnect: Duration,
    /// Longest wait for each replay answer (default 2 s).
    pub replay_wait: Duration,
    /// Pause before retrying a failed subscription (default 200 ms).
    pub retry_pause: Duration,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        Self {
            idle_reconnect: Duration::from_secs(5),
            replay_wait: Duration::from_secs(2),
            retry_pause: Duration::from_millis(200),
        }
    }
}

/// One worker rank's event source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSpec {
    /// The worker.
    pub worker_id: u64,
    /// The rank the publisher serves (batches may name another).
    pub dp_rank: u32,
    /// The publisher.
    pub events_endpoint: String,
    /// The replay endpoint, if the engine has one.
    pub replay_endpoint: Option<String>,
}

/// A running listener's state.
pub struct KvListener {
    spec: ListenerSpec,
    options: ListenerOptions,
    partition: Arc<Partition>,
    transport: Arc<dyn EventTransport>,
    stats: Arc<IngestStats>,
    /// The last batch applied: its worker rank, number and payload hash.
    last_applied: Mutex<Option<(WorkerId, u64, u64)>>,
}

impl KvListener {
    /// A listener for `spec` feeding `partition`.
    pub fn new(
        spec: ListenerSpec,
        options: ListenerOptions,
        partition: Arc<Partition>,
        transport: Arc<dyn EventTransport>,
        stats: Arc<IngestStats>,
    ) -> Self {
        Self {
            spec,
            options,
            partition,
            transport,
            stats,
            last_applied: Mutex::new(None),
        }
    }

    /// Listens until the task is aborted.
    pub async fn run(self) {
        let mut subscription = Resubscription::new(
            Arc::clone(&self.transport),
            self.spec.events_endpoint.clone(),
            vec![String::new()],
            ResubscriptionTiming {
                quiet: self.options.idle_reconnect,
                retry_pause: self.options.retry_pause,
            },
        );
        loop {
            match subscription.next().await {
                Delivery::Subscribed => {
                    self.stats.connects.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(worker = self.spec.worker_id, dp_rank = self.spec.dp_rank, endpoint = %self.spec.events_endpoint, "subscribed to KV events");
                    self.resume().await;
                }
                Delivery::Message(frames) => self.on_message(&frames).await,
                Delivery::Lost => {}
            }
        }
    }

    async fn on_message(&self, frames: &[Bytes]) {
        let [_, seq, payload] = frames else {
            self.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Ok(seq) = <[u8; 8]>::try_from(seq.as_ref()) else {
            self.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let seq = u64::from_be_bytes(seq);
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        let Some(worker) = self.apply(seq, payload) else {
            return;
        };
        if self.partition.router.replay_request(worker).is_some() {
            self.recover(worker).await;
            if self.partition.router.replay_request(worker).is_some() {
                self.stats.replays_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%worker, "lost KV events could not be replayed; the worker starts over");
                self.partition.router.abandon_recovery(worker);
                self.apply(seq, payload);
            }
        }
    }

    /// After a resubscription: catch up with the same engine, or rebuild the worker from a
    /// restarted one (see the module documentation).
    async fn resume(&self) {
        let Some((worker, seq, hash)) = *self.last_applied.lock() else {
            return;
        };
        let Some(endpoint) = &self.spec.replay_endpoint else {
            return;
        };
        let wait = self.options.replay_wait;
        let Ok(batches) = self.transport.replay(endpoint, seq, wait).await else {
            return;
        };
        let same_engine = batches
            .first()
            .is_some_and(|first| first.seq == seq && xxh3_64(&first.payload) == hash);
        if same_engine {
            for batch in batches.iter().skip(1) {
                self.stats.replayed_batches.fetch_add(1, Ordering::Relaxed);
                self.apply(batch.seq, &batch.payload);
            }
            return;
        }
        tracing::info!(%worker, "the engine restarted while away; rebuilding its blocks from its replay");
        self.partition.router.abandon_recovery(worker);
        *self.last_applied.lock() = None;
        self.stats.replays.fetch_add(1, Ordering::Relaxed);
        if let Ok(batches) = self.transport.replay(endpoint, 0, wait).await {
            for batch in batches {
                self.stats.replayed_batches.fetch_add(1, Ordering::Relaxed);
                self.apply(batch.seq, &batch.payload);
            }
        }
    }

    /// Decodes and applies one batch; returns the worker rank it was about.
    fn apply(&self, seq: u64, payload: &[u8]) -> Option<WorkerId> {
        let batch = match read_event_batch(payload) {
            Ok(batch) => batch,
            Err(error) => {
                self.stats.decode_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(worker = self.spec.worker_id, seq, %error, "KV event batch skipped");
                return None;
            }
        };
        let converted = convert_batch(
            &batch,
            seq,
            self.spec.worker_id,
            self.spec.dp_rank,
            self.partition.block_size,
        );
        for reason in &converted.skipped {
            self.stats.skip(*reason);
        }
        let worker = converted.events.first().map(|event| event.worker());
        self.stats
            .events
            .fetch_add(converted.events.len() as u64, Ordering::Relaxed);
        let outcomes = self.partition.router.apply_event_batch(&converted.events);
        let admitted = !outcomes.iter().any(|outcome| {
            matches!(
                outcome,
                EventOutcome::Ignored(
                    IgnoreReason::Gap | IgnoreReason::AwaitingRecovery | IgnoreReason::OutOfOrder
                )
            )
        });
        if admitted && let Some(worker) = worker {
            *self.last_applied.lock() = Some((worker, seq, xxh3_64(payload)));
        }
        worker
    }

    /// Asks the engine to replay what `worker` lost and applies the answer, in order.
    async fn recover(&self, worker: WorkerId) {
        let Some(from) = self.partition.router.replay_request(worker) else {
            return;
        };
        let Some(endpoint) = &self.spec.replay_endpoint else {
            return;
        };
        self.stats.replays.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%worker, from, "asking the engine to replay lost KV events");
        match self
            .transport
            .replay(endpoint, from, self.options.replay_wait)
            .await
        {
            Ok(batches) => {
                for batch in batches {
                    self.stats.replayed_batches.fetch_add(1, Ordering::Relaxed);
                    self.apply(batch.seq, &batch.payload);
                }
            }
            Err(error) => {
                tracing::warn!(%worker, %error, "KV event replay failed");
            }
        }
    }
}
