//! Router replicas sync their bookings over a real `nats-server` (127.0.0.1, JetStream on a
//! temp dir) without any `--peer`: a replica joins by subscribing and asking the others for
//! their workers and bookings, and reports `/ready` only after. Three replicas agree on
//! `/loads` and `/overlap_scores` after bookings on each; a replica killed mid-stream and
//! started again (bookings going on meanwhile) rejoins and agrees, with no booking counted
//! twice, and the bookings of the killed process held once everywhere.
//!
//! Needs `nats-server` on PATH (or `KV_ROUTER_NATS_SERVER`); without it the tests print a
//! `SKIPPED:` line (and fail under CI, whose `.ci/run` installs it).

mod common;
#[path = "common/nats_server.rs"]
mod nats_server;

use common::*;
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes};
use dynamo_kv_router::router::WorkerId;
use kv_router_service::nats::replica_sync::NatsJoin;
use kv_router_service::nats::{
    NatsIngress, NatsKvPublisher, NatsOptions, NatsReplicaOptions, NatsReplicaSync,
};
use kv_router_service::worker_record::PartitionKey;
use nats_server::NatsServer;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const WORKERS: u64 = 4;

struct Replica {
    service: TestService,
    sync: Arc<NatsReplicaSync>,
    join: NatsJoin,
    _ingress: Arc<NatsIngress>,
}

impl Replica {
    fn peer_bookings(&self) -> u64 {
        self.service
            .service
            .partition(&PartitionKey {
                model_name: "m".to_owned(),
                routing_group: "default".to_owned(),
            })
            .map_or(0, |partition| partition.router.peer_bookings())
    }
}

/// A replica reading the KV events through consumer `name`; `register` registers the
/// workers itself (the first replica), otherwise it learns them by joining.
async fn replica(url: &str, name: &str, register: bool) -> Replica {
    let mut options = NatsOptions::new(url, name);
    options.ack_wait = Duration::from_secs(1);
    options.retry_pause = Duration::from_millis(50);
    let ingress = NatsIngress::start(options).await.expect("NATS ingress");
    let service = start_with(KVCR_YAML, Arc::clone(&ingress) as _).await;
    let mut sync_options = NatsReplicaOptions::new(url);
    sync_options.first_answer_wait = Duration::from_millis(500);
    sync_options.catch_up_limit = WAIT;
    let sync = NatsReplicaSync::start(&service.service, &sync_options)
        .await
        .expect("booking sync");
    let mut client = service.client().await;
    if register {
        register_workers(&mut client, 1..=WORKERS).await;
    }
    assert_eq!(
        client.get("/ready").await.expect("ready").status,
        503,
        "not ready before joining"
    );
    let join = sync.warm_start(Some(&ingress)).await;
    eprintln!("{name}: {join}");
    assert_eq!(join.stream_caught_up, Some(true), "{join}");
    if !register {
        assert_eq!(join.workers, WORKERS as usize, "{join}");
    }
    assert_eq!(client.get("/ready").await.expect("ready").status, 200);
    Replica {
        service,
        sync,
        join,
        _ingress: ingress,
    }
}

async fn wait_until_async<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check().await
}

async fn loads(replica: &Replica) -> Value {
    let mut client = replica.service.client().await;
    client.get("/loads").await.expect("loads").json()
}

async fn scores(replica: &Replica, prompt: &[u32]) -> Value {
    let mut client = replica.service.client().await;
    let mut answer = client
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

async fn all_loads_agree(replicas: &[&Replica]) -> bool {
    let mut seen = Vec::new();
    for replica in replicas {
        seen.push(loads(replica).await);
    }
    seen.windows(2).all(|pair| pair[0] == pair[1])
}

fn prompt(n: u64) -> Vec<u32> {
    tokens(16 * (4 + (n % 5) as usize), (n as u32 % 6) << 8)
}

async fn book(replica: &Replica, id: &str, n: u64) {
    let mut client = replica.service.client().await;
    let answer = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "m", "selection_id": id, "token_ids": prompt(n)}),
        )
        .await
        .expect("book");
    expect_status(&answer, 200);
}

async fn prefill_complete(replica: &Replica, id: &str) {
    let mut client = replica.service.client().await;
    let answer = client
        .post_json(&format!("/reservations/{id}/prefill_complete"), &json!({}))
        .await
        .expect("prefill complete");
    expect_status(&answer, 200);
}

async fn free(replica: &Replica, id: &str) {
    let mut client = replica.service.client().await;
    release(&mut client, id).await;
}

