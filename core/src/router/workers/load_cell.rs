//! The load the router has reserved on one worker: counters read without locks by bookings
//! and changed by the load ledger.

use crate::plugins::WorkerLoad;
use std::sync::atomic::{AtomicU64, Ordering};

/// A worker's reserved load; read without locks by bookings, changed under the ledger's lock.
#[derive(Default)]
pub(crate) struct WorkerLoadCell {
    prefill_tokens: AtomicU64,
    blocks: AtomicU64,
    requests: AtomicU64,
}

impl WorkerLoadCell {
    /// The load as it is now.
    pub(crate) fn snapshot(&self) -> WorkerLoad {
        WorkerLoad {
            active_prefill_tokens: self.prefill_tokens.load(Ordering::Relaxed),
            active_blocks: self.blocks.load(Ordering::Relaxed),
            active_requests: self.requests.load(Ordering::Relaxed),
        }
    }

    /// Adds one booking's reservation.
    pub(crate) fn add(&self, prefill_tokens: u64, blocks: u64) {
        self.prefill_tokens
            .fetch_add(prefill_tokens, Ordering::Relaxed);
        self.blocks.fetch_add(blocks, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Gives back a booking's prefill tokens (prefill completed).
    pub(crate) fn sub_prefill(&self, prefill_tokens: u64) {
        self.prefill_tokens
            .fetch_sub(prefill_tokens, Ordering::Relaxed);
    }

    /// Gives back everything a booking reserved.
    pub(crate) fn sub(&self, prefill_tokens: u64, blocks: u64) {
        self.sub_prefill(prefill_tokens);
        self.blocks.fetch_sub(blocks, Ordering::Relaxed);
        self.requests.fetch_sub(1, Ordering::Relaxed);
    }
}
