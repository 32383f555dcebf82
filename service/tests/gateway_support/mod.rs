//! The gateway tests' support: a fake OpenAI engine in the test's process (fast, and told what
//! to do wrong), a gateway over a service on 127.0.0.1 port 0, and a small HTTP client.
#![allow(dead_code)]

pub mod fake_engine;

// The service tests' own helpers (configuration loading, the default configuration).
#[path = "../common/mod.rs"]
mod common;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kv_router_service::SelectionService;
use kv_router_service::gateway::model_tokenizer::ModelTokenizer;
use kv_router_service::gateway::{Gateway, GatewayOptions, ServedModel};
use kv_router_service::worker_record::WorkerRequest;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The model the tests serve.
pub const MODEL: &str = "tiny";

/// The tokenizer fixture's directory.
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-model")
}

/// A gateway and its service, serving until dropped.
pub struct TestGateway {
    pub address: SocketAddr,
    pub service: Arc<SelectionService>,
    pub gateway: Arc<Gateway>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts a gateway for `yaml` (no KV events) with `options`.
pub async fn start_gateway(yaml: &str, options: GatewayOptions) -> TestGateway {
    start_gateway_with(
        yaml,
        options,
        Arc::new(kv_router_service::engine_events::ingress::NoIngress),
    )
    .await
}

/// Starts a gateway for `yaml` fed by `ingress`, with `options`.
pub async fn start_gateway_with(
    yaml: &str,
    options: GatewayOptions,
    ingress: Arc<dyn kv_router_service::engine_events::ingress::KvEventIngress>,
) -> TestGateway {
    let service = Arc::new(SelectionService::new(
        common::setup(yaml),
        dynamo_kv_router::router::RouterOptions::default(),
        ingress,
    ));
    let tokenizer = ModelTokenizer::load(&fixture_dir()).expect("the tokenizer fixture loads");
    let gateway = Gateway::start(
        Arc::clone(&service),
        vec![ServedModel {
            name: MODEL.to_owned(),
            tokenizer: Arc::new(tokenizer),
        }],
        options,
    );
    let bound = kv_router_service::serve::BoundService::bind(
        Arc::clone(&service),
        &kv_router_service::ServeOptions {
            host: "127.0.0.1".to_owned(),
            port: 0,
        },
    )
    .await
    .expect("bind 127.0.0.1:0")
    .with_gateway(Arc::clone(&gateway));
    let address = bound.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    TestGateway {
        address,
        service,
        gateway,
        stop: Some(stop),
    }
}

#[allow(unused_imports)] // not every gateway test uses it
pub use common::DEFAULT_YAML;

impl TestGateway {
    /// Registers worker `id` at `endpoint` for [`MODEL`].
    pub fn register(&self, id: u64, endpoint: &str) {
        let request: WorkerRequest = serde_json::from_value(json!({
            "worker_id": id,
            "model_name": MODEL,
            "endpoint": endpoint,
            "block_size": 16,
        }))
        .expect("a registration");
        self.service.upsert_worker(request).expect("registered");
    }

    /// Active bookings over every worker.
    pub fn active_bookings(&self) -> usize {
        self.service
            .loads(None, None)
            .iter()
            .flat_map(|model| &model.loads)
            .map(|load| load.active_requests)
            .sum()
    }

    /// Waits (at most 10 s) until no booking is active; the count left otherwise.
    pub async fn settle(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let active = self.active_bookings();
            if active == 0 || Instant::now() > deadline {
                return active;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The gateway's base URL.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

/// A whole answer.
pub struct Answer {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|error| panic!("{error}: {}", self.body))
    }

    /// The worker that served it.
    pub fn worker(&self) -> Option<u64> {
        self.headers
            .get("x-kv-router-worker-id")
            .and_then(|value| value.to_str().ok()?.parse().ok())
    }
}

/// A pooled HTTP/1 client.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// POSTs `body` to `url` and reads the whole answer (at most 20 s).
pub async fn post(url: &str, body: &str) -> Answer {
    let request = Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a request");
    send(request).await
}

/// GETs `url`.
pub async fn get(url: &str) -> Answer {
    let request = Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("a request");
    send(request).await
}

async fn send(request: Request<Full<Bytes>>) -> Answer {
    let exchange = async {
        let response = client().request(request).await.expect("an answer");
        let (head, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Answer {
            status: head.status,
            headers: head.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("the gateway answered within 20 s")
}

/// A completion body for `model` with token-id prompt `tokens`.
pub fn completion(tokens: &[u32], stream: bool, max_tokens: u32) -> String {
    json!({"model": MODEL, "prompt": tokens, "stream": stream, "max_tokens": max_tokens})
        .to_string()
}

/// `n` token ids of prompt `salt`.
pub fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 1 + (salt * 7919 + i * 31) % 500)
        .collect()
}

/// The value of `metric` for worker `worker_id` in a `/metrics` text (0 when the series is
/// absent).
pub fn worker_metric(metrics: &str, metric: &str, worker_id: u64) -> u64 {
    let series = format!("{metric}{{worker_id=\"{worker_id}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str())?.parse().ok())
        .unwrap_or(0)
}
