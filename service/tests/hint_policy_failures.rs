//! A panicking hint policy does not fail the booking: the answer is 200 and its `kv_hint`
//! carries the other policies' actions.

mod common;

use common::*;
use dynamo_kv_router::plugins::prelude::*;
use serde_json::json;

/// Always panics.
#[hint_policy("service_test_panicking")]
#[derive(Default, Deserialize)]
pub struct Panicking {}

impl HintPolicy for Panicking {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        panic!("this hint policy always panics");
    }
}

/// Always sends one `test.mark` action naming the booked worker.
#[hint_policy("service_test_marking")]
#[derive(Default, Deserialize)]
pub struct Marking {}

impl HintPolicy for Marking {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(vec![HintAction::new(
            "test.mark",
            "1.0",
            dynamo_kv_router::serde_json::json!({"blocks": context.sequence_hashes().len()}),
        )])
    }
}

const YAML: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: service_test_panicking\n      - type: service_test_marking\n";

#[tokio::test]
async fn a_panicking_hint_policy_still_gets_200_with_the_other_actions() {
    let service = start(YAML).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1]).await;
    let answer = client
        .post_json(
            "/select_and_reserve",
            &json!({"model_name": "m", "selection_id": "h1", "token_ids": tokens(48, 4)}),
        )
        .await
        .expect("book");
    expect_status(&answer, 200);
    assert_eq!(
        answer.json()["kv_hint"],
        json!({
            "protocol_version": "0.1",
            "message_id": "h1",
            "actions": [{"action_id": "a1", "action_type": "test.mark", "action_version": "1.0",
                         "payload": {"blocks": 3}}]
        })
    );
    let metrics = client.get("/metrics").await.expect("metrics").text();
    assert!(
        metrics
            .lines()
            .any(|line| line.contains("service_test_panicking") && line.ends_with(" 1")),
        "{metrics}"
    );

    // A worker that accepts no hints gets none.
    let mut plain = worker_body(2);
    plain
        .as_object_mut()
        .map(|body| body.remove("router_hint_worker_type"));
    expect_status(
        &client
            .post_json("/workers", &plain)
            .await
            .expect("register"),
        201,
    );
    let pinned = json!({"model_name": "m", "selection_id": "h2", "token_ids": tokens(48, 4),
                            "pinned_worker": {"worker_id": 2}});
    let answer = client
        .post_json("/select_and_reserve", &pinned)
        .await
        .expect("book");
    expect_status(&answer, 200);
    assert!(answer.json().get("kv_hint").is_none(), "{}", answer.text());
}
