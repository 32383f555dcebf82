//! Reading an engine's msgpack `EventBatch` straight from its bytes.
//!
//! Almost all of a batch is two kinds of integer arrays: each `BlockStored`'s token ids (16 a
//! block) and the block hashes. Decoding them through a value tree allocates a value per
//! integer, which was about two thirds of the service's ingest. This reader handles vLLM's
//! positional layout (`[ts, [event, …], rank]` with `["BlockStored", hashes, parent, tokens,
//! …]` and `["BlockRemoved", hashes, …]` events) and reads those arrays into their vectors
//! directly; every other field is read as a small value and given to the same helpers as
//! [`decode_event_batch`] uses, so both give the same batch. Whatever it does not read
//! exactly (another layout, EAGLE bigrams, a value of an unexpected type, a truncated payload)
//! is decoded again by [`decode_event_batch`], which also words every error.
//!
//! Enters: a ZMQ or NATS payload. Leaves: an [`EngineEventBatch`] or a [`BatchDecodeError`].

use crate::engine_events::engine_event::{EngineEvent, EngineEventBatch};
use crate::engine_events::msgpack_batch::{
    BatchDecodeError, bytes_hash, decode_event_batch, event, positional_removed, positional_stored,
    rank, timestamp, token_ids,
};
use rmpv::Value;

/// Decodes one msgpack `EventBatch` (the same result as [`decode_event_batch`], faster for
/// vLLM's positional layout).
pub fn read_event_batch(payload: &[u8]) -> Result<EngineEventBatch, BatchDecodeError> {
    match read_positional(payload) {
        Some(Ok(batch)) => Ok(batch),
        // Anything the direct reader did not take, and every error, is decoded again, so the
        // message is the value-tree decoder's.
        Some(Err(_)) | None => decode_event_batch(payload),
    }
}

/// The batch if it is an array `[ts, events]` or `[ts, events, rank]`; `None` to decode it
/// the general way.
fn read_positional(payload: &[u8]) -> Option<Result<EngineEventBatch, BatchDecodeError>> {
    let mut cursor = Cursor::new(payload);
    let fields = cursor.array_len()?;
    if !(2..=3).contains(&fields) {
        return None;
    }
    let ts = cursor.value()?;
    let count = cursor.array_len()?;
    let mut events = Vec::with_capacity(count.min(payload.len()));
    for _ in 0..count {
        events.push(match cursor.positional_event()? {
            Ok(event) => event,
            Err(error) => return Some(Err(error)),
        });
    }
    let rank_value = if fields == 3 {
        Some(cursor.value()?)
    } else {
        None
    };
    Some((|| {
        Ok(EngineEventBatch {
            ts: timestamp(Some(ts))?,
            events,
            data_parallel_rank: rank(rank_value)?,
        })
    })())
}

