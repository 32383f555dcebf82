//! Replays one workload through several router configurations on the same simulated cluster.

use crate::cluster::{ClusterConfig, ClusterError};
use crate::hit_rate::IdealHitRate;
use crate::replicas::ReplicatedRouter;
use crate::report::{Comparison, WorkloadInfo};
use crate::router_port::RouterPort;
use crate::simulation::{SimulationError, simulate, stages_for};
use crate::summary::ConfigReport;
use crate::trace::BadLine;
use crate::without_events::WithoutEventsRouter;
use crate::workload::PreparedWorkload;
use dynamo_kv_router::kv::ApproximateConfig;
use dynamo_kv_router::router::{Role, Router, RouterOptions, RouterSetup};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// One configuration to replay: a name for the report and the router setup it runs.
#[derive(Clone)]
pub struct ReplayConfig {
    /// Shown as the column header (file name or built-in name).
    pub name: String,
    /// What the router runs.
    pub setup: RouterSetup,
}

/// How to replay.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// The simulated cluster.
    pub cluster: ClusterConfig,
    /// Show a progress bar on standard error (only when it is a terminal).
    pub progress: bool,
    /// Seed of the router's `random` mode.
    pub router_seed: u64,
    /// Router replicas (0 or 1: one router); see [`crate::replicas::ReplicatedRouter`].
    pub replicas: usize,
    /// How many bookings later a replica learns of another's booking changes.
    pub sync_lag: u64,
    /// Also replay each configuration without KV events (upstream's `--no-kv-events`), in a
    /// column beside it named `NAME (no events)`: its router predicts caches from its bookings
    /// as this says. `None` replays with events only.
    pub without_events: Option<ApproximateConfig>,
}

/// A comparison that could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Nothing to compare.
    #[error("no configuration to replay; pass at least one --config or use the built-in defaults")]
    NoConfigs,
    /// A cluster parameter is invalid.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Replicas share bookings, not predictions: the two modes do not combine.
    #[error(
        "--no-kv-events replays one router; drop --replicas (or set it to 1) to compare with and without events"
    )]
    WithoutEventsWithReplicas,
    /// A configuration could not be simulated.
    #[error("configuration `{config}`: {source}")]
    Simulation {
        /// The configuration's name.
        config: String,
        /// What went wrong.
        source: SimulationError,
    },
}

/// Replays `workload` through each configuration, in order, on identical fresh clusters.
pub fn compare(
    workload: &PreparedWorkload,
    bad_lines: Vec<BadLine>,
    configs: &[ReplayConfig],
    options: &ReplayOptions,
) -> Result<Comparison, ReplayError> {
    if configs.is_empty() {
        return Err(ReplayError::NoConfigs);
    }
    if options.without_events.is_some() && options.replicas > 1 {
        return Err(ReplayError::WithoutEventsWithReplicas);
    }
    // Each configuration with events, then (when asked) without, side by side.
    let runs: Vec<(&ReplayConfig, Option<ApproximateConfig>)> = configs
        .iter()
        .flat_map(|config| {
            std::iter::once((config, None)).chain(
                options
                    .without_events
                    .map(|approximate| (config, Some(approximate))),
            )
        })
        .collect();
    let cluster = options.cluster.resolve(workload.block_size)?;
    let requests = workload.requests.len() as u64;
    let bar = if options.progress && std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(requests * runs.len() as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg:24} [{bar:40}] {pos}/{len} requests ({per_sec}, {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut reports = Vec::with_capacity(runs.len());
    for (config, without_events) in runs {
        let name = match without_events {
            Some(_) => format!("{} (no events)", config.name),
            None => config.name.clone(),
        };
        bar.set_message(name.clone());
        let mut setup = config.setup.clone();
        if setup.block_size != workload.block_size {
            tracing::info!(
                config = config.name,
                configured = setup.block_size,
                workload = workload.block_size,
                "using the workload's block size for routing"
            );
            setup.block_size = workload.block_size;
        }
        let roles: Vec<Role> = setup.roles.keys().copied().collect();
        let stages = stages_for(&roles);
        let router_mode = setup.router_mode.to_string();
        let router_options = RouterOptions {
            seed: options.router_seed,
            ..RouterOptions::default()
        };
        let router: Box<dyn RouterPort> = if let Some(approximate) = without_events {
            Box::new(WithoutEventsRouter::new(setup, router_options, approximate))
        } else if options.replicas > 1 {
            Box::new(ReplicatedRouter::new(
                &setup,
                router_options,
                options.replicas,
                options.sync_lag,
            ))
        } else {
            Box::new(Router::new(setup, router_options))
        };
        let simulated = simulate(&*router, workload, &cluster, &stages, &mut |n| bar.inc(n));
        let result = simulated.map_err(|source| ReplayError::Simulation {
            config: name.clone(),
            source,
        })?;
        let mut report = ConfigReport::from_result(&name, &router_mode, &result);
        report.without_kv_events = without_events;
        report.shadows = router.shadow_reports();
        reports.push(report);
    }
    bar.finish_and_clear();
    let span_us = match (workload.requests.first(), workload.requests.last()) {
        (Some(first), Some(last)) => last.arrival_us.saturating_sub(first.arrival_us),
        _ => 0,
    };
    Ok(Comparison {
        workload: WorkloadInfo {
            name: workload.name.clone(),
            requests: workload.requests.len(),
            blocks: workload.total_blocks(),
            block_size: workload.block_size,
            span_s: span_us as f64 / 1e6,
            bad_lines,
            ideal_hit_rate: IdealHitRate::of(workload),
        },
        cluster,
        configs: reports,
    })
}
