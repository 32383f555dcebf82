//! The KV-blind router modes: round-robin, random (seeded) and least-loaded. They never read the
//! KV index and run no hint policies.

use super::setup::RouterMode;
use super::worker::Role;
use super::workers::WorkerEntry;
use crate::rng::SplitMix64;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The per-role state of the blind modes.
pub(crate) struct BlindSelector {
    turns: [AtomicUsize; Role::ALL.len()],
    random: SplitMix64,
}

impl BlindSelector {
    /// A selector whose random mode starts from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            turns: std::array::from_fn(|_| AtomicUsize::new(0)),
            random: SplitMix64::seeded(seed),
        }
    }

    /// The position in `workers` (sorted by id, non-empty) that `mode` chooses for `role`.
    pub(crate) fn choose(
        &self,
        mode: RouterMode,
        role: Role,
        workers: &[Arc<WorkerEntry>],
    ) -> usize {
        let count = workers.len().max(1);
        match mode {
            RouterMode::RoundRobin => {
                self.turns[role_index(role)].fetch_add(1, Ordering::Relaxed) % count
            }
            RouterMode::Random => (self.random.next_u64() % count as u64) as usize,
            RouterMode::LeastLoaded | RouterMode::Kv => workers
                .iter()
                .enumerate()
                .min_by_key(|(_, entry)| (entry.load.snapshot().active_blocks, entry.info.id))
                .map_or(0, |(position, _)| position),
        }
    }
}

fn role_index(role: Role) -> usize {
    match role {
        Role::Aggregated => 0,
        Role::Prefill => 1,
        Role::Decode => 2,
    }
}
