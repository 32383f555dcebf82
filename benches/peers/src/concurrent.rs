//! Reads and writes at once: one thread applies events (stores of fresh 32-block chains and,
//! eight stores later, their removal, so the index keeps its size) while another books, on the
//! warm synthetic index. Ours: `Router::apply_event` and `Router::book` (kvcr + kv_fetch).
//! Upstream: a producer feeding `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` (one event
//! thread; the producer waits for each batch of 64 to be applied, so two threads are busy)
//! and `find_matches_for_request` (hashing plus the find) as the booking. Ours' idle bookings
//! take turns with a bare find from tokens and with the booking's floor (`Ours::booking_floor`),
//! each on an index of its own fed the same events.

use crate::engines::{
    Engine, Ours, UpstreamCrtc, current_thread_runtime, our_event, upstream_event,
};
use crate::measure::Latency;
use crate::workload::{Block, BlockIds, Change, Event, Workload};
use indicatif::ProgressBar;
use ours::config::{self, ConfigOverrides, ConfigSource};
use ours::plugins::PolicyRegistry;
use ours::router::{
    Prompt, Role, RouteRequest, Router, RouterOptions, WorkerCapabilities, WorkerId, WorkerInfo,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use upstream::indexer::KvIndexerInterface;

/// The router configuration of the booking path (the page's policies).
const ROUTER_YAML: &str = "router_mode: kv
block_size: 16
worker_selection:
  aggregated:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5, seed: 7}
    hints:
      - type: kv_fetch
        parameters: {min_additional_blocks: 4}
";

/// What one side did.
#[derive(Debug, Default)]
pub struct ConcurrentReport {
    pub side: &'static str,
    pub idle: Latency,
    /// Ours only: the bare find from tokens (`KvIndex` on the same events), one after each
    /// idle booking, so that both are measured at the same moments.
    pub idle_find_tokens: Option<Latency>,
    /// Ours only: the booking's floor ([`Ours::booking_floor`]: every block hashed, one pass
    /// recording engine ids), taken in the same turns.
    pub idle_floor: Option<Latency>,
    pub loaded: Latency,
    pub events_per_sec: f64,
    pub bookings_per_sec: f64,
    pub combined_per_sec: f64,
    pub stored_blocks_per_sec: f64,
}

/// The churn: per step, one worker stores a chain and drops the one it stored eight steps ago.
struct Churn {
    chains: Vec<Vec<Block>>,
    workers: u32,
    next_id: Vec<u64>,
    step: usize,
}

impl Churn {
    fn new(chains: Vec<Vec<Block>>, workload: &Workload) -> Self {
        let mut next_id = vec![0u64; workload.workers as usize];
        for event in &workload.events {
            next_id[event.worker as usize] = event.event_id + 1;
        }
        Self {
            chains,
            workers: workload.workers,
            next_id,
            step: 0,
        }
    }

    fn chain_of(&self, worker: u32, round: usize) -> usize {
        (worker as usize * 131 + round) % self.chains.len()
    }

    /// The next step's events (a store, and a removal once the worker has eight chains).
    fn next(&mut self, out: &mut Vec<Event>) {
        out.clear();
        let worker = (self.step % self.workers as usize) as u32;
        let round = self.step / self.workers as usize;
        self.step += 1;
        if round >= 8 {
            let seqs = self.chains[self.chain_of(worker, round - 8)]
                .iter()
                .rev()
                .map(|b| b.seq)
                .collect();
            out.push(Event {
                worker,
                event_id: self.take_id(worker),
                change: Change::Removed { seqs },
            });
        }
        let blocks = self.chains[self.chain_of(worker, round)].clone();
        out.push(Event {
            worker,
            event_id: self.take_id(worker),
            change: Change::Stored {
                parent: None,
                blocks,
            },
        });
    }

    fn take_id(&mut self, worker: u32) -> u64 {
        let id = &mut self.next_id[worker as usize];
        *id += 1;
        *id - 1
    }
}