/// A read position in a msgpack payload. Every read returns `None` past the end or at a value
/// of another type than the caller reads.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < count {
            return None;
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Some(taken)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|bytes| bytes[0])
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.first().copied()
    }

    fn be<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N).map(|bytes| bytes.try_into().expect("N bytes"))
    }

    /// An array header's length.
    fn array_len(&mut self) -> Option<usize> {
        match self.byte()? {
            marker @ 0x90..=0x9f => Some(usize::from(marker & 0x0f)),
            0xdc => Some(usize::from(u16::from_be_bytes(self.be()?))),
            0xdd => Some(u32::from_be_bytes(self.be()?) as usize),
            _ => None,
        }
    }

    /// Any one value, as a value tree (for the small fields).
    fn value(&mut self) -> Option<Value> {
        let mut reader = self.bytes;
        let value = rmpv::decode::read_value(&mut reader).ok()?;
        self.bytes = reader;
        Some(value)
    }

    /// An integer as `hash` reads it: unsigned, or signed reinterpreted as 64 bits.
    fn integer(&mut self, marker: u8) -> Option<u64> {
        Some(match marker {
            0x00..=0x7f => u64::from(marker),
            0xe0..=0xff => i64::from(marker as i8) as u64,
            0xcc => u64::from(self.byte()?),
            0xcd => u64::from(u16::from_be_bytes(self.be()?)),
            0xce => u64::from(u32::from_be_bytes(self.be()?)),
            0xcf => u64::from_be_bytes(self.be()?),
            0xd0 => i64::from(self.byte()? as i8) as u64,
            0xd1 => i64::from(i16::from_be_bytes(self.be()?)) as u64,
            0xd2 => i64::from(i32::from_be_bytes(self.be()?)) as u64,
            0xd3 => i64::from_be_bytes(self.be()?) as u64,
            _ => return None,
        })
    }

    /// A block hash: an integer, or a byte string whose last 8 bytes are the id.
    fn hash(&mut self) -> Option<u64> {
        let marker = self.byte()?;
        let length = match marker {
            0xc4 => usize::from(self.byte()?),
            0xc5 => usize::from(u16::from_be_bytes(self.be()?)),
            0xc6 => u32::from_be_bytes(self.be()?) as usize,
            _ => return self.integer(marker),
        };
        self.take(length).map(bytes_hash)
    }

    fn hashes(&mut self) -> Option<Vec<u64>> {
        let count = self.array_len()?;
        let mut hashes = Vec::with_capacity(count.min(self.bytes.len()));
        for _ in 0..count {
            hashes.push(self.hash()?);
        }
        Some(hashes)
    }

    /// A token id: a non-negative integer that fits 32 bits.
    fn token(&mut self) -> Option<u32> {
        let marker = self.byte()?;
        if let 0x00..=0x7f = marker {
            return Some(u32::from(marker));
        }
        let signed = matches!(marker, 0xe0..=0xff | 0xd0..=0xd3);
        let number = self.integer(marker)?;
        if signed && (number as i64) < 0 {
            return None;
        }
        u32::try_from(number).ok()
    }

    /// Token ids and whether they were EAGLE bigrams (those are read as values).
    fn token_ids(&mut self) -> Option<Result<(Vec<u32>, bool), BatchDecodeError>> {
        let start = self.bytes;
        let count = self.array_len()?;
        if count > 0
            && self
                .peek()
                .is_some_and(|marker| matches!(marker, 0x90..=0x9f | 0xdc | 0xdd))
        {
            self.bytes = start;
            return Some(token_ids(Some(&self.value()?)));
        }
        let mut tokens = Vec::with_capacity(count.min(self.bytes.len()));
        let mut bytes = self.bytes;
        for _ in 0..count {
            // The encodings msgpack writers use for ids below 2^32, read in place; any other
            // goes through `token`.
            let (&marker, rest) = bytes.split_first()?;
            let (token, rest) = match marker {
                0x00..=0x7f => (u32::from(marker), rest),
                0xcc => {
                    let (&byte, rest) = rest.split_first()?;
                    (u32::from(byte), rest)
                }
                0xcd => {
                    let (two, rest) = rest.split_first_chunk::<2>()?;
                    (u32::from(u16::from_be_bytes(*two)), rest)
                }
                0xce => {
                    let (four, rest) = rest.split_first_chunk::<4>()?;
                    (u32::from_be_bytes(*four), rest)
                }
                _ => {
                    self.bytes = bytes;
                    let token = self.token()?;
                    (token, self.bytes)
                }
            };
            tokens.push(token);
            bytes = rest;
        }
        self.bytes = bytes;
        Some(Ok((tokens, false)))
    }

    /// One event: a positional `BlockStored` or `BlockRemoved` read here, any other event
    /// (another tag, a tagged map) read as a value and decoded as [`decode_event_batch`] does.
    fn positional_event(&mut self) -> Option<Result<EngineEvent, BatchDecodeError>> {
        let start = self.bytes;
        let Some(fields) = self.array_len() else {
            self.bytes = start;
            return Some(event(self.value()?));
        };
        let tag = self.value()?;
        let stored = match tag.as_str() {
            Some("BlockStored") if fields >= 4 => true,
            Some("BlockRemoved") if fields >= 2 => false,
            _ => {
                self.bytes = start;
                return Some(event(self.value()?));
            }
        };
        let block_hashes = self.hashes()?;
        let mut items = Vec::with_capacity(fields);
        items.extend([tag, Value::Nil]);
        if !stored {
            for _ in 2..fields {
                items.push(self.value()?);
            }
            return Some(positional_removed(&items, block_hashes));
        }
        items.push(self.value()?);
        let tokens = match self.token_ids()? {
            Ok(tokens) => tokens,
            Err(error) => return Some(Err(error)),
        };
        items.push(Value::Nil);
        for _ in 4..fields {
            items.push(self.value()?);
        }
        Some(positional_stored(&items, block_hashes, tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(value: &Value) -> Vec<u8> {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, value).expect("encode");
        bytes
    }

    /// Both readers' answers, compared by their debug text (a NaN `ts` equals itself there).
    fn assert_same(bytes: &[u8]) {
        let direct = format!("{:?}", read_event_batch(bytes));
        let by_value = format!("{:?}", decode_event_batch(bytes));
        assert_eq!(direct, by_value, "payload {bytes:02x?}");
    }

    fn integer() -> impl Strategy<Value = Value> {
        prop_oneof![
            (0u64..128).prop_map(Value::from),
            any::<u8>().prop_map(Value::from),
            any::<u16>().prop_map(Value::from),
            any::<u32>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<i8>().prop_map(Value::from),
            any::<i16>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
        ]
    }

    /// Small values of every kind, for the fields read as values and for wrong types.
    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Nil),
            integer(),
            any::<bool>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            "[a-z]{0,6}".prop_map(Value::from),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::from),
            "[a-z]{0,6}"
                .prop_map(|salt| Value::Map(vec![(Value::from("cache_salt"), Value::from(salt))])),
        ]
    }

    fn hash() -> impl Strategy<Value = Value> {
        prop_oneof![
            6 => integer(),
            2 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::from),
            1 => scalar(),
        ]
    }

    fn token_array() -> impl Strategy<Value = Value> {
        prop_oneof![
            8 => proptest::collection::vec(0u32..200_000, 0..48)
                .prop_map(|tokens| Value::Array(tokens.into_iter().map(Value::from).collect())),
            1 => proptest::collection::vec(integer(), 0..8).prop_map(Value::Array),
            1 => proptest::collection::vec((0u32..100, 0u32..100), 0..6).prop_map(|pairs| {
                Value::Array(
                    pairs
                        .into_iter()
                        .map(|(a, b)| Value::Array(vec![a.into(), b.into()]))
                        .collect(),
                )
            }),
            1 => scalar(),
        ]
    }

    fn positional_event() -> impl Strategy<Value = Value> {
        let tag = prop_oneof![
            6 => Just("BlockStored"),
            3 => Just("BlockRemoved"),
            1 => Just("AllBlocksCleared"),
            1 => Just("Ignored"),
            1 => Just("Exploded"),
        ];
        (
            tag,
            proptest::collection::vec(hash(), 0..40),
            hash(),
            token_array(),
            proptest::collection::vec(scalar(), 0..11),
            0usize..16,
        )
            .prop_map(|(tag, hashes, parent, tokens, rest, fields)| {
                let mut items = vec![Value::from(tag), Value::Array(hashes)];
                if tag == "BlockStored" {
                    items.extend([parent, tokens]);
                }
                items.extend(rest);
                items.truncate(fields.max(1));
                Value::Array(items)
            })
    }

    fn event_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            8 => positional_event(),
            1 => positional_event().prop_map(|event| match event {
                Value::Array(items) => {
                    let names = ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size"];
                    Value::Map(
                        names
                            .iter()
                            .zip(items)
                            .map(|(name, value)| (Value::from(*name), value))
                            .collect(),
                    )
                }
                other => other,
            }),
            1 => scalar(),
        ]
    }

    fn batch() -> impl Strategy<Value = Value> {
        (
            prop_oneof![(0.0f64..2e9).prop_map(Value::from), scalar()],
            proptest::collection::vec(event_value(), 0..6),
            scalar(),
            0usize..5,
        )
            .prop_map(|(ts, events, rank, fields)| {
                let mut items = vec![ts, Value::Array(events), rank, Value::Nil];
                items.truncate(fields);
                Value::Array(items)
            })
    }

    /// A positional event as vLLM sends it (valid in every field).
    fn valid_event() -> impl Strategy<Value = Value> {
        let hashes = proptest::collection::vec(
            prop_oneof![4 => any::<u64>().prop_map(Value::from), 1 => any::<i64>().prop_map(Value::from),
                1 => proptest::collection::vec(any::<u8>(), 0..33).prop_map(Value::from)],
            0..40,
        );
        let text = prop_oneof![Just(Value::Nil), "[A-Z]{0,4}".prop_map(Value::from)];
        let tail = proptest::collection::vec(
            prop_oneof![
                Just(Value::Nil),
                (0u64..8).prop_map(Value::from),
                "[a-z_]{0,8}".prop_map(Value::from)
            ],
            0..6,
        );
        (
            any::<bool>(),
            hashes,
            prop_oneof![Just(Value::Nil), any::<u64>().prop_map(Value::from)],
            proptest::collection::vec(0u32..=u32::MAX, 0..64),
            (
                1u64..=256,
                prop_oneof![Just(Value::Nil), (0u64..1_000).prop_map(Value::from)],
            ),
            (text.clone(), text),
            tail,
        )
            .prop_map(
                |(
                    stored,
                    hashes,
                    parent,
                    tokens,
                    (block_size, lora_id),
                    (medium, lora_name),
                    tail,
                )| {
                    let mut items = vec![
                        Value::from(if stored {
                            "BlockStored"
                        } else {
                            "BlockRemoved"
                        }),
                        Value::Array(hashes),
                    ];
                    if stored {
                        items.extend([
                            parent,
                            Value::Array(tokens.into_iter().map(Value::from).collect()),
                            block_size.into(),
                            lora_id,
                            medium,
                            lora_name,
                            Value::Nil,
                        ]);
                    } else {
                        items.push(medium);
                    }
                    items.extend(tail);
                    Value::Array(items)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        #[test]
        fn reads_valid_vllm_batches_directly_as_the_value_tree_decoder_does(
            ts in 0.0f64..2e9,
            events in proptest::collection::vec(valid_event(), 0..8),
            rank in prop_oneof![Just(Value::Nil), (0u64..8).prop_map(Value::from)],
        ) {
            let bytes = encode(&Value::Array(vec![ts.into(), Value::Array(events), rank]));
            let direct = read_positional(&bytes).expect("read directly").expect("a batch");
            prop_assert_eq!(Ok(direct), decode_event_batch(&bytes));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        #[test]
        fn reads_every_payload_as_the_value_tree_decoder_does(value in batch()) {
            assert_same(&encode(&value));
        }

        #[test]
        fn reads_cut_and_altered_payloads_as_the_value_tree_decoder_does(
            value in batch(),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let bytes = encode(&value);
            assert_same(&bytes[..cut.index(bytes.len() + 1)]);
            let mut altered = bytes.clone();
            if !altered.is_empty() {
                let at = flip.index(altered.len());
                altered[at] = byte;
            }
            assert_same(&altered);
        }
    }

    #[test]
    fn reads_a_vllm_batch_directly() {
        let stored = Value::Array(vec![
            "BlockStored".into(),
            Value::Array(vec![Value::from(u64::MAX), Value::from(-5i64)]),
            Value::Nil,
            Value::Array((0u32..32).map(|token| Value::from(token * 4_000)).collect()),
            16.into(),
            Value::Nil,
            "GPU".into(),
            Value::Nil,
            Value::Nil,
        ]);
        let removed = Value::Array(vec![
            "BlockRemoved".into(),
            Value::Array(vec![Value::from(vec![0u8, 0, 0, 0, 0, 0, 0, 1, 2])]),
            Value::Nil,
        ]);
        let bytes = encode(&Value::Array(vec![
            1.5.into(),
            Value::Array(vec![stored, removed]),
            Value::Nil,
        ]));
        assert!(read_positional(&bytes).is_some_and(|batch| batch.is_ok()));
        let batch = read_event_batch(&bytes).expect("batch");
        let EngineEvent::BlockStored(stored) = &batch.events[0] else {
            panic!("{batch:?}");
        };
        assert_eq!(stored.block_hashes, [u64::MAX, (-5i64) as u64]);
        assert_eq!(stored.token_ids.len(), 32);
        assert_eq!(stored.token_ids[31], 31 * 4_000);
        let EngineEvent::BlockRemoved(removed) = &batch.events[1] else {
            panic!("{batch:?}");
        };
        assert_eq!(removed.block_hashes, [0x0102]);
        assert_eq!(
            format!("{batch:?}"),
            format!("{:?}", decode_event_batch(&bytes).expect("batch"))
        );
    }
}
