//! The Prometheus text exposition (format 0.0.4) of a [`MetricsSnapshot`]: one table row per
//! metric family, in exposition order; every name gets the `kv_router_` prefix.

use super::{HistogramSnapshot, MetricsSnapshot, PolicyFailures};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The samples of one family, read from a snapshot.
enum Samples<'a> {
    /// One unlabelled value.
    One(u64),
    /// One value per `reason` label.
    ByReason(&'a BTreeMap<String, u64>),
    /// Errors and panics per hint policy of each role.
    PolicyFailures(&'a [PolicyFailures]),
    /// A cumulative histogram.
    Histogram(&'a HistogramSnapshot),
}

/// One metric family: its name (without prefix), type, help text and samples.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: for<'a> fn(&'a MetricsSnapshot) -> Samples<'a>,
}

const fn family(
    kind: &'static str,
    name: &'static str,
    help: &'static str,
    samples: for<'a> fn(&'a MetricsSnapshot) -> Samples<'a>,
) -> Family {
    Family {
        name,
        kind,
        help,
        samples,
    }
}

/// Every family, in exposition order.
const FAMILIES: &[Family] = &[
    family(
        "counter",
        "bookings_total",
        "Requests booked on a worker.",
        |m| Samples::One(m.bookings),
    ),
    family(
        "counter",
        "book_errors_total",
        "Bookings that failed, by reason.",
        |m| Samples::ByReason(&m.book_errors),
    ),
    family(
        "counter",
        "hints_sent_total",
        "Hints returned with a booking.",
        |m| Samples::One(m.hints_sent),
    ),
    family(
        "counter",
        "hint_actions_total",
        "Actions in returned hints.",
        |m| Samples::One(m.hint_actions),
    ),
    family(
        "counter",
        "hint_actions_dropped_total",
        "Actions dropped by the per-hint cap.",
        |m| Samples::One(m.hint_actions_dropped),
    ),
    family(
        "counter",
        "hints_skipped_no_router_hint_total",
        "Bookings on workers that do not advertise router_hint.",
        |m| Samples::One(m.hints_skipped_no_router_hint),
    ),
    family(
        "counter",
        "hint_policy_failures_total",
        "Hint policy runs that returned an error or panicked.",
        |m| Samples::PolicyFailures(&m.hint_policy_failures),
    ),
    family(
        "counter",
        "bookings_expired_total",
        "Bookings released by their TTL.",
        |m| Samples::One(m.bookings_expired),
    ),
    family("gauge", "active_bookings", "Bookings holding load.", |m| {
        Samples::One(m.active_bookings)
    }),
    family(
        "counter",
        "kv_events_applied_total",
        "KV events applied.",
        |m| Samples::One(m.events.applied),
    ),
    family(
        "counter",
        "kv_events_ignored_total",
        "KV events ignored, by reason.",
        |m| Samples::ByReason(&m.events.ignored),
    ),
    family(
        "counter",
        "kv_stored_blocks_total",
        "Blocks stored by KV events.",
        |m| Samples::One(m.events.stored_blocks),
    ),
    family(
        "counter",
        "kv_removed_blocks_total",
        "Blocks removed by KV events.",
        |m| Samples::One(m.events.removed_blocks),
    ),
    family(
        "counter",
        "kv_unknown_block_removals_total",
        "Removals naming a block the worker does not hold.",
        |m| Samples::One(m.events.unknown_block_removals),
    ),
    family(
        "counter",
        "kv_unknown_parents_total",
        "Stored events rejected because the worker does not hold their parent.",
        |m| Samples::One(m.events.unknown_parents),
    ),
    family(
        "counter",
        "kv_clears_total",
        "Cleared events applied.",
        |m| Samples::One(m.events.clears),
    ),
    family(
        "counter",
        "kv_event_restarts_total",
        "Engine restarts: a worker's event numbering started over at 0.",
        |m| Samples::One(m.events.restarts),
    ),
    family(
        "counter",
        "kv_event_recoveries_total",
        "Gaps in a worker's event numbering closed by a replay.",
        |m| Samples::One(m.events.recoveries),
    ),
    family(
        "counter",
        "kv_event_recoveries_abandoned_total",
        "Replays of lost events given up; the worker was reset.",
        |m| Samples::One(m.events.abandoned_recoveries),
    ),
    family(
        "gauge",
        "kv_workers_awaiting_recovery",
        "Workers awaiting a replay of lost events, not trusted until then.",
        |m| Samples::One(m.events.workers_awaiting_recovery),
    ),
    family(
        "gauge",
        "kv_index_memberships",
        "(worker, block) memberships in the KV index.",
        |m| Samples::One(m.index_memberships),
    ),
    family(
        "histogram",
        "booking_latency_seconds",
        "Time to book a request.",
        |m| Samples::Histogram(&m.booking_latency),
    ),
];

