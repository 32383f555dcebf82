//! The KV-blind router modes: round-robin, random (seeded) and least-loaded. They never read the
//! KV index and run no hint policies.

use super::workers::{ActiveChain, WorkerEntry};
use super::{BookError, Booking, BookingMode, BookingStats, Prompt, RouteRequest, Router};
use crate::identity::Role;
use crate::kv::full_blocks;
use crate::rng::SplitMix64;
use crate::setup::RouterMode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

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

impl Router {
    /// Books `request` by the KV-blind `mode`: no index, no hints; the whole prompt is
    /// reserved as prefill (nothing for a preview).
    pub(super) fn book_blind(
        &self,
        mode: RouterMode,
        request: &RouteRequest,
        start: Instant,
        booking_mode: BookingMode,
    ) -> Result<Booking, BookError> {
        let role = request.role;
        let block_size = self.block_size;
        let prompt_tokens = request.prompt.prompt_tokens();
        let blocks = match &request.prompt {
            Prompt::Tokens(tokens) => full_blocks(tokens.len(), block_size, request.identity.eagle),
            Prompt::Blocks {
                sequence_hashes, ..
            } => sequence_hashes.len(),
        };
        let state = self.state.read();
        let workers = state
            .workers
            .role(role)
            .ok_or(BookError::NoWorkers { role })?;
        let allowed: Vec<Arc<WorkerEntry>>;
        let entries = match &request.allowed_workers {
            None => &workers.entries,
            Some(filter) => {
                allowed = workers
                    .entries
                    .iter()
                    .filter(|entry| filter.allows(entry.info.id))
                    .cloned()
                    .collect();
                if allowed.is_empty() {
                    return Err(BookError::NoAllowedWorkers {
                        role,
                        allowed: filter.worker_ids().to_vec(),
                    });
                }
                &allowed
            }
        };
        let position = self.blind.choose(mode, role, entries);
        let booked = &entries[position.min(entries.len() - 1)];
        let worker = booked.info.id;
        if booking_mode == BookingMode::Book {
            self.reserve(
                &request.request_id,
                role,
                booked,
                prompt_tokens,
                ActiveChain {
                    hashes: None,
                    untracked_blocks: blocks as u64,
                },
                start,
            );
        }
        drop(state);
        Ok(Booking {
            request_id: request.request_id.clone(),
            role,
            worker,
            hint: None,
            committed_kv_copy: None,
            stats: BookingStats {
                blocks,
                latency: start.elapsed(),
                ..BookingStats::default()
            },
        })
    }
}
