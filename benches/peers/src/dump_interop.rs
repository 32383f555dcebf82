//! Interop of our index's dump with upstream: our `KvIndex` ingests a workload, dumps itself
//! (`KvIndex::dump_events`), the dump goes through upstream's own JSON reader into upstream's
//! `RadixTree` and `ConcurrentRadixTreeCompressed` (and back into a fresh `KvIndex`), and every
//! worker's overlap depth for every query must be the same in all four.
//!
//! Workers are data-parallel ranks (`worker_id`, `dp_rank` 0 and 1), and engine ids come in
//! three flavours: every worker reports a block under the same id, every worker under its own
//! id, and half the workers each way. Where workers report one block under different ids,
//! upstream's trees keep one id per block; `RadixTree` still reads the dump exactly (segments
//! whose parent it holds under another id are written from the root, and it matches those by
//! local hash), but CRTC checks the engine id at every compressed edge it descends through, so
//! it cannot hold such workers' shared prefixes, from a dump or from the engines' own events:
//! its depths are reported for those flavours, and required to match only with shared ids.

use crate::workload::{Change, Event, Workload};
use ours::kv::{
    EngineBlockHash as OurEngineHash, KvCacheEventData as OurEventData, KvIndex,
    LocalBlockHash as OurLocalHash, RouterEvent as OurEvent, SequenceHash,
};
use ours::router::WorkerId;
use upstream::RadixTree;
use upstream::indexer::SyncIndexer;
use upstream::protocols::{LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank};

/// Worker ids start here; workload worker `w` is rank `(BASE + w / 2, w % 2)`.
const BASE: u64 = 5000;

/// How the engines name blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineIds {
    /// Every worker reports a block under the same id (its sequence hash).
    Shared,
    /// Every worker reports a block under an id of its own.
    PerWorker,
    /// Even workers share ids, odd workers use their own.
    Mixed,
}

impl EngineIds {
    pub const ALL: [EngineIds; 3] = [EngineIds::Shared, EngineIds::PerWorker, EngineIds::Mixed];

