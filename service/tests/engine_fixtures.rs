//! Golden msgpack fixtures from `service/scripts/engine_fixtures.py` (the engines' structs
//! declared field for field with msgspec) decode to what the script says the router must see.

use kv_router_service::engine_events::engine_event::{EngineEvent, EngineEventBatch, SkipReason};
use kv_router_service::engine_events::event_batch_reader::read_event_batch;
use kv_router_service::engine_events::msgpack_batch::{bytes_hash, decode_event_batch};
use serde_json::{Value, json};
use std::path::PathBuf;

fn fixture(name: &str) -> (Vec<u8>, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let payload = std::fs::read(dir.join(format!("{name}.msgpack"))).expect("fixture");
    let expected =
        std::fs::read_to_string(dir.join(format!("{name}.expected.json"))).expect("expected json");
    (payload, serde_json::from_str(&expected).expect("json"))
}

fn as_json(batch: &EngineEventBatch) -> Value {
    let events: Vec<Value> = batch
        .events
        .iter()
        .map(|event| match event {
            EngineEvent::BlockStored(stored) => json!({
                "type": "BlockStored",
                "block_hashes": stored.block_hashes,
                "parent_block_hash": stored.parent_block_hash,
                "token_ids": stored.token_ids,
                "block_size": stored.block_size,
                "lora_id": stored.lora_id,
                "medium": stored.medium,
                "lora_name": stored.lora_name,
                "cache_salt": stored.cache_salt,
                "group_idx": stored.group_idx,
                "kv_cache_spec_kind": stored.kv_cache_spec_kind,
            }),
            EngineEvent::BlockRemoved(removed) => json!({
                "type": "BlockRemoved",
                "block_hashes": removed.block_hashes,
                "medium": removed.medium,
                "group_idx": removed.group_idx,
                "kv_cache_spec_kind": removed.kv_cache_spec_kind,
            }),
            EngineEvent::AllBlocksCleared => json!({"type": "AllBlocksCleared"}),
            EngineEvent::Ignored => json!({"type": "Ignored"}),
        })
        .collect();
    json!({"ts": batch.ts, "data_parallel_rank": batch.data_parallel_rank, "events": events})
}

fn decoded(name: &str) -> EngineEventBatch {
    let (payload, expected) = fixture(name);
    let batch = decode_event_batch(&payload).unwrap_or_else(|error| panic!("{name}: {error}"));
    assert_eq!(as_json(&batch), expected, "{name}");
    // The direct reader (what the listener uses) reads every fixture to the same batch.
    assert_eq!(read_event_batch(&payload), Ok(batch.clone()), "{name}");
    batch
}

#[test]
fn vllm_positional_layout_with_dp_rank_lora_and_cpu_medium() {
    let batch = decoded("vllm_array");
    let skips: Vec<_> = batch.events.iter().map(EngineEvent::skip_reason).collect();
    assert_eq!(
        skips,
        vec![
            None,
            None,
            Some(SkipReason::NonGpuMedium),
            None,
            Some(SkipReason::NonGpuMedium),
            None
        ]
    );
}

#[test]
fn vllm_map_layout() {
    decoded("vllm_map");
}

#[test]
fn vllm_byte_string_hashes_use_their_last_eight_bytes() {
    decoded("vllm_bytes");
    assert_eq!(
        bytes_hash(&[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        0x0203_0405_0607_0809
    );
    assert_eq!(bytes_hash(&[0xAB]), 0xAB);
}

#[test]
fn vllm_hybrid_groups_other_than_main_attention_are_skipped() {
    let batch = decoded("vllm_hybrid");
    let skips: Vec<_> = batch.events.iter().map(EngineEvent::skip_reason).collect();
    assert_eq!(
        skips,
        vec![
            None,
            Some(SkipReason::NonMainAttention),
            Some(SkipReason::NonMainAttention)
        ]
    );
}

#[test]
fn sglang_short_positional_layout_with_signed_hashes() {
    decoded("sglang");
}

#[test]
fn malformed_payloads_are_errors_naming_the_problem() {
    let cases: [(&[u8], &str); 4] = [
        (b"", "not msgpack"),
        (&[0x2a], "expected an array"),
        // [1.0, [["Exploded"]]]
        (
            &[
                0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xa8, b'E', b'x', b'p', b'l',
                b'o', b'd', b'e', b'd',
            ],
            "unknown event type `Exploded`",
        ),
        // [1.0, [["BlockStored", "x"]]]
        (
            &[
                0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xab, b'B', b'l', b'o', b'c',
                b'k', b'S', b't', b'o', b'r', b'e', b'd', 0xa1, b'x',
            ],
            "block_hashes: expected an array",
        ),
    ];
    for (payload, expected) in cases {
        let error = decode_event_batch(payload).expect_err("malformed");
        assert_eq!(read_event_batch(payload), Err(error.clone()));
        assert!(
            error.to_string().contains(expected),
            "{error} vs {expected}"
        );
    }
}
