//! What a simulation measured: per stage of each request, per booking, per worker.

use crate::invariants::Invariants;
use dynamo_kv_router::router::Role;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// How one request's blocks were obtained by the worker that served one stage.
///
/// `recomputed` is what remains after `local` and `fetched`; in a decode stage after a separate
/// prefill it counts the blocks transferred from the prefill worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StageOutcome {
    /// Index of the request in the workload.
    pub request: u32,
    /// Index of the stage (0 = first role booked).
    pub stage: u8,
    /// Index of the simulated worker.
    pub worker: u32,
    /// Full blocks in the prompt.
    pub blocks: u32,
    /// Blocks the worker already held and used.
    pub local: u32,
    /// Blocks copied from a peer named by a `kv.fetch` action and used.
    pub fetched: u32,
    /// Blocks computed (or, in a decode stage, transferred from the prefill worker).
    pub recomputed: u32,
    /// Blocks copied from a peer that could not be used (not at the prefix frontier).
    pub fetch_wasted: u32,
    /// Blocks a `kv.fetch` named that the source had already evicted.
    pub hint_blocks_evicted: u32,
    /// The prompt prefix, in blocks, the router said the booked worker cached when it booked it.
    pub predicted_local: u32,
    /// The prompt prefix, in blocks, the worker actually held when it started the request.
    pub held_at_start: u32,
    /// When the request arrived at this stage, in virtual microseconds.
    pub arrived_us: u64,
    /// When the worker started it.
    pub start_us: u64,
    /// When its KV was ready.
    pub done_us: u64,
}

/// What one booking returned, and how long `book()` took on the wall clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BookingRecord {
    /// Wall-clock duration of the `book()` call, in nanoseconds.
    pub latency_ns: u64,
    /// Whether a hint was sent.
    pub hint: bool,
    /// Actions in the hint.
    pub actions: u32,
    /// `kv.fetch` actions executed.
    pub fetch_actions: u32,
    /// Actions of other types (counted, ignored by the simulated workers).
    pub other_actions: u32,
    /// `kv.fetch` actions that could not be executed (bad payload or unknown source endpoint).
    pub unusable_fetch_actions: u32,
    /// Actions the router dropped at the cap.
    pub actions_dropped: u32,
    /// Hint policies that failed.
    pub policy_failures: u32,
}

/// Everything one replay of one configuration measured.
#[derive(Clone, Debug, Default)]
pub struct SimulationResult {
    /// The roles booked, in stage order.
    pub stages: Vec<Role>,
    /// One entry per completed stage of each request, in completion order.
    pub stage_outcomes: Vec<StageOutcome>,
    /// Per request: arrival and time to first token (`None` if it was never served).
    pub requests: Vec<RequestTiming>,
    /// One entry per successful booking.
    pub bookings: Vec<BookingRecord>,
    /// Failed bookings by reason.
    pub book_failures: BTreeMap<String, usize>,
    /// Per simulated worker: its role and busy time (prefill, fetch and transfer) in microseconds.
    pub workers: Vec<WorkerUsage>,
    /// KV events delivered to the router.
    pub events: u64,
    /// Wall-clock time spent inside the router's `apply_event`, in nanoseconds.
    pub event_ns: u64,
    /// Wall-clock duration of the whole replay.
    pub wall: Duration,
    /// Virtual time when the last request finished, in microseconds.
    pub virtual_end_us: u64,
    /// Disagreements between the workers' caches, their events and the router's view.
    pub invariants: Invariants,
}

/// Arrival and time to first token of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RequestTiming {
    /// Arrival, in virtual microseconds.
    pub arrival_us: u64,
    /// Time to first token, in microseconds, if the request was served.
    pub ttft_us: Option<u64>,
}

/// One simulated worker's role and how long it was busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerUsage {
    /// The role it serves.
    pub role: Role,
    /// Busy time in microseconds.
    pub busy_us: u64,
    /// Stages it served.
    pub served: u64,
}
