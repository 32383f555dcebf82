//! The candidate list a thread's bookings reuse: rebuilt when the role's worker list changed,
//! else only its cached prefixes and load projections are refreshed (no allocation).

use super::workers::RoleWorkers;
use crate::block_identity::SequenceHash;
use crate::plugins::Candidate;

/// The candidates of the last booking on this thread, with the worker-list generation they
/// were built from.
#[derive(Default)]
pub(crate) struct CandidateCache {
    candidates: Vec<Candidate>,
    /// The generation of the role worker list `candidates` was built from (0: none).
    built_from_generation: u64,
}

impl CandidateCache {
    /// The candidates of `workers` for a request of `sequence_hashes`, where candidate `i`
    /// caches `cached_blocks[i]` blocks of it.
    pub(crate) fn refresh(
        &mut self,
        workers: &RoleWorkers,
        cached_blocks: &[usize],
        sequence_hashes: &[SequenceHash],
    ) -> &[Candidate] {
        if self.built_from_generation == workers.generation
            && self.candidates.len() == workers.entries.len()
        {
            for ((candidate, entry), cached) in self
                .candidates
                .iter_mut()
                .zip(&workers.entries)
                .zip(cached_blocks)
            {
                candidate.cached_blocks = *cached;
                candidate.load = entry.load.projection(sequence_hashes);
            }
        } else {
            self.candidates.clear();
            self.candidates
                .extend(
                    workers
                        .entries
                        .iter()
                        .zip(cached_blocks)
                        .map(|(entry, cached)| Candidate {
                            worker: entry.info.id,
                            cached_blocks: *cached,
                            load: entry.load.projection(sequence_hashes),
                            router_hint: entry.info.capabilities.router_hint,
                            source_endpoint: entry.source_endpoint.clone(),
                        }),
                );
            self.built_from_generation = workers.generation;
        }
        &self.candidates
    }
}
