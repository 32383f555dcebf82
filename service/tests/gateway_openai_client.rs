//! The gateway against a stock client and engines in other processes: the official `openai`
//! Python client (`service/scripts/openai_client_run.py`) talks to the gateway, which routes to
//! fake vLLM-like engines (`service/scripts/fake_openai_engine.py`) that tokenize with the same
//! tokenizer files, publish real ZMQ KV events of what they cache and record the hint each
//! request carried. Completions, chat, streaming and errors through the client; shared-prefix
//! traffic landing on the engine that cached the prefix, and the engine seeing the hint when it
//! did not; an engine killed mid-run failing no request that had not started streaming.
//!
//! The interpreter comes from `KV_ROUTER_PYTHON` (`.ci/run` points it at `target/ci-venv`,
//! with the packages pinned in `.ci/requirements.txt`); without it the test prints a `SKIPPED`
//! line, and under CI it fails.

mod gateway_support;

use gateway_support::*;
use kv_router_service::engine_events::event_transport::ZmqTransport;
use kv_router_service::engine_events::kv_listener::ListenerOptions;
use kv_router_service::engine_events::zmq_ingress::ZmqIngress;
use kv_router_service::gateway::GatewayOptions;
use kv_router_service::worker_record::WorkerRequest;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TEST: &str = "gateway_openai_client";

/// kvcr + kv_fetch: a worker booked away from the cached prefix gets a `kv.fetch` hint.
const KVCR_YAML: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.5, seed: 7}\n    hints:\n      - type: kv_fetch\n        parameters: {min_additional_blocks: 1}\n";

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// A fake engine process; killed when dropped.
struct PythonEngine {
    child: Child,
    http: String,
    events: String,
    replay: String,
}

impl Drop for PythonEngine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PythonEngine {
    fn start(python: &str, id: u64, token_interval_ms: u32) -> Result<Self, String> {
        let mut child = Command::new(python)
            .arg(script("fake_openai_engine.py"))
            .args([
                "--model",
                MODEL,
                "--block-size",
                "16",
                "--max-lifetime-s",
                "240",
            ])
            .arg("--tokenizer")
            .arg(fixture_dir())
            .args(["--worker-id", &id.to_string()])
            .args(["--token-interval-ms", &token_interval_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| format!("cannot run {python}: {error}"))?;
        let stdout = child.stdout.take().ok_or("no pipe from the engine")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|error| error.to_string())?;
        let started: Value = serde_json::from_str(&line).map_err(|error| {
            let _ = child.kill();
            format!("the fake engine did not start ({error}: {line:?}); does {python} have the packages of .ci/requirements.txt?")
        })?;
        let field = |name: &str| started[name].as_str().unwrap_or_default().to_owned();
        Ok(Self {
            http: field("http"),
            events: field("events"),
            replay: field("replay"),
            child,
        })
    }

    fn control_endpoint(id: u64) -> String {
        format!("tcp://127.0.0.1:{}", 23280 + id)
    }

    fn registration(&self, id: u64) -> WorkerRequest {
        serde_json::from_value(json!({
            "worker_id": id,
            "model_name": MODEL,
            "endpoint": self.http,
            "kv_events_endpoint": self.events,
            "replay_endpoint": self.replay,
            "block_size": 16,
            "router_hint_worker_type": "aggregated",
            "router_hint_source_control_endpoints": {"0": Self::control_endpoint(id)},
        }))
        .expect("a registration")
    }
}

/// Runs one scenario of the openai client (off the runtime's threads); its JSON result.
async fn client_run(python: &str, base: &str, scenario: &str, args: Value) -> Value {
    let (python, base, scenario) = (python.to_owned(), base.to_owned(), scenario.to_owned());
    tokio::task::spawn_blocking(move || client_run_blocking(&python, &base, &scenario, args))
        .await
        .expect("the client ran")
}

