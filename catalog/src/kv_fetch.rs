//! `kv_fetch`: tells the booked worker to fetch KV it lacks from a peer that holds it.

use crate::fetch_source::{SourceRanking, with_root_aligned_hashes};
use crate::invalid_parameter::{InvalidParameter, at_least_one};
use dynamo_kv_router::kv::EngineBlockHash;
use dynamo_kv_router::plugins::prelude::*;
pub use dynamo_kv_router::plugins::{
    KV_FETCH_ACTION_TYPE, KV_FETCH_ACTION_VERSION, KvFetchPayload,
};

/// The parameters of `kv_fetch`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct KvFetchConfig {
    /// The fewest blocks a best-effort fetch must add to the booked worker's prefix (default 1).
    #[schemars(range(min = 1))]
    pub min_additional_blocks: usize,
}

impl Default for KvFetchConfig {
    fn default() -> Self {
        Self {
            min_additional_blocks: 1,
        }
    }
}

/// Sends the booked worker a `kv.fetch` hint naming a peer that holds KV it lacks: the copy its
/// worker-selection policy committed it to, or else a best-effort fetch that adds at least
/// `min_additional_blocks` (default 1). Sends committed KV copies; on by default under `kvcr`.
///
/// - **Committed copy**: one `kv.fetch` action with the copy's source endpoint and root-aligned
///   engine block hashes, exactly as committed.
/// - **Best effort** (no committed copy): the best eligible source — another worker of the role
///   that advertises `router_hint` with a non-empty source endpoint, with the longest cached
///   prefix of the request (ties: smaller `(worker_id, dp_rank)`). If it holds at least
///   `min_additional_blocks` more prefix blocks than the booked worker, one `kv.fetch` naming
///   its endpoint and its engine hashes of the request's blocks from block 0 to the end of its
///   prefix. The hashes stop at the first block whose engine hash the index does not know
///   (blocks after a gap cannot be used); if that leaves fewer than `min_additional_blocks`
///   beyond the booked worker's prefix, no action.
/// - Otherwise no action.
///
/// Payload (action version `1.0`, upstream's `KvSourceLocationsPayload`): `block_hashes[i]` is
/// the source's engine hash of request block `i`, from block 0 to the end of the source's
/// prefix (root-aligned); the booked worker fetches only the suffix it lacks.
/// `{"source_control_endpoint": "tcp://10.0.0.7:23280", "block_hashes": [11, 22, 33]}`.
#[hint_policy("kv_fetch", defaults = [kvcr], commits = KV_COPY, parameters = KvFetchConfig)]
#[derive(Clone, Debug)]
pub struct KvFetch {
    min_additional_blocks: usize,
}

impl TryFrom<KvFetchConfig> for KvFetch {
    type Error = InvalidParameter;

    fn try_from(config: KvFetchConfig) -> Result<Self, Self::Error> {
        Ok(Self {
            min_additional_blocks: at_least_one(
                "min_additional_blocks",
                config.min_additional_blocks,
            )?,
        })
    }
}

impl HintPolicy for KvFetch {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        if let Some(copy) = context.committed_kv_copy() {
            return Ok(vec![kv_fetch_action(
                &copy.source_endpoint,
                &copy.block_hashes,
            )]);
        }
        let booked = context.worker();
        let ranking = SourceRanking::new(context.candidates());
        let Some(source) = ranking.best_for(booked) else {
            return Ok(Vec::new());
        };
        let Some(endpoint) = source.source_endpoint.as_deref() else {
            return Ok(Vec::new());
        };
        let own = context.booked_cached_blocks();
        if source.cached_blocks < own.saturating_add(self.min_additional_blocks) {
            return Ok(Vec::new());
        }
        let request = context.request();
        let minimum = own.saturating_add(self.min_additional_blocks);
        Ok(
            with_root_aligned_hashes(request, source.worker, source.cached_blocks, |hashes| {
                (hashes.len() >= minimum).then(|| kv_fetch_action(endpoint, hashes))
            })
            .into_iter()
            .collect(),
        )
    }

    fn commitments(&self) -> Commitments {
        Commitments::KV_COPY
    }
}

