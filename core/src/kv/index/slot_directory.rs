//! The tracked workers in worker order, each with its slot: the index finds a worker's slot
//! through it, and the overlap pass maps all its candidate workers at once. Candidates usually
//! come in worker order (a role's workers are kept sorted), so that mapping is one comparison
//! per worker instead of a hash-table lookup per worker, which cost about a third of a pass
//! over an 8,192-token prompt.

use crate::identity::WorkerId;

/// Tracked workers sorted by [`WorkerId`], each with its slot.
#[derive(Debug, Default)]
pub(super) struct SlotDirectory {
    entries: Vec<(WorkerId, u32)>,
}

impl SlotDirectory {
    /// Records that `worker` holds `slot`.
    pub(super) fn insert(&mut self, worker: WorkerId, slot: u32) {
        match self.position(worker) {
            Ok(at) => self.entries[at].1 = slot,
            Err(at) => self.entries.insert(at, (worker, slot)),
        }
    }

    /// Forgets `worker`; returns the slot it held.
    pub(super) fn remove(&mut self, worker: WorkerId) -> Option<u32> {
        let at = self.position(worker).ok()?;
        Some(self.entries.remove(at).1)
    }

    /// The slot of `worker`, if it is tracked.
    #[inline]
    pub(super) fn get(&self, worker: WorkerId) -> Option<u32> {
        self.position(worker).ok().map(|at| self.entries[at].1)
    }

    /// Whether `worker` is tracked.
    pub(super) fn contains(&self, worker: WorkerId) -> bool {
        self.position(worker).is_ok()
    }

    /// Every tracked worker and its slot, in worker order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (WorkerId, u32)> + '_ {
        self.entries.iter().copied()
    }

    /// Calls `each` with the slot of every worker of `workers`, in their order (`None` for a
    /// worker not tracked): one comparison per worker while `workers` follows the directory's
    /// order, a binary search for a worker out of that order.
    #[inline]
    pub(super) fn resolve(&self, workers: &[WorkerId], mut each: impl FnMut(Option<u32>)) {
        let mut next = 0;
        for worker in workers {
            let slot = match self.entries.get(next) {
                Some(&(tracked, slot)) if tracked == *worker => {
                    next += 1;
                    Some(slot)
                }
                _ => match self.position(*worker) {
                    Ok(at) => {
                        next = at + 1;
                        Some(self.entries[at].1)
                    }
                    Err(at) => {
                        next = at;
                        None
                    }
                },
            };
            each(slot);
        }
    }

    fn position(&self, worker: WorkerId) -> Result<usize, usize> {
        self.entries
            .binary_search_by_key(&worker, |(tracked, _)| *tracked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: u64) -> WorkerId {
        WorkerId::new(id, (id % 3) as u32)
    }

    fn resolved(directory: &SlotDirectory, workers: &[WorkerId]) -> Vec<Option<u32>> {
        let mut slots = Vec::new();
        directory.resolve(workers, |slot| slots.push(slot));
        slots
    }

    #[test]
    fn resolves_workers_in_any_order_like_a_map() {
        let mut directory = SlotDirectory::default();
        let mut model = std::collections::HashMap::new();
        // Inserted out of order, one re-slotted and one removed.
        for (slot, id) in [7u64, 3, 11, 5, 1, 9].into_iter().enumerate() {
            directory.insert(worker(id), slot as u32);
            model.insert(worker(id), slot as u32);
        }
        directory.insert(worker(5), 40);
        model.insert(worker(5), 40);
        assert_eq!(directory.remove(worker(11)), Some(2));
        model.remove(&worker(11));
        assert_eq!(directory.remove(worker(12)), None);
        let orders: [Vec<u64>; 4] = [
            vec![1, 3, 5, 7, 9],
            vec![9, 7, 5, 3, 1],
            vec![0, 1, 2, 3, 11, 5, 13, 9, 7],
            vec![5, 5, 1, 9, 9, 3],
        ];
        for order in orders {
            let workers: Vec<WorkerId> = order.iter().map(|id| worker(*id)).collect();
            let expected: Vec<Option<u32>> =
                workers.iter().map(|w| model.get(w).copied()).collect();
            assert_eq!(resolved(&directory, &workers), expected, "order {order:?}");
            for (worker, slot) in workers.iter().zip(&expected) {
                assert_eq!(directory.get(*worker), *slot);
                assert_eq!(directory.contains(*worker), slot.is_some());
            }
        }
        assert_eq!(resolved(&directory, &[]), Vec::<Option<u32>>::new());
    }

    #[test]
    fn tells_ranks_of_one_worker_apart() {
        let mut directory = SlotDirectory::default();
        directory.insert(WorkerId::new(4, 1), 0);
        directory.insert(WorkerId::new(4, 0), 1);
        assert_eq!(
            resolved(
                &directory,
                &[
                    WorkerId::new(4, 0),
                    WorkerId::new(4, 1),
                    WorkerId::new(4, 2)
                ]
            ),
            vec![Some(1), Some(0), None]
        );
    }
}
