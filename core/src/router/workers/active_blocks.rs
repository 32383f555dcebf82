//! A worker's active blocks as upstream's active-sequence tracking counts them: the union of the
//! full-block sequence hashes of its active bookings, so blocks shared between active requests
//! (same sequence hash) count once.
//!
//! Each booking holds a prefix chain (its blocks 0..n). A sequence hash commits to its whole
//! prefix, so two chains share exactly their longest common prefix, and that length is found by
//! binary search on equality at a position. Chains are grouped by their first block: chains with
//! different first blocks share nothing. Adding chain `C` adds `n − max lcp(C, A)` blocks over
//! the active chains `A`; removing it takes away `n − max lcp(C, A)` over the remaining ones.

use crate::block_identity::SequenceHash;
use std::collections::HashMap;
use std::sync::Arc;

/// The active chains of one worker and the size of their union.
#[derive(Debug, Default)]
pub(crate) struct ActiveBlocks {
    by_first: HashMap<SequenceHash, Vec<Arc<[SequenceHash]>>>,
    distinct: u64,
}

impl ActiveBlocks {
    /// Distinct blocks over all active chains.
    #[cfg(test)]
    pub(crate) fn distinct(&self) -> u64 {
        self.distinct
    }

    /// Length of the longest prefix of `chain` some active chain shares.
    pub(crate) fn shared_prefix(&self, chain: &[SequenceHash]) -> usize {
        let Some(first) = chain.first() else {
            return 0;
        };
        self.by_first.get(first).map_or(0, |chains| {
            chains
                .iter()
                .map(|active| common_prefix(active, chain))
                .max()
                .unwrap_or(0)
        })
    }

    /// Adds an active chain; returns how many blocks it added to the union.
    pub(crate) fn add(&mut self, chain: Arc<[SequenceHash]>) -> u64 {
        let Some(first) = chain.first().copied() else {
            return 0;
        };
        let added = (chain.len() - self.shared_prefix(&chain)) as u64;
        self.distinct += added;
        self.by_first.entry(first).or_default().push(chain);
        added
    }

    /// Removes one occurrence of an active chain; returns how many blocks left the union.
    pub(crate) fn remove(&mut self, chain: &Arc<[SequenceHash]>) -> u64 {
        let Some(first) = chain.first() else {
            return 0;
        };
        let Some(chains) = self.by_first.get_mut(first) else {
            return 0;
        };
        let Some(position) = chains
            .iter()
            .position(|active| Arc::ptr_eq(active, chain))
            .or_else(|| chains.iter().position(|active| active == chain))
        else {
            return 0;
        };
        chains.swap_remove(position);
        let remaining = chains
            .iter()
            .map(|active| common_prefix(active, chain))
            .max()
            .unwrap_or(0);
        if chains.is_empty() {
            self.by_first.remove(first);
        }
        let removed = (chain.len() - remaining) as u64;
        self.distinct = self.distinct.saturating_sub(removed);
        removed
    }
}

/// Length of the common prefix of two chains of sequence hashes: equal hashes at a position
/// mean equal prefixes up to it, so equality is monotone and a binary search finds the end.
fn common_prefix(a: &[SequenceHash], b: &[SequenceHash]) -> usize {
    let n = a.len().min(b.len());
    if n == 0 || a[0] != b[0] {
        return 0;
    }
    if a[n - 1] == b[n - 1] {
        return n;
    }
    // a[low - 1] == b[low - 1] and a[high] != b[high].
    let (mut low, mut high) = (1, n - 1);
    while low < high {
        let mid = low + (high - low) / 2;
        if a[mid] == b[mid] {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{LocalBlockHash, sequence_hashes};

    fn chain(letters: &[u64]) -> Arc<[SequenceHash]> {
        let local: Vec<LocalBlockHash> = letters.iter().copied().map(LocalBlockHash).collect();
        sequence_hashes(&local).into()
    }

    fn union(chains: &[Arc<[SequenceHash]>]) -> u64 {
        let set: std::collections::HashSet<SequenceHash> =
            chains.iter().flat_map(|c| c.iter().copied()).collect();
        set.len() as u64
    }

    #[test]
    fn shared_prefixes_count_once() {
        let mut active = ActiveBlocks::default();
        let a = chain(&[1, 2, 3, 4]);
        let b = chain(&[1, 2, 7, 8, 9]);
        let c = chain(&[5, 2, 3]);
        assert_eq!(active.add(a.clone()), 4);
        assert_eq!(active.shared_prefix(&b), 2);
        assert_eq!(active.add(b.clone()), 3);
        assert_eq!(active.add(c.clone()), 3);
        assert_eq!(active.distinct(), 10);
        // The same chain twice adds nothing and, removed once, takes nothing away.
        assert_eq!(active.add(a.clone()), 0);
        assert_eq!(active.remove(&a), 0);
        assert_eq!(active.remove(&a), 2);
        assert_eq!(active.distinct(), 8);
        assert_eq!(active.remove(&b), 5);
        assert_eq!(active.remove(&c), 3);
        assert_eq!(active.distinct(), 0);
        assert_eq!(active.remove(&c), 0);
    }

    #[test]
    fn the_count_is_the_size_of_the_union_whatever_the_order() {
        let chains: Vec<Arc<[SequenceHash]>> = [
            &[1, 2, 3][..],
            &[1, 2, 3, 4, 5],
            &[1, 2],
            &[1, 9, 9, 9],
            &[2, 2, 2],
            &[1, 2, 3, 4, 6, 6],
            &[],
        ]
        .iter()
        .map(|letters| chain(letters))
        .collect();
        for rotation in 0..chains.len() {
            let mut order = chains.clone();
            order.rotate_left(rotation);
            let mut active = ActiveBlocks::default();
            for (k, c) in order.iter().enumerate() {
                active.add(c.clone());
                assert_eq!(active.distinct(), union(&order[..=k]));
            }
            for k in (0..order.len()).rev() {
                active.remove(&order[k]);
                assert_eq!(active.distinct(), union(&order[..k]));
            }
        }
        assert_eq!(common_prefix(&chain(&[1, 2, 3]), &chain(&[1, 2, 4])), 2);
        assert_eq!(common_prefix(&chain(&[1, 2, 3]), &chain(&[1, 2])), 2);
        assert_eq!(common_prefix(&chain(&[3]), &chain(&[1])), 0);
    }
}
