//! KV events as upstream NVIDIA Dynamo's `RouterEvent` writes them: which worker, which storage
//! tier and residency domain, and the cache event itself (blocks stored, blocks removed, cache
//! cleared), numbered by the worker's `event_id`.
//!
//! JSON form (one event, as upstream serialises it):
//!
//! ```json
//! {"worker_id": 7, "storage_tier": "device", "residency_domain": "worker",
//!  "event": {"event_id": 1, "dp_rank": 1,
//!            "data": {"stored": {"parent_hash": 9001, "start_position": 2,
//!                     "blocks": [{"block_hash": 9002, "tokens_hash": 5532946206955930018,
//!                                 "mm_extra_info": null}]}}}}
//! ```
//!
//! `data` is also `{"removed": {"block_hashes": [...]}}` or `"cleared"`. Events are a wire
//! format that grows: fields this router does not know are ignored, not errors.

use super::event_placement::{EventPlacement, ResidencyDomain, StorageTier};
use crate::block_identity::{EngineBlockHash, LocalBlockHash};
use crate::identity::WorkerId;
use serde::{Deserialize, Serialize};

/// One KV event of one worker (upstream `RouterEvent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouterEvent {
    /// The worker process that emitted the event; its data-parallel rank is `event.dp_rank`.
    pub worker_id: u64,
    /// Where the blocks live; only `device` blocks are indexed.
    #[serde(default)]
    pub storage_tier: StorageTier,
    /// Which lifetime owns the blocks; absent on older publishers.
    #[serde(default, skip_serializing_if = "ResidencyDomain::is_missing")]
    pub residency_domain: ResidencyDomain,
    /// The cache event.
    pub event: KvCacheEvent,
    /// Upstream's stable state source of cache-owner events, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_source: Option<serde_json::Value>,
    /// The session that triggered the event, if the engine reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// One numbered cache event (upstream `KvCacheEvent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvCacheEvent {
    /// The worker rank's event number; consecutive events differ by one.
    pub event_id: u64,
    /// What changed.
    pub data: KvCacheEventData,
    /// The data-parallel rank that emitted the event (0 without data parallelism).
    #[serde(default)]
    pub dp_rank: u32,
}

/// What a cache event reports (upstream `KvCacheEventData`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheEventData {
    /// Blocks stored after `parent_hash`.
    Stored(KvCacheStoreData),
    /// Blocks evicted.
    Removed(KvCacheRemoveData),
    /// The rank dropped its whole cache.
    Cleared,
}

/// Blocks stored, in prefix order (upstream `KvCacheStoreData`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvCacheStoreData {
    /// The engine hash of the block the first stored block follows; `None` = the root.
    pub parent_hash: Option<EngineBlockHash>,
    /// The position of the first stored block in its sequence, when the engine reports it.
    pub start_position: Option<u32>,
    /// The stored blocks.
    pub blocks: Vec<KvCacheStoredBlockData>,
}

/// One stored block (upstream `KvCacheStoredBlockData`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvCacheStoredBlockData {
    /// The engine's own id for the block.
    pub block_hash: EngineBlockHash,
    /// The block's local hash: its own tokens only, not chained (the chain comes from
    /// `parent_hash`).
    pub tokens_hash: LocalBlockHash,
    /// The multimodal objects of the block (already folded into `tokens_hash`).
    pub mm_extra_info: Option<BlockExtraInfo>,
}

/// The multimodal objects of one block (upstream `BlockExtraInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockExtraInfo {
    /// The objects referenced by the block.
    pub mm_objects: Vec<BlockMmObjectInfo>,
}

/// One multimodal object within a block (upstream `BlockMmObjectInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockMmObjectInfo {
    /// The object's hash.
    pub mm_hash: u64,
    /// Token ranges `(start, end)` of the object's placeholders, relative to the block.
    pub offsets: Vec<(usize, usize)>,
}

/// Blocks evicted (upstream `KvCacheRemoveData`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvCacheRemoveData {
    /// The engine hashes of the removed blocks.
    pub block_hashes: Vec<EngineBlockHash>,
}

/// A KV event that could not be read; the router counts it and changes nothing.
#[derive(Debug, thiserror::Error)]
#[error(
    "malformed KV event at line {line}, column {column}: {message}; expected upstream's RouterEvent {{\"worker_id\", \"storage_tier\", \"event\": {{\"event_id\", \"dp_rank\", \"data\": {{\"stored\"|\"removed\"|\"cleared\"}}}}}}"
)]
pub struct MalformedEvent {
    /// Line of the problem in the input.
    pub line: usize,
    /// Column of the problem in the input.
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

impl RouterEvent {
    /// A device-tier, worker-owned event of `worker` numbered `event_id` (what upstream's
    /// `RouterEvent::new` builds).
    pub fn new(worker: WorkerId, event_id: u64, data: KvCacheEventData) -> Self {
        Self {
            worker_id: worker.worker_id,
            storage_tier: StorageTier::Device,
            residency_domain: ResidencyDomain::Worker,
            event: KvCacheEvent {
                event_id,
                data,
                dp_rank: worker.dp_rank,
            },
            state_source: None,
            session_id: None,
        }
    }

