//! Router replicas' booking sync over NATS, as upstream's routers do it (`dynamo-llm` 1.6.1
//! `kv_router::sequence`): no `--peer` list, every replica publishes its booking changes on
//! one subject and subscribes to it.
//!
//! - **Live events:** each local booking change (booked, prefill completed, freed) is one
//!   event-plane envelope ([`EventEnvelope`], publisher id = replica id, `sequence` numbered
//!   from 0, topic `active_sequences_events`) whose payload is upstream's
//!   `ActiveSequenceEvent` ([`BookingEvent`], named msgpack fields), published on core NATS on
//!   `namespace.{ns}.component.{c}.endpoint.{e}.active_sequences_events`. Upstream sends one
//!   event per envelope over NATS (batches are its ZMQ form), and so does this. A replica
//!   skips its own events (`router_id`) and finds the partition of an event by its worker
//!   (upstream's event names no model: the subject is the scope).
//! - **Joining** ([`NatsReplicaSync::warm_start`]): the replica subscribes first, holds what
//!   arrives, then asks on `…active_sequences_snapshot` (an addition; upstream has no such
//!   request) with a reply inbox; every replica answers with the workers it knows and the
//!   bookings it holds, per origin replica, with the origin's last `sequence` they reflect
//!   (sent in parts of at most [`SNAPSHOT_PART_BYTES`], under NATS's default 1 MiB payload
//!   limit). For each origin the answer reflecting the highest sequence is taken (the origin's
//!   own answer when it is alive); the held events of that origin numbered up to it are
//!   already in it and skipped, the later ones applied. A booking is recorded once, under
//!   `{origin}/{request_id}`, whichever answers carry it. Then the KV index's warm start (the
//!   durable consumer replaying the stream) is awaited, and only then is the replica ready.
//! - **Lost frees cannot leak load:** peer bookings expire after the booking TTL.

use super::envelope::EventEnvelope;
use super::subjects::{ACTIVE_SEQUENCES_TOPIC, endpoint_subject};
use super::{DEFAULT_NAMESPACE, NatsError, NatsIngress, connect};
use crate::partition::Partition;
use crate::replica::stats::ReplicaStats;
use crate::replica::wire::{BookingEvent, BookingEventData, WireWorker};
use crate::replica::{
    INBOUND_CAPACITY, LocalBooking, OUTBOUND_CAPACITY, ReplicaHook, SWEEP_INTERVAL, booking_data,
    peer_request_id, random_id,
};
use crate::selection::selection_service::SelectionService;
use crate::selection::snapshot::RouterState;
use dynamo_kv_router::kv::SequenceHash;
use dynamo_kv_router::router::WorkerId;
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The topic a joining replica asks the others for their bookings on (not upstream's).
pub const SNAPSHOT_TOPIC: &str = "active_sequences_snapshot";
/// The component whose endpoint scopes the sync by default (upstream's usual `backend`).
pub const DEFAULT_COMPONENT: &str = "backend";
/// The endpoint that scopes the sync by default (upstream's usual `generate`).
pub const DEFAULT_ENDPOINT: &str = "generate";
/// The largest part of an answer to a joining replica, in bytes of msgpack.
pub const SNAPSHOT_PART_BYTES: usize = 256 * 1024;

/// Where and how a replica syncs its bookings over NATS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsReplicaOptions {
    /// The server, `nats://host:port`.
    pub url: String,
    /// The Dynamo namespace.
    pub namespace: String,
    /// The component of the endpoint the replicas route to.
    pub component: String,
    /// The endpoint the replicas route to.
    pub endpoint: String,
    /// This replica's id (`router_id`); random (non-zero) when `None`.
    pub replica_id: Option<u64>,
    /// How long a joining replica waits for the first answer to its request.
    pub first_answer_wait: Duration,
    /// After an answer, how long it waits for more.
    pub more_answers_wait: Duration,
    /// How long `/ready` waits for the KV-event stream's replay before it says ready anyway.
    pub catch_up_limit: Duration,
}

