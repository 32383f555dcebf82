//! The replica layer's counters, rendered as Prometheus text.

use crate::partition::Partition;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the booking sync; every message a peer sent ends in exactly one of
/// `applied`, `own_echo`, `garbage`, `inbound_dropped` or `unroutable`.
#[derive(Debug, Default)]
pub struct ReplicaStats {
    /// Booking events this replica published.
    pub published: AtomicU64,
    /// Booking events not published because the outbound queue was full.
    pub publish_dropped: AtomicU64,
    /// Peer events applied.
    pub applied: AtomicU64,
    /// Events carrying this replica's own id (it subscribed to itself), skipped.
    pub own_echo: AtomicU64,
    /// Messages from peers that were not booking events (bad frames, topic or payload).
    pub garbage: AtomicU64,
    /// Peer events dropped because the inbound queue was full.
    pub inbound_dropped: AtomicU64,
    /// Peer events for a partition, block size or worker this replica does not have.
    pub unroutable: AtomicU64,
}

impl ReplicaStats {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters, the peer count and the peer bookings `partitions` hold, as Prometheus
    /// text.
    pub fn prometheus_text(&self, partitions: &[Arc<Partition>], peers: usize) -> String {
        let (held, expired) = partitions
            .iter()
            .map(|p| (p.router.peer_bookings(), p.router.peer_bookings_expired()))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        let dropped =
            self.inbound_dropped.load(Ordering::Relaxed) + self.unroutable.load(Ordering::Relaxed);
        let rows: [(&str, &str, &str, u64); 9] = [
            (
                "kv_router_replica_published_total",
                "counter",
                "Booking events published to peers.",
                self.published.load(Ordering::Relaxed),
            ),
            (
                "kv_router_replica_publish_dropped_total",
                "counter",
                "Booking events not published: the outbound queue was full.",
                self.publish_dropped.load(Ordering::Relaxed),
            ),
            (
                "kv_router_replica_applied_total",
                "counter",
                "Peer booking events applied.",
                self.applied.load(Ordering::Relaxed),
            ),
            (
                "kv_router_replica_garbage_total",
                "counter",
                "Messages from peers that were not booking events, dropped.",
                self.garbage.load(Ordering::Relaxed),
            ),
            (
                "kv_router_replica_peer_bookings_dropped_total",
                "counter",
                "Peer booking events dropped: inbound queue full, or unknown partition, block size or worker.",
                dropped,
            ),
            (
                "kv_router_replica_peer_bookings_expired_total",
                "counter",
                "Peer bookings released by their TTL (their free event was lost).",
                expired,
            ),
            (
                "kv_router_replica_peer_bookings",
                "gauge",
                "Peer bookings held now.",
                held,
            ),
            (
                "kv_router_replica_peers",
                "gauge",
                "Peers subscribed to.",
                peers as u64,
            ),
            (
                "kv_router_replica_own_echo_total",
                "counter",
                "Own booking events received back and skipped.",
                self.own_echo.load(Ordering::Relaxed),
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        out
    }
}
