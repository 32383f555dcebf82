//! Worker lifecycle and recovery state: which workers the index tracks, in which slot, and
//! which of them await a replay of lost events.

use super::KvIndex;
use crate::identity::WorkerId;
use crate::kv::event_cursor::EventCursor;

/// What the index knows about one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerIndexState {
    /// Blocks the worker holds in the index.
    pub blocks: usize,
    /// The first event id the worker must replay, when events were lost; until they are
    /// replayed its cache state is not trusted (lookups give it no cached prefix).
    pub replay_from: Option<u64>,
    /// The last event id applied.
    pub last_event_id: Option<u64>,
}

/// A worker that lost events and the first event id it must replay: a transport asks the
/// engine to replay from there and feeds the replayed events to the index in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplayRequest {
    /// The worker rank.
    pub worker: WorkerId,
    /// The first missing event id.
    pub from_event_id: u64,
}

pub(super) struct SlotState {
    pub(super) cursor: EventCursor,
    pub(super) blocks: usize,
    /// Override records of this slot.
    pub(super) overrides: usize,
    /// The slab entry of the last block this slot stored, if it took the fast path
    /// (`u32::MAX` when none): the parent of the worker's next store, more often than not.
    pub(super) last_stored: u32,
}

impl SlotState {
    pub(super) fn new() -> Self {
        Self {
            cursor: EventCursor::default(),
            blocks: 0,
            overrides: 0,
            last_stored: u32::MAX,
        }
    }
}

impl KvIndex {
    /// Starts tracking `worker`; returns `false` if it was already tracked.
    pub fn add_worker(&mut self, worker: WorkerId) -> bool {
        if self.by_worker.contains(worker) {
            return false;
        }
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(SlotState::new());
        self.by_worker.insert(worker, slot as u32);
        true
    }

    /// Stops tracking `worker` and drops every block it held; returns `false` if it was unknown.
    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        let Some(slot) = self.by_worker.remove(worker) else {
            return false;
        };
        let was_awaiting = self
            .slot_state(slot)
            .is_some_and(|state| state.cursor.awaiting());
        self.note_awaiting_change(was_awaiting, false);
        self.clear_slot(slot);
        self.slots[slot as usize] = None;
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        true
    }

    /// What the index knows about `worker`, if it is tracked.
    pub fn worker_state(&self, worker: WorkerId) -> Option<WorkerIndexState> {
        let state = self.slot_state(self.by_worker.get(worker)?)?;
        Some(WorkerIndexState {
            blocks: state.blocks,
            replay_from: state.cursor.replay_from(),
            last_event_id: state.cursor.last(),
        })
    }

    /// The first event id `worker` must replay, if it lost events (see [`ReplayRequest`]).
    pub fn replay_request(&self, worker: WorkerId) -> Option<u64> {
        self.worker_state(worker)?.replay_from
    }

    /// Every worker awaiting a replay, sorted by worker.
    pub fn replay_requests(&self) -> Vec<ReplayRequest> {
        let mut requests: Vec<ReplayRequest> = self
            .by_worker
            .iter()
            .filter_map(|(worker, slot)| {
                let from_event_id = self.slot_state(slot)?.cursor.replay_from()?;
                Some(ReplayRequest {
                    worker,
                    from_event_id,
                })
            })
            .collect();
        requests.sort_unstable();
        requests
    }

    /// Number of workers awaiting a replay.
    pub fn workers_awaiting_recovery(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|state| state.cursor.awaiting())
            .count()
    }

    /// Continues `worker`'s event numbering after `last_event_id`: its blocks were restored from
    /// a checkpoint that holds its events up to that id, so those are duplicates from now on
    /// and the next one applies. Returns `false` if the worker is not tracked.
    pub fn resume_event_numbering(&mut self, worker: WorkerId, last_event_id: u64) -> bool {
        let Some(slot) = self.by_worker.get(worker) else {
            return false;
        };
        let Some(state) = self.slot_state_mut(slot) else {
            return false;
        };
        let was_awaiting = state.cursor.awaiting();
        state.cursor.resume_after(last_event_id);
        self.note_awaiting_change(was_awaiting, false);
        true
    }

    /// Gives up on replaying `worker`'s lost events (the engine could not replay them): its
    /// cache state is dropped and its next event, whatever its id, starts its stream again.
    /// Returns `false` if the worker is not tracked.
    pub fn abandon_recovery(&mut self, worker: WorkerId) -> bool {
        let Some(slot) = self.by_worker.get(worker) else {
            return false;
        };
        self.clear_slot(slot);
        if let Some(state) = self.slot_state_mut(slot) {
            let was_awaiting = state.cursor.awaiting();
            state.cursor.resync();
            self.note_awaiting_change(was_awaiting, false);
        }
        self.counters.abandoned_recoveries += 1;
        tracing::warn!(%worker, "KV event replay abandoned; the worker's cache state was reset");
        true
    }

    pub(super) fn slot_state(&self, slot: u32) -> Option<&SlotState> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub(super) fn slot_state_mut(&mut self, slot: u32) -> Option<&mut SlotState> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }
}
