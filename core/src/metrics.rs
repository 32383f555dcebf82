//! Router counters and the booking-latency histogram: a snapshot struct for in-process readers
//! and the Prometheus text exposition (format 0.0.4), written by hand: it is a few lines of
//! `name{labels} value`, and a metrics crate would add a registry and global state for nothing.

use crate::kv::{IgnoreReason, IndexCounters};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the booking-latency buckets, in seconds.
const LATENCY_BOUNDS: [f64; 18] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 1.0,
];

/// The reasons a booking fails, in metric order.
pub(crate) const BOOK_ERROR_REASONS: [&str; 5] = [
    "no_role_config",
    "no_workers",
    "selection_failed",
    "selection_panicked",
    "not_a_candidate",
];

/// A point-in-time copy of every router metric.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Successful bookings.
    pub bookings: u64,
    /// Failed bookings, per reason (`no_role_config`, `no_workers`, `selection_failed`, …).
    pub book_errors: BTreeMap<String, u64>,
    /// Hints returned (bookings with at least one action).
    pub hints_sent: u64,
    /// Actions in returned hints.
    pub hint_actions: u64,
    /// Actions dropped by the cap.
    pub hint_actions_dropped: u64,
    /// Bookings whose worker does not advertise `router_hint` (no hint policy ran).
    pub hints_skipped_no_router_hint: u64,
    /// Hint policy failures, per role and policy.
    pub hint_policy_failures: Vec<PolicyFailures>,
    /// Bookings released by the TTL rather than by the caller.
    pub bookings_expired: u64,
    /// Bookings currently holding load.
    pub active_bookings: u64,
    /// KV event figures.
    pub events: EventMetrics,
    /// (worker, block) memberships in the index.
    pub index_memberships: u64,
    /// Booking latency.
    pub booking_latency: HistogramSnapshot,
}

/// Failure counts of one hint policy of one role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyFailures {
    /// The role.
    pub role: String,
    /// The hint policy type.
    pub policy_type: String,
    /// The entry's name or, without one, its type.
    pub name: String,
    /// Runs that returned an error.
    pub errors: u64,
    /// Runs that panicked.
    pub panics: u64,
}

/// KV event counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventMetrics {
    /// Events applied.
    pub applied: u64,
    /// Events ignored, per reason.
    pub ignored: BTreeMap<String, u64>,
    /// Blocks stored.
    pub stored_blocks: u64,
    /// Blocks removed.
    pub removed_blocks: u64,
    /// Removals naming a block the worker does not hold.
    pub unknown_block_removals: u64,
    /// Stored events whose parent the worker does not hold.
    pub unknown_parents: u64,
    /// `cleared` events applied.
    pub clears: u64,
    /// Engine restarts (event numbering started over at 0).
    pub restarts: u64,
    /// Gaps in event numbering closed by a replay.
    pub recoveries: u64,
    /// Replays given up; the worker was reset.
    pub abandoned_recoveries: u64,
    /// Workers awaiting a replay of lost events, not trusted until then (a gauge).
    pub workers_awaiting_recovery: u64,
}

impl EventMetrics {
    /// Event figures from the index's counters.
    pub fn from_counters(counters: &IndexCounters) -> Self {
        Self {
            applied: counters.events_applied,
            ignored: IgnoreReason::ALL
                .iter()
                .map(|reason| (reason.as_str().to_owned(), counters.ignored(*reason)))
                .collect(),
            stored_blocks: counters.stored_blocks,
            removed_blocks: counters.removed_blocks,
            unknown_block_removals: counters.unknown_block_removals,
            unknown_parents: counters.unknown_parents,
            clears: counters.clears,
            restarts: counters.restarts,
            recoveries: counters.recoveries,
            abandoned_recoveries: counters.abandoned_recoveries,
            workers_awaiting_recovery: counters.workers_awaiting_recovery,
        }
    }
}

/// A cumulative histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets, in seconds (the implicit last bucket is `+Inf`).
    pub bounds_seconds: Vec<f64>,
    /// Observations at or below each bound (cumulative), then the total for `+Inf`.
    pub cumulative_counts: Vec<u64>,
    /// Sum of observations, in seconds.
    pub sum_seconds: f64,
    /// Number of observations.
    pub count: u64,
}

impl HistogramSnapshot {
    /// The smallest bucket bound at or above quantile `q` (0..=1), in seconds; `None` when
    /// empty or when the quantile falls in the `+Inf` bucket.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0) as u64;
        self.bounds_seconds
            .iter()
            .zip(&self.cumulative_counts)
            .find(|(_, count)| **count >= rank)
            .map(|(bound, _)| *bound)
    }
}