impl NatsReplicaOptions {
    /// Syncing on `url` in upstream's default scope, with the default timing.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            component: DEFAULT_COMPONENT.to_owned(),
            endpoint: DEFAULT_ENDPOINT.to_owned(),
            replica_id: None,
            first_answer_wait: Duration::from_secs(1),
            more_answers_wait: Duration::from_millis(300),
            catch_up_limit: Duration::from_secs(120),
        }
    }

    /// The subject of the live booking events.
    pub fn subject(&self) -> String {
        endpoint_subject(
            &self.namespace,
            &self.component,
            &self.endpoint,
            ACTIVE_SEQUENCES_TOPIC,
        )
    }

    /// The subject a joining replica asks on.
    pub fn snapshot_subject(&self) -> String {
        endpoint_subject(
            &self.namespace,
            &self.component,
            &self.endpoint,
            SNAPSHOT_TOPIC,
        )
    }
}

/// Why the NATS booking sync could not start.
#[derive(Debug, thiserror::Error)]
pub enum NatsSyncError {
    /// Connecting or subscribing failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// A subscription was refused.
    #[error("cannot subscribe to {subject}: {message}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// Why.
        message: String,
    },
    /// The service already has a replica layer (ZMQ or NATS).
    #[error("the service already has a replica layer")]
    AlreadyAttached,
}

/// A booking held by a replica, as an answer to a joining replica carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBooking {
    /// The booking's id at its origin replica.
    pub request_id: String,
    /// The booked worker rank.
    pub worker: WireWorker,
    /// The sequence hashes of its prompt's full blocks.
    pub token_sequence: Vec<u64>,
    /// The prefill tokens it still reserves (0 once its prefill completed).
    pub prefill_tokens: usize,
}

/// A joining replica's request for the others' state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// The asking replica (it does not answer itself).
    pub requester: u64,
}

/// One item of an answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotItem {
    /// A worker record, as `GET /workers` lists it (JSON text).
    Worker(String),
    /// The answerer reflects the origin replica's events up to `sequence` (`None`: none).
    Origin {
        /// The origin replica.
        router_id: u64,
        /// Its last envelope sequence reflected.
        sequence: Option<u64>,
    },
    /// A booking of the origin replica.
    Booking {
        /// The origin replica.
        router_id: u64,
        /// The booking.
        booking: HeldBooking,
    },
}

/// One part of a replica's answer to a joining replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPart {
    /// The answering replica.
    pub responder: u64,
    /// This part's number, from 0.
    pub part: u32,
    /// How many parts the answer has.
    pub parts: u32,
    /// Its items.
    pub items: Vec<SnapshotItem>,
}

/// A booking in the ledger, and when it was recorded (for the TTL).
struct Held {
    booking: HeldBooking,
    recorded: Instant,
}

/// What this replica holds from one origin (itself included).
#[derive(Default)]
struct Origin {
    sequence: Option<u64>,
    bookings: HashMap<String, Held>,
}

/// Every replica's bookings as this replica holds them, and the events held while it joins.
struct Ledger {
    next_sequence: u64,
    origins: HashMap<u64, Origin>,
    /// `Some` while joining: events received, in arrival order, not applied yet.
    warming: Option<Vec<(u64, u64, BookingEvent)>>,
}

/// Counters beyond [`ReplicaStats`].
#[derive(Debug, Default)]
pub struct NatsSyncStats {
    /// Requests of joining replicas answered.
    pub answers_sent: AtomicU64,
    /// Answer parts sent.
    pub parts_sent: AtomicU64,
    /// Events held while joining and skipped because an answer already reflected them.
    pub reflected_skipped: AtomicU64,
}

struct Shared {
    replica_id: u64,
    service: Weak<SelectionService>,
    ledger: Mutex<Ledger>,
    stats: ReplicaStats,
    sync_stats: NatsSyncStats,
}

