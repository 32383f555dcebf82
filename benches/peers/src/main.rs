//! Side-by-side bench of this project's KV index against upstream `dynamo-kv-router` 1.6.1's
//! `RadixTree`, `PositionalIndexer` and `ConcurrentRadixTreeCompressed`: the same events and
//! queries for every engine, every overlap depth checked against a brute-force oracle, live
//! heap bytes per membership from a counting allocator, and a table of ratios.
//!
//! ```text
//! cargo run --release --manifest-path benches/peers/Cargo.toml -- \
//!     --trace ../shared/traces/mooncake_synthetic_trace.jsonl
//! ```
//!
//! It makes `--runs` full runs (9 by default), prints each run's tables, and ends with the
//! verdict: every target's median ratio over the runs, its range, and whether it holds.

mod concurrent;
mod counting_alloc;
mod dump_interop;
mod engines;
mod find_turns;
mod ingest_phases;
mod measure;
mod report;
mod synthetic;
mod trace_workload;
mod verdict;
mod workload;

use catalog as _;
use clap::Parser;
use engines::{Ours, UpstreamCrtc, UpstreamPositional, UpstreamRadix};
use find_turns::Filled;
use indicatif::{ProgressBar, ProgressStyle};
use measure::{EngineReport, Rounds};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use workload::{BlockIds, Workload};

#[global_allocator]
static ALLOC: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Compares this project's KV index with upstream dynamo-kv-router 1.6.1's indexers.
#[derive(Parser)]
struct Args {
    /// The Mooncake trace (JSON lines with `hash_ids`); also read from `KV_ROUTER_TRACE`.
    /// Without it the trace workload is skipped.
    #[arg(long, env = "KV_ROUTER_TRACE")]
    trace: Option<PathBuf>,
    /// Passes over the synthetic queries when timing finds.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Untimed passes over the synthetic queries before the timed ones.
    #[arg(long, default_value_t = 1)]
    warmup_rounds: usize,
    /// Queries each engine answers per turn when the finds take turns: few enough that a turn
    /// lasts well under a millisecond, so that the machine's drift falls on every engine.
    #[arg(long, default_value_t = 16)]
    turn_queries: usize,
    /// Ingests per engine and workload (into fresh engines, the engines taking turns); the
    /// median rate is reported.
    #[arg(long, default_value_t = 3)]
    ingest_runs: usize,
    /// Seconds of the concurrent phase (booking under ingest; the idle phase takes half).
    #[arg(long, default_value_t = 2.0)]
    concurrent_secs: f64,
    /// KV blocks per worker in the trace replay.
    #[arg(long, default_value_t = 4096)]
    trace_capacity: usize,
    /// Workers in the trace replay.
    #[arg(long, default_value_t = 16)]
    trace_workers: u32,
    /// Full runs of the timed phases (synthetic, trace, concurrent); the verdict is their
    /// medians and ranges. The dump check, a correctness check, runs once.
    #[arg(long, default_value_t = 9)]
    runs: usize,
    /// Only these phases (comma-separated: synthetic, trace, concurrent, dump); all by default.
    /// `dump` checks that our index's dump rebuilds upstream's `RadixTree` and CRTC.
    /// `ingest-phases` (only when named) times the synthetic ingest per eighth of the workers:
    /// ours growing, ours sized up front and upstream's `RadixTree`, `--ingest-runs` each.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{cpus} CPUs, {model}")
}

/// Every engine on `workload`, ours first, and ours with its tables sized up front.
struct Comparison {
    reports: Vec<EngineReport>,
    /// Ours with room made up front for the distinct blocks it holds at the end.
    sized: report::SizedIngest,
    /// The ingests again, with blocks named by ids of the engines' own.
    own_ids: report::OwnIdsIngest,
}

