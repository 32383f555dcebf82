//! The HTTP routes with upstream's shapes: registration, bookings, reservations, loads,
//! readiness, errors (400 / 404 / 409 / 413 / 422 / 503, `{"error": ...}`), and bad bodies that
//! change nothing. No KV events here (the ingress is off): every worker looks cold.

mod common;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn health_ready_and_registration() {
    let service = start(KVCR_YAML).await;
    let mut client = service.client().await;

    let health = client.get("/health").await.expect("health");
    expect_status(&health, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));

    let ready = client.get("/ready").await.expect("ready");
    expect_status(&ready, 503);
    assert_eq!(ready.json()["ready"], json!(false));
    assert_eq!(ready.json()["schedulable_workers"], json!(0));

    let created = client
        .post_json("/workers", &worker_body(101))
        .await
        .expect("register");
    expect_status(&created, 201);
    let record = created.json();
    assert_eq!(record["worker_id"], json!(101));
    assert_eq!(record["lifecycle"], json!("schedulable"));
    assert_eq!(record["role"], json!("aggregated"));
    assert_eq!(record["block_size"], json!(16));
    assert!(record.get("not_schedulable_reasons").is_none());

    let ready = client.get("/ready").await.expect("ready");
    expect_status(&ready, 200);
    assert_eq!(ready.json()["schedulable_workers"], json!(1));

    // Missing metadata: stored, incomplete, with upstream's reasons.
    let incomplete = client
        .post_json("/workers", &json!({"worker_id": 7}))
        .await
        .expect("register");
    expect_status(&incomplete, 201);
    let record = incomplete.json();
    assert_eq!(record["lifecycle"], json!("incomplete"));
    assert_eq!(record["model_name"], json!("default"));
    assert_eq!(record["routing_group"], json!("default"));
    assert_eq!(
        record["not_schedulable_reasons"],
        json!(["endpoint is required", "block_size must be greater than 0"])
    );

    let listed = client.get("/workers").await.expect("list");
    expect_status(&listed, 200);
    let ids: Vec<u64> = listed
        .json()
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|record| record["worker_id"].as_u64())
        .collect();
    assert_eq!(ids, vec![7, 101]);
    let filtered = client.get("/workers?model_name=m").await.expect("list");
    assert_eq!(filtered.json().as_array().map(Vec::len), Some(1));

    // A role without a configured entry keeps the worker incomplete.
    let mut decode = worker_body(5);
    decode["role"] = json!("decode");
    let decode = client
        .post_json("/workers", &decode)
        .await
        .expect("register");
    expect_status(&decode, 201);
    assert_eq!(decode.json()["lifecycle"], json!("incomplete"));
    assert!(
        decode.json()["not_schedulable_reasons"][0]
            .as_str()
            .is_some_and(|reason| reason.contains("role `decode`"))
    );

    // A different block size in the same partition is a reconciliation failure.
    let mut other = worker_body(6);
    other["block_size"] = json!(32);
    let other = client
        .post_json("/workers", &other)
        .await
        .expect("register");
    assert_eq!(other.json()["lifecycle"], json!("incomplete"));
    assert_eq!(
        other.json()["not_schedulable_reasons"],
        json!([
            "reconciliation failed: block_size mismatch for model=m routing_group=default: existing=16 requested=32"
        ])
    );

    let patched = client
        .patch_json(
            "/workers/101",
            &json!({"endpoint": "http://127.0.0.1:9999"}),
        )
        .await
        .expect("patch");
    expect_status(&patched, 200);
    assert_eq!(patched.json()["endpoint"], json!("http://127.0.0.1:9999"));
    let missing = client
        .patch_json("/workers/404", &json!({}))
        .await
        .expect("patch");
    expect_status(&missing, 404);
    assert_eq!(missing.json(), json!({"error": "worker 404 not found"}));

    let deleted = client.delete("/workers/101").await.expect("delete");
    expect_status(&deleted, 200);
    assert_eq!(deleted.json()["lifecycle"], json!("unschedulable"));
    let again = client.delete("/workers/101").await.expect("delete");
    expect_status(&again, 404);
    let ready = client.get("/ready").await.expect("ready");
    expect_status(&ready, 503);
}

