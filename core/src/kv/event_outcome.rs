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
    /// The `event_id` skipped numbers: events were lost. The event is not applied; the worker
    /// awaits the replay of the missing range (see `KvIndex::replay_request`) and is not
    /// trusted until then.
    Gap,
    /// The worker awaits a replay from an earlier `event_id`; later events wait for it.
    AwaitingRecovery,
    /// The `event_id` is not after the last one applied (a duplicate or a reordering).
    OutOfOrder,
    /// A removal named only blocks the worker does not hold.
    UnknownBlocks,
    /// A store whose `parent_hash` the worker does not hold: nothing of it was applied.
    UnknownParent,
    /// A store that names its own parent among its blocks: nothing of it was applied.
    InvalidBlockSequence,
    /// An event of a tier other than `device` (or of a cache owner): accepted, not indexed.
    NonDeviceTier,
    /// An event whose `residency_domain` upstream does not support: not applied.
    UnsupportedResidency,
}

impl IgnoreReason {
    /// Every reason, in metric order.
    pub const ALL: [IgnoreReason; 10] = [
        IgnoreReason::UnknownWorker,
        IgnoreReason::Malformed,
        IgnoreReason::Gap,
        IgnoreReason::AwaitingRecovery,
        IgnoreReason::OutOfOrder,
        IgnoreReason::UnknownBlocks,
        IgnoreReason::UnknownParent,
        IgnoreReason::InvalidBlockSequence,
        IgnoreReason::NonDeviceTier,
        IgnoreReason::UnsupportedResidency,
    ];

    /// The reason's label in metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            IgnoreReason::UnknownWorker => "unknown_worker",
            IgnoreReason::Malformed => "malformed",
            IgnoreReason::Gap => "gap",
            IgnoreReason::AwaitingRecovery => "awaiting_recovery",
            IgnoreReason::OutOfOrder => "out_of_order",
            IgnoreReason::UnknownBlocks => "unknown_blocks",
            IgnoreReason::UnknownParent => "unknown_parent",
            IgnoreReason::InvalidBlockSequence => "invalid_block_sequence",
            IgnoreReason::NonDeviceTier => "non_device_tier",
            IgnoreReason::UnsupportedResidency => "unsupported_residency",
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
