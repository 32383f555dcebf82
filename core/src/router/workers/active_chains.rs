//! Every worker's active blocks as upstream's active-sequence tracking counts them: per worker,
//! the union of the full-block sequence hashes of its active bookings, so blocks shared between
//! its active requests (same sequence hash) count once.
//!
//! Each booking holds a prefix chain (its blocks 0..n). A sequence hash commits to its whole
//! prefix, so two chains share exactly their longest common prefix, and that length is found by
//! binary search on equality at a position. Chains with different first blocks share nothing,
//! so the chains of all workers are grouped by their first block in one router-wide table: a
//! booking finds every chain it could share blocks with, on any worker, with one lookup, and
//! workers with no chain in that group share nothing with it. Adding chain `C` to a worker adds
//! `n − max lcp(C, A)` blocks over the worker's active chains `A`; removing it takes away
//! `n − max lcp(C, A)` over the remaining ones.

use crate::block_identity::SequenceHash;
use crate::identity::WorkerId;
use crate::kv::mix;
use hashbrown::HashTable;
use std::sync::Arc;

/// Who holds an active chain: a worker's load cell. `cell` tells a worker that deregistered
/// (whose bookings live on until released) from the same id registered again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The worker.
    pub(crate) worker: WorkerId,
    /// The load cell's serial number, unique to the registration.
    pub(crate) cell: u64,
}

/// One active chain and its holder, with its last block kept inline: whether a request
/// contains the whole chain is then known without reading the chain.
#[derive(Debug)]
struct HeldChain {
    holder: Holder,
    last: SequenceHash,
    chain: Arc<[SequenceHash]>,
}

impl HeldChain {
    /// Length of the common prefix of the chain and `request`, which starts with the same
    /// block (both are in the group of that block); `guess` as for [`common_prefix_near`].
    fn shared_with(&self, request: &[SequenceHash], guess: usize) -> usize {
        let len = self.chain.len();
        if len > request.len() {
            return common_prefix_near(&self.chain, request, guess);
        }
        if request[len - 1] == self.last {
            return len;
        }
        // Blocks 0 agree and blocks len - 1 differ.
        search_common_prefix(&self.chain, request, 1, len - 1, guess)
    }
}

/// The active chains of one first block.
#[derive(Debug)]
struct FirstBlockGroup {
    first: SequenceHash,
    chains: Vec<HeldChain>,
}

/// The active chains of every worker, grouped by their first block.
#[derive(Debug, Default)]
pub(crate) struct ActiveChains {
    by_first: HashTable<FirstBlockGroup>,
}

impl ActiveChains {
    fn group(&self, first: SequenceHash) -> Option<&FirstBlockGroup> {
        self.by_first
            .find(mix(first.0), |group| group.first == first)
    }

    /// Raises `shared[i]` to the length of the longest prefix of `chain` that an active chain of
    /// the holder at position `i` shares; `position` maps a holder to its position, or `None`
    /// for holders the caller does not ask about. A position already at `chain.len()` is left
    /// alone (nothing shares more).
    pub(crate) fn raise_shared_prefixes(
        &self,
        chain: &[SequenceHash],
        shared: &mut [usize],
        position: impl Fn(Holder) -> Option<usize>,
    ) {
        let Some(group) = chain.first().and_then(|first| self.group(*first)) else {
            return;
        };
        // Chains of one group tend to leave the request at the same block (the end of a
        // shared system prompt, say): each search tries where the last one ended first.
        let mut guess = 0;
        for held in &group.chains {
            if let Some(longest) = position(held.holder).and_then(|i| shared.get_mut(i))
                && *longest < chain.len()
            {
                guess = held.shared_with(chain, guess);
                *longest = (*longest).max(guess);
            }
        }
    }

    /// Length of the longest prefix of `chain` some active chain of `holder` shares.
    fn shared_prefix(chains: &[HeldChain], holder: Holder, chain: &[SequenceHash]) -> usize {
        let mut longest = 0;
        for held in chains.iter().filter(|held| held.holder == holder) {
            longest = longest.max(common_prefix(&held.chain, chain));
            if longest == chain.len() {
                break;
            }
        }
        longest
    }

