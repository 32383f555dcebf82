//! Decoding an engine's msgpack `EventBatch`: vLLM's and SGLang's layouts, current and earlier.
//!
//! - The batch is `[ts, events, data_parallel_rank]` (rank nil or absent for rank 0 engines),
//!   or a map with `ts`, `events` and `data_parallel_rank` / `dp_rank` / `attn_dp_rank`.
//! - An event is a tagged map (`{"type": "BlockStored", ...}`) or a positional array
//!   (`["BlockStored", ...]`, msgspec's `array_like`). Positional `BlockStored`:
//!   `tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name
//!   (or SGLang's `{cache_salt}` map), extra_keys`, then an optional tail `group_idx,
//!   kv_cache_spec_kind, kv_cache_spec_sliding_window, locality, ownership`; SGLang stops after
//!   `lora_id`. Positional `BlockRemoved`: `tag, block_hashes, medium` and the same tail.
//! - A block hash is an unsigned or signed 64-bit integer (signed ones are reinterpreted), or a
//!   byte string of which the last 8 bytes, big-endian, are the id (as vLLM converts them).
//! - EAGLE engines send `token_ids` as bigrams `[[t0, t1], [t1, t2], …]`; they are unrolled.

use crate::engine_events::engine_event::{
    BlockRemoved, BlockStored, EngineEvent, EngineEventBatch,
};
use rmpv::Value;

/// A payload that is not an engine `EventBatch`; the message says what was wrong and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("undecodable KV event batch: {0}")]
pub struct BatchDecodeError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, BatchDecodeError> {
    Err(BatchDecodeError(message.into()))
}

/// Decodes one msgpack `EventBatch`.
///
/// This reads the payload into a whole `rmpv` value tree: every layout, with messages that
/// name what is wrong. [`read_event_batch`](super::event_batch_reader::read_event_batch) reads
/// the common vLLM layout faster and hands everything else to this.
pub fn decode_event_batch(payload: &[u8]) -> Result<EngineEventBatch, BatchDecodeError> {
    let mut reader = payload;
    let value = rmpv::decode::read_value(&mut reader)
        .map_err(|error| BatchDecodeError(format!("not msgpack: {error}")))?;
    match value {
        Value::Array(items) => {
            let mut items = items.into_iter();
            let ts = timestamp(items.next())?;
            let events = events(items.next())?;
            let rank = rank(items.next())?;
            Ok(EngineEventBatch {
                ts,
                events,
                data_parallel_rank: rank,
            })
        }
        Value::Map(entries) => {
            let (mut ts, mut events_value, mut dp) = (None, None, None);
            for (key, value) in entries {
                match key.as_str() {
                    Some("ts") => ts = Some(value),
                    Some("events") => events_value = Some(value),
                    Some("data_parallel_rank" | "dp_rank" | "attn_dp_rank") => dp = Some(value),
                    _ => {}
                }
            }
            Ok(EngineEventBatch {
                ts: timestamp(ts)?,
                events: events(events_value)?,
                data_parallel_rank: rank(dp)?,
            })
        }
        other => fail(format!(
            "expected an array [ts, events, data_parallel_rank] or a map, found {}",
            kind(&other)
        )),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "a boolean",
        Value::Integer(_) => "an integer",
        Value::F32(_) | Value::F64(_) => "a float",
        Value::String(_) => "a string",
        Value::Binary(_) => "bytes",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        Value::Ext(..) => "an extension",
    }
}

pub(crate) fn timestamp(value: Option<Value>) -> Result<f64, BatchDecodeError> {
    match value {
        Some(Value::F64(ts)) => Ok(ts),
        Some(Value::F32(ts)) => Ok(f64::from(ts)),
        Some(Value::Integer(ts)) => Ok(ts.as_f64().unwrap_or_default()),
        Some(other) => fail(format!(
            "batch ts: expected a number, found {}",
            kind(&other)
        )),
        None => fail("batch ts is missing"),
    }
}

pub(crate) fn rank(value: Option<Value>) -> Result<Option<u32>, BatchDecodeError> {
    match value {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::Integer(rank)) => rank
            .as_u64()
            .and_then(|rank| u32::try_from(rank).ok())
            .map(Some)
            .ok_or_else(|| {
                BatchDecodeError(format!("batch data_parallel_rank {rank} is out of range"))
            }),
        Some(other) => fail(format!(
            "batch data_parallel_rank: expected an integer, found {}",
            kind(&other)
        )),
    }
}

fn events(value: Option<Value>) -> Result<Vec<EngineEvent>, BatchDecodeError> {
    match value {
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                event(item).map_err(|error| BatchDecodeError(format!("event {index}: {}", error.0)))
            })
            .collect(),
        Some(other) => fail(format!(
            "batch events: expected an array, found {}",
            kind(&other)
        )),
        None => fail("batch events are missing"),
    }
}

/// Decodes one event, tagged map or positional array.
pub fn event(value: Value) -> Result<EngineEvent, BatchDecodeError> {
    match value {
        Value::Array(items) => positional_event(items),
        Value::Map(entries) => map_event(entries),
        other => fail(format!(
            "expected a tagged map or array, found {}",
            kind(&other)
        )),
    }
}

