//! `kvcr`: the default cost plus a shared-cache credit for KV a peer can copy to the worker.

use crate::cost::{
    CostModel, DEFAULT_DECODE_ACTIVE_REQUEST_WEIGHT, DEFAULT_OVERLAP_SCORE_CREDIT,
    DEFAULT_PREFILL_LOAD_SCALE, PrefillBlocks, check_block_size, count, no_candidates,
};
use crate::cost_buffer::with_cost_buffer;
use crate::default_cost::DefaultCostConfig;
use crate::fetch_source::{SourceRanking, root_aligned_hashes};
use crate::invalid_parameter::{InvalidParameter, fraction};
use crate::picker::{CostPicker, is_tied, min_max};
use dynamo_kv_router::plugins::prelude::*;

/// The parameters of `kvcr`: those of `dynamo-default-cost-fn` plus `shared_cache_multiplier`.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct KvcrConfig {
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
    /// What a block a peer can copy is worth, as a fraction of a locally cached block (0..=1,
    /// default 0: no credit, no commitments).
    #[schemars(range(min = 0.0, max = 1.0))]
    pub shared_cache_multiplier: f64,
}

impl Default for KvcrConfig {
    fn default() -> Self {
        Self {
            overlap_score_credit: DEFAULT_OVERLAP_SCORE_CREDIT,
            prefill_load_scale: DEFAULT_PREFILL_LOAD_SCALE,
            decode_active_request_weight: DEFAULT_DECODE_ACTIVE_REQUEST_WEIGHT,
            router_temperature: 0.0,
            seed: None,
            shared_cache_multiplier: 0.0,
        }
    }
}

impl KvcrConfig {
    /// The default-cost parameters these parameters include.
    pub fn cost(&self) -> DefaultCostConfig {
        DefaultCostConfig {
            overlap_score_credit: self.overlap_score_credit,
            prefill_load_scale: self.prefill_load_scale,
            decode_active_request_weight: self.decode_active_request_weight,
            router_temperature: self.router_temperature,
            seed: self.seed,
        }
    }
}

/// KV-cache-sharing routing: the `dynamo-default-cost-fn` cost, where KV a peer can copy to a
/// worker counts as a fraction of a local hit. Commits a KV copy when `shared_cache_multiplier`
/// is above 0 and the copy is what made the booked worker a best choice.
///
/// **Credit.** For each candidate, the best eligible source is the other worker of the role that
/// advertises `router_hint` with a non-empty source endpoint and caches the longest prefix of the
/// request (ties: smaller `(worker_id, dp_rank)`). The blocks that source caches beyond the
/// candidate's own prefix count as `shared_cache_multiplier` of a cached block:
/// `overlap = cached_prefix + shared_cache_multiplier * peer_extra_blocks`, and the cost is the
/// default cost with that overlap.
///
/// **When the choice used the credit.** After picking a worker from the credited costs, kvcr
/// commits the booked worker to copy those peer blocks exactly when both hold:
/// 1. the credit lowered the booked worker's cost (it had peer blocks to gain, and the gain was
///    not clamped away because its prefill was already covered), and
/// 2. without any credit the booked worker would not have been a best choice: its cost without
///    credit is above the minimum cost without credit.
///
/// A worker that was already a cheapest choice on its own cache needs no commitment (`kv_fetch`
/// may still send it a best-effort fetch). The committed [`KvCopy`] names the best source, its
/// endpoint, the booked worker's prefix length as `first_block`, and the source's engine block
/// hashes root-aligned, from block 0 to the end of the source's prefix (as upstream's
/// `kv.fetch` payload names them) — stopping at the first block whose engine hash the index
/// does not know; if that leaves no block past `first_block`, nothing is committed.
///
/// Parameters: those of `dynamo-default-cost-fn` (`overlap_score_credit` 1.0,
/// `prefill_load_scale` 1.0, `decode_active_request_weight` 0, `router_temperature` 0, `seed`)
/// and `shared_cache_multiplier` (0..=1, default 0). With the multiplier at 0 it makes exactly
/// the choices of `dynamo-default-cost-fn` and commits nothing.
#[worker_selection_policy("kvcr", commits = KV_COPY, parameters = KvcrConfig)]
#[derive(Debug)]
pub struct Kvcr {
    model: CostModel,
    picker: CostPicker,
    shared_cache_multiplier: f64,
}