impl MetricsSnapshot {
    /// The snapshot in the Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self) -> String {
        let mut out = PrometheusText::default();
        for family in FAMILIES {
            out.header(family.name, family.kind, family.help);
            out.samples(family.name, (family.samples)(self));
        }
        out.text
    }
}

/// Builds exposition text; every metric name gets the `kv_router_` prefix.
#[derive(Default)]
struct PrometheusText {
    text: String,
}

impl PrometheusText {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP kv_router_{name} {help}");
        let _ = writeln!(self.text, "# TYPE kv_router_{name} {kind}");
    }

    fn samples(&mut self, name: &str, samples: Samples<'_>) {
        match samples {
            Samples::One(value) => self.sample(name, &[], value),
            Samples::ByReason(counts) => {
                for (reason, count) in counts {
                    self.sample(name, &[("reason", reason)], *count);
                }
            }
            Samples::PolicyFailures(policies) => {
                for policy in policies {
                    for (kind, count) in [("error", policy.errors), ("panic", policy.panics)] {
                        let labels = [
                            ("role", policy.role.as_str()),
                            ("policy_type", policy.policy_type.as_str()),
                            ("name", policy.name.as_str()),
                            ("kind", kind),
                        ];
                        self.sample(name, &labels, count);
                    }
                }
            }
            Samples::Histogram(histogram) => self.histogram(name, histogram),
        }
    }

    /// `_bucket` samples (cumulative, then `+Inf`), `_sum` and `_count`.
    fn histogram(&mut self, name: &str, histogram: &HistogramSnapshot) {
        let bucket = format!("{name}_bucket");
        for (bound, count) in histogram
            .bounds_seconds
            .iter()
            .zip(&histogram.cumulative_counts)
        {
            self.sample(&bucket, &[("le", &bound.to_string())], *count);
        }
        self.sample(&bucket, &[("le", "+Inf")], histogram.count);
        let _ = writeln!(self.text, "kv_router_{name}_sum {}", histogram.sum_seconds);
        self.sample(&format!("{name}_count"), &[], histogram.count);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        let _ = write!(self.text, "kv_router_{name}");
        if !labels.is_empty() {
            self.text.push('{');
            for (position, (key, value)) in labels.iter().enumerate() {
                if position > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// `value` escaped for a Prometheus label value (backslash, quote, newline).
pub fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_types_labels_and_escapes() {
        let snapshot = MetricsSnapshot {
            bookings: 3,
            hint_policy_failures: vec![PolicyFailures {
                role: "decode".into(),
                policy_type: "kv_fetch".into(),
                name: "we\"ird\\name".into(),
                errors: 2,
                panics: 1,
            }],
            ..MetricsSnapshot::default()
        };
        let text = snapshot.to_prometheus();
        assert!(
            text.contains("# TYPE kv_router_bookings_total counter\nkv_router_bookings_total 3\n")
        );
        assert!(text.contains(
            "kv_router_hint_policy_failures_total{role=\"decode\",policy_type=\"kv_fetch\",name=\"we\\\"ird\\\\name\",kind=\"panic\"} 1\n"
        ));
        assert!(text.contains("kv_router_booking_latency_seconds_bucket{le=\"+Inf\"} 0\n"));
        assert!(text.contains("# TYPE kv_router_booking_latency_seconds histogram\n"));
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            assert!(line.starts_with("kv_router_"), "{line}");
            assert!(
                line.rsplit(' ')
                    .next()
                    .is_some_and(|v| v.parse::<f64>().is_ok()),
                "{line}"
            );
        }
    }
}
