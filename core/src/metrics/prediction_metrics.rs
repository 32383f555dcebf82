//! The `kv_router_predicted_*` samples: what the router's cache predictions did, when it
//! routes without KV events (`--no-kv-events`) or predicts alongside them
//! (`--router-predicted-ttl-secs`). Enters: the predictions' [`PredictedCacheStats`]. Leaves:
//! Prometheus exposition text (format 0.0.4).

use crate::kv::PredictedCacheStats;
use std::fmt::Write as _;

/// How the router predicts, the `mode` label of every sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictionMode {
    /// Without KV events: the predictions are the index.
    WithoutEvents,
    /// Alongside KV events, in a side table.
    AlongsideEvents,
}

impl PredictionMode {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PredictionMode::WithoutEvents => "without_events",
            PredictionMode::AlongsideEvents => "alongside_events",
        }
    }
}

/// The `kv_router_predicted_*` families of `stats`.
pub fn prediction_prometheus_text(stats: &PredictedCacheStats, mode: PredictionMode) -> String {
    type Field = fn(&PredictedCacheStats) -> u64;
    let series: [(&str, &str, &str, Field); 6] = [
        (
            "bookings_total",
            "counter",
            "Bookings recorded as cache predictions",
            |s| s.bookings,
        ),
        (
            "blocks_recorded_total",
            "counter",
            "(worker, block) predictions recorded, renewals included",
            |s| s.recorded_blocks,
        ),
        (
            "blocks_expired_total",
            "counter",
            "Predictions removed because their TTL ran out",
            |s| s.expired_blocks,
        ),
        (
            "blocks_pruned_total",
            "counter",
            "Predictions removed by size pruning (router_max_tree_size)",
            |s| s.pruned_blocks,
        ),
        (
            "prunes_total",
            "counter",
            "Prunes run because the predictions exceeded router_max_tree_size",
            |s| s.prunes,
        ),
        (
            "entries",
            "gauge",
            "(worker, block) predictions held now (alongside events: expired ones until the next sweep)",
            |s| s.entries,
        ),
    ];
    let mut out = String::new();
    let mode = mode.as_str();
    for (name, kind, help, value) in series {
        let _ = writeln!(
            out,
            "# HELP kv_router_predicted_{name} {help}\n# TYPE kv_router_predicted_{name} {kind}\nkv_router_predicted_{name}{{mode=\"{mode}\"}} {}",
            value(stats)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_its_type_mode_and_value() {
        let stats = PredictedCacheStats {
            bookings: 3,
            recorded_blocks: 40,
            expired_blocks: 7,
            pruned_blocks: 2,
            prunes: 1,
            entries: 31,
        };
        let text = prediction_prometheus_text(&stats, PredictionMode::AlongsideEvents);
        for (line, value) in [
            ("bookings_total", 3),
            ("blocks_recorded_total", 40),
            ("blocks_expired_total", 7),
            ("blocks_pruned_total", 2),
            ("prunes_total", 1),
            ("entries", 31),
        ] {
            let sample =
                format!("kv_router_predicted_{line}{{mode=\"alongside_events\"}} {value}\n");
            assert!(text.contains(&sample), "{sample} in\n{text}");
        }
        assert!(text.contains("# TYPE kv_router_predicted_entries gauge\n"));
        assert!(text.contains("# TYPE kv_router_predicted_prunes_total counter\n"));
        assert_eq!(text.lines().count(), 18);
    }
}
