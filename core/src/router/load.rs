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
        self.compact_expiry();
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
        self.compact_expiry();
        expired
    }

    /// Drops the expiry records of bookings released (or booked again) before their deadline
    /// once such records outnumber the active bookings four to one. Checked as records are
    /// added: waiting for the oldest deadline would let a whole TTL of released bookings pile
    /// up (ten minutes by default), each keeping its request id allocated. A compaction visits
    /// the records left at the last one plus those added since, and comes at least three
    /// additions per active booking later, so it costs a constant per booking.
    fn compact_expiry(&mut self) {
        if self.expiry.len() > 1024 && self.expiry.len() as u64 > 4 * self.reservations {
            let active = &self.active;
            self.expiry.retain(|(_, request_id, generation)| {
                active
                    .get(&**request_id)
                    .is_some_and(|b| b.iter().any(|r| r.generation == *generation))
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::workers::Workers;
    use crate::router::{WorkerCapabilities, WorkerId, WorkerInfo};
    use std::time::Duration;

    fn worker() -> Arc<WorkerEntry> {
        let mut workers = Workers::default();
        let id = WorkerId::new(1, 0);
        assert!(workers.insert(WorkerInfo::new(
            id,
            Role::Decode,
            WorkerCapabilities::none()
        )));
        Arc::clone(workers.get(id).unwrap())
    }

    fn book(ledger: &mut LoadLedger, worker: &Arc<WorkerEntry>, id: &str, deadline: Instant) {
        ledger.reserve(
            id,
            Role::Decode,
            worker,
            16,
            ActiveChain::default(),
            deadline,
        );
    }

    #[test]
    fn released_bookings_records_stay_bounded_before_any_deadline_passes() {
        let worker = worker();
        let mut ledger = LoadLedger::new(Arc::default());
        let deadline = Instant::now() + Duration::from_secs(600);
        // Bookings that stay active, then many booked and released long before their TTL.
        for n in 0..300 {
            book(&mut ledger, &worker, &format!("kept-{n}"), deadline);
        }
        for n in 0..20_000 {
            let id = format!("done-{n}");
            book(&mut ledger, &worker, &id, deadline);
            assert_eq!(ledger.release(&id), 1);
            assert!(
                ledger.expiry.len() <= 4 * 301 + 1,
                "{}",
                ledger.expiry.len()
            );
        }
        // Booking a request again leaves the old record stale: it goes too.
        for _ in 0..5_000 {
            book(&mut ledger, &worker, "again", deadline);
        }
        assert!(
            ledger.expiry.len() <= 4 * 301 + 1,
            "{}",
            ledger.expiry.len()
        );
        assert_eq!(ledger.active_bookings(), 301);
        // Every active booking still expires at its deadline, and nothing else is released.
        assert_eq!(ledger.expire(deadline - Duration::from_secs(1)), 0);
        assert_eq!(ledger.expire(deadline), 301);
        assert_eq!(ledger.active_bookings(), 0);
        assert_eq!(worker.load.snapshot().active_requests, 0);
        assert_eq!(worker.load.snapshot().active_prefill_tokens, 0);
    }
}
