//! Engines publish their KV events through a real `nats-server` (JetStream on a temp dir, on
//! 127.0.0.1) in upstream's subjects and envelopes; three router replicas read them through
//! durable consumers. The server is restarted mid-stream, and so is a replica; at the end
//! every replica's index equals a model of what the engines hold (no block lost, none counted
//! twice), the replicas' `/overlap_scores` and `/loads` agree, events already applied and
//! published again are rejected as duplicates, and garbage is counted and skipped. A
//! consumer given the KV ingest thread applies its events there, and stops with it.
//!
//! Needs `nats-server` on PATH (or `KV_ROUTER_NATS_SERVER`); without it the tests print a
//! `SKIPPED:` line (and fail under CI, whose `.ci/run` installs it).

mod common;

use common::*;
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes};
use dynamo_kv_router::router::WorkerId;
use kv_router_service::nats::{NatsIngress, NatsKvPublisher, NatsOptions};
use kv_router_service::worker_record::PartitionKey;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const WORKERS: u64 = 4;

/// Checks `check` every 50 ms until it holds, for at most `limit`; whether it did.
async fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..limit.as_millis().div_ceil(50) {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

#[path = "common/nats_server.rs"]
mod nats_server;
use nats_server::NatsServer;

struct Replica {
    service: TestService,
    ingress: Arc<NatsIngress>,
}

/// The consumer `consumer` on `url`, retrying quickly, redelivering after `ack_wait`.
fn options(url: &str, consumer: &str, ack_wait: Duration) -> NatsOptions {
    let mut options = NatsOptions::new(url, consumer);
    options.ack_wait = ack_wait;
    options.retry_pause = Duration::from_millis(50);
    options
}

async fn replica(url: &str, consumer: &str) -> Replica {
    let options = options(url, consumer, Duration::from_secs(1));
    let ingress = NatsIngress::start(options).await.expect("NATS ingress");
    let service = start_with(KVCR_YAML, Arc::clone(&ingress) as _).await;
    let mut client = service.client().await;
    register_workers(&mut client, 1..=WORKERS).await;
    Replica { service, ingress }
}

fn key() -> PartitionKey {
    PartitionKey {
        model_name: "m".to_owned(),
        routing_group: "default".to_owned(),
    }
}

/// What each engine holds: per prompt, its tokens and how many leading blocks are cached.
#[derive(Default)]
struct Model {
    prompts: BTreeMap<(u64, u64), (Vec<u32>, usize)>,
    next_event: BTreeMap<u64, u64>,
}

impl Model {
    fn engine_hash(worker: u64, prompt: u64, block: usize) -> EngineBlockHash {
        EngineBlockHash((worker << 48) | (prompt << 16) | block as u64 | 1 << 63)
    }

    fn next_id(&mut self, worker: u64) -> u64 {
        let id = self.next_event.entry(worker).or_insert(0);
        *id += 1;
        *id - 1
    }

    fn store(&mut self, worker: u64, prompt: u64, blocks: usize) -> RouterEvent {
        let tokens = tokens(16 * blocks, (worker as u32) << 20 | prompt as u32);
        let local = block_hashes(&tokens, 16);
        let stored = (0..blocks).map(|i| (Self::engine_hash(worker, prompt, i), local[i]));
        self.prompts.insert((worker, prompt), (tokens, blocks));
        let id = self.next_id(worker);
        RouterEvent::new(
            WorkerId::new(worker, 0),
            id,
            KvCacheEventData::stored(None, stored),
        )
    }

    /// Removes the last two blocks of `prompt`.
    fn remove_tail(&mut self, worker: u64, prompt: u64) -> Option<RouterEvent> {
        let (_, cached) = self.prompts.get_mut(&(worker, prompt))?;
        let keep = cached.saturating_sub(2);
        let removed = (keep..*cached).map(|i| Self::engine_hash(worker, prompt, i));
        let data = KvCacheEventData::removed(removed.collect::<Vec<_>>());
        *cached = keep;
        let id = self.next_id(worker);
        Some(RouterEvent::new(WorkerId::new(worker, 0), id, data))
    }

    fn blocks(&self, worker: u64) -> usize {
        self.prompts
            .iter()
            .filter(|((w, _), _)| *w == worker)
            .map(|(_, (_, cached))| cached)
            .sum()
    }
}

/// Whether `replica`'s index holds exactly what the model says, rank by rank.
fn index_matches(replica: &Replica, model: &Model) -> bool {
    let Some(partition) = replica.service.service.partition(&key()) else {
        return false;
    };
    (1..=WORKERS).all(|worker| {
        partition
            .router
            .worker_index_state(WorkerId::new(worker, 0))
            .is_some_and(|state| {
                state.blocks == model.blocks(worker)
                    && state.last_event_id == model.next_event.get(&worker).map(|next| next - 1)
                    && state.replay_from.is_none()
            })
    })
}

async fn scores(replica: &Replica, prompt: &[u32]) -> Value {
    let mut client = replica.service.client().await;
    let mut answer = client
        .post_json(
            "/overlap_scores",
            &json!({"model_name": "m", "token_ids": prompt}),
        )
        .await
        .expect("overlap scores")
        .json();
    if let Some(workers) = answer["workers"].as_array_mut() {
        workers.sort_by_key(|w| w["worker_id"].as_u64());
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_follow_the_engines_across_server_and_replica_restarts() {
    let test = "nats_events::three_replicas_follow_the_engines_across_server_and_replica_restarts";
    let Some(mut server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let mut replicas = vec![
        replica(&url, "router-a").await,
        replica(&url, "router-b").await,
        replica(&url, "router-c").await,
    ];
    let mut publishers = BTreeMap::new();
    for worker in 1..=WORKERS {
        let publisher =
            NatsKvPublisher::connect(&url, "dynamo", "backend", "generate", 100 + worker)
                .await
                .expect("publisher");
        publishers.insert(worker, publisher);
    }
    let mut model = Model::default();
    let rounds = 60u64;
    for round in 0..rounds {
        if round == rounds / 3 {
            server.restart();
        }
        if round == 2 * rounds / 3 {
            // Replica b dies mid-stream and a new process takes its consumer name.
            let dead = replicas.remove(1);
            drop(dead);
            replicas.insert(1, replica(&url, "router-b").await);
        }
        for worker in 1..=WORKERS {
            let mut events = vec![model.store(worker, round, 3 + (round % 5) as usize)];
            if round % 4 == 3
                && let Some(removal) = model.remove_tail(worker, round - 2)
            {
                events.push(removal);
            }
            publishers[&worker].publish(&events).await.expect("publish");
        }
        if round == 10 {
            // Garbage on a KV-event subject, on core NATS and through JetStream.
            publishers[&1]
                .publish_core(b"garbage".to_vec())
                .await
                .expect("publish");
            publishers[&2]
                .publish_bytes("garbage-2", b"\x93\x01\x02\x03".to_vec())
                .await
                .expect("publish");
        }
    }
    let all_match = wait_until(WAIT, || {
        replicas
            .iter()
            .all(|replica| index_matches(replica, &model))
    })
    .await;
    for replica in &replicas {
        let partition = replica
            .service
            .service
            .partition(&key())
            .expect("partition");
        for worker in 1..=WORKERS {
            let state = partition
                .router
                .worker_index_state(WorkerId::new(worker, 0));
            eprintln!(
                "worker {worker}: index {state:?}, model {} blocks, last {:?}; stats {:?}",
                model.blocks(worker),
                model.next_event.get(&worker),
                replica.ingress.stats()
            );
        }
    }
    assert!(all_match, "every replica's index equals the model");
    for replica in &replicas {
        assert_eq!(replica.ingress.stats().garbage.load(Ordering::Relaxed), 2);
        assert_eq!(
            replica.ingress.stats().held_dropped.load(Ordering::Relaxed),
            0
        );
    }
    // Each replica answers every prompt as the model says, and all three alike.
    for ((worker, _), (prompt, cached)) in model.prompts.iter().step_by(7) {
        let first = scores(&replicas[0], prompt).await;
        for replica in &replicas[1..] {
            assert_eq!(scores(replica, prompt).await, first);
        }
        let mut client = replicas[0].service.client().await;
        assert_eq!(
            device_blocks(&mut client, prompt, *worker).await,
            *cached as u64
        );
    }
    let mut loads = Vec::new();
    for replica in &replicas {
        let mut client = replica.service.client().await;
        loads.push(client.get("/loads").await.expect("loads").json());
    }
    assert!(loads.windows(2).all(|pair| pair[0] == pair[1]), "{loads:?}");
    let metrics = {
        let mut client = replicas[0].service.client().await;
        client.get("/metrics").await.expect("metrics").text()
    };
    assert!(
        metrics.contains("kv_router_nats_garbage_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_published_again_are_rejected_as_duplicates() {
    let test = "nats_events::events_published_again_are_rejected_as_duplicates";
    let Some(server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let replica = replica(&url, "router-dup").await;
    let publisher = NatsKvPublisher::connect(&url, "dynamo", "backend", "generate", 7)
        .await
        .expect("publisher");
    let mut model = Model::default();
    let mut sent = Vec::new();
    for round in 0..20 {
        let mut events = vec![model.store(1, round, 4)];
        if round % 3 == 2 {
            events.extend(model.remove_tail(1, round - 1));
        }
        let (sequence, bytes) = publisher.envelope(&events).expect("encode");
        publisher
            .publish_bytes(&format!("7-{sequence}"), bytes.clone())
            .await
            .expect("publish");
        sent.push((events, bytes));
    }
    let applied = wait_until(WAIT, || index_state_matches_worker(&replica, &model, 1)).await;
    assert!(applied, "the index follows the engine");
    // The same envelopes stored again as new messages (a publisher retrying beyond the
    // stream's duplicate window): the index changes nothing and they are counted.
    let total: usize = sent.iter().map(|(events, _)| events.len()).sum();
    for (i, (_, bytes)) in sent.iter().enumerate() {
        publisher
            .publish_bytes(&format!("retry-{i}"), bytes.clone())
            .await
            .expect("publish");
    }
    // And events already applied in a new envelope: the index's event-id check rejects them
    // (event 0 is left out: a rank's event 0 means its engine restarted).
    let late: Vec<RouterEvent> = sent
        .iter()
        .flat_map(|(events, _)| events.iter().cloned())
        .filter(|event| event.event_id() > 0)
        .collect();
    publisher.publish(&late).await.expect("publish");
    let expected = (total + late.len()) as u64;
    let counted = wait_until(WAIT, || {
        replica.ingress.stats().duplicates.load(Ordering::Relaxed) == expected
    })
    .await;
    assert!(counted, "{:?}", replica.ingress.stats());
    assert!(index_state_matches_worker(&replica, &model, 1));
}

fn index_state_matches_worker(replica: &Replica, model: &Model, worker: u64) -> bool {
    replica
        .service
        .service
        .partition(&key())
        .and_then(|partition| {
            partition
                .router
                .worker_index_state(WorkerId::new(worker, 0))
        })
        .is_some_and(|state| {
            state.blocks == model.blocks(worker)
                && state.last_event_id == model.next_event.get(&worker).map(|next| next - 1)
        })
}

/// A replica that acknowledges only what its checkpoints hold, not reading yet.
async fn checkpointed_replica(url: &str, consumer: &str) -> Replica {
    let mut options = options(url, consumer, Duration::from_secs(30));
    options.checkpointed = true;
    let ingress = NatsIngress::connect(options).await.expect("NATS ingress");
    let service = start_with(KVCR_YAML, Arc::clone(&ingress) as _).await;
    Replica { service, ingress }
}

/// Publishes `rounds` envelopes, each storing a new prompt on every worker and, every third
/// round, removing the tail of the one before.
async fn publish_rounds(
    publisher: &NatsKvPublisher,
    model: &mut Model,
    rounds: std::ops::Range<u64>,
) {
    for round in rounds {
        let mut events = Vec::new();
        for worker in 1..=WORKERS {
            events.push(model.store(worker, round, 3 + (round % 4) as usize));
            if round % 3 == 2 {
                events.extend(model.remove_tail(worker, round - 1));
            }
        }
        publisher.publish(&events).await.expect("publish");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_router_resumes_from_its_checkpoint_acknowledgement() {
    let test = "nats_events::a_restarted_router_resumes_from_its_checkpoint_acknowledgement";
    let Some(server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("kv-router-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let snapshot = dir.join("router.snap");
    let publisher = NatsKvPublisher::connect(&url, "dynamo", "backend", "generate", 3)
        .await
        .expect("publisher");
    let mut model = Model::default();

    // The first process: reads 30 envelopes, writes a checkpoint, reads 20 more, dies.
    let first = checkpointed_replica(&url, "router-resume").await;
    register_workers(&mut first.service.client().await, 1..=WORKERS).await;
    first.ingress.begin(None).await.expect("begin");
    publish_rounds(&publisher, &mut model, 0..30).await;
    assert!(
        wait_until(WAIT, || index_matches(&first, &model)).await,
        "first: 30 envelopes"
    );
    let written = first
        .ingress
        .write_checkpoint(&first.service.service, &snapshot)
        .await
        .expect("checkpoint");
    assert_eq!(written.stream_seq, 30, "{written:?}");
    assert!(written.acknowledged, "{written:?}");
    assert_eq!(
        first
            .ingress
            .stats()
            .acked_stream_seq
            .load(Ordering::Relaxed),
        30
    );
    publish_rounds(&publisher, &mut model, 30..50).await;
    assert!(
        wait_until(WAIT, || index_matches(&first, &model)).await,
        "first: 50 envelopes"
    );
    // Not acknowledged: no checkpoint holds them.
    assert_eq!(
        first
            .ingress
            .stats()
            .acked_stream_seq
            .load(Ordering::Relaxed),
        30
    );
    drop(first);

    // While no router runs, 10 more.
    publish_rounds(&publisher, &mut model, 50..60).await;

    // The second process: restores the checkpoint, resumes after sequence 30.
    let second = checkpointed_replica(&url, "router-resume").await;
    let state = kv_router_service::selection::snapshot::RouterState::read(&snapshot)
        .expect("readable")
        .expect("written");
    let position = state
        .event_plane
        .clone()
        .expect("a checkpoint records its position");
    assert_eq!(position.stream_seq, 30);
    assert_eq!(position.cursors.len(), WORKERS as usize);
    let restored = state.apply(&second.service.service).expect("restored");
    assert_eq!(restored.workers, WORKERS as usize);
    assert_eq!(restored.resumed_ranks, WORKERS as usize);
    let resumed = second.ingress.begin(Some(&position)).await.expect("begin");
    assert_eq!(
        resumed,
        kv_router_service::nats::ResumeKind::FromCheckpoint {
            stream_seq: 30,
            ack_floor: Some(30),
            aged_out: 0,
        }
    );
    assert!(
        wait_until(WAIT, || index_matches(&second, &model)).await,
        "second: all 60 envelopes, {:?}",
        second.ingress.stats()
    );
    let stats = second.ingress.stats();
    // Read from the acknowledgement on, not from the stream's start; nothing applied twice,
    // no rank started over.
    assert_eq!(stats.messages.load(Ordering::Relaxed), 30, "{stats:?}");
    assert_eq!(stats.duplicates.load(Ordering::Relaxed), 0, "{stats:?}");
    assert_eq!(stats.gaps.load(Ordering::Relaxed), 0, "{stats:?}");
    assert!(second.ingress.caught_up().await.expect("consumer info"));

    // A third process whose checkpoint is of another consumer rebuilds from the stream.
    let third = checkpointed_replica(&url, "router-other").await;
    register_workers(&mut third.service.client().await, 1..=WORKERS).await;
    let from_start = third.ingress.begin(Some(&position)).await.expect("begin");
    assert!(
        matches!(
            from_start,
            kv_router_service::nats::ResumeKind::FromStreamStart { .. }
        ),
        "{from_start:?}"
    );
    assert!(
        wait_until(WAIT, || index_matches(&third, &model)).await,
        "third: rebuilt"
    );
    assert_eq!(third.ingress.stats().messages.load(Ordering::Relaxed), 60);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_applies_events_on_the_ingest_thread_it_was_given() {
    let test = "nats_events::the_consumer_applies_events_on_the_ingest_thread_it_was_given";
    let Some(server) = NatsServer::start(test) else {
        return;
    };
    let url = server.url();
    let ingest = kv_router_service::engine_events::ingest_thread::IngestThread::start()
        .expect("ingest thread");
    let options = options(&url, "router-ingest", Duration::from_secs(1));
    let ingress = NatsIngress::connect_on(options, ingest.handle())
        .await
        .expect("NATS ingress");
    let service = start_with(KVCR_YAML, Arc::clone(&ingress) as _).await;
    register_workers(&mut service.client().await, 1..=WORKERS).await;
    let replica = Replica { service, ingress };
    replica.ingress.begin(None).await.expect("begin");
    let publisher = NatsKvPublisher::connect(&url, "dynamo", "backend", "generate", 5)
        .await
        .expect("publisher");
    let mut model = Model::default();
    publish_rounds(&publisher, &mut model, 0..12).await;
    assert!(
        wait_until(WAIT, || index_matches(&replica, &model)).await,
        "the consumer on the ingest thread applies every event"
    );
    // The consumer lives on that thread: once it stops, nothing more is applied, though the
    // service's own runtime goes on.
    tokio::task::block_in_place(|| drop(ingest));
    let applied = replica.ingress.stats().events.load(Ordering::Relaxed);
    publish_rounds(&publisher, &mut model, 12..15).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        replica.ingress.stats().events.load(Ordering::Relaxed),
        applied,
        "events were applied after the ingest thread stopped"
    );
    assert!(!index_matches(&replica, &model));
    let mut client = replica.service.client().await;
    let loads = client
        .get("/loads")
        .await
        .expect("the service still answers");
    expect_status(&loads, 200);
}
