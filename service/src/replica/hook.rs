//! What the selection service tells its replica layer: the booking lifecycle of this replica,
//! and what it asks: whether the replica is ready, and its metrics.

use super::peers::Peers;
use crate::partition::Partition;
use dynamo_kv_router::kv::SequenceHash;
use dynamo_kv_router::router::WorkerId;

/// A booking change made by this replica, to publish to its peers.
#[derive(Clone, Copy, Debug)]
pub enum LocalBooking<'a> {
    /// A booking was installed on `worker`.
    Booked {
        /// The full-block sequence hashes of the prompt.
        sequence_hashes: &'a [SequenceHash],
        /// The prompt tokens not cached on the worker.
        prefill_tokens: usize,
    },
    /// Its prefill completed.
    PrefillCompleted,
    /// It finished.
    Freed,
}

/// The replica layer as the selection service sees it (see [`crate::replica::ReplicaSync`]).
pub trait ReplicaHook: Send + Sync {
    /// This replica changed booking `request_id` of `worker` in `partition`.
    fn local_booking(
        &self,
        partition: &Partition,
        request_id: &str,
        worker: WorkerId,
        change: LocalBooking<'_>,
    );

    /// Whether the replica finished starting (warm start applied, or cold).
    fn ready(&self) -> bool;

    /// The replica metrics in the Prometheus text format.
    fn prometheus_text(&self) -> String;

    /// The ZMQ booking sync's id, endpoint and peers, for the `/replica_sync` routes (`None`
    /// when this replica layer syncs some other way).
    fn sync(&self) -> Option<BookingSyncView<'_>> {
        None
    }
}

/// What the `/replica_sync` routes read and change of a replica's ZMQ booking sync.
#[derive(Clone, Copy)]
pub struct BookingSyncView<'a> {
    /// This replica's id.
    pub replica_id: u64,
    /// The endpoint this replica publishes its bookings on.
    pub endpoint: &'a str,
    /// The peers it subscribes to.
    pub peers: &'a Peers,
}
