//! A router replayed without KV events (upstream's `--no-kv-events`): the simulated workers
//! still publish their events, but none reaches the router, which predicts each worker's
//! cache from its own bookings and expires the predictions in the simulation's virtual time.

use crate::router_port::RouterPort;
use dynamo_kv_router::clock::ManualClock;
use dynamo_kv_router::kv::{ApproximateConfig, RouterEvent, SequenceHash};
use dynamo_kv_router::router::{
    BookError, Booking, RouteRequest, Router, RouterError, RouterOptions, RouterSetup, WorkerId,
    WorkerInfo,
};
use std::sync::Arc;
use std::time::Duration;

/// A [`Router`] predicting caches (with `config`) on a virtual clock, deaf to KV events.
pub struct WithoutEventsRouter {
    router: Router,
    clock: Arc<ManualClock>,
}

impl WithoutEventsRouter {
    /// A router running `setup` with `options`, predicting caches as `config` says.
    pub fn new(setup: RouterSetup, options: RouterOptions, config: ApproximateConfig) -> Self {
        let clock = Arc::new(ManualClock::new());
        let options = RouterOptions {
            approximate: Some(config),
            ..options
        };
        let router = Router::with_clock(setup, options, Arc::clone(&clock) as _);
        Self { router, clock }
    }

    /// The router inside.
    pub fn router(&self) -> &Router {
        &self.router
    }
}

impl RouterPort for WithoutEventsRouter {
    fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError> {
        self.router.register_worker(info)
    }

    fn apply_event(&self, _event: &RouterEvent) {}

    fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        self.router.book(request)
    }

    fn prefill_complete(&self, request_id: &str) {
        self.router.prefill_complete(request_id);
    }

    fn release(&self, request_id: &str) {
        self.router.release(request_id);
    }

    fn cached_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize {
        self.router.cached_prefix(worker, sequence_hashes)
    }

    fn run_shadows(&self) {
        self.router.run_pending_shadows(None);
    }

    fn shadow_reports(&self) -> Vec<dynamo_kv_router::metrics::ShadowReport> {
        self.router.shadow_reports()
    }

    fn set_time(&self, now_us: u64) {
        self.clock.set(Duration::from_micros(now_us));
    }

    fn receives_events(&self) -> bool {
        false
    }
}
