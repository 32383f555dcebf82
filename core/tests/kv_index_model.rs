//! The KV index against a naive model of its rules: random event sequences with parent-chained
//! stores, unknown and self-referencing parents, gaps, duplicates, engine restarts, abandoned
//! recoveries, non-device tiers, engine ids that differ between workers or are reused, engine
//! ids that are sequence hashes (the block's own, or another block's), unknown workers and
//! unknown blocks.

use dynamo_kv_router::kv::{
    EngineBlockHash, EventOutcome, IgnoreReason, KvCacheEventData, KvIndex, LocalBlockHash,
    RecordedEngines, RouterEvent, SequenceHash, StorageTier, next_sequence_hash,
};
use dynamo_kv_router::plugins::BlockLookup;
use dynamo_kv_router::router::WorkerId;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// Per worker: engine → seq and seq → engine, kept as a bijection, and the event cursor.
#[derive(Default, Clone)]
struct ModelWorker {
    by_engine: BTreeMap<u64, u64>,
    by_seq: BTreeMap<u64, u64>,
    last: Option<u64>,
    awaiting_until: Option<u64>,
    resync: bool,
}

impl ModelWorker {
    fn clear(&mut self) {
        self.by_engine.clear();
        self.by_seq.clear();
    }

    fn replay_from(&self) -> Option<u64> {
        self.awaiting_until
            .map(|_| self.last.map_or(0, |last| last + 1))
    }

    /// The cursor rules, written out plainly.
    fn admit(&mut self, id: u64, cleared: bool) -> Result<(), IgnoreReason> {
        if self.resync {
            self.resync = false;
            self.last = Some(id);
            self.awaiting_until = None;
            return Ok(());
        }
        if id == 0 && self.last.is_some() {
            self.clear();
            self.last = Some(0);
            self.awaiting_until = None;
            return Ok(());
        }
        if self.last.is_some_and(|last| id <= last) {
            return Err(IgnoreReason::OutOfOrder);
        }
        let next = self.last.map_or(0, |last| last + 1);
        if id == next || cleared {
            self.last = Some(id);
            if self.awaiting_until.is_some_and(|until| until <= id) {
                self.awaiting_until = None;
            }
            return Ok(());
        }
        match self.awaiting_until {
            Some(until) => {
                self.awaiting_until = Some(until.max(id));
                Err(IgnoreReason::AwaitingRecovery)
            }
            None => {
                self.awaiting_until = Some(id);
                Err(IgnoreReason::Gap)
            }
        }
    }
}

#[derive(Default)]
struct Model {
    workers: BTreeMap<WorkerId, ModelWorker>,
}

impl Model {
    fn apply(&mut self, event: &RouterEvent) -> EventOutcome {
        let Some(worker) = self.workers.get_mut(&event.worker()) else {
            return EventOutcome::Ignored(IgnoreReason::UnknownWorker);
        };
        let cleared = matches!(event.event.data, KvCacheEventData::Cleared);
        if let Err(reason) = worker.admit(event.event_id(), cleared) {
            return EventOutcome::Ignored(reason);
        }
        if event.storage_tier != StorageTier::Device && !cleared {
            return EventOutcome::Ignored(IgnoreReason::NonDeviceTier);
        }
        match &event.event.data {
            KvCacheEventData::Cleared => {
                worker.clear();
                EventOutcome::Applied
            }
            KvCacheEventData::Stored(store) => {
                let mut parent = match store.parent_hash {
                    None => None,
                    Some(p) if store.blocks.iter().any(|b| b.block_hash == p) => {
                        return EventOutcome::Ignored(IgnoreReason::InvalidBlockSequence);
                    }
                    Some(p) => match worker.by_engine.get(&p.0) {
                        Some(seq) => Some(SequenceHash(*seq)),
                        None => return EventOutcome::Ignored(IgnoreReason::UnknownParent),
                    },
                };
                for block in &store.blocks {
                    let seq = next_sequence_hash(parent, block.tokens_hash);
                    parent = Some(seq);
                    let (engine, seq) = (block.block_hash.0, seq.0);
                    if let Some(old_seq) = worker.by_engine.remove(&engine) {
                        worker.by_seq.remove(&old_seq);
                    }
                    if let Some(old_engine) = worker.by_seq.remove(&seq) {
                        worker.by_engine.remove(&old_engine);
                    }
                    worker.by_engine.insert(engine, seq);
                    worker.by_seq.insert(seq, engine);
                }
                EventOutcome::Applied
            }
            KvCacheEventData::Removed(remove) => {
                let mut removed = 0;
                for engine in &remove.block_hashes {
                    if let Some(seq) = worker.by_engine.remove(&engine.0) {
                        worker.by_seq.remove(&seq);
                        removed += 1;
                    }
                }
                if removed == 0 && !remove.block_hashes.is_empty() {
                    EventOutcome::Ignored(IgnoreReason::UnknownBlocks)
                } else {
                    EventOutcome::Applied
                }
            }
        }
    }

