//! Per-thread buffers a booking reuses, so the common booking allocates nothing for its hashes,
//! overlaps, recorded engine ids and candidate list.

use super::candidate_cache::CandidateCache;
use crate::block_identity::SequenceHash;
use crate::kv::RecordedEngines;
use std::cell::Cell;
use std::ops::{Deref, DerefMut};

/// Buffers larger than this many entries are dropped after the booking rather than kept.
const KEEP_AT_MOST: usize = 1 << 16;

/// The buffers of one booking.
#[derive(Default)]
pub(crate) struct BookingScratch {
    /// The request's sequence hashes.
    pub(crate) hashes: Vec<SequenceHash>,
    /// Each candidate's cached prefix length.
    pub(crate) lengths: Vec<usize>,
    /// Each candidate's prefix counting predictions (only predicting alongside KV events).
    pub(crate) merged_lengths: Vec<usize>,
    /// The canonical engine hash of each block below the longest cached prefix, and whether
    /// they are each candidate's own.
    pub(crate) engines: RecordedEngines,
    /// The candidates of the last booking on this thread.
    pub(crate) candidates: CandidateCache,
}

thread_local! {
    static SCRATCH: Cell<Option<BookingScratch>> = const { Cell::new(None) };
}

/// This thread's scratch, taken for one booking and given back when dropped (a nested booking
/// on the same thread, from inside a policy, simply gets fresh buffers).
pub(crate) struct ScratchGuard(BookingScratch);

impl ScratchGuard {
    /// Takes this thread's scratch.
    pub(crate) fn take() -> Self {
        Self(
            SCRATCH
                .try_with(Cell::take)
                .ok()
                .flatten()
                .unwrap_or_default(),
        )
    }
}

impl Deref for ScratchGuard {
    type Target = BookingScratch;

    fn deref(&self) -> &BookingScratch {
        &self.0
    }
}

impl DerefMut for ScratchGuard {
    fn deref_mut(&mut self) -> &mut BookingScratch {
        &mut self.0
    }
}

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.0);
        if scratch.hashes.capacity() <= KEEP_AT_MOST && scratch.engines.capacity() <= KEEP_AT_MOST {
            let _ = SCRATCH.try_with(|cell| cell.set(Some(scratch)));
        }
    }
}
