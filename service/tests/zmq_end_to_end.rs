//! End to end over loopback: fake engines publish real ZMQ msgpack KV events; the service
//! indexes them, books the worker holding the prefix, names the peer in a `kv.fetch` hint,
//! replays a lost batch, follows an engine restart and an engine that goes away and comes
//! back, and returns every booking's load.

mod common;

use common::*;
use kv_router_service::engine_events::engine_event::{BlockStored, EngineEvent, EngineEventBatch};
use kv_router_service::engine_events::engine_publisher::{EnginePublisher, encode_batch};
use kv_router_service::http::loopback_client::LoopbackClient;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

const BLOCK: usize = 16;

/// The stored batch of blocks `first..first+count` of `prompt`, engine ids `base + i`.
fn stored(prompt: &[u32], first: usize, count: usize, base: u64) -> Vec<u8> {
    encode_batch(&EngineEventBatch {
        ts: now(),
        events: vec![EngineEvent::BlockStored(BlockStored::positional(
            prompt,
            BLOCK,
            first..first + count,
            base,
        ))],
        data_parallel_rank: None,
    })
}

/// A batch with no events, stamped with the time as engines stamp theirs.
fn empty_batch() -> Vec<u8> {
    encode_batch(&EngineEventBatch {
        ts: now(),
        events: Vec::new(),
        data_parallel_rank: None,
    })
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

fn registration(id: u64, engine: &EnginePublisher) -> Value {
    engine_registration(id, engine.events_endpoint(), engine.replay_endpoint())
}

/// Polls (at most 10 s) until `worker` holds `blocks` leading blocks of `prompt`; meanwhile the
/// engine publishes empty batches, so a batch lost before the subscription took effect shows
/// up as a gap and is replayed.
async fn wait_for(
    client: &mut LoopbackClient,
    engine: &mut EnginePublisher,
    prompt: &[u32],
    worker: u64,
    blocks: u64,
) {
    for _ in 0..200 {
        if device_blocks(client, prompt, worker).await == blocks {
            return;
        }
        engine.publish(empty_batch()).await.expect("publish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = device_blocks(client, prompt, worker).await;
    panic!("worker {worker} holds {seen} blocks of the prompt, expected {blocks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_bookings_hints_replay_restart_and_reconnect() {
    let (service, stats) = start_zmq().await;
    let mut client = service.client().await;
    let mut engine_a = EnginePublisher::bind("127.0.0.1").await.expect("engine a");
    let mut engine_b = EnginePublisher::bind("127.0.0.1").await.expect("engine b");
    for (id, engine) in [(1, &engine_a), (2, &engine_b)] {
        let created = client
            .post_json("/workers", &registration(id, engine))
            .await
            .expect("register");
        expect_status(&created, 201);
        assert_eq!(
            created.json()["lifecycle"],
            json!("schedulable"),
            "{}",
            created.text()
        );
    }

    // Worker 1 computes 8 blocks of the prompt; a booking for it goes there.
    let prompt = tokens(8 * BLOCK, 11);
    engine_a
        .publish(stored(&prompt, 0, 8, 100))
        .await
        .expect("publish");
    wait_for(&mut client, &mut engine_a, &prompt, 1, 8).await;
    let booked = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "m", "selection_id": "b1", "token_ids": prompt}),
        )
        .await
        .expect("book");
    expect_status(&booked, 200);
    assert_eq!(booked.json()["worker_id"], json!(1));
    assert_eq!(booked.json()["overlap"]["gpu"], json!(128));
    assert_eq!(booked.json()["effective_prefill_tokens"], json!(0));

    // Worker 1 is loaded; a prompt sharing its 8 blocks goes to idle worker 2, whose hint
    // names worker 1 with its engine hashes from block 0 (root-aligned).
    for i in 0..24 {
        let answer = client
            .post_json(
                "/reservations",
                &json!({"model_name": "m", "selection_id": format!("load{i}"), "worker_id": 1,
                        "token_ids": tokens(64 * BLOCK, 1000 + i)}),
            )
            .await
            .expect("reserve");
        expect_status(&answer, 201);
    }
    let mut longer = prompt.clone();
    longer.extend(tokens(4 * BLOCK, 12));
    let hinted = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "m", "selection_id": "h1", "token_ids": longer}),
        )
        .await
        .expect("book");
    expect_status(&hinted, 200);
    let body = hinted.json();
    assert_eq!(body["worker_id"], json!(2), "{body}");
    let action = &body["kv_hint"]["actions"][0];
    assert_eq!(action["action_type"], json!("kv.fetch"), "{body}");
    assert_eq!(
        action["payload"]["source_control_endpoint"],
        json!("tcp://127.0.0.1:23001")
    );
    assert_eq!(
        action["payload"]["block_hashes"],
        json!((100..108).collect::<Vec<u64>>())
    );
    assert_eq!(body["kv_hint"]["message_id"], json!("h1"));

    // A lost batch is replayed when the next one reveals the gap.
    let second = tokens(6 * BLOCK, 13);
    engine_b
        .publish(stored(&second, 0, 2, 500))
        .await
        .expect("publish");
    wait_for(&mut client, &mut engine_b, &second, 2, 2).await;
    engine_b.lose(stored(&second, 2, 2, 500));
    engine_b
        .publish(stored(&second, 4, 2, 500))
        .await
        .expect("publish");
    wait_for(&mut client, &mut engine_b, &second, 2, 6).await;
    assert!(stats.replays.load(Ordering::Relaxed) >= 1);
    assert!(stats.replayed_batches.load(Ordering::Relaxed) >= 2);

    // The engine restarts: its numbering goes back to 0 and its old blocks are gone.
    engine_b.restart();
    let third = tokens(3 * BLOCK, 14);
    engine_b
        .publish(stored(&third, 0, 3, 900))
        .await
        .expect("publish");
    wait_for(&mut client, &mut engine_b, &third, 2, 3).await;
    assert_eq!(device_blocks(&mut client, &second, 2).await, 0);

    // Engine 1 goes away and comes back on the same endpoints (same numbering, a new
    // process would restart at 0; here it keeps its buffer to show replay across reconnects).
    let (events, replay) = (
        engine_a.events_endpoint().to_owned(),
        engine_a.replay_endpoint().to_owned(),
    );
    drop(engine_a);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut engine_a = EnginePublisher::bind_at(&events, &replay)
        .await
        .expect("engine a again");
    let fourth = tokens(2 * BLOCK, 15);
    engine_a
        .publish(stored(&fourth, 0, 2, 700))
        .await
        .expect("publish");
    wait_for(&mut client, &mut engine_a, &fourth, 1, 2).await;
    assert!(stats.connects.load(Ordering::Relaxed) >= 3);

    // The dump holds worker 2's blocks as upstream RouterEvents.
    let dump = client.get("/dump").await.expect("dump").json();
    let events = dump["m:default"]["events"].as_array().expect("events");
    let of_worker_2: usize = events
        .iter()
        .filter(|event| event["worker_id"] == json!(2))
        .map(|event| {
            event["event"]["data"]["stored"]["blocks"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .sum();
    assert_eq!(of_worker_2, 3, "{dump}");
    assert!(
        events
            .iter()
            .all(|event| event["event"]["data"]["stored"]["blocks"].is_array())
    );

    // Releasing every booking returns the loads to zero.
    for id in std::iter::once("b1".to_owned())
        .chain(std::iter::once("h1".to_owned()))
        .chain((0..24).map(|i| format!("load{i}")))
    {
        release(&mut client, &id).await;
    }
    assert_all_loads_zero(&mut client).await;

    // Deleting a worker drops its blocks.
    expect_status(&client.delete("/workers/1").await.expect("delete"), 200);
    assert_eq!(device_blocks(&mut client, &fourth, 1).await, 0);
}
