//! The registry of workers: who is registered, in which role, with which capabilities and load.

mod active_chains;
mod load_cell;

pub(crate) use active_chains::{ActiveChains, Holder};
pub(crate) use load_cell::{ActiveChain, WorkerLoadCell};

use super::worker::{Role, WorkerId, WorkerInfo};
use crate::kv::mix;
use hashbrown::HashTable;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers every role membership list ever built, across routers, so a booking's reusable
/// candidate list can tell whether it still matches its role's workers.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// One registered worker and the load the router has reserved on it.
pub(crate) struct WorkerEntry {
    pub(crate) info: WorkerInfo,
    pub(crate) source_endpoint: Option<Arc<str>>,
    pub(crate) load: WorkerLoadCell,
}

impl WorkerEntry {
    fn new(info: WorkerInfo) -> Self {
        let source_endpoint = info
            .capabilities
            .router_hint_source_control_endpoint
            .as_deref()
            .map(Arc::from);
        let load = WorkerLoadCell::new(info.id);
        Self {
            info,
            source_endpoint,
            load,
        }
    }
}

/// A role's workers, sorted by id, with their ids alone for index lookups and their load
/// cells' holder keys alone for active-chain lookups.
#[derive(Default)]
pub(crate) struct RoleWorkers {
    pub(crate) entries: Vec<Arc<WorkerEntry>>,
    pub(crate) ids: Vec<WorkerId>,
    pub(crate) holders: Vec<Holder>,
    /// The position of each holder in `holders`, by its load cell's serial number.
    positions: HashTable<usize>,
    /// Unique to this list of entries (never 0).
    pub(crate) generation: u64,
}

impl RoleWorkers {
    /// The position of the worker whose load cell is `holder`; `None` when no worker of the
    /// list holds that cell (another role's, or a registration since removed). One hashed
    /// lookup: a booking asks once per active chain that shares its first block.
    pub(crate) fn position_of(&self, holder: Holder) -> Option<usize> {
        self.positions
            .find(mix(holder.cell), |&position| {
                self.holders[position] == holder
            })
            .copied()
    }
}

/// Every registered worker, by id and by role.
#[derive(Default)]
pub(crate) struct Workers {
    by_id: BTreeMap<WorkerId, Arc<WorkerEntry>>,
    by_role: BTreeMap<Role, RoleWorkers>,
}

impl Workers {
    /// Adds a worker; `false` if its id is already registered.
    pub(crate) fn insert(&mut self, info: WorkerInfo) -> bool {
        if self.by_id.contains_key(&info.id) {
            return false;
        }
        let entry = Arc::new(WorkerEntry::new(info));
        self.by_id.insert(entry.info.id, Arc::clone(&entry));
        self.rebuild_role(entry.info.role);
        true
    }

    /// Removes a worker; `None` if it was not registered.
    pub(crate) fn remove(&mut self, id: WorkerId) -> Option<Arc<WorkerEntry>> {
        let entry = self.by_id.remove(&id)?;
        self.rebuild_role(entry.info.role);
        Some(entry)
    }

    /// The worker `id`, if registered.
    pub(crate) fn get(&self, id: WorkerId) -> Option<&Arc<WorkerEntry>> {
        self.by_id.get(&id)
    }

    /// The workers of `role`, sorted by id.
    pub(crate) fn role(&self, role: Role) -> Option<&RoleWorkers> {
        self.by_role
            .get(&role)
            .filter(|workers| !workers.ids.is_empty())
    }

    /// Each role that registered workers serve, with those workers (sorted by id).
    pub(crate) fn roles(&self) -> impl Iterator<Item = (Role, Vec<WorkerId>)> + '_ {
        self.by_role
            .iter()
            .filter(|(_, workers)| !workers.ids.is_empty())
            .map(|(role, workers)| (*role, workers.ids.clone()))
    }

    /// Every registered worker, sorted by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<WorkerEntry>> {
        self.by_id.values()
    }

    fn rebuild_role(&mut self, role: Role) {
        let entries: Vec<Arc<WorkerEntry>> = self
            .by_id
            .values()
            .filter(|entry| entry.info.role == role)
            .cloned()
            .collect();
        let ids = entries.iter().map(|entry| entry.info.id).collect();
        let holders: Vec<Holder> = entries.iter().map(|entry| entry.load.holder()).collect();
        let mut positions = HashTable::with_capacity(holders.len());
        for (position, holder) in holders.iter().enumerate() {
            positions.insert_unique(mix(holder.cell), position, |&position| {
                mix(holders[position].cell)
            });
        }
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        self.by_role.insert(
            role,
            RoleWorkers {
                entries,
                ids,
                holders,
                positions,
                generation,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::WorkerCapabilities;

    fn info(id: u64, role: Role) -> WorkerInfo {
        WorkerInfo::new(WorkerId::new(id, 0), role, WorkerCapabilities::none())
    }

    fn holder_of(workers: &Workers, id: u64) -> Holder {
        workers
            .get(WorkerId::new(id, 0))
            .map(|entry| entry.load.holder())
            .unwrap()
    }

    #[test]
    fn positions_follow_the_role_list_and_forget_removed_registrations() {
        let mut workers = Workers::default();
        for id in [5, 1, 9, 3] {
            assert!(workers.insert(info(id, Role::Decode)));
        }
        assert!(workers.insert(info(7, Role::Prefill)));
        let decode = workers.role(Role::Decode).unwrap();
        for (position, id) in [1, 3, 5, 9].into_iter().enumerate() {
            assert_eq!(decode.ids[position], WorkerId::new(id, 0));
            assert_eq!(decode.position_of(holder_of(&workers, id)), Some(position));
        }
        // Another role's worker is not in the list.
        assert_eq!(decode.position_of(holder_of(&workers, 7)), None);
        // A registration removed and made again gets a new cell: the old one is unknown.
        let old = holder_of(&workers, 3);
        workers.remove(WorkerId::new(3, 0));
        assert!(workers.insert(info(3, Role::Decode)));
        let decode = workers.role(Role::Decode).unwrap();
        assert_eq!(decode.position_of(old), None);
        assert_eq!(decode.position_of(holder_of(&workers, 3)), Some(1));
        assert_eq!(decode.position_of(holder_of(&workers, 9)), Some(3));
    }
}
