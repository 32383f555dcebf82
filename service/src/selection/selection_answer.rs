//! The answer of a selection: the chosen worker's endpoint, what it caches of the prompt per
//! tier and per dp rank, the prefill it must compute and its decode load.

use crate::error::ServiceError;
use crate::partition::Partition;
use crate::selection::prompt::NormalizedPrompt;
use crate::selection::selection_response::{OverlapSummary, SelectResponse};
use crate::selection::selection_service::SelectionService;
use crate::selection::worker_choice::Admission;
use dynamo_kv_router::router::{Booking, WorkerId};
use std::collections::BTreeMap;

impl SelectionService {
    /// The answer of `/select` (`admission` is a query) or `/select_and_reserve` for `booking`.
    pub(crate) fn response(
        &self,
        partition: &Partition,
        booking: Booking,
        prompt: NormalizedPrompt,
        admission: Admission,
        selection_id: Option<String>,
    ) -> Result<SelectResponse, ServiceError> {
        let block_size = partition.block_size;
        let worker = booking.worker;
        // Only the ranks and the endpoint are needed: the record is not cloned.
        let (ranks, endpoint) = self
            .catalog
            .read()
            .get(&worker.worker_id)
            .map(|entry| (entry.record.dp_ranks(), entry.record.endpoint.clone()))
            .ok_or_else(|| {
                ServiceError::Internal(format!(
                    "selected worker {} is no longer schedulable",
                    worker.worker_id
                ))
            })?;
        let dp = ranks
            .map(|rank| {
                let blocks = if rank == worker.dp_rank {
                    booking.stats.cached_blocks
                } else {
                    partition.router.cached_prefix(
                        WorkerId::new(worker.worker_id, rank),
                        &prompt.sequence_hashes,
                    )
                };
                (rank.to_string(), tokens_of(blocks, block_size))
            })
            .collect();
        let cached_tokens = booking.stats.cached_blocks * block_size as usize;
        let request_blocks = prompt.sequence_hashes.len() as u64;
        let active_blocks = partition
            .router
            .load_of(worker)
            .map_or(0, |load| load.active_blocks);
        let booked = admission == Admission::Book;
        Ok(SelectResponse {
            selection_id,
            sequence_hashes: booked.then_some(prompt.reported_hashes),
            isl_tokens: booked.then_some(prompt.isl_tokens),
            track_prefill_tokens: booked.then_some(true),
            model_name: partition.key.model_name.clone(),
            routing_group: partition.key.routing_group.clone(),
            worker_id: worker.worker_id,
            dp_rank: worker.dp_rank,
            endpoint: endpoint.unwrap_or_default(),
            block_size,
            overlap: device_tier_overlap(dp),
            effective_prefill_tokens: prompt.isl_tokens.saturating_sub(cached_tokens),
            potential_decode_blocks: if booked {
                active_blocks
            } else {
                active_blocks + request_blocks
            },
            kv_hint: booking.hint,
        })
    }
}

/// The overlap summary of the chosen worker from its ranks' device-tier matches (`dp`, tokens
/// by rank), as upstream builds it (`OverlapSignals::selected_worker_tiers` and
/// `MooncakeOverlapSummary::from_selected_worker_tiers` in `dynamo-kv-router` 1.6.1): each tier
/// is the maximum over the worker's dp ranks, and the tiers are cumulative: `cpu` is the device
/// match extended by host-memory blocks, `disk` that extended by disk and external blocks, and
/// `longest_matched` the largest of the three. This router indexes the device tier only (it
/// ignores events of other media), so the extensions are zero: `cpu`, `disk` and
/// `longest_matched` all equal `gpu`, the longest match of any rank of the worker, which can
/// exceed the chosen rank's own match.
fn device_tier_overlap(dp: BTreeMap<String, u32>) -> OverlapSummary {
    let gpu = dp.values().copied().max().unwrap_or(0);
    let (host_extension, disk_extension) = (0, 0);
    let cpu = gpu.saturating_add(host_extension);
    let disk = cpu.saturating_add(disk_extension);
    OverlapSummary {
        longest_matched: gpu.max(cpu).max(disk),
        gpu,
        dp,
        cpu,
        disk,
    }
}

fn tokens_of(blocks: usize, block_size: u32) -> u32 {
    u32::try_from(blocks.saturating_mul(block_size as usize)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tier_is_the_longest_device_match_of_any_rank() {
        let dp = BTreeMap::from([("0".to_owned(), 16), ("1".to_owned(), 48)]);
        let overlap = device_tier_overlap(dp.clone());
        assert_eq!(
            overlap,
            OverlapSummary {
                longest_matched: 48,
                gpu: 48,
                dp,
                cpu: 48,
                disk: 48,
            }
        );
        assert_eq!(device_tier_overlap(BTreeMap::new()).longest_matched, 0);
    }
}
