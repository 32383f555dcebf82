//! Replicas as real processes on loopback: three `kv-router serve` replicas and four fake
//! engines; one replica is killed (SIGKILL) under load and restarted: it becomes ready from a
//! peer's dump with the same index, and no request on the survivors fails. Its snapshot then
//! starts a fourth process warm; a truncated snapshot starts one cold, with a clear message.

use kv_router_service::engine_events::engine_event::{BlockStored, EngineEvent, EngineEventBatch};
use kv_router_service::engine_events::engine_publisher::{EnginePublisher, encode_batch};
use kv_router_service::http::loopback_client::LoopbackClient;
use kv_router_service::polling::eventually;
use serde_json::{Value, json};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long a background effect may take before the test fails.
const WAIT: Duration = Duration::from_secs(15);

const BLOCK: usize = 16;
const ENGINES: u64 = 4;

#[path = "serve_process/mod.rs"]
mod serve_process;

/// A replica: a `kv-router serve` process.
type Replica = serve_process::ServeProcess;

fn stored(prompt: &[u32], blocks: usize, base: u64) -> Vec<u8> {
    encode_batch(&EngineEventBatch {
        ts: 0.0,
        events: vec![EngineEvent::BlockStored(BlockStored::positional(
            prompt,
            BLOCK,
            0..blocks,
            base,
        ))],
        data_parallel_rank: None,
    })
}

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| t.wrapping_mul(2_654_435_761) ^ salt)
        .collect()
}

async fn scores(replica: &Replica, prompt: &[u32]) -> Value {
    let mut answer = replica
        .client()
        .await
        .post_json(
            "/overlap_scores",
            &json!({"model_name": "m", "token_ids": prompt}),
        )
        .await
        .expect("overlap scores")
        .json();
    if let Some(workers) = answer["workers"].as_array_mut() {
        workers.sort_by_key(|w| w["worker_id"].as_u64());
    }
    answer
}

async fn add_peer(replica: &Replica, endpoint: &str) {
    let answer = replica
        .client()
        .await
        .post_json("/replica_sync/peers", &json!({"endpoint": endpoint}))
        .await
        .unwrap();
    assert!(
        answer.status == 201 || answer.status == 200,
        "{}",
        answer.text()
    );
}

async fn ready(replica: &Replica) -> bool {
    match LoopbackClient::connect(replica.http).await {
        Ok(mut client) => client.get("/ready").await.is_ok_and(|a| a.status == 200),
        Err(_) => false,
    }
}

