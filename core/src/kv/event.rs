//! The KV events a worker publishes about its cache: blocks stored, blocks removed, cache cleared.

use crate::router::worker::WorkerId;
use serde::{Deserialize, Serialize};

/// One event from one worker, numbered by the worker's monotonic `event_id`.
///
/// JSON form: `{"worker_id": 1, "dp_rank": 0, "event_id": 7, "data": {"stored": {"parent_hash":
/// null, "blocks": [{"block_hash": 11, "tokens_hash": 22}]}}}`; `data` may also be
/// `{"removed": {"block_hashes": [11]}}` or `"cleared"`, and `dp_rank` defaults to 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "KvEventJson", into = "KvEventJson")]
pub struct KvEvent {
    /// The worker whose cache changed.
    pub worker: WorkerId,
    /// The worker's event number; consecutive events differ by one.
    pub event_id: u64,
    /// What changed.
    pub data: KvEventData,
}

/// What a KV event reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum KvEventData {
    /// Blocks appended after `parent_hash` (the engine block hash of the parent; absent = root).
    Stored {
        /// The engine block hash of the block these follow, if any.
        #[serde(default)]
        parent_hash: Option<u64>,
        /// The stored blocks, in prefix order.
        blocks: Vec<StoredBlock>,
    },
    /// Blocks evicted, named by their engine block hashes.
    Removed {
        /// The engine block hashes of the removed blocks.
        block_hashes: Vec<u64>,
    },
    /// The worker dropped its whole cache (also how a worker re-synchronises after lost events).
    Cleared,
}

/// One stored block: the engine's id for it and the router-computable sequence hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredBlock {
    /// The engine's own id for the block (what `kv.fetch` payloads name).
    pub block_hash: u64,
    /// The sequence hash of the block's tokens chained with its parents (what lookups match).
    pub tokens_hash: u64,
}

/// A KV event that could not be read; the router counts it and changes nothing.
#[derive(Debug, thiserror::Error)]
#[error(
    "malformed KV event at line {line}, column {column}: {message}; expected {{\"worker_id\", \"dp_rank\", \"event_id\", \"data\": {{\"stored\"|\"removed\"|\"cleared\"}}}}"
)]
pub struct MalformedEvent {
    /// Line of the problem in the input.
    pub line: usize,
    /// Column of the problem in the input.
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

impl KvEvent {
    /// An event of `worker` numbered `event_id`.
    pub fn new(worker: WorkerId, event_id: u64, data: KvEventData) -> Self {
        Self {
            worker,
            event_id,
            data,
        }
    }

    /// Reads one event from its JSON form.
    pub fn from_json(json: &str) -> Result<Self, MalformedEvent> {
        serde_json::from_str(json).map_err(|error| MalformedEvent {
            line: error.line(),
            column: error.column(),
            message: error.to_string(),
        })
    }

    /// The event's JSON form.
    pub fn to_json(&self) -> String {
        // Serialising plain integers and enums cannot fail; an empty object is never reached.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Number of blocks the event stores or removes.
    pub fn block_count(&self) -> usize {
        match &self.data {
            KvEventData::Stored { blocks, .. } => blocks.len(),
            KvEventData::Removed { block_hashes } => block_hashes.len(),
            KvEventData::Cleared => 0,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KvEventJson {
    worker_id: u64,
    #[serde(default)]
    dp_rank: u32,
    event_id: u64,
    data: KvEventData,
}

impl From<KvEventJson> for KvEvent {
    fn from(json: KvEventJson) -> Self {
        Self::new(
            WorkerId::new(json.worker_id, json.dp_rank),
            json.event_id,
            json.data,
        )
    }
}

impl From<KvEvent> for KvEventJson {
    fn from(event: KvEvent) -> Self {
        Self {
            worker_id: event.worker.worker_id,
            dp_rank: event.worker.dp_rank,
            event_id: event.event_id,
            data: event.data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms_round_trip() {
        let events = [
            KvEvent::new(
                WorkerId::new(3, 1),
                7,
                KvEventData::Stored {
                    parent_hash: Some(5),
                    blocks: vec![StoredBlock {
                        block_hash: 11,
                        tokens_hash: 22,
                    }],
                },
            ),
            KvEvent::new(
                WorkerId::new(3, 0),
                8,
                KvEventData::Removed {
                    block_hashes: vec![11, 12],
                },
            ),
            KvEvent::new(WorkerId::new(3, 0), 9, KvEventData::Cleared),
        ];
        for event in events {
            assert_eq!(KvEvent::from_json(&event.to_json()).ok(), Some(event));
        }
    }

    #[test]
    fn reads_the_documented_form() {
        let event = KvEvent::from_json(
            r#"{"worker_id": 1, "event_id": 2, "data": {"stored": {"blocks": [{"block_hash": 3, "tokens_hash": 4}]}}}"#,
        )
        .ok();
        assert_eq!(
            event,
            Some(KvEvent::new(
                WorkerId::new(1, 0),
                2,
                KvEventData::Stored {
                    parent_hash: None,
                    blocks: vec![StoredBlock {
                        block_hash: 3,
                        tokens_hash: 4
                    }]
                }
            ))
        );
        assert_eq!(
            KvEvent::from_json(r#"{"worker_id": 1, "event_id": 2, "data": "cleared"}"#)
                .ok()
                .map(|e| e.data),
            Some(KvEventData::Cleared)
        );
    }

    #[test]
    fn malformed_events_are_errors_with_a_location() {
        for bad in [
            "",
            "{",
            "[]",
            r#"{"worker_id": -1, "event_id": 0, "data": "cleared"}"#,
            r#"{"worker_id": 1, "event_id": 0, "data": "exploded"}"#,
            r#"{"worker_id": 1, "event_id": 0, "data": {"stored": {"blocks": [{"block_hash": 1}]}}}"#,
            r#"{"worker_id": 1, "event_id": 0, "data": "cleared", "extra": 1}"#,
        ] {
            let error = KvEvent::from_json(bad).err();
            assert!(error.is_some(), "accepted {bad:?}");
            let text = error.map(|e| e.to_string()).unwrap_or_default();
            assert!(text.contains("malformed KV event at line"), "{text}");
        }
    }
}
