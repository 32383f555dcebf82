//! Which peer a worker fetches KV from: the eligible peer with the longest cached prefix.

use dynamo_kv_router::kv::{EngineBlockHash, SequenceHash};
use dynamo_kv_router::plugins::{Candidate, RequestView};
use dynamo_kv_router::router::WorkerId;
use std::cmp::Reverse;

/// The two best fetch sources among a booking's candidates, so that the best source for any one
/// of them is found in constant time.
///
/// A source is **eligible** for a worker when it is another worker of the same role (every
/// candidate is of the booking's role) that advertises `router_hint` with a non-empty source
/// endpoint ([`Candidate::is_fetch_source_for`]). The **best** eligible source has the longest
/// cached prefix; ties go to the smaller `(worker_id, dp_rank)`.
#[derive(Clone, Copy, Debug)]
pub struct SourceRanking<'a> {
    first: Option<&'a Candidate>,
    second: Option<&'a Candidate>,
}

impl<'a> SourceRanking<'a> {
    /// Ranks the candidates that can serve as a source for some other worker.
    pub fn new(candidates: &'a [Candidate]) -> Self {
        let mut ranking = Self {
            first: None,
            second: None,
        };
        // Most candidates rank below the second best (many share one prefix length, such as a
        // system prompt's, and lose the tie on their id): one comparison of keys rules them out
        // before their capabilities are read.
        for candidate in candidates {
            let candidate_key = key(candidate);
            if ranking
                .second
                .is_some_and(|second| candidate_key >= key(second))
                || !offers_source(candidate)
            {
                continue;
            }
            if ranking.first.is_none_or(|first| candidate_key < key(first)) {
                ranking.second = ranking.first;
                ranking.first = Some(candidate);
            } else {
                ranking.second = Some(candidate);
            }
        }
        ranking
    }

    /// The prefix lengths of the best source for bookings on any worker, read once (see
    /// [`SourcePrefixes::for_booking_on`]): for a loop over every candidate.
    pub fn prefixes(&self) -> SourcePrefixes {
        SourcePrefixes {
            best_worker: self.first.map(|first| first.worker),
            best: self.first.map_or(0, |first| first.cached_blocks),
            second: self.second.map_or(0, |second| second.cached_blocks),
        }
    }

    /// The best eligible source for a booking on `booked`, if any peer is eligible.
    pub fn best_for(&self, booked: WorkerId) -> Option<&'a Candidate> {
        // Both offer themselves as sources: each is eligible for any worker but itself.
        match self.first {
            Some(first) if first.worker != booked => Some(first),
            Some(_) => self.second.filter(|second| second.worker != booked),
            None => None,
        }
    }
}

/// The cached prefixes of a ranking's two best sources, by value.
#[derive(Clone, Copy, Debug)]
pub struct SourcePrefixes {
    best_worker: Option<WorkerId>,
    best: usize,
    second: usize,
}

impl SourcePrefixes {
    /// The cached prefix of [`SourceRanking::best_for`]`(booked)`, 0 when no peer is eligible:
    /// the best source's, except for the best itself, whose best source is the second.
    #[inline]
    pub fn for_booking_on(&self, booked: WorkerId) -> usize {
        if self.best_worker == Some(booked) {
            self.second
        } else {
            self.best
        }
    }
}

/// Sort key: longest prefix first, then the smaller worker id.
fn key(candidate: &Candidate) -> (Reverse<usize>, WorkerId) {
    (Reverse(candidate.cached_blocks), candidate.worker)
}

/// Whether `candidate` is an eligible source for workers other than itself.
fn offers_source(candidate: &Candidate) -> bool {
    // Any id other than the candidate's own asks only about its capabilities.
    let other = WorkerId::new(
        candidate.worker.worker_id.wrapping_add(1),
        candidate.worker.dp_rank,
    );
    candidate.is_fetch_source_for(other)
}

/// The engine block hashes `source` reported for the request's blocks `0..end`, root-aligned
/// (entry `i` is request block `i`, as `kv.fetch` payloads name them), stopping at the first
/// block whose engine hash the index does not know: a fetch can only name blocks the source can
/// identify, and blocks after a gap are useless without the gap.
pub fn root_aligned_hashes(
    request: &RequestView<'_>,
    source: WorkerId,
    end: usize,
) -> Vec<EngineBlockHash> {
    with_root_aligned_hashes(request, source, end, <[EngineBlockHash]>::to_vec)
}

/// Calls `f` with [`root_aligned_hashes`], borrowed from the booking's lookup when it holds
/// them as they are (no copy).
pub fn with_root_aligned_hashes<R>(
    request: &RequestView<'_>,
    source: WorkerId,
    end: usize,
    f: impl FnOnce(&[EngineBlockHash]) -> R,
) -> R {
    let end = end.min(request.sequence_hashes.len());
    let hashes = &request.sequence_hashes[..end];
    match request
        .blocks
        .recorded_engine_block_hashes(source, 0, hashes)
    {
        Some(recorded) => f(recorded),
        None => f(&looked_up_hashes(request, source, hashes)),
    }
}

