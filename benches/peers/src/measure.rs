//! Runs one engine through a workload: ingest (timed, with the live bytes it leaves), finds
//! with hashes given and from tokens (timed per call), and the depth cross-check.

use crate::counting_alloc::live_bytes;
use crate::engines::Engine;
use crate::workload::Workload;
use indicatif::ProgressBar;
use std::time::{Duration, Instant};

/// Latency percentiles of one kind of call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
    /// The mean, which shows a tail beyond p99 (such as a lock that starves a reader).
    pub mean: Duration,
}

impl Latency {
    /// The percentiles of `samples`.
    pub fn of(mut samples: Vec<Duration>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Self {
            p50: at(0.50),
            p99: at(0.99),
            mean,
        }
    }
}

/// One depth an engine got wrong.
#[derive(Clone, Debug)]
pub struct Mismatch {
    pub engine: &'static str,
    pub phase: &'static str,
    pub query: usize,
    pub worker: usize,
    pub got: u32,
    pub expected: u32,
}

/// What one engine did on one workload.
#[derive(Debug, Default)]
pub struct EngineReport {
    pub engine: &'static str,
    /// Stored blocks per second over the whole ingest (removals included in the time).
    pub ingest_blocks_per_sec: f64,
    /// Events per second over the whole ingest.
    pub ingest_events_per_sec: f64,
    /// Live heap bytes the ingest left, per membership.
    pub bytes_per_membership: f64,
    pub find: Latency,
    pub find_tokens: Option<Latency>,
    pub depths_checked: usize,
    pub mismatches: Vec<Mismatch>,
}

/// Options of the measurement.
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    /// Passes over the queries when timing finds.
    pub find_rounds: usize,
    /// Ingests into fresh engines per engine, taken in turns across engines; the median rate
    /// is reported.
    pub ingest_runs: usize,
}

fn check(
    report: &mut EngineReport,
    phase: &'static str,
    query: usize,
    got: &[u32],
    expected: &[u32],
) {
    report.depths_checked += expected.len();
    for (worker, (g, e)) in got.iter().zip(expected).enumerate() {
        if g != e {
            report.mismatches.push(Mismatch {
                engine: report.engine,
                phase,
                query,
                worker,
                got: *g,
                expected: *e,
            });
        }
    }
}

/// Times one find, reads its depths and checks them against the oracle's.
fn timed_find<E: Engine>(
    engine: &mut E,
    find: impl FnOnce(&mut E) -> E::Answer,
    report: &mut EngineReport,
    phase: &'static str,
    (query, expected): (usize, &[u32]),
    depths: &mut [u32],
) -> Duration {
    let start = Instant::now();
    let answer = find(engine);
    let elapsed = start.elapsed();
    engine.depths(&answer, depths);
    check(report, phase, query, depths, expected);
    elapsed
}

/// One timed ingest of every event of `workload` into a fresh engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct IngestSample {
    /// Stored blocks per second over the whole ingest (removals included in the time).
    pub blocks_per_sec: f64,
    /// Events per second over the whole ingest.
    pub events_per_sec: f64,
    /// Live heap bytes the ingest left, per membership.
    pub bytes_per_membership: f64,
}

/// Ingests every event of `workload` into `engine`: the events are converted first, then
/// applied in a timed loop; the live bytes left are the index's.
fn ingest<E: Engine>(engine: &mut E, workload: &Workload) -> IngestSample {
    let before = live_bytes();
    let native: Vec<E::Event> = workload.events.iter().map(|e| engine.convert(e)).collect();
    let start = Instant::now();
    for event in native {
        engine.apply(event);
    }
    engine.sync();
    let elapsed = start.elapsed().as_secs_f64();
    let bytes = live_bytes() - before;
    let stored: usize = workload.events.iter().map(|e| e.stored_blocks()).sum();
    IngestSample {
        blocks_per_sec: stored as f64 / elapsed,
        events_per_sec: workload.events.len() as f64 / elapsed,
        bytes_per_membership: bytes as f64 / workload.memberships.max(1) as f64,
    }
}

