//! The booking ids the service holds: live reservations, and selections cached by `/select`
//! for a later `POST /reservations`.

use crate::worker_record::PartitionKey;
use dynamo_kv_router::kv::SequenceHash;
use dynamo_kv_router::plugins::SessionContext;
use dynamo_kv_router::router::{Role, WorkerId};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a `/select` result can be booked by its `selection_id` (upstream: 120 s).
pub const PENDING_SELECTION_TTL: Duration = Duration::from_secs(120);
/// Most cached selections (upstream: 4096); the oldest go first.
pub const PENDING_SELECTION_CAPACITY: usize = 4096;

/// A live booking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Its partition.
    pub partition: PartitionKey,
    /// The booked worker rank; `None` while the booking is being made.
    pub worker: Option<WorkerId>,
    /// When it was made.
    pub since: Instant,
}

/// A selection `/select` made under a `selection_id`, bookable later.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingSelection {
    /// The chosen worker rank.
    pub worker: WorkerId,
    /// The role it was chosen for.
    pub role: Role,
    /// The prompt's sequence hashes.
    pub sequence_hashes: Vec<SequenceHash>,
    /// The prompt length.
    pub isl_tokens: usize,
    /// The session.
    pub session: SessionContext,
    /// When it was cached.
    pub at: Instant,
}

/// Live reservations by selection id (ids are unique across partitions, as upstream).
#[derive(Default)]
pub struct ReservationIndex {
    live: HashMap<String, Reservation>,
    inserts: u64,
}

/// The id is already booked or being booked.
#[derive(Debug, PartialEq, Eq)]
pub struct DuplicateSelection;

impl ReservationIndex {
    /// Takes `selection_id` for a booking in `partition`.
    pub fn claim(
        &mut self,
        selection_id: &str,
        partition: &PartitionKey,
        now: Instant,
    ) -> Result<(), DuplicateSelection> {
        if self.live.contains_key(selection_id) {
            return Err(DuplicateSelection);
        }
        self.live.insert(
            selection_id.to_owned(),
            Reservation {
                partition: partition.clone(),
                worker: None,
                since: now,
            },
        );
        self.inserts += 1;
        Ok(())
    }

    /// Completes a claim with the booked worker.
    pub fn install(&mut self, selection_id: &str, worker: WorkerId) {
        if let Some(reservation) = self.live.get_mut(selection_id) {
            reservation.worker = Some(worker);
        }
    }

    /// Gives up a claim whose booking failed.
    pub fn abandon(&mut self, selection_id: &str) {
        if self
            .live
            .get(selection_id)
            .is_some_and(|reservation| reservation.worker.is_none())
        {
            self.live.remove(selection_id);
        }
    }

    /// The booked reservation `selection_id` (not a claim in flight).
    pub fn get(&self, selection_id: &str) -> Option<&Reservation> {
        self.live
            .get(selection_id)
            .filter(|reservation| reservation.worker.is_some())
    }

    /// Removes the booked reservation `selection_id`.
    pub fn remove(&mut self, selection_id: &str) -> Option<Reservation> {
        self.get(selection_id)?;
        self.live.remove(selection_id)
    }

    /// Removes every reservation on `worker_id` (any rank); returns their ids.
    pub fn remove_worker(&mut self, worker_id: u64) -> Vec<String> {
        let ids: Vec<String> = self
            .live
            .iter()
            .filter(|(_, reservation)| {
                reservation
                    .worker
                    .is_some_and(|worker| worker.worker_id == worker_id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            self.live.remove(id);
        }
        ids
    }

    /// Drops booked reservations older than `ttl` (the router released their load by then).
    pub fn expire(&mut self, now: Instant, ttl: Duration) {
        self.live.retain(|_, reservation| {
            reservation.worker.is_none() || now.duration_since(reservation.since) <= ttl
        });
    }

    /// Whether enough claims went by since the last sweep to sweep again.
    pub fn due_for_sweep(&self) -> bool {
        self.inserts.is_multiple_of(1024)
    }

    /// Live reservations.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether none is live.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

/// Selections cached by `/select`, by partition and selection id.
#[derive(Default)]
pub struct PendingSelections {
    entries: HashMap<(PartitionKey, String), PendingSelection>,
}

impl PendingSelections {
    /// Caches `selection` under `selection_id`, replacing an earlier one.
    pub fn insert(&mut self, key: PartitionKey, selection_id: String, selection: PendingSelection) {
        let now = selection.at;
        self.entries
            .retain(|_, pending| now.duration_since(pending.at) <= PENDING_SELECTION_TTL);
        if self.entries.len() >= PENDING_SELECTION_CAPACITY
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, pending)| pending.at)
                .map(|(id, _)| id.clone())
        {
            self.entries.remove(&oldest);
        }
        self.entries.insert((key, selection_id), selection);
    }

    /// The live selection cached under `selection_id`.
    pub fn get(
        &self,
        key: &PartitionKey,
        selection_id: &str,
        now: Instant,
    ) -> Option<PendingSelection> {
        self.entries
            .get(&(key.clone(), selection_id.to_owned()))
            .filter(|pending| now.duration_since(pending.at) <= PENDING_SELECTION_TTL)
            .cloned()
    }

    /// Forgets the selection cached under `selection_id`.
    pub fn remove(&mut self, key: &PartitionKey, selection_id: &str) {
        self.entries.remove(&(key.clone(), selection_id.to_owned()));
    }
}