/// Our router with the page's policies and every worker of `workload` registered and warm.
pub fn our_router(workload: &Workload) -> Router {
    let registry = match PolicyRegistry::linked() {
        Ok(registry) => registry,
        Err(error) => panic!("the linked policies are inconsistent: {error}"),
    };
    let source = ConfigSource::new("peers.yaml", ROUTER_YAML);
    let setup = match config::load(&source, &registry, &ConfigOverrides::default()) {
        Ok(setup) => setup,
        Err(error) => panic!("{}", error.render(&source.text)),
    };
    // With index lineage, as the service builds it (upstream's indexers can dump too).
    let router = Router::new(
        setup,
        RouterOptions {
            index_lineage: true,
            ..RouterOptions::default()
        },
    );
    for w in 0..workload.workers {
        let info = WorkerInfo::new(
            WorkerId::new(1000 + u64::from(w), 0),
            Role::Aggregated,
            WorkerCapabilities::hint_source(format!("tcp://10.0.0.{w}:23280")),
        );
        if let Err(error) = router.register_worker(info) {
            panic!("cannot register worker {w}: {error}");
        }
    }
    for event in &workload.events {
        router.apply_event(&our_event(event, BlockIds::Sequence));
    }
    router
}

/// Books with `book` until `stop` is set or `until` passes; the latency of every booking.
fn booking_loop(
    mut book: impl FnMut(usize) -> Duration,
    stop: &AtomicBool,
    until: Duration,
) -> Vec<Duration> {
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut n = 0;
    while start.elapsed() < until && !stop.load(Ordering::Relaxed) {
        samples.push(book(n));
        n += 1;
    }
    samples
}

/// Our side: `Router::book` alone, then with a thread applying churn events.
pub fn ours(
    workload: &Workload,
    chains: Vec<Vec<Block>>,
    duration: Duration,
    progress: &ProgressBar,
) -> ConcurrentReport {
    progress.set_message("ours: router warm-up");
    let router = Arc::new(our_router(workload));
    let requests: Vec<Vec<u32>> = workload
        .queries
        .iter()
        .filter_map(|q| q.tokens.clone())
        .collect();
    let mut in_flight: VecDeque<String> = VecDeque::new();
    let mut book = |n: usize| {
        let request = RouteRequest::new(
            format!("peers-{n}"),
            Role::Aggregated,
            Prompt::Tokens(requests[n % requests.len()].clone()),
        );
        let start = Instant::now();
        let booking = router.book(&request);
        let elapsed = start.elapsed();
        if let Err(error) = booking {
            panic!("booking failed: {error}");
        }
        in_flight.push_back(request.request_id);
        if in_flight.len() > 32
            && let Some(old) = in_flight.pop_front()
        {
            router.release(&old);
        }
        elapsed
    };
    progress.set_message("ours: booking, idle, in turns with bare finds");
    let mut bare = Ours::new(workload.workers, workload.block_size);
    let mut floor = Ours::new(workload.workers, workload.block_size);
    for event in &workload.events {
        bare.apply(bare.convert(event));
        floor.apply(floor.convert(event));
    }
    let mut finds = Vec::new();
    let mut floors = Vec::new();
    let stop = AtomicBool::new(false);
    let idle = Latency::of(booking_loop(
        |n| {
            let booked = book(n);
            let tokens = &requests[n % requests.len()];
            let start = Instant::now();
            bare.find_tokens(tokens);
            finds.push(start.elapsed());
            // On an index of its own: on `bare` it would read the entries the find just read.
            let start = Instant::now();
            floor.booking_floor(tokens);
            floors.push(start.elapsed());
            booked
        },
        &stop,
        duration / 2,
    ));
    drop((bare, floor));
    let idle_find_tokens = Some(Latency::of(finds));
    let idle_floor = Some(Latency::of(floors));
    progress.set_message("ours: booking under ingest");
    let mut churn = Churn::new(chains, workload);
    let (loaded, events, stored, elapsed) = std::thread::scope(|scope| {
        let writer_router = Arc::clone(&router);
        let stop = &stop;
        let writer = scope.spawn(move || {
            let (mut events, mut stored) = (0usize, 0usize);
            let mut step = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                churn.next(&mut step);
                for event in &step {
                    let event_native = our_event(event, BlockIds::Sequence);
                    writer_router.apply_event(&event_native);
                    events += 1;
                    stored += event.stored_blocks();
                }
            }
            (events, stored)
        });
        let start = Instant::now();
        let samples = booking_loop(&mut book, stop, duration);
        stop.store(true, Ordering::Relaxed);
        let (events, stored) = writer.join().unwrap_or_default();
        (samples, events, stored, start.elapsed().as_secs_f64())
    });
    ConcurrentReport {
        idle_find_tokens,
        idle_floor,
        ..summarize("ours Router", idle, loaded, events, stored, elapsed)
    }
}

