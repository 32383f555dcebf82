//! The Mooncake trace as a workload: each request is routed to the worker with the longest
//! cached prefix (ties: the emptiest worker), which then caches the request's blocks with LRU
//! eviction at a fixed capacity. Queries run between the events, in trace order.

use crate::workload::{Block, Change, Event, Oracle, Query, Workload};
use indicatif::ProgressBar;
use ours::kv::sequence_hashes_from_block_ids;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

#[derive(serde::Deserialize)]
struct TraceLine {
    hash_ids: Vec<u64>,
}

/// Block size of the trace's hash ids.
pub const BLOCK_SIZE: u32 = 512;

/// One worker's cache: LRU by (last use, deepest first), so a child always leaves before its
/// parent and every worker's blocks stay unbroken prefixes.
#[derive(Default)]
struct Cache {
    order: BTreeSet<(u64, std::cmp::Reverse<u32>, u64)>,
    entries: HashMap<u64, (u64, u32)>,
}

impl Cache {
    fn touch(&mut self, seq: u64, depth: u32, now: u64) {
        if let Some((used, d)) = self.entries.insert(seq, (now, depth)) {
            self.order.remove(&(used, std::cmp::Reverse(d), seq));
        }
        self.order.insert((now, std::cmp::Reverse(depth), seq));
    }

    fn evict(&mut self) -> Option<u64> {
        let (_, _, seq) = self.order.pop_first()?;
        self.entries.remove(&seq);
        Some(seq)
    }
}

/// Reads the trace at `path` and replays it on `workers` workers of `capacity` blocks each.
pub fn build(
    path: &Path,
    workers: u32,
    capacity: usize,
    progress: &ProgressBar,
) -> Result<Workload, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the trace {}: {e}", path.display()))?;
    let requests: Vec<Vec<u64>> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str::<TraceLine>(line)
                .map(|l| l.hash_ids)
                .map_err(|e| format!("{}:{}: not a trace line: {e}", path.display(), n + 1))
        })
        .collect::<Result<_, _>>()?;
    progress.set_length(requests.len() as u64);
    progress.set_message("replaying the trace");
    let mut oracle = Oracle::default();
    let mut caches: Vec<Cache> = (0..workers).map(|_| Cache::default()).collect();
    let mut event_ids = vec![0u64; workers as usize];
    let (mut events, mut queries, mut checkpoints, mut expected) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (now, ids) in requests.iter().enumerate() {
        progress.inc(1);
        let seq: Vec<u64> = sequence_hashes_from_block_ids(ids)
            .into_iter()
            .map(|hash| hash.0)
            .collect();
        let depths = oracle.depths(workers, &seq);
        let worker = (0..workers)
            .max_by_key(|w| {
                let held = oracle.held_by(*w);
                (
                    depths[*w as usize],
                    std::cmp::Reverse(held),
                    std::cmp::Reverse(*w),
                )
            })
            .unwrap_or(0);
        checkpoints.push(events.len());
        expected.push(depths.clone());
        queries.push(Query {
            local: ids.clone(),
            seq: seq.clone(),
            tokens: None,
        });
        let depth = depths[worker as usize] as usize;
        let keep = seq.len().min(capacity);
        let cache = &mut caches[worker as usize];
        for (position, hash) in seq[..depth.min(keep)].iter().enumerate() {
            cache.touch(*hash, position as u32, now as u64);
        }
        if depth >= keep {
            continue;
        }
        let mut evicted = Vec::new();
        while cache.entries.len() + (keep - depth) > capacity {
            match cache.evict() {
                Some(seq) => evicted.push(seq),
                None => break,
            }
        }
        let id = &mut event_ids[worker as usize];
        if !evicted.is_empty() {
            let event = Event {
                worker,
                event_id: *id,
                change: Change::Removed { seqs: evicted },
            };
            *id += 1;
            oracle.apply(&event);
            events.push(event);
        }
        for (position, hash) in seq[depth..keep].iter().enumerate() {
            cache.touch(*hash, (depth + position) as u32, now as u64);
        }
        let event = Event {
            worker,
            event_id: *id,
            change: Change::Stored {
                parent: depth.checked_sub(1).map(|p| seq[p]),
                blocks: (depth..keep)
                    .map(|i| Block {
                        local: ids[i],
                        seq: seq[i],
                    })
                    .collect(),
            },
        };
        *id += 1;
        oracle.apply(&event);
        events.push(event);
    }
    Ok(Workload {
        name: format!(
            "Mooncake trace: {} requests, {workers} workers of {capacity} blocks, {} memberships at the end",
            requests.len(),
            oracle.memberships()
        ),
        workers,
        block_size: BLOCK_SIZE,
        events,
        queries,
        checkpoints: Some(checkpoints),
        expected,
        memberships: oracle.memberships(),
    })
}
