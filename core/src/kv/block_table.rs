//! An open-addressing table from a 64-bit block key (a sequence or engine hash) to a slab
//! index: a slot is one `u64` holding the high 32 bits of the key's hash (its tag) and the
//! slab index, so a probe usually touches one cache line and reads the slab (where the keys
//! live) only for a slot whose tag matches.
//!
//! The home slot is computed from the tag alone (`tag · homes / 2^32`), so growing and
//! deleting never read the slab, and the slot count need not be a power of two. A table grows
//! at 7/8 full. Below [`SMALL_HOMES`] (1 MiB of slots) it doubles, so a small table sits
//! 44–88 % full and grows half as often: shorter runs to probe and shift, for at most a few
//! hundred KiB more. From there on it grows by half, which keeps it 58–88 % full (at a
//! million blocks a doubling table's slots would cost more than the slab).
//!
//! Linear probing with the entries in the order of their tags: homes rise with tags, and a
//! run never wraps around the end (the last runs spill into a few slots past the last home,
//! which double when a run reaches their end), so the whole table reads in tag order. A probe
//! therefore stops at the first slot that is empty or holds a greater tag, one comparison per
//! slot (at 7/8 full, a probe for an absent key reads an expected 4.5 slots, where stopping
//! only at an empty slot would read 32), and growing streams: the entries, read in order,
//! each go to their new home or right after the entry before, with no probe. Deletion shifts
//! the displaced entries after the removed one back (no tombstones). At most 2^32 homes.

use super::huge_page_array::HugePageArray;
use super::index_hasher::mix;

/// Tag and slab index of one occupied slot; 0 is an empty slot.
type Slot = u64;

/// Slots per 64-byte cache line.
const SLOTS_PER_LINE: usize = 8;

/// The tag half of a slot.
const TAG: u64 = 0xFFFF_FFFF_0000_0000;

/// The slots past the last home a table starts with, for the runs that reach its top.
const SPILL: usize = 64;

/// Below this many homes (1 MiB of slots) a table doubles when it grows; from it on, it grows
/// by half.
const SMALL_HOMES: usize = 1 << 17;

/// Key hash → slab index, with the keys kept by the caller.
#[derive(Default)]
pub(crate) struct BlockTable {
    /// The homes, then the spill.
    slots: HugePageArray,
    /// How many slots are homes: `[0, homes)`.
    homes: usize,
    len: usize,
}

/// Where [`BlockTable::find_or_vacancy`] found a key absent: the slot ending its probe, empty
/// or holding a greater tag, or one past the last slot (`None` in a table with no slots yet,
/// or [`Vacancy::UNPROBED`] when no probe ran; then [`BlockTable::fill`] places the entry
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

/// Whether a walk for a key hashed to `hash` stops at `slot`: it is empty, or its tag is
/// greater. One comparison: an occupied slot less one is its tag and block index (at most
/// `u32::MAX - 1`), below `hash`'s tag with all low bits set unless its tag is greater; an
/// empty slot less one is the largest `u64`, so even the largest tag stops there.
#[inline]
fn ends_walk(slot: Slot, hash: u64) -> bool {
    slot.wrapping_sub(1) >= hash | !TAG
}

