//! An open-addressing table from a 64-bit block key (a sequence or engine hash) to a slab
//! index: a slot is one `u64` holding the high 32 bits of the key's hash (its tag) and the
//! slab index, so a probe usually touches one cache line and reads the slab (where the keys
//! live) only for a slot whose tag matches. The home slot is computed from the tag alone
//! (`tag · slots / 2^32`), so growing and deleting never read the slab, and the slot count
//! need not be a power of two: the table grows by half, which keeps it 58–88 % full (a
//! doubling table can sit at 44 %, and at a million blocks its slots would cost more than
//! the slab). Linear probing in Robin Hood order (along a run, the entries' home slots never
//! go down), so a probe for an absent key stops at the first entry that lies nearer its home
//! than the key would, instead of at the end of the run (at 7/8 full, an expected 4.5 slots
//! read instead of 32); backward-shift deletion (no tombstones); at most 2^32 slots.

use super::huge_page_array::HugePageArray;
use super::index_hasher::mix;

/// Tag and slab index of one occupied slot; 0 is an empty slot.
type Slot = u64;

/// Slots per 64-byte cache line.
const SLOTS_PER_LINE: usize = 8;

/// The tag half of a slot.
const TAG: u64 = 0xFFFF_FFFF_0000_0000;

/// Key hash → slab index, with the keys kept by the caller.
#[derive(Default)]
pub(crate) struct BlockTable {
    slots: HugePageArray,
    len: usize,
}

/// Where [`BlockTable::find_or_vacancy`] found a key absent: the slot ending its probe, empty
/// or held by an entry nearer its home (`None` in a table with no slots yet, or
/// [`Vacancy::UNPROBED`] when no probe ran; then [`BlockTable::fill`] places the entry
/// itself).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vacancy {
    at: Option<usize>,
}

impl Vacancy {
    /// A vacancy no probe found: [`BlockTable::fill`] places the entry itself.
    pub(crate) const UNPROBED: Vacancy = Vacancy { at: None };
}

/// The hash the table files `key` under.
#[inline]
pub(crate) fn key_hash(key: u64) -> u64 {
    mix(key)
}

#[inline]
fn slot_of(hash: u64, block: u32) -> Slot {
    // Block indices are stored plus one, so no occupied slot is 0.
    (hash & TAG) | (u64::from(block) + 1)
}

#[inline]
fn block_of(slot: Slot) -> u32 {
    (slot as u32).wrapping_sub(1)
}

impl BlockTable {
    /// A table with room for `blocks` entries before it grows.
    pub(crate) fn with_capacity(blocks: usize) -> Self {
        let mut table = Self::default();
        if blocks > 0 {
            table.slots = HugePageArray::zeroed(capacity_for(blocks));
        }
        table
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot where the probe for a key hashed to `hash` (or a slot's tag) starts.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        (((hash >> 32) * self.slots.len() as u64) >> 32) as usize
    }

    /// The slot after `at`, wrapping around.
    #[inline]
    fn next(&self, at: usize) -> usize {
        if at + 1 == self.slots.len() {
            0
        } else {
            at + 1
        }
    }

    /// Hints the CPU to load the slots where the probe for `hash` starts, two cache lines of
    /// them (a store prefetches the slots of the blocks after the one it is storing, so their
    /// misses overlap; a probe for a key that is absent, as for every new block, reads on
    /// until an entry nearer its home, which at 7/8 full can reach into the next line).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let home = self.home(hash);
        if let Some(slot) = self.slots.get(home) {
            prefetch(slot);
        }
        if let Some(slot) = self.slots.get(home + SLOTS_PER_LINE) {
            prefetch(slot);
        }
    }

    /// How far `at` lies past `home`, wrapping around.
    #[inline]
    fn distance(&self, home: usize, at: usize) -> usize {
        if at >= home {
            at - home
        } else {
            at + self.slots.len() - home
        }
    }

    /// The slab index filed under `hash` for which `is_key` holds.
    #[inline]
    pub(crate) fn find(&self, hash: u64, is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find_or_vacancy(hash, is_key).ok()
    }

