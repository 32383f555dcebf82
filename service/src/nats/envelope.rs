//! Upstream's event-plane envelope (`dynamo-runtime` 1.6.1 `transports::event_plane::EventEnvelope`
//! with its `MsgpackCodec`): a msgpack map `{publisher_id, sequence, published_at, topic,
//! payload}` (`rmp_serde::to_vec_named`), `payload` a msgpack binary holding the event itself;
//! for KV events, a `Vec<RouterEvent>` (upstream batches up to 128 events of one worker per
//! envelope), also written with named fields.

use dynamo_kv_router::kv::RouterEvent;
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One envelope as upstream writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// The publisher (upstream: a random id per `EventPublisher`).
    pub publisher_id: u64,
    /// The publisher's message number, from 0.
    pub sequence: u64,
    /// Milliseconds since the Unix epoch when it was published.
    pub published_at: u64,
    /// The topic (`kv-events`).
    pub topic: String,
    /// The encoded event.
    #[serde(serialize_with = "as_bin", deserialize_with = "from_bin")]
    pub payload: Vec<u8>,
}

fn as_bin<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

fn from_bin<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    struct Bin;
    impl<'de> Visitor<'de> for Bin {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a msgpack binary")
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(byte) = seq.next_element::<u8>()? {
                out.push(byte);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_bytes(Bin)
}

/// Why a message was not a KV-event envelope.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The message is not a msgpack envelope.
    #[error("not an event-plane envelope: {0}")]
    Envelope(String),
    /// The envelope's payload is not a msgpack list of upstream `RouterEvent`s.
    #[error("envelope payload is not a list of RouterEvents: {0}")]
    Payload(String),
}

impl EventEnvelope {
    /// The envelope in upstream's msgpack form.
    pub fn encode(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }

    /// Reads an envelope.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        rmp_serde::from_slice(bytes).map_err(|error| EnvelopeError::Envelope(error.to_string()))
    }
}

/// The payload upstream's KV publisher puts in an envelope: `events` with named fields.
pub fn encode_kv_events(events: &[RouterEvent]) -> Result<Vec<u8>, rmp_serde::encode::Error> {
    rmp_serde::to_vec_named(events)
}

/// Reads a KV-event message: the envelope and the events it carries.
pub fn decode_kv_events(bytes: &[u8]) -> Result<(EventEnvelope, Vec<RouterEvent>), EnvelopeError> {
    let envelope = EventEnvelope::decode(bytes)?;
    let events = rmp_serde::from_slice(&envelope.payload)
        .map_err(|error| EnvelopeError::Payload(error.to_string()))?;
    Ok((envelope, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, LocalBlockHash};
    use dynamo_kv_router::router::WorkerId;

    fn events() -> Vec<RouterEvent> {
        vec![
            RouterEvent::new(
                WorkerId::new(7, 1),
                3,
                KvCacheEventData::stored(
                    Some(EngineBlockHash(9001)),
                    [(
                        EngineBlockHash(9002),
                        LocalBlockHash(5_532_946_206_955_930_018),
                    )],
                ),
            ),
            RouterEvent::new(
                WorkerId::new(7, 1),
                4,
                KvCacheEventData::removed([EngineBlockHash(9002)]),
            ),
            RouterEvent::new(WorkerId::new(7, 1), 5, KvCacheEventData::Cleared),
        ]
    }

    #[test]
    fn envelopes_round_trip_with_named_fields() {
        let payload = encode_kv_events(&events()).expect("encode");
        let envelope = EventEnvelope {
            publisher_id: 42,
            sequence: 10,
            published_at: 1_700_000_000_000,
            topic: "kv-events".to_owned(),
            payload,
        };
        let bytes = envelope.encode().expect("encode");
        // A map of five named fields (fixmap 0x85), `payload` a msgpack bin (0xc4..0xc6).
        assert_eq!(bytes[0], 0x85);
        let (decoded, decoded_events) = decode_kv_events(&bytes).expect("decode");
        assert_eq!(decoded, envelope);
        assert_eq!(decoded_events, events());
    }

    /// Bytes written the way upstream's codec writes them (a map with `payload` as bin), built
    /// by hand with `rmp` rather than through our types.
    #[test]
    fn reads_an_envelope_built_field_by_field() {
        let payload = encode_kv_events(&events()).expect("encode");
        let mut bytes = Vec::new();
        rmp::encode::write_map_len(&mut bytes, 5).expect("write");
        for (key, value) in [("publisher_id", 1u64), ("sequence", 2), ("published_at", 3)] {
            rmp::encode::write_str(&mut bytes, key).expect("write");
            rmp::encode::write_uint(&mut bytes, value).expect("write");
        }
        rmp::encode::write_str(&mut bytes, "topic").expect("write");
        rmp::encode::write_str(&mut bytes, "kv-events").expect("write");
        rmp::encode::write_str(&mut bytes, "payload").expect("write");
        rmp::encode::write_bin(&mut bytes, &payload).expect("write");
        let (envelope, decoded) = decode_kv_events(&bytes).expect("decode");
        assert_eq!((envelope.publisher_id, envelope.sequence), (1, 2));
        assert_eq!(decoded, events());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            decode_kv_events(b"not msgpack at all"),
            Err(EnvelopeError::Envelope(_))
        ));
        let envelope = EventEnvelope {
            publisher_id: 1,
            sequence: 0,
            published_at: 0,
            topic: "kv-events".to_owned(),
            payload: b"\x93\x01\x02\x03".to_vec(),
        };
        let bytes = envelope.encode().expect("encode");
        assert!(matches!(
            decode_kv_events(&bytes),
            Err(EnvelopeError::Payload(_))
        ));
    }
}
