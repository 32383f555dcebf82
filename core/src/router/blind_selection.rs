//! The KV-blind router modes: round-robin, random (seeded) and least-loaded. They never read the
//! KV index and run no hint policies.

use super::setup::RouterMode;
use super::worker::Role;
use super::workers::WorkerEntry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The per-role state of the blind modes.
pub(crate) struct BlindSelector {
    turns: [AtomicUsize; Role::ALL.len()],
    random_state: AtomicU64,
}

impl BlindSelector {
    /// A selector whose random mode starts from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            turns: std::array::from_fn(|_| AtomicUsize::new(0)),
            random_state: AtomicU64::new(seed),
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
            RouterMode::Random => (self.next_random() % count as u64) as usize,
            RouterMode::LeastLoaded | RouterMode::Kv => workers
                .iter()
                .enumerate()
                .min_by_key(|(_, entry)| (entry.load.snapshot().active_blocks, entry.info.id))
                .map_or(0, |(position, _)| position),
        }
    }

    /// SplitMix64: a seeded, lock-free sequence.
    fn next_random(&self) -> u64 {
        let state = self
            .random_state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn role_index(role: Role) -> usize {
    match role {
        Role::Aggregated => 0,
        Role::Prefill => 1,
        Role::Decode => 2,
    }
}