    fn prefix(&self, worker: WorkerId, hashes: &[SequenceHash]) -> usize {
        self.workers
            .get(&worker)
            .filter(|w| w.awaiting_until.is_none())
            .map_or(0, |w| {
                hashes
                    .iter()
                    .take_while(|hash| w.by_seq.contains_key(&hash.0))
                    .count()
            })
    }
}

/// How an event is numbered relative to the worker's previous one.
#[derive(Clone, Copy, Debug)]
enum Numbering {
    Next,
    Duplicate,
    Skip,
    Restart,
}

/// What an event does, resolved against the model's state when it is applied.
#[derive(Clone, Debug)]
enum Action {
    /// Blocks with these local-hash letters, after the parent picked by `parent` (`None`: root;
    /// `Some(i)`: the i-th engine id the worker holds, or an unknown one if it holds none;
    /// `u8::MAX`: the first block of the event itself).
    Store {
        letters: Vec<u8>,
        parent: Option<u8>,
        engine_mode: u8,
    },
    /// Engine ids: held ones by position, or small unknown ones.
    Remove(Vec<(bool, u8)>),
    Clear,
}

#[derive(Clone, Debug)]
enum Op {
    Event {
        worker: u8,
        numbering: Numbering,
        host_tier: bool,
        action: Action,
    },
    Deregister(u8),
    Register(u8),
    Abandon(u8),
}

fn local(letter: u8) -> LocalBlockHash {
    LocalBlockHash(0xabcd + u64::from(letter))
}

/// The sequence hashes of a path of letters from the root.
fn seq_path(path: &[u8]) -> Vec<SequenceHash> {
    let mut parent = None;
    path.iter()
        .map(|letter| {
            let seq = next_sequence_hash(parent, local(*letter));
            parent = Some(seq);
            seq
        })
        .collect()
}

