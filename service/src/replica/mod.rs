//! Router replicas: several `kv-router serve` processes behind one address that see each
//! other's bookings, start warm from a peer and restart from a snapshot.
//!
//! **Enters:** this replica's booking changes (through [`ReplicaHook`]), its peers' booking
//! events and heartbeats on ZMQ SUB sockets, and a warm start's peer answers. **Leaves:**
//! booking events on this replica's PUB socket, peer bookings recorded in the partitions'
//! routers, and the replica's counters for `/metrics`.
//!
//! - **Booking sync** ([`wire`], upstream's topic and msgpack schema): every booking change
//!   of this replica is published on a ZMQ PUB socket; each peer's is received on a SUB
//!   socket ([`peers`]) and recorded in the partition's router as a *peer booking*, so the
//!   cost function sees the load every replica booked. Replicas also publish a heartbeat
//!   (on a topic of their own); a peer silent for the quiet period is subscribed to afresh,
//!   so a peer restarted on the same endpoint is followed again. Lost free events cannot leak load: a
//!   peer booking expires after the booking TTL, as local ones do, and is counted.
//!   Queues are bounded: a full queue drops (and counts) rather than waits; messages that are
//!   not booking events are counted and dropped.
//! - **Warm start** ([`warm_start`]): the workers and `GET /dump` of the first peer that
//!   answers, applied before `/ready` says ready.
//! - The routes ([`routes()`]): upstream's `/replica_sync/register_peer`, `deregister_peer` and
//!   `GET /replica_sync/peers`, plus `POST`/`DELETE /replica_sync/peers` and
//!   `GET /replica_sync/info`.

pub mod hook;
pub mod peers;
pub mod routes;
pub mod stats;
pub mod warm_start;
pub mod wire;

pub use hook::{BookingSyncView, LocalBooking, ReplicaHook};
pub use routes::routes;

use crate::partition::Partition;
use crate::selection::selection_service::SelectionService;
use crate::worker_record::PartitionKey;
use bytes::Bytes;
use dynamo_kv_router::kv::SequenceHash;
use dynamo_kv_router::router::WorkerId;
use peers::{PeerError, Peers};
use stats::ReplicaStats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use wire::{
    BookingEvent, BookingEventData, HEARTBEAT_TOPIC, PrefillLoadHint, REPLICA_TOPIC,
    ScopedBookingEvent, WireWorker,
};
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

/// Events waiting to be published; beyond this, new ones are dropped and counted.
pub const OUTBOUND_CAPACITY: usize = 65_536;
/// Peer events waiting to be applied; beyond this, new ones are dropped and counted.
pub const INBOUND_CAPACITY: usize = 65_536;
/// How often a replica publishes its heartbeat.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// A peer silent this long (five missed heartbeats; the engines' listeners wait as long) is
/// subscribed to afresh. Upstream peers send no heartbeat: an idle one is resubscribed every
/// period, which costs a reconnection and nothing else.
pub const PEER_QUIET_RESUBSCRIBE: Duration = Duration::from_secs(5);
/// How often expired peer bookings are swept.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

/// How a replica syncs.
#[derive(Clone, Debug)]
pub struct ReplicaOptions {
    /// Where to publish this replica's bookings, e.g. `tcp://127.0.0.1:5600` (port 0 picks a
    /// free one).
    pub bind: String,
    /// The peers' booking-sync endpoints to subscribe to.
    pub peers: Vec<String>,
    /// This replica's id; random (non-zero) when `None`.
    pub replica_id: Option<u64>,
    /// How often this replica publishes a heartbeat (default [`HEARTBEAT_INTERVAL`]).
    pub heartbeat_interval: Duration,
    /// A peer silent this long, heartbeats included, is subscribed to afresh (default
    /// [`PEER_QUIET_RESUBSCRIBE`]): it may have restarted on the same endpoint, which the
    /// `zeromq` SUB socket never reconnects to by itself.
    pub peer_quiet: Duration,
}

impl ReplicaOptions {
    /// Publishing on `bind`, subscribed to `peers`, with a random id and the default timing.
    pub fn new(bind: impl Into<String>, peers: Vec<String>) -> Self {
        Self {
            bind: bind.into(),
            peers,
            replica_id: None,
            heartbeat_interval: HEARTBEAT_INTERVAL,
            peer_quiet: PEER_QUIET_RESUBSCRIBE,
        }
    }
}

/// Why the replica layer could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The PUB socket could not bind.
    #[error(
        "cannot bind the booking-sync publisher on `{endpoint}`: {message}; pick another --replica-sync-port"
    )]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// Why.
        message: String,
    },
    /// A peer endpoint is invalid.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// The service already has a replica layer.
    #[error("the service already has a replica layer")]
    AlreadyAttached,
}

