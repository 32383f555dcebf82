//! The event-driven simulated cluster: requests arrive, are booked through the router, queue on
//! their worker, reuse, fetch or compute their KV, publish KV events, and complete — all in
//! virtual time, as fast as the CPU allows.
//!
//! [`simulate`] registers the workers and runs the event loop; the stages of a request live in
//! their own files: `arrival` (booking and reading the hint), `stage_start` (what a worker
//! reuses, fetches and computes when it starts a job) and `completion` (storing the blocks,
//! publishing KV events, handing the request on).

mod arrival;
mod completion;
mod sim_worker;
mod stage_start;

use crate::block_cache::HashKeyed;
use crate::cluster::ResolvedCluster;
use crate::outcome::{RequestTiming, SimulationResult, WorkerUsage};
use crate::router_port::RouterPort;
use crate::workload::PreparedWorkload;
use dynamo_kv_router::kv::{KvCacheStoredBlockData, SequenceHash};
use dynamo_kv_router::plugins::KV_FETCH_ACTION_TYPE;
use dynamo_kv_router::router::{Role, RouterError, WorkerCapabilities, WorkerId, WorkerInfo};
use sim_worker::SimWorker;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// The action type a simulated worker executes; every other type is counted and ignored.
pub const KV_FETCH: &str = KV_FETCH_ACTION_TYPE;

/// The source endpoint simulated worker `index` advertises.
pub fn worker_endpoint(index: usize) -> String {
    format!("tcp://sim-worker-{index}:23280")
}

/// A simulation that could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    /// No role to book.
    #[error(
        "the configuration books no role; add a `worker_selection` entry for aggregated, or for prefill and decode"
    )]
    NoStages,
    /// The router refused a simulated worker.
    #[error("the router refused simulated worker {worker}: {source}")]
    Register {
        /// The worker.
        worker: WorkerId,
        /// The router's error.
        source: RouterError,
    },
}

/// The roles a request passes through, in order, for a configuration that configures `roles`:
/// aggregated alone, or prefill then decode, or whichever of those is configured.
pub fn stages_for(roles: &[Role]) -> Vec<Role> {
    if roles.contains(&Role::Aggregated) || roles.is_empty() {
        return vec![Role::Aggregated];
    }
    [Role::Prefill, Role::Decode]
        .into_iter()
        .filter(|role| roles.contains(role))
        .collect()
}

/// The simulated workers and the index of each one's source endpoint.
type RegisteredWorkers = (Vec<SimWorker>, HashKeyed<u32>);

/// What happens later in virtual time.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    WorkDone { worker: u32 },
    DecodeDone { request: u32, stage: u8 },
}

/// The cluster in virtual time: its workers, the event queue, and what was measured so far.
struct Simulation<'a, R: RouterPort + ?Sized> {
    router: &'a R,
    workload: &'a PreparedWorkload,
    cluster: ResolvedCluster,
    stages: Vec<Role>,
    workers: Vec<SimWorker>,
    endpoints: HashKeyed<u32>,
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    sequence: u64,
    now: u64,
    stored_scratch: Vec<KvCacheStoredBlockData>,
    removed_scratch: Vec<u64>,
    new_scratch: Vec<bool>,
    slot_scratch: Vec<u32>,
    id_scratch: String,
    result: SimulationResult,
}

/// Replays `workload` through `router` on a cluster of `cluster.workers_per_role` workers for
/// each role of `stages`; `progress` is told how many requests arrived since its last call.
pub fn simulate<R: RouterPort + ?Sized>(
    router: &R,
    workload: &PreparedWorkload,
    cluster: &ResolvedCluster,
    stages: &[Role],
    progress: &mut dyn FnMut(u64),
) -> Result<SimulationResult, SimulationError> {
    if stages.is_empty() {
        return Err(SimulationError::NoStages);
    }
    let started = Instant::now();
    let (workers, endpoints) = register_workers(router, cluster, stages)?;
    let mut simulation = Simulation::new(router, workload, cluster, stages, workers, endpoints);
    simulation.run(progress);
    let wall = started.elapsed();
    simulation.check_final_state();
    Ok(simulation.into_result(wall))
}

/// Registers `cluster.workers_per_role` workers for each role of `stages` with `router`, in
/// order (worker `i` has id `i`, rank 0).
fn register_workers<R: RouterPort + ?Sized>(
    router: &R,
    cluster: &ResolvedCluster,
    stages: &[Role],
) -> Result<RegisteredWorkers, SimulationError> {
    let mut workers = Vec::new();
    let mut endpoints = HashKeyed::default();
    for (stage, role) in stages.iter().enumerate() {
        for _ in 0..cluster.workers_per_role {
            let index = workers.len();
            let id = WorkerId::new(index as u64, 0);
            let capabilities = if cluster.router_hint {
                WorkerCapabilities::hint_source(worker_endpoint(index))
            } else {
                WorkerCapabilities::none()
            };
            router
                .register_worker(WorkerInfo::new(id, *role, capabilities))
                .map_err(|source| SimulationError::Register { worker: id, source })?;
            endpoints.insert(endpoint_key(&worker_endpoint(index)), index as u32);
            workers.push(SimWorker::new(id, stage as u8, cluster.kv_capacity_blocks));
        }
    }
    Ok((workers, endpoints))
}