/// One timed ingest into a fresh engine from `make`, which is dropped after.
pub fn ingest_once<E: Engine>(make: impl Fn() -> E, workload: &Workload) -> IngestSample {
    let mut engine = make();
    ingest(&mut engine, workload)
}

/// The ingest of `samples` with the median stored-blocks rate (`None` when there is none).
pub fn median_ingest(samples: &[IngestSample]) -> Option<IngestSample> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.blocks_per_sec.total_cmp(&b.blocks_per_sec));
    sorted.get(sorted.len() / 2).copied()
}

/// The report's ingest figures from `samples` (ingests into fresh engines, which the caller
/// takes in turns with the other engines', so that the machine's drift hits every engine
/// alike): the median rates, and the bytes of the first ingest.
fn summarize_ingests(report: &mut EngineReport, samples: &[IngestSample]) {
    if let Some(median) = median_ingest(samples) {
        report.ingest_blocks_per_sec = median.blocks_per_sec;
        report.ingest_events_per_sec = median.events_per_sec;
    }
    if let Some(first) = samples.first() {
        report.bytes_per_membership = first.bytes_per_membership;
    }
}

/// Measures `make()`'s engine on `workload`; its ingest figures come from `ingests` (see
/// [`ingest_once`]), and one more ingest fills the engine the finds run on.
pub fn run<E: Engine>(
    make: impl Fn() -> E,
    workload: &Workload,
    rounds: Rounds,
    ingests: &[IngestSample],
    progress: &ProgressBar,
) -> EngineReport {
    let mut engine = make();
    let mut report = EngineReport {
        engine: engine.name(),
        ..EngineReport::default()
    };
    progress.set_message(format!("{}: ingest", report.engine));
    // This ingest only fills the engine for its finds, unless no timed ingests were given.
    let own = [ingest(&mut engine, workload)];
    summarize_ingests(&mut report, if ingests.is_empty() { &own } else { ingests });
    let mut depths = vec![0u32; workload.workers as usize];
    match &workload.checkpoints {
        None => {
            progress.set_message(format!("{}: finds", report.engine));
            let mut samples = Vec::new();
            for _ in 0..rounds.find_rounds {
                for (n, query) in workload.queries.iter().enumerate() {
                    let hashes = engine.hashes(query);
                    let expected = (n, workload.expected[n].as_slice());
                    samples.push(timed_find(
                        &mut engine,
                        |e| e.find(hashes),
                        &mut report,
                        "find",
                        expected,
                        &mut depths,
                    ));
                    progress.inc(1);
                }
            }
            report.find = Latency::of(samples);
            if workload.queries.iter().all(|q| q.tokens.is_some()) {
                let mut samples = Vec::new();
                for _ in 0..rounds.find_rounds {
                    for (n, query) in workload.queries.iter().enumerate() {
                        let tokens = query.tokens.as_deref().unwrap_or_default();
                        let expected = (n, workload.expected[n].as_slice());
                        samples.push(timed_find(
                            &mut engine,
                            |e| e.find_tokens(tokens),
                            &mut report,
                            "find from tokens",
                            expected,
                            &mut depths,
                        ));
                        progress.inc(1);
                    }
                }
                report.find_tokens = Some(Latency::of(samples));
            }
        }
        Some(checkpoints) => {
            // Replay: a fresh engine sees the events up to each query, then the query.
            drop(engine);
            let mut engine = make();
            progress.set_message(format!("{}: replay", report.engine));
            let mut applied = 0;
            let mut samples = Vec::with_capacity(workload.queries.len());
            for (n, query) in workload.queries.iter().enumerate() {
                for event in &workload.events[applied..checkpoints[n]] {
                    let event = engine.convert(event);
                    engine.apply(event);
                }
                if applied < checkpoints[n] {
                    engine.sync();
                }
                applied = checkpoints[n];
                let hashes = engine.hashes(query);
                let expected = (n, workload.expected[n].as_slice());
                samples.push(timed_find(
                    &mut engine,
                    |e| e.find(hashes),
                    &mut report,
                    "replay find",
                    expected,
                    &mut depths,
                ));
                progress.inc(1);
            }
            report.find = Latency::of(samples);
        }
    }
    report
}
