//! Shadow policies in the service: bookings through `/select_and_reserve` are evaluated by the
//! role's shadows off the request path, and `GET /shadow` and `/metrics` report what each
//! would have done beside the live choice.

mod common;

use common::*;
use dynamo_kv_router::router::WorkerId;
use kv_router_service::http::loopback_client::LoopbackClient;
use kv_router_service::polling::eventually;
use serde_json::{Value, json};
use std::time::Duration;

/// Live kvcr with kv_fetch; one shadow books by the default cost function without hints, one
/// always fetches.
const SHADOWED_YAML: &str = "router_mode: kv
block_size: 16
worker_selection:
  aggregated:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5, seed: 7}
    hints:
      - type: kv_fetch
        parameters: {min_additional_blocks: 1}
    shadow:
      - type: dynamo-default-cost-fn
        name: default-cost
        hints: []
";

fn booking(id: &str, prompt: &[u32]) -> Value {
    json!({"model_name": "m", "routing_group": "default", "selection_id": id, "token_ids": prompt})
}

async fn shadows(client: &mut LoopbackClient) -> Value {
    let answer = client.get("/shadow").await.expect("an answer");
    expect_status(&answer, 200);
    answer.json()
}

#[tokio::test]
async fn bookings_are_shadowed_off_the_request_path_and_reported() {
    const BOOKINGS: u64 = 12;
    let service = start(SHADOWED_YAML).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2]).await;
    let prompt = tokens(160, 9);
    cache_blocks(&service, WorkerId::new(1, 0), &prompt, 10);
    for n in 0..BOOKINGS {
        let id = format!("r{n}");
        let answer = client
            .post_json("/select_and_reserve", &booking(&id, &prompt))
            .await
            .expect("book");
        expect_status(&answer, 200);
        release(&mut client, &id).await;
    }
    let poll = service.address;
    eventually(
        Duration::from_secs(10),
        "the shadow evaluations",
        || async move {
            let mut client = LoopbackClient::connect(poll).await.expect("connect");
            shadows(&mut client).await[0]["shadows"][0]["decisions"] == json!(BOOKINGS)
        },
    )
    .await;
    let report = shadows(&mut client).await;
    let partition = &report[0];
    assert_eq!(partition["model_name"], json!("m"));
    assert_eq!(partition["cases_dropped"], json!(0));
    let shadow = &partition["shadows"][0];
    assert_eq!(shadow["role"], json!("aggregated"));
    assert_eq!(shadow["name"], json!("default-cost"));
    assert_eq!(shadow["selection_type"], json!("dynamo-default-cost-fn"));
    assert_eq!(shadow["prompt_blocks"], json!(BOOKINGS * 10));
    assert_eq!(shadow["failures"], json!(0));
    assert_eq!(
        shadow["shadow_hints"],
        json!(0),
        "the shadow lists no hints"
    );
    let agreed = shadow["agreed"].as_u64().expect("agreed");
    let agreement = shadow["agreement"].as_f64().expect("agreement");
    assert!((agreement - agreed as f64 / BOOKINGS as f64).abs() < 1e-9);
    let live_cached = shadow["live_cached_blocks"].as_u64().expect("live cached");
    assert!((0..=BOOKINGS * 10).contains(&live_cached), "{shadow}");
    let metrics = client.get("/metrics").await.expect("metrics").text();
    let sample = format!(
        "kv_router_shadow_decisions_total{{model_name=\"m\",routing_group=\"default\",role=\"aggregated\",shadow=\"default-cost\",policy_type=\"dynamo-default-cost-fn\"}} {BOOKINGS}"
    );
    assert!(metrics.contains(&sample), "{metrics}");
    assert_all_loads_zero(&mut client).await;
}

#[tokio::test]
async fn without_shadows_the_report_lists_no_shadow() {
    let service = start(KVCR_YAML).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1]).await;
    let answer = client
        .post_json("/select_and_reserve", &booking("r", &tokens(64, 1)))
        .await
        .expect("book");
    expect_status(&answer, 200);
    let report = shadows(&mut client).await;
    assert_eq!(report[0]["shadows"], json!([]));
}

#[tokio::test]
async fn a_shadow_added_by_a_reload_sees_the_bookings_after_it() {
    let service = start(KVCR_YAML).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2]).await;
    let before = client
        .post_json("/select_and_reserve", &booking("before", &tokens(64, 1)))
        .await
        .expect("book");
    expect_status(&before, 200);
    service
        .service
        .replace_policies(setup(SHADOWED_YAML))
        .expect("the roles are kept");
    for n in 0..3 {
        let answer = client
            .post_json(
                "/select_and_reserve",
                &booking(&format!("after{n}"), &tokens(64, 1)),
            )
            .await
            .expect("book");
        expect_status(&answer, 200);
    }
    let poll = service.address;
    eventually(
        Duration::from_secs(10),
        "the three shadowed bookings",
        || async move {
            let mut client = LoopbackClient::connect(poll).await.expect("connect");
            shadows(&mut client).await[0]["shadows"][0]["decisions"] == json!(3)
        },
    )
    .await;
}
