//! The part of the router a simulated cluster drives: registration, KV events, bookings and
//! completions. [`Router`] implements it; tests use small stand-ins.

use dynamo_kv_router::kv::{RouterEvent, SequenceHash};
use dynamo_kv_router::metrics::ShadowReport;
use dynamo_kv_router::router::{
    BookError, Booking, RouteRequest, Router, RouterError, WorkerId, WorkerInfo,
};

/// What the simulation needs from a router.
pub trait RouterPort {
    /// Registers a simulated worker.
    fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError>;
    /// Delivers one KV event the worker published.
    fn apply_event(&self, event: &RouterEvent);
    /// Books a request.
    fn book(&self, request: &RouteRequest) -> Result<Booking, BookError>;
    /// Reports the end of a request's prefill.
    fn prefill_complete(&self, request_id: &str);
    /// Reports the end of a request.
    fn release(&self, request_id: &str);
    /// How many leading blocks of `sequence_hashes` the router's view says `worker` caches.
    fn cached_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize;
    /// The simulation's virtual time, `now_us` microseconds from its start, before each
    /// booking: a router predicting caches without KV events expires its predictions by it.
    fn set_time(&self, now_us: u64) {
        let _ = now_us;
    }
    /// Whether the router's view is built from the workers' KV events (so it must match their
    /// caches once every event is delivered); `false` for a router that predicts them.
    fn receives_events(&self) -> bool {
        true
    }
    /// Evaluates the shadow policies on the bookings made so far; the simulation calls it
    /// after each booking, outside the booking's timing, so a replay shadows every booking
    /// and its figures do not depend on timing.
    fn run_shadows(&self) {}
    /// What the configuration's shadow policies would have done on the bookings so far (none
    /// without a `shadow` entry).
    fn shadow_reports(&self) -> Vec<ShadowReport> {
        Vec::new()
    }
}

impl RouterPort for Router {
    fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError> {
        Router::register_worker(self, info)
    }

    fn apply_event(&self, event: &RouterEvent) {
        let _ = Router::apply_event(self, event);
    }

    fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        Router::book(self, request)
    }

    fn prefill_complete(&self, request_id: &str) {
        Router::prefill_complete(self, request_id);
    }

    fn release(&self, request_id: &str) {
        Router::release(self, request_id);
    }

    fn cached_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize {
        Router::cached_prefix(self, worker, sequence_hashes)
    }

    fn run_shadows(&self) {
        self.run_pending_shadows(None);
    }

    fn shadow_reports(&self) -> Vec<ShadowReport> {
        Router::shadow_reports(self)
    }
}
