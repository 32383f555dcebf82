//! A replica follows a peer that restarted on the same endpoint (the `zeromq` SUB socket never
//! reconnects by itself: the subscription is re-created after a quiet period, which the peers'
//! heartbeats keep from happening while they live); a warm start refuses a peer's answer over
//! its size limit and starts cold. Loopback only, bounded in time.

mod common;

use common::*;
use dynamo_kv_router::router::WorkerId;
use kv_router_service::polling::eventually;
use kv_router_service::replica::warm_start::{DEFAULT_MAX_DUMP_BYTES, StartKind, warm_start};
use kv_router_service::replica::{ReplicaOptions, ReplicaSync};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// How long a background effect may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

async fn service_with_worker() -> TestService {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    let created = client.post_json("/workers", &worker_body(1)).await;
    expect_status(&created.expect("register"), 201);
    service
}

fn fast(bind: &str, peers: Vec<String>) -> ReplicaOptions {
    let mut options = ReplicaOptions::new(bind, peers);
    options.heartbeat_interval = Duration::from_millis(100);
    options.peer_quiet = Duration::from_millis(500);
    options
}

async fn active_requests(service: &TestService) -> u64 {
    let mut client = service.client().await;
    let loads = client.get("/loads").await.expect("loads").json();
    loads[0]["loads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|load| load["active_requests"].as_u64())
        .sum()
}

async fn book(service: &TestService, id: &str) {
    let mut client = service.client().await;
    let body = json!({"model_name": "m", "selection_id": id, "token_ids": tokens(64, 1)});
    let answer = client.post_json("/select_and_reserve", &body).await;
    expect_status(&answer.expect("book"), 200);
}

fn subscriptions(sync: &ReplicaSync) -> u64 {
    sync.peers().statuses()[0].subscriptions
}

/// Binds a replica on `endpoint`, retrying while the previous owner releases the port.
async fn rebind(service: &TestService, endpoint: &str) -> Arc<ReplicaSync> {
    for _ in 0..50 {
        if let Ok(sync) = ReplicaSync::start(&service.service, &fast(endpoint, Vec::new())).await {
            return sync;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{endpoint} was not released within 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_restarted_on_the_same_endpoint_is_followed_again() {
    let peer = service_with_worker().await;
    let peer_sync = ReplicaSync::start(&peer.service, &fast("tcp://127.0.0.1:0", Vec::new()))
        .await
        .expect("booking sync on 127.0.0.1");
    let endpoint = peer_sync.endpoint().to_owned();
    let follower = service_with_worker().await;
    let follower_sync = ReplicaSync::start(
        &follower.service,
        &fast("tcp://127.0.0.1:0", vec![endpoint.clone()]),
    )
    .await
    .expect("booking sync on 127.0.0.1");
    let connected = || async { follower_sync.peers().statuses()[0].connected };
    eventually(WAIT, "the follower subscribes", connected).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    book(&peer, "before").await;
    eventually(WAIT, "the follower sees the booking", || async {
        active_requests(&follower).await == 1
    })
    .await;
    // Heartbeats keep a live but idle peer's subscription: three quiet periods, no resubscription.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(subscriptions(&follower_sync), 1);

    // The peer process goes away; a new one binds the same endpoint.
    peer_sync.stop();
    drop(peer_sync);
    drop(peer);
    let restarted = service_with_worker().await;
    let restarted_sync = rebind(&restarted, &endpoint).await;
    assert_eq!(restarted_sync.endpoint(), endpoint);

    // Bookings published before the follower resubscribes are lost (their TTL frees them):
    // keep booking until one arrives.
    let mut n = 0;
    eventually(
        WAIT,
        "the follower sees the restarted peer's bookings",
        || {
            n += 1;
            let id = format!("after-{n}");
            let (restarted, follower) = (&restarted, &follower);
            async move {
                book(restarted, &id).await;
                active_requests(follower).await >= 2
            }
        },
    )
    .await;
    assert!(subscriptions(&follower_sync) >= 2);
    assert_eq!(
        follower_sync
            .stats()
            .garbage
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_dump_over_the_limit_is_refused_and_the_replica_starts_cold() {
    let peer = service_with_worker().await;
    cache_blocks(&peer, WorkerId::new(1, 0), &tokens(64, 3), 4);
    let peers = [format!("http://{}", peer.address)];

    let late = start(DEFAULT_YAML).await;
    let start = warm_start(&late.service, &peers, 64).await;
    let StartKind::Cold { reason } = &start else {
        panic!("expected a cold start, got {start}");
    };
    assert!(reason.contains("exceeds the limit of 64 bytes"), "{reason}");
    assert!(reason.contains("--peer-dump-max-mib"), "{reason}");
    let mut client = late.client().await;
    let workers = client.get("/workers").await.expect("workers").json();
    assert_eq!(workers, json!([]));

    let start = warm_start(&late.service, &peers, DEFAULT_MAX_DUMP_BYTES).await;
    let StartKind::Warm { restored, .. } = &start else {
        panic!("expected a warm start, got {start}");
    };
    assert_eq!((restored.workers, restored.blocks), (1, 4));
}
