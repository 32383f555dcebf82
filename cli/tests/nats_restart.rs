//! `kv-router serve --nats … --snapshot …` as a real process against a real `nats-server`:
//! it reads the engines' events, checkpoints (acknowledging what each checkpoint holds), is
//! killed (SIGKILL) with events read but not checkpointed, and more events arrive while it is
//! down. Started again with the same snapshot and consumer, it resumes after the checkpoint's
//! stream sequence (where it acknowledged), not from the stream's start, and ends with every
//! block counted once. Without `--nats-consumer`, `--snapshot` with `--nats` is refused.

#[path = "../../service/tests/common/nats_server.rs"]
mod nats_server;

use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes};
use dynamo_kv_router::router::WorkerId;
use kv_router_service::nats::NatsKvPublisher;
use kv_router_service::polling::eventually;
use nats_server::NatsServer;
use serde_json::json;
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const WORKERS: u64 = 2;
const BLOCKS: usize = 4;

#[path = "serve_process/mod.rs"]
mod serve_process;

/// The router: a `kv-router serve` process.
type Router = serve_process::ServeProcess;

/// What the test reads off a router.
trait Observed {
    async fn metric(&self, name: &str) -> Option<u64>;
    async fn overlap(&self, prompt: &[u32]) -> Vec<u64>;
}

impl Observed for Router {
    /// A counter or gauge of `/metrics`.
    async fn metric(&self, name: &str) -> Option<u64> {
        let text = self.client().await.get("/metrics").await.ok()?.text();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    /// The blocks of `prompt` each worker caches, by `/overlap_scores`.
    async fn overlap(&self, prompt: &[u32]) -> Vec<u64> {
        let answer = self
            .client()
            .await
            .post_json(
                "/overlap_scores",
                &json!({"model_name": "m", "token_ids": prompt}),
            )
            .await
            .expect("overlap scores")
            .json();
        let mut scores: Vec<(u64, u64)> = answer["workers"]
            .as_array()
            .map(|workers| {
                workers
                    .iter()
                    .map(|w| {
                        (
                            w["worker_id"].as_u64().unwrap_or(0),
                            w["device_blocks"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        scores.sort_unstable();
        scores.into_iter().map(|(_, blocks)| blocks).collect()
    }
}

fn tokens(round: u64, worker: u64) -> Vec<u32> {
    let salt = ((worker as u32) << 20) | round as u32;
    (0..(16 * BLOCKS) as u32)
        .map(|t| t.wrapping_mul(2_654_435_761) ^ salt)
        .collect()
}

/// Envelope `round`: every worker stores a prompt of its own (event id = round).
async fn publish(publisher: &NatsKvPublisher, rounds: std::ops::Range<u64>) {
    for round in rounds {
        let events: Vec<RouterEvent> = (1..=WORKERS)
            .map(|worker| {
                let local = block_hashes(&tokens(round, worker), 16);
                let stored = (0..BLOCKS).map(|i| {
                    let engine = EngineBlockHash((worker << 48) | (round << 16) | i as u64);
                    (engine, local[i])
                });
                RouterEvent::new(
                    WorkerId::new(worker, 0),
                    round,
                    KvCacheEventData::stored(None, stored),
                )
            })
            .collect();
        publisher.publish(&events).await.expect("publish");
    }
}

/// Whether every worker's prompts of `rounds` are cached whole on it, and only on it.
async fn holds(router: &Router, rounds: std::ops::Range<u64>) -> bool {
    for round in rounds {
        for worker in 1..=WORKERS {
            let mut expected = vec![0; WORKERS as usize];
            expected[worker as usize - 1] = BLOCKS as u64;
            if router.overlap(&tokens(round, worker)).await != expected {
                return false;
            }
        }
    }
    true
}

async fn register(router: &Router) {
    for id in 1..=WORKERS {
        let body = json!({
            "worker_id": id, "model_name": "m", "routing_group": "default",
            "endpoint": format!("http://127.0.0.1:{}", 9000 + id), "block_size": 16,
            "data_parallel_size": 1,
        });
        let answer = router
            .client()
            .await
            .post_json("/workers", &body)
            .await
            .unwrap();
        assert_eq!(answer.status, 201, "{}", answer.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_router_resumes_from_its_last_checkpoint_acknowledgement() {
    let test = "nats_restart::a_killed_router_resumes_from_its_last_checkpoint_acknowledgement";
    let Some(server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("kv-router-nats-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let snapshot = dir.join("router.snap");
    let snapshot_arg = snapshot.to_str().expect("a UTF-8 path").to_owned();
    let args = [
        "--nats",
        url.as_str(),
        "--nats-consumer",
        "router-a",
        "--snapshot",
        snapshot_arg.as_str(),
        "--snapshot-interval",
        "1",
    ];
    let publisher = NatsKvPublisher::connect(&url, "dynamo", "backend", "generate", 9)
        .await
        .expect("publisher");

    let first = Router::spawn(&args);
    register(&first).await;
    publish(&publisher, 0..20).await;
    eventually(WAIT, "the first router holding 20 envelopes", || {
        holds(&first, 0..20)
    })
    .await;
    // A checkpoint holds them and acknowledged them.
    eventually(WAIT, "a checkpoint acknowledging sequence 20", || async {
        first.metric("kv_router_nats_acked_stream_sequence").await == Some(20)
    })
    .await;
    // Read and applied, then the process dies before a checkpoint can hold them.
    publish(&publisher, 20..30).await;
    eventually(WAIT, "the first router holding 30 envelopes", || {
        holds(&first, 20..30)
    })
    .await;
    drop(first);
    let position = kv_router_service::selection::snapshot::RouterState::read(&snapshot)
        .expect("a whole snapshot")
        .and_then(|state| state.event_plane)
        .expect("the snapshot records its stream position");
    assert!((20..=30).contains(&position.stream_seq), "{position:?}");

    publish(&publisher, 30..40).await;
    let second = Router::spawn(&args);
    eventually(
        WAIT,
        "the restarted router saying where it reads from",
        || async { second.printed("NATS consumer router-a:").is_some() },
    )
    .await;
    let line = second.printed("NATS consumer router-a:").unwrap();
    assert!(
        line.contains(&format!(
            "resuming the stream after sequence {}",
            position.stream_seq
        )),
        "{line}"
    );
    eventually(
        WAIT,
        "the restarted router holding all 40 envelopes",
        || holds(&second, 0..40),
    )
    .await;
    // Only what came after the checkpoint was read again, and nothing was applied twice.
    let read = second.metric("kv_router_nats_messages_total").await;
    assert_eq!(read, Some(40 - position.stream_seq));
    assert_eq!(
        second.metric("kv_router_nats_duplicate_events_total").await,
        Some(0)
    );
    assert_eq!(second.metric("kv_router_nats_gaps_total").await, Some(0));
    drop(second);

    // A snapshot with NATS needs a consumer name that survives the restart.
    let output = Command::new(env!("CARGO_BIN_EXE_kv-router"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--nats",
            &url,
        ])
        .args(["--snapshot", &snapshot_arg])
        .output()
        .expect("the kv-router binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--nats-consumer"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
