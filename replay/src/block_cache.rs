//! A worker's KV cache: a fixed number of block slots with least-recently-used eviction.
//!
//! The cache is a slab of nodes in one intrusive doubly linked list plus a hash map from
//! sequence hash to slot, so lookups, touches, inserts and evictions are O(1) and allocate
//! nothing once the cache is warm.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NIL: u32 = u32::MAX;

/// A cheap hasher for keys that are already hashes (or small ids in tests).
#[derive(Default, Clone, Copy)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        let folded = value ^ (value >> 32);
        let mixed = folded.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = mixed ^ (mixed >> 29);
    }
}

/// A hash map keyed by hashes, with [`MixHasher`].
pub type HashKeyed<V> = HashMap<u64, V, BuildHasherDefault<MixHasher>>;

#[derive(Clone, Copy)]
struct Node {
    key: u64,
    prev: u32,
    next: u32,
}

/// Blocks held by one worker, keyed by sequence hash, evicted least recently used first.
pub struct BlockCache {
    capacity: usize,
    slots: HashKeyed<u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next victim.
    tail: u32,
}

impl BlockCache {
    /// An empty cache of `capacity` blocks (at most `u32::MAX - 1`).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.min(NIL as usize - 1);
        Self {
            capacity,
            slots: HashKeyed::with_capacity_and_hasher(capacity, Default::default()),
            nodes: Vec::with_capacity(capacity),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    /// How many blocks it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many blocks it holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds no block.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether it holds the block.
    pub fn contains(&self, key: u64) -> bool {
        self.slots.contains_key(&key)
    }

    /// How many leading blocks of `keys` it holds without a gap.
    pub fn prefix_len(&self, keys: &[u64]) -> usize {
        keys.iter().take_while(|key| self.contains(**key)).count()
    }

    /// Marks the block most recently used; returns whether it was held.
    pub fn touch(&mut self, key: u64) -> bool {
        match self.slots.get(&key) {
            Some(&slot) => {
                self.unlink(slot);
                self.push_front(slot);
                true
            }
            None => false,
        }
    }

    /// Holds the block as most recently used. If the cache is full, the least recently used block
    /// is evicted first and passed to `evicted`. Returns whether the block is new (false when it
    /// was already held, or the capacity is zero).
    pub fn insert(&mut self, key: u64, mut evicted: impl FnMut(u64)) -> bool {
        if self.touch(key) || self.capacity == 0 {
            return false;
        }
        let slot = if self.slots.len() >= self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            let old = self.nodes[victim as usize].key;
            self.slots.remove(&old);
            evicted(old);
            victim
        } else if let Some(slot) = self.free.pop() {
            slot
        } else {
            self.nodes.push(Node {
                key,
                prev: NIL,
                next: NIL,
            });
            (self.nodes.len() - 1) as u32
        };
        self.nodes[slot as usize].key = key;
        self.slots.insert(key, slot);
        self.push_front(slot);
        true
    }

    /// Holds every block of `keys` (a prompt's chain), ordered so that the chain's first block is
    /// the most recently used and its last the least: a prompt's tail is evicted before its
    /// shared prefix. Sets `new[i]` when `keys[i]` was not held; evicted blocks are appended to
    /// `evicted`. Blocks past the capacity are not stored. `slots` is scratch space.
    ///
    /// Only the blocks of other chains are evicted, one hash lookup per held block and one
    /// insert per new block.
    pub fn store_chain(
        &mut self,
        keys: &[u64],
        new: &mut Vec<bool>,
        evicted: &mut Vec<u64>,
        slots: &mut Vec<u32>,
    ) {
        let keys = &keys[..keys.len().min(self.capacity)];
        new.clear();
        new.resize(keys.len(), false);
        slots.clear();
        slots.resize(keys.len(), NIL);
        // Held blocks move to the front, the first block foremost.
        for (index, key) in keys.iter().enumerate().rev() {
            if let Some(&slot) = self.slots.get(key) {
                self.unlink(slot);
                self.push_front(slot);
                slots[index] = slot;
            }
        }
        // New blocks go right behind their predecessor. The front segment holds fewer than
        // `capacity` of this chain's blocks, so the victim at the tail is never one of them.
        let mut previous = NIL;
        for (index, key) in keys.iter().enumerate() {
            if slots[index] != NIL {
                previous = slots[index];
                continue;
            }
            new[index] = true;
            let slot = if self.slots.len() >= self.capacity {
                let victim = self.tail;
                self.unlink(victim);
                let old = self.nodes[victim as usize].key;
                self.slots.remove(&old);
                evicted.push(old);
                victim
            } else if let Some(slot) = self.free.pop() {
                slot
            } else {
                self.nodes.push(Node {
                    key: *key,
                    prev: NIL,
                    next: NIL,
                });
                (self.nodes.len() - 1) as u32
            };
            self.nodes[slot as usize].key = *key;
            self.slots.insert(*key, slot);
            if previous == NIL {
                self.push_front(slot);
            } else {
                self.link_after(previous, slot);
            }
            previous = slot;
        }
    }

    /// Drops the block; returns whether it was held.
    pub fn remove(&mut self, key: u64) -> bool {
        match self.slots.remove(&key) {
            Some(slot) => {
                self.unlink(slot);
                self.free.push(slot);
                true
            }
            None => false,
        }
    }

