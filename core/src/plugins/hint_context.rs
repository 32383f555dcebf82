//! What a hint policy sees of one booking.

use super::{Candidate, KvCopy, RequestView, SessionContext};
use crate::block_identity::SequenceHash;
use crate::identity::{Role, WorkerId};

/// The booking a hint policy builds actions for: the request, the booked worker, and the KV copy
/// the selection policy committed it to, if any. All views are read-only; a policy never queries
/// the index again.
#[derive(Clone, Copy, Debug)]
pub struct HintContext<'a> {
    request: RequestView<'a>,
    worker: WorkerId,
    committed_kv_copy: Option<&'a KvCopy>,
}

impl<'a> HintContext<'a> {
    /// The context of a booking of `request` on `worker`.
    pub fn new(
        request: RequestView<'a>,
        worker: WorkerId,
        committed_kv_copy: Option<&'a KvCopy>,
    ) -> Self {
        Self {
            request,
            worker,
            committed_kv_copy,
        }
    }

    /// The request id.
    pub fn request_id(&self) -> &'a str {
        self.request.request_id
    }

    /// The booked worker.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// The role being booked.
    pub fn role(&self) -> Role {
        self.request.role
    }

    /// Prompt length in tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.request.prompt_tokens
    }

    /// Tokens per KV block.
    pub fn block_size(&self) -> u32 {
        self.request.block_size
    }

    /// The caller's session context.
    pub fn session(&self) -> &'a SessionContext {
        self.request.session
    }

    /// The KV copy the worker-selection policy committed the booked worker to, if any.
    pub fn committed_kv_copy(&self) -> Option<&'a KvCopy> {
        self.committed_kv_copy
    }

    /// The request's sequence hashes, one per full block.
    pub fn sequence_hashes(&self) -> &'a [SequenceHash] {
        self.request.sequence_hashes
    }

    /// The request's sequence hashes, under the name plugins written for earlier versions use;
    /// the same as [`HintContext::sequence_hashes`] (they are not engine block hashes).
    pub fn block_hashes(&self) -> &'a [SequenceHash] {
        self.sequence_hashes()
    }

    /// Every candidate worker of the role with its cached prefix length, load and capabilities
    /// (the same list the selection policy saw in
    /// [`WorkerSelectionContext::candidates`](super::WorkerSelectionContext::candidates)).
    pub fn candidates(&self) -> &'a [Candidate] {
        self.request.candidates
    }

    /// Length, in blocks, of the request's prefix that the booked worker caches.
    pub fn booked_cached_blocks(&self) -> usize {
        self.request
            .candidate(self.worker)
            .map_or(0, |candidate| candidate.cached_blocks)
    }

    /// The whole request view.
    pub fn request(&self) -> &RequestView<'a> {
        &self.request
    }
}
