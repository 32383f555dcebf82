//! NATS figures for BENCHMARKS.md (run with `cargo bench -p kv-router-service --bench nats`;
//! a `nats-server` on 127.0.0.1 with JetStream on a temp dir, as the tests start it):
//! - ingest end to end: engines publish KV events (upstream's envelopes) → JetStream → the
//!   router's durable consumer → the index holds every block; blocks/s, with publishers
//!   waiting for each JetStream acknowledgement and publishing on core NATS as upstream does;
//! - replica sync lag, NATS against the ZMQ mesh: from sending a booking to one replica until
//!   another holds it, p50/p99.
//!
//! Without `nats-server` (PATH, /usr/sbin or `KV_ROUTER_NATS_SERVER`) it prints why and exits.

#[path = "../tests/common/nats_server.rs"]
mod nats_server;

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, LocalBlockHash, RouterEvent};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterOptions, WorkerId};
use dynamo_router_catalog as _;
use kv_router_service::SelectionService;
use kv_router_service::engine_events::ingress::{KvEventIngress, NoIngress};
use kv_router_service::http::loopback_client::LoopbackClient;
use kv_router_service::nats::{
    NatsIngress, NatsKvPublisher, NatsOptions, NatsReplicaOptions, NatsReplicaSync,
};
use kv_router_service::replica::{ReplicaOptions, ReplicaSync};
use kv_router_service::serve::{BoundService, ServeOptions};
use kv_router_service::worker_record::{PartitionKey, WorkerRequest};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const YAML: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: dynamo-default-cost-fn\n    hints: []\n";
const ENGINES: u64 = 8;

fn service(ingress: Arc<dyn KvEventIngress>) -> Arc<SelectionService> {
    let registry = PolicyRegistry::linked().expect("linked policies");
    let source = ConfigSource::new("bench.yaml", YAML);
    let setup = config::load(&source, &registry, &ConfigOverrides::default())
        .unwrap_or_else(|error| panic!("{}", error.render(YAML)));
    Arc::new(SelectionService::new(
        setup,
        RouterOptions::default(),
        ingress,
    ))
}

