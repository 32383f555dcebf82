//! The KV index against a naive model: random event sequences, including gaps, reordered ids,
//! engine ids that differ between workers or are reused, unknown workers and unknown blocks.

use dynamo_kv_router::kv::{
    EventOutcome, IgnoreReason, KvEvent, KvEventData, KvIndex, StoredBlock,
};
use dynamo_kv_router::plugins::BlockLookup;
use dynamo_kv_router::router::WorkerId;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// Per worker: engine → seq and seq → engine, kept as a bijection.
#[derive(Default, Clone)]
struct ModelWorker {
    by_engine: BTreeMap<u64, u64>,
    by_seq: BTreeMap<u64, u64>,
    last: Option<u64>,
    stale: bool,
}

#[derive(Default)]
struct Model {
    workers: BTreeMap<WorkerId, ModelWorker>,
}

impl Model {
    fn apply(&mut self, event: &KvEvent) -> EventOutcome {
        let Some(worker) = self.workers.get_mut(&event.worker) else {
            return EventOutcome::Ignored(IgnoreReason::UnknownWorker);
        };
        let cleared = matches!(event.data, KvEventData::Cleared);
        if worker.stale && !cleared {
            return EventOutcome::Ignored(IgnoreReason::Stale);
        }
        if let Some(last) = worker.last
            && !worker.stale
        {
            if event.event_id <= last {
                return EventOutcome::Ignored(IgnoreReason::OutOfOrder);
            }
            if event.event_id > last + 1 && !cleared {
                worker.stale = true;
                worker.last = Some(event.event_id);
                worker.by_engine.clear();
                worker.by_seq.clear();
                return EventOutcome::Ignored(IgnoreReason::Gap);
            }
        }
        worker.last = Some(event.event_id);
        match &event.data {
            KvEventData::Cleared => {
                worker.stale = false;
                worker.by_engine.clear();
                worker.by_seq.clear();
                EventOutcome::Applied
            }
            KvEventData::Stored { blocks, .. } => {
                for block in blocks {
                    if let Some(old_seq) = worker.by_engine.remove(&block.block_hash) {
                        worker.by_seq.remove(&old_seq);
                    }
                    if let Some(old_engine) = worker.by_seq.remove(&block.tokens_hash) {
                        worker.by_engine.remove(&old_engine);
                    }
                    worker.by_engine.insert(block.block_hash, block.tokens_hash);
                    worker.by_seq.insert(block.tokens_hash, block.block_hash);
                }
                EventOutcome::Applied
            }
            KvEventData::Removed { block_hashes } => {
                let mut removed = 0;
                for engine in block_hashes {
                    if let Some(seq) = worker.by_engine.remove(engine) {
                        worker.by_seq.remove(&seq);
                        removed += 1;
                    }
                }
                if removed == 0 && !block_hashes.is_empty() {
                    EventOutcome::Ignored(IgnoreReason::UnknownBlocks)
                } else {
                    EventOutcome::Applied
                }
            }
        }
    }

    fn prefix(&self, worker: WorkerId, hashes: &[u64]) -> usize {
        self.workers.get(&worker).map_or(0, |w| {
            hashes
                .iter()
                .take_while(|hash| w.by_seq.contains_key(hash))
                .count()
        })
    }
}

#[derive(Clone, Debug)]
enum Op {
    Event {
        worker: u8,
        id_step: u8,
        data: KvEventData,
    },
    Deregister(u8),
    Register(u8),
}

/// Sequence hashes are chains over a small alphabet so that prefixes overlap often.
fn seq_of(path: &[u8]) -> u64 {
    path.iter().fold(0xabcdu64, |acc, &step| {
        acc.wrapping_mul(31).wrapping_add(u64::from(step) + 1)
    })
}