impl TryFrom<KvcrConfig> for Kvcr {
    type Error = InvalidParameter;

    fn try_from(config: KvcrConfig) -> Result<Self, Self::Error> {
        let (model, picker) = config.cost().build()?;
        let shared_cache_multiplier =
            fraction("shared_cache_multiplier", config.shared_cache_multiplier)?;
        Ok(Self {
            model,
            picker,
            shared_cache_multiplier,
        })
    }
}

impl Kvcr {
    /// The overlap `candidate` is credited with: its own prefix plus the multiplier's share of
    /// the blocks its best source caches beyond it (`source_prefix`: that source's prefix, 0
    /// when it has none).
    fn credited_overlap(&self, candidate: &Candidate, source_prefix: usize) -> f64 {
        let extra = source_prefix.saturating_sub(candidate.cached_blocks);
        count(candidate.cached_blocks as u64) + self.shared_cache_multiplier * count(extra as u64)
    }

    /// Every candidate's cost with the shared-cache credit, and the best source each one would
    /// copy from (in candidate order).
    #[cfg(test)]
    fn credited_costs<'a>(
        &self,
        request: &RequestView<'a>,
    ) -> Result<(Vec<f64>, Vec<Option<&'a Candidate>>), PolicyError> {
        let ranking = SourceRanking::new(request.candidates);
        let sources: Vec<Option<&'a Candidate>> = request
            .candidates
            .iter()
            .map(|candidate| ranking.best_for(candidate.worker))
            .collect();
        let costs = self.model.costs(request, |index, candidate| {
            let source = sources.get(index).copied().flatten();
            self.credited_overlap(candidate, source.map_or(0, |source| source.cached_blocks))
        })?;
        Ok((costs, sources))
    }

    /// The choice with the shared-cache credit: the index of the booked candidate among the
    /// credited costs, and whether it must be committed to its copy. `costs` is the buffer the
    /// candidates' costs are computed in.
    fn credited_choice(
        &self,
        request: &RequestView<'_>,
        ranking: &SourceRanking<'_>,
        costs: &mut Vec<f64>,
    ) -> Result<CreditedChoice, PolicyError> {
        let block_size = check_block_size(request.block_size)?;
        let prefill = PrefillBlocks::new(request.prompt_tokens, block_size);
        let candidates = request.candidates;
        costs.clear();
        costs.resize(2 * candidates.len(), 0.0);
        let (credited, plain) = costs.split_at_mut(candidates.len());
        // The two best sources' prefixes, read once rather than per candidate.
        let sources = ranking.prefixes();
        // One pass: each candidate's overlap-independent terms serve both of its costs.
        for ((credited, plain), candidate) in
            credited.iter_mut().zip(plain.iter_mut()).zip(candidates)
        {
            let terms = self
                .model
                .terms(&candidate.load, prefill.of(&candidate.load));
            let source_prefix = sources.for_booking_on(candidate.worker);
            *credited = terms.cost(self.credited_overlap(candidate, source_prefix));
            *plain = terms.cost(count(candidate.cached_blocks as u64));
        }
        let index = self.picker.pick(credited).ok_or_else(no_candidates)?;
        let (Some(&credited_cost), Some(&plain_cost)) = (credited.get(index), plain.get(index))
        else {
            return Err(no_candidates());
        };
        let credit_lowered_cost = !is_tied(plain_cost, credited_cost);
        // Only a choice the credit changed can need a commitment.
        let commit = credit_lowered_cost && {
            let (plain_min, _) = min_max(plain).ok_or_else(no_candidates)?;
            !is_tied(plain_cost, plain_min)
        };
        Ok(CreditedChoice { index, commit })
    }
}

/// What [`Kvcr::credited_choice`] chose.
struct CreditedChoice {
    /// The booked candidate's index.
    index: usize,
    /// Whether the booked candidate is committed to copying from its best source: the credit
    /// lowered its cost and it was not a best choice without any credit.
    commit: bool,
}

impl WorkerSelectionPolicy for Kvcr {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let request = context.request();
        let candidates = context.candidates();
        if self.shared_cache_multiplier == 0.0 {
            // Exactly the default cost's computation and draws.
            return with_cost_buffer(|plain| {
                self.model.costs_into(
                    request,
                    |_, candidate| candidate.cached_blocks as f64,
                    plain,
                )?;
                self.picker
                    .pick(plain)
                    .and_then(|index| candidates.get(index))
                    .map(|candidate| Selection::worker(candidate.worker))
                    .ok_or_else(no_candidates)
            });
        }

