//! The read-only view of one request that every policy of a booking shares.

use super::{Candidate, SessionContext};
use crate::block_identity::{EngineBlockHash, SequenceHash};
use crate::identity::{Role, WorkerId};
use crate::kv::KvIndex;

/// Resolves the engine's own block ids (what `kv.fetch` payloads name) from the router's index.
pub trait BlockLookup: Send + Sync {
    /// The engine `block_hash` that `worker` reported for the block whose sequence hash is
    /// `sequence_hash`, if the index knows it.
    fn engine_block_hash(
        &self,
        worker: WorkerId,
        sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash>;

    /// The engine block hashes that `worker` reported for `sequence_hashes`, the request's
    /// blocks `first_block..first_block + sequence_hashes.len()`, or `None` if the index lacks
    /// any of them. The default asks [`BlockLookup::engine_block_hash`] block by block; the
    /// router's per-booking lookup serves the common case from what its overlap pass recorded.
    fn engine_block_hashes(
        &self,
        worker: WorkerId,
        first_block: usize,
        sequence_hashes: &[SequenceHash],
    ) -> Option<Vec<EngineBlockHash>> {
        let _ = first_block;
        sequence_hashes
            .iter()
            .map(|hash| self.engine_block_hash(worker, *hash))
            .collect()
    }

    /// What [`BlockLookup::engine_block_hashes`] returns, borrowed, when the lookup holds those
    /// hashes as they are; `None` when it would have to look them up (then call
    /// `engine_block_hashes`). The default holds nothing; the router's per-booking lookup
    /// lends what its overlap pass recorded, sparing a copy.
    fn recorded_engine_block_hashes(
        &self,
        worker: WorkerId,
        first_block: usize,
        sequence_hashes: &[SequenceHash],
    ) -> Option<&[EngineBlockHash]> {
        let _ = (worker, first_block, sequence_hashes);
        None
    }
}

/// A lookup that knows no block; for tests and for routers without a KV index.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBlockLookup;

impl BlockLookup for NoBlockLookup {
    fn engine_block_hash(
        &self,
        _worker: WorkerId,
        _sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash> {
        None
    }
}

/// The router's index answers for every worker it tracks.
impl BlockLookup for KvIndex {
    fn engine_block_hash(
        &self,
        worker: WorkerId,
        sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash> {
        KvIndex::engine_block_hash(self, worker, sequence_hash)
    }
}

/// One request being booked, as the router computed it once: its identity, size, session,
/// block hashes, and every candidate worker with its cached prefix and load.
#[derive(Clone, Copy)]
pub struct RequestView<'a> {
    /// The request id (also the hint envelope's `message_id`).
    pub request_id: &'a str,
    /// The role being booked.
    pub role: Role,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens per KV block.
    pub block_size: u32,
    /// The caller's session context.
    pub session: &'a SessionContext,
    /// The request's sequence hashes, one per full block, in order.
    pub sequence_hashes: &'a [SequenceHash],
    /// The role's registered workers with their cached prefix lengths and loads.
    pub candidates: &'a [Candidate],
    /// Resolves engine block ids from the index.
    pub blocks: &'a dyn BlockLookup,
}

impl<'a> RequestView<'a> {
    /// The candidate entry of `worker`, if it is one of this booking's candidates.
    pub fn candidate(&self, worker: WorkerId) -> Option<&'a Candidate> {
        self.candidates
            .iter()
            .find(|candidate| candidate.worker == worker)
    }

    /// Number of full blocks in the prompt.
    pub fn block_count(&self) -> usize {
        self.sequence_hashes.len()
    }

    /// The engine block hashes `worker` reported for the request's blocks `range`, or `None` if
    /// the index lacks any of them.
    pub fn engine_block_hashes(
        &self,
        worker: WorkerId,
        range: std::ops::Range<usize>,
    ) -> Option<Vec<EngineBlockHash>> {
        let first_block = range.start;
        let hashes = self.sequence_hashes.get(range)?;
        self.blocks.engine_block_hashes(worker, first_block, hashes)
    }
}

impl std::fmt::Debug for RequestView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestView")
            .field("request_id", &self.request_id)
            .field("role", &self.role)
            .field("prompt_tokens", &self.prompt_tokens)
            .field("block_size", &self.block_size)
            .field("session", &self.session)
            .field("blocks", &self.sequence_hashes.len())
            .field("candidates", &self.candidates)
            .finish()
    }
}
