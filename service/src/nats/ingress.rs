//! The router replica's side of the event plane: one durable JetStream pull consumer reads
//! every worker's KV events (in stream order) and applies each to the partition of the
//! worker it names.
//!
//! - **Acknowledgement:** each pull of up to `batch` events is applied, then its last message
//!   is acknowledged (`AckPolicy::All` acknowledges everything before it too); with
//!   [`NatsOptions::checkpointed`] acknowledgements follow the checkpoint writes instead
//!   (see [`checkpoint`](super::checkpoint)). What was delivered but not acknowledged (the
//!   server or the connection went away) is delivered again after `ack_wait` and skipped (its
//!   stream sequence was handled); the index's per-rank `event_id` check rejects any event it
//!   already applied (counted as `duplicates`), so nothing is applied twice, and nothing is
//!   lost because the server keeps the consumer's position on disk.
//! - **A new process** (a first start or a restart) begins reading with
//!   [`NatsIngress::begin`]: after a restored checkpoint's sequence, or, with an empty index,
//!   from the stream's first event (the consumer is recreated there and the index is rebuilt
//!   from the stream).
//! - **Workers not registered yet:** their events wait (bounded by `pending_limit`) and are
//!   applied, in order, when the worker is attached.
//! - **Gaps:** a rank whose `event_id` skips numbers lost events at the publisher (the stream
//!   holds what it was sent); nothing can replay them, so the rank starts over from that
//!   event (as the ZMQ listener does when a replay fails), and it is counted.
//! - **Garbage:** a message that is not an envelope of `RouterEvent`s is counted and skipped.

use super::envelope::decode_kv_events;
use super::subjects::{KV_EVENT_TOPIC, namespace_filter};
use super::{NatsError, NatsOptions, connect, ensure_stream};
use crate::engine_events::ingress::{AttachedIngress, KvEventIngress};
use crate::partition::Partition;
use crate::worker_record::WorkerCatalogRecord;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use dynamo_kv_router::kv::{IgnoreReason, RouterEvent};
use dynamo_kv_router::router::EventOutcome;
use futures_util::StreamExt;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::runtime::Handle;

/// What the consumer did, rendered into `/metrics` as `kv_router_nats_*`.
#[derive(Debug, Default)]
pub struct NatsStats {
    /// Messages read from the stream (redeliveries included).
    pub messages: AtomicU64,
    /// Messages delivered more than once.
    pub redelivered: AtomicU64,
    /// Events handed to an index.
    pub events: AtomicU64,
    /// Events rejected as already applied: envelopes a publisher stored twice, and events
    /// whose `event_id` the index already passed.
    pub duplicates: AtomicU64,
    /// Redelivered messages skipped because this replica had handled their stream sequence.
    pub skipped_redeliveries: AtomicU64,
    /// Ranks whose events skipped numbers (they start over).
    pub gaps: AtomicU64,
    /// Messages that were not an envelope of `RouterEvent`s.
    pub garbage: AtomicU64,
    /// Events held for workers not registered yet.
    pub held: AtomicU64,
    /// Held events dropped because the hold was full.
    pub held_dropped: AtomicU64,
    /// Pulls that failed (server away, consumer missing).
    pub pull_errors: AtomicU64,
    /// Acknowledgements that failed (their events come again and are rejected as duplicates).
    pub ack_errors: AtomicU64,
    /// The stream sequence of the last message acknowledged.
    pub acked_stream_seq: AtomicU64,
}

