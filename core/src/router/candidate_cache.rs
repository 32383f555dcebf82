//! The candidate list a thread's bookings reuse: rebuilt when the role's worker list changed,
//! else only its cached prefixes and load projections are refreshed (no allocation).

use super::workers::{ActiveChains, RoleWorkers};
use crate::block_identity::SequenceHash;
use crate::plugins::Candidate;

/// The candidates of the last booking on this thread, with the worker-list generation they
/// were built from.
#[derive(Default)]
pub(crate) struct CandidateCache {
    candidates: Vec<Candidate>,
    /// The generation of the role worker list `candidates` was built from (0: none).
    built_from_generation: u64,
    /// Per candidate, the longest prefix of the request one of its active chains shares.
    shared: Vec<usize>,
}

impl CandidateCache {
    /// The candidates of `workers` for a request of `sequence_hashes`, where candidate `i`
    /// caches `cached_blocks[i]` blocks of it, with their loads as they would be with the
    /// request booked on them (its blocks none of their `active` chains shares are
    /// `additional_active_blocks`).
    pub(crate) fn refresh(
        &mut self,
        workers: &RoleWorkers,
        cached_blocks: &[usize],
        sequence_hashes: &[SequenceHash],
        active: &ActiveChains,
    ) -> &[Candidate] {
        if self.built_from_generation != workers.generation
            || self.candidates.len() != workers.entries.len()
        {
            self.rebuild(workers);
        }
        self.shared.clear();
        self.shared.resize(workers.entries.len(), 0);
        active.raise_shared_prefixes(sequence_hashes, &mut self.shared, |holder| {
            workers.position_of(holder)
        });
        let blocks = sequence_hashes.len();
        for (((candidate, entry), cached), shared) in self
            .candidates
            .iter_mut()
            .zip(&workers.entries)
            .zip(cached_blocks)
            .zip(&self.shared)
        {
            candidate.cached_blocks = *cached;
            candidate.load = entry.load.snapshot();
            candidate.load.additional_active_blocks = (blocks - shared) as u64;
        }
        &self.candidates
    }

    /// Builds the candidates of `workers` (their prefixes and loads are set by the refresh).
    fn rebuild(&mut self, workers: &RoleWorkers) {
        self.candidates.clear();
        self.candidates
            .extend(workers.entries.iter().map(|entry| Candidate {
                worker: entry.info.id,
                cached_blocks: 0,
                load: entry.load.snapshot(),
                router_hint: entry.info.capabilities.router_hint,
                source_endpoint: entry.source_endpoint.clone(),
            }));
        self.built_from_generation = workers.generation;
    }
}
