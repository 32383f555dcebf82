//! Workers as they register: identity, role and capabilities.

pub use crate::identity::{Role, WorkerId};

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