fn action_strategy() -> impl Strategy<Value = Action> {
    let store = (
        proptest::collection::vec(0u8..3, 1..5),
        prop_oneof![
            4 => Just(None),
            5 => (0u8..8).prop_map(Some),
            1 => Just(Some(u8::MAX)),
        ],
        0u8..6,
    )
        .prop_map(|(letters, parent, engine_mode)| Action::Store {
            letters,
            parent,
            engine_mode,
        });
    let remove = proptest::collection::vec((any::<bool>(), 0u8..8), 0..4).prop_map(Action::Remove);
    prop_oneof![
        6 => store,
        3 => remove,
        1 => Just(Action::Clear),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let numbering = prop_oneof![
        16 => Just(Numbering::Next),
        1 => Just(Numbering::Duplicate),
        2 => Just(Numbering::Skip),
        1 => Just(Numbering::Restart),
    ];
    prop_oneof![
        20 => (0u8..5, numbering, prop::bool::weighted(0.1), action_strategy()).prop_map(
            |(worker, numbering, host_tier, action)| Op::Event { worker, numbering, host_tier, action }
        ),
        1 => (0u8..5).prop_map(Op::Deregister),
        1 => (0u8..5).prop_map(Op::Register),
        1 => (0u8..5).prop_map(Op::Abandon),
    ]
}

fn worker(n: u8) -> WorkerId {
    // Worker 4 is never registered at the start: its events are for an unknown worker.
    WorkerId::new(u64::from(n) * 10, u32::from(n % 2))
}

/// The event data of `action` for `worker`, resolved against what the model holds.
fn resolve(model: &Model, worker: WorkerId, action: &Action) -> KvCacheEventData {
    let held: Vec<u64> = model
        .workers
        .get(&worker)
        .map(|w| w.by_engine.keys().copied().collect())
        .unwrap_or_default();
    let pick = |i: u8| {
        held.get(usize::from(i) % held.len().max(1))
            .copied()
            .unwrap_or(0xdead)
    };
    match action {
        Action::Clear => KvCacheEventData::Cleared,
        Action::Remove(names) => {
            KvCacheEventData::removed(names.iter().map(|(known, i)| {
                EngineBlockHash(if *known { pick(*i) } else { u64::from(*i) % 4 })
            }))
        }
        Action::Store {
            letters,
            parent,
            engine_mode,
        } => {
            let mut chain_seq = parent
                .filter(|p| *p != u8::MAX)
                .map(&pick)
                .and_then(|engine| {
                    model
                        .workers
                        .get(&worker)
                        .and_then(|w| w.by_engine.get(&engine).copied())
                })
                .map(SequenceHash);
            let blocks: Vec<(EngineBlockHash, LocalBlockHash)> = letters
                .iter()
                .enumerate()
                .map(|(k, letter)| {
                    let seq = next_sequence_hash(chain_seq, local(*letter));
                    chain_seq = Some(seq);
                    // Mode 0: engines agree (engine = f(seq)); 1: per-worker ids; 2: small
                    // reused ids; 3: the sequence hash itself (self-named blocks); 4: the
                    // sequence hash of a root block, which names that block when it is one
                    // and is another block's sequence hash otherwise; 5: self-named blocks
                    // after the first, which is not.
                    let engine = match engine_mode {
                        0 => seq.0 ^ 0x5555,
                        1 => seq.0.wrapping_mul(7) ^ worker.worker_id,
                        2 => k as u64 % 4,
                        3 => seq.0,
                        4 => seq_path(&[*letter])[0].0,
                        _ if k > 0 => seq.0,
                        _ => seq.0 ^ 0x5555,
                    };
                    (EngineBlockHash(engine), local(*letter))
                })
                .collect();
            let parent_hash = match parent {
                None => None,
                Some(u8::MAX) => blocks.first().map(|(engine, _)| *engine),
                Some(p) => Some(EngineBlockHash(pick(*p))),
            };
            KvCacheEventData::stored(parent_hash, blocks)
        }
    }
}

fn check_against_model(ops: Vec<Op>, filler_workers: usize) {
    let mut index = KvIndex::with_lineage();
    let mut model = Model::default();
    // Filler workers push the real ones into higher slot groups when requested.
    for filler in 0..filler_workers {
        index.add_worker(WorkerId::new(1_000_000 + filler as u64, 0));
    }
    for n in 0..4 {
        assert!(index.add_worker(worker(n)));
        model.workers.insert(worker(n), ModelWorker::default());
    }
    let mut next_id: BTreeMap<u8, u64> = BTreeMap::new();
    let queries: Vec<Vec<SequenceHash>> = [
        vec![0u8, 0, 0, 0, 0],
        vec![1, 0, 2, 1, 1],
        vec![2, 2, 2, 2, 2],
        vec![0, 1, 2, 0, 1],
    ]
    .iter()
    .map(|path| seq_path(path))
    .collect();
    let all: Vec<WorkerId> = (0..5).map(worker).collect();
    for op in ops {
        match op.clone() {
            Op::Event {
                worker: n,
                numbering,
                host_tier,
                action,
            } => {
                let entry = next_id.entry(n).or_insert(0);
                let id = match numbering {
                    Numbering::Next => *entry,
                    Numbering::Duplicate => entry.saturating_sub(1),
                    Numbering::Skip => *entry + 1,
                    Numbering::Restart => 0,
                };
                *entry = id + 1;
                let data = resolve(&model, worker(n), &action);
                let mut event = RouterEvent::new(worker(n), id, data);
                if host_tier {
                    event = event.with_storage_tier(StorageTier::HostPinned);
                }
                assert_eq!(index.apply(&event), model.apply(&event), "{event:?}");
            }
            Op::Deregister(n) => {
                assert_eq!(
                    index.remove_worker(worker(n)),
                    model.workers.remove(&worker(n)).is_some()
                );
            }
            Op::Register(n) => {
                let added = index.add_worker(worker(n));
                assert_eq!(added, !model.workers.contains_key(&worker(n)));
                model.workers.entry(worker(n)).or_default();
            }
            Op::Abandon(n) => {
                let known = model.workers.get_mut(&worker(n)).map(|w| {
                    *w = ModelWorker {
                        resync: true,
                        ..ModelWorker::default()
                    };
                });
                assert_eq!(index.abandon_recovery(worker(n)), known.is_some());
            }
        }
        index
            .check_engine_ownership()
            .unwrap_or_else(|error| panic!("after {op:?}: {error}"));
        let mut out = Vec::new();
        let (mut with_engines, mut engines, mut prefix) =
            (Vec::new(), RecordedEngines::default(), Vec::new());
        for query in &queries {
            index.prefix_lengths(query, &all, &mut out);
            for (k, w) in all.iter().enumerate() {
                assert_eq!(
                    out[k],
                    model.prefix(*w, query),
                    "worker {w} query {query:?}"
                );
            }
            // The recording pass agrees, records up to the longest prefix, and its canonical
            // ids are the workers' own wherever the index says they use canonical ids.
            index.prefix_lengths_and_engines(query, &all, &mut with_engines, &mut engines);
            assert_eq!(with_engines, out);
            // The streamed pass agrees, hands back the longest prefix's hashes, and pulls at
            // most one hash past it.
            let longest = out.iter().copied().max().unwrap_or(0);
            let mut pulled = 0;
            let mut streamed = Vec::new();
            index.prefix_lengths_streamed(
                query.iter().inspect(|_| pulled += 1).copied(),
                &all,
                &mut streamed,
                &mut prefix,
            );
            assert_eq!(streamed, out);
            assert_eq!(prefix, query[..longest]);
            assert!(
                pulled <= (longest + 1).min(query.len()),
                "pulled {pulled} for {longest}"
            );
            assert_eq!(
                engines.hashes().len(),
                out.iter().copied().max().unwrap_or(0)
            );
            for (k, w) in all.iter().enumerate() {
                let own: Option<Vec<EngineBlockHash>> = query[..out[k]]
                    .iter()
                    .map(|seq| index.engine_block_hash(*w, *seq))
                    .collect();
                assert_eq!(
                    index.engine_block_hashes(*w, 0, &query[..out[k]]),
                    own.clone()
                );
                if let Some(recorded) = engines.own(k, 0..out[k]) {
                    assert_eq!(own.as_deref(), Some(recorded), "worker {w}");
                }
            }
        }
        let mut memberships = 0;
        let mut awaiting = 0;
        for (w, state) in &model.workers {
            memberships += state.by_seq.len();
            awaiting += usize::from(state.awaiting_until.is_some());
            let index_state = index.worker_state(*w);
            assert_eq!(
                index_state.map(|s| (s.blocks, s.replay_from, s.last_event_id)),
                Some((state.by_seq.len(), state.replay_from(), state.last)),
                "worker {w}"
            );
            assert_eq!(index.replay_request(*w), state.replay_from());
            for (seq, engine) in &state.by_seq {
                assert_eq!(
                    index.engine_block_hash(*w, SequenceHash(*seq)),
                    Some(EngineBlockHash(*engine))
                );
            }
        }
        assert_eq!(index.memberships(), memberships);
        assert_eq!(index.workers_awaiting_recovery(), awaiting);
        assert_eq!(index.counters().workers_awaiting_recovery, awaiting as u64);
        assert_eq!(index.replay_requests().len(), awaiting);
        let distinct: BTreeSet<u64> = model
            .workers
            .values()
            .flat_map(|w| w.by_seq.keys().copied())
            .collect();
        assert_eq!(index.distinct_blocks(), distinct.len());
    }
    check_dump_rebuilds(&index, filler_workers, &all);
}

/// Every path of `depth` letters from the root.
fn all_paths(depth: usize) -> Vec<Vec<SequenceHash>> {
    let mut paths = vec![Vec::new()];
    for _ in 0..depth {
        paths = paths
            .into_iter()
            .flat_map(|path: Vec<u8>| {
                (0..3).map(move |letter| {
                    let mut longer = path.clone();
                    longer.push(letter);
                    longer
                })
            })
            .collect();
    }
    paths.iter().map(|path| seq_path(path)).collect()
}

/// The dump, read back from its JSON and restored into an empty index with the same workers,
/// gives every worker the same prefix on every path and the same engine hashes along it.
fn check_dump_rebuilds(index: &KvIndex, filler_workers: usize, all: &[WorkerId]) {
    let events = index.dump_events().expect("the index records lineage");
    let mut copy = KvIndex::new();
    for filler in 0..filler_workers {
        copy.add_worker(WorkerId::new(1_000_000 + filler as u64, 0));
    }
    for worker in all {
        copy.add_worker(*worker);
    }
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.event_id(), n as u64, "event ids count from 0");
        let reread = RouterEvent::from_json(&event.to_json()).unwrap();
        assert_eq!(copy.restore(&reread), EventOutcome::Applied, "{event:?}");
    }
    let (mut original, mut rebuilt) = (Vec::new(), Vec::new());
    for path in all_paths(6) {
        index.prefix_lengths(&path, all, &mut original);
        copy.prefix_lengths(&path, all, &mut rebuilt);
        assert_eq!(original, rebuilt, "path {path:?}, dump {events:?}");
        for (worker, depth) in all.iter().zip(&original) {
            for seq in &path[..*depth] {
                assert_eq!(
                    copy.engine_block_hash(*worker, *seq),
                    index.engine_block_hash(*worker, *seq),
                    "worker {worker}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn index_matches_naive_model(ops in proptest::collection::vec(op_strategy(), 1..60)) {
        check_against_model(ops, 0);
    }

    #[test]
    fn index_matches_naive_model_beyond_64_workers(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        check_against_model(ops, 62);
    }
}
