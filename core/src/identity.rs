//! The basic identities every layer names: which worker (its KV cache domain) and which role
//! it serves. They sit at the bottom of the crate, beside the block identities of
//! [`block_identity`](crate::block_identity), so that the KV index, the plugin API and the
//! router all import them downward.

use std::fmt;

/// One KV cache domain: a worker process and its data-parallel rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct WorkerId {
    /// The worker's id.
    pub worker_id: u64,
    /// The data-parallel rank within the worker.
    pub dp_rank: u32,
}

impl WorkerId {
    /// The worker `worker_id` at data-parallel rank `dp_rank`.
    pub const fn new(worker_id: u64, dp_rank: u32) -> Self {
        Self { worker_id, dp_rank }
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.worker_id, self.dp_rank)
    }
}

/// The role a worker serves and a `worker_selection` entry configures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Prefill and decode on one worker.
    Aggregated,
    /// Prefill only (disaggregated serving).
    Prefill,
    /// Decode only (disaggregated serving).
    Decode,
}

impl Role {
    /// Every role, in configuration order.
    pub const ALL: [Role; 3] = [Role::Aggregated, Role::Prefill, Role::Decode];

    /// The role's key under `worker_selection:`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Aggregated => "aggregated",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
