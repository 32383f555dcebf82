//! A booking's candidate filter: the worker ids a caller allows a request to be booked on
//! (upstream's `allowed_worker_ids`).
//!
//! The overlap pass still scores every worker of the role (hint policies, which may name any
//! worker as a KV source, see them all); only the worker-selection policy is narrowed to the
//! allowed candidates. The router wraps every role's selection policy in
//! [`FilteredSelection`] once, when it is built; a booking whose request carries a filter
//! installs it for the length of the booking in this thread's [`FilterScope`] (a booking runs
//! its policies synchronously on the caller's thread), and the wrapper hands the inner policy a
//! view whose candidates are only the allowed ones. A request without a filter costs one
//! thread-local read and allocates nothing.

use crate::identity::WorkerId;
use crate::plugins::{
    Commitments, PolicyError, RequestView, Selection, WorkerSelectionContext, WorkerSelectionPolicy,
};
use std::cell::RefCell;
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
}

impl std::fmt::Debug for CandidateFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.worker_ids.iter()).finish()
    }
}

thread_local! {
    static ACTIVE: RefCell<Option<CandidateFilter>> = const { RefCell::new(None) };
}

/// The filter of the booking running on this thread, restored to the previous one (a nested
/// booking from inside a policy has its own) when dropped.
pub(crate) struct FilterScope {
    previous: Option<CandidateFilter>,
}

impl FilterScope {
    /// Installs `filter` (or none) for the booking about to run on this thread.
    pub(crate) fn enter(filter: Option<&CandidateFilter>) -> Self {
        let previous = ACTIVE.with_borrow_mut(|active| std::mem::replace(active, filter.cloned()));
        Self { previous }
    }
}

impl Drop for FilterScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        ACTIVE.with_borrow_mut(|active| *active = previous);
    }
}

/// A role's selection policy, narrowed to the allowed candidates of the running booking.
pub(crate) struct FilteredSelection {
    inner: Arc<dyn WorkerSelectionPolicy>,
}

impl FilteredSelection {
    /// `inner`, honouring the booking's filter.
    pub(crate) fn wrap(inner: Arc<dyn WorkerSelectionPolicy>) -> Arc<dyn WorkerSelectionPolicy> {
        Arc::new(Self { inner })
    }
}

impl WorkerSelectionPolicy for FilteredSelection {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let Some(filter) = ACTIVE.with_borrow(Clone::clone) else {
            return self.inner.select(context);
        };
        let allowed: Vec<_> = context
            .candidates()
            .iter()
            .filter(|candidate| filter.allows(candidate.worker))
            .cloned()
            .collect();
        if allowed.is_empty() {
            return Err(PolicyError::new(format!(
                "no candidate is in the request's allowed workers {filter:?}"
            )));
        }
        let view = RequestView {
            candidates: &allowed,
            ..*context.request()
        };
        let selection = self.inner.select(&WorkerSelectionContext::new(view))?;
        if !filter.allows(selection.worker) {
            return Err(PolicyError::new(format!(
                "chose worker {}, which is not in the request's allowed workers {filter:?}",
                selection.worker
            )));
        }
        Ok(selection)
    }

    fn commitments(&self) -> Commitments {
        self.inner.commitments()
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

    #[test]
    fn scopes_nest_and_restore_the_outer_filter() {
        let outer = CandidateFilter::new([1]);
        let current = || ACTIVE.with_borrow(Clone::clone);
        {
            let _outer = FilterScope::enter(Some(&outer));
            {
                let _inner = FilterScope::enter(None);
                assert_eq!(current(), None);
            }
            assert_eq!(current(), Some(outer.clone()));
        }
        assert_eq!(current(), None);
    }
}
