//! Reference data computed by upstream NVIDIA Dynamo `dynamo-kv-router` 1.6.1, read from
//! `../shared/vectors` beside the repository (never copied into it): every block-hash case, and
//! upstream's own `RouterEvent` JSON fed to a router. Where the directory is absent the tests
//! are skipped visibly (a `SKIPPED:` line that `.ci/run` counts); under CI (`CI=true`) that is
//! a failure.

use dynamo_kv_router::kv::{
    EventOutcome, LocalBlockHash, RequestIdentity, RouterEvent, SequenceHash, local_block_hashes,
    sequence_hashes, sequence_hashes_for_request, sequence_hashes_for_tokens,
};
use dynamo_kv_router::router::{
    Role, Router, RouterMode, RouterOptions, RouterSetup, WorkerCapabilities, WorkerId, WorkerInfo,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `../shared/vectors/<name>` relative to the repository root, if it exists; otherwise `test`
/// is reported as skipped (or fails under CI).
fn vector_file(test: &str, name: &str) -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/vectors")
        .join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) => {
            test_skip::skip_unless_ci(
                test,
                &format!(
                    "the upstream reference vectors are not beside the repository ({}: {error})",
                    path.display()
                ),
            );
            None
        }
    }
}

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    tokens: Vec<u32>,
    block_size: u32,
    #[serde(default)]
    lora: Option<String>,
    #[serde(default)]
    ns: Option<String>,
    #[serde(default)]
    mm: Vec<Vec<u64>>,
    #[serde(default)]
    eagle: bool,
    local_block_hashes: Vec<u64>,
    sequence_hashes: Vec<u64>,
}

#[test]
fn every_block_hash_case_of_upstream_is_reproduced() {
    let Some(text) = vector_file(
        "every_block_hash_case_of_upstream_is_reproduced",
        "block-hashes.json",
    ) else {
        return;
    };
    let vectors: Vectors = serde_json::from_str(&text).expect("block-hashes.json parses");
    assert!(vectors.cases.len() >= 7, "expected every upstream case");
    for case in &vectors.cases {
        let identity = RequestIdentity {
            lora_name: case.lora.clone(),
            cache_namespace: case.ns.clone(),
            block_mm_hashes: case.mm.clone(),
            eagle: case.eagle,
        };
        let local = local_block_hashes(&case.tokens, case.block_size, &identity);
        let expected_local: Vec<LocalBlockHash> = case
            .local_block_hashes
            .iter()
            .copied()
            .map(LocalBlockHash)
            .collect();
        assert_eq!(local, expected_local, "local hashes of {:?}", case.name);
        let expected_seq: Vec<SequenceHash> = case
            .sequence_hashes
            .iter()
            .copied()
            .map(SequenceHash)
            .collect();
        assert_eq!(
            sequence_hashes(&local),
            expected_seq,
            "chain of {:?}",
            case.name
        );
        assert_eq!(
            sequence_hashes_for_request(&case.tokens, case.block_size, &identity),
            expected_seq,
            "one-pass hashes of {:?}",
            case.name
        );
        if identity.is_plain() {
            assert_eq!(
                sequence_hashes_for_tokens(&case.tokens, case.block_size),
                expected_seq,
                "token path of {:?}",
                case.name
            );
        }
    }
}

fn router_with_worker(worker: WorkerId) -> Router {
    let setup = RouterSetup {
        router_mode: RouterMode::Kv,
        block_size: 16,
        roles: BTreeMap::new(),
    };
    let router = Router::new(setup, RouterOptions::default());
    let info = WorkerInfo::new(worker, Role::Aggregated, WorkerCapabilities::none());
    router.register_worker(info).expect("registered");
    router
}

#[test]
fn upstream_router_events_give_the_documented_prefixes() {
    let Some(text) = vector_file(
        "upstream_router_events_give_the_documented_prefixes",
        "upstream-router-events.jsonl",
    ) else {
        return;
    };
    let worker = WorkerId::new(7, 1);
    let router = router_with_worker(worker);
    let tokens: Vec<u32> = (0..64).collect();
    let hashes = sequence_hashes_for_tokens(&tokens, 16);
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 4);
    let mut prefixes = Vec::new();
    for line in &lines {
        assert_eq!(
            router.apply_event_json(line),
            EventOutcome::Applied,
            "{line}"
        );
        prefixes.push(router.cached_prefix(worker, &hashes));
    }
    assert_eq!(prefixes, [2, 4, 3, 0]);
    // Each line reads into the typed event and writes back byte for byte.
    for line in &lines {
        let event = RouterEvent::from_json(line).expect("upstream JSON reads");
        assert_eq!(event.worker(), worker);
        assert_eq!(event.to_json(), *line);
    }
}

#[test]
fn upstream_router_events_read_with_fields_a_newer_upstream_adds() {
    let Some(text) = vector_file(
        "upstream_router_events_read_with_fields_a_newer_upstream_adds",
        "upstream-router-events.jsonl",
    ) else {
        return;
    };
    let worker = WorkerId::new(7, 1);
    let router = router_with_worker(worker);
    let hashes = sequence_hashes_for_tokens(&(0..64).collect::<Vec<u32>>(), 16);
    for line in text.lines().filter(|line| !line.trim().is_empty()).take(2) {
        let mut value: serde_json::Value = serde_json::from_str(line).expect("JSON");
        value["future_top_level"] = serde_json::json!({"x": 1});
        value["event"]["future_in_event"] = serde_json::json!(true);
        if let Some(stored) = value["event"]["data"].get_mut("stored") {
            stored["future_in_store"] = serde_json::json!([1, 2]);
        }
        assert_eq!(
            router.apply_event_json(&value.to_string()),
            EventOutcome::Applied
        );
    }
    assert_eq!(router.cached_prefix(worker, &hashes), 4);
}
