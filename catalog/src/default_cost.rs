//! `dynamo-default-cost-fn`: the upstream cost function, minimised or sampled.

use crate::cost::{
    CostModel, DEFAULT_DECODE_ACTIVE_REQUEST_WEIGHT, DEFAULT_OVERLAP_SCORE_CREDIT,
    DEFAULT_PREFILL_LOAD_SCALE, no_candidates,
};
use crate::cost_buffer::with_cost_buffer;
use crate::invalid_parameter::InvalidParameter;
use crate::picker::CostPicker;
use dynamo_kv_router::plugins::prelude::*;

/// The parameters of `dynamo-default-cost-fn`; every field is optional.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct DefaultCostConfig {
    /// Prefill blocks one cached block saves (default 1.0).
    #[schemars(range(min = 0.0))]
    pub overlap_score_credit: f64,
    /// Weight of the remaining prefill blocks (default 1.0).
    #[schemars(range(min = 0.0))]
    pub prefill_load_scale: f64,
    /// Cost of each active request on top of its blocks (default 0).
    #[schemars(range(min = 0.0))]
    pub decode_active_request_weight: f64,
    /// 0 (default) takes the cheapest worker; above 0 samples a softmax over range-normalised costs.
    #[schemars(range(min = 0.0))]
    pub router_temperature: f64,
    /// Seed of the tie-break and sampling draws; absent means a different sequence every run.
    pub seed: Option<u64>,
}

impl Default for DefaultCostConfig {
    fn default() -> Self {
        Self {
            overlap_score_credit: DEFAULT_OVERLAP_SCORE_CREDIT,
            prefill_load_scale: DEFAULT_PREFILL_LOAD_SCALE,
            decode_active_request_weight: DEFAULT_DECODE_ACTIVE_REQUEST_WEIGHT,
            router_temperature: 0.0,
            seed: None,
        }
    }
}

impl DefaultCostConfig {
    /// The validated cost model and picker these parameters describe.
    pub fn build(&self) -> Result<(CostModel, CostPicker), InvalidParameter> {
        let model = CostModel::new(
            self.overlap_score_credit,
            self.prefill_load_scale,
            self.decode_active_request_weight,
        )?;
        let picker = CostPicker::new(self.router_temperature, self.seed)?;
        Ok((model, picker))
    }
}

/// Chooses the worker with the lowest upstream cost: prefill left after the cached prefix, plus
/// active decode blocks, plus an optional per-request weight. Commits nothing.
///
/// Per candidate, lower is better:
///
/// ```text
/// credit  = overlap_score_credit * cached_prefix_blocks
/// prefill = (active_prefill_tokens + prompt_tokens) / block_size
/// cost    = prefill_load_scale * max(prefill - credit, 0)
///         + potential_decode_blocks + decode_active_request_weight * active_requests
/// ```
///
/// `potential_decode_blocks` counts, as upstream does, the worker's active blocks plus this
/// request's blocks, with blocks that active requests on the worker share (same sequence hash)
/// counted once.
///
/// `router_temperature` 0 takes the minimum, breaking ties at random; above 0 it samples worker
/// i with probability ∝ exp(−(cᵢ − c_min) / ((c_max − c_min)·T)). `seed` fixes the draws.
/// Parameters (all optional, finite and ≥ 0): `overlap_score_credit` (1.0),
/// `prefill_load_scale` (1.0), `decode_active_request_weight` (0), `router_temperature` (0),
/// `seed` (none).
#[worker_selection_policy("dynamo-default-cost-fn", parameters = DefaultCostConfig)]
#[derive(Debug)]
pub struct DefaultCostFn {
    model: CostModel,
    picker: CostPicker,
}

impl TryFrom<DefaultCostConfig> for DefaultCostFn {
    type Error = InvalidParameter;

    fn try_from(config: DefaultCostConfig) -> Result<Self, Self::Error> {
        let (model, picker) = config.build()?;
        Ok(Self { model, picker })
    }
}