fn key() -> PartitionKey {
    PartitionKey {
        model_name: "m".into(),
        routing_group: "default".into(),
    }
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

/// Engine `engine`'s `n`th event: `blocks` new blocks.
fn event(engine: u64, n: u64, blocks: u64) -> RouterEvent {
    let stored = (0..blocks).map(|b| {
        let hash = (engine << 48) | (n << 8) | b;
        (EngineBlockHash(hash | 1 << 63), LocalBlockHash(hash))
    });
    RouterEvent::new(
        WorkerId::new(engine, 0),
        n,
        KvCacheEventData::stored(None, stored),
    )
}

/// `ENGINES` engines publish `envelopes` envelopes of `events` events of `blocks` blocks each;
/// the time until the index holds them all.
async fn ingest(url: &str, namespace: &str, core: bool, envelopes: u64, events: u64, blocks: u64) {
    let mut options = NatsOptions::new(url, format!("bench-{namespace}"));
    options.namespace = namespace.to_owned();
    let ingress = NatsIngress::start(options).await.expect("ingress");
    let service = service(Arc::clone(&ingress) as _);
    register(&service, ENGINES);
    let partition = service.partition(&key()).expect("partition");
    let mut publishers = Vec::new();
    for engine in 1..=ENGINES {
        publishers.push(
            NatsKvPublisher::connect(url, namespace, "backend", "generate", engine)
                .await
                .expect("publisher"),
        );
    }
    let total = ENGINES * envelopes * events * blocks;
    let stored_before = stream_messages(url, &ingress).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, publisher) in publishers.into_iter().enumerate() {
        let engine = i as u64 + 1;
        tasks.push(tokio::spawn(async move {
            for envelope in 0..envelopes {
                let batch: Vec<RouterEvent> = (0..events)
                    .map(|e| event(engine, envelope * events + e, blocks))
                    .collect();
                if core {
                    let (_, bytes) = publisher.envelope(&batch).expect("encode");
                    publisher.publish_core(bytes).await.expect("publish");
                } else {
                    publisher.publish(&batch).await.expect("publish");
                }
            }
            publisher
        }));
    }
    // The publishers stay connected until the index is complete: an engine does not close
    // its connection after a burst.
    let mut connected = Vec::new();
    for task in tasks {
        connected.push(task.await.expect("publisher"));
    }
    let published = started.elapsed();
    let held = || {
        (1..=ENGINES)
            .filter_map(|engine| {
                partition
                    .router
                    .worker_index_state(WorkerId::new(engine, 0))
            })
            .map(|state| state.blocks as u64)
            .sum::<u64>()
    };
    // Core publishes are not acknowledged: the server may drop some under a burst, so stop
    // once nothing has arrived for 2 s and say how many did.
    let (mut last, mut last_change) = (0, Instant::now());
    loop {
        let now = held();
        if now >= total || last_change.elapsed() > Duration::from_secs(2) {
            break;
        }
        if now != last {
            (last, last_change) = (now, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let arrived = held();
    drop(connected);
    let applied = if arrived >= total {
        started.elapsed()
    } else {
        last_change.duration_since(started)
    };
    let stats = ingress.stats();
    let stored_in_stream = stream_messages(url, &ingress).await - stored_before;
    println!(
        "  where blocks went: {} envelopes published, {stored_in_stream} stored in the stream, {} read by the consumer; {} ranks started over after a gap in their event ids, {} duplicates",
        ENGINES * envelopes,
        stats.messages.load(std::sync::atomic::Ordering::Relaxed),
        stats.gaps.load(std::sync::atomic::Ordering::Relaxed),
        stats.duplicates.load(std::sync::atomic::Ordering::Relaxed),
    );
    println!(
        "ingest through NATS ({}): {ENGINES} engines × {envelopes} envelopes × {events} events × {blocks} blocks = {total} blocks: published in {:.2} s, {arrived} applied in {:.2} s: {:.0} blocks/s ({:.0} events/s) end to end",
        if core {
            "core NATS publish, as upstream"
        } else {
            "JetStream publish, each acknowledged"
        },
        published.as_secs_f64(),
        applied.as_secs_f64(),
        arrived as f64 / applied.as_secs_f64(),
        (arrived / blocks) as f64 / applied.as_secs_f64(),
    );
}

/// The messages the ingress's stream holds now.
async fn stream_messages(url: &str, ingress: &NatsIngress) -> u64 {
    let client = async_nats::connect(url).await.expect("connect");
    let mut stream = async_nats::jetstream::new(client)
        .get_stream(&ingress.options().stream)
        .await
        .expect("stream");
    stream.info().await.expect("stream info").state.messages
}

fn prompt(n: usize) -> Vec<u32> {
    (0..512u32)
        .map(|t| t.wrapping_mul(2_654_435_761) ^ (n as u32 % 64))
        .collect()
}

/// From sending a booking to `addresses[0]` until `peer` holds it, `samples` times.
async fn lag(label: &str, address: SocketAddr, peer: &SelectionService, samples: usize) {
    let peer = peer.partition(&key()).expect("partition");
    let mut client = LoopbackClient::connect(address).await.expect("connect");
    let mut held = Vec::with_capacity(samples);
    let mut behind = Vec::with_capacity(samples);
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
        held.push(sent.elapsed());
        behind.push(sent.elapsed().saturating_sub(answered));
        client
            .delete(&format!("/reservations/{id}"))
            .await
            .expect("free");
        while peer.router.peer_bookings() != 0 {
            tokio::task::yield_now().await;
        }
    }
    let at = |values: &mut Vec<Duration>, q: f64| {
        values.sort_unstable();
        values[((values.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
    };
    println!(
        "sync lag, {label}, {samples} bookings: held by the peer p50 {:.0} / p99 {:.0} µs after \
         sending select_and_reserve; behind the answer p50 {:.0} / p99 {:.0} µs",
        at(&mut held, 0.5),
        at(&mut held, 0.99),
        at(&mut behind, 0.5),
        at(&mut behind, 0.99),
    );
}

async fn nats_lag(url: &str, samples: usize) {
    let mut services = Vec::new();
    let mut syncs = Vec::new();
    for _ in 0..2 {
        let service = service(Arc::new(NoIngress));
        register(&service, 8);
        let mut options = NatsReplicaOptions::new(url);
        options.first_answer_wait = Duration::from_millis(200);
        let sync = NatsReplicaSync::start(&service, &options)
            .await
            .expect("sync");
        sync.warm_start(None).await;
        syncs.push(sync);
        services.push(service);
    }
    let address = serve(&services[0]).await;
    lag("NATS (core subject)", address, &services[1], samples).await;
}

async fn zmq_lag(samples: usize) {
    let mut services = Vec::new();
    let mut syncs = Vec::new();
    for _ in 0..2 {
        let service = service(Arc::new(NoIngress));
        register(&service, 8);
        let options = ReplicaOptions::new("tcp://127.0.0.1:0", Vec::new());
        syncs.push(ReplicaSync::start(&service, &options).await.expect("sync"));
        services.push(service);
    }
    syncs[1]
        .peers()
        .add(syncs[0].endpoint())
        .expect("peer endpoint");
    while !syncs[1].peers().statuses().iter().all(|p| p.connected) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let address = serve(&services[0]).await;
    lag("ZMQ mesh", address, &services[1], samples).await;
}

fn main() {
    let Some(mut server) = nats_server::nats_server_binary()
        .and_then(|_| nats_server::NatsServer::start("nats bench"))
    else {
        println!(
            "skipped: no nats-server on PATH, in /usr/sbin or in KV_ROUTER_NATS_SERVER (apt-get install nats-server)"
        );
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |part: &str| only.is_empty() || only.iter().any(|o| part.contains(o.as_str()));
    let url = server.url();
    runtime.block_on(async {
        if run("ingest") {
            ingest(&url, "bench-acked", false, 200, 16, 8).await;
            ingest(&url, "bench-core", true, 200, 16, 8).await;
        }
        if run("lag") {
            zmq_lag(2_000).await;
            nats_lag(&url, 2_000).await;
        }
    });
    server.stop();
}
