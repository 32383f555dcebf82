//! Replica figures for BENCHMARKS.md (run with `cargo bench -p kv-router-service --bench
//! replicas`; everything on 127.0.0.1):
//! - warm-start time of a service holding 64 workers × 16,384 cached blocks, from a peer's
//!   `GET /workers` + `GET /dump` and from a snapshot file;
//! - booking throughput (`select_and_reserve` + `DELETE`, 8 clients) against one replica and
//!   spread round-robin over three synced replicas;
//! - sync lag: from sending a booking to one replica until another holds it, p50/p99.

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, LocalBlockHash, RouterEvent};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterOptions, WorkerId};
use dynamo_router_catalog as _;
use indicatif::ProgressBar;
use kv_router_service::SelectionService;
use kv_router_service::engine_events::ingress::NoIngress;
use kv_router_service::http::loopback_client::LoopbackClient;
use kv_router_service::replica::warm_start::{PeerLimits, warm_start};
use kv_router_service::replica::{ReplicaOptions, ReplicaSync};
use kv_router_service::selection::snapshot::RouterState;
use kv_router_service::serve::{BoundService, ServeOptions};
use kv_router_service::worker_record::{PartitionKey, WorkerRequest};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORKERS: u64 = 64;
const BLOCKS: u64 = 16_384;
const CONTEXTS: u64 = 8;
const YAML: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n";

fn service() -> Arc<SelectionService> {
    let registry = PolicyRegistry::linked().expect("linked policies");
    let source = ConfigSource::new("bench.yaml", YAML);
    let setup = config::load(&source, &registry, &ConfigOverrides::default())
        .unwrap_or_else(|error| panic!("{}", error.render(YAML)));
    Arc::new(SelectionService::new(
        setup,
        RouterOptions::default(),
        Arc::new(NoIngress),
    ))
}

async fn serve(service: &Arc<SelectionService>) -> SocketAddr {
    let options = ServeOptions {
        host: "127.0.0.1".to_owned(),
        port: 0,
    };
    let bound = BoundService::bind(Arc::clone(service), &options)
        .await
        .expect("bind");
    let address = bound.local_addr().expect("address");
    tokio::spawn(bound.run(std::future::pending()));
    address
}

fn register(service: &SelectionService, workers: u64) {
    for id in 1..=workers {
        let request: WorkerRequest = serde_json::from_value(json!({
            "worker_id": id, "model_name": "m", "routing_group": "default",
            "endpoint": format!("http://127.0.0.1:{}", 9000 + id), "block_size": 16,
            "data_parallel_size": 1,
        }))
        .expect("a worker body");
        service.upsert_worker(request).expect("registered");
    }
}

/// 64 workers, each caching one of 8 contexts of 16,384 blocks.
fn filled() -> Arc<SelectionService> {
    let service = service();
    register(&service, WORKERS);
    let partition = service
        .partition(&PartitionKey {
            model_name: "m".into(),
            routing_group: "default".into(),
        })
        .expect("the partition");
    for id in 1..=WORKERS {
        let context = id % CONTEXTS;
        let blocks = (0..BLOCKS).map(|b| {
            let hash = (context << 32) | b;
            (EngineBlockHash(hash ^ 0x5bd1_e995), LocalBlockHash(hash))
        });
        let event = RouterEvent::new(
            WorkerId::new(id, 0),
            0,
            KvCacheEventData::stored(None, blocks),
        );
        partition.router.apply_event(&event);
    }
    service
}

