//! A workload: the requests a replay sends, in arrival order, as per-block ids.

use dynamo_kv_router::kv::{LocalBlockHash, SequenceHash};
use dynamo_kv_router::plugins::SessionContext;

/// One request of a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadRequest {
    /// Arrival time, in microseconds from the start of the workload.
    pub arrival_us: u64,
    /// Prompt length in tokens (may end with a partial block).
    pub prompt_tokens: usize,
    /// Tokens to generate.
    pub output_tokens: usize,
    /// One id per full block of the prompt; equal ids at equal positions mean a shared prefix
    /// (they are chained into sequence hashes before routing).
    pub block_ids: Vec<u64>,
    /// The session the request belongs to, if any.
    pub session: SessionContext,
}

/// Requests in arrival order, with the block size their block ids were cut at.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// A short human-readable name (trace file name or generator description).
    pub name: String,
    /// Tokens per block of `block_ids`.
    pub block_size: u32,
    /// The requests, sorted by arrival time.
    pub requests: Vec<WorkloadRequest>,
}

impl Workload {
    /// Total full blocks over all requests.
    pub fn total_blocks(&self) -> usize {
        self.requests.iter().map(|r| r.block_ids.len()).sum()
    }

    /// Time from the first to the last arrival, in microseconds.
    pub fn span_us(&self) -> u64 {
        match (self.requests.first(), self.requests.last()) {
            (Some(first), Some(last)) => last.arrival_us.saturating_sub(first.arrival_us),
            _ => 0,
        }
    }

    /// Sorts the requests by arrival time, keeping the file order of equal arrivals.
    pub fn sort_by_arrival(&mut self) {
        self.requests.sort_by_key(|r| r.arrival_us);
    }
}

/// One request in the form the simulation routes: its chained sequence hashes.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedRequest {
    /// Arrival time, in microseconds.
    pub arrival_us: u64,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens to generate.
    pub output_tokens: usize,
    /// The local hash of each full block (the trace's block ids, as given): what the simulated
    /// workers' `stored` events carry as `tokens_hash`.
    pub local_hashes: Vec<LocalBlockHash>,
    /// The sequence hash of each full block: the local hashes chained.
    pub sequence_hashes: Vec<SequenceHash>,
    /// The caller's session context.
    pub session: SessionContext,
}

/// A workload with its sequence hashes computed once, shared by every configuration replayed.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedWorkload {
    /// The workload's name.
    pub name: String,
    /// Tokens per block.
    pub block_size: u32,
    /// The requests, sorted by arrival.
    pub requests: Vec<PreparedRequest>,
}

impl Workload {
    /// Chains each request's block ids into sequence hashes, as the router does for traces.
    pub fn prepare(&self) -> PreparedWorkload {
        PreparedWorkload {
            name: self.name.clone(),
            block_size: self.block_size,
            requests: self
                .requests
                .iter()
                .map(|request| PreparedRequest {
                    arrival_us: request.arrival_us,
                    prompt_tokens: request.prompt_tokens,
                    output_tokens: request.output_tokens,
                    local_hashes: LocalBlockHash::from_u64s(&request.block_ids).to_vec(),
                    sequence_hashes: dynamo_kv_router::kv::sequence_hashes_from_block_ids(
                        &request.block_ids,
                    ),
                    session: request.session.clone(),
                })
                .collect(),
        }
    }
}

impl PreparedWorkload {
    /// Total full blocks over all requests.
    pub fn total_blocks(&self) -> usize {
        self.requests.iter().map(|r| r.sequence_hashes.len()).sum()
    }
}
