//! The predictions made alongside KV events (upstream's `router_predicted_ttl_secs`): which
//! worker is predicted to cache which block, named by its sequence hash, until when.
//!
//! Built for the booking path, which records every booked prompt (512 blocks for an
//! 8,192-token prompt) and reads the predicted prefixes of every candidate:
//! - one table entry per block, listing the workers predicted to cache it with each one's
//!   expiry (inline for the usual single worker): recording a booking is one probe per block
//!   and nothing else (no tree, no lineage, no engine ids, no removal queue), and the overlap
//!   pass is one probe per block whatever the number of candidates;
//! - a prediction whose expiry has passed counts as absent at once, whenever it is read;
//! - expired predictions are swept out of the table a quarter of a TTL apart, so the table
//!   holds what the last TTL and a quarter recorded (each sweep walks the table once: a few
//!   passes per recorded entry over its life, whatever the TTL).
//!
//! Time is whatever the caller passes (a [`Duration`] since its clock's origin, see
//! [`crate::clock`]).

use super::PredictedCacheStats;
use crate::block_identity::SequenceHash;
use crate::identity::WorkerId;
use crate::kv::index_hasher::U64Map;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Duration;

/// One worker's prediction of a block: its slot and when the prediction expires (nanoseconds
/// of the caller's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Holder {
    expiry: u64,
    slot: u32,
}

/// The workers predicted to cache one block.
#[derive(Clone, Debug)]
enum Holders {
    /// One worker, the usual case under cache-aware routing (no allocation).
    One(Holder),
    /// Two or more, in no particular order.
    Many(Vec<Holder>),
}

impl Holders {
    fn as_slice(&self) -> &[Holder] {
        match self {
            Holders::One(one) => std::slice::from_ref(one),
            Holders::Many(many) => many,
        }
    }

    /// Sets `slot`'s expiry, adding it if it is not there.
    fn set(&mut self, holder: Holder) {
        match self {
            Holders::One(one) if one.slot == holder.slot => one.expiry = holder.expiry,
            Holders::One(one) => *self = Holders::Many(vec![*one, holder]),
            Holders::Many(many) => match many.iter_mut().find(|h| h.slot == holder.slot) {
                Some(found) => found.expiry = holder.expiry,
                None => many.push(holder),
            },
        }
    }

    /// Keeps the holders `keep` says to keep; returns whether any is left.
    fn retain(&mut self, mut keep: impl FnMut(&Holder) -> bool) -> bool {
        match self {
            Holders::One(one) => keep(one),
            Holders::Many(many) => {
                many.retain(|holder| keep(holder));
                match *many.as_slice() {
                    [] => false,
                    [one] => {
                        *self = Holders::One(one);
                        true
                    }
                    _ => true,
                }
            }
        }
    }
}

/// No candidate position (a slot no candidate of the pass has).
const NO_POSITION: u32 = u32::MAX;

/// The predictions of tracked workers, block by block, with their expiries.
#[derive(Debug)]
pub struct PredictedBlocks {
    ttl: Duration,
    /// Each tracked worker's slot. Slots are reused: a worker's predictions leave with it.
    slots: HashMap<WorkerId, u32>,
    /// Slots given back by workers that left.
    free_slots: Vec<u32>,
    /// Slots handed out so far (the free ones included).
    slot_count: u32,
    /// Who is predicted to cache each block (by sequence hash).
    blocks: U64Map<Holders>,
    /// (worker, block) predictions in the table, expired ones not yet swept included.
    entries: usize,
    /// When the table is next swept of expired entries.
    next_sweep: Duration,
    stats: PredictedCacheStats,
}

