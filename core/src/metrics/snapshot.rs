//! What in-process readers see of the router's metrics: plain values copied at one moment.

use super::HistogramSnapshot;
use crate::kv::{IgnoreReason, IndexCounters};
use std::collections::BTreeMap;

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