/// The NATS booking sync of one service.
pub struct NatsReplicaSync {
    shared: Arc<Shared>,
    options: NatsReplicaOptions,
    client: async_nats::Client,
    outbound: mpsc::Sender<Vec<u8>>,
    ready: AtomicBool,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for NatsReplicaSync {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// What a join did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsJoin {
    /// Replicas whose whole answer arrived.
    pub answers: usize,
    /// Workers registered from the answers.
    pub workers: usize,
    /// Peer bookings recorded from the answers.
    pub bookings: usize,
    /// Events held while joining and applied after.
    pub held_applied: usize,
    /// Whether the KV-event stream was replayed (`None`: no NATS ingress to wait for).
    pub stream_caught_up: Option<bool>,
    /// How long the join took.
    pub took: Duration,
    /// What went wrong asking, if anything.
    pub problem: Option<String>,
}

impl std::fmt::Display for NatsJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "joined over NATS: {} replicas answered ({} workers, {} bookings), {} held events applied",
            self.answers, self.workers, self.bookings, self.held_applied
        )?;
        match self.stream_caught_up {
            Some(true) => write!(f, ", KV-event stream replayed")?,
            Some(false) => write!(f, ", KV-event stream not replayed in time (ready anyway)")?,
            None => {}
        }
        write!(f, " in {} ms", self.took.as_millis())?;
        if let Some(problem) = &self.problem {
            write!(f, " ({problem})")?;
        }
        Ok(())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

impl NatsReplicaSync {
    /// Connects, subscribes to the others' events and requests, and attaches itself to
    /// `service`. Not ready until [`NatsReplicaSync::warm_start`] ran; events received before
    /// it are held.
    pub async fn start(
        service: &Arc<SelectionService>,
        options: &NatsReplicaOptions,
    ) -> Result<Arc<NatsReplicaSync>, NatsSyncError> {
        let client = connect(&options.url).await?;
        let replica_id = options.replica_id.unwrap_or_else(random_id);
        let shared = Arc::new(Shared {
            replica_id,
            service: Arc::downgrade(service),
            ledger: Mutex::new(Ledger {
                next_sequence: 0,
                origins: HashMap::new(),
                warming: Some(Vec::new()),
            }),
            stats: ReplicaStats::default(),
            sync_stats: NatsSyncStats::default(),
        });
        let subscribe = |subject: String| {
            let client = client.clone();
            async move {
                client
                    .subscribe(subject.clone())
                    .await
                    .map_err(|error| NatsSyncError::Subscribe {
                        subject,
                        message: error.to_string(),
                    })
            }
        };
        let events = subscribe(options.subject()).await?;
        let requests = subscribe(options.snapshot_subject()).await?;
        flush(&client).await?;
        let (outbound, outbound_rx) = mpsc::channel(OUTBOUND_CAPACITY);
        let tasks = vec![
            tokio::spawn(publish(
                client.clone(),
                options.subject(),
                outbound_rx,
                Arc::clone(&shared),
            )),
            tokio::spawn(follow(Arc::clone(&shared), events)),
            tokio::spawn(answer(Arc::clone(&shared), client.clone(), requests)),
            tokio::spawn(sweep(Arc::clone(&shared))),
        ];
        let sync = Arc::new(NatsReplicaSync {
            shared,
            options: options.clone(),
            client,
            outbound,
            ready: AtomicBool::new(false),
            tasks,
        });
        service
            .replica
            .set(Arc::clone(&sync) as Arc<dyn ReplicaHook>)
            .map_err(|_| NatsSyncError::AlreadyAttached)?;
        tracing::info!(replica_id = %format!("{replica_id:016x}"), subject = %options.subject(), "booking sync over NATS");
        Ok(sync)
    }

    /// This replica's id (`router_id` and publisher id on the wire).
    pub fn replica_id(&self) -> u64 {
        self.shared.replica_id
    }

    /// The subject of the live booking events.
    pub fn subject(&self) -> String {
        self.options.subject()
    }

    /// The counters shared with the ZMQ sync.
    pub fn stats(&self) -> &ReplicaStats {
        &self.shared.stats
    }

    /// The NATS sync's own counters.
    pub fn sync_stats(&self) -> &NatsSyncStats {
        &self.shared.sync_stats
    }

    /// Other replicas heard from (by an event or in an answer).
    pub fn origins(&self) -> usize {
        let ledger = self.shared.ledger.lock();
        ledger
            .origins
            .keys()
            .filter(|id| **id != self.shared.replica_id)
            .count()
    }

