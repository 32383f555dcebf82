//! `kv-router replay [--config FILE]... [--trace FILE] [--strict] [--workers N] [--json]
//! [--report out.html]`: replays a workload through the router against a simulated cluster and
//! compares configurations side by side.

use crate::command_error::CommandError;
use clap::Args;
use dynamo_kv_router::config::ConfigOverrides;
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::RouterMode;
use kv_router_replay::{
    BadLine, ClusterConfig, Comparison, ReplayConfig, ReplayOptions, SyntheticWorkload, Workload,
    builtin_configs, compare, load_config_file, read_trace_file,
};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `kv-router replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A configuration to compare (repeat for several); without any, the built-in kvcr+kv_fetch
    /// and default-cost-without-hints configurations are compared.
    #[arg(long = "config", value_name = "FILE")]
    pub configs: Vec<PathBuf>,
    /// A Mooncake JSON Lines trace; without it, a generated multi-turn workload is replayed.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Stop at the first bad trace line instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Simulated workers per role.
    #[arg(long, value_name = "N", default_value_t = ClusterConfig::default().workers_per_role)]
    pub workers: usize,
    /// KV capacity of each worker, in blocks (default: 262,144 tokens' worth).
    #[arg(long, value_name = "BLOCKS")]
    pub kv_blocks: Option<u64>,
    /// Prefill throughput of each worker, in tokens per second.
    #[arg(long, value_name = "TOKENS", default_value_t = ClusterConfig::default().prefill_tokens_per_s)]
    pub prefill_tps: f64,
    /// KV fetch bandwidth of each worker, in blocks per second (default: 4× prefill).
    #[arg(long, value_name = "BLOCKS")]
    pub fetch_bps: Option<f64>,
    /// Sessions of the generated workload.
    #[arg(long, value_name = "N", default_value_t = SyntheticWorkload::default().sessions)]
    pub sessions: usize,
    /// Seed of the generated workload.
    #[arg(long, value_name = "N", default_value_t = SyntheticWorkload::default().seed)]
    pub seed: u64,
    /// Overrides every configuration's `router_mode` (kv, round-robin, random, least-loaded).
    #[arg(long, value_name = "MODE")]
    pub router_mode: Option<RouterMode>,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the comparison as a self-contained HTML page with plots.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Route through R router replicas (round-robin) that share bookings.
    #[arg(long, value_name = "R", default_value_t = 1)]
    pub replicas: usize,
    /// With --replicas: a replica learns another's bookings this many bookings late.
    #[arg(long, value_name = "BOOKINGS", default_value_t = 0)]
    pub sync_lag: u64,
    /// Also replay each configuration without KV events (upstream's `--no-kv-events`: the
    /// router predicts caches from its bookings), in a column `NAME (no events)` beside it.
    #[arg(long)]
    pub no_kv_events: bool,
    /// The prediction settings of --no-kv-events.
    #[command(flatten)]
    pub approximate: crate::approximate_args::ApproximateArgs,
}

/// Runs `kv-router replay`: loads the configurations and the workload, replays it, writes the
/// comparison (and the HTML report), and fails if the simulation and the router disagree.
pub fn run(
    args: &ReplayArgs,
    registry: &PolicyRegistry,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let configs = configurations(args, registry)?;
    let (workload, bad_lines) = workload(args)?;
    let comparison = compare(&workload.prepare(), bad_lines, &configs, &options(args)?)
        .map_err(|e| failed(e.to_string()))?;
    write_comparison(args, &comparison, out)?;
    check_invariants(&comparison)
}

/// A replay failure with `message`.
fn failed(message: String) -> CommandError {
    CommandError::Replay { message }
}

/// The configurations to compare: the files given, or the built-in ones.
fn configurations(
    args: &ReplayArgs,
    registry: &PolicyRegistry,
) -> Result<Vec<ReplayConfig>, CommandError> {
    let overrides = ConfigOverrides {
        router_mode: args.router_mode,
    };
    let configs = if args.configs.is_empty() {
        builtin_configs(registry, &overrides)
    } else {
        args.configs
            .iter()
            .map(|path| load_config_file(path, registry, &overrides))
            .collect::<Result<Vec<_>, _>>()
    };
    configs.map_err(|error| CommandError::Config {
        rendered: error.rendered,
    })
}

/// The workload to replay (the trace's, or a generated one) and the trace lines skipped.
fn workload(args: &ReplayArgs) -> Result<(Workload, Vec<BadLine>), CommandError> {
    let (workload, bad_lines) = match &args.trace {
        Some(path) => {
            let trace = read_trace_file(path, args.strict).map_err(|e| failed(e.to_string()))?;
            (trace.workload, trace.bad_lines)
        }
        None => (
            SyntheticWorkload {
                sessions: args.sessions,
                seed: args.seed,
                ..SyntheticWorkload::default()
            }
            .generate(),
            Vec::new(),
        ),
    };
    if workload.requests.is_empty() {
        return Err(failed(
            "the workload has no request; use --sessions 1 or more".into(),
        ));
    }
    Ok((workload, bad_lines))
}

/// The simulated cluster and the replay's router options.
fn options(args: &ReplayArgs) -> Result<ReplayOptions, CommandError> {
    let without_events = if args.no_kv_events {
        Some(
            args.approximate
                .config()
                .map_err(|error| failed(error.to_string()))?,
        )
    } else {
        None
    };
    Ok(ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: args.workers,
            kv_capacity_blocks: args.kv_blocks,
            prefill_tokens_per_s: args.prefill_tps,
            fetch_blocks_per_s: args.fetch_bps,
            ..ClusterConfig::default()
        },
        progress: true,
        router_seed: args.seed,
        replicas: args.replicas,
        sync_lag: args.sync_lag,
        without_events,
    })
}

/// Writes the comparison to `out` (a table, or JSON) and the HTML report, if asked for.
fn write_comparison(
    args: &ReplayArgs,
    comparison: &Comparison,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    if args.json {
        writeln!(out, "{}", comparison.to_json())?;
    } else {
        write!(out, "{}", comparison.table())?;
        if let Some(shadows) = kv_router_replay::shadow_table::shadow_table(&comparison.configs) {
            write!(out, "\n{shadows}")?;
        }
    }
    if let Some(path) = &args.report {
        std::fs::write(path, comparison.to_html()).map_err(|e| {
            failed(format!(
                "cannot write the report to `{}`: {e}; check the directory exists and is writable",
                path.display()
            ))
        })?;
        if !args.json {
            writeln!(out, "report: {}", path.display())?;
        }
    }
    Ok(())
}

/// Fails if the simulated workers and the router's index disagreed during the replay.
fn check_invariants(comparison: &Comparison) -> Result<(), CommandError> {
    let violations = comparison.invariant_violations();
    if !violations.is_empty() {
        return Err(CommandError::Inconsistent {
            message: format!(
                "the simulated workers and the router disagree: {}; this is a bug in the simulator or the router's index",
                violations.join("; ")
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::run_args;
    use dynamo_kv_router::plugins::PolicyRegistry;

    fn replay(args: &[&str]) -> (u8, String, String) {
        let registry = PolicyRegistry::linked().unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let argv = ["kv-router", "replay"].iter().chain(args).copied();
        let code = run_args(argv, &registry, &mut out, &mut err);
        (
            code,
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        )
    }

    #[test]
    fn builtin_comparison_prints_a_table_json_and_a_report() {
        let (code, out, err) = replay(&["--sessions", "20", "--workers", "2"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("kvcr+kv_fetch") && out.contains("default-cost no-hints"));
        assert!(out.contains("hit rate local") && out.contains("TTFT p50 / p90 / p99"));

        let dir = std::env::temp_dir().join(format!("kv-router-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let report = dir.join("report.html");
        let report_arg = report.to_string_lossy().into_owned();
        let (code, out, err) = replay(&[
            "--sessions",
            "20",
            "--workers",
            "2",
            "--json",
            "--report",
            &report_arg,
        ]);
        assert_eq!(code, 0, "{err}");
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["configs"][0]["name"], "kvcr+kv_fetch");
        let html = std::fs::read_to_string(&report).unwrap();
        assert!(html.contains("<svg"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_kv_events_adds_a_column_without_events_per_configuration() {
        let (code, out, err) = replay(&["--sessions", "20", "--workers", "2", "--no-kv-events"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("kvcr+kv_fetch (no events)"), "{out}");
        assert!(out.contains("default-cost no-hints (no events)"), "{out}");
        assert!(out.contains("off (ttl 120 s)"), "{out}");
    }

    #[test]
    fn bad_inputs_are_reported() {
        let (code, _, err) = replay(&["--trace", "/no/such/trace.jsonl"]);
        assert_eq!(code, 2);
        assert!(err.contains("cannot read trace"), "{err}");
        let (code, _, err) = replay(&["--config", "/no/such/config.yaml"]);
        assert_eq!(code, 2);
        assert!(!err.is_empty());
        let (code, _, err) = replay(&["--sessions", "5", "--workers", "0"]);
        assert_eq!(code, 2);
        assert!(err.contains("workers_per_role"), "{err}");
        let (code, _, err) = replay(&["--no-kv-events", "--router-prune-target-ratio", "2"]);
        assert_eq!(code, 2);
        assert!(err.contains("router_prune_target_ratio"), "{err}");
    }
}