/// Some cached prompts on the engines, through the event plane.
async fn publish_cache(url: &str) {
    for worker in 1..=WORKERS {
        let publisher =
            NatsKvPublisher::connect(url, "dynamo", "backend", "generate", 500 + worker)
                .await
                .expect("publisher");
        let cached = prompt(worker);
        let local = block_hashes(&cached, 16);
        let stored = local
            .iter()
            .enumerate()
            .map(|(i, hash)| (EngineBlockHash((worker << 32) | i as u64 | 1 << 63), *hash));
        let event = RouterEvent::new(
            WorkerId::new(worker, 0),
            0,
            KvCacheEventData::stored(None, stored),
        );
        publisher.publish(&[event]).await.expect("publish");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_agree_on_loads_and_overlap_scores() {
    let test = "nats_replicas::three_replicas_agree_on_loads_and_overlap_scores";
    let Some(server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let a = replica(&url, "sync-a", true).await;
    publish_cache(&url).await;
    let b = replica(&url, "sync-b", false).await;
    let c = replica(&url, "sync-c", false).await;
    let replicas = [&a, &b, &c];
    let mut live = Vec::new();
    for n in 0..30u64 {
        let owner = replicas[n as usize % 3];
        let id = format!("r{n}");
        book(owner, &id, n).await;
        if n % 4 == 1 {
            prefill_complete(owner, &id).await;
        }
        if n % 3 == 2 {
            free(owner, &id).await;
        } else {
            live.push((n as usize % 3, id));
        }
    }
    let agreed = wait_until_async(WAIT, || all_loads_agree(&replicas)).await;
    assert!(agreed, "{:?}", [loads(&a).await, loads(&b).await]);
    for (i, replica) in replicas.iter().enumerate() {
        let others = live.iter().filter(|(owner, _)| *owner != i).count() as u64;
        assert_eq!(replica.peer_bookings(), others, "replica {i}");
        assert_eq!(
            replica
                .sync
                .stats()
                .garbage
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
    }
    for n in 1..=WORKERS {
        let first = scores(&a, &prompt(n)).await;
        assert_eq!(scores(&b, &prompt(n)).await, first);
        assert_eq!(scores(&c, &prompt(n)).await, first);
    }
    for (owner, id) in &live {
        free(replicas[*owner], id).await;
    }
    let drained = wait_until_async(WAIT, || async {
        replicas.iter().all(|replica| replica.peer_bookings() == 0)
    })
    .await;
    assert!(drained, "every free reached every replica");
    let mut client = a.service.client().await;
    assert_all_loads_zero(&mut client).await;
    assert!(all_loads_agree(&replicas).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_stream_rejoins_without_double_counting() {
    let test = "nats_replicas::a_replica_killed_mid_stream_rejoins_without_double_counting";
    let Some(server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let a = Arc::new(replica(&url, "kill-a", true).await);
    publish_cache(&url).await;
    let b = Arc::new(replica(&url, "kill-b", false).await);
    let c = replica(&url, "kill-c", false).await;
    // Bookings on all three; c's live ones die with it.
    let mut live_ab = Vec::new();
    let mut live_c = 0u64;
    for n in 0..24u64 {
        let id = format!("k{n}");
        match n % 3 {
            0 => {
                book(&a, &id, n).await;
                live_ab.push((0, id));
            }
            1 => {
                book(&b, &id, n).await;
                live_ab.push((1, id));
            }
            _ => {
                book(&c, &id, n).await;
                if n % 2 == 0 {
                    free(&c, &id).await;
                } else {
                    live_c += 1;
                }
            }
        }
    }
    {
        let before = [a.as_ref(), b.as_ref(), &c];
        let agreed = wait_until_async(WAIT, || all_loads_agree(&before)).await;
        assert!(agreed, "the three agree before the kill");
    }
    drop(c);
    // Bookings go on while c is down and while its new process joins.
    let traffic = {
        let (a, b) = (Arc::clone(&a), Arc::clone(&b));
        tokio::spawn(async move {
            let mut live = Vec::new();
            for n in 100..160u64 {
                let (owner, replica) = if n % 2 == 0 { (0, &a) } else { (1, &b) };
                let id = format!("k{n}");
                book(replica, &id, n).await;
                if n % 5 == 0 {
                    prefill_complete(replica, &id).await;
                }
                if n % 3 == 0 {
                    free(replica, &id).await;
                } else {
                    live.push((owner, id));
                }
                // Spread over the new process's join.
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            live
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let c = replica(&url, "kill-c", false).await;
    let reflected = c
        .sync
        .sync_stats()
        .reflected_skipped
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        c.join.held_applied as u64 + reflected > 0,
        "bookings went on during the join: {}",
        c.join
    );
    live_ab.extend(traffic.await.expect("traffic"));
    for n in 200..210u64 {
        let id = format!("k{n}");
        book(&c, &id, n).await;
    }
    let replicas = [a.as_ref(), b.as_ref(), &c];
    let agreed = wait_until_async(WAIT, || all_loads_agree(&replicas)).await;
    assert!(
        agreed,
        "{}\n{}\n{}",
        loads(&a).await,
        loads(&b).await,
        loads(&c).await
    );
    // Each booking counted once: every replica holds the others' live ones and the killed
    // process's, exactly.
    let live_a = live_ab.iter().filter(|(owner, _)| *owner == 0).count() as u64;
    let live_b = live_ab.len() as u64 - live_a;
    let live_new_c = 10;
    assert_eq!(a.peer_bookings(), live_b + live_c + live_new_c);
    assert_eq!(b.peer_bookings(), live_a + live_c + live_new_c);
    assert_eq!(c.peer_bookings(), live_a + live_b + live_c);
    // Free every live booking: only the killed process's remain, alike everywhere (until
    // their TTL).
    for (owner, id) in &live_ab {
        free(replicas[*owner], id).await;
    }
    for n in 200..210u64 {
        free(&c, &format!("k{n}")).await;
    }
    let settled = wait_until_async(WAIT, || async {
        a.peer_bookings() == live_c && b.peer_bookings() == live_c && c.peer_bookings() == live_c
    })
    .await;
    assert!(settled, "only the killed process's bookings remain");
    assert!(all_loads_agree(&replicas).await);
    drop(server);
}