impl NatsStats {
    /// The counters in the Prometheus text format.
    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        let counters = [
            (
                "messages",
                "event-plane messages read from the stream",
                &self.messages,
            ),
            (
                "redelivered",
                "messages delivered more than once",
                &self.redelivered,
            ),
            ("events", "KV events handed to the index", &self.events),
            (
                "duplicate_events",
                "KV events rejected as already applied",
                &self.duplicates,
            ),
            (
                "skipped_redeliveries",
                "redelivered messages already handled",
                &self.skipped_redeliveries,
            ),
            ("gaps", "ranks whose event ids skipped numbers", &self.gaps),
            (
                "garbage",
                "messages that were not RouterEvent envelopes",
                &self.garbage,
            ),
            (
                "held_events",
                "KV events held for unregistered workers",
                &self.held,
            ),
            (
                "held_dropped",
                "held KV events dropped (hold full)",
                &self.held_dropped,
            ),
            (
                "pull_errors",
                "failed pulls from the consumer",
                &self.pull_errors,
            ),
            ("ack_errors", "failed acknowledgements", &self.ack_errors),
        ];
        for (name, help, counter) in counters {
            let name = format!("kv_router_nats_{name}_total");
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        let name = "kv_router_nats_acked_stream_sequence";
        let _ = writeln!(
            out,
            "# HELP {name} stream sequence of the last acknowledged message\n# TYPE {name} gauge\n{name} {}",
            self.acked_stream_seq.load(Ordering::Relaxed)
        );
        out
    }
}

/// Which partition each attached worker's events go to, the events of workers not attached
/// yet, and how far the stream has been applied: one lock, so that a checkpoint taken under
/// it sees a state that holds exactly the events up to `applied_seq`.
#[derive(Default)]
pub(super) struct Routing {
    attached: HashMap<u64, (u64, Arc<Partition>)>,
    /// Held events with the stream sequence of the message that carried them.
    held: HashMap<u64, VecDeque<(u64, RouterEvent)>>,
    held_total: usize,
    next_generation: u64,
    /// The last envelope sequence applied per publisher.
    pub(super) publishers: HashMap<u64, u64>,
    /// The stream sequence of the last message handled (applied, rejected or skipped).
    pub(super) applied_seq: u64,
    /// That message (kept with checkpoints only), to acknowledge once a checkpoint holding it
    /// is written.
    pub(super) ack_point: Option<async_nats::jetstream::Message>,
}

impl Routing {
    /// The stream sequence of the oldest held event, if any: a checkpoint must not claim it.
    pub(super) fn oldest_held_seq(&self) -> Option<u64> {
        self.held
            .values()
            .filter_map(|events| events.front().map(|(seq, _)| *seq))
            .min()
    }
}

pub(super) struct Shared {
    pub(super) routing: Mutex<Routing>,
    /// The highest stream sequence handled (read without the lock to skip redeliveries).
    pub(super) handled_stream_seq: AtomicU64,
    pub(super) stats: NatsStats,
    pending_limit: usize,
    /// Acknowledgements follow the checkpoints ([`NatsOptions::checkpointed`]).
    checkpointed: bool,
}

impl Shared {
    /// Applies one message's events.
    fn apply_events(&self, routing: &mut Routing, seq: u64, events: Vec<RouterEvent>) {
        let mut rest = events.as_slice();
        while let Some(first) = rest.first() {
            let worker_id = first.worker_id;
            let run = rest
                .iter()
                .take_while(|event| event.worker_id == worker_id)
                .count();
            let (now, later) = rest.split_at(run);
            rest = later;
            match routing.attached.get(&worker_id) {
                Some((_, partition)) => {
                    let partition = Arc::clone(partition);
                    self.apply_to(&partition, now);
                }
                None => {
                    let room = self.pending_limit.saturating_sub(routing.held_total);
                    let kept = now.len().min(room);
                    routing
                        .held
                        .entry(worker_id)
                        .or_default()
                        .extend(now[..kept].iter().map(|event| (seq, event.clone())));
                    routing.held_total += kept;
                    self.stats.held.fetch_add(kept as u64, Ordering::Relaxed);
                    self.stats
                        .held_dropped
                        .fetch_add((now.len() - kept) as u64, Ordering::Relaxed);
                }
            }
        }
    }