fn booking(id: &str, prompt: &[u32]) -> Value {
    json!({"model_name": "m", "routing_group": "default", "selection_id": id, "token_ids": prompt})
}

#[tokio::test]
async fn booking_answers_and_load_accounting() {
    let service = start(KVCR_YAML).await;
    let mut client = service.client().await;
    for id in [1, 2] {
        let created = client
            .post_json("/workers", &worker_body(id))
            .await
            .expect("register");
        expect_status(&created, 201);
    }
    let not_ready = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "other", "token_ids": [1]}),
        )
        .await
        .expect("book");
    expect_status(&not_ready, 503);
    assert_eq!(
        not_ready.json(),
        json!({"error": "no schedulable workers for model=other routing_group=default"})
    );

    let prompt = tokens(100, 3);
    let answer = client
        .post_json("/select_and_reserve", &booking("r1", &prompt))
        .await
        .expect("book");
    expect_status(&answer, 200);
    let body = answer.json();
    assert_eq!(body["selection_id"], json!("r1"));
    assert_eq!(body["model_name"], json!("m"));
    assert_eq!(body["block_size"], json!(16));
    assert_eq!(body["isl_tokens"], json!(100));
    assert_eq!(body["effective_prefill_tokens"], json!(100));
    assert_eq!(body["potential_decode_blocks"], json!(6));
    assert_eq!(body["track_prefill_tokens"], json!(true));
    assert_eq!(body["sequence_hashes"].as_array().map(Vec::len), Some(6));
    assert!(body["sequence_hashes"][0].is_i64());
    assert_eq!(
        body["overlap"],
        json!({"longest_matched": 0, "gpu": 0, "dp": {"0": 0}, "cpu": 0, "disk": 0})
    );
    let worker = body["worker_id"].as_u64().expect("worker id");
    assert_eq!(
        body["endpoint"],
        json!(format!("http://127.0.0.1:{}", 9000 + worker))
    );

    let duplicate = client
        .post_json("/select_and_reserve", &booking("r1", &prompt))
        .await
        .expect("book");
    expect_status(&duplicate, 409);
    assert_eq!(
        duplicate.json(),
        json!({"error": "selection r1 is already reserved or being reserved"})
    );

    let loads = client.get("/loads").await.expect("loads").json();
    assert_eq!(loads[0]["model_name"], json!("m"));
    assert_eq!(loads[0]["pending_count"], json!(0));
    let active: u64 = loads[0]["loads"]
        .as_array()
        .expect("loads")
        .iter()
        .map(|load| load["active_requests"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(active, 1);

    let done = client
        .post("/reservations/r1/prefill_complete", b"")
        .await
        .expect("prefill complete");
    expect_status(&done, 200);
    assert_eq!(done.json(), json!({"status": "ok"}));
    let freed = client.delete("/reservations/r1").await.expect("free");
    expect_status(&freed, 200);
    let again = client.delete("/reservations/r1").await.expect("free");
    expect_status(&again, 404);
    assert_eq!(again.json(), json!({"error": "reservation r1 not found"}));
    let unknown = client
        .post("/reservations/nope/prefill_complete", b"")
        .await
        .expect("prefill complete");
    expect_status(&unknown, 404);
    assert_all_loads_zero(&mut client).await;

    // Without a selection id, a booking gets a fresh one.
    let answer = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "m", "token_ids": prompt}),
        )
        .await
        .expect("book");
    expect_status(&answer, 200);
    let id = answer.json()["selection_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    release(&mut client, &id).await;
    assert_all_loads_zero(&mut client).await;
}