    /// The id `worker` reports for the block of sequence hash `seq`.
    fn id(self, worker: u32, seq: u64) -> u64 {
        let own = match self {
            EngineIds::Shared => false,
            EngineIds::PerWorker => true,
            EngineIds::Mixed => worker % 2 == 1,
        };
        if own {
            (seq ^ u64::from(worker + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(13)
        } else {
            seq
        }
    }

    fn name(self) -> &'static str {
        match self {
            EngineIds::Shared => "shared engine ids",
            EngineIds::PerWorker => "per-worker engine ids",
            EngineIds::Mixed => "half the workers with their own ids",
        }
    }
}

/// The worker rank of workload worker `w`.
fn rank(w: u32) -> WorkerId {
    WorkerId::new(BASE + u64::from(w / 2), w % 2)
}

/// `event` as our KV event, with engine ids per `ids`.
fn our_event(event: &Event, ids: EngineIds) -> OurEvent {
    let id = |seq: u64| OurEngineHash(ids.id(event.worker, seq));
    let data = match &event.change {
        Change::Stored { parent, blocks } => OurEventData::stored(
            parent.map(id),
            blocks.iter().map(|b| (id(b.seq), OurLocalHash(b.local))),
        ),
        Change::Removed { seqs } => OurEventData::removed(seqs.iter().map(|s| id(*s))),
    };
    OurEvent::new(rank(event.worker), event.event_id, data)
}

/// What one check found.
#[derive(Debug)]
pub struct DumpCheck {
    pub name: String,
    pub ids: EngineIds,
    pub memberships: usize,
    pub events: usize,
    pub blocks: usize,
    pub json_bytes: usize,
    /// Dump events upstream's `RadixTree` rejected.
    pub radix_rejected: usize,
    pub depths_checked: usize,
    /// Depths that differ from our index's, per reader: RadixTree, CRTC, a fresh `KvIndex`.
    pub mismatches: [usize; 3],
    /// The first few differences, for the log.
    pub examples: Vec<String>,
}

impl DumpCheck {
    /// Mismatches and rejected events that count against the dump: 0 when it interoperates
    /// (CRTC's only with shared engine ids, see the module docs).
    pub fn failures(&self) -> usize {
        let crtc = if self.ids == EngineIds::Shared {
            self.mismatches[1]
        } else {
            0
        };
        self.radix_rejected + self.mismatches[0] + crtc + self.mismatches[2]
    }
}

/// Builds our index from `workload`, dumps it, reads the dump into every reader and compares
/// every worker's depth for every query of the workload (against the final state).
pub fn check(workload: &Workload, ids: EngineIds) -> DumpCheck {
    let workers: Vec<WorkerId> = (0..workload.workers).map(rank).collect();
    let mut index = KvIndex::new();
    for worker in &workers {
        index.add_worker(*worker);
    }
    for event in &workload.events {
        let _ = index.apply(&our_event(event, ids));
    }
    let dump = index.dump_events();
    let json: Vec<String> = dump.iter().map(OurEvent::to_json).collect();
    let upstream_events: Vec<RouterEvent> = json
        .iter()
        .map(|line| match serde_json::from_str(line) {
            Ok(event) => event,
            Err(error) => panic!("upstream cannot read our dump event {line}: {error}"),
        })
        .collect();
    let mut check = DumpCheck {
        name: format!("{}, {}", workload.name, ids.name()),
        memberships: index.memberships(),
        events: dump.len(),
        blocks: dump.iter().map(OurEvent::block_count).sum(),
        json_bytes: json.iter().map(String::len).sum(),
        ids,
        radix_rejected: 0,
        depths_checked: 0,
        mismatches: [0; 3],
        examples: Vec::new(),
    };

    let mut radix = RadixTree::new();
    for event in upstream_events.iter().cloned() {
        if let Err(error) = radix.apply_event(event) {
            check.radix_rejected += 1;
            if check.examples.len() < 5 {
                check
                    .examples
                    .push(format!("RadixTree rejected an event: {error:?}"));
            }
        }
    }
    let crtc = crate::engines::UpstreamCrtc::new(workload.block_size);
    for event in upstream_events {
        if let Err(error) = crtc.pool().enqueue_event(event) {
            panic!("upstream's thread pool refused an event: {error}");
        }
    }
    let runtime = crate::engines::current_thread_runtime();
    if let Err(error) = runtime.block_on(crtc.pool().flush_and_wait()) {
        panic!("upstream's thread pool did not flush: {error}");
    }
    let mut copy = KvIndex::new();
    for worker in &workers {
        copy.add_worker(*worker);
    }
    for event in &dump {
        let _ = copy.restore(event);
    }

    let (mut ours, mut restored) = (Vec::new(), Vec::new());
    let mut theirs = vec![0u32; workers.len()];
    for query in &workload.queries {
        let seqs: Vec<SequenceHash> = query.seq.iter().copied().map(SequenceHash).collect();
        let locals: Vec<LocalBlockHash> = query.local.iter().copied().map(LocalBlockHash).collect();
        index.prefix_lengths(&seqs, &workers, &mut ours);
        copy.prefix_lengths(&seqs, &workers, &mut restored);
        let answers = [
            radix.find_matches(locals.clone(), false),
            crtc.pool().backend().find_matches(&locals, false),
        ];
        for (reader, scores) in answers.iter().enumerate() {
            depths(scores, &mut theirs);
            compare(&mut check, reader, &ours, &theirs);
        }
        let restored: Vec<u32> = restored.iter().map(|d| *d as u32).collect();
        compare(&mut check, 2, &ours, &restored);
        check.depths_checked += workers.len();
    }
    check
}

/// Each workload worker's depth in upstream's `scores`.
fn depths(scores: &OverlapScores, out: &mut [u32]) {
    out.fill(0);
    for (worker, score) in &scores.scores {
        if let Some(slot) = workload_worker(*worker).and_then(|w| out.get_mut(w)) {
            *slot = *score;
        }
    }
}

fn workload_worker(worker: WorkerWithDpRank) -> Option<usize> {
    let pair = worker.worker_id.checked_sub(BASE)?;
    Some((pair * 2 + u64::from(worker.dp_rank)) as usize)
}

fn compare(check: &mut DumpCheck, reader: usize, ours: &[usize], theirs: &[u32]) {
    const READERS: [&str; 3] = ["RadixTree", "CRTC", "fresh KvIndex"];
    let counts = reader != 1 || check.ids == EngineIds::Shared;
    for (worker, (a, b)) in ours.iter().zip(theirs).enumerate() {
        if *a as u32 != *b {
            check.mismatches[reader] += 1;
            if counts && check.examples.len() < 5 {
                check.examples.push(format!(
                    "{}: worker {worker}: ours {a}, from the dump {b}",
                    READERS[reader]
                ));
            }
        }
    }
}

/// The markdown table of `checks`.
pub fn table(checks: &[DumpCheck]) -> String {
    let mut out = String::from(
        "| workload | memberships | dump events | dump blocks | dump JSON | depths checked | RadixTree rejected | mismatches RadixTree / CRTC / fresh KvIndex |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for c in checks {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} MB | {} | {} | {} / {}{} / {} |\n",
            c.name,
            c.memberships,
            c.events,
            c.blocks,
            c.json_bytes as f64 / 1e6,
            c.depths_checked,
            c.radix_rejected,
            c.mismatches[0],
            c.mismatches[1],
            if c.ids == EngineIds::Shared {
                ""
            } else {
                " (not required)"
            },
            c.mismatches[2],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{SyntheticSpec, build};
    use crate::workload::Block;

    fn assert_interoperates(check: &DumpCheck) {
        assert_eq!(check.failures(), 0, "{}: {:?}", check.name, check.examples);
        assert!(check.depths_checked > 0);
    }

    #[test]
    fn small_synthetic_dump_rebuilds_upstream_trees_for_every_id_flavour() {
        let spec = SyntheticSpec {
            workers: 6,
            contexts: 24,
            contexts_per_worker: 8,
            queries: 48,
        };
        let workload = build(&spec, &indicatif::ProgressBar::hidden());
        for ids in EngineIds::ALL {
            let check = check(&workload, ids);
            assert_interoperates(&check);
            // Shared ids chain every segment to its parent: fewer events than root paths.
            if ids == EngineIds::Shared {
                assert_eq!(check.blocks, check.memberships, "{check:?}");
            }
        }
    }

    /// Worker 0 stores a chain and a branch off its middle, then evicts the branch's tip;
    /// worker 1 stores the chain's first half and a branch of its own; worker 2 holds a
    /// block whose parent it evicted (no lookup reaches it).
    #[test]
    fn branches_evictions_and_orphans_survive_the_round_trip() {
        let block = |n: u64| Block {
            local: 100 + n,
            seq: 0,
        };
        let chain = |locals: &[u64], parent: Option<u64>| -> Vec<Block> {
            let mut seq = parent;
            locals
                .iter()
                .map(|l| {
                    let mut b = block(*l);
                    b.seq = ours::kv::next_sequence_hash(
                        seq.map(SequenceHash),
                        ours::kv::LocalBlockHash(b.local),
                    )
                    .0;
                    seq = Some(b.seq);
                    b
                })
                .collect()
        };
        let trunk = chain(&[1, 2, 3, 4, 5, 6], None);
        let branch = chain(&[7, 8, 9], Some(trunk[2].seq));
        let other = chain(&[10, 11], Some(trunk[1].seq));
        let stored = |worker, event_id, parent: Option<&Block>, blocks: &[Block]| Event {
            worker,
            event_id,
            change: Change::Stored {
                parent: parent.map(|b| b.seq),
                blocks: blocks.to_vec(),
            },
        };
        let events = vec![
            stored(0, 0, None, &trunk),
            stored(0, 1, Some(&trunk[2]), &branch),
            Event {
                worker: 0,
                event_id: 2,
                change: Change::Removed {
                    seqs: vec![branch[2].seq],
                },
            },
            stored(1, 0, None, &trunk[..3]),
            stored(1, 1, Some(&trunk[1]), &other),
            stored(2, 0, None, &trunk[..4]),
            Event {
                worker: 2,
                event_id: 1,
                change: Change::Removed {
                    seqs: vec![trunk[2].seq],
                },
            },
        ];
        let query = |blocks: Vec<Block>| crate::workload::Query {
            local: blocks.iter().map(|b| b.local).collect(),
            seq: blocks.iter().map(|b| b.seq).collect(),
            tokens: None,
        };
        let through = |tail: &[Block], at: usize| {
            let mut blocks = trunk[..at].to_vec();
            blocks.extend_from_slice(tail);
            query(blocks)
        };
        let workload = Workload {
            name: "branches".into(),
            workers: 3,
            block_size: 16,
            events,
            queries: vec![
                query(trunk.clone()),
                through(&branch, 3),
                through(&other, 2),
            ],
            checkpoints: None,
            expected: Vec::new(),
            memberships: 0,
        };
        for ids in EngineIds::ALL {
            assert_interoperates(&check(&workload, ids));
        }
    }
}