    /// [`BlockTable::find`], or where `hash`'s key would go when it is absent: the probe
    /// for an absent key ends at the slot an insert would take (empty, or held by an entry
    /// nearer its home, which the insert shifts along), so [`BlockTable::fill`] can file it
    /// there without walking the run again.
    #[inline]
    pub(crate) fn find_or_vacancy(
        &self,
        hash: u64,
        mut is_key: impl FnMut(u32) -> bool,
    ) -> Result<u32, Vacancy> {
        let tag = hash & TAG;
        self.walk(hash, |slot| slot & TAG == tag && is_key(block_of(slot)))
            .map(|at| block_of(self.slots[at]))
            .map_err(|at| Vacancy { at })
    }

    /// Walks the run from the home slot of `hash` (a key's hash, or an occupied slot) in Robin
    /// Hood order: `Ok` with the first slot for which `wanted` holds, else `Err` with where the
    /// walk ended, the slot an insert of `hash` would take (empty, or held by an entry nearer
    /// its home); `Err(None)` in a table with no slots.
    #[inline]
    fn walk(
        &self,
        hash: u64,
        mut wanted: impl FnMut(Slot) -> bool,
    ) -> Result<usize, Option<usize>> {
        let mut at = self.home(hash);
        let mut distance = 0;
        loop {
            let Some(&slot) = self.slots.get(at) else {
                return Err(None);
            };
            if slot == 0 || self.distance(self.home(slot), at) < distance {
                return Err(Some(at));
            }
            if wanted(slot) {
                return Ok(at);
            }
            at = self.next(at);
            distance += 1;
        }
    }

    /// Files `block` under `hash` at `vacancy`, which [`BlockTable::find_or_vacancy`] returned
    /// for `hash` with no change to the table since (the table grows first when it must, and
    /// then places the entry as [`BlockTable::insert`] does). Always inlined: the store's fast
    /// path calls it for every new block.
    #[inline(always)]
    pub(crate) fn fill(&mut self, vacancy: Vacancy, hash: u64, block: u32) {
        match vacancy.at {
            Some(at) if (self.len + 1) * 8 <= self.slots.len() * 7 => {
                self.shift_in(at, slot_of(hash, block));
                self.len += 1;
            }
            _ => self.insert(hash, block),
        }
    }

    /// Files `block` under `hash` (the caller checked that its key is not present).
    pub(crate) fn insert(&mut self, hash: u64, block: u32) {
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        self.place(slot_of(hash, block));
        self.len += 1;
    }

    /// Puts `slot` where Robin Hood order wants it: after every entry of its run whose home
    /// comes no later than its own.
    fn place(&mut self, slot: Slot) {
        match self.walk(slot, |_| false) {
            Err(Some(at)) => self.shift_in(at, slot),
            _ => unreachable!(
                "a table being filed into has slots, and a walk that wants nothing ends unfound"
            ),
        }
    }

    /// Writes `slot` at `at`, moving the entries from `at` to the end of their run one slot
    /// along (each stays in order, one slot further from its home).
    #[inline]
    fn shift_in(&mut self, mut at: usize, mut slot: Slot) {
        loop {
            let resident = std::mem::replace(&mut self.slots[at], slot);
            if resident == 0 {
                return;
            }
            slot = resident;
            at = self.next(at);
        }
    }

    fn grow(&mut self) {
        let capacity = capacity_for(self.len + 1).max(self.slots.len() + self.slots.len() / 2);
        let old = std::mem::replace(&mut self.slots, HugePageArray::zeroed(capacity));
        for slot in old.iter().copied().filter(|slot| *slot != 0) {
            self.place(slot);
        }
    }