    fn apply_to(&self, partition: &Partition, events: &[RouterEvent]) {
        self.stats
            .events
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        let outcomes = partition.router.apply_event_batch(events);
        for (event, outcome) in events.iter().zip(&outcomes) {
            match outcome {
                EventOutcome::Ignored(IgnoreReason::OutOfOrder) => {
                    self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                }
                EventOutcome::Ignored(IgnoreReason::Gap | IgnoreReason::AwaitingRecovery) => {
                    // Nothing replays what the publisher never sent: start the rank over here.
                    let worker = event.worker();
                    self.stats.gaps.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%worker, event_id = event.event_id(), "KV events lost before the stream; the worker starts over");
                    partition.router.abandon_recovery(worker);
                    partition.router.apply_event(event);
                }
                _ => {}
            }
        }
    }
}

/// The ingress reading the event plane through one durable consumer.
pub struct NatsIngress {
    pub(super) shared: Arc<Shared>,
    pub(super) consumer_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    client: async_nats::Client,
    pub(super) stream: async_nats::jetstream::stream::Stream,
    pub(super) options: NatsOptions,
    /// Where the consumer runs: this runtime (an [`IngestThread`]'s), or, when `None`, the
    /// runtime that calls [`NatsIngress::begin`].
    ///
    /// [`IngestThread`]: crate::engine_events::ingest_thread::IngestThread
    consumer_runtime: Option<Handle>,
}

impl Drop for NatsIngress {
    fn drop(&mut self) {
        if let Some(task) = self.consumer_task.lock().take() {
            task.abort();
        }
    }
}

impl NatsIngress {
    /// Connects, creates the stream if absent, recreates this replica's consumer at the
    /// stream's first event (see the module documentation) and starts reading.
    pub async fn start(options: NatsOptions) -> Result<Arc<NatsIngress>, NatsError> {
        let ingress = Self::connect(options).await?;
        ingress.begin(None).await?;
        Ok(ingress)
    }

    /// Connects and creates the stream if absent, without reading it yet:
    /// [`NatsIngress::begin`] starts the reading, from the stream's start or from a
    /// checkpoint's position (once the checkpoint's state is restored).
    pub async fn connect(options: NatsOptions) -> Result<Arc<NatsIngress>, NatsError> {
        Self::connect_with(options, None).await
    }

    /// [`NatsIngress::connect`], with the consumer (which reads the stream and applies its
    /// events) running on `runtime` (an [`IngestThread`]'s) instead of the runtime that begins
    /// it, so that applying events does not take the threads serving requests. The connection
    /// itself stays on the calling runtime.
    ///
    /// [`IngestThread`]: crate::engine_events::ingest_thread::IngestThread
    pub async fn connect_on(
        options: NatsOptions,
        runtime: Handle,
    ) -> Result<Arc<NatsIngress>, NatsError> {
        Self::connect_with(options, Some(runtime)).await
    }

    async fn connect_with(
        options: NatsOptions,
        consumer_runtime: Option<Handle>,
    ) -> Result<Arc<NatsIngress>, NatsError> {
        options.validate()?;
        let client = connect(&options.url).await?;
        let jetstream = async_nats::jetstream::new(client.clone());
        let stream = ensure_stream(&jetstream, &options.stream, options.max_age).await?;
        let shared = Arc::new(Shared {
            routing: Mutex::new(Routing::default()),
            handled_stream_seq: AtomicU64::new(0),
            stats: NatsStats::default(),
            pending_limit: options.pending_limit,
            checkpointed: options.checkpointed,
        });
        Ok(Arc::new(NatsIngress {
            shared,
            consumer_task: Mutex::new(None),
            client,
            stream,
            options,
            consumer_runtime,
        }))
    }

    /// Starts reading `consumer` (already positioned) in the background.
    pub(super) fn spawn_consumer(&self, consumer: PullConsumer) {
        let consuming = consume(
            Arc::clone(&self.shared),
            self.stream.clone(),
            consumer,
            self.options.clone(),
        );
        let task = match &self.consumer_runtime {
            Some(runtime) => runtime.spawn(consuming),
            None => tokio::spawn(consuming),
        };
        if let Some(previous) = self.consumer_task.lock().replace(task) {
            previous.abort();
        }
    }

    /// What the consumer did so far.
    pub fn stats(&self) -> &NatsStats {
        &self.shared.stats
    }