#[tokio::test]
async fn select_then_reserve_and_explicit_reservations() {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1]).await;
    let prompt = tokens(40, 9);

    let selected = client
        .post_json("/select", &booking("s1", &prompt))
        .await
        .expect("select");
    expect_status(&selected, 200);
    let body = selected.json();
    assert_eq!(body["selection_id"], json!("s1"));
    assert!(body.get("sequence_hashes").is_none());
    assert!(body.get("isl_tokens").is_none());
    assert!(body.get("kv_hint").is_none());
    assert_eq!(body["potential_decode_blocks"], json!(2));
    assert_all_loads_zero(&mut client).await;

    let reserved = client
        .post_json(
            "/reservations",
            &json!({"model_name": "m", "selection_id": "s1"}),
        )
        .await
        .expect("reserve");
    expect_status(&reserved, 201);
    assert_eq!(
        reserved.json(),
        json!({"selection_id": "s1", "model_name": "m", "routing_group": "default",
               "worker_id": 1, "dp_rank": 0, "endpoint": "http://127.0.0.1:9001"})
    );
    let replayed = client
        .post_json(
            "/reservations",
            &json!({"model_name": "m", "selection_id": "s1"}),
        )
        .await
        .expect("reserve");
    expect_status(&replayed, 404);
    assert_eq!(
        replayed.json(),
        json!({"error": "no pending selection s1 for model=m routing_group=default (expired, already used, or never selected)"})
    );

    let explicit = client
        .post_json(
            "/reservations",
            &json!({"model_name": "m", "selection_id": "e1", "worker_id": 1, "token_ids": prompt,
                    "effective_prefill_tokens": 8}),
        )
        .await
        .expect("reserve");
    expect_status(&explicit, 201);
    let too_many = client
        .post_json(
            "/reservations",
            &json!({"model_name": "m", "selection_id": "e2", "worker_id": 1, "token_ids": prompt,
                    "effective_prefill_tokens": 41}),
        )
        .await
        .expect("reserve");
    expect_status(&too_many, 400);
    assert_eq!(
        too_many.json(),
        json!({"error": "effective_prefill_tokens (41) must not exceed isl_tokens (40)"})
    );
    let unknown = client
        .post_json(
            "/reservations",
            &json!({"model_name": "m", "selection_id": "e3", "worker_id": 99, "token_ids": prompt}),
        )
        .await
        .expect("reserve");
    expect_status(&unknown, 404);

    let loads = client.get("/loads").await.expect("loads").json();
    let load = &loads[0]["loads"][0];
    assert_eq!(load["active_requests"], json!(2));
    assert_eq!(load["potential_prefill_tokens"], json!(40 + 8));
    for id in ["s1", "e1"] {
        release(&mut client, id).await;
    }
    assert_all_loads_zero(&mut client).await;

    // Hash-only prompts, as upstream allows.
    let hashes = json!({"model_name": "m", "block_hashes": [1, -2], "sequence_hashes": [3, -4],
                        "isl_tokens": 32});
    let answer = client
        .post_json("/select_and_reserve", &hashes)
        .await
        .expect("book");
    expect_status(&answer, 200);
    assert_eq!(answer.json()["sequence_hashes"], json!([3, -4]));
    let id = answer.json()["selection_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    release(&mut client, &id).await;
    let missing = client
        .post_json("/select", &json!({"model_name": "m", "block_hashes": [1]}))
        .await
        .expect("select");
    expect_status(&missing, 400);
    assert_eq!(
        missing.json(),
        json!({"error": "sequence_hashes is required without token_ids"})
    );
}