    /// Adds an active chain of `holder`; returns how many blocks it added to the holder's union.
    pub(crate) fn add(&mut self, holder: Holder, chain: &Arc<[SequenceHash]>) -> u64 {
        let Some(first) = chain.first().copied() else {
            return 0;
        };
        let group = self
            .by_first
            .entry(
                mix(first.0),
                |group| group.first == first,
                |group| mix(group.first.0),
            )
            .or_insert_with(|| FirstBlockGroup {
                first,
                chains: Vec::new(),
            })
            .into_mut();
        let shared = Self::shared_prefix(&group.chains, holder, chain);
        group.chains.push(HeldChain {
            holder,
            last: chain[chain.len() - 1],
            chain: Arc::clone(chain),
        });
        (chain.len() - shared) as u64
    }

    /// Removes one occurrence of an active chain of `holder`; returns how many blocks left the
    /// holder's union (0 if it was not active).
    pub(crate) fn remove(&mut self, holder: Holder, chain: &Arc<[SequenceHash]>) -> u64 {
        let Some(first) = chain.first().copied() else {
            return 0;
        };
        let Ok(mut entry) = self
            .by_first
            .find_entry(mix(first.0), |group| group.first == first)
        else {
            return 0;
        };
        let chains = &mut entry.get_mut().chains;
        let ours = |held: &HeldChain| held.holder == holder;
        let Some(position) = chains
            .iter()
            .position(|held| ours(held) && Arc::ptr_eq(&held.chain, chain))
            .or_else(|| {
                chains
                    .iter()
                    .position(|held| ours(held) && held.chain == *chain)
            })
        else {
            return 0;
        };
        chains.swap_remove(position);
        let remaining = Self::shared_prefix(chains, holder, chain);
        if chains.is_empty() {
            entry.remove();
        }
        (chain.len() - remaining) as u64
    }

    /// Active chains held, over all workers.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_first.iter().map(|group| group.chains.len()).sum()
    }
}

/// Length of the common prefix of two chains of sequence hashes: equal hashes at a position
/// mean equal prefixes up to it, so equality is monotone and a binary search finds the end.
fn common_prefix(a: &[SequenceHash], b: &[SequenceHash]) -> usize {
    common_prefix_near(a, b, 0)
}

/// [`common_prefix`], trying `guess` first: when the common prefix is `guess` long, two
/// comparisons find it; otherwise they narrow the binary search.
fn common_prefix_near(a: &[SequenceHash], b: &[SequenceHash], guess: usize) -> usize {
    let n = a.len().min(b.len());
    if n == 0 || a[0] != b[0] {
        return 0;
    }
    if a[n - 1] == b[n - 1] {
        return n;
    }
    search_common_prefix(a, b, 1, n - 1, guess)
}