    /// The options it reads with.
    pub fn options(&self) -> &NatsOptions {
        &self.options
    }

    /// The connection (for publishing beside the consumer, e.g. replica sync).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Whether the consumer has read and applied everything the stream holds for it now
    /// (the warm start from the stream is done): no message pending, every delivered one
    /// handled.
    pub async fn caught_up(&self) -> Result<bool, NatsError> {
        let info = self
            .stream
            .consumer_info(&self.options.consumer)
            .await
            .map_err(|error| NatsError::JetStream {
                operation: "consumer info",
                message: error.to_string(),
            })?;
        let handled = self.shared.handled_stream_seq.load(Ordering::Relaxed);
        Ok(info.num_pending == 0 && handled >= info.delivered.stream_sequence)
    }
}

/// The durable consumer, created with `deliver_policy` if absent (an existing one keeps its
/// position).
pub(super) async fn create_consumer(
    stream: &async_nats::jetstream::stream::Stream,
    options: &NatsOptions,
    deliver_policy: DeliverPolicy,
) -> Result<PullConsumer, NatsError> {
    let config = pull::Config {
        durable_name: Some(options.consumer.clone()),
        deliver_policy,
        ack_policy: AckPolicy::All,
        ack_wait: options.ack_wait,
        filter_subject: namespace_filter(&options.namespace, KV_EVENT_TOPIC),
        max_ack_pending: -1,
        // A consumer left behind by a replica that went away (random names) is removed by the
        // server after an hour without pulls.
        inactive_threshold: Duration::from_secs(60 * 60),
        ..Default::default()
    };
    stream
        .get_or_create_consumer(&options.consumer, config)
        .await
        .map_err(|error| NatsError::JetStream {
            operation: "create consumer",
            message: error.to_string(),
        })
}

/// Reads the consumer until the task is aborted.
async fn consume(
    shared: Arc<Shared>,
    stream: async_nats::jetstream::stream::Stream,
    mut consumer: PullConsumer,
    options: NatsOptions,
) {
    let expires = Duration::from_millis(500);
    loop {
        let batch = consumer
            .batch()
            .max_messages(options.batch)
            .expires(expires)
            .messages()
            .await;
        let mut batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                shared.stats.pull_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%error, "NATS pull failed; retrying");
                tokio::time::sleep(options.retry_pause).await;
                // The server may have lost the consumer, or the whole stream (a restart without
                // its store): then the stream numbers from 1 again.
                if let Ok(again) = create_consumer(&stream, &options, DeliverPolicy::All).await {
                    consumer = again;
                }
                let mut stream = stream.clone();
                if let Ok(info) = stream.info().await
                    && info.state.last_sequence < shared.handled_stream_seq.load(Ordering::Relaxed)
                {
                    shared.handled_stream_seq.store(0, Ordering::Relaxed);
                    let mut routing = shared.routing.lock();
                    routing.applied_seq = 0;
                    routing.ack_point = None;
                }
                continue;
            }
        };
        let mut last = None;
        let mut failed = false;
        while let Some(message) = batch.next().await {
            match message {
                Ok(message) => {
                    on_message(&shared, &message);
                    last = Some(message);
                }
                Err(error) => {
                    shared.stats.pull_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, "NATS pull ended with an error");
                    failed = true;
                    break;
                }
            }
        }
        // With checkpoints, acknowledgements follow the checkpoint writes instead (see
        // `checkpoint`): what is acknowledged is always in a written state.
        if let Some(message) = last
            && !options.checkpointed
        {
            acknowledge(&shared.stats, &message).await;
        }
        if failed {
            tokio::time::sleep(options.retry_pause).await;
        }
    }
}

/// Acknowledges `message` and everything before it; whether it did. A failure is counted
/// (the events come again and are skipped).
pub(super) async fn acknowledge(
    stats: &NatsStats,
    message: &async_nats::jetstream::Message,
) -> bool {
    let seq = message.info().map(|info| info.stream_sequence).ok();
    match message.ack().await {
        Ok(()) => {
            if let Some(seq) = seq {
                stats.acked_stream_seq.fetch_max(seq, Ordering::Relaxed);
            }
            true
        }
        Err(error) => {
            stats.ack_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%error, "NATS acknowledgement failed; the events come again");
            false
        }
    }
}