    /// Marks the replica ready or not (`/ready` answers 503 while not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Joins: asks the other replicas for their workers and bookings, applies the answers and
    /// the events held meanwhile, waits for `ingress` to replay the KV-event stream (when
    /// given), then marks the replica ready. Never fails: what could not be had is reported.
    pub async fn warm_start(&self, ingress: Option<&NatsIngress>) -> NatsJoin {
        let started = Instant::now();
        let mut join = NatsJoin::default();
        let answers = match self.ask().await {
            Ok(answers) => answers,
            Err(error) => {
                join.problem = Some(error.to_string());
                Vec::new()
            }
        };
        join.answers = answers.len();
        if let Some(service) = self.shared.service.upgrade() {
            join.workers = register_workers(&service, &answers);
            let (bookings, held) = self.shared.apply_answers(&service, answers);
            join.bookings = bookings;
            join.held_applied = held;
        }
        if let Some(ingress) = ingress {
            let deadline = Instant::now() + self.options.catch_up_limit;
            let mut caught_up = false;
            while Instant::now() < deadline {
                if matches!(ingress.caught_up().await, Ok(true)) {
                    caught_up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            join.stream_caught_up = Some(caught_up);
        }
        self.set_ready(true);
        join.took = started.elapsed();
        tracing::info!(%join, "replica joined");
        join
    }

    /// Sends the request and gathers every whole answer.
    async fn ask(&self) -> Result<Vec<Vec<SnapshotItem>>, NatsError> {
        let request = rmp_serde::to_vec_named(&SnapshotRequest {
            requester: self.shared.replica_id,
        })
        .map_err(|error| NatsError::Encode(error.to_string()))?;
        let inbox = self.client.new_inbox();
        let mut replies = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|error| NatsError::JetStream {
                operation: "subscribe to the answers",
                message: error.to_string(),
            })?;
        flush(&self.client).await?;
        self.client
            .publish_with_reply(self.options.snapshot_subject(), inbox, request.into())
            .await
            .map_err(|error| NatsError::JetStream {
                operation: "ask the replicas",
                message: error.to_string(),
            })?;
        flush(&self.client).await?;
        let mut partial: HashMap<u64, (u32, BTreeMap<u32, Vec<SnapshotItem>>)> = HashMap::new();
        let limit = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut deadline = tokio::time::Instant::now() + self.options.first_answer_wait;
        while let Ok(Some(message)) =
            tokio::time::timeout_at(deadline.min(limit), replies.next()).await
        {
            deadline = tokio::time::Instant::now() + self.options.more_answers_wait;
            let Ok(part) = rmp_serde::from_slice::<SnapshotPart>(&message.payload) else {
                ReplicaStats::bump(&self.shared.stats.garbage);
                continue;
            };
            let entry = partial.entry(part.responder).or_default();
            entry.0 = part.parts;
            entry.1.insert(part.part, part.items);
        }
        Ok(partial
            .into_values()
            .filter(|(parts, received)| received.len() == *parts as usize)
            .map(|(_, received)| received.into_values().flatten().collect())
            .collect())
    }
}

async fn flush(client: &async_nats::Client) -> Result<(), NatsError> {
    client.flush().await.map_err(|error| NatsError::JetStream {
        operation: "flush",
        message: error.to_string(),
    })
}

/// Registers the answers' workers this replica does not know; returns how many.
fn register_workers(service: &SelectionService, answers: &[Vec<SnapshotItem>]) -> usize {
    let known: HashSet<u64> = service.catalog.read().keys().copied().collect();
    let mut seen = HashSet::new();
    let mut workers = Vec::new();
    for item in answers.iter().flatten() {
        let SnapshotItem::Worker(text) = item else {
            continue;
        };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
            continue;
        };
        let Some(id) = value.get("worker_id").and_then(serde_json::Value::as_u64) else {
            continue;
        };
        if !known.contains(&id) && seen.insert(id) {
            workers.push(value);
        }
    }
    if workers.is_empty() {
        return 0;
    }
    let state = RouterState {
        workers,
        dump: BTreeMap::new(),
        event_plane: None,
    };
    match state.apply(service) {
        Ok(restored) => restored.workers,
        Err(error) => {
            tracing::warn!(%error, "the other replicas' workers were refused");
            0
        }
    }
}

