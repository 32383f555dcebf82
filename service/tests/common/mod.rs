//! Shared test helpers: a service on 127.0.0.1 port 0 with a configuration from YAML text.
#![allow(dead_code)]

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterOptions, RouterSetup};
use kv_router_service::SelectionService;
use kv_router_service::engine_events::ingress::{KvEventIngress, NoIngress};
use kv_router_service::http::loopback_client::{HttpAnswer, LoopbackClient};
use kv_router_service::serve::{BoundService, ServeOptions};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;

use dynamo_router_catalog as _;

/// kvcr + kv_fetch on aggregated workers, as in the page.
pub const KVCR_YAML: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.5, seed: 7}\n    hints:\n      - type: kv_fetch\n        parameters: {min_additional_blocks: 1}\n";

/// The default cost function without hints.
pub const DEFAULT_YAML: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n";

/// The router setup of `yaml` with every linked policy.
pub fn setup(yaml: &str) -> RouterSetup {
    let registry = PolicyRegistry::linked().expect("linked policies are consistent");
    let source = ConfigSource::new("test.yaml", yaml);
    match config::load(&source, &registry, &ConfigOverrides::default()) {
        Ok(setup) => setup,
        Err(error) => panic!("{}", error.render(&source.text)),
    }
}

/// A running service; dropping it stops the server.
pub struct TestService {
    pub address: SocketAddr,
    pub service: Arc<SelectionService>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestService {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestService {
    pub async fn client(&self) -> LoopbackClient {
        LoopbackClient::connect(self.address)
            .await
            .expect("connect to the service")
    }
}

/// Starts a service for `yaml` fed by `ingress`, on 127.0.0.1 port 0.
pub async fn start_with(yaml: &str, ingress: Arc<dyn KvEventIngress>) -> TestService {
    start_with_options(yaml, RouterOptions::default(), ingress).await
}

/// [`start_with`], its routers running `options`.
pub async fn start_with_options(
    yaml: &str,
    options: RouterOptions,
    ingress: Arc<dyn KvEventIngress>,
) -> TestService {
    let service = Arc::new(SelectionService::new(setup(yaml), options, ingress));
    let options = ServeOptions {
        host: "127.0.0.1".to_owned(),
        port: 0,
    };
    let bound = BoundService::bind(Arc::clone(&service), &options)
        .await
        .expect("bind 127.0.0.1:0");
    let address = bound.local_addr().expect("bound address");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    TestService {
        address,
        service,
        stop: Some(stop),
    }
}

/// Starts a service for `yaml` that ingests no KV events.
pub async fn start(yaml: &str) -> TestService {
    start_with(yaml, Arc::new(NoIngress)).await
}

/// A worker registration body for `id` on model `m`.
pub fn worker_body(id: u64) -> Value {
    json!({
        "worker_id": id,
        "model_name": "m",
        "routing_group": "default",
        "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
        "block_size": 16,
        "data_parallel_size": 1,
        "router_hint_worker_type": "aggregated",
        "router_hint_source_control_endpoints": {"0": format!("tcp://127.0.0.1:{}", 23000 + id)},
    })
}

/// Registers workers `ids` (each [`worker_body`]) through `client`, expecting 201 for each.
pub async fn register_workers(client: &mut LoopbackClient, ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        expect_status(
            &client
                .post_json("/workers", &worker_body(id))
                .await
                .expect("register"),
            201,
        );
    }
}

/// Releases reservation `id` through `client` (`DELETE /reservations/{id}`), expecting 200.
pub async fn release(client: &mut LoopbackClient, id: &str) {
    expect_status(
        &client
            .delete(&format!("/reservations/{id}"))
            .await
            .expect("free"),
        200,
    );
}

/// `n` tokens of prompt `salt`.
pub fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| t.wrapping_mul(2_654_435_761) ^ salt)
        .collect()
}

/// Asserts the answer's status, showing its body when it differs.
pub fn expect_status(answer: &HttpAnswer, status: u16) {
    assert_eq!(answer.status, status, "body: {}", answer.text());
}

/// Leading blocks of `prompt` that `worker` of model `m` holds, per `/overlap_scores`.
pub async fn device_blocks(client: &mut LoopbackClient, prompt: &[u32], worker: u64) -> u64 {
    let scores = client
        .post_json(
            "/overlap_scores",
            &json!({"model_name": "m", "token_ids": prompt}),
        )
        .await
        .expect("overlap scores")
        .json();
    scores["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|score| score["worker_id"] == json!(worker))
        .and_then(|score| score["device_blocks"].as_u64())
        .unwrap_or(0)
}

/// A worker registration for `id` fed by the engine at `events` / `replay`.
pub fn engine_registration(id: u64, events: &str, replay: &str) -> Value {
    let mut body = worker_body(id);
    body["kv_events_endpoint"] = json!(events);
    body["replay_endpoint"] = json!(replay);
    body
}

/// A service with the kvcr configuration fed by ZMQ, with short timings for tests.
pub async fn start_zmq() -> (
    TestService,
    Arc<kv_router_service::engine_events::ingest_stats::IngestStats>,
) {
    let ingress = kv_router_service::engine_events::zmq_ingress::ZmqIngress::new(
        Arc::new(kv_router_service::engine_events::event_transport::ZmqTransport),
        kv_router_service::engine_events::kv_listener::ListenerOptions {
            idle_reconnect: std::time::Duration::from_millis(300),
            replay_wait: std::time::Duration::from_secs(1),
            retry_pause: std::time::Duration::from_millis(50),
        },
    );
    let stats = ingress.stats();
    (start_with(KVCR_YAML, Arc::new(ingress)).await, stats)
}

/// Asserts that every rank of every partition holds no load.
pub async fn assert_all_loads_zero(client: &mut LoopbackClient) {
    let loads = client.get("/loads").await.expect("loads").json();
    for partition in loads.as_array().expect("partitions") {
        for load in partition["loads"].as_array().expect("loads") {
            assert_eq!(load["active_requests"], json!(0), "{loads}");
            assert_eq!(load["potential_prefill_tokens"], json!(0), "{loads}");
            assert_eq!(load["potential_decode_blocks"], json!(0), "{loads}");
        }
    }
}

/// Puts the first `blocks` blocks of `prompt` in the cache of `worker` (model `m`, 16-token
/// blocks) straight into the partition's index, as its engine would report them.
pub fn cache_blocks(
    service: &TestService,
    worker: dynamo_kv_router::router::WorkerId,
    prompt: &[u32],
    blocks: usize,
) {
    use dynamo_kv_router::kv::{
        EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes, sequence_hashes,
    };
    let key = kv_router_service::worker_record::PartitionKey {
        model_name: "m".to_owned(),
        routing_group: "default".to_owned(),
    };
    let partition = service.service.partition(&key).expect("partition m");
    let local = block_hashes(prompt, 16);
    let seqs = sequence_hashes(&local);
    let stored = (0..blocks).map(|i| (EngineBlockHash(seqs[i].0 ^ 0xE0), local[i]));
    let event = RouterEvent::new(worker, 0, KvCacheEventData::stored(None, stored));
    let _ = partition.router.apply_event(&event);
}
