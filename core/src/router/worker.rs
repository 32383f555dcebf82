//! Workers: their identity and the role they serve.

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

/// What a worker advertises when it registers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerCapabilities {
    /// Whether the worker accepts hints (`router_hint`).
    pub router_hint: bool,
    /// The control endpoint peers fetch KV from (for example `tcp://10.0.0.7:23280`); `None`
    /// means the worker can receive KV but cannot be named as a fetch source.
    pub router_hint_source_control_endpoint: Option<String>,
}

impl WorkerCapabilities {
    /// A worker that accepts no hints.
    pub fn none() -> Self {
        Self::default()
    }

    /// A worker that accepts hints and serves KV to peers at `endpoint`.
    pub fn hint_source(endpoint: impl Into<String>) -> Self {
        Self {
            router_hint: true,
            router_hint_source_control_endpoint: Some(endpoint.into()),
        }
    }
}

/// A worker as it registers: identity, role and capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker.
    pub id: WorkerId,
    /// The role it serves.
    pub role: Role,
    /// What it advertises.
    pub capabilities: WorkerCapabilities,
}

impl WorkerInfo {
    /// A worker `id` serving `role` with `capabilities`.
    pub fn new(id: WorkerId, role: Role, capabilities: WorkerCapabilities) -> Self {
        Self {
            id,
            role,
            capabilities,
        }
    }
}