/// The engine hashes of `hashes` (the request's leading blocks) that `source` reported, up to
/// the first one the index does not know.
fn looked_up_hashes(
    request: &RequestView<'_>,
    source: WorkerId,
    hashes: &[SequenceHash],
) -> Vec<EngineBlockHash> {
    // All known (the common case): one batched lookup; else stop at the first unknown block.
    if let Some(all) = request.blocks.engine_block_hashes(source, 0, hashes) {
        return all;
    }
    hashes
        .iter()
        .map_while(|hash| request.blocks.engine_block_hash(source, *hash))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{Cluster, worker};

    fn brute_force(candidates: &[Candidate], booked: WorkerId) -> Option<WorkerId> {
        candidates
            .iter()
            .filter(|c| c.is_fetch_source_for(booked))
            .min_by_key(|c| key(c))
            .map(|c| c.worker)
    }

    /// The ranking of `candidates`, after checking its best source for every one of them
    /// against [`brute_force`] (and its prefix against the best source's).
    fn assert_ranks_as_brute_force<'a>(
        candidates: &'a [Candidate],
        context: &str,
    ) -> SourceRanking<'a> {
        let ranking = SourceRanking::new(candidates);
        let prefixes = ranking.prefixes();
        for candidate in candidates {
            let best = ranking.best_for(candidate.worker);
            assert_eq!(
                best.map(|c| c.worker),
                brute_force(candidates, candidate.worker),
                "{context}: booked {}",
                candidate.worker
            );
            assert_eq!(
                prefixes.for_booking_on(candidate.worker),
                best.map_or(0, |c| c.cached_blocks),
                "{context}: booked {}",
                candidate.worker
            );
        }
        ranking
    }

    #[test]
    fn best_source_matches_a_brute_force_search() {
        let mut cluster = Cluster::new(8);
        cluster.add(1, 5).hint("tcp://a");
        cluster.add(2, 7).hint("tcp://b");
        cluster.add(3, 7).hint("tcp://c");
        cluster.add(4, 9); // no router_hint
        cluster.add(5, 9).hint(""); // empty endpoint
        cluster.add(6, 9).hint_without_endpoint();
        cluster.add(7, 0);
        let candidates = cluster.candidates();
        let ranking = assert_ranks_as_brute_force(&candidates, "one list");
        // Ties on length go to the smaller id; a worker is never its own source.
        assert_eq!(ranking.best_for(worker(1)).unwrap().worker, worker(2));
        assert_eq!(ranking.best_for(worker(2)).unwrap().worker, worker(3));
    }

    #[test]
    fn best_source_matches_a_brute_force_search_in_any_order() {
        let rng = dynamo_kv_router::rng::SplitMix64::new(Some(12));
        for round in 0..200 {
            let mut cluster = Cluster::new(16);
            let workers = 1 + rng.below(12) as u64;
            for id in 1..=workers {
                // Few distinct lengths, so that ties on length are common.
                let cached = [0, 4, 4, 9, 16][rng.below(5)];
                match rng.below(4) {
                    0 => cluster.add(id, cached),
                    1 => cluster.add(id, cached).hint(""),
                    _ => cluster.add(id, cached).hint("tcp://peer"),
                };
            }
            let mut candidates = cluster.candidates();
            for i in (1..candidates.len()).rev() {
                candidates.swap(i, rng.below(i + 1));
            }
            assert_ranks_as_brute_force(&candidates, &format!("round {round}"));
        }
    }

    #[test]
    fn no_eligible_peer_means_no_source() {
        let mut cluster = Cluster::new(4);
        cluster.add(1, 4).hint("tcp://only");
        cluster.add(2, 0);
        let candidates = cluster.candidates();
        let ranking = SourceRanking::new(&candidates);
        assert!(ranking.best_for(worker(1)).is_none());
        assert_eq!(ranking.best_for(worker(2)).unwrap().worker, worker(1));
    }

    #[test]
    fn root_aligned_hashes_stop_at_the_first_unknown_block() {
        let mut cluster = Cluster::new(6);
        cluster.add(1, 6).hint("tcp://a");
        cluster.with_view(|view| {
            assert_eq!(
                root_aligned_hashes(view, worker(1), 6),
                cluster.engine_hashes(1, 0..6)
            );
            // Ranges past the prompt are clamped.
            assert_eq!(root_aligned_hashes(view, worker(1), 99).len(), 6);
            assert!(root_aligned_hashes(view, worker(1), 0).is_empty());
        });
        cluster.forget(1, 4);
        cluster.with_view(|view| {
            assert_eq!(
                root_aligned_hashes(view, worker(1), 6),
                cluster.engine_hashes(1, 0..4)
            );
            assert_eq!(
                root_aligned_hashes(view, worker(1), 3),
                cluster.engine_hashes(1, 0..3)
            );
        });
    }
}