/// Failure counters of one hint policy of one role.
#[derive(Debug, Default)]
pub(crate) struct PolicyFailureCounter {
    role: String,
    policy_type: String,
    name: String,
    errors: AtomicU64,
    panics: AtomicU64,
}

impl PolicyFailureCounter {
    pub(crate) fn new(role: String, policy_type: String, name: String) -> Self {
        Self {
            role,
            policy_type,
            name,
            ..Self::default()
        }
    }

    pub(crate) fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_panic(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PolicyFailures {
        PolicyFailures {
            role: self.role.clone(),
            policy_type: self.policy_type.clone(),
            name: self.name.clone(),
            errors: self.errors.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
        }
    }
}

/// A fixed-bucket latency histogram with lock-free observation.
#[derive(Debug)]
struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    fn observe(&self, latency: Duration) {
        let seconds = latency.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative_counts = self
            .buckets
            .iter()
            .map(|bucket| {
                running += bucket.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot {
            bounds_seconds: LATENCY_BOUNDS.to_vec(),
            cumulative_counts,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// The router's live counters.
#[derive(Debug, Default)]
pub(crate) struct RouterMetrics {
    bookings: AtomicU64,
    book_errors: [AtomicU64; BOOK_ERROR_REASONS.len()],
    hints_sent: AtomicU64,
    hint_actions: AtomicU64,
    hint_actions_dropped: AtomicU64,
    hints_skipped: AtomicU64,
    bookings_expired: AtomicU64,
    latency: LatencyHistogram,
}

impl RouterMetrics {
    pub(crate) fn count_booking(&self, latency: Duration) {
        self.bookings.fetch_add(1, Ordering::Relaxed);
        self.latency.observe(latency);
    }

    pub(crate) fn count_book_error(&self, reason: &str) {
        if let Some(position) = BOOK_ERROR_REASONS.iter().position(|r| *r == reason) {
            self.book_errors[position].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_hint(&self, actions: usize, dropped: usize) {
        if actions > 0 {
            self.hints_sent.fetch_add(1, Ordering::Relaxed);
        }
        self.hint_actions
            .fetch_add(actions as u64, Ordering::Relaxed);
        self.hint_actions_dropped
            .fetch_add(dropped as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_hint_skipped(&self) {
        self.hints_skipped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_expired(&self, expired: u64) {
        self.bookings_expired.fetch_add(expired, Ordering::Relaxed);
    }

    /// The snapshot, completed with the figures kept elsewhere.
    pub(crate) fn snapshot<'a>(
        &self,
        policies: impl IntoIterator<Item = &'a PolicyFailureCounter>,
        index: &IndexCounters,
        index_memberships: u64,
        active_bookings: u64,
    ) -> MetricsSnapshot {
        MetricsSnapshot {
            bookings: self.bookings.load(Ordering::Relaxed),
            book_errors: BOOK_ERROR_REASONS
                .iter()
                .zip(&self.book_errors)
                .map(|(reason, count)| ((*reason).to_owned(), count.load(Ordering::Relaxed)))
                .collect(),
            hints_sent: self.hints_sent.load(Ordering::Relaxed),
            hint_actions: self.hint_actions.load(Ordering::Relaxed),
            hint_actions_dropped: self.hint_actions_dropped.load(Ordering::Relaxed),
            hints_skipped_no_router_hint: self.hints_skipped.load(Ordering::Relaxed),
            hint_policy_failures: policies
                .into_iter()
                .map(PolicyFailureCounter::snapshot)
                .collect(),
            bookings_expired: self.bookings_expired.load(Ordering::Relaxed),
            active_bookings,
            events: EventMetrics::from_counters(index),
            index_memberships,
            booking_latency: self.latency.snapshot(),
        }
    }
}

impl MetricsSnapshot {
    /// The snapshot in the Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self) -> String {
        let mut out = PrometheusText::default();
        out.single(
            "bookings_total",
            "counter",
            "Requests booked on a worker.",
            self.bookings,
        );
        out.header(
            "book_errors_total",
            "counter",
            "Bookings that failed, by reason.",
        );
        for (reason, count) in &self.book_errors {
            out.sample("book_errors_total", &[("reason", reason)], *count);
        }
        out.single(
            "hints_sent_total",
            "counter",
            "Hints returned with a booking.",
            self.hints_sent,
        );
        out.single(
            "hint_actions_total",
            "counter",
            "Actions in returned hints.",
            self.hint_actions,
        );
        out.single(
            "hint_actions_dropped_total",
            "counter",
            "Actions dropped by the per-hint cap.",
            self.hint_actions_dropped,
        );
        out.single(
            "hints_skipped_no_router_hint_total",
            "counter",
            "Bookings on workers that do not advertise router_hint.",
            self.hints_skipped_no_router_hint,
        );
        out.header(
            "hint_policy_failures_total",
            "counter",
            "Hint policy runs that returned an error or panicked.",
        );
        for policy in &self.hint_policy_failures {
            for (kind, count) in [("error", policy.errors), ("panic", policy.panics)] {
                out.sample(
                    "hint_policy_failures_total",
                    &[
                        ("role", &policy.role),
                        ("policy_type", &policy.policy_type),
                        ("name", &policy.name),
                        ("kind", kind),
                    ],
                    count,
                );
            }
        }
        out.single(
            "bookings_expired_total",
            "counter",
            "Bookings released by their TTL.",
            self.bookings_expired,
        );
        out.single(
            "active_bookings",
            "gauge",
            "Bookings holding load.",
            self.active_bookings,
        );
        out.single(
            "kv_events_applied_total",
            "counter",
            "KV events applied.",
            self.events.applied,
        );
        out.header(
            "kv_events_ignored_total",
            "counter",
            "KV events ignored, by reason.",
        );
        for (reason, count) in &self.events.ignored {
            out.sample("kv_events_ignored_total", &[("reason", reason)], *count);
        }
        out.single(
            "kv_stored_blocks_total",
            "counter",
            "Blocks stored by KV events.",
            self.events.stored_blocks,
        );
        out.single(
            "kv_removed_blocks_total",
            "counter",
            "Blocks removed by KV events.",
            self.events.removed_blocks,
        );
        out.single(
            "kv_unknown_block_removals_total",
            "counter",
            "Removals naming a block the worker does not hold.",
            self.events.unknown_block_removals,
        );
        out.single(
            "kv_unknown_parents_total",
            "counter",
            "Stored events rejected because the worker does not hold their parent.",
            self.events.unknown_parents,
        );
        out.single(
            "kv_clears_total",
            "counter",
            "Cleared events applied.",
            self.events.clears,
        );
        out.single(
            "kv_event_restarts_total",
            "counter",
            "Engine restarts: a worker's event numbering started over at 0.",
            self.events.restarts,
        );
        out.single(
            "kv_event_recoveries_total",
            "counter",
            "Gaps in a worker's event numbering closed by a replay.",
            self.events.recoveries,
        );
        out.single(
            "kv_event_recoveries_abandoned_total",
            "counter",
            "Replays of lost events given up; the worker was reset.",
            self.events.abandoned_recoveries,
        );
        out.single(
            "kv_workers_awaiting_recovery",
            "gauge",
            "Workers awaiting a replay of lost events, not trusted until then.",
            self.events.workers_awaiting_recovery,
        );
        out.single(
            "kv_index_memberships",
            "gauge",
            "(worker, block) memberships in the KV index.",
            self.index_memberships,
        );
        let latency = &self.booking_latency;
        out.header(
            "booking_latency_seconds",
            "histogram",
            "Time to book a request.",
        );
        for (bound, count) in latency
            .bounds_seconds
            .iter()
            .zip(&latency.cumulative_counts)
        {
            out.sample(
                "booking_latency_seconds_bucket",
                &[("le", &bound.to_string())],
                *count,
            );
        }
        out.sample(
            "booking_latency_seconds_bucket",
            &[("le", "+Inf")],
            latency.count,
        );
        out.line(&format!(
            "kv_router_booking_latency_seconds_sum {}",
            latency.sum_seconds
        ));
        out.sample("booking_latency_seconds_count", &[], latency.count);
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

    fn single(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.header(name, kind, help);
        self.sample(name, &[], value);
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

    fn line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
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
    fn histogram_buckets_are_cumulative() {
        let histogram = LatencyHistogram::default();
        histogram.observe(Duration::from_nanos(500));
        histogram.observe(Duration::from_micros(3));
        histogram.observe(Duration::from_secs(5));
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.cumulative_counts[0], 1);
        assert_eq!(snapshot.cumulative_counts[2], 2);
        assert_eq!(snapshot.cumulative_counts.last(), Some(&3));
        assert_eq!(snapshot.quantile_upper_bound(0.5), Some(5e-6));
        assert_eq!(snapshot.quantile_upper_bound(1.0), None);
    }

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
