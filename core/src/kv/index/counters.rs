//! The index's event and block counters, and the bookkeeping that keeps them.

use super::KvIndex;
use crate::kv::event_outcome::{EventOutcome, IgnoreReason};

/// Event and block counts the index keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexCounters {
    /// Events applied.
    pub events_applied: u64,
    /// Events ignored, per [`IgnoreReason`] (in `IgnoreReason::ALL` order).
    pub events_ignored: [u64; IgnoreReason::ALL.len()],
    /// Blocks stored by applied events.
    pub stored_blocks: u64,
    /// Blocks removed by applied events.
    pub removed_blocks: u64,
    /// Removals that named a block the worker does not hold.
    pub unknown_block_removals: u64,
    /// Stored events rejected because the worker does not hold their parent (also counted
    /// under [`IgnoreReason::UnknownParent`]).
    pub unknown_parents: u64,
    /// `cleared` events applied (including re-synchronisations after a gap).
    pub clears: u64,
    /// Engine restarts: a worker's numbering started over at 0, so its cache was cleared.
    pub restarts: u64,
    /// Gaps closed by a replay (or made moot by a `cleared`).
    pub recoveries: u64,
    /// Recoveries given up by the transport ([`KvIndex::abandon_recovery`]); the worker was reset.
    pub abandoned_recoveries: u64,
    /// Workers awaiting a replay of lost events now (a gauge).
    pub workers_awaiting_recovery: u64,
}

impl IndexCounters {
    /// Events ignored for `reason`.
    pub fn ignored(&self, reason: IgnoreReason) -> u64 {
        self.events_ignored[reason.index()]
    }
}

impl KvIndex {
    /// The counters.
    pub fn counters(&self) -> &IndexCounters {
        &self.counters
    }

    /// Counts an event that could not be read.
    pub fn note_malformed(&mut self) {
        self.counters.events_ignored[IgnoreReason::Malformed.index()] += 1;
    }

    /// Keeps the awaiting-recovery gauge in step with one worker's cursor.
    pub(super) fn note_awaiting_change(&mut self, before: bool, after: bool) {
        let gauge = &mut self.counters.workers_awaiting_recovery;
        match (before, after) {
            (false, true) => *gauge += 1,
            (true, false) => *gauge = gauge.saturating_sub(1),
            _ => {}
        }
    }

    pub(super) fn count(&mut self, outcome: EventOutcome) {
        match outcome {
            EventOutcome::Applied => self.counters.events_applied += 1,
            EventOutcome::Ignored(reason) => self.counters.events_ignored[reason.index()] += 1,
        }
    }
}
