//! What narrows or reports a selection, as upstream's selection service does: `pinned_worker`,
//! `allowed_worker_ids` (the policy chooses among the allowed workers only), the per-tier
//! overlap of the chosen worker, and `POST /reservations/{id}/output_block`. Cached blocks are
//! put straight into the partition's index (the ingress is off).

mod common;

use common::*;
use dynamo_kv_router::router::WorkerId;
use serde_json::{Value, json};

fn booking(id: &str, prompt: &[u32]) -> Value {
    json!({"model_name": "m", "routing_group": "default", "selection_id": id, "token_ids": prompt})
}

async fn register(
    client: &mut kv_router_service::http::loopback_client::LoopbackClient,
    body: Value,
) {
    let created = client.post_json("/workers", &body).await.expect("register");
    expect_status(&created, 201);
    assert_eq!(created.json()["lifecycle"], json!("schedulable"));
}

async fn decode_blocks(
    client: &mut kv_router_service::http::loopback_client::LoopbackClient,
) -> Value {
    let loads = client.get("/loads").await.expect("loads").json();
    loads[0]["loads"]
        .as_array()
        .expect("loads")
        .iter()
        .map(|load| {
            (
                load["worker_id"].to_string(),
                load["potential_decode_blocks"].clone(),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[tokio::test]
async fn allowed_worker_ids_narrow_the_choice_and_pinned_workers_must_be_allowed() {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    for id in [1, 2, 3] {
        register(&mut client, worker_body(id)).await;
    }
    let prompt = tokens(64, 5);
    cache_blocks(&service, WorkerId::new(1, 0), &prompt, 4);
    cache_blocks(&service, WorkerId::new(3, 0), &prompt, 2);
    assert_eq!(device_blocks(&mut client, &prompt, 1).await, 4);

    let unfiltered = client.post_json("/select", &booking("q", &prompt)).await;
    assert_eq!(unfiltered.expect("select").json()["worker_id"], json!(1));

    // Worker 1 holds the longer prefix, but only 2 and 3 are allowed: 3 (2 blocks) wins.
    let mut subset = booking("a1", &prompt);
    subset["allowed_worker_ids"] = json!([2, 3]);
    let answer = client.post_json("/select_and_reserve", &subset).await;
    let answer = answer.expect("book");
    expect_status(&answer, 200);
    assert_eq!(answer.json()["worker_id"], json!(3));
    assert_eq!(answer.json()["overlap"]["gpu"], json!(32));
    assert_eq!(answer.json()["effective_prefill_tokens"], json!(32));
    let mut single = booking("a2", &prompt);
    single["allowed_worker_ids"] = json!([2]);
    let answer = client.post_json("/select", &single).await.expect("select");
    expect_status(&answer, 200);
    assert_eq!(answer.json()["worker_id"], json!(2));

    // None allowed: upstream's "no endpoints" 503, and nothing changes.
    let loads_before = decode_blocks(&mut client).await;
    for route in ["/select", "/select_and_reserve"] {
        let mut none = booking("n1", &prompt);
        none["allowed_worker_ids"] = json!([9]);
        let answer = client.post_json(route, &none).await.expect("answer");
        expect_status(&answer, 503);
        let error = answer.json()["error"].as_str().map(str::to_owned);
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("no endpoints available")),
            "{error:?}"
        );
    }
    assert_eq!(decode_blocks(&mut client).await, loads_before);
    let replay = client
        .post_json(
            "/reservations",
            &json!({"model_name": "m", "selection_id": "n1"}),
        )
        .await
        .expect("reserve");
    expect_status(&replay, 404);
    let answer = client
        .post_json("/select_and_reserve", &booking("n1", &prompt))
        .await;
    expect_status(&answer.expect("book"), 200);

    // A pinned worker outside the allowed set is upstream's 400; inside, it is booked.
    let mut pinned = booking("p1", &prompt);
    pinned["pinned_worker"] = json!({"worker_id": 1, "dp_rank": 0});
    pinned["allowed_worker_ids"] = json!([2]);
    let answer = client.post_json("/select_and_reserve", &pinned).await;
    let answer = answer.expect("book");
    expect_status(&answer, 400);
    assert_eq!(
        answer.json(),
        json!({"error": "pinned worker 1 is not in allowed worker set"})
    );
    pinned["allowed_worker_ids"] = json!([1, 2]);
    let answer = client.post_json("/select_and_reserve", &pinned).await;
    let answer = answer.expect("book");
    expect_status(&answer, 200);
    assert_eq!(answer.json()["worker_id"], json!(1));

    let mut absent = booking("p2", &prompt);
    absent["pinned_worker"] = json!({"worker_id": 9});
    let answer = client.post_json("/select_and_reserve", &absent).await;
    expect_status(&answer.expect("book"), 404);
}

#[tokio::test]
async fn overlap_tiers_are_the_longest_device_match_of_any_rank_of_the_worker() {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    let mut body = worker_body(4);
    body["data_parallel_size"] = json!(2);
    register(&mut client, body).await;
    let prompt = tokens(80, 9);
    cache_blocks(&service, WorkerId::new(4, 0), &prompt, 1);
    cache_blocks(&service, WorkerId::new(4, 1), &prompt, 3);

    let mut pinned = booking("t1", &prompt);
    pinned["pinned_worker"] = json!({"worker_id": 4, "dp_rank": 0});
    let answer = client.post_json("/select_and_reserve", &pinned).await;
    let answer = answer.expect("book");
    expect_status(&answer, 200);
    assert_eq!(
        answer.json()["overlap"],
        json!({"longest_matched": 48, "gpu": 48, "dp": {"0": 16, "1": 48}, "cpu": 48, "disk": 48})
    );
    // The chosen rank computes what it does not hold itself.
    assert_eq!(answer.json()["effective_prefill_tokens"], json!(64));
}

#[tokio::test]
async fn output_blocks_grow_a_live_booking_until_it_is_freed() {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    register(&mut client, worker_body(1)).await;
    let prompt = tokens(64, 2);
    let answer = client
        .post_json("/select_and_reserve", &booking("o1", &prompt))
        .await;
    expect_status(&answer.expect("book"), 200);
    let before = decode_blocks(&mut client).await["1"].as_u64();
    assert_eq!(before, Some(4));

    let grown = client.post("/reservations/o1/output_block", b"{}").await;
    let grown = grown.expect("output block");
    expect_status(&grown, 200);
    assert_eq!(grown.json(), json!({"status": "ok"}));
    let decayed = client
        .post_json(
            "/reservations/o1/output_block",
            &json!({"decay_fraction": 0.5}),
        )
        .await
        .expect("output block");
    expect_status(&decayed, 200);
    assert_eq!(decode_blocks(&mut client).await["1"].as_u64(), Some(6));

    let invalid = client
        .post_json(
            "/reservations/o1/output_block",
            &json!({"decay_fraction": 1.5}),
        )
        .await
        .expect("output block");
    expect_status(&invalid, 400);
    assert_eq!(
        invalid.json(),
        json!({"error": "decay_fraction must be between 0.0 and 1.0"})
    );
    let malformed = client.post("/reservations/o1/output_block", b"{").await;
    expect_status(&malformed.expect("output block"), 400);
    assert_eq!(decode_blocks(&mut client).await["1"].as_u64(), Some(6));
    let unknown = client.post("/reservations/zz/output_block", b"{}").await;
    let unknown = unknown.expect("output block");
    expect_status(&unknown, 404);
    assert_eq!(unknown.json(), json!({"error": "reservation zz not found"}));

    expect_status(&client.delete("/reservations/o1").await.expect("free"), 200);
    assert_all_loads_zero(&mut client).await;
    let after = client.post("/reservations/o1/output_block", b"{}").await;
    expect_status(&after.expect("output block"), 404);
}