    /// Removes `block`, filed under `hash` (the entries after it in its run that are not at
    /// their home move one slot back). Returns whether it was filed.
    pub(crate) fn remove(&mut self, hash: u64, block: u32) -> bool {
        let wanted = slot_of(hash, block);
        let Ok(at) = self.walk(hash, |slot| slot == wanted) else {
            return false;
        };
        let mut gap = at;
        let mut next = self.next(gap);
        while self.slots[next] != 0 && self.home(self.slots[next]) != next {
            self.slots[gap] = self.slots[next];
            gap = next;
            next = self.next(next);
        }
        self.slots[gap] = 0;
        self.len -= 1;
        true
    }
}

/// The slot count that keeps `blocks` entries at most 7/8 full (at least 8 slots).
fn capacity_for(blocks: usize) -> usize {
    let capacity = (blocks * 8).div_ceil(7).max(8);
    assert!(
        capacity <= 1 << 32,
        "the block table holds at most 2^32 slots"
    );
    capacity
}

/// Hints the CPU to bring `value`'s cache line closer; no effect on other targets.
#[inline]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint that never faults, `value` is a live reference, and
        // SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys of a fake slab; many share the low bits of their hash to make long runs.
    fn keys(n: u64) -> Vec<u64> {
        (0..n)
            .map(|i| i.wrapping_mul(0x9E37_79B9) ^ (i << 40))
            .collect()
    }

    #[test]
    fn inserts_finds_and_removes_like_a_map() {
        let keys = keys(5_000);
        let mut table = BlockTable::default();
        let mut model = HashMap::new();
        for (block, key) in keys.iter().enumerate() {
            table.insert(key_hash(*key), block as u32);
            model.insert(*key, block as u32);
        }
        // Remove every third key, then check every key against the model.
        for (block, key) in keys.iter().enumerate().filter(|(b, _)| b % 3 == 0) {
            assert!(table.remove(key_hash(*key), block as u32));
            assert!(!table.remove(key_hash(*key), block as u32));
            model.remove(key);
        }
        assert_eq!(table.len(), model.len());
        for (block, key) in keys.iter().enumerate() {
            let found = table.find(key_hash(*key), |b| keys[b as usize] == *key);
            assert_eq!(found, model.get(key).copied(), "block {block}");
        }
        assert_eq!(table.find(key_hash(u64::MAX), |_| true), None);
    }

    #[test]
    fn backward_shift_keeps_colliding_runs_reachable() {
        // Every key hashes to one of two home slots of a small table (the tags differ below
        // the bits that choose the home).
        let keys: Vec<u64> = (0..6).collect();
        let hashes: Vec<u64> = (0..6u64).map(|i| ((i % 2) << 62) | (i << 32)).collect();
        let mut table = BlockTable::with_capacity(6);
        for (block, hash) in hashes.iter().enumerate() {
            table.insert(*hash, block as u32);
        }
        assert!(table.remove(hashes[0], 0));
        assert!(table.remove(hashes[3], 3));
        for block in [1usize, 2, 4, 5] {
            assert_eq!(
                table.find(hashes[block], |b| keys[b as usize] == block as u64),
                Some(block as u32)
            );
        }
        assert_eq!(table.find(hashes[0], |b| b == 0), None);
    }

    #[test]
    fn growing_keeps_every_entry_reachable_after_removals_and_wrapping_runs() {
        // Tags crowded at the top of the range make runs wrap around the end of the table.
        let hashes: Vec<u64> = (0..4_000u64)
            .map(|i| {
                let tag = if i % 3 == 0 {
                    u32::MAX - (i % 64) as u32
                } else {
                    key_hash(i) as u32
                };
                (u64::from(tag) << 32) | i
            })
            .collect();
        let mut table = BlockTable::default();
        for (block, hash) in hashes.iter().enumerate() {
            table.insert(*hash, block as u32);
            if block % 5 == 4 {
                assert!(table.remove(hashes[block - 2], (block - 2) as u32));
            }
        }
        for (block, hash) in hashes.iter().enumerate() {
            let removed = block % 5 == 2 && block + 2 < hashes.len();
            let found = table.find(*hash, |b| b == block as u32);
            assert_eq!(found, (!removed).then_some(block as u32), "block {block}");
        }
    }

    #[test]
    fn growing_through_long_unordered_runs_keeps_every_entry_reachable() {
        // Tags in a few narrow bands: runs hundreds of slots long, whose entries were filed out
        // of order, which every growth re-places.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let hashes: Vec<u64> = (0..6_000u64)
            .map(|i| {
                let band = (next() % 4) << 30;
                let tag = band | (next() % (1 << 12));
                (tag << 32) | i
            })
            .collect();
        let mut table = BlockTable::default();
        let mut live = Vec::new();
        for (block, hash) in hashes.iter().enumerate() {
            table.insert(*hash, block as u32);
            live.push(block);
            if next() % 4 == 0 {
                let victim = live.swap_remove((next() % live.len() as u64) as usize);
                assert!(table.remove(hashes[victim], victim as u32));
            }
        }
        assert_eq!(table.len(), live.len());
        for block in live {
            assert_eq!(
                table.find(hashes[block], |b| b == block as u32),
                Some(block as u32),
                "block {block}"
            );
        }
    }

    #[test]
    fn fills_the_vacancy_a_probe_found_like_an_insert() {
        let keys = keys(3_000);
        let mut table = BlockTable::default();
        for (block, key) in keys.iter().enumerate() {
            let found = table.find_or_vacancy(key_hash(*key), |b| keys[b as usize] == *key);
            let Err(vacancy) = found else {
                panic!("key {block} found before it was filed");
            };
            table.fill(vacancy, key_hash(*key), block as u32);
            // Filed once: the next probe finds it.
            assert_eq!(
                table
                    .find_or_vacancy(key_hash(*key), |b| keys[b as usize] == *key)
                    .ok(),
                Some(block as u32)
            );
        }
        assert_eq!(table.len(), keys.len());
        for (block, key) in keys.iter().enumerate() {
            assert_eq!(
                table.find(key_hash(*key), |b| keys[b as usize] == *key),
                Some(block as u32)
            );
        }
    }

    /// Panics unless every run is in Robin Hood order: an entry away from its home follows an
    /// entry at most one slot nearer its own home.
    fn assert_robin_hood_order(table: &BlockTable) {
        let slots = table.slots.len();
        for at in 0..slots {
            let slot = table.slots[at];
            if slot == 0 {
                continue;
            }
            let distance = table.distance(table.home(slot), at);
            if distance == 0 {
                continue;
            }
            let before = (at + slots - 1) % slots;
            let previous = table.slots[before];
            assert_ne!(
                previous, 0,
                "slot {at} is {distance} from home after an empty slot"
            );
            let previous_distance = table.distance(table.home(previous), before);
            assert!(
                distance <= previous_distance + 1,
                "slot {at} is {distance} from home after one {previous_distance} from its own"
            );
        }
    }

    #[test]
    fn runs_stay_in_robin_hood_order_through_fills_inserts_removals_and_growth() {
        let keys = keys(6_000);
        let mut table = BlockTable::default();
        for (block, key) in keys.iter().enumerate() {
            match table.find_or_vacancy(key_hash(*key), |b| keys[b as usize] == *key) {
                Err(vacancy) if block % 2 == 0 => table.fill(vacancy, key_hash(*key), block as u32),
                Err(_) => table.insert(key_hash(*key), block as u32),
                Ok(_) => panic!("key {block} found before it was filed"),
            }
        }
        assert_robin_hood_order(&table);
        for (block, key) in keys.iter().enumerate().filter(|(block, _)| block % 3 == 0) {
            assert!(table.remove(key_hash(*key), block as u32));
        }
        assert_robin_hood_order(&table);
        for (block, key) in keys.iter().enumerate() {
            let found = table.find(key_hash(*key), |b| keys[b as usize] == *key);
            assert_eq!(found, (block % 3 != 0).then_some(block as u32));
        }
    }

    #[test]
    fn empty_table_finds_nothing() {
        let table = BlockTable::default();
        assert_eq!(table.find(key_hash(1), |_| true), None);
        table.prefetch(key_hash(1));
    }
}
