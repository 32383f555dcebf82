//! Three router replicas on loopback with four fake engines: requests spread round-robin
//! over the replicas; once traffic stops every replica's `/loads` and `/overlap_scores`
//! agree; a replica started later warms from a peer's dump and agrees too; a peer sending
//! garbage or nothing disturbs no one.

mod common;

use common::*;
use kv_router_service::engine_events::engine_event::{BlockStored, EngineEvent, EngineEventBatch};
use kv_router_service::engine_events::engine_publisher::{EnginePublisher, encode_batch};
use kv_router_service::http::loopback_client::LoopbackClient;
use kv_router_service::polling::eventually;
use kv_router_service::replica::warm_start::{PeerLimits, StartKind, warm_start};
use kv_router_service::replica::wire::REPLICA_TOPIC;
use kv_router_service::replica::{ReplicaOptions, ReplicaSync};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

/// How long a background effect may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

const BLOCK: usize = 16;
const ENGINES: u64 = 4;
const REQUESTS: usize = 48;

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

fn empty() -> Vec<u8> {
    encode_batch(&EngineEventBatch {
        ts: 0.0,
        events: Vec::new(),
        data_parallel_rank: None,
    })
}

struct Replica {
    service: TestService,
    sync: Arc<ReplicaSync>,
}

async fn replica() -> Replica {
    let (service, _) = start_zmq().await;
    let options = ReplicaOptions::new("tcp://127.0.0.1:0", Vec::new());
    let sync = ReplicaSync::start(&service.service, &options)
        .await
        .expect("booking sync on 127.0.0.1");
    Replica { service, sync }
}

async fn get(address: std::net::SocketAddr, path: &str) -> Value {
    let mut client = LoopbackClient::connect(address).await.expect("connect");
    client.get(path).await.expect("GET").json()
}

