//! Engine events → the router's events: local block hashes computed from the stored tokens
//! (salted by the event's LoRA and cache salt), chained by the index through the parent's
//! engine hash; every event of a batch numbered by the batch's ZMQ sequence number.

use crate::engine_events::engine_event::{BlockStored, EngineEvent, EngineEventBatch, SkipReason};
use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, RequestIdentity, RouterEvent, StorageTier,
    local_block_hashes,
};
use dynamo_kv_router::router::WorkerId;

/// A batch ready for the router, and what was left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConvertedBatch {
    /// The router events, all numbered by the batch's sequence number. A batch with nothing
    /// to index still yields one event (a non-device no-op) so that its number is seen.
    pub events: Vec<RouterEvent>,
    /// Events left out, by reason.
    pub skipped: Vec<SkipReason>,
}

/// Converts `batch`, published as number `seq` by `worker_id` (whose rank, when the batch does
/// not name one, is `default_rank`), for a partition of `block_size`-token blocks.
pub fn convert_batch(
    batch: &EngineEventBatch,
    seq: u64,
    worker_id: u64,
    default_rank: u32,
    block_size: u32,
) -> ConvertedBatch {
    let worker = WorkerId::new(worker_id, batch.data_parallel_rank.unwrap_or(default_rank));
    let mut converted = ConvertedBatch::default();
    for event in &batch.events {
        if let Some(reason) = event.skip_reason() {
            converted.skipped.push(reason);
            continue;
        }
        let data = match event {
            EngineEvent::BlockStored(stored) => stored_data(stored, block_size),
            EngineEvent::BlockRemoved(removed) => KvCacheEventData::removed(
                removed
                    .block_hashes
                    .iter()
                    .map(|hash| EngineBlockHash(*hash)),
            ),
            EngineEvent::AllBlocksCleared => KvCacheEventData::Cleared,
            EngineEvent::Ignored => continue,
        };
        converted.events.push(RouterEvent::new(worker, seq, data));
    }
    if converted.events.is_empty() {
        converted.events.push(
            RouterEvent::new(worker, seq, KvCacheEventData::removed([]))
                .with_storage_tier(StorageTier::HostPinned),
        );
    }
    converted
}

/// The stored blocks with their local hashes: block `i` hashes tokens `i*block_size ..
/// (i+1)*block_size` under the event's identity. Blocks without a full set of tokens are left
/// out (the chain stops there).
fn stored_data(stored: &BlockStored, block_size: u32) -> KvCacheEventData {
    let mut identity = RequestIdentity::plain().with_eagle(stored.is_eagle);
    if let Some(name) = &stored.lora_name {
        identity = identity.with_lora(name.clone());
    }
    if let Some(salt) = &stored.cache_salt {
        identity = identity.with_cache_namespace(salt.clone());
    }
    let local = local_block_hashes(&stored.token_ids, block_size, &identity);
    KvCacheEventData::stored(
        stored.parent_block_hash.map(EngineBlockHash),
        stored
            .block_hashes
            .iter()
            .map(|hash| EngineBlockHash(*hash))
            .zip(local),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_events::engine_event::BlockRemoved;
    use dynamo_kv_router::kv::{LocalBlockHash, block_hashes};

    fn stored(hashes: Vec<u64>, parent: Option<u64>, tokens: Vec<u32>) -> EngineEvent {
        EngineEvent::BlockStored(BlockStored {
            block_hashes: hashes,
            parent_block_hash: parent,
            token_ids: tokens,
            block_size: 4,
            ..BlockStored::default()
        })
    }

    #[test]
    fn stores_carry_local_hashes_of_their_tokens_and_the_batch_number() {
        let tokens: Vec<u32> = (0..8).collect();
        let batch = EngineEventBatch {
            ts: 0.0,
            events: vec![stored(vec![11, 12], Some(10), tokens.clone())],
            data_parallel_rank: Some(2),
        };
        let converted = convert_batch(&batch, 5, 7, 0, 4);
        let expected: Vec<(EngineBlockHash, LocalBlockHash)> = vec![11, 12]
            .into_iter()
            .map(EngineBlockHash)
            .zip(block_hashes(&tokens, 4))
            .collect();
        assert_eq!(
            converted.events,
            vec![RouterEvent::new(
                WorkerId::new(7, 2),
                5,
                KvCacheEventData::stored(Some(EngineBlockHash(10)), expected)
            )]
        );
    }

    #[test]
    fn lora_salts_the_local_hashes() {
        let tokens: Vec<u32> = (0..4).collect();
        let mut event = stored(vec![1], None, tokens.clone());
        let plain = convert_batch(
            &EngineEventBatch {
                ts: 0.0,
                events: vec![event.clone()],
                data_parallel_rank: None,
            },
            0,
            1,
            0,
            4,
        );
        if let EngineEvent::BlockStored(stored) = &mut event {
            stored.lora_name = Some("adapter".to_owned());
        }
        let salted = convert_batch(
            &EngineEventBatch {
                ts: 0.0,
                events: vec![event],
                data_parallel_rank: None,
            },
            0,
            1,
            0,
            4,
        );
        assert_ne!(plain.events, salted.events);
    }

    #[test]
    fn a_batch_with_nothing_to_index_still_numbers_its_sequence() {
        let batch = EngineEventBatch {
            ts: 0.0,
            events: vec![EngineEvent::BlockRemoved(BlockRemoved {
                block_hashes: vec![1],
                medium: Some("CPU".to_owned()),
                ..BlockRemoved::default()
            })],
            data_parallel_rank: None,
        };
        let converted = convert_batch(&batch, 9, 3, 1, 4);
        assert_eq!(converted.skipped, vec![SkipReason::NonGpuMedium]);
        assert_eq!(converted.events.len(), 1);
        assert_eq!(converted.events[0].event_id(), 9);
        assert_eq!(converted.events[0].worker(), WorkerId::new(3, 1));
        assert_eq!(converted.events[0].storage_tier, StorageTier::HostPinned);
    }
}
