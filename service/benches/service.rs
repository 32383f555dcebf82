//! Service benchmarks (a bench binary, outside the default test run):
//!
//! - `select_and_reserve` over loopback HTTP, client in the same process: p50/p99 latency at
//!   concurrency 1 and bookings/s at concurrency 32, for 512- and 8,192-token prompts, on 8
//!   workers whose index holds the prompts' shared prefixes;
//! - ZMQ ingest end to end (engine publisher → SUB → msgpack decode → index): stored blocks/s
//!   with batches of 32 blocks of 16 tokens, from this crate's publisher and from a real libzmq
//!   one (`scripts/pyzmq_engine.py` on pyzmq + msgspec, vLLM's batch layout; needs
//!   `KV_ROUTER_PYTHON`, a Python with `.ci/requirements.txt`, and is skipped without it);
//! - resident memory of a service holding 64 workers × 16,384 cached blocks.
//!
//! `cargo bench -p kv-router-service --bench service [-- booking|ingest|memory]`

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterOptions, RouterSetup, WorkerId};
use indicatif::{ProgressBar, ProgressStyle};
use kv_router_service::SelectionService;
use kv_router_service::engine_events::engine_event::{BlockStored, EngineEvent, EngineEventBatch};
use kv_router_service::engine_events::engine_publisher::{EnginePublisher, encode_batch};
use kv_router_service::engine_events::event_transport::ZmqTransport;
use kv_router_service::engine_events::ingress::{KvEventIngress, NoIngress};
use kv_router_service::engine_events::kv_listener::ListenerOptions;
use kv_router_service::engine_events::zmq_ingress::ZmqIngress;
use kv_router_service::http::json_body::parse_prompt;
use kv_router_service::http::loopback_client::LoopbackClient;
use kv_router_service::serve::{BoundService, ServeOptions};
use kv_router_service::worker_record::{PartitionKey, WorkerRequest};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dynamo_router_catalog as _;

const KVCR: &str = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.5, seed: 7}\n    hints:\n      - type: kv_fetch\n        parameters: {min_additional_blocks: 4}\n";

fn setup() -> RouterSetup {
    let registry = PolicyRegistry::linked().expect("linked policies");
    config::load(
        &ConfigSource::new("bench.yaml", KVCR),
        &registry,
        &ConfigOverrides::default(),
    )
    .expect("valid configuration")
}

/// Token ids of a real vocabulary's size (Llama 3's 128,256), so JSON bodies have real sizes.
const VOCABULARY: u32 = 128_256;

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| (t.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % VOCABULARY)
        .collect()
}

fn worker(id: u64, kv_events: Option<(&str, &str)>) -> WorkerRequest {
    let mut body = json!({
        "worker_id": id, "model_name": "m", "endpoint": format!("http://10.0.0.{id}:8000"),
        "block_size": 16, "router_hint_worker_type": "aggregated",
        "router_hint_source_control_endpoints": {"0": format!("tcp://10.0.0.{id}:23280")},
    });
    if let Some((events, replay)) = kv_events {
        body["kv_events_endpoint"] = json!(events);
        body["replay_endpoint"] = json!(replay);
    }
    serde_json::from_value(body).expect("worker body")
}

async fn start(ingress: Arc<dyn KvEventIngress>) -> (Arc<SelectionService>, SocketAddr) {
    let service = Arc::new(SelectionService::new(
        setup(),
        RouterOptions::default(),
        ingress,
    ));
    let options = ServeOptions {
        host: "127.0.0.1".to_owned(),
        port: 0,
    };
    let bound = BoundService::bind(Arc::clone(&service), &options)
        .await
        .expect("bind");
    let address = bound.local_addr().expect("address");
    tokio::spawn(bound.run(std::future::pending()));
    (service, address)
}

