//! The `kv.fetch@1.0` action's payload, as upstream's `KvSourceLocationsPayload` defines it.

use super::hint_action::HintAction;
use super::policy_error::PolicyError;
use crate::block_identity::EngineBlockHash;
use serde::{Deserialize, Serialize};

/// The action type of a KV fetch.
pub const KV_FETCH_ACTION_TYPE: &str = "kv.fetch";
/// The payload version of a KV fetch.
pub const KV_FETCH_ACTION_VERSION: &str = "1.0";

/// Where the booked worker fetches KV from, and which blocks.
///
/// JSON: `{"block_hashes": [11, 22, 33], "source_control_endpoint": "tcp://10.0.0.7:23280"}`.
/// `block_hashes` are the **source's** engine block hashes, **root-aligned**: `block_hashes[i]`
/// is request block `i`, from block 0 to the end of the source's cached prefix. The target
/// decides which suffix it lacks and fetches only that.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvFetchPayload {
    /// The source worker's control endpoint.
    pub source_control_endpoint: String,
    /// The source's engine hashes of request blocks `0..` the end of its cached prefix.
    pub block_hashes: Vec<EngineBlockHash>,
}

impl KvFetchPayload {
    /// The `kv.fetch@1.0` action carrying this payload.
    pub fn to_action(&self) -> HintAction {
        Self::action(&self.source_control_endpoint, &self.block_hashes)
    }

    /// The `kv.fetch@1.0` action for `block_hashes` (root-aligned) from `source_control_endpoint`,
    /// without building the payload value first.
    pub fn action(source_control_endpoint: &str, block_hashes: &[EngineBlockHash]) -> HintAction {
        // Built directly: `json!` would serialise the hashes through serde one by one.
        let mut payload = serde_json::Map::new();
        payload.insert(
            "source_control_endpoint".to_owned(),
            serde_json::Value::from(source_control_endpoint),
        );
        payload.insert(
            "block_hashes".to_owned(),
            serde_json::Value::Array(block_hashes.iter().map(|hash| hash.0.into()).collect()),
        );
        HintAction::new(
            KV_FETCH_ACTION_TYPE,
            KV_FETCH_ACTION_VERSION,
            serde_json::Value::Object(payload),
        )
    }

    /// Reads the payload of a `kv.fetch@1.0` action.
    pub fn from_action(action: &HintAction) -> Result<Self, PolicyError> {
        if action.action_type != KV_FETCH_ACTION_TYPE
            || action.action_version != KV_FETCH_ACTION_VERSION
        {
            return Err(PolicyError::new(format!(
                "expected a `{KV_FETCH_ACTION_TYPE}@{KV_FETCH_ACTION_VERSION}` action, got `{}@{}`",
                action.action_type, action.action_version
            )));
        }
        Self::from_payload(&action.payload)
    }

    /// Reads a `kv.fetch@1.0` payload (for example from a received envelope).
    pub fn from_payload(payload: &serde_json::Value) -> Result<Self, PolicyError> {
        Self::deserialize(payload).map_err(|error| {
            PolicyError::new(format!(
                "`{KV_FETCH_ACTION_TYPE}` payload does not match its contract: {error}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_an_action() {
        let payload = KvFetchPayload {
            source_control_endpoint: "tcp://10.0.0.7:23280".into(),
            block_hashes: vec![EngineBlockHash(11), EngineBlockHash(22)],
        };
        let action = payload.to_action();
        assert_eq!(
            serde_json::to_string(&action.payload).ok().as_deref(),
            Some(r#"{"block_hashes":[11,22],"source_control_endpoint":"tcp://10.0.0.7:23280"}"#)
        );
        assert_eq!(KvFetchPayload::from_action(&action).ok(), Some(payload));
        let other = HintAction::new("kv.prefetch", "1.0", serde_json::json!({}));
        assert!(KvFetchPayload::from_action(&other).is_err());
    }
}