async fn warm_start_figures() {
    let source = filled();
    let address = serve(&source).await;
    for run in 0..2 {
        let target = service();
        let started = Instant::now();
        let kind = warm_start(
            &target,
            &[format!("http://{address}")],
            PeerLimits::default(),
        )
        .await;
        println!(
            "warm start from a peer (run {run}): {kind} [{:.2} s]",
            started.elapsed().as_secs_f64()
        );
    }
    let path =
        std::env::temp_dir().join(format!("kv-router-bench-{}.snapshot", std::process::id()));
    let started = Instant::now();
    RouterState::capture(&source)
        .expect("capture")
        .write(&path)
        .expect("write");
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "snapshot written in {:.2} s ({:.1} MB)",
        started.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    for run in 0..2 {
        let target = service();
        let started = Instant::now();
        let state = RouterState::read(&path).expect("read").expect("a snapshot");
        let restored = state.apply(&target).expect("apply");
        println!(
            "warm start from a snapshot (run {run}): {} workers, {} blocks in {:.2} s",
            restored.workers,
            restored.blocks,
            started.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_file(&path);
}

struct Cluster {
    addresses: Vec<SocketAddr>,
    services: Vec<Arc<SelectionService>>,
    _syncs: Vec<Arc<ReplicaSync>>,
}

async fn cluster(replicas: usize) -> Cluster {
    let mut services = Vec::new();
    let mut syncs = Vec::new();
    let mut addresses = Vec::new();
    for _ in 0..replicas {
        let service = service();
        register(&service, 8);
        let options = ReplicaOptions::new("tcp://127.0.0.1:0", Vec::new());
        syncs.push(ReplicaSync::start(&service, &options).await.expect("sync"));
        addresses.push(serve(&service).await);
        services.push(service);
    }
    for (i, sync) in syncs.iter().enumerate() {
        for (j, peer) in syncs.iter().enumerate() {
            if i != j {
                sync.peers().add(peer.endpoint()).expect("peer");
            }
        }
    }
    while !syncs
        .iter()
        .all(|s| s.peers().statuses().iter().all(|p| p.connected))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Cluster {
        addresses,
        services,
        _syncs: syncs,
    }
}

fn prompt(n: usize) -> Vec<u32> {
    (0..512u32)
        .map(|t| t.wrapping_mul(2_654_435_761) ^ (n as u32 % 64))
        .collect()
}

async fn throughput(replicas: usize, total: usize) {
    let cluster = cluster(replicas).await;
    let clients = 8;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let address = cluster.addresses[c % replicas];
        tasks.push(tokio::spawn(async move {
            let mut client = LoopbackClient::connect(address).await.expect("connect");
            for n in (c..total).step_by(clients) {
                let id = format!("b{n}");
                let body = json!({"model_name": "m", "selection_id": id, "token_ids": prompt(n)});
                let booked = client
                    .post_json("/select_and_reserve", &body)
                    .await
                    .expect("book");
                assert_eq!(booked.status, 200, "{}", booked.text());
                client
                    .delete(&format!("/reservations/{id}"))
                    .await
                    .expect("free");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    println!("{replicas} replica(s), 8 clients, 512-token prompts: {rate:.0} bookings+frees/s");
}

async fn sync_lag(samples: usize) {
    let cluster = cluster(2).await;
    let key = PartitionKey {
        model_name: "m".into(),
        routing_group: "default".into(),
    };
    let peer = cluster.services[1].partition(&key).expect("partition");
    let mut client = LoopbackClient::connect(cluster.addresses[0])
        .await
        .expect("connect");
    let mut lags = Vec::with_capacity(samples);
    let bar = ProgressBar::new(samples as u64);
    for n in 0..samples {
        let id = format!("lag{n}");
        let body = json!({"model_name": "m", "selection_id": id, "token_ids": prompt(n)});
        let sent = Instant::now();
        client
            .post_json("/select_and_reserve", &body)
            .await
            .expect("book");
        let answered = sent.elapsed();
        while peer.router.peer_bookings() == 0 {
            tokio::task::yield_now().await;
            assert!(
                sent.elapsed() < Duration::from_secs(5),
                "the peer never saw booking {n}"
            );
        }
        lags.push((sent.elapsed(), answered));
        client
            .delete(&format!("/reservations/{id}"))
            .await
            .expect("free");
        while peer.router.peer_bookings() != 0 {
            tokio::task::yield_now().await;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut held: Vec<Duration> = lags.iter().map(|(held, _)| *held).collect();
    let mut answered: Vec<Duration> = lags.iter().map(|(_, answered)| *answered).collect();
    let mut behind: Vec<Duration> = lags
        .iter()
        .map(|(held, answered)| held.saturating_sub(*answered))
        .collect();
    let at = |values: &mut Vec<Duration>, q: f64| {
        values.sort_unstable();
        values[((values.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
    };
    println!(
        "sync lag over {samples} bookings, from sending select_and_reserve: answered p50 {:.0} / \
         p99 {:.0} µs; held by the peer p50 {:.0} / p99 {:.0} µs; behind the answer p50 {:.0} / \
         p99 {:.0} µs",
        at(&mut answered, 0.5),
        at(&mut answered, 0.99),
        at(&mut held, 0.5),
        at(&mut held, 0.99),
        at(&mut behind, 0.5),
        at(&mut behind, 0.99),
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // `cargo bench -p kv-router-service --bench replicas -- lag` runs only the matching parts.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |part: &str| only.is_empty() || only.iter().any(|o| part.contains(o.as_str()));
    runtime.block_on(async {
        if run("warm-start") {
            warm_start_figures().await;
        }
        if run("throughput") {
            throughput(1, 20_000).await;
            throughput(3, 20_000).await;
        }
        if run("lag") {
            sync_lag(2_000).await;
        }
    });
}
