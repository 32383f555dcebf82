//! The load the router has reserved on one worker: counters read without locks by bookings
//! and changed by the load ledger. Its active chains live in the router-wide
//! [`ActiveChains`](super::ActiveChains), under the holder key of this cell.

use super::active_chains::{ActiveChains, Holder};
use crate::block_identity::SequenceHash;
use crate::identity::WorkerId;
use crate::plugins::WorkerLoad;
use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers every load cell ever made, so that the active chains of a worker that deregistered
/// are never taken for those of the same id registered again.
static NEXT_CELL: AtomicU64 = AtomicU64::new(1);

/// A worker's reserved load; the counters are read without locks by bookings and changed under
/// the ledger's lock.
pub(crate) struct WorkerLoadCell {
    holder: Holder,
    prefill_tokens: AtomicU64,
    /// Distinct active blocks: the union of the active chains, plus blocks of bookings made
    /// without block hashes (the blind router modes).
    blocks: AtomicU64,
    requests: AtomicU64,
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
    /// The empty load of a newly registered `worker`.
    pub(crate) fn new(worker: WorkerId) -> Self {
        Self {
            holder: Holder {
                worker,
                cell: NEXT_CELL.fetch_add(1, Ordering::Relaxed),
            },
            prefill_tokens: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// The key of this cell's chains in the [`ActiveChains`].
    pub(crate) fn holder(&self) -> Holder {
        self.holder
    }

    /// The load as it is now (`additional_active_blocks` is request-specific: 0 here).
    pub(crate) fn snapshot(&self) -> WorkerLoad {
        WorkerLoad {
            active_prefill_tokens: self.prefill_tokens.load(Ordering::Relaxed),
            active_blocks: self.blocks.load(Ordering::Relaxed),
            active_requests: self.requests.load(Ordering::Relaxed),
            additional_active_blocks: 0,
        }
    }

    /// Adds one booking's reservation, its chain to `active`.
    pub(crate) fn add(
        &self,
        prefill_tokens: u64,
        chain: &ActiveChain,
        active: &RwLock<ActiveChains>,
    ) {
        let added = chain
            .hashes
            .as_ref()
            .map_or(0, |hashes| active.write().add(self.holder, hashes));
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

    /// Gives back everything a booking reserved, its chain from `active`.
    pub(crate) fn sub(
        &self,
        prefill_tokens: u64,
        chain: &ActiveChain,
        active: &RwLock<ActiveChains>,
    ) {
        let removed = chain
            .hashes
            .as_ref()
            .map_or(0, |hashes| active.write().remove(self.holder, hashes));
        self.sub_prefill(prefill_tokens);
        self.blocks
            .fetch_sub(removed + chain.untracked_blocks, Ordering::Relaxed);
        self.requests.fetch_sub(1, Ordering::Relaxed);
    }
}
