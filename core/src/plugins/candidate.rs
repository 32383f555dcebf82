//! A worker that can serve a booking, as policies see it.

use crate::identity::WorkerId;
use std::sync::Arc;

/// The load the router has reserved on a worker at booking time, as upstream's active-sequence
/// tracking projects it for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Prompt tokens of bookings whose prefill has not completed.
    pub active_prefill_tokens: u64,
    /// Distinct KV blocks of the bookings that have not been released (decode load): blocks
    /// that several active requests on the worker share (same sequence hash) count once.
    pub active_blocks: u64,
    /// Bookings that have not been released.
    pub active_requests: u64,
    /// Blocks of the request being booked that no active request on this worker shares: what
    /// booking it here would add to `active_blocks` (upstream `additional_active_blocks`).
    pub additional_active_blocks: u64,
}

impl WorkerLoad {
    /// The worker's decode blocks if it took the request being booked: `active_blocks +
    /// additional_active_blocks` (upstream `potential_decode_blocks`).
    pub fn potential_decode_blocks(&self) -> u64 {
        self.active_blocks + self.additional_active_blocks
    }
}

/// One worker of the booking's role: how much of the request it already caches, its load, and
/// what it advertises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The worker.
    pub worker: WorkerId,
    /// Length, in blocks, of the request's prefix that this worker caches.
    pub cached_blocks: usize,
    /// The load reserved on this worker.
    pub load: WorkerLoad,
    /// Whether the worker accepts hints.
    pub router_hint: bool,
    /// The control endpoint peers fetch KV from; `None` means it cannot be a fetch source.
    pub source_endpoint: Option<Arc<str>>,
}

impl Candidate {
    /// Whether this worker can be named as a fetch source for a booking on `booked`: another
    /// worker that advertises `router_hint` with a non-empty source endpoint.
    pub fn is_fetch_source_for(&self, booked: WorkerId) -> bool {
        self.worker != booked
            && self.router_hint
            && self
                .source_endpoint
                .as_deref()
                .is_some_and(|endpoint| !endpoint.is_empty())
    }
}