async fn scores(address: std::net::SocketAddr, prompt: &[u32]) -> Value {
    let mut client = LoopbackClient::connect(address).await.expect("connect");
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

async fn all_connected(replicas: &[&Replica]) -> bool {
    replicas.iter().all(|replica| {
        replica
            .sync
            .peers()
            .statuses()
            .iter()
            .all(|peer| peer.connected)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_on_loads_and_overlaps_and_a_new_one_warms_from_a_peer() {
    let replicas = [replica().await, replica().await, replica().await];
    // Every replica subscribes to the others through the route.
    for (i, replica) in replicas.iter().enumerate() {
        let mut client = replica.service.client().await;
        for (j, peer) in replicas.iter().enumerate() {
            if i != j {
                let body = json!({"endpoint": peer.sync.endpoint()});
                let added = client
                    .post_json("/replica_sync/peers", &body)
                    .await
                    .unwrap();
                expect_status(&added, 201);
                let again = client
                    .post_json("/replica_sync/register_peer", &body)
                    .await
                    .unwrap();
                expect_status(&again, 200);
            }
        }
        let bad = client
            .post_json("/replica_sync/peers", &json!({"endpoint": "nowhere"}))
            .await
            .unwrap();
        expect_status(&bad, 400);
        assert_eq!(
            client
                .get("/replica_sync/peers")
                .await
                .unwrap()
                .json()
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }
    let all: Vec<&Replica> = replicas.iter().collect();
    eventually(WAIT, "every subscription connects", || all_connected(&all)).await;
    // A subscription takes effect at the publisher shortly after the connection.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Four engines, registered with every replica, each caching its own prompt.
    let mut engines = Vec::new();
    let prompts: Vec<Vec<u32>> = (0..ENGINES)
        .map(|e| tokens(8 * BLOCK, e as u32 + 1))
        .collect();
    for id in 1..=ENGINES {
        let engine = EnginePublisher::bind("127.0.0.1").await.expect("engine");
        for replica in &replicas {
            let mut client = replica.service.client().await;
            let body = engine_registration(id, engine.events_endpoint(), engine.replay_endpoint());
            expect_status(&client.post_json("/workers", &body).await.unwrap(), 201);
        }
        engines.push(engine);
    }
    for (i, engine) in engines.iter_mut().enumerate() {
        engine
            .publish(stored(&prompts[i], 4 + i, 1000 * (i as u64 + 1)))
            .await
            .expect("publish");
    }
    for (i, prompt) in prompts.iter().enumerate() {
        for replica in &replicas {
            let mut client = replica.service.client().await;
            for _ in 0..200 {
                if device_blocks(&mut client, prompt, i as u64 + 1).await == 4 + i as u64 {
                    break;
                }
                for engine in engines.iter_mut() {
                    engine.publish(empty()).await.expect("publish");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(
                device_blocks(&mut client, prompt, i as u64 + 1).await,
                4 + i as u64
            );
        }
    }

    // Round-robin bookings; every third stays open, every second completes its prefill.
    let mut open = Vec::new();
    let mut clients = Vec::new();
    for replica in &replicas {
        clients.push(replica.service.client().await);
    }
    for n in 0..REQUESTS {
        let r = n % replicas.len();
        let prompt = &prompts[n % prompts.len()];
        let id = format!("req-{n}");
        let booked = clients[r]
            .post_json(
                "/select_and_reserve",
                &json!({"model_name": "m", "selection_id": id, "token_ids": prompt}),
            )
            .await
            .unwrap();
        expect_status(&booked, 200);
        if n % 2 == 0 {
            let done = clients[r]
                .post(&format!("/reservations/{id}/prefill_complete"), b"")
                .await
                .unwrap();
            expect_status(&done, 200);
        }
        if n % 3 == 0 {
            open.push((r, id));
        } else {
            release(&mut clients[r], &id).await;
        }
    }
    let addresses: Vec<_> = replicas.iter().map(|r| r.service.address).collect();
    let loads_agree = || async {
        let first = get(addresses[0], "/loads").await;
        let mut same = true;
        for address in &addresses[1..] {
            same &= get(*address, "/loads").await == first;
        }
        same && first[0]["loads"].as_array().is_some_and(|l| !l.is_empty())
    };
    eventually(WAIT, "every replica's /loads agree", loads_agree).await;
    let loads = get(addresses[0], "/loads").await;
    let requests: u64 = loads[0]["loads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["active_requests"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(requests, open.len() as u64, "{loads}");
    for prompt in &prompts {
        let first = scores(addresses[0], prompt).await;
        for address in &addresses[1..] {
            assert_eq!(scores(*address, prompt).await, first);
        }
    }

    // A garbage peer and a silent one: counted, dropped, nobody disturbed.
    let mut garbage = PubSocket::new();
    let garbage_endpoint = garbage.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
    let silent = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("tcp://{}", listener.local_addr().unwrap())
    };
    for endpoint in [&garbage_endpoint, &silent] {
        let added = clients[0]
            .post_json("/replica_sync/peers", &json!({"endpoint": endpoint}))
            .await
            .unwrap();
        expect_status(&added, 201);
    }
    let sync = &replicas[0].sync;
    eventually(WAIT, "the garbage peer connects", || async {
        sync.peers()
            .statuses()
            .iter()
            .any(|p| p.endpoint == garbage_endpoint && p.connected)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for frames in [
        vec![REPLICA_TOPIC.to_vec(), b"\xc1not msgpack".to_vec()],
        vec![REPLICA_TOPIC.to_vec()],
        vec![REPLICA_TOPIC.to_vec(), vec![0x90], b"extra".to_vec()],
    ] {
        let message = ZmqMessage::try_from(
            frames
                .into_iter()
                .map(bytes::Bytes::from)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        garbage.send(message).await.unwrap();
    }
    eventually(WAIT, "the garbage is counted", || async {
        sync.stats()
            .garbage
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 3
    })
    .await;
    let metrics = clients[0].get("/metrics").await.unwrap().text();
    assert!(
        metrics.contains("kv_router_replica_garbage_total 3"),
        "{metrics}"
    );
    eventually(WAIT, "loads still agree", loads_agree).await;
    let removed = clients[0]
        .send(
            "DELETE",
            "/replica_sync/peers",
            Some(json!({"endpoint": silent}).to_string().as_bytes()),
        )
        .await
        .unwrap();
    expect_status(&removed, 200);

    // A fourth replica warms from the first one's dump: same index before its engines speak.
    let (late, _) = start_zmq().await;
    let start = warm_start(
        &late.service,
        &["127.0.0.1:1".to_owned(), format!("http://{}", addresses[0])],
        PeerLimits::default(),
    )
    .await;
    let StartKind::Warm { restored, .. } = &start else {
        panic!("expected a warm start, got {start}");
    };
    assert_eq!(restored.workers, ENGINES as usize);
    assert_eq!(restored.blocks, (4..4 + ENGINES as usize).sum::<usize>());
    for prompt in &prompts {
        assert_eq!(
            scores(late.address, prompt).await,
            scores(addresses[0], prompt).await
        );
    }

    // Freeing the open bookings returns every replica to zero load.
    for (r, id) in open {
        release(&mut clients[r], &id).await;
    }
    eventually(WAIT, "every replica's load returns to zero", || async {
        let mut zero = true;
        for address in &addresses {
            let loads = get(*address, "/loads").await;
            zero &= loads[0]["loads"].as_array().unwrap().iter().all(|l| {
                l["active_requests"] == json!(0) && l["potential_prefill_tokens"] == json!(0)
            });
        }
        zero
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_peer_a_replica_starts_cold_and_says_so() {
    let (service, _) = start_zmq().await;
    let start = warm_start(&service.service, &[], PeerLimits::default()).await;
    assert_eq!(start.to_string(), "cold start: no --peer to warm from");
    let mut client = service.client().await;
    let answer = client.get("/replica_sync/peers").await.unwrap();
    expect_status(&answer, 200);
    assert_eq!(answer.json(), json!([]));
    let refused = client
        .post_json(
            "/replica_sync/peers",
            &json!({"endpoint": "tcp://127.0.0.1:1"}),
        )
        .await
        .unwrap();
    expect_status(&refused, 409);
}
