//! The run-time router: workers and their capabilities, the per-role policy setup, load
//! accounting and the booking pipeline.

pub mod booking;
pub mod request;
pub mod setup;
pub mod worker;

pub use crate::kv::{EventOutcome, IgnoreReason};
pub use booking::{BookError, Booking, BookingStats};
pub use request::{Prompt, RouteRequest};
pub use setup::{HintOrigin, RoleHint, RolePolicies, RouterMode, RouterSetup};
pub use worker::{Role, WorkerCapabilities, WorkerId, WorkerInfo};

use crate::kv::KvEvent;
use crate::metrics::MetricsSnapshot;
use std::time::Duration;

/// Most actions one hint carries; later actions are dropped (the committed copy's never is).
pub const MAX_HINT_ACTIONS: usize = 32;

/// Run-time options of a [`Router`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterOptions {
    /// How long a booking holds load when the caller never releases it (default 10 minutes).
    pub booking_ttl: Duration,
    /// Seed of the `random` router mode.
    pub seed: u64,
}

impl Default for RouterOptions {
    fn default() -> Self {
        Self {
            booking_ttl: Duration::from_secs(600),
            seed: 0,
        }
    }
}

/// Why a worker could not be registered or deregistered. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// The worker is already registered.
    #[error("worker {worker} is already registered; deregister it before registering it again")]
    AlreadyRegistered {
        /// The worker.
        worker: WorkerId,
    },
    /// The worker is not registered.
    #[error("worker {worker} is not registered; nothing to deregister")]
    UnknownWorker {
        /// The worker.
        worker: WorkerId,
    },
}

/// Books requests on workers: KV index, selection policy, load reservation and hints.
pub struct Router {
    setup: RouterSetup,
    options: RouterOptions,
}

impl Router {
    /// A router running `setup`, with no workers yet.
    pub fn new(setup: RouterSetup, options: RouterOptions) -> Router {
        Router { setup, options }
    }

    /// The setup the router runs.
    pub fn setup(&self) -> &RouterSetup {
        &self.setup
    }

    /// The options the router runs with.
    pub fn options(&self) -> &RouterOptions {
        &self.options
    }

    /// Registers a worker; from now on it is a candidate for its role and its events are applied.
    pub fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError> {
        let _ = info;
        Ok(())
    }

    /// Deregisters a worker and drops every block the index held for it.
    pub fn deregister_worker(&self, id: WorkerId) -> Result<(), RouterError> {
        Err(RouterError::UnknownWorker { worker: id })
    }

    /// Applies one KV event; anomalies are counted and change nothing.
    pub fn apply_event(&self, event: &KvEvent) -> EventOutcome {
        let _ = event;
        EventOutcome::Applied
    }

    /// Books `request` on a worker of its role and returns the hint for it.
    pub fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        Err(BookError::NoWorkers { role: request.role })
    }

    /// Reports that the request's prefill finished: its prefill tokens are released.
    pub fn prefill_complete(&self, request_id: &str) {
        let _ = request_id;
    }

    /// Reports that the request finished: all its load is released.
    pub fn release(&self, request_id: &str) {
        let _ = request_id;
    }

    /// A snapshot of every metric.
    pub fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot::default()
    }

    /// Every metric in the Prometheus text exposition format.
    pub fn prometheus_text(&self) -> String {
        self.metrics().to_prometheus()
    }
}
