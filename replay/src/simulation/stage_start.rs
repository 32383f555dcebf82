//! A worker starts a queued stage: what it reuses, fetches and computes is decided at this
//! moment, and the end of the work is scheduled.

use super::sim_worker::{FetchOrder, Job, SimWorker};
use super::{Event, Simulation};
use crate::block_cache::BlockCache;
use crate::cluster::ResolvedCluster;
use crate::engine_block::sequence_hash_of;
use crate::outcome::StageOutcome;
use crate::router_port::RouterPort;
use dynamo_kv_router::kv::SequenceHash;

/// How a stage obtains the blocks of its prompt, decided when the worker starts it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Reuse {
    /// The prefix the worker held when the stage started.
    held_at_start: usize,
    /// Blocks `0..usable` are local or fetched; the rest are recomputed.
    usable: usize,
    /// Blocks the worker held (the held prefix and blocks further on).
    local: usize,
    /// Blocks fetched from a source.
    fetched: usize,
    /// Blocks copied, including those copied for nothing.
    copied: usize,
    /// Blocks copied for nothing (a payload that broke the root-aligned contract).
    wasted: usize,
    /// Blocks a fetch named that its source had evicted.
    evicted: usize,
}

impl Reuse {
    /// Walks the prompt `hashes` through the worker's cache `own` and the fetch `orders`
    /// (sources in `workers`).
    fn walk(
        own: &BlockCache,
        workers: &[SimWorker],
        orders: &[FetchOrder],
        hashes: &[u64],
    ) -> Self {
        let held_at_start = own.prefix_len(hashes);
        let mut reuse = Reuse {
            held_at_start,
            usable: held_at_start,
            local: held_at_start,
            ..Reuse::default()
        };
        for order in orders {
            reuse.follow(own, &workers[order.source as usize].cache, order, hashes);
            // A fetch can bridge a gap to blocks the worker still holds further on.
            while reuse.usable < hashes.len() && own.contains(hashes[reuse.usable]) {
                reuse.local += 1;
                reuse.usable += 1;
            }
        }
        reuse
    }

    /// Follows one fetch order from the current frontier. The payload is root-aligned: the
    /// worker skips the entries of blocks it holds and fetches only the suffix it lacks.
    fn follow(
        &mut self,
        own: &BlockCache,
        source: &BlockCache,
        order: &FetchOrder,
        hashes: &[u64],
    ) {
        let named = order.block_hashes.len().min(hashes.len());
        while self.usable < named {
            let position = self.usable;
            let sequence_hash = sequence_hash_of(order.block_hashes[position].0);
            if sequence_hash != hashes[position] {
                // Not this request's block: the payload broke the contract; what the source
                // still holds of the rest is copied for nothing.
                self.wasted += order.block_hashes[position..]
                    .iter()
                    .filter(|engine| source.contains(sequence_hash_of(engine.0)))
                    .count();
                self.copied += self.wasted;
                return;
            }
            if own.contains(sequence_hash) {
                self.local += 1;
                self.usable += 1;
                continue;
            }
            if !source.contains(sequence_hash) {
                // The source evicted it: the rest of the suffix cannot be used.
                self.evicted += order.block_hashes[position..named]
                    .iter()
                    .filter(|engine| !own.contains(sequence_hash_of(engine.0)))
                    .count();
                return;
            }
            self.copied += 1;
            self.fetched += 1;
            self.usable += 1;
        }
    }
}