fn data_strategy() -> impl Strategy<Value = KvEventData> {
    let stored = (
        proptest::collection::vec(0u8..3, 1..6),
        proptest::option::of(0u64..4),
        0u8..3,
    )
        .prop_map(|(path, parent, engine_mode)| {
            let blocks = (1..=path.len())
                .map(|len| {
                    let seq = seq_of(&path[..len]);
                    // Mode 0: engines agree (engine = f(seq)); 1: per-event ids; 2: small reused ids.
                    let block_hash = match engine_mode {
                        0 => seq ^ 0x5555,
                        1 => seq.wrapping_mul(7) ^ (len as u64),
                        _ => len as u64 % 4,
                    };
                    StoredBlock {
                        block_hash,
                        tokens_hash: seq,
                    }
                })
                .collect();
            KvEventData::Stored {
                parent_hash: parent,
                blocks,
            }
        });
    let removed = proptest::collection::vec(
        prop_oneof![
            proptest::collection::vec(0u8..3, 1..6).prop_map(|p| seq_of(&p) ^ 0x5555),
            0u64..4,
        ],
        0..4,
    )
    .prop_map(|block_hashes| KvEventData::Removed { block_hashes });
    prop_oneof![
        6 => stored,
        3 => removed,
        1 => Just(KvEventData::Cleared),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0u8..5, prop_oneof![8 => Just(1u8), 1 => Just(0u8), 1 => Just(2u8)], data_strategy())
            .prop_map(|(worker, id_step, data)| Op::Event { worker, id_step, data }),
        1 => (0u8..5).prop_map(Op::Deregister),
        1 => (0u8..5).prop_map(Op::Register),
    ]
}

fn worker(n: u8) -> WorkerId {
    // Worker 4 is never registered at the start: its events are for an unknown worker.
    WorkerId::new(u64::from(n) * 10, u32::from(n % 2))
}

fn check_against_model(ops: Vec<Op>, filler_workers: usize) {
    let mut index = KvIndex::new();
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
    let queries: Vec<Vec<u64>> = [
        vec![0u8, 0, 0, 0, 0],
        vec![1, 0, 2, 1, 1],
        vec![2, 2, 2, 2, 2],
        vec![0, 1, 2, 0, 1],
    ]
    .iter()
    .map(|path| (1..=path.len()).map(|len| seq_of(&path[..len])).collect())
    .collect();
    let all: Vec<WorkerId> = (0..5).map(worker).collect();
    for op in ops {
        match op {
            Op::Event {
                worker: n,
                id_step,
                data,
            } => {
                let id = next_id.entry(n).or_insert(0);
                *id += u64::from(id_step);
                let event = KvEvent::new(worker(n), *id, data);
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
        }
        let mut out = Vec::new();
        let (mut with_engines, mut engines, mut prefix) = (Vec::new(), Vec::new(), Vec::new());
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
            assert_eq!(engines.len(), out.iter().copied().max().unwrap_or(0));
            for (k, w) in all.iter().enumerate() {
                let own: Option<Vec<u64>> = query[..out[k]]
                    .iter()
                    .map(|seq| index.engine_block_hash(*w, *seq))
                    .collect();
                assert_eq!(
                    index.engine_block_hashes(*w, 0, &query[..out[k]]),
                    own.clone()
                );
                if index.uses_canonical_engine_ids(*w) {
                    assert_eq!(own.as_deref(), Some(&engines[..out[k]]), "worker {w}");
                }
            }
        }
        let mut memberships = 0;
        for (w, state) in &model.workers {
            memberships += state.by_seq.len();
            assert_eq!(
                index.worker_state(*w).map(|s| (s.blocks, s.stale)),
                Some((state.by_seq.len(), state.stale))
            );
            for (seq, engine) in &state.by_seq {
                assert_eq!(index.engine_block_hash(*w, *seq), Some(*engine));
            }
        }
        assert_eq!(index.memberships(), memberships);
        let distinct: BTreeSet<u64> = model
            .workers
            .values()
            .flat_map(|w| w.by_seq.keys().copied())
            .collect();
        assert_eq!(index.distinct_blocks(), distinct.len());
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
