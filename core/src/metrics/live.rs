//! The router's live counters: atomics bumped by bookings, copied into a [`MetricsSnapshot`].

use super::histogram::LatencyHistogram;
use super::{BookErrorReason, EventMetrics, MetricsSnapshot, PolicyFailures};
use crate::kv::IndexCounters;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

/// The router's live counters.
#[derive(Debug, Default)]
pub(crate) struct RouterMetrics {
    bookings: AtomicU64,
    book_errors: [AtomicU64; BookErrorReason::ALL.len()],
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

    /// Counts a failed booking under its reason's label (`BookError::reason`).
    pub(crate) fn count_book_error(&self, reason: &str) {
        // Every label comes from `BookErrorReason`, so every reason has a counter.
        if let Some(reason) = BookErrorReason::from_label(reason) {
            self.book_errors[reason.index()].fetch_add(1, Ordering::Relaxed);
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
            book_errors: BookErrorReason::ALL
                .iter()
                .zip(&self.book_errors)
                .map(|(reason, count)| (reason.as_str().to_owned(), count.load(Ordering::Relaxed)))
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
