//! The load the router has reserved on one worker: counters read without locks by bookings
//! and changed by the load ledger, and the worker's active blocks.

use super::active_blocks::ActiveBlocks;
use crate::block_identity::SequenceHash;
use crate::plugins::WorkerLoad;
use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A worker's reserved load; the counters are read without locks by bookings and changed under
/// the ledger's lock, the active chains are read under their own (uncontended) read lock.
#[derive(Default)]
pub(crate) struct WorkerLoadCell {
    prefill_tokens: AtomicU64,
    /// Distinct active blocks: the union of the active chains, plus blocks of bookings made
    /// without block hashes (the blind router modes).
    blocks: AtomicU64,
    requests: AtomicU64,
    active: RwLock<ActiveBlocks>,
}

/// The blocks a booking holds active on its worker.
#[derive(Clone, Debug, Default)]
pub(crate) struct ActiveChain {
    /// The sequence hashes of the request's full blocks, when the booking computed them.
    pub(crate) hashes: Option<Arc<[SequenceHash]>>,
    /// Blocks held without hashes (counted as they are, never shared).
    pub(crate) untracked_blocks: u64,
}

impl WorkerLoadCell {
    /// The load as it is now (`additional_active_blocks` is request-specific: 0 here).
    pub(crate) fn snapshot(&self) -> WorkerLoad {
        WorkerLoad {
            active_prefill_tokens: self.prefill_tokens.load(Ordering::Relaxed),
            active_blocks: self.blocks.load(Ordering::Relaxed),
            active_requests: self.requests.load(Ordering::Relaxed),
            additional_active_blocks: 0,
        }
    }

    /// The load as it would be with a request of these full-block sequence hashes: its blocks
    /// that no active request on this worker shares are `additional_active_blocks`.
    pub(crate) fn projection(&self, hashes: &[SequenceHash]) -> WorkerLoad {
        let mut load = self.snapshot();
        if !hashes.is_empty() {
            let shared = self.active.read().shared_prefix(hashes);
            load.additional_active_blocks = (hashes.len() - shared) as u64;
        }
        load
    }

    /// Adds one booking's reservation.
    pub(crate) fn add(&self, prefill_tokens: u64, chain: &ActiveChain) {
        let added = chain
            .hashes
            .as_ref()
            .map_or(0, |hashes| self.active.write().add(Arc::clone(hashes)));
        self.prefill_tokens
            .fetch_add(prefill_tokens, Ordering::Relaxed);
        self.blocks
            .fetch_add(added + chain.untracked_blocks, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds blocks held without hashes to a live booking (its generated output).
    pub(crate) fn add_untracked_blocks(&self, blocks: u64) {
        self.blocks.fetch_add(blocks, Ordering::Relaxed);
    }

    /// Gives back a booking's prefill tokens (prefill completed).
    pub(crate) fn sub_prefill(&self, prefill_tokens: u64) {
        self.prefill_tokens
            .fetch_sub(prefill_tokens, Ordering::Relaxed);
    }

    /// Gives back everything a booking reserved.
    pub(crate) fn sub(&self, prefill_tokens: u64, chain: &ActiveChain) {
        let removed = chain
            .hashes
            .as_ref()
            .map_or(0, |hashes| self.active.write().remove(hashes));
        self.sub_prefill(prefill_tokens);
        self.blocks
            .fetch_sub(removed + chain.untracked_blocks, Ordering::Relaxed);
        self.requests.fetch_sub(1, Ordering::Relaxed);
    }
}