        let ranking = SourceRanking::new(candidates);
        let choice = with_cost_buffer(|costs| self.credited_choice(request, &ranking, costs))?;
        let booked = candidates.get(choice.index).ok_or_else(no_candidates)?;
        let copy = match ranking.best_for(booked.worker) {
            Some(source) if choice.commit => commit(request, booked, source),
            _ => None,
        };
        Ok(match copy {
            Some(copy) => Selection::with_kv_copy(booked.worker, copy),
            None => Selection::worker(booked.worker),
        })
    }

    fn commitments(&self) -> Commitments {
        if self.shared_cache_multiplier > 0.0 {
            Commitments::KV_COPY
        } else {
            Commitments::NONE
        }
    }
}

/// The copy of `source`'s blocks beyond `booked`'s prefix, as far as their engine hashes are
/// known, named root-aligned.
fn commit(request: &RequestView<'_>, booked: &Candidate, source: &Candidate) -> Option<KvCopy> {
    let endpoint = source.source_endpoint.as_deref()?;
    let first_block = booked.cached_blocks;
    let block_hashes = root_aligned_hashes(request, source.worker, source.cached_blocks);
    if block_hashes.len() <= first_block {
        tracing::debug!(
            request_id = request.request_id,
            source = %source.worker,
            "kvcr: no engine hash known for the peer's blocks; booking without a KV copy"
        );
        return None;
    }
    Some(KvCopy {
        source: source.worker,
        source_endpoint: endpoint.to_owned(),
        first_block,
        block_hashes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::default_cost::DefaultCostFn;
    use crate::test_support::{Cluster, worker};
    use dynamo_kv_router::__private::build_selection_via;
    use dynamo_kv_router::plugins::PolicyParameters;
    use serde_json::json;

    // Every cluster below books a 10-block prompt (160 tokens, block size 16) with no prefill
    // in flight and decode_active_request_weight 0, so a worker's cost is
    // max(10 - overlap, 0) + active_blocks.

    fn kvcr(parameters: serde_json::Value) -> Result<Kvcr, ParameterError> {
        let config: KvcrConfig = PolicyParameters::new(parameters).deserialize()?;
        Kvcr::try_from(config).map_err(ParameterError::rejected)
    }

    fn select(policy: &dyn WorkerSelectionPolicy, cluster: &Cluster) -> Selection {
        cluster
            .with_selection(|context| policy.select(context))
            .unwrap()
    }

    /// w1 caches 8 blocks and is busy; w2 caches nothing; w3 caches 4. w1 and w2 are sources.
    fn shared_cluster() -> Cluster {
        let mut cluster = Cluster::new(10);
        cluster.add(1, 8).hint("tcp://w1").load(0, 20, 2);
        cluster.add(2, 0).hint("tcp://w2").load(0, 1, 1);
        cluster.add(3, 4).load(0, 4, 1);
        cluster
    }

    #[test]
    fn the_credit_counts_peer_blocks_beyond_the_own_prefix() {
        let policy = kvcr(json!({"shared_cache_multiplier": 0.5})).unwrap();
        let cluster = shared_cluster();
        let (costs, sources) = cluster.with_view(|view| {
            let (costs, sources) = policy.credited_costs(view).unwrap();
            (
                costs,
                sources
                    .iter()
                    .map(|s| s.map(|s| s.worker))
                    .collect::<Vec<_>>(),
            )
        });
        // w1: best source w2 holds nothing extra: 10 - 8 + 20 = 22.
        // w2: 0.5 * 8 blocks from w1: 10 - 4 + 1 = 7.
        // w3: 4 own + 0.5 * 4 more from w1: 10 - 6 + 4 = 8.
        assert_eq!(costs, [22.0, 7.0, 8.0]);
        assert_eq!(sources, [Some(worker(2)), Some(worker(1)), Some(worker(1))]);
    }

    #[test]
    fn commits_when_the_credit_changes_the_choice() {
        // Plain costs 22, 11, 10 → w3; credited 22, 7, 8 → w2, which was not a best choice.
        let cluster = shared_cluster();
        let policy = kvcr(json!({"shared_cache_multiplier": 0.5})).unwrap();
        let selection = select(&policy, &cluster);
        assert_eq!(selection.worker, worker(2));
        let copy = selection.kv_copy.expect("the credit changed the choice");
        assert_eq!(copy.source, worker(1));
        assert_eq!(copy.source_endpoint, "tcp://w1");
        assert_eq!(copy.first_block, 0);
        assert_eq!(copy.block_hashes, cluster.engine_hashes(1, 0..8));

        let default = DefaultCostFn::try_from(DefaultCostConfig::default()).unwrap();
        assert_eq!(select(&default, &cluster), Selection::worker(worker(3)));
    }

    #[test]
    fn no_commit_when_the_booked_worker_was_already_best() {
        let policy = kvcr(json!({"shared_cache_multiplier": 1.0})).unwrap();
        // Plain: w2 7 + 0 = 7, w3 10 + 2 = 12 → w2. Credited: w2 1, w3 3 → w2, which gains
        // 6 blocks from w1 but was the cheapest on its own cache.
        let mut cluster = Cluster::new(10);
        cluster.add(1, 9).hint("tcp://w1").load(0, 30, 3);
        cluster.add(2, 3);
        cluster.add(3, 0).load(0, 2, 1);
        assert_eq!(select(&policy, &cluster), Selection::worker(worker(2)));

        // Plain: w2 7 + 3 = 10, w3 10 + 0 = 10 (tied best). Credited: w2 4, w3 1 → w3: the
        // credit broke a tie, but w3 was a best choice without it.
        let mut cluster = Cluster::new(10);
        cluster.add(1, 9).hint("tcp://w1").load(0, 30, 3);
        cluster.add(2, 3).load(0, 3, 1);
        cluster.add(3, 0);
        assert_eq!(select(&policy, &cluster), Selection::worker(worker(3)));
    }

    #[test]
    fn the_copy_covers_only_the_blocks_the_booked_worker_lacks() {
        let policy = kvcr(json!({"shared_cache_multiplier": 1.0})).unwrap();
        // Plain: w1 1 + 30 = 31, w2 6 + 3 = 9, w3 3 + 5 = 8 → w3.
        // Credited: w2 1 + 3 = 4, w3 1 + 5 = 6 → w2: copy w1's blocks 4..9.
        let mut cluster = Cluster::new(10);
        cluster.add(1, 9).hint("tcp://w1").load(0, 30, 3);
        cluster.add(2, 4).load(0, 3, 1);
        cluster.add(3, 7).load(0, 5, 1);
        let selection = select(&policy, &cluster);
        assert_eq!(selection.worker, worker(2));
        let copy = selection.kv_copy.expect("the credit changed the choice");
        assert_eq!((copy.source, copy.first_block), (worker(1), 4));
        // Root-aligned: the source's hashes from block 0; the booked worker copies 4..9.
        assert_eq!(copy.block_hashes, cluster.engine_hashes(1, 0..9));
        assert_eq!(copy.copied_blocks(), 4..9);

        // The index lost w1's engine hash of block 6: only the known leading run 4..6 is copied.
        cluster.forget(1, 6);
        let copy = select(&policy, &cluster).kv_copy.unwrap();
        assert_eq!(copy.block_hashes, cluster.engine_hashes(1, 0..6));
        assert_eq!(copy.copied_blocks(), 4..6);
        // It lost block 4 as well: nothing can be copied, the choice stands without a copy.
        cluster.forget(1, 4);
        assert_eq!(select(&policy, &cluster), Selection::worker(worker(2)));
    }

    #[test]
    fn the_source_is_the_longest_prefix_then_the_smaller_id() {
        let policy = kvcr(json!({"shared_cache_multiplier": 1.0})).unwrap();
        // w1 and w2 both cache 6 blocks. Plain: w3 10 + 2 = 12, w4 8 + 3 = 11 → w4.
        // Credited: w3 4 + 2 = 6, w4 4 + 3 = 7 → w3, copying from w1 (the tie's smaller id).
        let mut cluster = Cluster::new(10);
        cluster.add(2, 6).hint("tcp://w2").load(0, 20, 2);
        cluster.add(1, 6).hint("tcp://w1").load(0, 20, 2);
        cluster.add(3, 0).load(0, 2, 1);
        cluster.add(4, 2).load(0, 3, 1);
        let selection = select(&policy, &cluster);
        assert_eq!(selection.worker, worker(3));
        let copy = selection.kv_copy.unwrap();
        assert_eq!(copy.source, worker(1));
        assert_eq!(copy.source_endpoint, "tcp://w1");
        assert_eq!(copy.block_hashes, cluster.engine_hashes(1, 0..6));
    }

    #[test]
    fn ineligible_peers_give_no_credit() {
        let policy = kvcr(json!({"shared_cache_multiplier": 1.0})).unwrap();
        // w1 caches 8 blocks but cannot be a source (empty endpoint, no endpoint, no router_hint):
        // plain and credited costs agree, w2 14 and w3 10 → w3 without a copy.
        let mut cluster = Cluster::new(10);
        cluster.add(1, 8).hint("").load(0, 20, 2);
        cluster.add(2, 0).load(0, 4, 1);
        cluster.add(3, 4).load(0, 4, 1);
        assert_eq!(select(&policy, &cluster), Selection::worker(worker(3)));
        let mut cluster = Cluster::new(10);
        cluster.add(1, 8).hint_without_endpoint().load(0, 20, 2);
        cluster.add(2, 0).load(0, 4, 1);
        cluster.add(3, 4).load(0, 4, 1);
        assert_eq!(select(&policy, &cluster), Selection::worker(worker(3)));
        let mut cluster = Cluster::new(10);
        cluster.add(1, 8).load(0, 20, 2);
        cluster.add(2, 0).load(0, 4, 1);
        cluster.add(3, 4).load(0, 4, 1);
        assert_eq!(select(&policy, &cluster), Selection::worker(worker(3)));
    }

    #[test]
    fn multiplier_zero_matches_the_default_cost_and_commits_nothing() {
        for temperature in [0.0, 0.5] {
            let parameters = json!({"router_temperature": temperature, "seed": 17});
            let config: DefaultCostConfig = PolicyParameters::new(parameters.clone())
                .deserialize()
                .unwrap();
            let default = DefaultCostFn::try_from(config).unwrap();
            let policy = kvcr(parameters).unwrap();
            assert_eq!(policy.commitments(), Commitments::NONE);
            let mut cluster = shared_cluster();
            cluster.add(4, 0).hint("tcp://w4").load(0, 6, 1);
            cluster.add(5, 2).load(0, 2, 0);
            for _ in 0..1_000 {
                let selection = select(&policy, &cluster);
                assert_eq!(
                    selection,
                    Selection::worker(select(&default, &cluster).worker)
                );
            }
        }
    }

    #[test]
    fn declares_kv_copy_only_above_zero() {
        let policy = kvcr(json!({"shared_cache_multiplier": 0.25})).unwrap();
        assert_eq!(policy.commitments(), Commitments::KV_COPY);
        assert_eq!(kvcr(json!({})).unwrap().commitments(), Commitments::NONE);

        let partition = Partition {
            role: Role::Decode,
            block_size: 16,
        };
        for (multiplier, expected) in [(0.5, Commitments::KV_COPY), (0.0, Commitments::NONE)] {
            let parameters = PolicyParameters::new(json!({"shared_cache_multiplier": multiplier}));
            let constructor = build_selection_via::<Kvcr, KvcrConfig>(parameters).unwrap();
            let policy = constructor.construct(&partition).unwrap();
            assert_eq!(policy.commitments(), expected);
        }
    }

    #[test]
    fn parameters_are_validated_with_the_field_named() {
        for bad in [json!(-0.1), json!(1.5)] {
            let error = kvcr(json!({"shared_cache_multiplier": bad})).unwrap_err();
            assert!(
                error
                    .to_string()
                    .starts_with("`shared_cache_multiplier` must be"),
                "{error}"
            );
        }
        let error = kvcr(json!({"router_temperature": -1})).unwrap_err();
        assert!(
            error.to_string().starts_with("`router_temperature`"),
            "{error}"
        );
        let error = kvcr(json!({"shared_cache_multiplyer": 0.5})).unwrap_err();
        assert_eq!(error.path(), "shared_cache_multiplyer");
        let error = kvcr(json!({"shared_cache_multiplier": "half"})).unwrap_err();
        assert_eq!(error.path(), "shared_cache_multiplier");
    }
}