fn client_run_blocking(python: &str, base: &str, scenario: &str, args: Value) -> Value {
    let output = Command::new(python)
        .arg(script("openai_client_run.py"))
        .args(["--base-url", base, "--model", MODEL, "--scenario", scenario])
        .args(["--json-args", &args.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the openai client");
    assert!(
        output.status.success(),
        "scenario {scenario} failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|error| panic!("scenario {scenario}: {error}: {text}"))
}

fn python() -> Option<String> {
    let Ok(python) = std::env::var("KV_ROUTER_PYTHON") else {
        test_skip::skip_unless_ci(
            TEST,
            "set KV_ROUTER_PYTHON to a Python with the packages of .ci/requirements.txt (.ci/run does)",
        );
        return None;
    };
    let check = Command::new(&python)
        .args([
            "-c",
            "import openai, aiohttp, tokenizers, jinja2, zmq, msgspec",
        ])
        .output();
    match check {
        Ok(output) if output.status.success() => Some(python),
        _ => {
            test_skip::skip_unless_ci(
                TEST,
                &format!(
                    "{python} lacks openai, aiohttp, tokenizers, jinja2, pyzmq or msgspec (pip install -r .ci/requirements.txt)"
                ),
            );
            None
        }
    }
}

async fn fake_requests(engine: &PythonEngine) -> Vec<Value> {
    let answer = get(&format!("{}/_fake/requests", engine.http)).await;
    answer.json().as_array().cloned().unwrap_or_default()
}

/// Waits until the index holds `blocks` blocks of `prompt`'s chat on some worker.
async fn wait_until_cached(gateway: &TestGateway, engines: &[PythonEngine], requests: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut seen = 0;
        for engine in engines {
            seen += fake_requests(engine)
                .await
                .iter()
                .filter(|r| r["finished"] == true)
                .count();
        }
        if seen >= requests || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gateway.settle().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_is_routed_by_cached_prefix_with_hints() {
    let Some(python) = python() else { return };
    let ingress = Arc::new(ZmqIngress::new(
        Arc::new(ZmqTransport),
        ListenerOptions::default(),
    ));
    let gateway = start_gateway_with(KVCR_YAML, GatewayOptions::default(), ingress).await;
    let mut engines = Vec::new();
    for id in 1..=3 {
        let engine = PythonEngine::start(&python, id, 2).unwrap_or_else(|error| panic!("{error}"));
        gateway
            .service
            .upsert_worker(engine.registration(id))
            .expect("registered");
        engines.push(engine);
    }
    let base = gateway.url("/v1");

    // The client's four shapes, through the gateway.
    let plain = client_run(&python, &base, "completions", json!({})).await;
    assert!(
        plain["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{plain}"
    );
    let streamed = client_run(&python, &base, "completions_stream", json!({})).await;
    assert_eq!(streamed["done"], true, "{streamed}");
    assert!(streamed["chunks"].as_u64() > Some(0));
    let chat = client_run(&python, &base, "chat", json!({})).await;
    assert!(
        chat["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{chat}"
    );
    let chat_stream = client_run(&python, &base, "chat_stream", json!({})).await;
    assert_eq!(chat_stream["done"], true, "{chat_stream}");

    // Errors, as the client raises them.
    let errors = client_run(&python, &base, "errors", json!({"long_prompt_words": 5000})).await;
    let cases = errors.as_object().cloned().unwrap_or_default();
    assert!(!cases.is_empty(), "{errors}");
    for (case, error) in &cases {
        let status = error["status"].as_u64().unwrap_or(0);
        assert!((400..500).contains(&status), "{case}: {error}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{case}: {error}"
        );
    }
    // An endpoint the gateway lacks is the client's `NotFoundError`, in OpenAI's shape.
    assert_eq!(cases["unknown_route"]["status"], 404, "{errors}");
    assert_eq!(
        cases["unknown_route"]["type"], "invalid_request_error",
        "{errors}"
    );
    let models = client_run(
        &python,
        &base,
        "models",
        json!({"missing": "org/no-such-model"}),
    )
    .await;
    assert_eq!(models["listed"], json!([MODEL]), "{models}");
    assert_eq!(
        models["retrieved"],
        json!({"id": MODEL, "object": "model"}),
        "{models}"
    );
    assert_eq!(models["missing"]["exception"], "NotFoundError", "{models}");
    assert_eq!(models["missing"]["code"], "model_not_found", "{models}");
    let before = engines.len();
    assert_eq!(before, 3);
    assert_eq!(gateway.settle().await, 0);

    // Shared-prefix traffic, one request at a time: after the first, every request lands on
    // the engine that cached the prefix, and that engine finds it cached.
    let sequential = client_run(
        &python,
        &base,
        "shared_prefix",
        json!({"prefixes": 1, "requests": 8, "prefix_words": 300, "concurrency": 1}),
    )
    .await;
    assert_eq!(sequential["failed"], 0, "{sequential}");
    wait_until_cached(&gateway, &engines, 8).await;
    let mut per_engine = Vec::new();
    for engine in &engines {
        per_engine.push(fake_requests(engine).await);
    }
    let prefix_requests = |requests: &Vec<Value>| {
        requests
            .iter()
            .filter(|r| r["total_blocks"].as_u64() >= Some(10))
            .cloned()
            .collect::<Vec<_>>()
    };
    let (home, home_requests) = per_engine
        .iter()
        .map(prefix_requests)
        .enumerate()
        .max_by_key(|(_, requests)| requests.len())
        .expect("three engines");
    assert_eq!(
        home_requests.len(),
        8,
        "all shared-prefix requests on one engine: {per_engine:?}"
    );
    let hits = home_requests
        .iter()
        .filter(|r| r["cached_blocks"].as_u64() >= Some(10))
        .count();
    assert!(
        hits >= 7,
        "the engine found the prefix cached: {home_requests:?}"
    );

    // Concurrent traffic on the same prefix: the home engine gets busy, some requests go
    // elsewhere, and those carry a kv.fetch hint naming the home engine's control endpoint.
    let concurrent = client_run(&python, &base, "shared_prefix", json!({"prefixes": 1, "requests": 32, "prefix_words": 300, "concurrency": 16, "max_tokens": 64})).await;
    assert_eq!(concurrent["failed"], 0, "{concurrent}");
    assert_eq!(gateway.settle().await, 0);
    let home_control = PythonEngine::control_endpoint(home as u64 + 1);
    let mut hinted = 0;
    for (index, engine) in engines.iter().enumerate() {
        if index == home {
            continue;
        }
        for request in fake_requests(engine).await {
            let Some(actions) = request["kv_hint"]["actions"].as_array() else {
                continue;
            };
            let fetch = actions.iter().find(|a| a["action_type"] == "kv.fetch");
            if let Some(fetch) = fetch {
                assert_eq!(
                    fetch["payload"]["source_control_endpoint"],
                    home_control.as_str(),
                    "{request}"
                );
                assert!(
                    fetch["payload"]["block_hashes"]
                        .as_array()
                        .is_some_and(|h| !h.is_empty())
                );
                hinted += 1;
            }
        }
    }
    eprintln!(
        "{TEST}: {hits}/8 sequential requests hit the prefix on engine {}; {hinted} kv.fetch hints away from it",
        home + 1
    );
    assert!(
        hinted > 0,
        "no engine away from the prefix got a kv.fetch hint"
    );

    // An engine killed mid-run (once it has taken some of the load): requests that had not
    // started streaming are re-booked, so none of them fails.
    let victim = engines.pop().expect("an engine");
    let victim_id = engines.len() as u64 + 1;
    let victim_stats = format!("{}/_fake/stats", victim.http);
    let killer = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut before = None;
        while Instant::now() < deadline {
            let stats = get(&victim_stats).await.json();
            let requests = stats["requests"].as_u64().unwrap_or(0);
            let start = *before.get_or_insert(requests);
            if requests >= start + 10 {
                drop(victim);
                return requests - start;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the engine to kill never took 10 requests of the load");
    });
    let load = client_run(
        &python,
        &base,
        "load",
        json!({"requests": 240, "concurrency": 12, "stream": true, "max_tokens": 60}),
    )
    .await;
    let served_before_kill = killer.await.expect("the engine was killed");
    eprintln!("{TEST}: an engine killed after {served_before_kill} requests of the load: {load}");
    assert_eq!(load["failed_before_first_chunk"], 0, "{load}");
    assert_eq!(
        load["ok"].as_u64().unwrap_or(0) + load["started_streaming_failed"].as_u64().unwrap_or(0),
        240,
        "{load}"
    );
    let metrics = get(&gateway.url("/metrics")).await.body;
    let retried = worker_metric(&metrics, "kv_router_gateway_retries_total", victim_id);
    assert!(
        retried > 0,
        "requests booked on the killed engine were re-booked: {metrics}"
    );
    assert_eq!(gateway.settle().await, 0, "bookings left after the kill");
}