/// Stores `prompt`'s first `blocks` blocks on `worker` directly in the partition's index.
fn store(service: &SelectionService, worker_id: u64, prompt: &[u32], blocks: usize, event_id: u64) {
    let partition = service
        .partition(&PartitionKey {
            model_name: "m".to_owned(),
            routing_group: "default".to_owned(),
        })
        .expect("partition");
    let local = block_hashes(&prompt[..blocks * 16], 16);
    let engine =
        (0..blocks as u64).map(|i| EngineBlockHash((worker_id << 40) + event_id * 100_000 + i));
    let event = RouterEvent::new(
        WorkerId::new(worker_id, 0),
        event_id,
        KvCacheEventData::stored(None, engine.zip(local)),
    );
    partition.router.apply_event(&event);
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} {bar:30} {pos}/{len}").expect("template"),
    );
    bar.set_message(what.to_owned());
    bar
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn booking(tokens_per_prompt: usize) {
    let (service, address) = start(Arc::new(NoIngress)).await;
    for id in 1..=8 {
        service.upsert_worker(worker(id, None)).expect("register");
    }
    // Eight system prompts, each cached (three quarters of it) on two workers.
    let prompts: Vec<Vec<u32>> = (0..8).map(|i| tokens(tokens_per_prompt, i)).collect();
    for (i, prompt) in prompts.iter().enumerate() {
        let blocks = tokens_per_prompt / 16 * 3 / 4;
        store(&service, i as u64 % 8 + 1, prompt, blocks, 0);
        store(&service, (i as u64 + 3) % 8 + 1, prompt, blocks, 0);
    }
    let bodies: Vec<Vec<u8>> = prompts
        .iter()
        .map(|prompt| {
            serde_json::to_vec(&json!({"model_name": "m", "token_ids": prompt})).expect("json")
        })
        .collect();

    // Where a booking's time goes, in process: parsing the body (as the service's `/select_and_reserve`
    // reads it), and the booking itself.
    let parse_runs = 500;
    let started = Instant::now();
    for i in 0..parse_runs {
        let request: kv_router_service::selection::selection_request::SelectRequest =
            parse_prompt(&bodies[i % bodies.len()]).expect("body");
        std::hint::black_box(request);
    }
    let parse = started.elapsed() / parse_runs as u32;
    let started = Instant::now();
    for i in 0..parse_runs {
        let mut request: kv_router_service::selection::selection_request::SelectRequest =
            parse_prompt(&bodies[i % bodies.len()]).expect("body");
        request.selection_id = Some(format!("inproc-{tokens_per_prompt}-{i}"));
        let answer = service.select_and_reserve(request).expect("booking");
        std::hint::black_box(serde_json::to_vec(&answer).expect("answer"));
    }
    let whole = started.elapsed() / parse_runs as u32;
    println!(
        "select_and_reserve {tokens_per_prompt:>5} tokens ({:.1} KB bodies), in process: parse {:.1} µs, parse + book + answer {:.1} µs",
        bodies[0].len() as f64 / 1000.0,
        parse.as_secs_f64() * 1e6,
        whole.as_secs_f64() * 1e6
    );

    // Concurrency 1: latency.
    let requests = if tokens_per_prompt > 1024 {
        2_000
    } else {
        5_000
    };
    let mut client = LoopbackClient::connect(address).await.expect("connect");
    for body in bodies.iter().take(50) {
        client
            .post("/select_and_reserve", body)
            .await
            .expect("warm up");
    }
    let progress = bar(requests as u64, &format!("c=1, {tokens_per_prompt} tokens"));
    let mut latencies = Vec::with_capacity(requests);
    for i in 0..requests {
        let start = Instant::now();
        let answer = client
            .post("/select_and_reserve", &bodies[i % bodies.len()])
            .await
            .expect("book");
        latencies.push(start.elapsed());
        assert_eq!(answer.status, 200, "{}", answer.text());
        progress.inc(1);
    }
    progress.finish_and_clear();
    latencies.sort_unstable();
    println!(
        "select_and_reserve {tokens_per_prompt:>5} tokens, concurrency 1: p50 {:>6.1} µs, p99 {:>6.1} µs ({requests} bookings)",
        percentile(&latencies, 0.5).as_secs_f64() * 1e6,
        percentile(&latencies, 0.99).as_secs_f64() * 1e6,
    );

    // Concurrency 32: throughput over a fixed number of bookings.
    let per_client = if tokens_per_prompt > 1024 { 400 } else { 1_500 };
    let bodies = Arc::new(bodies);
    let progress = bar(
        32 * per_client as u64,
        &format!("c=32, {tokens_per_prompt} tokens"),
    );
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..32 {
        let bodies = Arc::clone(&bodies);
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = LoopbackClient::connect(address).await.expect("connect");
            for i in 0..per_client {
                let answer = client
                    .post("/select_and_reserve", &bodies[(c + i) % bodies.len()])
                    .await
                    .expect("book");
                assert_eq!(answer.status, 200);
                progress.inc(1);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let elapsed = started.elapsed();
    progress.finish_and_clear();
    println!(
        "select_and_reserve {tokens_per_prompt:>5} tokens, concurrency 32: {:>8.0} bookings/s ({} bookings in {:.2} s)",
        (32 * per_client) as f64 / elapsed.as_secs_f64(),
        32 * per_client,
        elapsed.as_secs_f64()
    );
}

async fn ingest() {
    const BATCHES: usize = 20_000;
    const BLOCKS: usize = 32;
    let prompt = tokens(BATCHES * BLOCKS * 16, 99);
    let payloads: Vec<Vec<u8>> = (0..BATCHES)
        .map(|b| {
            let first = b * BLOCKS;
            encode_batch(&EngineEventBatch {
                ts: b as f64,
                events: vec![EngineEvent::BlockStored(BlockStored {
                    block_hashes: (first..first + BLOCKS).map(|i| i as u64 + 1).collect(),
                    parent_block_hash: (first > 0).then_some(first as u64),
                    token_ids: prompt[first * 16..(first + BLOCKS) * 16].to_vec(),
                    block_size: 16,
                    ..BlockStored::default()
                })],
                data_parallel_rank: None,
            })
        })
        .collect();
    // The in-process figures come first: the sockets below are not left idle meanwhile.
    decode_and_index(&payloads);
    compare_decoders(&payloads);
    let ingress = ZmqIngress::new(Arc::new(ZmqTransport), ListenerOptions::default());
    let stats = ingress.stats();
    let (service, _) = start(Arc::new(ingress)).await;
    let mut engine = EnginePublisher::bind("127.0.0.1").await.expect("engine");
    service
        .upsert_worker(worker(
            1,
            Some((engine.events_endpoint(), engine.replay_endpoint())),
        ))
        .expect("register");
    // The subscription is live once an empty batch gets through.
    let empty = encode_batch(&EngineEventBatch {
        ts: 0.0,
        events: Vec::new(),
        data_parallel_rank: None,
    });
    while stats.batches.load(Ordering::Relaxed) == 0 {
        engine.publish(empty.clone()).await.expect("publish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let partition = service
        .partition(&PartitionKey {
            model_name: "m".to_owned(),
            routing_group: "default".to_owned(),
        })
        .expect("partition");
    let progress = bar((BATCHES * BLOCKS) as u64, "ZMQ ingest, blocks");
    // A PUB socket drops what a subscriber's queue cannot take (as libzmq does at its high-water
    // mark), so the engine keeps at most WINDOW batches in flight: the figure is what the
    // listener sustains, not what the socket drops.
    const WINDOW: u64 = 64;
    let received =
        || stats.batches.load(Ordering::Relaxed) + stats.replayed_batches.load(Ordering::Relaxed);
    let base = received();
    let started = Instant::now();
    for (sent, payload) in payloads.into_iter().enumerate() {
        while sent as u64 >= received() - base + WINDOW {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        engine.publish(payload).await.expect("publish");
    }
    let target = BATCHES * BLOCKS;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let held = partition
            .router
            .worker_index_state(WorkerId::new(1, 0))
            .map_or(0, |state| state.blocks);
        progress.set_position(held as u64);
        if held >= target || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    progress.finish_and_clear();
    let held = partition
        .router
        .worker_index_state(WorkerId::new(1, 0))
        .map_or(0, |state| state.blocks);
    println!(
        "ZMQ ingest (32 blocks × 16 tokens a batch): {:>10.0} stored blocks/s ({held}/{target} blocks in {:.2} s, {} replayed batches)",
        held as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        stats.replayed_batches.load(Ordering::Relaxed),
    );
}

/// The same batches decoded, converted and indexed in process (no sockets): the ceiling of
/// the listener's work per batch.
fn decode_and_index(payloads: &[Vec<u8>]) {
    let service = SelectionService::new(setup(), RouterOptions::default(), Arc::new(NoIngress));
    service.upsert_worker(worker(1, None)).expect("register");
    let partition = service
        .partition(&PartitionKey {
            model_name: "m".to_owned(),
            routing_group: "default".to_owned(),
        })
        .expect("partition");
    let started = Instant::now();
    let mut decode = Duration::ZERO;
    for (seq, payload) in payloads.iter().enumerate() {
        let t = Instant::now();
        let batch = kv_router_service::engine_events::event_batch_reader::read_event_batch(payload)
            .expect("batch");
        decode += t.elapsed();
        let converted = kv_router_service::engine_events::event_conversion::convert_batch(
            &batch, seq as u64, 1, 0, 16,
        );
        partition.router.apply_event_batch(&converted.events);
    }
    let elapsed = started.elapsed();
    let blocks = partition
        .router
        .worker_index_state(WorkerId::new(1, 0))
        .map_or(0, |state| state.blocks);
    println!(
        "decode + hash + index in process: {:>10.0} stored blocks/s ({blocks} blocks in {:.2} s, msgpack decode {:.0}% of it)",
        blocks as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        100.0 * decode.as_secs_f64() / elapsed.as_secs_f64()
    );
}

/// The batches decoded alone, by the direct reader the listener uses and by the value-tree
/// decoder, in turns (three each): decoded blocks per second.
fn compare_decoders(payloads: &[Vec<u8>]) {
    type Decoder = fn(
        &[u8],
    ) -> Result<
        kv_router_service::engine_events::engine_event::EngineEventBatch,
        kv_router_service::engine_events::msgpack_batch::BatchDecodeError,
    >;
    let decoders: [(&str, Decoder); 2] = [
        (
            "direct reader",
            kv_router_service::engine_events::event_batch_reader::read_event_batch,
        ),
        (
            "value tree",
            kv_router_service::engine_events::msgpack_batch::decode_event_batch,
        ),
    ];
    let mut rates = [Vec::new(), Vec::new()];
    for _ in 0..3 {
        for (index, (_, decode)) in decoders.iter().enumerate() {
            let started = Instant::now();
            let mut blocks = 0usize;
            for payload in payloads {
                let batch = decode(payload).expect("batch");
                for event in &batch.events {
                    if let EngineEvent::BlockStored(stored) = event {
                        blocks += stored.block_hashes.len();
                    }
                }
                std::hint::black_box(batch);
            }
            rates[index].push(blocks as f64 / started.elapsed().as_secs_f64());
        }
    }
    for ((name, _), rates) in decoders.iter().zip(&rates) {
        let mut sorted = rates.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "msgpack decode alone, {name}: {:>10.0} blocks/s (median of 3; {:.0}–{:.0})",
            sorted[1], sorted[0], sorted[2]
        );
    }
}

/// The Python engine of `scripts/pyzmq_engine.py`, one JSON line per command and answer;
/// killed when dropped.
struct PythonEngine {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl PythonEngine {
    fn start(python: &str) -> Result<(Self, serde_json::Value), String> {
        use std::process::{Command, Stdio};
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pyzmq_engine.py");
        let mut child = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot run {python}: {error}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("no pipes to the Python engine".to_owned());
        };
        let mut engine = Self {
            child,
            stdin,
            stdout: std::io::BufReader::new(stdout),
        };
        let endpoints = engine.read().map_err(|error| {
            format!(
                "the Python engine did not start: {error}; does {python} have pyzmq and msgspec?"
            )
        })?;
        Ok((engine, endpoints))
    }

    fn send(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{line}").expect("write to the Python engine");
    }

    fn read(&mut self) -> Result<serde_json::Value, String> {
        use std::io::BufRead;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|error| error.to_string())?;
        serde_json::from_str(&line).map_err(|error| format!("{error}: {line:?}"))
    }
}

impl Drop for PythonEngine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ingest from a real libzmq publisher: pyzmq + msgspec encode 20,000 batches of vLLM's
/// positional layout (one `BlockStored` of 32 blocks × 16 tokens each) beforehand, then
/// publish them at once; the figure is from the first publish to the last block indexed.
async fn pyzmq_ingest() {
    const BATCHES: usize = 20_000;
    const BLOCKS: usize = 32;
    let Ok(python) = std::env::var("KV_ROUTER_PYTHON") else {
        println!(
            "ZMQ ingest from pyzmq: skipped (set KV_ROUTER_PYTHON to a Python with pyzmq and msgspec, e.g. target/ci-venv/bin/python after `pip install -r .ci/requirements.txt`)"
        );
        return;
    };
    let (mut engine, endpoints) = match PythonEngine::start(&python) {
        Ok(started) => started,
        Err(reason) => {
            println!("ZMQ ingest from pyzmq: skipped ({reason})");
            return;
        }
    };
    let ingress = ZmqIngress::new(Arc::new(ZmqTransport), ListenerOptions::default());
    let stats = ingress.stats();
    let (service, _) = start(Arc::new(ingress)).await;
    let events = endpoints["events"].as_str().expect("events endpoint");
    let replay = endpoints["replay"].as_str().expect("replay endpoint");
    service
        .upsert_worker(worker(1, Some((events, replay))))
        .expect("register");
    // The subscription is live once an empty batch gets through.
    while stats.batches.load(Ordering::Relaxed) == 0 {
        engine.send(r#"{"op": "empty"}"#);
        engine.read().expect("answer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.send(
        &json!({"op": "blast", "batches": BATCHES, "blocks": BLOCKS, "block_size": 16,
                "first_hash": 1_000_000, "seed": 99})
        .to_string(),
    );
    engine.read().expect("encoded");
    let partition = service
        .partition(&PartitionKey {
            model_name: "m".to_owned(),
            routing_group: "default".to_owned(),
        })
        .expect("partition");
    let target = BATCHES * BLOCKS;
    let progress = bar(target as u64, "ZMQ ingest from pyzmq, blocks");
    let started = Instant::now();
    engine.send("go");
    let deadline = started + Duration::from_secs(60);
    let held = loop {
        let held = partition
            .router
            .worker_index_state(WorkerId::new(1, 0))
            .map_or(0, |state| state.blocks);
        progress.set_position(held as u64);
        if held >= target || Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let elapsed = started.elapsed();
    progress.finish_and_clear();
    let sent = engine.read().expect("sent");
    println!(
        "ZMQ ingest from pyzmq (vLLM layout, 32 blocks × 16 tokens a batch): {:>10.0} stored blocks/s ({held}/{target} blocks in {:.2} s; Python published in {:.2} s; {} replayed batches)",
        held as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        sent["seconds"].as_f64().unwrap_or(f64::NAN),
        stats.replayed_batches.load(Ordering::Relaxed),
    );
}

fn resident_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| {
                    line.split_whitespace()
                        .nth(1)
                        .and_then(|kb| kb.parse::<f64>().ok())
                })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn memory() {
    const WORKERS: u64 = 64;
    const BLOCKS: usize = 16_384;
    let before = resident_mb();
    let (service, _) = start(Arc::new(NoIngress)).await;
    for id in 1..=WORKERS {
        service.upsert_worker(worker(id, None)).expect("register");
    }
    let partition = service
        .partition(&PartitionKey {
            model_name: "m".to_owned(),
            routing_group: "default".to_owned(),
        })
        .expect("partition");
    let progress = bar(WORKERS, "64 workers × 16,384 blocks");
    for id in 1..=WORKERS {
        // Each worker: its own 16,384-block chain (no sharing: the worst case), in events of 32.
        let prompt = tokens(BLOCKS * 16, id as u32 * 7919);
        let local = block_hashes(&prompt, 16);
        let events: Vec<RouterEvent> = local
            .chunks(32)
            .enumerate()
            .map(|(chunk, hashes)| {
                let first = (chunk * 32) as u64;
                let engine = |i: u64| EngineBlockHash((id << 32) + i + 1);
                RouterEvent::new(
                    WorkerId::new(id, 0),
                    chunk as u64,
                    KvCacheEventData::stored(
                        (first > 0).then(|| engine(first - 1)),
                        (first..).map(engine).zip(hashes.iter().copied()),
                    ),
                )
            })
            .collect();
        partition.router.apply_event_batch(&events);
        progress.inc(1);
    }
    progress.finish_and_clear();
    let held: usize = (1..=WORKERS)
        .filter_map(|id| partition.router.worker_index_state(WorkerId::new(id, 0)))
        .map(|state| state.blocks)
        .sum();
    let after = resident_mb();
    println!(
        "memory: {held} cached blocks on {WORKERS} workers: resident {after:.1} MB (process before the service: {before:.1} MB)"
    );
}

fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wants = |part: &str| which.is_empty() || which.iter().any(|arg| arg == part);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        if wants("memory") {
            memory().await;
        }
        if wants("booking") {
            booking(512).await;
            booking(8192).await;
        }
        if wants("ingest") {
            ingest().await;
            pyzmq_ingest().await;
        }
    });
}
