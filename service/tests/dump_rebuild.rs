//! `GET /dump` in upstream's form rebuilds the index: a service whose workers share prefixes,
//! branch off them, report blocks under engine ids of their own or hold a block whose parent
//! they evicted is copied into fresh services through its snapshot file and through
//! `GET /workers` + `GET /dump`, and every worker's overlap is the same in all three.

mod common;

use common::*;
use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, LocalBlockHash, RouterEvent, block_hashes, sequence_hashes,
};
use dynamo_kv_router::router::WorkerId;
use kv_router_service::selection::snapshot::RouterState;
use kv_router_service::worker_record::PartitionKey;
use serde_json::json;
use std::path::Path;

const BLOCK: usize = 16;

/// The blocks of `prompt`: (local hash, sequence hash).
fn blocks(prompt: &[u32]) -> Vec<(LocalBlockHash, u64)> {
    let local = block_hashes(prompt, BLOCK as u32);
    let seq = sequence_hashes(&local);
    local
        .into_iter()
        .zip(seq.into_iter().map(|s| s.0))
        .collect()
}

/// Worker `worker`'s engine id for the block of sequence hash `seq`: shared by default, its
/// own when `own`.
fn engine(worker: u64, seq: u64, own: bool) -> EngineBlockHash {
    EngineBlockHash(if own {
        seq.rotate_left(7) ^ worker
    } else {
        seq ^ 0xABCD
    })
}

/// A `stored` event of `prompt`'s blocks `range` on `worker`, chained to the block before.
fn stored(
    worker: u64,
    id: u64,
    prompt: &[u32],
    range: std::ops::Range<usize>,
    own: bool,
) -> RouterEvent {
    let blocks = blocks(prompt);
    let parent = range
        .start
        .checked_sub(1)
        .map(|p| engine(worker, blocks[p].1, own));
    let data = KvCacheEventData::stored(
        parent,
        blocks[range]
            .iter()
            .map(|(local, seq)| (engine(worker, *seq, own), *local)),
    );
    RouterEvent::new(WorkerId::new(worker, 0), id, data)
}

/// Every worker's device blocks for `prompt` at `service`.
async fn overlaps(service: &TestService, prompt: &[u32]) -> Vec<u64> {
    let mut client = service.client().await;
    let mut out = Vec::new();
    for worker in 1..=4 {
        out.push(device_blocks(&mut client, prompt, worker).await);
    }
    out
}

#[tokio::test]
async fn the_dump_rebuilds_every_workers_overlap_through_a_snapshot_and_a_peer() {
    let source = start(DEFAULT_YAML).await;
    let mut client = source.client().await;
    register_workers(&mut client, 1..=4).await;
    let trunk = tokens(8 * BLOCK, 1);
    let mut branch = trunk[..4 * BLOCK].to_vec();
    branch.extend(tokens(4 * BLOCK, 2));
    let mut own_branch = trunk[..2 * BLOCK].to_vec();
    own_branch.extend(tokens(3 * BLOCK, 3));
    let key = PartitionKey {
        model_name: "m".to_owned(),
        routing_group: "default".to_owned(),
    };
    let router = &source.service.partition(&key).expect("partition m").router;
    let events = [
        // Worker 1: the trunk. Worker 2: its first half and a branch.
        stored(1, 0, &trunk, 0..8, false),
        stored(2, 0, &trunk, 0..4, false),
        stored(2, 1, &branch, 4..8, false),
        // Worker 3: six trunk blocks and a branch off the second, under ids of its own.
        stored(3, 0, &trunk, 0..6, true),
        stored(3, 1, &own_branch, 2..5, true),
        // Worker 4: three trunk blocks, then it evicts the second (the third is unreachable).
        stored(4, 0, &trunk, 0..3, false),
        RouterEvent::new(
            WorkerId::new(4, 0),
            1,
            KvCacheEventData::removed([engine(4, blocks(&trunk)[1].1, false)]),
        ),
    ];
    for event in &events {
        assert_eq!(
            router.apply_event(event),
            dynamo_kv_router::router::EventOutcome::Applied
        );
    }

    // The dump is upstream's form: worker 1's trunk is one event of local hashes from the root.
    let dump = client.get("/dump").await.expect("dump").json();
    let first = &dump["m:default"]["events"][0];
    assert_eq!(first["worker_id"], json!(1));
    assert_eq!(first["event"]["event_id"], json!(0));
    assert_eq!(first["event"]["data"]["stored"]["parent_hash"], json!(null));
    let trunk_blocks = blocks(&trunk);
    let written = first["event"]["data"]["stored"]["blocks"]
        .as_array()
        .expect("blocks");
    assert_eq!(written.len(), 8);
    for ((local, seq), block) in trunk_blocks.iter().zip(written) {
        assert_eq!(block["tokens_hash"], json!(local.0));
        assert_eq!(block["block_hash"], json!(engine(1, *seq, false).0));
    }

    // Through the snapshot file, and from the source as a peer.
    let dir = std::env::temp_dir().join(format!("kv-router-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("snapshot");
    RouterState::capture(&source.service)
        .expect("capture the state")
        .write(&path)
        .expect("write the snapshot");
    let from_snapshot = start(DEFAULT_YAML).await;
    let state = RouterState::read(Path::new(&path))
        .expect("read the snapshot")
        .expect("a snapshot");
    let restored = state.apply(&from_snapshot.service).expect("apply");
    assert_eq!(restored.workers, 4);
    // Every reachable membership: 8 + 8 + 9 + 1 (worker 4's third block is unreachable).
    assert_eq!(restored.blocks, 8 + 8 + 9 + 1);
    std::fs::remove_dir_all(&dir).ok();

    let from_peer = start(DEFAULT_YAML).await;
    let workers = client.get("/workers").await.expect("workers");
    let dump = client.get("/dump").await.expect("dump");
    let state = RouterState::from_answers(&workers.body, &dump.body).expect("answers");
    state.apply(&from_peer.service).expect("apply");

    for prompt in [&trunk, &branch, &own_branch, &tokens(4 * BLOCK, 9)] {
        let expected = overlaps(&source, prompt).await;
        assert_eq!(overlaps(&from_snapshot, prompt).await, expected);
        assert_eq!(overlaps(&from_peer, prompt).await, expected);
    }
    assert_eq!(overlaps(&source, &trunk).await, vec![8, 4, 6, 1]);
    assert_eq!(overlaps(&source, &own_branch).await, vec![2, 2, 5, 1]);
}