/// The replica layer of one service.
pub struct ReplicaSync {
    replica_id: u64,
    endpoint: String,
    outbound: mpsc::Sender<ScopedBookingEvent>,
    peers: Peers,
    stats: Arc<ReplicaStats>,
    ready: AtomicBool,
    service: Weak<SelectionService>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ReplicaSync {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl ReplicaSync {
    /// Binds the publisher, subscribes to the peers and attaches itself to `service` (which
    /// then publishes its bookings and applies the peers'). Ready at once; a warm start
    /// marks it not ready while it runs.
    pub async fn start(
        service: &Arc<SelectionService>,
        options: &ReplicaOptions,
    ) -> Result<Arc<ReplicaSync>, ReplicaError> {
        let mut socket = PubSocket::new();
        let endpoint = socket
            .bind(&options.bind)
            .await
            .map_err(|error| ReplicaError::Bind {
                endpoint: options.bind.clone(),
                message: error.to_string(),
            })?
            .to_string();
        let stats = Arc::new(ReplicaStats::default());
        let (outbound, outbound_rx) = mpsc::channel(OUTBOUND_CAPACITY);
        let (inbound, inbound_rx) = mpsc::channel(INBOUND_CAPACITY);
        let replica_id = options.replica_id.unwrap_or_else(random_id);
        let tasks = vec![
            tokio::spawn(publish(
                socket,
                outbound_rx,
                Arc::clone(&stats),
                Heartbeat {
                    replica_id,
                    interval: options.heartbeat_interval,
                },
            )),
            tokio::spawn(apply(
                Arc::downgrade(service),
                inbound_rx,
                Arc::clone(&stats),
                replica_id,
            )),
            tokio::spawn(sweep(Arc::downgrade(service))),
        ];
        let replica = Arc::new(ReplicaSync {
            replica_id,
            endpoint,
            outbound,
            peers: Peers::new(inbound, Arc::clone(&stats), options.peer_quiet),
            stats,
            ready: AtomicBool::new(true),
            service: Arc::downgrade(service),
            tasks,
        });
        for peer in &options.peers {
            replica.peers.add(peer)?;
        }
        service
            .replica
            .set(Arc::clone(&replica) as Arc<dyn ReplicaHook>)
            .map_err(|_| ReplicaError::AlreadyAttached)?;
        tracing::info!(replica_id = %format!("{replica_id:016x}"), endpoint = %replica.endpoint, "booking sync publishing");
        Ok(replica)
    }

    /// This replica's id (`router_id` on the wire).
    pub fn replica_id(&self) -> u64 {
        self.replica_id
    }

    /// The endpoint peers subscribe to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The subscribed peers.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// The counters.
    pub fn stats(&self) -> &ReplicaStats {
        &self.stats
    }

    /// Stops publishing (its endpoint is released) and following peers, as when dropped.
    pub fn stop(&self) {
        self.tasks.iter().for_each(JoinHandle::abort);
        for endpoint in self.peers.endpoints() {
            let _ = self.peers.remove(&endpoint);
        }
    }

    /// Marks the replica ready or not (`/ready` answers 503 while not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }
}

impl ReplicaHook for ReplicaSync {
    fn local_booking(
        &self,
        partition: &Partition,
        request_id: &str,
        worker: WorkerId,
        change: LocalBooking<'_>,
    ) {
        let data = booking_data(change);
        let event = ScopedBookingEvent {
            model_name: partition.key.model_name.clone(),
            routing_group: partition.key.routing_group.clone(),
            block_size: partition.block_size,
            event: BookingEvent {
                request_id: request_id.to_owned(),
                worker: WireWorker {
                    worker_id: worker.worker_id,
                    dp_rank: worker.dp_rank,
                },
                data,
                router_id: self.replica_id,
                lora_name: None,
            },
        };
        if self.outbound.try_send(event).is_err() {
            ReplicaStats::bump(&self.stats.publish_dropped);
        }
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn prometheus_text(&self) -> String {
        match self.service.upgrade() {
            Some(service) => self
                .stats
                .prometheus_text(&service.partitions(), self.peers.len()),
            None => String::new(),
        }
    }

    fn sync(&self) -> Option<BookingSyncView<'_>> {
        Some(BookingSyncView {
            replica_id: self.replica_id,
            endpoint: &self.endpoint,
            peers: &self.peers,
        })
    }
}

pub(crate) fn random_id() -> u64 {
    loop {
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        if id != 0 {
            return id;
        }
    }
}

/// A local booking change as upstream's `ActiveSequenceEventData` (both sync transports).
pub(crate) fn booking_data(change: LocalBooking<'_>) -> BookingEventData {
    match change {
        LocalBooking::Booked {
            sequence_hashes,
            prefill_tokens,
        } => BookingEventData::AddRequest {
            token_sequence: Some(SequenceHash::as_u64s(sequence_hashes).to_vec()),
            track_prefill_tokens: true,
            expected_output_tokens: None,
            prefill_load_hint: Some(PrefillLoadHint {
                initial_effective_prefill_tokens: prefill_tokens,
                expected_prefill_duration: None,
            }),
        },
        LocalBooking::PrefillCompleted => BookingEventData::MarkPrefillCompleted,
        LocalBooking::Freed => BookingEventData::Free,
    }
}

/// The key under which a peer's booking is recorded: unique across replicas.
pub(crate) fn peer_request_id(router_id: u64, request_id: &str) -> String {
    format!("{router_id:016x}/{request_id}")
}

/// What a replica's heartbeat says, and how often.
struct Heartbeat {
    replica_id: u64,
    interval: Duration,
}

impl Heartbeat {
    fn message(&self) -> Option<ZmqMessage> {
        let frames = vec![
            Bytes::from_static(HEARTBEAT_TOPIC),
            Bytes::copy_from_slice(&self.replica_id.to_be_bytes()),
        ];
        ZmqMessage::try_from(frames).ok()
    }
}

/// Publishes the outbound booking events, and a heartbeat every interval.
async fn publish(
    mut socket: PubSocket,
    mut outbound: mpsc::Receiver<ScopedBookingEvent>,
    stats: Arc<ReplicaStats>,
    heartbeat: Heartbeat,
) {
    let mut beats = tokio::time::interval(heartbeat.interval);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let event = tokio::select! {
            event = outbound.recv() => match event {
                Some(event) => event,
                None => return,
            },
            _ = beats.tick() => {
                if let Some(message) = heartbeat.message()
                    && let Err(error) = socket.send(message).await
                {
                    tracing::debug!(%error, "cannot publish a heartbeat");
                }
                continue;
            }
        };
        let frames = vec![
            Bytes::from_static(REPLICA_TOPIC),
            Bytes::from(event.encode()),
        ];
        let Ok(message) = ZmqMessage::try_from(frames) else {
            continue;
        };
        match socket.send(message).await {
            Ok(()) => ReplicaStats::bump(&stats.published),
            Err(error) => {
                ReplicaStats::bump(&stats.publish_dropped);
                tracing::warn!(%error, "cannot publish a booking event");
            }
        }
    }
}

async fn apply(
    service: Weak<SelectionService>,
    mut inbound: mpsc::Receiver<ScopedBookingEvent>,
    stats: Arc<ReplicaStats>,
    replica_id: u64,
) {
    while let Some(event) = inbound.recv().await {
        let Some(service) = service.upgrade() else {
            return;
        };
        let counter = match apply_one(&service, event, replica_id) {
            Applied::Yes => &stats.applied,
            Applied::OwnEcho => &stats.own_echo,
            Applied::Unroutable => &stats.unroutable,
        };
        ReplicaStats::bump(counter);
    }
}

enum Applied {
    Yes,
    OwnEcho,
    Unroutable,
}

/// Applies one peer event to the partition it names.
fn apply_one(service: &SelectionService, scoped: ScopedBookingEvent, replica_id: u64) -> Applied {
    let event = scoped.event;
    if event.router_id == replica_id {
        return Applied::OwnEcho;
    }
    let key = PartitionKey {
        model_name: scoped.model_name,
        routing_group: scoped.routing_group,
    };
    let Some(partition) = service.partition(&key) else {
        return Applied::Unroutable;
    };
    if partition.block_size != scoped.block_size {
        return Applied::Unroutable;
    }
    let router = &partition.router;
    let id = peer_request_id(event.router_id, &event.request_id);
    match event.data {
        BookingEventData::AddRequest {
            token_sequence,
            track_prefill_tokens,
            prefill_load_hint,
            ..
        } => {
            let hashes: Vec<SequenceHash> = token_sequence
                .unwrap_or_default()
                .into_iter()
                .map(SequenceHash)
                .collect();
            let worker = WorkerId::new(event.worker.worker_id, event.worker.dp_rank);
            let prefill = match (track_prefill_tokens, prefill_load_hint) {
                (false, _) => 0,
                (true, Some(hint)) => hint.initial_effective_prefill_tokens,
                (true, None) => {
                    let cached = router.cached_prefix(worker, &hashes);
                    (hashes.len() - cached.min(hashes.len())) * partition.block_size as usize
                }
            };
            match router.record_peer_booking(&id, worker, &hashes, prefill as u64) {
                Ok(()) => Applied::Yes,
                Err(_) => Applied::Unroutable,
            }
        }
        BookingEventData::MarkPrefillCompleted => {
            router.peer_prefill_complete(&id);
            Applied::Yes
        }
        BookingEventData::Free => {
            router.release_peer_booking(&id);
            Applied::Yes
        }
    }
}

async fn sweep(service: Weak<SelectionService>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        ticks.tick().await;
        let Some(service) = service.upgrade() else {
            return;
        };
        for partition in service.partitions() {
            partition.router.expire_peer_bookings();
        }
    }
}