    /// The same event in `storage_tier`.
    pub fn with_storage_tier(mut self, storage_tier: StorageTier) -> Self {
        self.storage_tier = storage_tier;
        self
    }

    /// The worker rank the event is about: `(worker_id, event.dp_rank)`.
    pub fn worker(&self) -> WorkerId {
        WorkerId::new(self.worker_id, self.event.dp_rank)
    }

    /// The event's number in its worker rank's stream.
    pub fn event_id(&self) -> u64 {
        self.event.event_id
    }

    /// Where the event applies (upstream `targets_primary`): a `cleared` resets the device
    /// cache whatever its tier unless it is scoped to cache owners; stores and removals apply
    /// on the device tier of a worker-owned domain only.
    pub fn placement(&self) -> EventPlacement {
        let cleared = matches!(self.event.data, KvCacheEventData::Cleared);
        match (&self.residency_domain, cleared) {
            (ResidencyDomain::Unknown(_) | ResidencyDomain::Invalid, _) => {
                EventPlacement::Unsupported
            }
            (ResidencyDomain::Missing | ResidencyDomain::Worker, true) => EventPlacement::Device,
            (ResidencyDomain::CacheOwner, true) => EventPlacement::OtherTier,
            (ResidencyDomain::CacheOwner, false) if self.storage_tier == StorageTier::Device => {
                EventPlacement::Unsupported
            }
            (_, false) if self.storage_tier == StorageTier::Device => EventPlacement::Device,
            (_, false) => EventPlacement::OtherTier,
        }
    }

    /// Reads one event from upstream's JSON form; unknown fields are ignored.
    pub fn from_json(json: &str) -> Result<Self, MalformedEvent> {
        serde_json::from_str(json).map_err(|error| MalformedEvent {
            line: error.line(),
            column: error.column(),
            message: error.to_string(),
        })
    }

    /// The event in upstream's JSON form.
    pub fn to_json(&self) -> String {
        // Integers, strings, enums and JSON values always serialise; the fallback is never reached.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Number of blocks the event stores or removes.
    pub fn block_count(&self) -> usize {
        match &self.event.data {
            KvCacheEventData::Stored(store) => store.blocks.len(),
            KvCacheEventData::Removed(remove) => remove.block_hashes.len(),
            KvCacheEventData::Cleared => 0,
        }
    }
}

impl KvCacheEventData {
    /// Blocks `(engine hash, local hash)` stored after `parent` (`None` = the root), with no
    /// start position or multimodal info.
    pub fn stored(
        parent: Option<EngineBlockHash>,
        blocks: impl IntoIterator<Item = (EngineBlockHash, LocalBlockHash)>,
    ) -> Self {
        KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: parent,
            start_position: None,
            blocks: blocks
                .into_iter()
                .map(|(block_hash, tokens_hash)| KvCacheStoredBlockData {
                    block_hash,
                    tokens_hash,
                    mm_extra_info: None,
                })
                .collect(),
        })
    }