/// The partition of `worker_id`, if it is registered.
fn partition_of(service: &SelectionService, worker_id: u64) -> Option<Arc<Partition>> {
    let key = service.catalog.read().get(&worker_id)?.record.partition();
    service.partition(&key)
}

impl Shared {
    /// Records a booking of `origin` in its worker's router and the ledger; whether it was.
    fn record(
        &self,
        service: &SelectionService,
        origin: &mut Origin,
        origin_id: u64,
        booking: HeldBooking,
    ) -> bool {
        let Some(partition) = partition_of(service, booking.worker.worker_id) else {
            return false;
        };
        let worker = WorkerId::new(booking.worker.worker_id, booking.worker.dp_rank);
        let hashes: Vec<SequenceHash> = booking
            .token_sequence
            .iter()
            .copied()
            .map(SequenceHash)
            .collect();
        let id = peer_request_id(origin_id, &booking.request_id);
        let recorded = partition.router.record_peer_booking(
            &id,
            worker,
            &hashes,
            booking.prefill_tokens as u64,
        );
        if recorded.is_err() {
            return false;
        }
        origin.bookings.insert(
            booking.request_id.clone(),
            Held {
                booking,
                recorded: Instant::now(),
            },
        );
        true
    }

    /// Applies one event of another replica (the ledger locked by the caller).
    fn apply_event(
        &self,
        service: &SelectionService,
        ledger: &mut Ledger,
        origin_id: u64,
        sequence: u64,
        event: BookingEvent,
    ) {
        let origin = ledger.origins.entry(origin_id).or_default();
        origin.sequence = Some(origin.sequence.map_or(sequence, |last| last.max(sequence)));
        let id = peer_request_id(origin_id, &event.request_id);
        let applied = match event.data {
            BookingEventData::AddRequest {
                token_sequence,
                track_prefill_tokens,
                prefill_load_hint,
                ..
            } => {
                let token_sequence = token_sequence.unwrap_or_default();
                let prefill_tokens = match (track_prefill_tokens, prefill_load_hint) {
                    (false, _) => 0,
                    (true, Some(hint)) => hint.initial_effective_prefill_tokens,
                    (true, None) => match partition_of(service, event.worker.worker_id) {
                        Some(partition) => {
                            let worker =
                                WorkerId::new(event.worker.worker_id, event.worker.dp_rank);
                            let hashes: Vec<SequenceHash> =
                                token_sequence.iter().copied().map(SequenceHash).collect();
                            let cached = partition.router.cached_prefix(worker, &hashes);
                            hashes.len().saturating_sub(cached) * partition.block_size as usize
                        }
                        None => 0,
                    },
                };
                let booking = HeldBooking {
                    request_id: event.request_id,
                    worker: event.worker,
                    token_sequence,
                    prefill_tokens,
                };
                self.record(service, origin, origin_id, booking)
            }
            BookingEventData::MarkPrefillCompleted => {
                if let Some(partition) = partition_of(service, event.worker.worker_id) {
                    partition.router.peer_prefill_complete(&id);
                }
                if let Some(held) = origin.bookings.get_mut(&event.request_id) {
                    held.booking.prefill_tokens = 0;
                }
                true
            }
            BookingEventData::Free => {
                if let Some(partition) = partition_of(service, event.worker.worker_id) {
                    partition.router.release_peer_booking(&id);
                }
                origin.bookings.remove(&event.request_id);
                true
            }
        };
        let counter = if applied {
            &self.stats.applied
        } else {
            &self.stats.unroutable
        };
        ReplicaStats::bump(counter);
    }

    /// One message on the events subject.
    fn on_message(&self, payload: &[u8]) {
        let decoded = EventEnvelope::decode(payload).ok().and_then(|envelope| {
            rmp_serde::from_slice::<BookingEvent>(&envelope.payload)
                .ok()
                .map(|event| (envelope, event))
        });
        let Some((envelope, event)) = decoded else {
            ReplicaStats::bump(&self.stats.garbage);
            return;
        };
        if event.router_id == self.replica_id {
            ReplicaStats::bump(&self.stats.own_echo);
            return;
        }
        let Some(service) = self.service.upgrade() else {
            return;
        };
        let mut ledger = self.ledger.lock();
        let origin = event.router_id;
        match &mut ledger.warming {
            Some(held) if held.len() >= INBOUND_CAPACITY => {
                ReplicaStats::bump(&self.stats.inbound_dropped);
            }
            Some(held) => held.push((origin, envelope.sequence, event)),
            None => self.apply_event(&service, &mut ledger, origin, envelope.sequence, event),
        }
    }