/// Endpoints are looked up by a hash of their text, so the lookup allocates nothing.
fn endpoint_key(endpoint: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    endpoint.hash(&mut hasher);
    hasher.finish()
}

fn request_id(request: u32, stage: u8) -> String {
    let mut id = String::new();
    write_request_id(&mut id, request, stage);
    id
}

/// Writes the id of `request` in `stage` into `buffer` (replacing its content).
fn write_request_id(buffer: &mut String, request: u32, stage: u8) {
    use std::fmt::Write as _;
    buffer.clear();
    let _ = if stage == 0 {
        write!(buffer, "r{request}")
    } else {
        write!(buffer, "r{request}.{stage}")
    };
}

impl<'a, R: RouterPort + ?Sized> Simulation<'a, R> {
    /// A cluster of `workers` at virtual time 0, with nothing measured yet.
    fn new(
        router: &'a R,
        workload: &'a PreparedWorkload,
        cluster: &ResolvedCluster,
        stages: &[Role],
        workers: Vec<SimWorker>,
        endpoints: HashKeyed<u32>,
    ) -> Self {
        let bookings = workload.requests.len() * stages.len();
        Simulation {
            router,
            workload,
            cluster: *cluster,
            stages: stages.to_vec(),
            workers,
            endpoints,
            heap: BinaryHeap::new(),
            sequence: 0,
            now: 0,
            stored_scratch: Vec::new(),
            removed_scratch: Vec::new(),
            new_scratch: Vec::new(),
            slot_scratch: Vec::new(),
            id_scratch: String::new(),
            result: SimulationResult {
                stages: stages.to_vec(),
                requests: workload
                    .requests
                    .iter()
                    .map(|r| RequestTiming {
                        arrival_us: r.arrival_us,
                        ttft_us: None,
                    })
                    .collect(),
                stage_outcomes: Vec::with_capacity(bookings),
                bookings: Vec::with_capacity(bookings),
                ..SimulationResult::default()
            },
        }
    }

    /// What the run measured, with each worker's usage and the run's `wall` time.
    fn into_result(self, wall: Duration) -> SimulationResult {
        let mut result = self.result;
        result.workers = self
            .workers
            .iter()
            .map(|w| WorkerUsage {
                role: self.stages[w.stage as usize],
                busy_us: w.busy_us,
                served: w.served,
            })
            .collect();
        result.virtual_end_us = result.virtual_end_us.max(self.now);
        result.wall = wall;
        result
    }

    fn run(&mut self, progress: &mut dyn FnMut(u64)) {
        let mut next = 0usize;
        let mut unreported = 0u64;
        loop {
            let arrival = self.workload.requests.get(next).map(|r| r.arrival_us);
            let event_time = self.heap.peek().map(|Reverse((time, _, _))| *time);
            match (arrival, event_time) {
                (None, None) => break,
                (Some(arrival), Some(time)) if time <= arrival => self.next_event(),
                (Some(arrival), _) => {
                    self.now = self.now.max(arrival);
                    self.arrive(next as u32, 0);
                    next += 1;
                    unreported += 1;
                    if unreported == 256 {
                        progress(unreported);
                        unreported = 0;
                    }
                }
                (None, Some(_)) => self.next_event(),
            }
        }
        progress(unreported);
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.sequence += 1;
        self.heap.push(Reverse((at, self.sequence, event)));
    }

    fn next_event(&mut self) {
        let Some(Reverse((time, _, event))) = self.heap.pop() else {
            return;
        };
        self.now = self.now.max(time);
        match event {
            Event::WorkDone { worker } => self.work_done(worker as usize),
            Event::DecodeDone { request, stage } => {
                write_request_id(&mut self.id_scratch, request, stage);
                self.router.release(&self.id_scratch);
                self.result.virtual_end_us = self.result.virtual_end_us.max(self.now);
            }
        }
    }

    /// Compares, once every event is delivered, each worker's cache with its event ledger and
    /// with the router's view of it.
    fn check_final_state(&mut self) {
        let invariants = &mut self.result.invariants;
        for worker in &self.workers {
            let ledger = worker.stored_blocks.checked_sub(worker.removed_blocks);
            if ledger != Some(worker.cache.len() as u64) {
                invariants.ledger_mismatches += 1;
            }
        }
        if !self.router.receives_events() {
            // A router predicting caches from its bookings is not expected to match them.
            return;
        }
        for outcome in &self.result.stage_outcomes {
            let worker = &self.workers[outcome.worker as usize];
            let hashes = &self.workload.requests[outcome.request as usize].sequence_hashes;
            let own = worker.cache.prefix_len(SequenceHash::as_u64s(hashes));
            if self.router.cached_prefix(worker.id, hashes) != own {
                invariants.router_view_mismatches_at_end += 1;
            }
        }
    }
}
