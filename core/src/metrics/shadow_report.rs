//! What each shadow policy would have done, beside what the live policies did, summed over the
//! bookings it saw: the figures of `GET /shadow`, of the `kv_router_shadow_*` metrics and of the
//! replay's shadow table.

use super::prometheus::escape_label;
use serde::Serialize;
use std::fmt::Write as _;

/// One shadow's figures, beside the live policies' on the same bookings.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ShadowReport {
    /// The role it shadows.
    pub role: String,
    /// Its name (its `name`, else its selection type).
    pub name: String,
    /// Its selection policy type.
    pub selection_type: String,
    /// Bookings it was evaluated on.
    pub decisions: u64,
    /// Bookings where it chose the live choice's worker.
    pub agreed: u64,
    /// Full prompt blocks of those bookings.
    pub prompt_blocks: u64,
    /// Blocks the live choices' workers had cached.
    pub live_cached_blocks: u64,
    /// Blocks its choices' workers had cached: the counterfactual overlap.
    pub shadow_cached_blocks: u64,
    /// The live choices' load imbalance, averaged over the bookings: the most loaded
    /// candidate's active blocks over the candidates' mean, once the request is added (1 is
    /// even).
    pub live_imbalance: f64,
    /// The same for its choices.
    pub shadow_imbalance: f64,
    /// Bookings whose live hint carried at least one action.
    pub live_hints: u64,
    /// Bookings where its hint policies would have sent at least one action.
    pub shadow_hints: u64,
    /// Actions of the live hints.
    pub live_hint_actions: u64,
    /// Actions its hint policies would have sent.
    pub shadow_hint_actions: u64,
    /// Blocks the live `kv.fetch` actions named.
    pub live_fetch_blocks: u64,
    /// Blocks its `kv.fetch` actions would have named.
    pub shadow_fetch_blocks: u64,
    /// Bookings where its selection failed (error, panic, or a worker that is not a
    /// candidate), or one of its hint policies did.
    pub failures: u64,
}

impl ShadowReport {
    /// The share of bookings where it agreed with the live choice (0 before any).
    pub fn agreement(&self) -> f64 {
        ratio(self.agreed, self.decisions)
    }

    /// The share of prompt blocks the live choices found cached.
    pub fn live_hit_rate(&self) -> f64 {
        ratio(self.live_cached_blocks, self.prompt_blocks)
    }

    /// The share of prompt blocks its choices would have found cached.
    pub fn shadow_hit_rate(&self) -> f64 {
        ratio(self.shadow_cached_blocks, self.prompt_blocks)
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The `kv_router_shadow_*` samples of `reports`, and the cases dropped by a full queue.
pub fn shadow_prometheus_text(reports: &[ShadowReport], dropped: u64) -> String {
    let mut out = String::new();
    let name = "kv_router_shadow_cases_dropped_total";
    let _ = writeln!(
        out,
        "# HELP {name} Bookings no shadow saw because the shadow queue was full\n# TYPE {name} counter\n{name} {dropped}"
    );
    if reports.is_empty() {
        return out;
    }
    type Field = fn(&ShadowReport) -> f64;
    let series: [(&str, &str, &str, Field); 14] = [
        (
            "decisions_total",
            "counter",
            "Bookings each shadow was evaluated on",
            |r| r.decisions as f64,
        ),
        (
            "agreements_total",
            "counter",
            "Bookings where the shadow chose the live worker",
            |r| r.agreed as f64,
        ),
        (
            "prompt_blocks_total",
            "counter",
            "Full prompt blocks of the bookings each shadow saw",
            |r| r.prompt_blocks as f64,
        ),
        (
            "live_cached_blocks_total",
            "counter",
            "Blocks the live choices' workers had cached",
            |r| r.live_cached_blocks as f64,
        ),
        (
            "cached_blocks_total",
            "counter",
            "Blocks the shadow's choices' workers had cached (counterfactual overlap)",
            |r| r.shadow_cached_blocks as f64,
        ),
        (
            "live_imbalance",
            "gauge",
            "Mean load imbalance of the live choices (max over mean active blocks; 1 is even)",
            |r| r.live_imbalance,
        ),
        (
            "imbalance",
            "gauge",
            "Mean load imbalance the shadow's choices would have caused (max over mean active blocks; 1 is even)",
            |r| r.shadow_imbalance,
        ),
        (
            "live_hints_total",
            "counter",
            "Bookings whose live hint carried an action",
            |r| r.live_hints as f64,
        ),
        (
            "hints_total",
            "counter",
            "Bookings where the shadow would have sent a hint",
            |r| r.shadow_hints as f64,
        ),
        (
            "live_hint_actions_total",
            "counter",
            "Actions of the live hints",
            |r| r.live_hint_actions as f64,
        ),
        (
            "hint_actions_total",
            "counter",
            "Actions the shadow would have sent",
            |r| r.shadow_hint_actions as f64,
        ),
        (
            "live_fetch_blocks_total",
            "counter",
            "Blocks the live kv.fetch actions named",
            |r| r.live_fetch_blocks as f64,
        ),
        (
            "fetch_blocks_total",
            "counter",
            "Blocks the shadow's kv.fetch actions would have named",
            |r| r.shadow_fetch_blocks as f64,
        ),
        (
            "failures_total",
            "counter",
            "Bookings where a shadow policy failed",
            |r| r.failures as f64,
        ),
    ];
    for (suffix, kind, help, field) in series {
        let name = format!("kv_router_shadow_{suffix}");
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for report in reports {
            let _ = writeln!(
                out,
                "{name}{{role=\"{}\",shadow=\"{}\",policy_type=\"{}\"}} {}",
                escape_label(&report.role),
                escape_label(&report.name),
                escape_label(&report.selection_type),
                field(report)
            );
        }
    }
    out
}
