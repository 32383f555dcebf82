//! Counters of the KV-event ingestion, rendered into `/metrics`.

use crate::engine_events::engine_event::SkipReason;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the listeners did, across workers.
#[derive(Default, Debug)]
pub struct IngestStats {
    /// Batches received live.
    pub batches: AtomicU64,
    /// Batches received from replays.
    pub replayed_batches: AtomicU64,
    /// Events handed to the index.
    pub events: AtomicU64,
    /// Payloads that were not an engine batch.
    pub decode_errors: AtomicU64,
    /// Messages with a wrong frame layout.
    pub bad_frames: AtomicU64,
    /// Replays asked for.
    pub replays: AtomicU64,
    /// Replays that failed or fell short (the worker was reset instead).
    pub replays_failed: AtomicU64,
    /// Subscriptions (re)established.
    pub connects: AtomicU64,
    skipped: [AtomicU64; 4],
}

const SKIP_REASONS: [SkipReason; 4] = [
    SkipReason::IgnoredEvent,
    SkipReason::NonGpuMedium,
    SkipReason::NonMainAttention,
    SkipReason::NonLocal,
];

impl IngestStats {
    /// Counts one skipped event.
    pub fn skip(&self, reason: SkipReason) {
        if let Some(index) = SKIP_REASONS.iter().position(|known| *known == reason) {
            self.skipped[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events skipped for `reason`.
    pub fn skipped(&self, reason: SkipReason) -> u64 {
        SKIP_REASONS
            .iter()
            .position(|known| *known == reason)
            .map_or(0, |index| self.skipped[index].load(Ordering::Relaxed))
    }

    /// The counters in the Prometheus text format.
    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        let counters = [
            (
                "kv_router_zmq_batches_total",
                "KV event batches received live",
                &self.batches,
            ),
            (
                "kv_router_zmq_replayed_batches_total",
                "KV event batches received from engine replays",
                &self.replayed_batches,
            ),
            (
                "kv_router_zmq_events_total",
                "KV events handed to the index",
                &self.events,
            ),
            (
                "kv_router_zmq_decode_errors_total",
                "KV event payloads that were not an engine batch",
                &self.decode_errors,
            ),
            (
                "kv_router_zmq_bad_frames_total",
                "ZMQ messages with a wrong frame layout",
                &self.bad_frames,
            ),
            (
                "kv_router_zmq_replays_total",
                "replays asked of engines after lost events",
                &self.replays,
            ),
            (
                "kv_router_zmq_replays_failed_total",
                "replays that failed or fell short (worker reset)",
                &self.replays_failed,
            ),
            (
                "kv_router_zmq_connects_total",
                "KV event subscriptions established",
                &self.connects,
            ),
        ];
        for (name, help, counter) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        let name = "kv_router_zmq_events_skipped_total";
        let _ = writeln!(
            out,
            "# HELP {name} KV events not indexed, by reason\n# TYPE {name} counter"
        );
        for reason in SKIP_REASONS {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{}\"}} {}",
                reason.label(),
                self.skipped(reason)
            );
        }
        out
    }
}