/// A `kv.fetch` action (version `1.0`) naming the source at `source_control_endpoint` and its
/// root-aligned engine `block_hashes` (see [`KvFetchPayload`]).
pub fn kv_fetch_action(
    source_control_endpoint: &str,
    block_hashes: &[EngineBlockHash],
) -> HintAction {
    KvFetchPayload::action(source_control_endpoint, block_hashes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{Cluster, worker};
    use dynamo_kv_router::__private::build_hint_via;
    use dynamo_kv_router::plugins::PolicyParameters;
    use serde_json::json;

    fn kv_fetch(min_additional_blocks: usize) -> KvFetch {
        KvFetch::try_from(KvFetchConfig {
            min_additional_blocks,
        })
        .unwrap()
    }

    fn hints(
        policy: &KvFetch,
        cluster: &Cluster,
        booked: u64,
        copy: Option<&KvCopy>,
    ) -> Vec<HintAction> {
        cluster
            .with_hint(worker(booked), copy, |context| policy.build_hints(context))
            .unwrap()
    }

    fn fetch(endpoint: &str, hashes: Vec<EngineBlockHash>) -> Vec<HintAction> {
        vec![HintAction {
            action_type: "kv.fetch".into(),
            action_version: "1.0".into(),
            payload: json!({"source_control_endpoint": endpoint, "block_hashes": hashes}),
        }]
    }

    #[test]
    fn the_envelope_of_a_committed_copy_is_upstreams_byte_for_byte() {
        let mut cluster = Cluster::new(4);
        cluster.add(1, 4).hint("tcp://10.0.0.7:23280");
        cluster.add(2, 1).hint("tcp://b");
        let copy = KvCopy {
            source: worker(1),
            source_endpoint: "tcp://10.0.0.7:23280".into(),
            first_block: 1,
            block_hashes: [9000, 9001, 9002, 9003].map(EngineBlockHash).to_vec(),
        };
        let actions = hints(&kv_fetch(1), &cluster, 2, Some(&copy));
        let hint = dynamo_kv_router::wire::KvHint::numbered("req-7", actions);
        // What upstream's `KvHint::new("req-7", vec![KvHintAction::fetch("a1",
        // KvSourceLocationsPayload { .. })])` serialises to: fields in declaration order, the
        // payload a sorted map, the source's hashes from block 0.
        assert_eq!(
            hint.to_json(),
            r#"{"protocol_version":"0.1","message_id":"req-7","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[9000,9001,9002,9003],"source_control_endpoint":"tcp://10.0.0.7:23280"}}]}"#
        );
    }

    #[test]
    fn a_committed_copy_becomes_one_action() {
        let mut cluster = Cluster::new(6);
        cluster.add(1, 6).hint("tcp://10.0.0.7:23280");
        cluster.add(2, 0).hint("tcp://b");
        let copy = KvCopy {
            source: worker(1),
            source_endpoint: "tcp://10.0.0.7:23280".into(),
            first_block: 0,
            block_hashes: [11, 22, 33].map(EngineBlockHash).to_vec(),
        };
        // A committed copy is sent as committed, even when min_additional_blocks is larger.
        let actions = hints(&kv_fetch(10), &cluster, 2, Some(&copy));
        assert_eq!(
            actions,
            fetch(
                "tcp://10.0.0.7:23280",
                [11, 22, 33].map(EngineBlockHash).to_vec()
            )
        );
        assert_eq!(
            serde_json::to_value(&actions[0]).unwrap(),
            json!({"action_type": "kv.fetch", "action_version": "1.0",
                   "payload": {"source_control_endpoint": "tcp://10.0.0.7:23280",
                               "block_hashes": [11, 22, 33]}})
        );
    }

    #[test]
    fn best_effort_names_the_source_prefix_root_aligned() {
        let mut cluster = Cluster::new(8);
        cluster.add(1, 7).hint("tcp://w1");
        cluster.add(2, 3).hint("tcp://w2");
        cluster.add(3, 5).hint("tcp://w3");
        // w2 lacks blocks 3..7; the payload names w1's blocks 0..7 and w2 fetches the suffix.
        let actions = hints(&kv_fetch(1), &cluster, 2, None);
        assert_eq!(actions, fetch("tcp://w1", cluster.engine_hashes(1, 0..7)));
        // The best source itself fetches from the next best.
        let actions = hints(&kv_fetch(1), &cluster, 1, None);
        assert_eq!(actions, Vec::new(), "w3 holds fewer blocks than w1");
    }

    #[test]
    fn best_effort_obeys_min_additional_blocks() {
        let mut cluster = Cluster::new(8);
        cluster.add(1, 6).hint("tcp://w1");
        cluster.add(2, 2).hint("tcp://w2");
        // w1 holds 4 more blocks than w2.
        assert_eq!(
            hints(&kv_fetch(4), &cluster, 2, None),
            fetch("tcp://w1", cluster.engine_hashes(1, 0..6))
        );
        assert_eq!(hints(&kv_fetch(5), &cluster, 2, None), Vec::new());
        // Equal prefixes add nothing.
        let mut cluster = Cluster::new(8);
        cluster.add(1, 3).hint("tcp://w1");
        cluster.add(2, 3).hint("tcp://w2");
        assert_eq!(hints(&kv_fetch(1), &cluster, 2, None), Vec::new());
    }

    #[test]
    fn unknown_engine_hashes_cut_the_fetch_short() {
        let mut cluster = Cluster::new(8);
        cluster.add(1, 8).hint("tcp://w1");
        cluster.add(2, 0);
        cluster.forget(1, 3);
        assert_eq!(
            hints(&kv_fetch(2), &cluster, 2, None),
            fetch("tcp://w1", cluster.engine_hashes(1, 0..3))
        );
        // Three known blocks are fewer than the four asked for.
        assert_eq!(hints(&kv_fetch(4), &cluster, 2, None), Vec::new());
        // A booked worker that holds the known run already gains nothing.
        let mut cluster = Cluster::new(8);
        cluster.add(1, 8).hint("tcp://w1");
        cluster.add(2, 3);
        cluster.forget(1, 3);
        assert_eq!(hints(&kv_fetch(1), &cluster, 2, None), Vec::new());
    }

    #[test]
    fn only_eligible_peers_are_sources() {
        let mut cluster = Cluster::new(8);
        cluster.add(1, 8); // no router_hint
        cluster.add(3, 8).hint(""); // empty endpoint
        cluster.add(4, 8).hint_without_endpoint(); // no endpoint
        cluster.add(5, 1).hint("tcp://w5");
        cluster.add(2, 0).hint("tcp://w2");
        assert_eq!(
            hints(&kv_fetch(1), &cluster, 2, None),
            fetch("tcp://w5", cluster.engine_hashes(5, 0..1))
        );
        // The booked worker is never its own source, however much it holds.
        let mut cluster = Cluster::new(8);
        cluster.add(1, 8).hint("tcp://w1");
        assert_eq!(hints(&kv_fetch(1), &cluster, 1, None), Vec::new());
    }

    #[test]
    fn same_role_only_candidates_are_sources() {
        // Workers of other roles are never candidates of the booking; with no candidate peer
        // there is no source.
        let mut cluster = Cluster::new(4);
        cluster.add(2, 0).hint("tcp://w2");
        assert_eq!(hints(&kv_fetch(1), &cluster, 2, None), Vec::new());
    }

    #[test]
    fn ties_go_to_the_smaller_worker_id() {
        let mut cluster = Cluster::new(8);
        cluster.add(9, 5).hint("tcp://w9");
        cluster
            .add_worker(WorkerId::new(4, 1), 5)
            .hint("tcp://w4r1");
        cluster
            .add_worker(WorkerId::new(4, 0), 5)
            .hint("tcp://w4r0");
        cluster.add(2, 0).hint("tcp://w2");
        let expected: Vec<EngineBlockHash> = (0..5)
            .map(|i| crate::test_support::engine_hash(WorkerId::new(4, 0), i))
            .collect();
        assert_eq!(
            hints(&kv_fetch(1), &cluster, 2, None),
            fetch("tcp://w4r0", expected)
        );
    }

    #[test]
    fn declares_kv_copy_and_validates_parameters() {
        assert_eq!(kv_fetch(1).commitments(), Commitments::KV_COPY);
        let config: KvFetchConfig = PolicyParameters::empty().deserialize().unwrap();
        assert_eq!(config.min_additional_blocks, 1);
        let error = KvFetch::try_from(KvFetchConfig {
            min_additional_blocks: 0,
        })
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("`min_additional_blocks` must be at least 1"),
            "{error}"
        );

        let error = build_hint_via::<KvFetch, KvFetchConfig>(PolicyParameters::new(
            json!({"min_additional_blocks": -1}),
        ))
        .err()
        .unwrap();
        assert_eq!(error.path(), "min_additional_blocks");
        let error = build_hint_via::<KvFetch, KvFetchConfig>(PolicyParameters::new(
            json!({"min_blocks": 2}),
        ))
        .err()
        .unwrap();
        assert_eq!(error.path(), "min_blocks");
        let constructor = build_hint_via::<KvFetch, KvFetchConfig>(PolicyParameters::new(
            json!({"min_additional_blocks": 4}),
        ))
        .unwrap();
        assert!(constructor.is_shared());
    }
}
