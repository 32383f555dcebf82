//! What applying one KV event did.

use std::fmt;

/// The result of applying a KV event to the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOutcome {
    /// The event changed the index (removals may have named some unknown blocks; those are counted).
    Applied,
    /// The event changed nothing, for the reason given; it is counted.
    Ignored(IgnoreReason),
}

/// Why an event was ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IgnoreReason {
    /// The worker is not registered.
    UnknownWorker,
    /// The event could not be read.
    Malformed,
    /// The `event_id` skipped numbers: events were lost, so the worker's cache state was dropped
    /// and its events are ignored until it reports `cleared`.
    Gap,
    /// The worker's cache state is stale after a gap; only `cleared` brings it back.
    Stale,
    /// The `event_id` is not after the last one applied (a duplicate or a reordering).
    OutOfOrder,
    /// A removal named only blocks the worker does not hold.
    UnknownBlocks,
}

impl IgnoreReason {
    /// Every reason, in metric order.
    pub const ALL: [IgnoreReason; 6] = [
        IgnoreReason::UnknownWorker,
        IgnoreReason::Malformed,
        IgnoreReason::Gap,
        IgnoreReason::Stale,
        IgnoreReason::OutOfOrder,
        IgnoreReason::UnknownBlocks,
    ];

    /// The reason's label in metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            IgnoreReason::UnknownWorker => "unknown_worker",
            IgnoreReason::Malformed => "malformed",
            IgnoreReason::Gap => "gap",
            IgnoreReason::Stale => "stale",
            IgnoreReason::OutOfOrder => "out_of_order",
            IgnoreReason::UnknownBlocks => "unknown_blocks",
        }
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
