//! The bounded table of which worker each session used last.

use dynamo_kv_router::router::{Role, WorkerId};
use std::collections::{HashMap, VecDeque};

/// The worker each session's previous request went to, per role, holding at most `capacity`
/// sessions: when full, the session that entered the table first is forgotten (O(1) per
/// request, so a flood of one-off sessions cannot grow memory or latency).
#[derive(Debug)]
pub struct SessionTable {
    capacity: usize,
    workers: HashMap<(Role, String), WorkerId>,
    order: VecDeque<(Role, String)>,
}

impl SessionTable {
    /// An empty table for at most `capacity` sessions (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            workers: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The worker `session`'s previous request in `role` went to.
    pub fn get(&self, role: Role, session: &str) -> Option<WorkerId> {
        self.workers.get(&(role, session.to_owned())).copied()
    }

    /// Records that `session`'s request in `role` went to `worker`.
    pub fn record(&mut self, role: Role, session: &str, worker: WorkerId) {
        let key = (role, session.to_owned());
        if let Some(previous) = self.workers.get_mut(&key) {
            *previous = worker;
            return;
        }
        while self.workers.len() >= self.capacity {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.workers.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.workers.insert(key, worker);
    }

    /// Number of sessions remembered.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Whether no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_role_and_updates_in_place() {
        let mut table = SessionTable::new(4);
        table.record(Role::Decode, "s", WorkerId::new(1, 0));
        table.record(Role::Prefill, "s", WorkerId::new(2, 0));
        table.record(Role::Decode, "s", WorkerId::new(3, 0));
        assert_eq!(table.get(Role::Decode, "s"), Some(WorkerId::new(3, 0)));
        assert_eq!(table.get(Role::Prefill, "s"), Some(WorkerId::new(2, 0)));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn forgets_the_oldest_session_when_full() {
        let mut table = SessionTable::new(2);
        table.record(Role::Decode, "a", WorkerId::new(1, 0));
        table.record(Role::Decode, "b", WorkerId::new(2, 0));
        table.record(Role::Decode, "c", WorkerId::new(3, 0));
        assert_eq!(table.len(), 2);
        assert_eq!(table.get(Role::Decode, "a"), None);
        assert_eq!(table.get(Role::Decode, "c"), Some(WorkerId::new(3, 0)));
    }
}