/// Upstream's side: `find_matches_for_request` alone, then with a producer feeding the
/// thread-pool indexer.
pub fn upstream(
    workload: &Workload,
    chains: Vec<Vec<Block>>,
    duration: Duration,
    progress: &ProgressBar,
) -> ConcurrentReport {
    progress.set_message("upstream: thread-pool warm-up");
    let crtc = UpstreamCrtc::new(workload.block_size);
    let pool = crtc.pool();
    let runtime = current_thread_runtime();
    for event in &workload.events {
        if let Err(error) = pool.enqueue_event(upstream_event(event, BlockIds::Sequence)) {
            panic!("upstream refused an event: {error}");
        }
    }
    if let Err(error) = runtime.block_on(pool.flush_and_wait()) {
        panic!("upstream did not flush: {error}");
    }
    let requests: Vec<Vec<u32>> = workload
        .queries
        .iter()
        .filter_map(|q| q.tokens.clone())
        .collect();
    let book = |n: usize| {
        let tokens = &requests[n % requests.len()];
        let start = Instant::now();
        let scores = runtime.block_on(pool.find_matches_for_request(tokens, None, None, None));
        let elapsed = start.elapsed();
        if let Err(error) = scores {
            panic!("upstream find failed: {error}");
        }
        elapsed
    };
    progress.set_message("upstream: booking, idle");
    let stop = AtomicBool::new(false);
    let idle = Latency::of(booking_loop(book, &stop, duration / 2));
    progress.set_message("upstream: booking under ingest");
    let mut churn = Churn::new(chains, workload);
    let (loaded, events, stored, elapsed) = std::thread::scope(|scope| {
        let stop = &stop;
        let writer = scope.spawn(move || {
            let runtime = current_thread_runtime();
            let (mut events, mut stored) = (0usize, 0usize);
            let mut step = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..32 {
                    churn.next(&mut step);
                    for event in &step {
                        if let Err(error) =
                            pool.enqueue_event(upstream_event(event, BlockIds::Sequence))
                        {
                            panic!("upstream refused an event: {error}");
                        }
                        events += 1;
                        stored += event.stored_blocks();
                    }
                }
                if let Err(error) = runtime.block_on(pool.flush_and_wait()) {
                    panic!("upstream did not flush: {error}");
                }
            }
            (events, stored)
        });
        let start = Instant::now();
        let samples = booking_loop(book, stop, duration);
        stop.store(true, Ordering::Relaxed);
        let (events, stored) = writer.join().unwrap_or_default();
        (samples, events, stored, start.elapsed().as_secs_f64())
    });
    summarize(
        "upstream ThreadPoolIndexer<CRTC>",
        idle,
        loaded,
        events,
        stored,
        elapsed,
    )
}

fn summarize(
    side: &'static str,
    idle: Latency,
    loaded: Vec<Duration>,
    events: usize,
    stored: usize,
    elapsed: f64,
) -> ConcurrentReport {
    let bookings = loaded.len();
    ConcurrentReport {
        side,
        idle,
        idle_find_tokens: None,
        idle_floor: None,
        loaded: Latency::of(loaded),
        events_per_sec: events as f64 / elapsed,
        bookings_per_sec: bookings as f64 / elapsed,
        combined_per_sec: (events + bookings) as f64 / elapsed,
        stored_blocks_per_sec: stored as f64 / elapsed,
    }
}