impl BlockTable {
    /// A table with room for `blocks` entries before it grows.
    pub(crate) fn with_capacity(blocks: usize) -> Self {
        let mut table = Self::default();
        if blocks > 0 {
            table.homes = capacity_for(blocks);
            table.slots = HugePageArray::zeroed(table.homes + SPILL);
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
        (((hash >> 32) * self.homes as u64) >> 32) as usize
    }

    /// Hints the CPU to load the slots where the probe for `hash` starts, two cache lines of
    /// them (a store prefetches the slots of the blocks after the one it is storing, so their
    /// misses overlap; a probe for a key that is absent, as for every new block, reads on
    /// until a greater tag, which at 7/8 full can reach into the next line).
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

    /// The slab index filed under `hash` for which `is_key` holds.
    #[inline]
    pub(crate) fn find(&self, hash: u64, is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find_or_vacancy(hash, is_key).ok()
    }

    /// [`BlockTable::find`], or where `hash`'s key would go when it is absent: the probe
    /// for an absent key ends at the slot an insert would take (empty, or holding a greater
    /// tag, which the insert shifts along), so [`BlockTable::fill`] can file it there without
    /// walking the run again.
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

    /// Walks the run from the home slot of `hash` (a key's hash, or an occupied slot) in tag
    /// order: `Ok` with the first slot for which `wanted` holds, else `Err` with where the walk
    /// ended, the slot an insert of `hash` would take (empty, holding a greater tag, or one
    /// past the last slot); `Err(None)` in a table with no slots.
    #[inline]
    fn walk(
        &self,
        hash: u64,
        mut wanted: impl FnMut(Slot) -> bool,
    ) -> Result<usize, Option<usize>> {
        if self.slots.is_empty() {
            return Err(None);
        }
        let mut at = self.home(hash);
        while let Some(&slot) = self.slots.get(at) {
            if ends_walk(slot, hash) {
                return Err(Some(at));
            }
            if wanted(slot) {
                return Ok(at);
            }
            at += 1;
        }
        Err(Some(at))
    }

    /// Files `block` under `hash` at `vacancy`, which [`BlockTable::find_or_vacancy`] returned
    /// for `hash` with no change to the table since (the table grows first when it must, and
    /// then places the entry as [`BlockTable::insert`] does). Always inlined: the store's fast
    /// path calls it for every new block.
    #[inline(always)]
    pub(crate) fn fill(&mut self, vacancy: Vacancy, hash: u64, block: u32) {
        match vacancy.at {
            Some(at) if (self.len + 1) * 8 <= self.homes * 7 => {
                self.shift_in(at, slot_of(hash, block));
                self.len += 1;
            }
            _ => self.insert(hash, block),
        }
    }

    /// Files `block` under `hash` (the caller checked that its key is not present).
    pub(crate) fn insert(&mut self, hash: u64, block: u32) {
        if (self.len + 1) * 8 > self.homes * 7 {
            self.grow();
        }
        self.place(slot_of(hash, block));
        self.len += 1;
    }

    /// Puts `slot` where tag order wants it: after every entry of its run whose tag is not
    /// greater.
    fn place(&mut self, slot: Slot) {
        match self.walk(slot, |_| false) {
            Err(Some(at)) => self.shift_in(at, slot),
            _ => unreachable!(
                "a table being filed into has slots, and a walk that wants nothing ends unfound"
            ),
        }
    }

    /// Writes `slot` at `at`, moving the entries from `at` to the end of their run one slot
    /// along (each stays in order, one slot further from its home); the spill doubles when
    /// the run reaches the last slot.
    #[inline]
    fn shift_in(&mut self, mut at: usize, mut slot: Slot) {
        loop {
            let Some(resident) = self.slots.get_mut(at) else {
                self.double_spill();
                continue;
            };
            let resident = std::mem::replace(resident, slot);
            if resident == 0 {
                return;
            }
            slot = resident;
            at += 1;
        }
    }

    /// Doubles the slots past the last home (at least [`SPILL`] more), keeping every entry
    /// where it is.
    #[cold]
    fn double_spill(&mut self) {
        let spill = (self.slots.len() - self.homes).max(SPILL);
        let mut slots = HugePageArray::zeroed(self.slots.len() + spill);
        slots[..self.slots.len()].copy_from_slice(&self.slots);
        self.slots = slots;
    }

    fn grow(&mut self) {
        let step = if self.homes < SMALL_HOMES {
            self.homes * 2
        } else {
            self.homes + self.homes / 2
        };
        let homes = capacity_for(self.len + 1).max(step);
        let old = std::mem::replace(&mut self.slots, HugePageArray::zeroed(homes + SPILL));
        self.homes = homes;
        self.refile(&old);
    }

    /// Files the entries of `old`, a table in tag order, into these slots, empty and with at
    /// least as many homes, in one pass: along `old` the entries come in tag order, hence in
    /// the order of their new homes, so each goes to its new home or, when that is taken,
    /// right after the entry before it. Reading and writing both stream, where filing one
    /// entry at a time would probe the new table at random.
    fn refile(&mut self, old: &[Slot]) {
        let mut next_free = 0;
        for &slot in old {
            // Without a branch on empty slots (an eighth of them, at random): an empty slot
            // (home 0) writes its 0 at `next_free`, which nothing holds yet, and moves nothing.
            let at = self.home(slot).max(next_free);
            if at >= self.slots.len() {
                if slot == 0 {
                    continue;
                }
                self.double_spill();
            }
            self.slots[at] = slot;
            next_free = at + usize::from(slot != 0);
        }
    }

    /// Removes `block`, filed under `hash` (the displaced entries after it in its run move one
    /// slot back). Returns whether it was filed.
    pub(crate) fn remove(&mut self, hash: u64, block: u32) -> bool {
        let wanted = slot_of(hash, block);
        let Ok(mut gap) = self.walk(hash, |slot| slot == wanted) else {
            return false;
        };
        while let Some(&next) = self.slots.get(gap + 1)
            && next != 0
            && self.home(next) <= gap
        {
            self.slots[gap] = next;
            gap += 1;
        }
        self.slots[gap] = 0;
        self.len -= 1;
        true
    }
}

/// The home count that keeps `blocks` entries at most 7/8 full (at least 8 homes).
fn capacity_for(blocks: usize) -> usize {
    let capacity = (blocks * 8).div_ceil(7).max(8);
    assert!(
        capacity <= 1 << 32,
        "the block table holds at most 2^32 homes"
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

    /// `count` hashes whose low half is their index; every third has one of the `spread`
    /// largest tags, the rest tags spread over the range.
    fn hashes_crowding_the_top(count: u64, spread: u64) -> Vec<u64> {
        (0..count)
            .map(|i| {
                let tag = if i % 3 == 0 {
                    u32::MAX - (i % spread) as u32
                } else {
                    key_hash(i) as u32
                };
                (u64::from(tag) << 32) | i
            })
            .collect()
    }

    #[test]
    fn growing_keeps_every_entry_reachable_after_removals_and_runs_at_the_top() {
        // Tags crowded at the top of the range make runs reach the end of the table (and
        // spill past its last home).
        let hashes = hashes_crowding_the_top(4_000, 64);
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
        // Tags in a few narrow bands: runs hundreds of slots long, filed in no particular
        // order, which every growth refiles.
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

    /// Panics unless the table reads in tag order, each entry at or after its home with no
    /// empty slot between, and holds as many entries as it counts.
    fn assert_in_tag_order(table: &BlockTable) {
        let mut previous_tag = 0;
        let mut entries = 0;
        for (at, &slot) in table.slots.iter().enumerate() {
            if slot == 0 {
                continue;
            }
            entries += 1;
            let home = table.home(slot);
            assert!(
                slot & TAG >= previous_tag,
                "slot {at}'s tag is below the one before"
            );
            previous_tag = slot & TAG;
            assert!(home <= at, "slot {at} lies before its home {home}");
            assert!(
                home == at || table.slots[at - 1] != 0,
                "slot {at} (home {home}) follows an empty slot"
            );
        }
        assert_eq!(entries, table.len(), "entries against the count");
    }

    #[test]
    fn runs_stay_in_tag_order_through_fills_inserts_removals_and_growth() {
        let keys = keys(6_000);
        let mut table = BlockTable::default();
        for (block, key) in keys.iter().enumerate() {
            match table.find_or_vacancy(key_hash(*key), |b| keys[b as usize] == *key) {
                Err(vacancy) if block % 2 == 0 => table.fill(vacancy, key_hash(*key), block as u32),
                Err(_) => table.insert(key_hash(*key), block as u32),
                Ok(_) => panic!("key {block} found before it was filed"),
            }
        }
        assert_in_tag_order(&table);
        for (block, key) in keys.iter().enumerate().filter(|(block, _)| block % 3 == 0) {
            assert!(table.remove(key_hash(*key), block as u32));
        }
        assert_in_tag_order(&table);
        for (block, key) in keys.iter().enumerate() {
            let found = table.find(key_hash(*key), |b| keys[b as usize] == *key);
            assert_eq!(found, (block % 3 != 0).then_some(block as u32));
        }
    }

    #[test]
    fn runs_reaching_the_top_spill_past_the_last_home_and_shrink_back() {
        // A third of the tags crowd the top of the range: their run outgrows the spill (which
        // doubles), through growth and removals.
        let hashes = hashes_crowding_the_top(3_000, 5);
        let mut table = BlockTable::with_capacity(16);
        for (block, hash) in hashes.iter().enumerate() {
            table.insert(*hash, block as u32);
        }
        assert!(
            table.slots.len() - table.homes > 2 * SPILL,
            "the spill never doubled"
        );
        assert_in_tag_order(&table);
        for (block, hash) in hashes.iter().enumerate().filter(|(b, _)| b % 2 == 0) {
            assert!(table.remove(*hash, block as u32), "block {block}");
        }
        assert_in_tag_order(&table);
        for (block, hash) in hashes.iter().enumerate() {
            let found = table.find(*hash, |b| b == block as u32);
            assert_eq!(
                found,
                (block % 2 == 1).then_some(block as u32),
                "block {block}"
            );
        }
    }

    #[test]
    fn growing_refiles_every_entry_in_tag_order() {
        let keys = keys(20_000);
        let mut table = BlockTable::with_capacity(100);
        for (block, key) in keys.iter().enumerate() {
            table.insert(key_hash(*key), block as u32);
            if block.is_power_of_two() {
                assert_in_tag_order(&table);
            }
        }
        let mut grown = BlockTable {
            homes: table.homes * 5 / 2,
            slots: HugePageArray::zeroed(table.homes * 5 / 2 + SPILL),
            len: table.len,
        };
        grown.refile(&table.slots);
        assert_in_tag_order(&grown);
        for (block, key) in keys.iter().enumerate() {
            let found = grown.find(key_hash(*key), |b| keys[b as usize] == *key);
            assert_eq!(found, Some(block as u32), "block {block}");
        }
    }

    #[test]
    fn small_tables_double_and_large_ones_grow_by_half_each_at_most_seven_eighths_full() {
        let mut table = BlockTable::default();
        let mut steps = Vec::new();
        for (block, key) in keys(200_000).into_iter().enumerate() {
            let before = table.homes;
            table.insert(key_hash(key), block as u32);
            assert!(table.len * 8 <= table.homes * 7, "over 7/8 full at {block}");
            if table.homes != before {
                steps.push((before, table.homes));
            }
        }
        assert!(steps.iter().any(|&(from, _)| from >= SMALL_HOMES));
        for (from, to) in steps.into_iter().skip(1) {
            let expected = if from < SMALL_HOMES {
                from * 2
            } else {
                from + from / 2
            };
            assert_eq!(to, expected, "growing from {from} homes");
        }
    }

    #[test]
    fn a_walk_stops_at_an_empty_slot_or_a_greater_tag_for_every_tag() {
        let largest_block = u32::MAX - 1;
        for tag in [0u64, 1, 0x8000_0000, 0xFFFF_FFFE, 0xFFFF_FFFF] {
            let hash = (tag << 32) | 0x1234;
            assert!(ends_walk(0, hash), "tag {tag:#x}: an empty slot");
            for block in [0, 7, largest_block] {
                assert!(
                    !ends_walk(slot_of(hash, block), hash),
                    "tag {tag:#x}: equal"
                );
                if tag > 0 {
                    let lower = slot_of((tag - 1) << 32, block);
                    assert!(!ends_walk(lower, hash), "tag {tag:#x}: lower");
                }
                if tag < 0xFFFF_FFFF {
                    let greater = slot_of((tag + 1) << 32, block);
                    assert!(ends_walk(greater, hash), "tag {tag:#x}: greater");
                }
            }
        }
    }

    #[test]
    fn empty_table_finds_nothing() {
        let table = BlockTable::default();
        assert_eq!(table.find(key_hash(1), |_| true), None);
        table.prefetch(key_hash(1));
    }
}