    /// Applies the joining answers, then the events held meanwhile; returns the bookings
    /// recorded from the answers and the held events applied.
    fn apply_answers(
        &self,
        service: &SelectionService,
        answers: Vec<Vec<SnapshotItem>>,
    ) -> (usize, usize) {
        // Per origin, the answer reflecting the most of its events.
        let mut best: HashMap<u64, (Option<u64>, Vec<HeldBooking>)> = HashMap::new();
        for answer in answers {
            let mut sequences = HashMap::new();
            let mut bookings: HashMap<u64, Vec<HeldBooking>> = HashMap::new();
            for item in answer {
                match item {
                    SnapshotItem::Origin {
                        router_id,
                        sequence,
                    } => {
                        sequences.insert(router_id, sequence);
                    }
                    SnapshotItem::Booking { router_id, booking } => {
                        bookings.entry(router_id).or_default().push(booking);
                    }
                    SnapshotItem::Worker(_) => {}
                }
            }
            for (origin, sequence) in sequences {
                if origin == self.replica_id {
                    continue;
                }
                let held = bookings.remove(&origin).unwrap_or_default();
                match best.get(&origin) {
                    Some((known, _)) if *known >= sequence => {}
                    _ => {
                        best.insert(origin, (sequence, held));
                    }
                }
            }
        }
        let mut ledger = self.ledger.lock();
        let mut recorded = 0;
        for (origin_id, (sequence, bookings)) in &best {
            let mut origin = ledger.origins.remove(origin_id).unwrap_or_default();
            origin.sequence = *sequence;
            for booking in bookings {
                if self.record(service, &mut origin, *origin_id, booking.clone()) {
                    recorded += 1;
                } else {
                    ReplicaStats::bump(&self.stats.unroutable);
                }
            }
            ledger.origins.insert(*origin_id, origin);
        }
        let held = ledger.warming.take().unwrap_or_default();
        let mut applied = 0;
        for (origin, sequence, event) in held {
            let reflected = best
                .get(&origin)
                .and_then(|(known, _)| *known)
                .is_some_and(|known| sequence <= known);
            if reflected {
                self.sync_stats
                    .reflected_skipped
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.apply_event(service, &mut ledger, origin, sequence, event);
            applied += 1;
        }
        (recorded, applied)
    }

    /// This replica's answer to a joining one, in parts.
    fn answer_parts(&self, service: &SelectionService) -> Vec<Vec<u8>> {
        let mut items: Vec<SnapshotItem> = service
            .list_workers(None, None)
            .into_iter()
            .filter_map(|record| serde_json::to_string(&record).ok())
            .map(SnapshotItem::Worker)
            .collect();
        {
            let ledger = self.ledger.lock();
            let joining = ledger.warming.is_some();
            for (origin_id, origin) in &ledger.origins {
                // While joining itself, it knows only its own bookings for sure.
                if joining && *origin_id != self.replica_id {
                    continue;
                }
                items.push(SnapshotItem::Origin {
                    router_id: *origin_id,
                    sequence: origin.sequence,
                });
                items.extend(origin.bookings.values().map(|held| SnapshotItem::Booking {
                    router_id: *origin_id,
                    booking: held.booking.clone(),
                }));
            }
        }
        let mut groups: Vec<Vec<SnapshotItem>> = vec![Vec::new()];
        let mut size = 0;
        for item in items {
            let len = rmp_serde::to_vec_named(&item).map_or(0, |bytes| bytes.len());
            if size + len > SNAPSHOT_PART_BYTES && groups.last().is_some_and(|g| !g.is_empty()) {
                groups.push(Vec::new());
                size = 0;
            }
            size += len;
            if let Some(group) = groups.last_mut() {
                group.push(item);
            }
        }
        let parts = groups.len() as u32;
        groups
            .into_iter()
            .enumerate()
            .filter_map(|(part, items)| {
                rmp_serde::to_vec_named(&SnapshotPart {
                    responder: self.replica_id,
                    part: part as u32,
                    parts,
                    items,
                })
                .ok()
            })
            .collect()
    }
}

impl ReplicaHook for NatsReplicaSync {
    fn local_booking(
        &self,
        _partition: &Partition,
        request_id: &str,
        worker: WorkerId,
        change: LocalBooking<'_>,
    ) {
        let wire_worker = WireWorker {
            worker_id: worker.worker_id,
            dp_rank: worker.dp_rank,
        };
        let event = BookingEvent {
            request_id: request_id.to_owned(),
            worker: wire_worker,
            data: booking_data(change),
            router_id: self.shared.replica_id,
            lora_name: None,
        };
        let Ok(payload) = rmp_serde::to_vec_named(&event) else {
            ReplicaStats::bump(&self.shared.stats.publish_dropped);
            return;
        };
        // Numbering, the ledger and the queue change together, so an answer's sequence
        // always matches the bookings it lists.
        let mut ledger = self.shared.ledger.lock();
        let sequence = ledger.next_sequence;
        let envelope = EventEnvelope {
            publisher_id: self.shared.replica_id,
            sequence,
            published_at: now_ms(),
            topic: ACTIVE_SEQUENCES_TOPIC.to_owned(),
            payload,
        };
        let Ok(bytes) = envelope.encode() else {
            ReplicaStats::bump(&self.shared.stats.publish_dropped);
            return;
        };
        if self.outbound.try_send(bytes).is_err() {
            ReplicaStats::bump(&self.shared.stats.publish_dropped);
            return;
        }
        ledger.next_sequence += 1;
        let own = ledger.origins.entry(self.shared.replica_id).or_default();
        own.sequence = Some(sequence);
        match change {
            LocalBooking::Booked {
                sequence_hashes,
                prefill_tokens,
            } => {
                let booking = HeldBooking {
                    request_id: request_id.to_owned(),
                    worker: wire_worker,
                    token_sequence: SequenceHash::as_u64s(sequence_hashes).to_vec(),
                    prefill_tokens,
                };
                own.bookings.insert(
                    request_id.to_owned(),
                    Held {
                        booking,
                        recorded: Instant::now(),
                    },
                );
            }
            LocalBooking::PrefillCompleted => {
                if let Some(held) = own.bookings.get_mut(request_id) {
                    held.booking.prefill_tokens = 0;
                }
            }
            LocalBooking::Freed => {
                own.bookings.remove(request_id);
            }
        }
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn prometheus_text(&self) -> String {
        let Some(service) = self.shared.service.upgrade() else {
            return String::new();
        };
        let mut out = self
            .shared
            .stats
            .prometheus_text(&service.partitions(), self.origins());
        let counters = [
            (
                "kv_router_replica_nats_answers_total",
                "Joining replicas' requests answered.",
                &self.shared.sync_stats.answers_sent,
            ),
            (
                "kv_router_replica_nats_answer_parts_total",
                "Answer parts sent to joining replicas.",
                &self.shared.sync_stats.parts_sent,
            ),
            (
                "kv_router_replica_nats_reflected_skipped_total",
                "Events held while joining that an answer already reflected.",
                &self.shared.sync_stats.reflected_skipped,
            ),
        ];
        for (name, help, counter) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        out
    }
}

/// Publishes the queued envelopes on core NATS, as upstream does.
async fn publish(
    client: async_nats::Client,
    subject: String,
    mut outbound: mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    while let Some(bytes) = outbound.recv().await {
        match client.publish(subject.clone(), bytes.into()).await {
            Ok(()) => ReplicaStats::bump(&shared.stats.published),
            Err(error) => {
                ReplicaStats::bump(&shared.stats.publish_dropped);
                tracing::warn!(%error, "cannot publish a booking event");
            }
        }
    }
}

/// Applies the other replicas' events.
async fn follow(shared: Arc<Shared>, mut events: async_nats::Subscriber) {
    while let Some(message) = events.next().await {
        shared.on_message(&message.payload);
    }
}

/// Answers joining replicas.
async fn answer(
    shared: Arc<Shared>,
    client: async_nats::Client,
    mut requests: async_nats::Subscriber,
) {
    while let Some(message) = requests.next().await {
        let Some(reply) = message.reply else {
            continue;
        };
        let Ok(request) = rmp_serde::from_slice::<SnapshotRequest>(&message.payload) else {
            ReplicaStats::bump(&shared.stats.garbage);
            continue;
        };
        if request.requester == shared.replica_id {
            continue;
        }
        let Some(service) = shared.service.upgrade() else {
            return;
        };
        let parts = shared.answer_parts(&service);
        drop(service);
        for part in parts {
            if let Err(error) = client.publish(reply.clone(), part.into()).await {
                tracing::warn!(%error, "cannot answer a joining replica");
                break;
            }
            shared.sync_stats.parts_sent.fetch_add(1, Ordering::Relaxed);
        }
        let _ = client.flush().await;
        shared
            .sync_stats
            .answers_sent
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Expires peer bookings (in the routers and the ledger) and own bookings past the TTL.
async fn sweep(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let Some(service) = shared.service.upgrade() else {
            return;
        };
        for partition in service.partitions() {
            partition.router.expire_peer_bookings();
        }
        let ttl = service.options.booking_ttl;
        let now = Instant::now();
        let mut ledger = shared.ledger.lock();
        for origin in ledger.origins.values_mut() {
            origin
                .bookings
                .retain(|_, held| now.duration_since(held.recorded) < ttl);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_upstreams() {
        let options = NatsReplicaOptions::new("nats://127.0.0.1:4222");
        assert_eq!(
            options.subject(),
            "namespace.dynamo.component.backend.endpoint.generate.active_sequences_events"
        );
        assert_eq!(
            options.snapshot_subject(),
            "namespace.dynamo.component.backend.endpoint.generate.active_sequences_snapshot"
        );
    }

    #[test]
    fn an_event_is_upstreams_envelope_of_one_active_sequence_event() {
        let event = BookingEvent {
            request_id: "r".into(),
            worker: WireWorker {
                worker_id: 3,
                dp_rank: 1,
            },
            data: BookingEventData::Free,
            router_id: 9,
            lora_name: None,
        };
        let envelope = EventEnvelope {
            publisher_id: 9,
            sequence: 4,
            published_at: 1,
            topic: ACTIVE_SEQUENCES_TOPIC.to_owned(),
            payload: rmp_serde::to_vec_named(&event).expect("encode"),
        };
        let bytes = envelope.encode().expect("encode");
        let decoded = EventEnvelope::decode(&bytes).expect("decode");
        let value: rmpv::Value =
            rmpv::decode::read_value(&mut decoded.payload.as_slice()).expect("msgpack");
        let fields: Vec<_> = value
            .as_map()
            .expect("a map")
            .iter()
            .filter_map(|(k, _)| k.as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            fields,
            ["request_id", "worker", "data", "router_id", "lora_name"]
        );
        let back: BookingEvent = rmp_serde::from_slice(&decoded.payload).expect("decode");
        assert_eq!(back, event);
    }

    #[test]
    fn answer_parts_round_trip() {
        let part = SnapshotPart {
            responder: 1,
            part: 0,
            parts: 1,
            items: vec![
                SnapshotItem::Worker("{\"worker_id\":1}".into()),
                SnapshotItem::Origin {
                    router_id: 2,
                    sequence: Some(7),
                },
                SnapshotItem::Booking {
                    router_id: 2,
                    booking: HeldBooking {
                        request_id: "x".into(),
                        worker: WireWorker {
                            worker_id: 1,
                            dp_rank: 0,
                        },
                        token_sequence: vec![1, u64::MAX],
                        prefill_tokens: 32,
                    },
                },
            ],
        };
        let bytes = rmp_serde::to_vec_named(&part).expect("encode");
        assert_eq!(
            rmp_serde::from_slice::<SnapshotPart>(&bytes).expect("decode"),
            part
        );
    }
}
