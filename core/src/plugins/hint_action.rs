//! One engine-directed action a hint policy returns.

use serde::{Deserialize, Serialize};

/// An action for the booked worker, in the engine's format. The router assigns its `action_id`
/// (`a1`, `a2`, …) when it assembles the hint; unknown action types pass through untouched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HintAction {
    /// The action type, for example `kv.fetch`.
    pub action_type: String,
    /// The version of the action's payload format, for example `1.0`.
    pub action_version: String,
    /// The payload, opaque to the router.
    pub payload: serde_json::Value,
}

impl HintAction {
    /// An action of `action_type` at `action_version` with `payload`.
    pub fn new(
        action_type: impl Into<String>,
        action_version: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        Self {
            action_type: action_type.into(),
            action_version: action_version.into(),
            payload,
        }
    }
}
