//! Why a booking failed, as metrics label it: one variant per `BookError` variant, so every
//! failed booking has a counter.

use std::fmt;

/// The label of a failed booking in `kv_router_book_errors_total{reason=...}` and in
/// [`MetricsSnapshot::book_errors`](super::MetricsSnapshot::book_errors).
/// `BookError::kind` maps each error to one of these; [`ALL`](Self::ALL) orders the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BookErrorReason {
    /// No `worker_selection` entry for the role.
    NoRoleConfig,
    /// No registered worker serves the role.
    NoWorkers,
    /// The selection policy returned an error.
    SelectionFailed,
    /// The selection policy panicked.
    SelectionPanicked,
    /// The selection policy chose a worker that is not a candidate.
    NotACandidate,
    /// The caller named a worker that is not registered in the request's role.
    NotRegistered,
    /// No worker of the role is in the request's allowed workers.
    NoAllowedWorkers,
    /// The caller named a worker outside the request's allowed workers.
    WorkerNotAllowed,
}

impl BookErrorReason {
    /// Every reason, in metric order.
    pub const ALL: [BookErrorReason; 8] = [
        BookErrorReason::NoRoleConfig,
        BookErrorReason::NoWorkers,
        BookErrorReason::SelectionFailed,
        BookErrorReason::SelectionPanicked,
        BookErrorReason::NotACandidate,
        BookErrorReason::NotRegistered,
        BookErrorReason::NoAllowedWorkers,
        BookErrorReason::WorkerNotAllowed,
    ];

    /// The reason's label in metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            BookErrorReason::NoRoleConfig => "no_role_config",
            BookErrorReason::NoWorkers => "no_workers",
            BookErrorReason::SelectionFailed => "selection_failed",
            BookErrorReason::SelectionPanicked => "selection_panicked",
            BookErrorReason::NotACandidate => "not_a_candidate",
            BookErrorReason::NotRegistered => "not_registered",
            BookErrorReason::NoAllowedWorkers => "no_allowed_workers",
            BookErrorReason::WorkerNotAllowed => "worker_not_allowed",
        }
    }

    /// The reason whose label is `label`.
    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|reason| reason.as_str() == label)
    }

    /// The reason's position in [`ALL`](Self::ALL).
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for BookErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_reason_at_its_index_with_a_distinct_label() {
        for (position, reason) in BookErrorReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), position, "{reason}");
            assert_eq!(BookErrorReason::from_label(reason.as_str()), Some(*reason));
        }
        let mut labels: Vec<_> = BookErrorReason::ALL.map(BookErrorReason::as_str).to_vec();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), BookErrorReason::ALL.len());
        // The last variant sits at the end of `ALL`, so no variant is left out.
        assert_eq!(
            BookErrorReason::WorkerNotAllowed.index(),
            BookErrorReason::ALL.len() - 1
        );
    }
}
