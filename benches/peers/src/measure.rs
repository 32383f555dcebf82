//! What one engine does on a workload, and how it is measured: ingest (timed, with the live
//! bytes it leaves), one find (timed per call) with its depth cross-check, and the report
//! they fill. `find_turns` takes the finds of every engine in turns.

use crate::counting_alloc::live_bytes;
use crate::engines::Engine;
use crate::workload::Workload;
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
    /// Untimed passes over the queries before the timed ones, so that no engine's first timed
    /// pass depends on which engine was filled last.
    pub warmup_rounds: usize,
    /// Queries each engine answers in one turn of the finds (at least 1).
    pub turn_queries: usize,
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
pub(crate) fn timed_find<E: Engine>(
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
pub(crate) fn ingest<E: Engine>(engine: &mut E, workload: &Workload) -> IngestSample {
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
pub(crate) fn summarize_ingests(report: &mut EngineReport, samples: &[IngestSample]) {
    if let Some(median) = median_ingest(samples) {
        report.ingest_blocks_per_sec = median.blocks_per_sec;
        report.ingest_events_per_sec = median.events_per_sec;
    }
    if let Some(first) = samples.first() {
        report.bytes_per_membership = first.bytes_per_membership;
    }
}
