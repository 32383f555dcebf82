//! A worker finishes a stage: it stores the prompt's blocks (evicting others), publishes the
//! KV events that say so, and hands the request on to its next stage or to decode.

use super::sim_worker::SimWorker;
use super::{Event, Simulation, write_request_id};
use crate::engine_block::engine_block_hash;
use crate::router_port::RouterPort;
use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData,
    RouterEvent, SequenceHash,
};
use std::time::Instant;

impl<R: RouterPort + ?Sized> Simulation<'_, R> {
    /// The worker finished a job: it now holds the prompt's blocks (evicting others), tells the
    /// router, and hands the request on.
    pub(super) fn work_done(&mut self, worker: usize) {
        let Some(outcome) = self.workers[worker].running.take() else {
            return;
        };
        self.store_blocks(worker, outcome.request as usize);
        self.result.stage_outcomes.push(outcome);
        let (request, stage) = (outcome.request, outcome.stage);
        write_request_id(&mut self.id_scratch, request, stage);
        self.router.prefill_complete(&self.id_scratch);
        if (stage as usize) + 1 < self.stages.len() {
            self.router.release(&self.id_scratch);
            self.arrive(request, stage + 1);
        } else {
            let prepared = &self.workload.requests[request as usize];
            let timing = &mut self.result.requests[request as usize];
            timing.ttft_us = Some(self.now.saturating_sub(timing.arrival_us));
            let decode_us = prepared.output_tokens as f64 / self.cluster.decode_tokens_per_s * 1e6;
            self.schedule(
                self.now + decode_us.round() as u64,
                Event::DecodeDone { request, stage },
            );
        }
        self.start(worker);
    }

    /// Makes the worker hold every block of the request, publishing one `removed` event for
    /// what it evicted, then `stored` events for the new blocks (chained to their parents).
    fn store_blocks(&mut self, worker: usize, request: usize) {
        let prepared = &self.workload.requests[request];
        let hashes = SequenceHash::as_u64s(&prepared.sequence_hashes);
        let state = &mut self.workers[worker];
        let mut new = std::mem::take(&mut self.new_scratch);
        let mut evicted = std::mem::take(&mut self.removed_scratch);
        let mut slots = std::mem::take(&mut self.slot_scratch);
        evicted.clear();
        state
            .cache
            .store_chain(hashes, &mut new, &mut evicted, &mut slots);
        let not_held = hashes
            .iter()
            .zip(&new)
            .filter(|(hash, is_new)| **is_new && !state.cache.contains(**hash))
            .count();
        self.result.invariants.stored_not_held += not_held as u64;
        let events = &mut self.result.events;
        let event_ns = &mut self.result.event_ns;
        let router = self.router;
        if !evicted.is_empty() {
            let data = KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: evicted
                    .iter()
                    .map(|hash| EngineBlockHash(engine_block_hash(*hash)))
                    .collect(),
            });
            publish_event(router, state, events, event_ns, data);
        }
        let mut run = std::mem::take(&mut self.stored_scratch);
        run.clear();
        let mut parent = None;
        for (index, is_new) in new.iter().enumerate() {
            if *is_new {
                if run.is_empty() {
                    parent = index
                        .checked_sub(1)
                        .map(|p| EngineBlockHash(engine_block_hash(hashes[p])));
                }
                run.push(KvCacheStoredBlockData {
                    block_hash: EngineBlockHash(engine_block_hash(hashes[index])),
                    tokens_hash: prepared.local_hashes[index],
                    mm_extra_info: None,
                });
            } else if !run.is_empty() {
                run = publish_run(router, state, events, event_ns, parent, run);
            }
        }
        if !run.is_empty() {
            run = publish_run(router, state, events, event_ns, parent, run);
        }
        self.stored_scratch = run;
        self.removed_scratch = evicted;
        self.new_scratch = new;
        self.slot_scratch = slots;
    }
}

/// Publishes a run of stored blocks and hands back the buffer, emptied for reuse.
fn publish_run<R: RouterPort + ?Sized>(
    router: &R,
    worker: &mut SimWorker,
    events: &mut u64,
    event_ns: &mut u64,
    parent_hash: Option<EngineBlockHash>,
    blocks: Vec<KvCacheStoredBlockData>,
) -> Vec<KvCacheStoredBlockData> {
    let data = KvCacheEventData::Stored(KvCacheStoreData {
        parent_hash,
        start_position: None,
        blocks,
    });
    let mut run = match publish_event(router, worker, events, event_ns, data) {
        KvCacheEventData::Stored(store) => store.blocks,
        _ => Vec::new(),
    };
    run.clear();
    run
}

/// Sends one event numbered by the worker's monotonic counter and returns its data for reuse.
fn publish_event<R: RouterPort + ?Sized>(
    router: &R,
    worker: &mut SimWorker,
    events: &mut u64,
    event_ns: &mut u64,
    data: KvCacheEventData,
) -> KvCacheEventData {
    match &data {
        KvCacheEventData::Stored(store) => worker.stored_blocks += store.blocks.len() as u64,
        KvCacheEventData::Removed(remove) => {
            worker.removed_blocks += remove.block_hashes.len() as u64;
        }
        KvCacheEventData::Cleared => {}
    }
    let event = RouterEvent::new(worker.id, worker.next_event_id, data);
    worker.next_event_id += 1;
    *events += 1;
    let started = Instant::now();
    router.apply_event(&event);
    *event_ns += started.elapsed().as_nanos() as u64;
    event.event.data
}