fn hash(value: &Value, field: &str) -> Result<u64, BatchDecodeError> {
    match value {
        Value::Integer(number) => number
            .as_u64()
            .or_else(|| number.as_i64().map(|signed| signed as u64))
            .ok_or_else(|| BatchDecodeError(format!("{field}: {number} is not a 64-bit hash"))),
        Value::Binary(bytes) => Ok(bytes_hash(bytes)),
        other => fail(format!(
            "{field}: expected an integer or bytes, found {}",
            kind(other)
        )),
    }
}

/// The id of a byte-string block hash: its last 8 bytes, big-endian (vLLM's conversion).
pub fn bytes_hash(bytes: &[u8]) -> u64 {
    let tail = &bytes[bytes.len().saturating_sub(8)..];
    tail.iter()
        .fold(0u64, |id, byte| (id << 8) | u64::from(*byte))
}

fn hashes(value: Option<&Value>, field: &str) -> Result<Vec<u64>, BatchDecodeError> {
    match value {
        Some(Value::Array(items)) => items.iter().map(|item| hash(item, field)).collect(),
        Some(other) => fail(format!("{field}: expected an array, found {}", kind(other))),
        None => fail(format!("{field} is missing")),
    }
}

fn optional_hash(value: Option<&Value>, field: &str) -> Result<Option<u64>, BatchDecodeError> {
    match value {
        None | Some(Value::Nil) => Ok(None),
        Some(value) => hash(value, field).map(Some),
    }
}

fn token(value: &Value) -> Result<u32, BatchDecodeError> {
    value
        .as_u64()
        .and_then(|token| u32::try_from(token).ok())
        .ok_or_else(|| BatchDecodeError(format!("token_ids: {value} is not a token id")))
}

/// Token ids, and whether they came as EAGLE bigrams.
pub(crate) fn token_ids(value: Option<&Value>) -> Result<(Vec<u32>, bool), BatchDecodeError> {
    let items = match value {
        Some(Value::Array(items)) => items,
        Some(other) => {
            return fail(format!(
                "token_ids: expected an array, found {}",
                kind(other)
            ));
        }
        None => return fail("token_ids is missing"),
    };
    if items.first().is_some_and(Value::is_array) {
        let mut tokens = Vec::with_capacity(items.len() + 1);
        let mut last = None;
        for pair in items {
            let [first, second] = pair.as_array().map(Vec::as_slice).unwrap_or_default() else {
                return fail("token_ids: expected [token, token] bigrams");
            };
            tokens.push(token(first)?);
            last = Some(token(second)?);
        }
        tokens.extend(last);
        return Ok((tokens, true));
    }
    Ok((items.iter().map(token).collect::<Result<_, _>>()?, false))
}

fn unsigned(value: Option<&Value>, field: &str) -> Result<Option<u64>, BatchDecodeError> {
    match value {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::Integer(number)) => number
            .as_u64()
            .map(Some)
            .ok_or_else(|| BatchDecodeError(format!("{field}: {number} is negative"))),
        Some(other) => fail(format!(
            "{field}: expected an integer, found {}",
            kind(other)
        )),
    }
}

fn text(value: Option<&Value>, field: &str) -> Result<Option<String>, BatchDecodeError> {
    match value {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::String(text)) => Ok(text.as_str().map(str::to_owned)),
        Some(other) => fail(format!("{field}: expected a string, found {}", kind(other))),
    }
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.is_empty())
}

fn block_size(value: Option<&Value>) -> Result<usize, BatchDecodeError> {
    unsigned(value, "block_size")?
        .map(|size| size as usize)
        .ok_or_else(|| BatchDecodeError("block_size is missing".to_owned()))
}

/// The optional metadata after the fixed positional fields.
#[derive(Default)]
struct Tail {
    group_idx: Option<u32>,
    kv_cache_spec_kind: Option<String>,
    locality: Option<String>,
}

/// Reads the tail: the current layout `group_idx, kind, window, locality, ownership` when its
/// types fit, else earlier layouts by type (first integer `group_idx`, a string `kind`).
fn tail(items: &[Value]) -> Tail {
    let fits = |index: usize, want_int: bool| {
        items.get(index).is_none_or(|value| {
            value.is_nil()
                || if want_int {
                    value.is_u64()
                } else {
                    value.is_str()
                }
        })
    };
    let group = |value: Option<&Value>| {
        value
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok())
    };
    let string = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    if items.len() >= 4
        && fits(0, true)
        && fits(1, false)
        && fits(2, true)
        && fits(3, false)
        && fits(4, false)
    {
        return Tail {
            group_idx: group(items.first()),
            kv_cache_spec_kind: string(items.get(1)),
            locality: string(items.get(3)),
        };
    }
    let mut parsed = Tail::default();
    for value in items {
        if parsed.group_idx.is_none() && value.is_u64() {
            parsed.group_idx = group(Some(value));
        } else if parsed.kv_cache_spec_kind.is_none() && value.is_str() {
            parsed.kv_cache_spec_kind = string(Some(value));
        }
    }
    parsed
}

