//! A booking's candidate filter: the worker ids a caller allows a request to be booked on
//! (upstream's `allowed_worker_ids`).
//!
//! The overlap pass still scores every worker of the role (hint policies, which may name any
//! worker as a KV source, see them all); only the worker-selection stage is narrowed: it hands
//! the role's policy a view whose candidates are the allowed ones
//! (`CandidateFilter::narrow`) and refuses a choice outside them. A request without a filter
//! costs nothing and allocates nothing.

use crate::identity::WorkerId;
use crate::plugins::Candidate;
use std::sync::Arc;

/// The worker ids (every dp rank of each) a request may be booked on.
#[derive(Clone, PartialEq, Eq)]
pub struct CandidateFilter {
    /// Sorted, without duplicates.
    worker_ids: Arc<[u64]>,
}

impl CandidateFilter {
    /// A filter allowing exactly `worker_ids` (an empty filter allows no worker).
    pub fn new(worker_ids: impl IntoIterator<Item = u64>) -> Self {
        let mut ids: Vec<u64> = worker_ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        Self {
            worker_ids: ids.into(),
        }
    }

    /// Whether `worker` (any of its dp ranks) is allowed.
    pub fn allows(&self, worker: WorkerId) -> bool {
        self.worker_ids.binary_search(&worker.worker_id).is_ok()
    }

    /// The allowed worker ids, sorted.
    pub fn worker_ids(&self) -> &[u64] {
        &self.worker_ids
    }

    /// The allowed ones among `candidates`, in their order.
    pub(crate) fn narrow(&self, candidates: &[Candidate]) -> Vec<Candidate> {
        candidates
            .iter()
            .filter(|candidate| self.allows(candidate.worker))
            .cloned()
            .collect()
    }
}

impl std::fmt::Debug for CandidateFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.worker_ids.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_allows_every_rank_of_its_workers_only() {
        let filter = CandidateFilter::new([7, 3, 7]);
        assert_eq!(filter.worker_ids(), [3, 7]);
        assert!(filter.allows(WorkerId::new(3, 0)));
        assert!(filter.allows(WorkerId::new(7, 2)));
        assert!(!filter.allows(WorkerId::new(4, 0)));
        assert!(!CandidateFilter::new([]).allows(WorkerId::new(3, 0)));
    }
}