/// The common prefix of `a` and `b` given that `a[low - 1] == b[low - 1]` and
/// `a[high] != b[high]` (`1 <= low <= high`): a binary search that tries `guess` first.
fn search_common_prefix(
    a: &[SequenceHash],
    b: &[SequenceHash],
    mut low: usize,
    mut high: usize,
    guess: usize,
) -> usize {
    if (low..=high).contains(&guess) {
        if a[guess - 1] != b[guess - 1] {
            high = guess - 1;
        } else if a[guess] != b[guess] {
            return guess;
        } else {
            low = guess + 1;
        }
    }
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
    use crate::rng::SplitMix64;
    use std::collections::HashSet;

    fn chain(letters: &[u64]) -> Arc<[SequenceHash]> {
        let local: Vec<LocalBlockHash> = letters.iter().copied().map(LocalBlockHash).collect();
        sequence_hashes(&local).into()
    }

    fn holder(worker: u64, cell: u64) -> Holder {
        Holder {
            worker: WorkerId::new(worker, 0),
            cell,
        }
    }

    fn union(chains: &[Arc<[SequenceHash]>]) -> u64 {
        let set: HashSet<SequenceHash> = chains.iter().flat_map(|c| c.iter().copied()).collect();
        set.len() as u64
    }

    /// The brute-force longest prefix of `chain` that one of `chains` holds block by block.
    fn brute_shared(chains: &[Arc<[SequenceHash]>], chain: &[SequenceHash]) -> usize {
        let held: HashSet<SequenceHash> = chains.iter().flat_map(|c| c.iter().copied()).collect();
        chain.iter().take_while(|hash| held.contains(hash)).count()
    }

    #[test]
    fn shared_prefixes_count_once_per_holder() {
        let mut active = ActiveChains::default();
        let (w1, w2) = (holder(1, 1), holder(2, 2));
        let a = chain(&[1, 2, 3, 4]);
        let b = chain(&[1, 2, 7, 8, 9]);
        let c = chain(&[5, 2, 3]);
        assert_eq!(active.add(w1, &a), 4);
        assert_eq!(active.add(w1, &b), 3);
        assert_eq!(active.add(w1, &c), 3);
        // Another worker shares nothing with w1's chains.
        assert_eq!(active.add(w2, &a), 4);
        // The same chain twice adds nothing and, removed once, takes nothing away.
        assert_eq!(active.add(w1, &a), 0);
        assert_eq!(active.remove(w1, &a), 0);
        assert_eq!(active.remove(w1, &a), 2);
        assert_eq!(active.remove(w1, &b), 5);
        assert_eq!(active.remove(w1, &c), 3);
        assert_eq!(active.remove(w1, &c), 0);
        assert_eq!(active.remove(w2, &a), 4);
        assert_eq!(active.len(), 0);
        assert!(active.by_first.is_empty());
    }

    #[test]
    fn a_registration_again_does_not_see_the_old_chains() {
        let mut active = ActiveChains::default();
        let a = chain(&[1, 2, 3]);
        assert_eq!(active.add(holder(1, 1), &a), 3);
        assert_eq!(active.add(holder(1, 2), &a), 3);
        let mut shared = [0];
        active.raise_shared_prefixes(&a, &mut shared, |h| (h == holder(1, 3)).then_some(0));
        assert_eq!(shared, [0]);
        assert_eq!(active.remove(holder(1, 1), &a), 3);
        assert_eq!(active.remove(holder(1, 2), &a), 3);
    }

    /// Random bookings and releases over a few workers, checked after every step against the
    /// brute-force union of each worker's chains: the counts added and removed sum to each
    /// worker's union, and the shared prefixes a booking sees are the brute-force ones.
    #[test]
    fn the_counts_and_shared_prefixes_match_a_brute_force_union() {
        let rng = SplitMix64::new(Some(12));
        let holders: Vec<Holder> = (0..4).map(|w| holder(w, 10 + w)).collect();
        let prompt = |rng: &SplitMix64| {
            let len = rng.below(9);
            let letters: Vec<u64> = (0..len).map(|_| rng.below(3) as u64).collect();
            chain(&letters)
        };
        let mut active = ActiveChains::default();
        let mut held: Vec<Vec<Arc<[SequenceHash]>>> = vec![Vec::new(); holders.len()];
        let mut counted = vec![0u64; holders.len()];
        for _ in 0..3_000 {
            let w = rng.below(holders.len());
            if held[w].is_empty() || rng.below(3) > 0 {
                let c = prompt(&rng);
                counted[w] += active.add(holders[w], &c);
                held[w].push(c);
            } else {
                let k = rng.below(held[w].len());
                let c = held[w].swap_remove(k);
                counted[w] -= active.remove(holders[w], &c);
            }
            assert_eq!(counted[w], union(&held[w]));
            let request = prompt(&rng);
            let mut shared = vec![0usize; holders.len()];
            active.raise_shared_prefixes(&request, &mut shared, |h| {
                holders.iter().position(|x| *x == h)
            });
            for (w, chains) in held.iter().enumerate() {
                assert_eq!(shared[w], brute_shared(chains, &request), "worker {w}");
            }
        }
        // Empty chains hold no block and are not kept.
        let nonempty = held.iter().flatten().filter(|c| !c.is_empty()).count();
        assert_eq!(active.len(), nonempty);
    }

    #[test]
    fn common_prefixes() {
        assert_eq!(common_prefix(&chain(&[1, 2, 3]), &chain(&[1, 2, 4])), 2);
        assert_eq!(common_prefix(&chain(&[1, 2, 3]), &chain(&[1, 2])), 2);
        assert_eq!(common_prefix(&chain(&[3]), &chain(&[1])), 0);
        assert_eq!(common_prefix(&chain(&[]), &chain(&[1])), 0);
        // Any guess gives the same answer as none.
        let a = chain(&[1, 2, 3, 4, 5, 6, 7, 8]);
        for end in 0..=8 {
            let mut letters = vec![1, 2, 3, 4, 5, 6, 7, 8];
            letters.truncate(end);
            letters.extend([9, 9, 9]);
            let b = chain(&letters);
            for guess in 0..12 {
                assert_eq!(
                    common_prefix_near(&a, &b, guess),
                    end,
                    "end {end}, guess {guess}"
                );
            }
        }
    }
}