    /// Blocks removed, named by their engine hashes.
    pub fn removed(block_hashes: impl IntoIterator<Item = EngineBlockHash>) -> Self {
        KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: block_hashes.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(n: u64) -> EngineBlockHash {
        EngineBlockHash(n)
    }

    #[test]
    fn writes_upstream_json_field_for_field() {
        let event = RouterEvent::new(
            WorkerId::new(7, 1),
            1,
            KvCacheEventData::Stored(KvCacheStoreData {
                parent_hash: Some(engine(9001)),
                start_position: Some(2),
                blocks: vec![KvCacheStoredBlockData {
                    block_hash: engine(9002),
                    tokens_hash: LocalBlockHash(5532946206955930018),
                    mm_extra_info: None,
                }],
            }),
        );
        assert_eq!(
            event.to_json(),
            r#"{"worker_id":7,"storage_tier":"device","residency_domain":"worker","event":{"event_id":1,"data":{"stored":{"parent_hash":9001,"start_position":2,"blocks":[{"block_hash":9002,"tokens_hash":5532946206955930018,"mm_extra_info":null}]}},"dp_rank":1}}"#
        );
        let cleared = RouterEvent::new(WorkerId::new(7, 1), 3, KvCacheEventData::Cleared);
        assert_eq!(
            cleared.to_json(),
            r#"{"worker_id":7,"storage_tier":"device","residency_domain":"worker","event":{"event_id":3,"data":"cleared","dp_rank":1}}"#
        );
    }

    #[test]
    fn json_forms_round_trip() {
        let mut with_mm = RouterEvent::new(
            WorkerId::new(3, 1),
            7,
            KvCacheEventData::stored(None, [(engine(11), LocalBlockHash(22))]),
        )
        .with_storage_tier(StorageTier::HostPinned);
        if let KvCacheEventData::Stored(store) = &mut with_mm.event.data {
            store.blocks[0].mm_extra_info = Some(BlockExtraInfo {
                mm_objects: vec![BlockMmObjectInfo {
                    mm_hash: 42,
                    offsets: vec![(0, 3)],
                }],
            });
        }
        with_mm.session_id = Some("s".into());
        let events = [
            with_mm,
            RouterEvent::new(
                WorkerId::new(3, 0),
                8,
                KvCacheEventData::removed([engine(11), engine(12)]),
            ),
            RouterEvent::new(WorkerId::new(3, 0), 9, KvCacheEventData::Cleared),
        ];
        for event in events {
            assert_eq!(RouterEvent::from_json(&event.to_json()).ok(), Some(event));
        }
    }

    #[test]
    fn optional_and_unknown_fields() {
        let minimal = RouterEvent::from_json(
            r#"{"worker_id": 1, "event": {"event_id": 2, "data": {"stored": {"blocks": [{"block_hash": 3, "tokens_hash": 4}]}}}, "future_field": {"x": 1}}"#,
        );
        let minimal = minimal.ok();
        assert_eq!(
            minimal.as_ref().map(RouterEvent::worker),
            Some(WorkerId::new(1, 0))
        );
        assert_eq!(
            minimal.as_ref().map(|e| e.storage_tier),
            Some(StorageTier::Device)
        );
        assert_eq!(
            minimal.as_ref().map(|e| e.residency_domain.clone()),
            Some(ResidencyDomain::Missing)
        );
        assert_eq!(
            minimal.as_ref().map(|e| e.event.data.clone()),
            Some(KvCacheEventData::stored(
                None,
                [(engine(3), LocalBlockHash(4))]
            ))
        );
        // Missing stays missing when written back.
        assert!(
            !minimal
                .map(|e| e.to_json())
                .unwrap_or_default()
                .contains("residency_domain")
        );
    }

    #[test]
    fn placement_follows_tier_and_domain() {
        let read = |tier: &str, domain: &str, data: &str| {
            RouterEvent::from_json(&format!(
                r#"{{"worker_id": 1, "storage_tier": "{tier}", {domain} "event": {{"event_id": 0, "data": {data}}}}}"#
            ))
            .map(|e| e.placement())
            .ok()
        };
        let store = r#"{"removed": {"block_hashes": [1]}}"#;
        use EventPlacement::*;
        assert_eq!(read("device", "", store), Some(Device));
        assert_eq!(
            read("device", r#""residency_domain": "worker","#, store),
            Some(Device)
        );
        assert_eq!(read("host_pinned", "", store), Some(OtherTier));
        assert_eq!(read("disk", "", store), Some(OtherTier));
        assert_eq!(read("external", "", store), Some(OtherTier));
        assert_eq!(
            read("device", r#""residency_domain": "cache_owner","#, store),
            Some(Unsupported)
        );
        assert_eq!(
            read("disk", r#""residency_domain": "cache_owner","#, store),
            Some(OtherTier)
        );
        assert_eq!(
            read("device", r#""residency_domain": "elsewhere","#, store),
            Some(Unsupported)
        );
        assert_eq!(
            read("device", r#""residency_domain": null,"#, store),
            Some(Unsupported)
        );
        assert_eq!(read("disk", "", r#""cleared""#), Some(Device));
        assert_eq!(
            read(
                "device",
                r#""residency_domain": "cache_owner","#,
                r#""cleared""#
            ),
            Some(OtherTier)
        );
    }

    #[test]
    fn malformed_events_are_errors_with_a_location() {
        for bad in [
            "",
            "{",
            "[]",
            r#"{"worker_id": -1, "event": {"event_id": 0, "data": "cleared"}}"#,
            r#"{"worker_id": 1, "event": {"event_id": 0, "data": "exploded"}}"#,
            r#"{"worker_id": 1, "event": {"event_id": 0, "data": {"stored": {"blocks": [{"block_hash": 1}]}}}}"#,
            r#"{"worker_id": 1, "storage_tier": "gpu", "event": {"event_id": 0, "data": "cleared"}}"#,
            r#"{"worker_id": 1, "event_id": 0, "data": "cleared"}"#,
        ] {
            let error = RouterEvent::from_json(bad).err();
            assert!(error.is_some(), "accepted {bad:?}");
            let text = error.map(|e| e.to_string()).unwrap_or_default();
            assert!(text.contains("malformed KV event at line"), "{text}");
        }
    }
}
