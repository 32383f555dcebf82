//! A request stage arrives: it is booked through the router, its hint is read into fetch
//! orders, and it queues on the booked worker.

use super::sim_worker::{FetchOrder, Job};
use super::{KV_FETCH, Simulation, endpoint_key, request_id};
use crate::outcome::BookingRecord;
use crate::router_port::RouterPort;
use dynamo_kv_router::plugins::{KV_FETCH_ACTION_VERSION, KvFetchPayload};
use dynamo_kv_router::router::{Prompt, RouteRequest};
use dynamo_kv_router::wire::{KvHint, NumberedAction};
use std::time::Instant;

impl<R: RouterPort + ?Sized> Simulation<'_, R> {
    /// Books `request` for `stage` and queues it on the booked worker.
    pub(super) fn arrive(&mut self, request: u32, stage: u8) {
        let prepared = &self.workload.requests[request as usize];
        let route = RouteRequest {
            request_id: request_id(request, stage),
            role: self.stages[stage as usize],
            prompt: Prompt::Blocks {
                sequence_hashes: prepared.sequence_hashes.clone(),
                prompt_tokens: prepared.prompt_tokens,
            },
            session: prepared.session.clone(),
            identity: Default::default(),
            allowed_workers: None,
        };
        self.router.set_time(self.now);
        let started = Instant::now();
        let booked = self.router.book(&route);
        let latency = started.elapsed();
        self.router.run_shadows();
        let booking = match booked {
            Ok(booking) => booking,
            Err(error) => {
                tracing::debug!(request = route.request_id, "booking failed: {error}");
                *self
                    .result
                    .book_failures
                    .entry(error.reason().to_owned())
                    .or_default() += 1;
                return;
            }
        };
        let worker = booking.worker.worker_id as usize;
        let valid = booking.worker.dp_rank == 0
            && self.workers.get(worker).is_some_and(|w| w.stage == stage);
        if !valid {
            *self
                .result
                .book_failures
                .entry("booked_unknown_worker".to_owned())
                .or_default() += 1;
            self.router.release(&route.request_id);
            return;
        }
        let mut record = BookingRecord {
            latency_ns: latency.as_nanos().min(u128::from(u64::MAX)) as u64,
            actions_dropped: booking.stats.actions_dropped as u32,
            policy_failures: booking.stats.policy_failures as u32,
            ..BookingRecord::default()
        };
        let fetches = match &booking.hint {
            Some(hint) => self.read_hint(hint, &mut record),
            None => Vec::new(),
        };
        self.result.bookings.push(record);
        self.workers[worker].queue.push_back(Job {
            request,
            stage,
            arrived_us: self.now,
            fetches,
            predicted_local: booking.stats.cached_blocks.min(u32::MAX as usize) as u32,
        });
        if self.workers[worker].running.is_none() {
            self.start(worker);
        }
    }

    fn read_hint(&self, hint: &KvHint, record: &mut BookingRecord) -> Vec<FetchOrder> {
        record.hint = true;
        record.actions = hint.actions.len() as u32;
        let mut fetches = Vec::new();
        for action in &hint.actions {
            if action.action_type != KV_FETCH {
                record.other_actions += 1;
                continue;
            }
            match self.fetch_order(action) {
                Some(order) => {
                    record.fetch_actions += 1;
                    fetches.push(order);
                }
                None => record.unusable_fetch_actions += 1,
            }
        }
        fetches
    }

    /// The fetch a `kv.fetch@1.0` action asks for, read by its typed payload contract.
    fn fetch_order(&self, action: &NumberedAction) -> Option<FetchOrder> {
        if action.action_version != KV_FETCH_ACTION_VERSION {
            return None;
        }
        let payload = KvFetchPayload::from_payload(&action.payload).ok()?;
        let source = *self
            .endpoints
            .get(&endpoint_key(&payload.source_control_endpoint))?;
        Some(FetchOrder {
            source,
            block_hashes: payload.block_hashes,
        })
    }
}
