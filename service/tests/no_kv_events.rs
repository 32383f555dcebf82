//! `serve --no-kv-events` semantics: no engine publishes events, the router predicts each
//! worker's cache from its own bookings. A second request sharing a prefix lands on the worker
//! the first was booked on, its prefix counted as cached; once the TTL ran out it no longer
//! counts.

mod common;

use common::*;
use dynamo_kv_router::kv::ApproximateConfig;
use dynamo_kv_router::router::RouterOptions;
use kv_router_service::engine_events::ingress::NoIngress;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const TTL: Duration = Duration::from_millis(1_500);

async fn start_without_events() -> TestService {
    let options = RouterOptions {
        approximate: Some(ApproximateConfig {
            ttl: TTL,
            ..ApproximateConfig::default()
        }),
        ..RouterOptions::default()
    };
    start_with_options(DEFAULT_YAML, options, Arc::new(NoIngress)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prefix_follows_the_booking_until_the_ttl() {
    let service = start_without_events().await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2, 3, 4]).await;

    let system = tokens(512, 11);
    let mut first_prompt = system.clone();
    first_prompt.extend(tokens(100, 1));
    let first = client
        .post_json(
            "/select_and_reserve",
            &json!({"selection_id": "req-1", "model_name": "m", "token_ids": first_prompt}),
        )
        .await
        .expect("book");
    expect_status(&first, 200);
    let first = first.json();
    let booked = first["worker_id"].as_u64().expect("worker id");
    assert_eq!(first["overlap"]["gpu"], json!(0), "{first}");
    // The router predicts the booked worker caches the prompt's 38 full blocks; others nothing.
    assert_eq!(device_blocks(&mut client, &first_prompt, booked).await, 38);
    release(&mut client, "req-1").await;

    let mut second_prompt = system.clone();
    second_prompt.extend(tokens(200, 2));
    let second = client
        .post_json(
            "/select_and_reserve",
            &json!({"selection_id": "req-2", "model_name": "m", "token_ids": second_prompt}),
        )
        .await
        .expect("book");
    expect_status(&second, 200);
    let second = second.json();
    assert_eq!(second["worker_id"], json!(booked), "{second}");
    assert_eq!(second["overlap"]["gpu"], json!(512), "{second}");
    release(&mut client, "req-2").await;

    tokio::time::sleep(TTL + Duration::from_millis(300)).await;
    assert_eq!(device_blocks(&mut client, &first_prompt, booked).await, 0);
    assert_eq!(device_blocks(&mut client, &second_prompt, booked).await, 0);

    // `/metrics` says what the predictions did, per partition.
    let metrics = client.get("/metrics").await.expect("metrics");
    expect_status(&metrics, 200);
    let text = metrics.text();
    let sample = "kv_router_predicted_bookings_total{model_name=\"m\",routing_group=\"default\",mode=\"without_events\"} 2";
    assert!(text.contains(sample), "{sample} in\n{text}");
    assert!(text.contains("# TYPE kv_router_predicted_entries gauge"));
}