fn positional_event(items: Vec<Value>) -> Result<EngineEvent, BatchDecodeError> {
    let tag = match items.first() {
        Some(Value::String(tag)) => tag.as_str().unwrap_or_default().to_owned(),
        _ => return fail("a positional event must start with its type tag"),
    };
    match tag.as_str() {
        "BlockStored" => {
            let block_hashes = hashes(items.get(1), "block_hashes")?;
            let tokens = token_ids(items.get(3))?;
            positional_stored(&items, block_hashes, tokens)
        }
        "BlockRemoved" => positional_removed(&items, hashes(items.get(1), "block_hashes")?),
        "AllBlocksCleared" => Ok(EngineEvent::AllBlocksCleared),
        "Ignored" => Ok(EngineEvent::Ignored),
        other => fail(format!(
            "unknown event type `{other}`; expected BlockStored, BlockRemoved or AllBlocksCleared"
        )),
    }
}

/// A positional `BlockStored` from its fields, `block_hashes` (item 1) and the token ids
/// (item 3, and whether they came as EAGLE bigrams) given already decoded; `items` holds
/// every position (1 and 3 are not read).
pub(crate) fn positional_stored(
    items: &[Value],
    block_hashes: Vec<u64>,
    (token_ids, is_eagle): (Vec<u32>, bool),
) -> Result<EngineEvent, BatchDecodeError> {
    let parent_block_hash = optional_hash(items.get(2), "parent_block_hash")?;
    let (lora_name, cache_salt) = match items.get(7) {
        Some(Value::Map(entries)) => (
            None,
            entries
                .iter()
                .find(|(key, _)| key.as_str() == Some("cache_salt"))
                .map(|(_, value)| text(Some(value), "cache_salt"))
                .transpose()?
                .flatten(),
        ),
        other => (text(other, "lora_name")?, None),
    };
    let tail = tail(items.get(9..).unwrap_or_default());
    Ok(EngineEvent::BlockStored(BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        block_size: block_size(items.get(4))?,
        lora_id: unsigned(items.get(5), "lora_id")?,
        medium: non_empty(text(items.get(6), "medium")?),
        lora_name: non_empty(lora_name),
        cache_salt: non_empty(cache_salt),
        group_idx: tail.group_idx,
        kv_cache_spec_kind: tail.kv_cache_spec_kind,
        is_eagle,
        locality: tail.locality,
    }))
}

/// A positional `BlockRemoved` from its fields, `block_hashes` (item 1) given already decoded.
pub(crate) fn positional_removed(
    items: &[Value],
    block_hashes: Vec<u64>,
) -> Result<EngineEvent, BatchDecodeError> {
    let tail = tail(items.get(3..).unwrap_or_default());
    Ok(EngineEvent::BlockRemoved(BlockRemoved {
        block_hashes,
        medium: non_empty(text(items.get(2), "medium")?),
        group_idx: tail.group_idx,
        kv_cache_spec_kind: tail.kv_cache_spec_kind,
        locality: tail.locality,
    }))
}

fn map_event(entries: Vec<(Value, Value)>) -> Result<EngineEvent, BatchDecodeError> {
    let field = |name: &str| {
        entries
            .iter()
            .find(|(key, _)| key.as_str() == Some(name))
            .map(|(_, value)| value)
    };
    let tag = text(field("type"), "type")?
        .ok_or_else(|| BatchDecodeError("a map event needs its `type`".to_owned()))?;
    let group_idx = unsigned(field("group_idx"), "group_idx")?.and_then(|g| u32::try_from(g).ok());
    let kind = text(field("kv_cache_spec_kind"), "kv_cache_spec_kind")?;
    let locality = text(field("locality"), "locality")?;
    match tag.as_str() {
        "BlockStored" => {
            let block_hashes = hashes(field("block_hashes"), "block_hashes")?;
            let parent_block_hash = optional_hash(field("parent_block_hash"), "parent_block_hash")?;
            let (token_ids, is_eagle) = token_ids(field("token_ids"))?;
            Ok(EngineEvent::BlockStored(BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size: block_size(field("block_size"))?,
                lora_id: unsigned(field("lora_id"), "lora_id")?,
                medium: non_empty(text(field("medium"), "medium")?),
                lora_name: non_empty(text(field("lora_name"), "lora_name")?),
                cache_salt: non_empty(text(field("cache_salt"), "cache_salt")?),
                group_idx,
                kv_cache_spec_kind: kind,
                is_eagle,
                locality,
            }))
        }
        "BlockRemoved" => Ok(EngineEvent::BlockRemoved(BlockRemoved {
            block_hashes: hashes(field("block_hashes"), "block_hashes")?,
            medium: non_empty(text(field("medium"), "medium")?),
            group_idx,
            kv_cache_spec_kind: kind,
            locality,
        })),
        "AllBlocksCleared" => Ok(EngineEvent::AllBlocksCleared),
        "Ignored" => Ok(EngineEvent::Ignored),
        other => fail(format!(
            "unknown event type `{other}`; expected BlockStored, BlockRemoved or AllBlocksCleared"
        )),
    }
}