fn on_message(shared: &Shared, message: &async_nats::jetstream::Message) {
    shared.stats.messages.fetch_add(1, Ordering::Relaxed);
    let info = message.info().ok();
    if info.as_ref().is_some_and(|info| info.delivered > 1) {
        shared.stats.redelivered.fetch_add(1, Ordering::Relaxed);
    }
    // One consumer reads the stream in order: a stream sequence not after the last one
    // handled is a redelivery (the server lost an acknowledgement), already applied.
    let seq = info.as_ref().map(|info| info.stream_sequence);
    if let Some(seq) = seq
        && seq <= shared.handled_stream_seq.load(Ordering::Relaxed)
    {
        shared
            .stats
            .skipped_redeliveries
            .fetch_add(1, Ordering::Relaxed);
        return;
    }
    let decoded = decode_kv_events(&message.payload);
    // Everything from here to the sequence update happens under one lock, so a checkpoint
    // sees this message either wholly applied or not at all.
    let mut routing = shared.routing.lock();
    match decoded {
        Ok((envelope, events)) => {
            // The same envelope stored twice (a publisher's retry beyond the stream's
            // duplicate window): upstream's event plane drops it by publisher and sequence.
            let last = routing.publishers.get(&envelope.publisher_id).copied();
            if last.is_none_or(|last| envelope.sequence > last) {
                routing
                    .publishers
                    .insert(envelope.publisher_id, envelope.sequence);
                shared.apply_events(&mut routing, seq.unwrap_or(0), events);
            } else {
                shared
                    .stats
                    .duplicates
                    .fetch_add(events.len() as u64, Ordering::Relaxed);
            }
        }
        Err(error) => {
            shared.stats.garbage.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(subject = %message.subject, %error, "event-plane message skipped");
        }
    }
    if let Some(seq) = seq {
        routing.applied_seq = seq;
        if shared.checkpointed {
            routing.ack_point = Some(message.clone());
        }
        shared.handled_stream_seq.store(seq, Ordering::Relaxed);
    }
}

/// Removes its worker's route when dropped (the attach's task is aborted), unless the worker
/// was attached again since.
struct RouteGuard {
    shared: Arc<Shared>,
    worker_id: u64,
    generation: u64,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut routing = self.shared.routing.lock();
        if routing
            .attached
            .get(&self.worker_id)
            .is_some_and(|(generation, _)| *generation == self.generation)
        {
            routing.attached.remove(&self.worker_id);
        }
    }
}

impl KvEventIngress for NatsIngress {
    fn missing_metadata(&self, _record: &WorkerCatalogRecord) -> Vec<String> {
        // Events name their worker; a worker needs no endpoint of its own.
        Vec::new()
    }

    fn attach(
        &self,
        record: &WorkerCatalogRecord,
        partition: Arc<Partition>,
    ) -> Result<AttachedIngress, String> {
        let worker_id = record.worker_id;
        let generation = {
            let mut routing = self.shared.routing.lock();
            routing.next_generation += 1;
            let generation = routing.next_generation;
            routing
                .attached
                .insert(worker_id, (generation, Arc::clone(&partition)));
            if let Some(held) = routing.held.remove(&worker_id) {
                routing.held_total = routing.held_total.saturating_sub(held.len());
                let held: Vec<RouterEvent> = held.into_iter().map(|(_, event)| event).collect();
                self.shared.apply_to(&partition, &held);
            }
            generation
        };
        let guard = RouteGuard {
            shared: Arc::clone(&self.shared),
            worker_id,
            generation,
        };
        let task = tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        Ok(AttachedIngress::new(vec![task.abort_handle()]))
    }

    fn prometheus_text(&self) -> String {
        self.shared.stats.prometheus_text()
    }
}
