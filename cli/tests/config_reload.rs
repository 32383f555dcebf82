//! `kv-router serve --config FILE --admin-token-file TOKEN` as a real process: `SIGHUP` reads
//! the file again and swaps it in; a broken file changes nothing, is logged and counted; the
//! running configuration and its version are on `GET /admin/config`.

#[path = "serve_process/mod.rs"]
mod serve_process;

use kv_router_service::http::loopback_client::LoopbackClient;
use serde_json::{Value, json};
use serve_process::ServeProcess;
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "reload-test-token";

const KVCR: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: kvcr\n    hints:\n      - type: kv_fetch\n";
const DEFAULT_COST: &str =
    "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated: dynamo-default-cost-fn\n";

fn hang_up(process: &ServeProcess) {
    let status = Command::new("kill")
        .args(["-HUP", &process.child.id().to_string()])
        .status()
        .expect("kill -HUP runs");
    assert!(status.success(), "kill -HUP failed");
}

async fn running(client: &mut LoopbackClient) -> Value {
    let bearer = format!("Bearer {TOKEN}");
    let answer = client
        .send_with_headers("GET", "/admin/config", &[("Authorization", &bearer)], None)
        .await
        .expect("an answer");
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()
}

async fn metric(client: &mut LoopbackClient, sample: &str) -> Option<f64> {
    let text = client.get("/metrics").await.expect("metrics").text();
    text.lines()
        .find_map(|line| line.strip_prefix(sample))
        .and_then(|value| value.trim().parse().ok())
}

/// Asks `check` of a fresh connection every 50 ms until it holds; panics naming `what` after
/// [`WAIT`].
async fn wait_until(
    router: &ServeProcess,
    what: &str,
    check: impl AsyncFn(&mut LoopbackClient) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        let mut client = router.client().await;
        if check(&mut client).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within {WAIT:?}");
}

async fn rejected_once(client: &mut LoopbackClient) -> bool {
    metric(
        client,
        "kv_router_config_reloads_rejected_total{trigger=\"sighup\"}",
    )
    .await
        == Some(1.0)
}

#[tokio::test]
async fn sighup_reloads_the_file_and_a_broken_file_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("kv-router-sighup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let config = dir.join("router.yaml");
    let token = dir.join("admin.token");
    std::fs::write(&config, KVCR).expect("write the config");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("write the token");
    let router = ServeProcess::spawn(&[
        "--config",
        config.to_str().expect("a UTF-8 path"),
        "--admin-token-file",
        token.to_str().expect("a UTF-8 path"),
    ]);
    let mut client = router.client().await;
    wait_until(&router, "the reload lines to be printed", async |_| {
        router.printed("SIGHUP reloads").is_some() && router.printed("/admin/config").is_some()
    })
    .await;
    let first = running(&mut client).await;
    assert_eq!(first["version"], json!(1));
    assert_eq!(first["roles"]["aggregated"]["selection"], json!("kvcr"));

    std::fs::write(&config, DEFAULT_COST).expect("rewrite the config");
    hang_up(&router);
    wait_until(&router, "the SIGHUP reload", async |client| {
        running(client).await["version"] == json!(2)
    })
    .await;
    let second = running(&mut client).await;
    assert_eq!(
        second["roles"]["aggregated"],
        json!({"selection": "dynamo-default-cost-fn", "hints": []})
    );
    assert_eq!(second["text"], json!(DEFAULT_COST));

    std::fs::write(&config, "worker_selection:\n  aggregated: kvcrr\n").expect("break it");
    hang_up(&router);
    wait_until(
        &router,
        "the rejected SIGHUP reload to be counted",
        rejected_once,
    )
    .await;
    assert_eq!(running(&mut client).await["version"], json!(2));
    assert_eq!(
        metric(
            &mut client,
            "kv_router_config_reloads_total{trigger=\"sighup\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric(&mut client, "kv_router_config_version").await,
        Some(2.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn without_a_token_the_admin_routes_are_off_and_sighup_does_not_stop_the_router() {
    let mut router = ServeProcess::spawn(&[]);
    let mut client = router.client().await;
    let answer = client.get("/admin/config").await.expect("an answer");
    assert_eq!(answer.status, 404, "{}", answer.text());
    assert!(answer.text().contains("--admin-token-file"));
    // Started on the built-in configuration: a SIGHUP has no file to read, and is counted.
    hang_up(&router);
    wait_until(
        &router,
        "the SIGHUP without a file to be counted",
        rejected_once,
    )
    .await;
    assert!(
        router.child.try_wait().expect("a status").is_none(),
        "the router is still running"
    );
}
