//! The booking-sync wire format, upstream's (`dynamo-kv-router` 1.6.1
//! `services/common/replica_sync.rs`): two-frame ZMQ messages `[topic, payload]` on topic
//! `dynamo.slot-tracker.v1`, the payload a `ScopedReplicaEvent` encoded as a msgpack map
//! (`rmp_serde::to_vec_named`): `{model_name, routing_group, block_size, event}` with `event`
//! an `ActiveSequenceEvent` `{request_id, worker: {worker_id, dp_rank}, data, router_id,
//! lora_name}` and `data` one of `{"AddRequest": {...}}`, `"Free"`, `"MarkPrefillCompleted"`.

use serde::{Deserialize, Serialize};

/// The topic of booking-lifecycle messages (upstream's `REPLICA_TOPIC`).
pub const REPLICA_TOPIC: &[u8] = b"dynamo.slot-tracker.v1";

/// The topic of this router's replica heartbeats, `[topic, replica id (u64 big-endian)]`,
/// sent every heartbeat interval so that a subscriber can tell a quiet peer from a gone one
/// (an addition to upstream's format: upstream subscribers filter on [`REPLICA_TOPIC`] and
/// never receive them).
pub const HEARTBEAT_TOPIC: &[u8] = b"kv-router.replica-heartbeat.v1";

/// A worker rank (upstream `WorkerWithDpRank`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireWorker {
    /// The worker id.
    pub worker_id: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
}

/// A `std::time::Duration` as serde writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireDuration {
    /// Whole seconds.
    pub secs: u64,
    /// Nanoseconds past them.
    pub nanos: u32,
}

/// Upstream's `PrefillLoadHint`: the prefill the booking reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefillLoadHint {
    /// Prompt tokens not cached on the worker when it was booked.
    pub initial_effective_prefill_tokens: usize,
    /// How long the prefill is expected to take, when known.
    pub expected_prefill_duration: Option<WireDuration>,
}

/// What happened to a booking (upstream `ActiveSequenceEventData`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum BookingEventData {
    /// A request was booked on the event's worker.
    AddRequest {
        /// The sequence hashes of the prompt's full blocks.
        token_sequence: Option<Vec<u64>>,
        /// Whether its prefill tokens count as load until prefill completes.
        #[serde(default = "default_true")]
        track_prefill_tokens: bool,
        /// Output tokens expected, when known.
        expected_output_tokens: Option<u32>,
        /// The prefill it reserved.
        prefill_load_hint: Option<PrefillLoadHint>,
    },
    /// The request finished: all its load is released.
    Free,
    /// Its prefill finished: its prefill tokens are released.
    MarkPrefillCompleted,
}

fn default_true() -> bool {
    true
}

/// One booking event of one replica (upstream `ActiveSequenceEvent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BookingEvent {
    /// The booking's id at the publishing replica.
    pub request_id: String,
    /// The booked worker rank.
    pub worker: WireWorker,
    /// What happened.
    pub data: BookingEventData,
    /// The publishing replica's id (receivers drop their own echo).
    pub router_id: u64,
    /// The request's LoRA adapter, if any.
    pub lora_name: Option<String>,
}

/// A booking event scoped by partition (upstream `ScopedReplicaEvent`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScopedBookingEvent {
    /// The model.
    pub model_name: String,
    /// The routing group.
    pub routing_group: String,
    /// The partition's block size; a receiver with another block size drops the event.
    pub block_size: u32,
    /// The event.
    pub event: BookingEvent,
}

/// Why a message from a peer was dropped as garbage.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Not two frames.
    #[error("a replica message has 2 frames (topic, payload), this one had {0}")]
    FrameCount(usize),
    /// A topic other than [`REPLICA_TOPIC`].
    #[error("unexpected replica message topic {0:?}")]
    Topic(String),
    /// The payload is not a `ScopedReplicaEvent`.
    #[error("malformed replica payload: {0}")]
    Payload(String),
}

impl ScopedBookingEvent {
    /// The payload frame: the event as a msgpack map.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("a booking event always encodes")
    }

    /// Reads a received message, `[topic, payload]`.
    pub fn decode(frames: &[&[u8]]) -> Result<Self, WireError> {
        let [topic, payload] = frames else {
            return Err(WireError::FrameCount(frames.len()));
        };
        if *topic != REPLICA_TOPIC {
            return Err(WireError::Topic(
                String::from_utf8_lossy(topic).into_owned(),
            ));
        }
        rmp_serde::from_slice(payload).map_err(|error| WireError::Payload(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: BookingEventData) -> ScopedBookingEvent {
        ScopedBookingEvent {
            model_name: "model".into(),
            routing_group: "group".into(),
            block_size: 16,
            event: BookingEvent {
                request_id: "request".into(),
                worker: WireWorker {
                    worker_id: 1,
                    dp_rank: 0,
                },
                data,
                router_id: 42,
                lora_name: None,
            },
        }
    }

    #[test]
    fn the_payload_is_upstreams_named_map() {
        let payload = event(BookingEventData::Free).encode();
        let value: rmpv::Value = rmpv::decode::read_value(&mut payload.as_slice()).unwrap();
        let keys: Vec<_> = value
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(keys, ["model_name", "routing_group", "block_size", "event"]);
        let event = &value.as_map().unwrap()[3].1;
        let fields: Vec<_> = event
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            fields,
            ["request_id", "worker", "data", "router_id", "lora_name"]
        );
        assert_eq!(event.as_map().unwrap()[2].1.as_str(), Some("Free"));
    }

    #[test]
    fn add_request_round_trips_and_defaults_prefill_tracking() {
        let add = event(BookingEventData::AddRequest {
            token_sequence: Some(vec![1, u64::MAX]),
            track_prefill_tokens: true,
            expected_output_tokens: None,
            prefill_load_hint: Some(PrefillLoadHint {
                initial_effective_prefill_tokens: 32,
                expected_prefill_duration: None,
            }),
        });
        let payload = add.encode();
        assert_eq!(
            ScopedBookingEvent::decode(&[REPLICA_TOPIC, &payload]).unwrap(),
            add
        );
        // An upstream peer may omit `track_prefill_tokens`.
        let value = rmpv::Value::Map(vec![(
            "AddRequest".into(),
            rmpv::Value::Map(vec![
                ("token_sequence".into(), rmpv::Value::Nil),
                ("expected_output_tokens".into(), rmpv::Value::Nil),
                ("prefill_load_hint".into(), rmpv::Value::Nil),
            ]),
        )]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &value).unwrap();
        let data: BookingEventData = rmp_serde::from_slice(&bytes).unwrap();
        assert!(matches!(
            data,
            BookingEventData::AddRequest {
                track_prefill_tokens: true,
                ..
            }
        ));
    }

    #[test]
    fn garbage_is_an_error_naming_what_was_wrong() {
        assert_eq!(
            ScopedBookingEvent::decode(&[REPLICA_TOPIC]),
            Err(WireError::FrameCount(1))
        );
        assert!(matches!(
            ScopedBookingEvent::decode(&[b"other", b""]),
            Err(WireError::Topic(_))
        ));
        assert!(matches!(
            ScopedBookingEvent::decode(&[REPLICA_TOPIC, b"\xc1garbage"]),
            Err(WireError::Payload(_))
        ));
    }
}