/// Every engine on `workload`, ours first; ours also once more with its tables sized up front
/// (an option upstream's indexers do not have: reported apart, to show what growing costs).
fn compare(workload: &Workload, rounds: Rounds) -> Comparison {
    if let Err(error) = engines::check_hashing(workload) {
        panic!("{}: {error}", workload.name);
    }
    let bar = progress_bar();
    let size = workload.block_size;
    let workers = workload.workers;
    // The timed ingests, the engines taking turns: the machine's speed drifts over seconds,
    // and runs of one engine after another would compare different moments.
    bar.set_message("ingests, the engines in turns");
    let distinct = engines::distinct_blocks_at_end(workload);
    let mut ingests: [Vec<measure::IngestSample>; 4] = Default::default();
    let mut sized = Vec::new();
    let mut own_ids: [Vec<measure::IngestSample>; 3] = Default::default();
    for _ in 0..rounds.ingest_runs {
        ingests[0].push(measure::ingest_once(|| Ours::new(workers, size), workload));
        ingests[1].push(measure::ingest_once(|| UpstreamRadix::new(size), workload));
        ingests[2].push(measure::ingest_once(
            || UpstreamPositional::new(size),
            workload,
        ));
        ingests[3].push(measure::ingest_once(|| UpstreamCrtc::new(size), workload));
        // Last in the turn, so that the four engines above meet the allocator as before.
        sized.push(measure::ingest_once(
            || Ours::with_capacity(workers, size, distinct),
            workload,
        ));
        own_ids[0].push(measure::ingest_once(
            || Ours::new(workers, size).with_ids(BlockIds::Own),
            workload,
        ));
        own_ids[1].push(measure::ingest_once(
            || UpstreamRadix::new(size).with_ids(BlockIds::Own),
            workload,
        ));
        own_ids[2].push(measure::ingest_once(
            || UpstreamCrtc::new(size).with_ids(BlockIds::Own),
            workload,
        ));
    }
    let contenders = vec![
        Filled::boxed(|| Ours::new(workers, size), workload, &ingests[0]),
        Filled::boxed(|| UpstreamRadix::new(size), workload, &ingests[1]),
        Filled::boxed(|| UpstreamPositional::new(size), workload, &ingests[2]),
        Filled::boxed(|| UpstreamCrtc::new(size), workload, &ingests[3]),
    ];
    let reports = find_turns::in_turns(contenders, workload, rounds, &bar);
    bar.finish_and_clear();
    Comparison {
        reports,
        sized: report::SizedIngest::of(distinct, &sized),
        own_ids: report::OwnIdsIngest::of(&own_ids),
    }
}

fn report_mismatches(reports: &[EngineReport]) -> usize {
    let mut total = 0;
    for report in reports {
        for m in report.mismatches.iter().take(5) {
            eprintln!(
                "MISMATCH {} ({}): query {}, worker {}: got {}, oracle {}",
                m.engine, m.phase, m.query, m.worker, m.got, m.expected
            );
        }
        total += report.mismatches.len();
    }
    total
}

/// The dump interop checks on the synthetic workload and the trace, for every flavour of
/// engine ids; returns the failures (mismatched depths and rejected events).
fn dump_checks(
    synthetic: Option<&Workload>,
    trace: Option<&std::path::Path>,
    args: &Args,
) -> usize {
    let bar = progress_bar();
    let trace = trace.and_then(|path| {
        match trace_workload::build(path, args.trace_workers, args.trace_capacity, &bar) {
            Ok(workload) => Some(workload),
            Err(error) => {
                eprintln!("error: {error}");
                None
            }
        }
    });
    bar.finish_and_clear();
    let mut checks = Vec::new();
    for workload in synthetic.into_iter().chain(trace.as_ref()) {
        for ids in dump_interop::EngineIds::ALL {
            eprintln!("dump interop: {} ({ids:?})", workload.name);
            checks.push(dump_interop::check(workload, ids));
        }
    }
    println!(
        "### Our dump read by upstream\n\n{}",
        dump_interop::table(&checks)
    );
    println!("(load average after: {})\n", load_average());
    let mut failures = 0;
    for check in &checks {
        for example in &check.examples {
            eprintln!("DUMP MISMATCH {}: {example}", check.name);
        }
        failures += check.failures();
    }
    failures
}