    /// The blocks from most to least recently used (for tests and reports; allocates).
    pub fn keys_by_recency(&self) -> Vec<u64> {
        let mut keys = Vec::with_capacity(self.len());
        let mut at = self.head;
        while at != NIL {
            let node = self.nodes[at as usize];
            keys.push(node.key);
            at = node.next;
        }
        keys
    }

    fn unlink(&mut self, slot: u32) {
        let Node { prev, next, .. } = self.nodes[slot as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn link_after(&mut self, anchor: u32, slot: u32) {
        let next = self.nodes[anchor as usize].next;
        {
            let node = &mut self.nodes[slot as usize];
            node.prev = anchor;
            node.next = next;
        }
        self.nodes[anchor as usize].next = slot;
        if next == NIL {
            self.tail = slot;
        } else {
            self.nodes[next as usize].prev = slot;
        }
    }

    fn push_front(&mut self, slot: u32) {
        let old_head = self.head;
        {
            let node = &mut self.nodes[slot as usize];
            node.prev = NIL;
            node.next = old_head;
        }
        if old_head == NIL {
            self.tail = slot;
        } else {
            self.nodes[old_head as usize].prev = slot;
        }
        self.head = slot;
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_first() {
        let mut cache = BlockCache::new(3);
        let mut evicted = Vec::new();
        for key in [1, 2, 3] {
            assert!(cache.insert(key, |k| evicted.push(k)));
        }
        assert!(evicted.is_empty());
        assert!(cache.touch(1));
        assert!(cache.insert(4, |k| evicted.push(k)));
        assert_eq!(evicted, vec![2]);
        assert!(cache.insert(5, |k| evicted.push(k)));
        assert_eq!(evicted, vec![2, 3]);
        assert_eq!(cache.keys_by_recency(), vec![5, 4, 1]);
        assert_eq!(cache.len(), 3);
        // Re-inserting a held block only touches it.
        assert!(!cache.insert(1, |k| evicted.push(k)));
        assert_eq!(cache.keys_by_recency(), vec![1, 5, 4]);
        assert_eq!(evicted.len(), 2);
    }

    #[test]
    fn prefix_len_stops_at_the_first_gap_and_remove_frees_slots() {
        let mut cache = BlockCache::new(4);
        for key in [10, 11, 13] {
            cache.insert(key, |_| {});
        }
        assert_eq!(cache.prefix_len(&[10, 11, 12, 13]), 2);
        assert_eq!(cache.prefix_len(&[12, 10]), 0);
        assert!(cache.remove(11));
        assert!(!cache.remove(11));
        assert_eq!(cache.prefix_len(&[10, 11]), 1);
        cache.insert(20, |_| panic!("no eviction below capacity"));
        cache.insert(21, |_| panic!("no eviction below capacity"));
        assert_eq!(cache.len(), 4);
        let mut evicted = Vec::new();
        cache.insert(22, |k| evicted.push(k));
        assert_eq!(evicted, vec![10]);
    }

    #[test]
    fn store_chain_keeps_the_prefix_most_recent_and_evicts_other_chains_only() {
        let mut cache = BlockCache::new(6);
        let (mut new, mut evicted, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        cache.store_chain(&[1, 2, 3], &mut new, &mut evicted, &mut slots);
        assert_eq!(new, vec![true, true, true]);
        cache.store_chain(&[10, 11, 12], &mut new, &mut evicted, &mut slots);
        assert_eq!(cache.keys_by_recency(), vec![10, 11, 12, 1, 2, 3]);
        // 1 and 2 are held; 4 and 5 are new and evict the least recent blocks (3, then 12),
        // never this chain's own.
        cache.store_chain(&[1, 2, 4, 5], &mut new, &mut evicted, &mut slots);
        assert_eq!(new, vec![false, false, true, true]);
        assert_eq!(evicted, vec![3, 12]);
        assert_eq!(cache.keys_by_recency(), vec![1, 2, 4, 5, 10, 11]);
        // A chain longer than the capacity stores only its first blocks.
        evicted.clear();
        cache.store_chain(
            &[20, 21, 22, 23, 24, 25, 26, 27],
            &mut new,
            &mut evicted,
            &mut slots,
        );
        assert_eq!(new.len(), 6);
        assert_eq!(cache.keys_by_recency(), vec![20, 21, 22, 23, 24, 25]);
        assert_eq!(evicted.len(), 6);
    }

    #[test]
    fn zero_capacity_holds_nothing() {
        let mut cache = BlockCache::new(0);
        assert!(!cache.insert(1, |_| panic!("nothing to evict")));
        assert!(cache.is_empty());
        assert!(!cache.contains(1));
    }

    #[test]
    fn matches_a_naive_model_on_a_long_random_sequence() {
        let rng = dynamo_kv_router::rng::SplitMix64::seeded(1);
        let mut cache = BlockCache::new(16);
        let mut model: Vec<u64> = Vec::new(); // front = most recent
        for _ in 0..20_000 {
            let key = rng.range(0, 40);
            if rng.range(0, 9) == 0 {
                let removed = cache.remove(key);
                let position = model.iter().position(|k| *k == key);
                assert_eq!(removed, position.is_some());
                if let Some(p) = position {
                    model.remove(p);
                }
                continue;
            }
            let mut evicted = None;
            cache.insert(key, |k| evicted = Some(k));
            if let Some(p) = model.iter().position(|k| *k == key) {
                model.remove(p);
            } else if model.len() == 16 {
                assert_eq!(evicted, model.pop());
            }
            model.insert(0, key);
            assert_eq!(cache.keys_by_recency(), model);
        }
    }
}
