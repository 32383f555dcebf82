//! The settings of routing without KV events, shared by `serve` and `replay`, under upstream's
//! flag names and with its defaults (`router_ttl_secs`, `router_max_tree_size`,
//! `router_prune_target_ratio`).

use clap::Args;
use dynamo_kv_router::kv::predicted_cache::{
    ApproximateConfig, ApproximateConfigError, DEFAULT_ROUTER_MAX_TREE_SIZE,
    DEFAULT_ROUTER_PRUNE_TARGET_RATIO, DEFAULT_ROUTER_TTL_SECS, PredictedTtlError,
};
use std::time::Duration;

/// How the router predicts caches from its bookings when it routes without KV events.
#[derive(Clone, Debug, Args)]
pub struct ApproximateArgs {
    /// With --no-kv-events: seconds a booked prompt's blocks count as cached on the booked
    /// worker (upstream `router_ttl_secs`).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_ROUTER_TTL_SECS)]
    pub router_ttl_secs: f64,
    /// With --no-kv-events: predicted (worker, block) entries above which the oldest are
    /// pruned (upstream `router_max_tree_size`, 2^20).
    #[arg(long, value_name = "BLOCKS", default_value_t = DEFAULT_ROUTER_MAX_TREE_SIZE)]
    pub router_max_tree_size: usize,
    /// With --no-kv-events: the share of --router-max-tree-size a prune keeps (upstream
    /// `router_prune_target_ratio`).
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULT_ROUTER_PRUNE_TARGET_RATIO)]
    pub router_prune_target_ratio: f64,
}

impl ApproximateArgs {
    /// The settings, checked as upstream checks them.
    pub fn config(&self) -> Result<ApproximateConfig, ApproximateConfigError> {
        ApproximateConfig::new(
            self.router_ttl_secs,
            self.router_max_tree_size,
            self.router_prune_target_ratio,
        )
    }
}

/// `--router-predicted-ttl-secs` (upstream `router_predicted_ttl_secs`), checked as upstream
/// checks it: `None` predicts nothing alongside KV events.
pub fn predicted_ttl(secs: Option<f64>) -> Result<Option<Duration>, PredictedTtlError> {
    secs.map(dynamo_kv_router::kv::predicted_cache::predicted_ttl)
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Cli, Command};
    use clap::Parser;

    fn serve(args: &[&str]) -> Result<Option<f64>, clap::Error> {
        let cli = Cli::try_parse_from(["kv-router", "serve"].iter().chain(args))?;
        match cli.command {
            Command::Serve(serve) => Ok(serve.router_predicted_ttl_secs),
            _ => unreachable!("parsed as serve"),
        }
    }

    #[test]
    fn predicting_alongside_events_is_off_by_default_and_refused_without_events() {
        assert_eq!(serve(&[]).unwrap(), None);
        assert_eq!(predicted_ttl(None), Ok(None));
        assert_eq!(
            serve(&["--router-predicted-ttl-secs", "2.5"]).unwrap(),
            Some(2.5)
        );
        assert_eq!(
            predicted_ttl(Some(2.5)),
            Ok(Some(Duration::from_millis(2_500)))
        );
        let conflict = serve(&["--no-kv-events", "--router-predicted-ttl-secs", "1"]).unwrap_err();
        assert_eq!(conflict.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert!(predicted_ttl(Some(-1.0)).is_err());
        assert!(predicted_ttl(Some(f64::NAN)).is_err());
        assert!(predicted_ttl(Some(f64::INFINITY)).is_err());
    }
}
