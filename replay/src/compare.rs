//! Replays one workload through several router configurations on the same simulated cluster.

use crate::cluster::{ClusterConfig, ClusterError};
use crate::hit_rate::IdealHitRate;
use crate::replicas::ReplicatedRouter;
use crate::report::{Comparison, WorkloadInfo};
use crate::simulation::{SimulationError, simulate, stages_for};
use crate::summary::ConfigReport;
use crate::trace::BadLine;
use crate::workload::PreparedWorkload;
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
    let cluster = options.cluster.resolve(workload.block_size)?;
    let requests = workload.requests.len() as u64;
    let bar = if options.progress && std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(requests * configs.len() as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg:24} [{bar:40}] {pos}/{len} requests ({per_sec}, {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut reports = Vec::with_capacity(configs.len());
    for config in configs {
        bar.set_message(config.name.clone());
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
        let simulated = if options.replicas > 1 {
            let router =
                ReplicatedRouter::new(&setup, router_options, options.replicas, options.sync_lag);
            simulate(&router, workload, &cluster, &stages, &mut |n| bar.inc(n))
        } else {
            let router = Router::new(setup, router_options);
            simulate(&router, workload, &cluster, &stages, &mut |n| bar.inc(n))
        };
        let result = simulated.map_err(|source| ReplayError::Simulation {
            config: config.name.clone(),
            source,
        })?;
        reports.push(ConfigReport::from_result(
            &config.name,
            &router_mode,
            &result,
        ));
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