/// A duration in whole nanoseconds, saturating (584 years fit).
fn nanos(at: Duration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

impl PredictedBlocks {
    /// An empty table whose predictions live for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            slots: HashMap::new(),
            free_slots: Vec::new(),
            slot_count: 0,
            blocks: U64Map::default(),
            entries: 0,
            next_sweep: Duration::ZERO,
            stats: PredictedCacheStats::default(),
        }
    }

    /// Starts tracking `worker` (already tracked: nothing changes).
    pub fn add_worker(&mut self, worker: WorkerId) {
        if self.slots.contains_key(&worker) {
            return;
        }
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slot_count += 1;
            self.slot_count - 1
        });
        self.slots.insert(worker, slot);
    }

    /// Stops tracking `worker` and drops its predictions; returns whether it was tracked.
    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        let Some(slot) = self.slots.remove(&worker) else {
            return false;
        };
        self.drop_slot(slot);
        self.free_slots.push(slot);
        true
    }

    /// Whether `worker` is tracked.
    pub fn tracks(&self, worker: WorkerId) -> bool {
        self.slots.contains_key(&worker)
    }

    /// Drops every prediction of `worker`, which stays tracked (its engine cleared its cache).
    pub fn forget_worker(&mut self, worker: WorkerId) {
        if let Some(&slot) = self.slots.get(&worker) {
            self.drop_slot(slot);
        }
    }

    /// Drops every prediction of the worker of `slot`.
    fn drop_slot(&mut self, slot: u32) {
        self.drop_where(|holder| holder.slot == slot);
    }

    /// Drops every prediction `drop` picks, and every block left without one; returns how
    /// many it dropped.
    fn drop_where(&mut self, drop: impl Fn(&Holder) -> bool) -> usize {
        let mut dropped = 0;
        self.blocks.retain(|_, holders| {
            holders.retain(|holder| {
                let keep = !drop(holder);
                dropped += usize::from(!keep);
                keep
            })
        });
        self.entries -= dropped;
        dropped
    }

    /// Drops the prediction that `worker` caches `block`; returns whether there was one (an
    /// expired one not yet swept counts).
    pub fn forget(&mut self, worker: WorkerId, block: SequenceHash) -> bool {
        self.forget_blocks(worker, std::slice::from_ref(&block)) == 1
    }

    /// Drops the predictions that `worker` caches `blocks` (its engine removed them); returns
    /// how many there were.
    pub fn forget_blocks(&mut self, worker: WorkerId, blocks: &[SequenceHash]) -> usize {
        let Some(&slot) = self.slots.get(&worker) else {
            return 0;
        };
        let mut forgotten = 0;
        for block in blocks {
            // One probe, whether the block keeps other holders or leaves the table.
            let Entry::Occupied(mut occupied) = self.blocks.entry(block.0) else {
                continue;
            };
            let mut found = false;
            let left = occupied.get_mut().retain(|holder| {
                found |= holder.slot == slot;
                holder.slot != slot
            });
            if !left {
                occupied.remove();
            }
            forgotten += usize::from(found);
        }
        self.entries -= forgotten;
        forgotten
    }

    /// Records that `blocks` were booked on `worker` at `now`: each counts as cached there
    /// until `now + ttl` (a renewal for those already predicted). Returns whether `worker` is
    /// tracked (an untracked worker's bookings are not recorded).
    pub fn record(&mut self, worker: WorkerId, blocks: &[SequenceHash], now: Duration) -> bool {
        let Some(&slot) = self.slots.get(&worker) else {
            return false;
        };
        if self.blocks.is_empty() {
            // Nothing can expire before this booking's first quarter TTL is up.
            self.next_sweep = now.saturating_add(self.ttl / 4);
        } else {
            self.sweep_if_due(now);
        }
        let holder = Holder {
            expiry: nanos(now.saturating_add(self.ttl)),
            slot,
        };
        self.blocks.reserve(blocks.len());
        for block in blocks {
            // One probe whether the block is new or renewed.
            match self.blocks.entry(block.0) {
                Entry::Occupied(mut occupied) => {
                    let holders = occupied.get_mut();
                    let before = holders.as_slice().len();
                    holders.set(holder);
                    self.entries += holders.as_slice().len() - before;
                }
                Entry::Vacant(vacant) => {
                    vacant.insert(Holders::One(holder));
                    self.entries += 1;
                }
            }
        }
        self.stats.bookings += 1;
        self.stats.recorded_blocks += blocks.len() as u64;
        true
    }

    /// For each of `workers`, the number of leading `hashes` predicted cached on it at `now`,
    /// into `out` (untracked workers get 0); one probe per block, stopping at the first block
    /// that extends no worker's prefix.
    pub fn prefix_lengths(
        &self,
        hashes: &[SequenceHash],
        workers: &[WorkerId],
        now: Duration,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        out.resize(workers.len(), 0);
        if self.blocks.is_empty() || hashes.is_empty() {
            return;
        }
        let now = nanos(now);
        let mut position_of_slot = vec![NO_POSITION; self.slot_count as usize];
        for (position, worker) in workers.iter().enumerate() {
            if let Some(&slot) = self.slots.get(worker)
                && let Some(entry) = position_of_slot.get_mut(slot as usize)
            {
                *entry = position as u32;
            }
        }
        for (depth, block) in hashes.iter().enumerate() {
            let Some(holders) = self.blocks.get(&block.0) else {
                break;
            };
            let mut extended = false;
            for holder in holders.as_slice() {
                let position = position_of_slot
                    .get(holder.slot as usize)
                    .copied()
                    .unwrap_or(NO_POSITION);
                // A worker continues when its prefix reached this depth: it held every block
                // before this one.
                if let Some(length) = out.get_mut(position as usize)
                    && *length == depth
                    && holder.expiry > now
                {
                    *length = depth + 1;
                    extended = true;
                }
            }
            if !extended {
                break;
            }
        }
    }

    /// The number of leading `hashes` predicted cached on `worker` at `now`.
    pub fn prefix_length(&self, hashes: &[SequenceHash], worker: WorkerId, now: Duration) -> usize {
        let mut out = Vec::with_capacity(1);
        self.prefix_lengths(hashes, &[worker], now, &mut out);
        out.first().copied().unwrap_or(0)
    }

    /// Whether [`PredictedBlocks::sweep_if_due`] at `now` would sweep (cheap: for a caller
    /// holding a shared lock to decide whether to take it exclusively).
    pub fn sweep_due(&self, now: Duration) -> bool {
        !self.blocks.is_empty() && now >= self.next_sweep
    }

    /// Sweeps the expired entries out of the table when a quarter of a TTL has passed since
    /// the last sweep.
    pub fn sweep_if_due(&mut self, now: Duration) {
        if self.sweep_due(now) {
            self.sweep(now);
        }
    }

    /// Removes every prediction expired by `now` from the table.
    pub fn sweep(&mut self, now: Duration) {
        let at = nanos(now);
        let expired = self.drop_where(|holder| holder.expiry <= at);
        self.stats.expired_blocks += expired as u64;
        self.next_sweep = now.saturating_add(self.ttl / 4);
    }

    /// (worker, block) predictions in the table (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether the table holds no prediction.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// What it did so far (`entries`: what [`PredictedBlocks::len`] says; it never prunes).
    pub fn stats(&self) -> PredictedCacheStats {
        PredictedCacheStats {
            entries: self.entries as u64,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::predicted_cache::tests::{blocks, w};
    use std::collections::BTreeMap;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_booking_gives_its_worker_the_prefix_until_the_ttl() {
        let mut table = PredictedBlocks::new(secs(10));
        table.add_worker(w(1));
        table.add_worker(w(2));
        assert!(table.record(w(1), &blocks(0..4), secs(0)));
        let mut out = Vec::new();
        table.prefix_lengths(&blocks(0..6), &[w(1), w(2), w(3)], secs(9), &mut out);
        assert_eq!(out, vec![4, 0, 0]);
        let skipped = [SequenceHash(9), SequenceHash(1), SequenceHash(2)];
        assert_eq!(
            table.prefix_length(&skipped, w(1), secs(9)),
            0,
            "stops at the first gap"
        );
        assert_eq!(
            table.prefix_length(&blocks(0..4), w(1), secs(10)),
            0,
            "expired"
        );
        assert!(!table.record(w(3), &blocks(0..4), secs(0)), "untracked");
    }

    #[test]
    fn a_renewal_pushes_the_expiry_back_block_by_block() {
        let mut table = PredictedBlocks::new(secs(10));
        table.add_worker(w(1));
        table.record(w(1), &blocks(0..4), secs(0));
        table.record(w(1), &blocks(0..2), secs(5));
        assert_eq!(table.prefix_length(&blocks(0..4), w(1), secs(12)), 2);
        assert_eq!(table.prefix_length(&blocks(0..4), w(1), secs(15)), 0);
        let stats = table.stats();
        assert_eq!((stats.bookings, stats.recorded_blocks), (2, 6));
    }

    #[test]
    fn sweeps_drop_expired_entries_a_quarter_ttl_apart() {
        let mut table = PredictedBlocks::new(secs(8));
        table.add_worker(w(1));
        table.record(w(1), &blocks(0..4), secs(0));
        assert!(
            !table.sweep_due(secs(1)),
            "the first sweep is a quarter TTL away"
        );
        table.record(w(1), &blocks(10..12), secs(2));
        assert_eq!(table.len(), 6);
        table.sweep_if_due(secs(8));
        assert_eq!(table.len(), 2);
        assert_eq!(table.stats().expired_blocks, 4);
        assert!(!table.sweep_due(secs(9)));
        assert!(table.sweep_due(secs(10)));
        table.sweep(secs(10));
        assert!(table.is_empty());
        assert!(!table.sweep_due(secs(100)), "nothing to sweep");
    }

    #[test]
    fn forgetting_and_leaving_drop_predictions() {
        let mut table = PredictedBlocks::new(secs(10));
        table.add_worker(w(1));
        table.add_worker(w(2));
        table.record(w(1), &blocks(0..4), secs(0));
        table.record(w(2), &blocks(0..4), secs(0));
        assert!(table.forget(w(1), SequenceHash(2)));
        assert!(!table.forget(w(1), SequenceHash(2)));
        assert_eq!(table.prefix_length(&blocks(0..4), w(1), secs(1)), 2);
        table.forget_worker(w(2));
        assert!(table.tracks(w(2)));
        assert_eq!(table.prefix_length(&blocks(0..4), w(2), secs(1)), 0);
        table.record(w(2), &blocks(0..4), secs(1));
        assert!(table.remove_worker(w(2)));
        assert!(!table.remove_worker(w(2)));
        table.add_worker(w(2));
        assert_eq!(
            table.prefix_length(&blocks(0..4), w(2), secs(1)),
            0,
            "a worker that comes back starts empty"
        );
        assert_eq!(table.len(), 3);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

        /// Prefix lengths agree with a plain map of (worker, block) to expiry, whatever the
        /// bookings, forgets, sweeps and clock steps.
        #[test]
        fn agrees_with_a_plain_model(
            ttl_ms in 0u64..3_000,
            steps in proptest::collection::vec(
                (0u64..1_500, 0u64..4, 0u64..4, 0u64..10, 0u8..12),
                1..200,
            ),
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let mut table = PredictedBlocks::new(ttl);
            let mut model: BTreeMap<(u64, u64), Duration> = BTreeMap::new();
            for id in 0..3 {
                table.add_worker(w(id));
            }
            let mut now = Duration::ZERO;
            for (advance_ms, worker, start, len, action) in steps {
                now += Duration::from_millis(advance_ms);
                let prompt = blocks(start..start + len);
                match action {
                    0 => {
                        let forgotten = table.forget_blocks(w(worker), &prompt);
                        let held = prompt
                            .iter()
                            .filter(|block| model.remove(&(worker, block.0)).is_some())
                            .count();
                        proptest::prop_assert_eq!(forgotten, held);
                    }
                    1 => {
                        table.forget_worker(w(worker));
                        model.retain(|(owner, _), _| *owner != worker);
                    }
                    2 => table.sweep(now),
                    3 => {
                        // Leaves and comes back: its slot may go to another worker meanwhile.
                        table.remove_worker(w(worker));
                        table.add_worker(w(3));
                        table.remove_worker(w(3));
                        if worker < 3 {
                            table.add_worker(w(worker));
                        }
                        model.retain(|(owner, _), _| *owner != worker);
                    }
                    _ => {
                        let tracked = table.record(w(worker), &prompt, now);
                        proptest::prop_assert_eq!(tracked, worker < 3);
                        if tracked {
                            for block in &prompt {
                                model.insert((worker, block.0), now + ttl);
                            }
                        }
                    }
                }
                let probe = blocks(0..12);
                let workers: Vec<WorkerId> = (0..4).map(w).collect();
                let mut out = Vec::new();
                table.prefix_lengths(&probe, &workers, now, &mut out);
                for (id, length) in out.iter().enumerate() {
                    let expected = probe
                        .iter()
                        .take_while(|block| {
                            model.get(&(id as u64, block.0)).is_some_and(|e| *e > now)
                        })
                        .count();
                    proptest::prop_assert_eq!(*length, expected, "worker {} at {:?}", id, now);
                }
                let live = model.values().filter(|e| **e > now).count();
                proptest::prop_assert!(table.len() >= live);
                table.sweep(now);
                proptest::prop_assert_eq!(table.len(), live);
                model.retain(|_, e| *e > now);
            }
        }
    }
}
