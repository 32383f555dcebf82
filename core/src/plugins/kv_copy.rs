//! A committed KV copy: the selection policy's promise that the booked worker copies KV from a peer.

use crate::router::worker::WorkerId;

/// KV blocks the booked worker is committed to copy from a peer.
///
/// Made by a worker-selection policy that declares [`Commitments::KV_COPY`](super::Commitments),
/// read by the hint policy that sends it through [`HintContext::committed_kv_copy`](super::HintContext::committed_kv_copy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCopy {
    /// The peer that holds the blocks.
    pub source: WorkerId,
    /// The peer's control endpoint (for example `tcp://10.0.0.7:23280`).
    pub source_endpoint: String,
    /// Index, in the request's blocks, of the first block to copy.
    pub first_block: usize,
    /// The engine's block hashes of the blocks to copy, in order.
    pub block_hashes: Vec<u64>,
}