impl WorkerSelectionPolicy for DefaultCostFn {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        with_cost_buffer(|costs| {
            self.model.costs_into(
                context.request(),
                |_, candidate| candidate.cached_blocks as f64,
                costs,
            )?;
            self.picker
                .pick(costs)
                .and_then(|index| context.candidates().get(index))
                .map(|candidate| Selection::worker(candidate.worker))
                .ok_or_else(no_candidates)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{Cluster, worker};
    use dynamo_kv_router::__private::build_selection_via;
    use dynamo_kv_router::plugins::PolicyParameters;
    use serde_json::json;

    fn policy(parameters: serde_json::Value) -> Result<DefaultCostFn, ParameterError> {
        let config: DefaultCostConfig = PolicyParameters::new(parameters).deserialize()?;
        DefaultCostFn::try_from(config).map_err(ParameterError::rejected)
    }

    /// Three workers, an 8-block (128-token) prompt, block size 16:
    /// - w1 caches 6 blocks, 64 prefill tokens in flight, 10 active blocks, 4 requests;
    /// - w2 caches 2 blocks, idle prefill, 3 active blocks, 1 request;
    /// - w3 caches nothing, 0 prefill, 0 blocks, 0 requests.
    fn cluster() -> Cluster {
        let mut cluster = Cluster::new(8);
        cluster.add(1, 6).load(64, 10, 4);
        cluster.add(2, 2).load(0, 3, 1);
        cluster.add(3, 0);
        cluster
    }

    fn costs(policy: &DefaultCostFn, cluster: &Cluster) -> Vec<f64> {
        cluster.with_view(|view| {
            policy
                .model
                .costs(view, |_, c| c.cached_blocks as f64)
                .unwrap()
        })
    }

    fn choose(policy: &DefaultCostFn, cluster: &Cluster) -> WorkerId {
        cluster
            .with_selection(|context| policy.select(context))
            .unwrap()
            .worker
    }

    #[test]
    fn default_parameters_match_hand_computed_costs() {
        let policy = policy(json!({})).unwrap();
        let cluster = cluster();
        // w1: prefill (64+128)/16 = 12, minus 6 cached = 6; + 10 blocks = 16.
        // w2: prefill 8 - 2 = 6; + 3 blocks = 9.
        // w3: prefill 8 - 0 = 8; + 0 = 8.
        assert_eq!(costs(&policy, &cluster), [16.0, 9.0, 8.0]);
        assert_eq!(choose(&policy, &cluster), worker(3));
    }

    #[test]
    fn weighted_parameters_match_hand_computed_costs() {
        let policy = policy(json!({
            "overlap_score_credit": 2.0,
            "prefill_load_scale": 0.5,
            "decode_active_request_weight": 1.0,
        }))
        .unwrap();
        let cluster = cluster();
        // w1: 0.5 * max(12 - 12, 0) + 10 + 4 = 14.
        // w2: 0.5 * (8 - 4) + 3 + 1 = 6.
        // w3: 0.5 * 8 + 0 + 0 = 4.
        assert_eq!(costs(&policy, &cluster), [14.0, 6.0, 4.0]);
        assert_eq!(choose(&policy, &cluster), worker(3));
    }

    #[test]
    fn a_heavy_prefill_scale_favours_the_cached_worker() {
        let policy =
            policy(json!({"prefill_load_scale": 4.0, "overlap_score_credit": 1.5})).unwrap();
        let cluster = cluster();
        // w1: 4 * (12 - 9) + 10 = 22. w2: 4 * (8 - 3) + 3 = 23. w3: 4 * 8 = 32.
        assert_eq!(costs(&policy, &cluster), [22.0, 23.0, 32.0]);
        assert_eq!(choose(&policy, &cluster), worker(1));
    }

    #[test]
    fn zero_temperature_ties_are_spread_across_workers() {
        let policy = policy(json!({"seed": 5})).unwrap();
        let mut cluster = Cluster::new(4);
        for id in 1..=4 {
            cluster.add(id, 0);
        }
        let mut counts = [0usize; 4];
        for _ in 0..4_000 {
            counts[choose(&policy, &cluster).worker_id as usize - 1] += 1;
        }
        // Each count is Binomial(4000, 1/4): mean 1,000, σ = √(4000 · 1/4 · 3/4) ≈ 27.4. A fair
        // tie-break stays within 5σ (137) of the mean except with probability below 10⁻⁶; a
        // biased one (always the first worker, or never one of them) does not.
        assert!(
            counts.iter().all(|&count| count.abs_diff(1_000) <= 137),
            "{counts:?}"
        );
    }

    #[test]
    fn positive_temperature_samples_every_worker_in_cost_order() {
        let policy = policy(json!({"router_temperature": 1.0, "seed": 3})).unwrap();
        let cluster = cluster();
        let mut counts = [0usize; 3];
        for _ in 0..10_000 {
            counts[choose(&policy, &cluster).worker_id as usize - 1] += 1;
        }
        // Costs 16, 9, 8: range 8, weights e^-1, e^-1/8, 1.
        let weights = [(-1.0f64).exp(), (-0.125f64).exp(), 1.0];
        let total: f64 = weights.iter().sum();
        for (count, weight) in counts.iter().zip(weights) {
            let observed = *count as f64 / 10_000.0;
            assert!((observed - weight / total).abs() < 0.02, "{counts:?}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_choices() {
        let a = policy(json!({"router_temperature": 2.0, "seed": 11})).unwrap();
        let b = policy(json!({"router_temperature": 2.0, "seed": 11})).unwrap();
        let cluster = cluster();
        for _ in 0..500 {
            assert_eq!(choose(&a, &cluster), choose(&b, &cluster));
        }
    }

    #[test]
    fn invalid_parameters_name_the_field() {
        for (parameters, field) in [
            (
                json!({"overlap_score_credit": -1.0}),
                "overlap_score_credit",
            ),
            (json!({"prefill_load_scale": -0.5}), "prefill_load_scale"),
            (
                json!({"decode_active_request_weight": -2}),
                "decode_active_request_weight",
            ),
            (json!({"router_temperature": -0.1}), "router_temperature"),
        ] {
            let error = policy(parameters).unwrap_err().to_string();
            assert!(error.starts_with(&format!("`{field}` must be")), "{error}");
        }
        let error = policy(json!({"router_temprature": 1.0})).unwrap_err();
        assert_eq!(error.path(), "router_temprature");
        let error = policy(json!({"seed": -1})).unwrap_err();
        assert_eq!(error.path(), "seed");
    }

    #[test]
    fn the_registered_provider_builds_a_policy_that_commits_nothing() {
        let constructor =
            build_selection_via::<DefaultCostFn, DefaultCostConfig>(PolicyParameters::empty())
                .unwrap();
        let partition = Partition {
            role: Role::Decode,
            block_size: 16,
        };
        let policy = constructor.construct(&partition).unwrap();
        assert_eq!(policy.commitments(), Commitments::NONE);
        let error = build_selection_via::<DefaultCostFn, DefaultCostConfig>(PolicyParameters::new(
            json!({"prefill_load_scale": -1}),
        ))
        .err()
        .unwrap();
        assert!(error.to_string().contains("prefill_load_scale"), "{error}");
    }

    #[test]
    fn zero_block_size_and_no_candidates_are_errors() {
        let policy = policy(json!({})).unwrap();
        let mut cluster = cluster();
        cluster.block_size = 0;
        assert!(cluster.with_selection(|c| policy.select(c)).is_err());
        let empty = Cluster::new(2);
        assert!(empty.with_selection(|c| policy.select(c)).is_err());
    }
}
