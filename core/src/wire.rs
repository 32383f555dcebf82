//! The hint envelope sent to the booked worker (`kv_transfer_params.kv_hint` for vLLM workers).

use crate::plugins::HintAction;
use serde::{Deserialize, Serialize};

/// The hint protocol version this router speaks.
pub const PROTOCOL_VERSION: &str = "0.1";

/// One hint for one booking: the numbered actions of every hint policy that ran.
///
/// Serialises to `{"protocol_version": "0.1", "message_id": "<request id>", "actions": [...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvHint {
    /// The protocol version, [`PROTOCOL_VERSION`].
    pub protocol_version: String,
    /// The request id the hint belongs to.
    pub message_id: String,
    /// The actions, numbered `a1`, `a2`, … in order.
    pub actions: Vec<NumberedAction>,
}

/// An action with the id the router assigned to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NumberedAction {
    /// `a1`, `a2`, … in the order of the envelope.
    pub action_id: String,
    /// The action type, for example `kv.fetch`; unknown types pass through untouched.
    pub action_type: String,
    /// The version of the payload format.
    pub action_version: String,
    /// The payload, opaque to the router.
    pub payload: serde_json::Value,
}

impl KvHint {
    /// The envelope for `message_id` with `actions` numbered `a1`, `a2`, … in order.
    pub fn numbered(message_id: impl Into<String>, actions: Vec<HintAction>) -> Self {
        let actions = actions
            .into_iter()
            .enumerate()
            .map(|(index, action)| NumberedAction::new(index + 1, action))
            .collect();
        Self {
            protocol_version: PROTOCOL_VERSION.to_owned(),
            message_id: message_id.into(),
            actions,
        }
    }

    /// The envelope's JSON text.
    pub fn to_json(&self) -> String {
        // Strings and JSON values always serialise; the fallback is never reached.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Reads an envelope from JSON.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

impl NumberedAction {
    /// `action` numbered as the `number`-th action (1-based) of its envelope.
    pub fn new(number: usize, action: HintAction) -> Self {
        Self {
            action_id: action_id(number),
            action_type: action.action_type,
            action_version: action.action_version,
            payload: action.payload,
        }
    }
}

/// The id of the `number`-th action (1-based): `a1`, `a2`, … Up to the router's cap of 32 from
/// a table (every booking with a hint numbers at least one: no formatting machinery for it).
fn action_id(number: usize) -> String {
    const IDS: [&str; 32] = [
        "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11", "a12", "a13", "a14",
        "a15", "a16", "a17", "a18", "a19", "a20", "a21", "a22", "a23", "a24", "a25", "a26", "a27",
        "a28", "a29", "a30", "a31", "a32",
    ];
    match number.checked_sub(1).and_then(|index| IDS.get(index)) {
        Some(id) => (*id).to_owned(),
        None => format!("a{number}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_identity::EngineBlockHash;
    use crate::identity::WorkerId;
    use crate::plugins::KvCopy;
    use serde_json::json;

    #[test]
    fn a_committed_copy_is_upstreams_kv_hint_byte_for_byte() {
        // Upstream `KvHint::new("req-7", vec![KvHintAction::fetch("a1",
        // KvSourceLocationsPayload { source_control_endpoint, block_hashes })])` serialised with
        // `serde_json::to_string`: struct fields in declaration order, the payload a BTreeMap
        // (keys sorted), block hashes root-aligned from block 0.
        let copy = KvCopy {
            source: WorkerId::new(7, 0),
            source_endpoint: "tcp://10.0.0.7:23280".into(),
            first_block: 2,
            block_hashes: [9000, 9001, 9002, 9003].map(EngineBlockHash).to_vec(),
        };
        let hint = KvHint::numbered("req-7", vec![copy.fetch_payload().to_action()]);
        assert_eq!(
            hint.to_json(),
            r#"{"protocol_version":"0.1","message_id":"req-7","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[9000,9001,9002,9003],"source_control_endpoint":"tcp://10.0.0.7:23280"}}]}"#
        );
        assert_eq!(copy.copied_blocks(), 2..4);
    }

    #[test]
    fn envelope_matches_the_reference_json() {
        let hint = KvHint::numbered(
            "req-1",
            vec![HintAction::new(
                "kv.fetch",
                "1.0",
                json!({"source_control_endpoint": "tcp://10.0.0.7:23280", "block_hashes": [11, 22, 33]}),
            )],
        );
        let reference: serde_json::Value = serde_json::from_str(
            r#"{"protocol_version": "0.1",
                "message_id": "req-1",
                "actions": [
                  {"action_id": "a1", "action_type": "kv.fetch", "action_version": "1.0",
                   "payload": {"source_control_endpoint": "tcp://10.0.0.7:23280",
                               "block_hashes": [11, 22, 33]}}]}"#,
        )
        .unwrap_or_default();
        let produced: serde_json::Value = serde_json::from_str(&hint.to_json()).unwrap_or_default();
        assert_eq!(produced, reference);
        assert_eq!(
            hint.to_json(),
            r#"{"protocol_version":"0.1","message_id":"req-1","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"block_hashes":[11,22,33],"source_control_endpoint":"tcp://10.0.0.7:23280"}}]}"#
        );
    }

    #[test]
    fn unknown_action_types_round_trip_unchanged() {
        let payload = json!({"nested": {"list": [1, "two", null, 3.5]}, "flag": true});
        let hint = KvHint::numbered(
            "r",
            vec![
                HintAction::new("vendor.custom-thing", "7.3-beta", payload.clone()),
                HintAction::new("kv.prefetch", "1.0", json!({})),
            ],
        );
        let json = hint.to_json();
        let back = KvHint::from_json(&json).ok();
        assert_eq!(back.as_ref(), Some(&hint));
        let back = back.unwrap_or_else(|| KvHint::numbered("", Vec::new()));
        assert_eq!(back.actions[0].action_type, "vendor.custom-thing");
        assert_eq!(back.actions[0].action_version, "7.3-beta");
        assert_eq!(back.actions[0].payload, payload);
        assert_eq!(back.actions[1].action_id, "a2");
        assert_eq!(back.to_json(), json);
    }

    #[test]
    fn action_ids_are_a_and_the_number() {
        for number in [0, 1, 2, 9, 10, 31, 32, 33, 100, usize::MAX] {
            assert_eq!(action_id(number), format!("a{number}"));
        }
    }
}
