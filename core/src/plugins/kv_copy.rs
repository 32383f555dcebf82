//! A committed KV copy: the selection policy's promise that the booked worker copies KV from a peer.

use super::kv_fetch_payload::KvFetchPayload;
use crate::block_identity::EngineBlockHash;
use crate::identity::WorkerId;

/// KV blocks the booked worker is committed to copy from a peer.
///
/// Made by a worker-selection policy that declares [`Commitments::KV_COPY`](super::Commitments),
/// read by the hint policy that sends it through [`HintContext::committed_kv_copy`](super::HintContext::committed_kv_copy).
///
/// `block_hashes` are root-aligned, as upstream's `kv.fetch@1.0` payload names them:
/// `block_hashes[i]` is the source's engine hash of request block `i`, from block 0 to the end
/// of the source's cached prefix. The booked worker lacks blocks `first_block..` of them and
/// fetches only those.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCopy {
    /// The peer that holds the blocks.
    pub source: WorkerId,
    /// The peer's control endpoint (for example `tcp://10.0.0.7:23280`).
    pub source_endpoint: String,
    /// Index, in the request's blocks, of the first block the booked worker lacks.
    pub first_block: usize,
    /// The source's engine hashes of request blocks `0..` the end of its cached prefix.
    pub block_hashes: Vec<EngineBlockHash>,
}

impl KvCopy {
    /// The request blocks the booked worker copies: `first_block..block_hashes.len()`.
    pub fn copied_blocks(&self) -> std::ops::Range<usize> {
        self.first_block.min(self.block_hashes.len())..self.block_hashes.len()
    }

    /// The `kv.fetch@1.0` payload that asks the booked worker to make this copy.
    pub fn fetch_payload(&self) -> KvFetchPayload {
        KvFetchPayload {
            source_control_endpoint: self.source_endpoint.clone(),
            block_hashes: self.block_hashes.clone(),
        }
    }
}