/// One full run of the timed phases: the synthetic and trace comparisons and the concurrent
/// phase, their tables printed, their ratios returned.
fn one_run(
    args: &Args,
    synthetic: Option<&Workload>,
    trace: Option<&Workload>,
    rounds: Rounds,
) -> verdict::RunFigures {
    let wants = |phase: &str| args.only.is_empty() || args.only.iter().any(|p| p == phase);
    let mut figures = verdict::RunFigures::default();
    let mut our_tokens_p50 = None;
    if let Some(workload) = synthetic.filter(|_| wants("synthetic")) {
        let comparison = compare(workload, rounds);
        let reports = &comparison.reports;
        our_tokens_p50 = reports[0].find_tokens.map(|l| l.p50);
        println!("{}", report::engines_table(&workload.name, reports));
        println!("{}", comparison.sized.line(reports));
        println!("{}", comparison.own_ids.line());
        println!("(load average after: {})\n", load_average());
        figures.mismatches += report_mismatches(reports);
        figures.engines("synthetic", reports, comparison.own_ids.medians());
    }
    if let Some(workload) = trace {
        let comparison = compare(
            workload,
            Rounds {
                find_rounds: 1,
                warmup_rounds: 0,
                ..rounds
            },
        );
        let reports = &comparison.reports;
        println!("{}", report::engines_table(&workload.name, reports));
        println!("{}", comparison.sized.line(reports));
        println!("{}", comparison.own_ids.line());
        println!("(load average after: {})\n", load_average());
        figures.mismatches += report_mismatches(reports);
        figures.engines("Mooncake", reports, comparison.own_ids.medians());
    }
    if let Some(workload) = synthetic.filter(|_| wants("concurrent")) {
        let duration = Duration::from_secs_f64(args.concurrent_secs.max(0.2));
        let bar = progress_bar();
        let ours = concurrent::ours(workload, synthetic::churn_chains(256), duration, &bar);
        let upstream = concurrent::upstream(workload, synthetic::churn_chains(256), duration, &bar);
        bar.finish_and_clear();
        println!("{}", report::concurrent_table(&ours, &upstream));
        if let Some(p50) = our_tokens_p50 {
            println!(
                "`Router::book` (kvcr + kv_fetch) idle p50 / ours find-from-tokens p50 = {:.2} / {:.2} µs = **{:.2}×**\n",
                ours.idle.p50.as_secs_f64() * 1e6,
                p50.as_secs_f64() * 1e6,
                ours.idle.p50.as_secs_f64() / p50.as_secs_f64()
            );
        }
        if let Some(finds) = ours.idle_find_tokens {
            println!(
                "`Router::book` (kvcr + kv_fetch) idle p50 / ours find-from-tokens p50, the two taken in turns = {:.2} / {:.2} µs = **{:.2}×**\n",
                ours.idle.p50.as_secs_f64() * 1e6,
                finds.p50.as_secs_f64() * 1e6,
                ours.idle.p50.as_secs_f64() / finds.p50.as_secs_f64()
            );
        }
        if let (Some(floor), Some(finds)) = (ours.idle_floor, ours.idle_find_tokens) {
            println!(
                "The booking's floor (every block hashed, one pass recording engine ids; no policy, no ledger) idle p50 / ours find-from-tokens p50, in the same turns = {:.2} / {:.2} µs = **{:.2}×**; `Router::book` / floor = **{:.2}×**\n",
                floor.p50.as_secs_f64() * 1e6,
                finds.p50.as_secs_f64() * 1e6,
                floor.p50.as_secs_f64() / finds.p50.as_secs_f64(),
                ours.idle.p50.as_secs_f64() / floor.p50.as_secs_f64()
            );
        }
        println!("(load average after: {})\n", load_average());
        figures.concurrent(&ours, &upstream);
    }
    figures
}

fn main() -> ExitCode {
    let args = Args::parse();
    let wants = |phase: &str| args.only.is_empty() || args.only.iter().any(|p| p == phase);
    println!(
        "## Peers bench\n\nMachine: {}; load average at start: {}\n",
        machine(),
        load_average()
    );
    let mut mismatches = 0;
    let rounds = Rounds {
        find_rounds: args.rounds.max(1),
        warmup_rounds: args.warmup_rounds,
        turn_queries: args.turn_queries.max(1),
        ingest_runs: args.ingest_runs.max(1),
    };
    let named = |phase: &str| args.only.iter().any(|p| p == phase);
    let needs_synthetic =
        wants("synthetic") || wants("concurrent") || wants("dump") || named("ingest-phases");
    let synthetic = needs_synthetic.then(|| {
        let bar = progress_bar();
        let workload = synthetic::build(&synthetic::SyntheticSpec::default(), &bar);
        bar.finish_and_clear();
        workload
    });
    if let Some(workload) = synthetic.as_ref().filter(|_| named("ingest-phases")) {
        for (ids, named_by) in [
            (BlockIds::Sequence, "blocks named by sequence hash"),
            (BlockIds::Own, "blocks named by ids of the engines' own"),
        ] {
            let bar = progress_bar();
            let table = ingest_phases::table(workload, rounds.ingest_runs, ids, &bar);
            bar.finish_and_clear();
            println!(
                "### Ingest by phase: {}, {named_by}\n\n{table}\n",
                workload.name
            );
            println!("(load average after: {})\n", load_average());
        }
    }
    if wants("dump") {
        mismatches += dump_checks(synthetic.as_ref(), args.trace.as_deref(), &args);
    }
    let trace = match (&args.trace, wants("trace")) {
        (Some(path), true) => {
            let bar = progress_bar();
            let built = trace_workload::build(path, args.trace_workers, args.trace_capacity, &bar);
            bar.finish_and_clear();
            match built {
                Ok(workload) => Some(workload),
                Err(error) => {
                    eprintln!("error: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
        (None, true) => {
            println!("(trace workload skipped: pass --trace or set KV_ROUTER_TRACE)\n");
            None
        }
        (_, false) => None,
    };
    let timed = wants("synthetic") || wants("concurrent") || trace.is_some();
    let runs = if timed { args.runs.max(1) } else { 0 };
    let mut figures = Vec::with_capacity(runs);
    for run in 1..=runs {
        eprintln!("run {run} of {runs}");
        println!("## Run {run} of {runs}\n");
        let run_figures = one_run(&args, synthetic.as_ref(), trace.as_ref(), rounds);
        mismatches += run_figures.mismatches;
        figures.push(run_figures);
    }
    if runs > 0 {
        let (table, _) = verdict::verdict(&figures);
        println!("{table}");
        println!("(load average at the end: {})\n", load_average());
    }
    if mismatches > 0 {
        eprintln!(
            "error: {mismatches} overlap depths disagree (with the oracle, or between our index and upstream reading its dump)"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
