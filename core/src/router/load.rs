//! Load accounting: what each booking reserves on its worker, until the caller reports that
//! prefill completed and that the request finished, or until the booking's TTL expires.

use super::worker::Role;
use super::workers::{ActiveChain, ActiveChains, WorkerEntry};
use parking_lot::RwLock;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// What one booking holds on its worker.
struct Reservation {
    role: Role,
    worker: Arc<WorkerEntry>,
    prefill_tokens: u64,
    chain: ActiveChain,
    generation: u64,
}

impl Reservation {
    fn release(self, active: &RwLock<ActiveChains>) {
        self.worker
            .load
            .sub(self.prefill_tokens, &self.chain, active);
    }
}

/// The active bookings, by request id (one per role), and their expiry order.
pub(crate) struct LoadLedger {
    /// The active chains of every worker, shared with the bookings that read them (and with
    /// the router's other ledger).
    chains: Arc<RwLock<ActiveChains>>,
    /// The bookings by request id; the expiry records share the ids.
    active: HashMap<Arc<str>, Vec<Reservation>>,
    expiry: VecDeque<(Instant, Arc<str>, u64)>,
    next_generation: u64,
    reservations: u64,
}

impl LoadLedger {
    /// An empty ledger whose bookings hold their chains in `chains`.
    pub(crate) fn new(chains: Arc<RwLock<ActiveChains>>) -> Self {
        Self {
            chains,
            active: HashMap::new(),
            expiry: VecDeque::new(),
            next_generation: 0,
            reservations: 0,
        }
    }

    /// Reserves load for `request_id` in `role` on `worker`, replacing an earlier booking of the
    /// same request and role. The booking expires at `deadline` unless released earlier.
    pub(crate) fn reserve(
        &mut self,
        request_id: &str,
        role: Role,
        worker: &Arc<WorkerEntry>,
        prefill_tokens: u64,
        chain: ActiveChain,
        deadline: Instant,
    ) {
        let generation = self.next_generation;
        self.next_generation += 1;
        let request_id: Arc<str> = Arc::from(request_id);
        let bookings = self.active.entry(Arc::clone(&request_id)).or_default();
        if let Some(position) = bookings.iter().position(|r| r.role == role) {
            bookings.swap_remove(position).release(&self.chains);
            self.reservations -= 1;
        }
        worker.load.add(prefill_tokens, &chain, &self.chains);
        let reservation = Reservation {
            role,
            worker: Arc::clone(worker),
            prefill_tokens,
            chain,
            generation,
        };
        bookings.push(reservation);
        self.reservations += 1;
        self.expiry.push_back((deadline, request_id, generation));
    }

    /// Gives back the prefill tokens of every booking of `request_id`; repeats are harmless.
    pub(crate) fn prefill_complete(&mut self, request_id: &str) {
        if let Some(bookings) = self.active.get_mut(request_id) {
            for reservation in bookings {
                reservation
                    .worker
                    .load
                    .sub_prefill(reservation.prefill_tokens);
                reservation.prefill_tokens = 0;
            }
        }
    }

    /// Adds `blocks` generated output blocks to the active blocks of every booking of
    /// `request_id` (unshared, released with the booking); `false` if none is active.
    pub(crate) fn add_output_blocks(&mut self, request_id: &str, blocks: u64) -> bool {
        let Some(bookings) = self.active.get_mut(request_id) else {
            return false;
        };
        for reservation in bookings {
            reservation.chain.untracked_blocks += blocks;
            reservation.worker.load.add_untracked_blocks(blocks);
        }
        true
    }

    /// Gives back everything the bookings of `request_id` hold; returns how many it released.
    pub(crate) fn release(&mut self, request_id: &str) -> usize {
        let Some(bookings) = self.active.remove(request_id) else {
            return 0;
        };
        let released = bookings.len();
        self.reservations -= released as u64;
        for reservation in bookings {
            reservation.release(&self.chains);
        }
        released
    }

    /// Releases the bookings whose deadline is at or before `now`; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> u64 {
        let mut expired = 0;
        while let Some((deadline, _, _)) = self.expiry.front() {
            if *deadline > now {
                break;
            }
            let Some((_, request_id, generation)) = self.expiry.pop_front() else {
                break;
            };
            let Some(bookings) = self.active.get_mut(&*request_id) else {
                continue;
            };
            if let Some(position) = bookings.iter().position(|r| r.generation == generation) {
                bookings.swap_remove(position).release(&self.chains);
                self.reservations -= 1;
                expired += 1;
            }
            if bookings.is_empty() {
                self.active.remove(&*request_id);
            }
        }
        // Released bookings leave their expiry records behind; drop them once they dominate.
        if self.expiry.len() > 1024 && self.expiry.len() as u64 > 4 * self.reservations {
            let active = &self.active;
            self.expiry.retain(|(_, request_id, generation)| {
                active
                    .get(&**request_id)
                    .is_some_and(|b| b.iter().any(|r| r.generation == *generation))
            });
        }
        expired
    }

    /// Bookings holding load.
    pub(crate) fn active_bookings(&self) -> u64 {
        self.reservations
    }

    /// Whether `deadline` of the oldest booking has passed.
    pub(crate) fn has_expired(&self, now: Instant) -> bool {
        self.expiry
            .front()
            .is_some_and(|(deadline, _, _)| *deadline <= now)
    }
}