impl<R: RouterPort + ?Sized> Simulation<'_, R> {
    /// Starts the next queued job of `worker`: decides, at this moment, which blocks are local,
    /// which a fetch can copy, and which must be computed, and schedules the end of the work.
    pub(super) fn start(&mut self, worker: usize) {
        let Some(job) = self.workers[worker].queue.pop_front() else {
            return;
        };
        let prepared = &self.workload.requests[job.request as usize];
        let hashes = SequenceHash::as_u64s(&prepared.sequence_hashes);
        let own = &self.workers[worker].cache;
        let reuse = Reuse::walk(own, &self.workers, &job.fetches, hashes);
        let recount = recount_reuse(
            own,
            &self.workers,
            &job.fetches,
            &hashes[reuse.held_at_start..],
        );
        if recount != (reuse.local - reuse.held_at_start, reuse.fetched) {
            self.result.invariants.reuse_recount_mismatches += 1;
        }
        let recomputed = hashes.len() - reuse.usable;
        let duration = stage_duration(
            &self.cluster,
            &job,
            prepared.prompt_tokens,
            &reuse,
            recomputed,
        );
        let outcome = StageOutcome {
            request: job.request,
            stage: job.stage,
            worker: worker as u32,
            blocks: hashes.len() as u32,
            local: reuse.local as u32,
            fetched: reuse.fetched as u32,
            recomputed: recomputed as u32,
            fetch_wasted: reuse.wasted as u32,
            hint_blocks_evicted: reuse.evicted as u32,
            predicted_local: job.predicted_local,
            held_at_start: reuse.held_at_start as u32,
            arrived_us: job.arrived_us,
            start_us: self.now,
            done_us: self.now + duration,
        };
        let state = &mut self.workers[worker];
        state.running = Some(outcome);
        state.busy_us += duration;
        state.served += 1;
        self.schedule(
            self.now + duration,
            Event::WorkDone {
                worker: worker as u32,
            },
        );
    }
}

/// The stage's virtual duration in microseconds (at least 1): the copies it fetches, then
/// either the prefill of what its cache does not cover or, for a decode stage after a separate
/// prefill, the transfer of the `recomputed` rest from the prefill worker.
fn stage_duration(
    cluster: &ResolvedCluster,
    job: &Job,
    prompt_tokens: usize,
    reuse: &Reuse,
    recomputed: usize,
) -> u64 {
    let mut duration = 0.0;
    if reuse.copied > 0 {
        duration +=
            cluster.fetch_latency_us + reuse.copied as f64 / cluster.fetch_blocks_per_s * 1e6;
    }
    if job.stage > 0 {
        if recomputed > 0 {
            duration +=
                cluster.fetch_latency_us + recomputed as f64 / cluster.fetch_blocks_per_s * 1e6;
        }
    } else {
        let cached_tokens = reuse.usable * cluster.block_size as usize;
        let tokens = prompt_tokens.saturating_sub(cached_tokens).max(1);
        duration += tokens as f64 / cluster.prefill_tokens_per_s * 1e6;
    }
    (duration.round() as u64).max(1)
}

/// Recounts how the blocks past the prefix a worker held at start were obtained, walking the
/// prompt rather than the fetch orders: up to the first block neither the worker nor any fetch
/// source holds, a block the worker holds is local and one only a source holds is fetched.
/// Returns `(local, fetched)`.
fn recount_reuse(
    own: &BlockCache,
    workers: &[SimWorker],
    fetches: &[FetchOrder],
    rest: &[u64],
) -> (usize, usize) {
    if fetches.is_empty() {
        return (0, 0);
    }
    // (sequence hash, source) of every block a fetch names, sorted for lookups.
    let mut offered: Vec<(u64, u32)> = fetches
        .iter()
        .flat_map(|order| {
            let source = order.source;
            order
                .block_hashes
                .iter()
                .map(move |engine| (sequence_hash_of(engine.0), source))
        })
        .collect();
    offered.sort_unstable();
    let named = |hash: u64| {
        let first = offered.partition_point(|(offered, _)| *offered < hash);
        offered[first..]
            .iter()
            .take_while(|(offered, _)| *offered == hash)
            .any(|(_, source)| workers[*source as usize].cache.contains(hash))
    };
    let (mut local, mut fetched) = (0, 0);
    for hash in rest {
        if own.contains(*hash) {
            local += 1;
        } else if named(*hash) {
            fetched += 1;
        } else {
            break;
        }
    }
    (local, fetched)
}
