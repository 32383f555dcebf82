//! `serve --router-predicted-ttl-secs` semantics: KV events are trusted, and a booked prompt
//! also counts as cached on its worker for the TTL, until the engine's own events arrive. Here
//! no event ever arrives: a request sharing a new prefix follows the first one to its worker,
//! the predictions stay out of `/overlap_scores`, `/metrics` counts them, and past the TTL
//! they no longer count.

mod common;

use common::*;
use dynamo_kv_router::router::RouterOptions;
use kv_router_service::engine_events::ingress::NoIngress;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const TTL: Duration = Duration::from_millis(1_500);

async fn start_predicting() -> TestService {
    let options = RouterOptions {
        predicted_ttl: Some(TTL),
        ..RouterOptions::default()
    };
    start_with_options(DEFAULT_YAML, options, Arc::new(NoIngress)).await
}

/// Books `prompt` on model `m` as `id`; the answer's JSON.
async fn select_and_reserve(
    client: &mut kv_router_service::http::loopback_client::LoopbackClient,
    id: &str,
    prompt: &[u32],
) -> serde_json::Value {
    let answer = client
        .post_json(
            "/select_and_reserve",
            &json!({"selection_id": id, "model_name": "m", "token_ids": prompt}),
        )
        .await
        .expect("book");
    expect_status(&answer, 200);
    answer.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_new_prefix_follows_the_prediction_until_the_ttl() {
    let service = start_predicting().await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2, 3, 4]).await;

    let system = tokens(512, 21);
    let book = |id: &'static str, tail: u32| {
        let mut prompt = system.clone();
        prompt.extend(tokens(64, tail));
        (id, prompt)
    };
    let (first_id, first_prompt) = book("req-1", 1);
    let first = select_and_reserve(&mut client, first_id, &first_prompt).await;
    let booked = first["worker_id"].as_u64().expect("worker id");
    assert_eq!(first["overlap"]["gpu"], json!(0), "{first}");

    // No event arrived: the second, sharing the 512-token prefix, follows the prediction to
    // the same worker. (The first is released first: under the default cost a worker still
    // prefilling costs more than the prefix saves; see `overlap_score_credit`.)
    release(&mut client, first_id).await;
    let (second_id, second_prompt) = book("req-2", 2);
    let second = select_and_reserve(&mut client, second_id, &second_prompt).await;
    assert_eq!(second["worker_id"], json!(booked), "{second}");
    assert_eq!(second["overlap"]["gpu"], json!(512), "{second}");
    // Predictions are never taken for engine-reported blocks.
    assert_eq!(device_blocks(&mut client, &first_prompt, booked).await, 0);

    let metrics = client.get("/metrics").await.expect("metrics");
    expect_status(&metrics, 200);
    let text = metrics.text();
    let sample = "kv_router_predicted_bookings_total{model_name=\"m\",routing_group=\"default\",mode=\"alongside_events\"} 2";
    assert!(text.contains(sample), "{sample} in\n{text}");
    release(&mut client, second_id).await;

    // Past the TTL the prefix no longer counts anywhere.
    tokio::time::sleep(TTL + Duration::from_millis(300)).await;
    let (third_id, third_prompt) = book("req-3", 3);
    let third = select_and_reserve(&mut client, third_id, &third_prompt).await;
    assert_eq!(third["overlap"]["gpu"], json!(0), "{third}");
    release(&mut client, third_id).await;
}
