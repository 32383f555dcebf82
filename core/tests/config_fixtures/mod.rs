//! Stand-in policies for configuration tests: the shapes of `dynamo-default-cost-fn`, `kvcr`,
//! `kv_fetch` and `harness_prefetch`, registered by hand so the tests do not depend on which
//! catalogs are linked.

#![allow(dead_code)]

use dynamo_kv_router::config::{self, ConfigError, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::prelude::*;
use dynamo_kv_router::router::RouterSetup;

/// A selection policy that always picks the first candidate.
pub struct FirstCandidate {
    pub commits: Commitments,
}

impl WorkerSelectionPolicy for FirstCandidate {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        context
            .candidates()
            .first()
            .map(|candidate| Selection::worker(candidate.worker))
            .ok_or_else(|| PolicyError::new("no candidates"))
    }

    fn commitments(&self) -> Commitments {
        self.commits
    }
}

/// A hint policy that sends nothing.
pub struct Quiet {
    pub commits: Commitments,
}

impl HintPolicy for Quiet {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }

    fn commitments(&self) -> Commitments {
        self.commits
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CostParameters {
    #[serde(default)]
    overlap_score_credit: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvcrParameters {
    #[serde(default)]
    shared_cache_multiplier: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchParameters {
    #[serde(default)]
    min_additional_blocks: usize,
}

#[derive(Deserialize)]
struct PrefetchParameters {
    max_blocks: usize,
}

#[derive(Deserialize)]
struct NoParameters {}

fn plain_selection(commits: Commitments) -> WorkerSelectionConstructor {
    WorkerSelectionConstructor::shared(FirstCandidate { commits })
}

fn quiet(commits: Commitments) -> HintPolicyConstructor {
    HintPolicyConstructor::shared(Quiet { commits })
}

/// The stand-in catalog:
/// - `dynamo-default-cost-fn` (selection, commits nothing),
/// - `kvcr` (selection, commits KV_COPY when `shared_cache_multiplier > 0`),
/// - `picky` (selection, commits nothing; `strict_default` runs under it by default),
/// - `kv_fetch` (hint, KV_COPY, default under `kvcr`),
/// - `audit_log` (hint, default under any selection policy),
/// - `harness_prefetch` (hint, `max_blocks` required),
/// - `copy_too` (hint, KV_COPY, never default),
/// - `strict_default` (hint, requires `level`, default under `picky`).
pub fn registry() -> PolicyRegistry {
    let mut registry = PolicyRegistry::new();
    registry
        .register_worker_selection_policy(
            "dynamo-default-cost-fn",
            Arc::new(|parameters| {
                let _: CostParameters = parameters.deserialize()?;
                Ok(plain_selection(Commitments::NONE))
            }),
        )
        .unwrap();
    registry
        .register_worker_selection_policy(
            "kvcr",
            Arc::new(|parameters| {
                let config: KvcrParameters = parameters.deserialize()?;
                if !(0.0..=1.0).contains(&config.shared_cache_multiplier) {
                    return Err(ParameterError::invalid(
                        "shared_cache_multiplier",
                        "must be between 0 and 1",
                    ));
                }
                let commits = if config.shared_cache_multiplier > 0.0 {
                    Commitments::KV_COPY
                } else {
                    Commitments::NONE
                };
                Ok(plain_selection(commits))
            }),
        )
        .unwrap();
    registry
        .describe(
            "kvcr",
            "Default cost plus a shared-cache credit.",
            Commitments::KV_COPY,
        )
        .unwrap();
    registry
        .register_worker_selection_policy(
            "picky",
            Arc::new(|parameters| {
                let _: NoParameters = parameters.deserialize()?;
                Ok(plain_selection(Commitments::NONE))
            }),
        )
        .unwrap();
    registry
        .register_hint_policy(
            "kv_fetch",
            Arc::new(|parameters| {
                let _: FetchParameters = parameters.deserialize()?;
                Ok(quiet(Commitments::KV_COPY))
            }),
            [HintHost::worker_selection("kvcr")],
        )
        .unwrap();
    registry
        .describe(
            "kv_fetch",
            "Sends the booked worker a `kv.fetch` hint.",
            Commitments::KV_COPY,
        )
        .unwrap();
    registry
        .register_hint_policy(
            "audit_log",
            Arc::new(|parameters| {
                let _: NoParameters = parameters.deserialize()?;
                Ok(quiet(Commitments::NONE))
            }),
            [HintHost::AnyWorkerSelection],
        )
        .unwrap();
    registry
        .register_hint_policy(
            "harness_prefetch",
            Arc::new(|parameters| {
                let _: PrefetchParameters = parameters.deserialize()?;
                Ok(quiet(Commitments::NONE))
            }),
            [],
        )
        .unwrap();
    registry
        .register_hint_policy(
            "copy_too",
            Arc::new(|_| Ok(quiet(Commitments::KV_COPY))),
            [],
        )
        .unwrap();
    registry
        .describe("copy_too", "Another KV copy sender.", Commitments::KV_COPY)
        .unwrap();
    registry
        .register_hint_policy(
            "strict_default",
            Arc::new(|parameters| {
                #[derive(Deserialize)]
                struct Strict {
                    #[allow(dead_code)]
                    level: u8,
                }
                let _: Strict = parameters.deserialize()?;
                Ok(quiet(Commitments::NONE))
            }),
            [HintHost::worker_selection("picky")],
        )
        .unwrap();
    registry
}

/// Loads `yaml` (named `router.yaml`) against the stand-in catalog.
pub fn load(yaml: &str) -> Result<RouterSetup, ConfigError> {
    load_with(yaml, ConfigOverrides::default())
}

/// Loads `yaml` with `overrides`.
pub fn load_with(yaml: &str, overrides: ConfigOverrides) -> Result<RouterSetup, ConfigError> {
    let source = ConfigSource::new("router.yaml", yaml);
    config::load(&source, &registry(), &overrides)
}

/// The error `yaml` fails with; panics (failing the test) if it loads.
pub fn failure(yaml: &str) -> ConfigError {
    match load(yaml) {
        Ok(_) => panic!("expected the configuration to fail:\n{yaml}"),
        Err(error) => error,
    }
}