fn registration(id: u64, engine: &EnginePublisher) -> Value {
    json!({
        "worker_id": id, "model_name": "m", "routing_group": "default",
        "endpoint": format!("http://127.0.0.1:{}", 9000 + id), "block_size": 16,
        "data_parallel_size": 1,
        "kv_events_endpoint": engine.events_endpoint(),
        "replay_endpoint": engine.replay_endpoint(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_restarts_warm_and_snapshots_restart_the_cluster() {
    let sync = ["--replica-sync-port", "0"];
    let mut replicas = vec![
        Replica::spawn(&sync),
        Replica::spawn(&sync),
        Replica::spawn(&sync),
    ];
    for a in &replicas {
        for b in &replicas {
            if a.http != b.http {
                add_peer(a, b.sync.as_deref().unwrap()).await;
            }
        }
    }
    let mut engines = Vec::new();
    let prompts: Vec<Vec<u32>> = (0..ENGINES)
        .map(|e| tokens(8 * BLOCK, e as u32 + 1))
        .collect();
    for id in 1..=ENGINES {
        let engine = EnginePublisher::bind("127.0.0.1").await.expect("engine");
        for replica in &replicas {
            let answer = replica
                .client()
                .await
                .post_json("/workers", &registration(id, &engine))
                .await
                .unwrap();
            assert_eq!(answer.status, 201, "{}", answer.text());
        }
        engines.push(engine);
    }
    // Published after every replica subscribed (a late subscription replays from the engine).
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, engine) in engines.iter_mut().enumerate() {
        engine
            .publish(stored(&prompts[i], 4 + i, 1000 * (i as u64 + 1)))
            .await
            .unwrap();
    }
    let expected: Vec<Value> = {
        let mut out = Vec::new();
        for prompt in &prompts {
            eventually(WAIT, "the replicas index the engines' blocks", || async {
                let first = scores(&replicas[0], prompt).await;
                let mut same = first["workers"].as_array().is_some_and(|w| {
                    w.iter()
                        .any(|s| s["device_blocks"].as_u64().unwrap_or(0) > 0)
                });
                for replica in &replicas[1..] {
                    same &= scores(replica, prompt).await == first;
                }
                same
            })
            .await;
            out.push(scores(&replicas[0], prompt).await);
        }
        out
    };

    // Load on the two survivors while the third is killed and restarted.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for (r, survivor) in replicas[..2].iter().enumerate() {
        let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
        let mut client = survivor.client().await;
        let prompts = prompts.clone();
        load.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) && n < 2_000 {
                let id = format!("s{r}-{n}");
                let body =
                    json!({"model_name": "m", "selection_id": id, "token_ids": prompts[n % 4]});
                let booked = client.post_json("/select_and_reserve", &body).await;
                let freed = client.delete(&format!("/reservations/{id}")).await;
                match (booked, freed) {
                    (Ok(b), Ok(f)) if b.status == 200 && f.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                n += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut killed = replicas.pop().unwrap();
    killed.child.kill().expect("SIGKILL");
    let _ = killed.child.wait();
    let dead_sync = killed.sync.clone().unwrap();
    drop(killed);

    let dir = std::env::temp_dir().join(format!("kv-router-replicas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let snapshot = dir.join("router.snapshot");
    let snapshot_arg = snapshot.to_str().unwrap().to_owned();
    let peer_http = format!("http://{}", replicas[0].http);
    let peer_a = replicas[0].sync.clone().unwrap();
    let peer_b = replicas[1].sync.clone().unwrap();
    let restarted = Replica::spawn(&[
        "--replica-sync-port",
        "0",
        "--peer",
        &peer_http,
        "--peer",
        &peer_a,
        "--peer",
        &peer_b,
        "--snapshot",
        &snapshot_arg,
        "--snapshot-interval",
        "1",
    ]);
    for survivor in &replicas {
        let removed = survivor
            .client()
            .await
            .send(
                "DELETE",
                "/replica_sync/peers",
                Some(json!({"endpoint": dead_sync}).to_string().as_bytes()),
            )
            .await
            .unwrap();
        assert_eq!(removed.status, 200, "{}", removed.text());
        add_peer(survivor, restarted.sync.as_deref().unwrap()).await;
    }
    eventually(WAIT, "the restarted replica is ready", || ready(&restarted)).await;
    // The line is read from the child's stdout on another thread, so it may trail `/ready`.
    eventually(WAIT, "the warm start line is printed", || async {
        restarted.printed("warm start from http://").is_some()
    })
    .await;
    let warm = restarted
        .printed("warm start from http://")
        .expect("a warm start line");
    assert!(warm.contains(&format!("{} workers", ENGINES)), "{warm}");
    for (prompt, expected) in prompts.iter().zip(&expected) {
        assert_eq!(&scores(&restarted, prompt).await, expected);
    }
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed on the survivors"
    );
    assert!(ok.load(Ordering::Relaxed) > 0);

    // The restarted replica's snapshot starts a fourth process warm, without any peer.
    eventually(WAIT, "a snapshot is written", || async {
        snapshot.exists()
    })
    .await;
    let from_snapshot = Replica::spawn(&["--snapshot", &snapshot_arg]);
    eventually(WAIT, "the snapshot replica is ready", || {
        ready(&from_snapshot)
    })
    .await;
    eventually(WAIT, "the snapshot start line is printed", || async {
        from_snapshot.printed("warm start from snapshot").is_some()
    })
    .await;
    let line = from_snapshot
        .printed("warm start from snapshot")
        .expect("a snapshot start line");
    assert!(line.contains(&format!("{} workers", ENGINES)), "{line}");
    for (prompt, expected) in prompts.iter().zip(&expected) {
        assert_eq!(&scores(&from_snapshot, prompt).await, expected);
    }
    drop(restarted);
    // SIGTERM (as Ctrl-C) stops it gracefully, writing the snapshot once more.
    let interrupted = Command::new("kill")
        .args(["-TERM", &from_snapshot.child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    eventually(WAIT, "the final snapshot is written", || async {
        from_snapshot.printed("snapshot written to").is_some()
    })
    .await;
    drop(from_snapshot);

    // A truncated snapshot is reported and ignored: a cold start.
    let bytes = std::fs::read(&snapshot).unwrap();
    std::fs::write(&snapshot, &bytes[..bytes.len() / 2]).unwrap();
    let cold = Replica::spawn(&["--snapshot", &snapshot_arg]);
    eventually(WAIT, "the cold start is printed", || async {
        cold.printed("cold start").is_some()
    })
    .await;
    let report = cold
        .printed("corrupt or truncated")
        .expect("the snapshot problem is printed");
    assert!(report.contains("ignoring it"), "{report}");
    for prompt in &prompts {
        let cold_scores = scores(&cold, prompt).await;
        assert!(
            cold_scores["workers"].as_array().is_none_or(Vec::is_empty),
            "{cold_scores}"
        );
    }
    drop(cold);
    let _ = std::fs::remove_dir_all(&dir);
}