#[tokio::test]
async fn bad_bodies_are_refused_and_change_nothing() {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1]).await;
    let workers_before = client.get("/workers").await.expect("list").json();
    let loads_before = client.get("/loads").await.expect("loads").json();

    for path in [
        "/workers",
        "/select",
        "/select_and_reserve",
        "/reservations",
        "/overlap_scores",
    ] {
        let syntax = client.post(path, b"{\"worker_id\": ").await.expect("post");
        expect_status(&syntax, 400);
        assert!(
            syntax.json()["error"].is_string(),
            "{path}: {}",
            syntax.text()
        );

        let types = client
            .post(
                path,
                br#"{"worker_id": "one", "token_ids": "abc", "selection_id": 5}"#,
            )
            .await
            .expect("post");
        expect_status(&types, 422);
        assert!(
            types.json()["error"].is_string(),
            "{path}: {}",
            types.text()
        );
    }
    let mut huge = b"{\"token_ids\": [".to_vec();
    while huge.len() <= 8 * 1024 * 1024 {
        huge.extend_from_slice(b"1,");
    }
    huge.extend_from_slice(b"1]}");
    let oversized = client
        .post("/select_and_reserve", &huge)
        .await
        .expect("post");
    expect_status(&oversized, 413);
    assert!(
        oversized.json()["error"].is_string(),
        "{}",
        oversized.text()
    );

    let bad_path = client.delete("/workers/abc").await.expect("delete");
    expect_status(&bad_path, 400);
    assert!(bad_path.json()["error"].is_string());
    let no_route = client.get("/nope").await.expect("get");
    expect_status(&no_route, 404);
    assert_eq!(no_route.json(), json!({"error": "route not found"}));
    let wrong_method = client.get("/select").await.expect("get");
    expect_status(&wrong_method, 405);
    assert_eq!(wrong_method.json(), json!({"error": "method not allowed"}));

    assert_eq!(
        client.get("/workers").await.expect("list").json(),
        workers_before
    );
    assert_eq!(
        client.get("/loads").await.expect("loads").json(),
        loads_before
    );
}

#[tokio::test]
async fn overlap_scores_and_metrics() {
    let service = start(DEFAULT_YAML).await;
    let mut client = service.client().await;
    let unready = client
        .post_json(
            "/overlap_scores",
            &json!({"model_name": "m", "token_ids": [1, 2]}),
        )
        .await
        .expect("overlap");
    expect_status(&unready, 503);
    assert_eq!(
        unready.json(),
        json!({"error": "no schedulable workers are available"})
    );
    register_workers(&mut client, [3, 1]).await;
    let scores = client
        .post_json(
            "/overlap_scores",
            &json!({"model_name": "m", "token_ids": tokens(50, 2)}),
        )
        .await
        .expect("overlap");
    expect_status(&scores, 200);
    assert_eq!(
        scores.json(),
        json!({
            "block_size": 16,
            "num_blocks": 3,
            "workers": [
                {"worker_id": 1, "dp_rank": 0, "device_blocks": 0, "host_pinned_blocks": 0,
                 "disk_blocks": 0, "host_pinned_extension_blocks": 0, "disk_extension_blocks": 0,
                 "shared_beyond_device_blocks": null},
                {"worker_id": 3, "dp_rank": 0, "device_blocks": 0, "host_pinned_blocks": 0,
                 "disk_blocks": 0, "host_pinned_extension_blocks": 0, "disk_extension_blocks": 0,
                 "shared_beyond_device_blocks": null}
            ],
            "shared_cache": {"enabled": false, "total_hit_blocks": 0, "ranges": [], "error": null}
        })
    );
    let potential = client
        .post_json(
            "/potential_loads",
            &json!({"model_name": "m", "token_ids": tokens(50, 2)}),
        )
        .await
        .expect("potential loads");
    expect_status(&potential, 200);
    assert_eq!(
        potential.json()[0],
        json!({"worker_id": 1, "dp_rank": 0, "potential_prefill_tokens": 50,
               "potential_decode_blocks": 3, "active_requests": 0})
    );
    let answer = client
        .post_json("/select_and_reserve", &booking("m1", &tokens(20, 1)))
        .await
        .expect("book");
    expect_status(&answer, 200);
    let metrics = client.get("/metrics").await.expect("metrics");
    expect_status(&metrics, 200);
    let text = metrics.text();
    assert!(
        text.lines()
            .any(|line| line.contains("model_name=\"m\"") && !line.starts_with('#')),
        "{text}"
    );
    let dump = client.get("/dump").await.expect("dump");
    expect_status(&dump, 200);
    assert_eq!(dump.json()["m:default"]["block_size"], json!(16));
}
