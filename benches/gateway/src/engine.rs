//! The fake engines: OpenAI-shaped HTTP servers on 127.0.0.1 that answer instantly (or with a
//! per-token delay), keep an LRU of prompt blocks (16 words per block, ids from
//! [`crate::words::word_id`]), count per request how many leading blocks were already cached,
//! and publish vLLM-layout KV events (BlockStored / BlockRemoved / AllBlocksCleared) over ZMQ
//! with the repo's `EnginePublisher`, so a KV-event router sees their caches.
//!
//! Besides the OpenAI routes they answer what the peers probe: `/health`, `/model_info`,
//! `/server_info` (sglang-router), `/v1/completions/render` (vllm-router), and the bench's
//! own `GET /_bench/stats` and `POST /_bench/reset`.

use crate::words;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use kv_router_service::engine_events::engine_event::{
    BlockRemoved, BlockStored, EngineEvent, EngineEventBatch,
};
use kv_router_service::engine_events::engine_publisher::{EnginePublisher, encode_batch};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Tokens per KV block (the router's configured block size).
pub const BLOCK_SIZE: usize = 16;

/// Options shared by every engine of the process.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Blocks each engine's cache holds before evicting the least recently used.
    pub lru_blocks: usize,
    /// Delay before each streamed token (0: as fast as possible).
    pub token_delay: Duration,
    /// The model id reported on `/v1/models` and in answers.
    pub model: String,
}

/// Where one engine listens.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EngineAddress {
    pub http: String,
    pub events: String,
    pub replay: String,
}

/// An LRU set of block hashes: hash → engine id and stamp, ordered by stamp.
struct Lru {
    capacity: usize,
    clock: u64,
    blocks: HashMap<u64, (u64, u64)>,
    order: BTreeMap<u64, u64>,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            clock: 0,
            blocks: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn contains(&self, hash: u64) -> bool {
        self.blocks.contains_key(&hash)
    }

    fn touch(&mut self, hash: u64) {
        self.clock += 1;
        if let Some((_, stamp)) = self.blocks.get_mut(&hash) {
            self.order.remove(stamp);
            *stamp = self.clock;
            self.order.insert(self.clock, hash);
        }
    }

    /// Inserts `hash` (engine id `id`); returns the engine ids it evicted.
    fn insert(&mut self, hash: u64, id: u64, evicted: &mut Vec<u64>) {
        self.clock += 1;
        if let Some((_, stamp)) = self.blocks.insert(hash, (id, self.clock)) {
            self.order.remove(&stamp);
        }
        self.order.insert(self.clock, hash);
        while self.blocks.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some((old_id, _)) = self.blocks.remove(&oldest) {
                evicted.push(old_id);
            }
        }
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.order.clear();
    }
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    prompt_blocks: AtomicU64,
    hit_blocks: AtomicU64,
}

struct Engine {
    index: u64,
    options: EngineOptions,
    cache: Mutex<Lru>,
    stats: Stats,
    /// Batches to publish, in cache order (sent while `cache` is locked).
    events: mpsc::UnboundedSender<EngineEventBatch>,
    created: u64,
}

/// Chained block hashes of `tokens`' full blocks.
fn block_hashes(tokens: &[u32]) -> Vec<u64> {
    let mut parent = 0u64;
    let mut bytes = Vec::with_capacity(8 + BLOCK_SIZE * 4);
    tokens
        .chunks_exact(BLOCK_SIZE)
        .map(|block| {
            bytes.clear();
            bytes.extend_from_slice(&parent.to_le_bytes());
            for token in block {
                bytes.extend_from_slice(&token.to_le_bytes());
            }
            parent = xxhash_rust::xxh3::xxh3_64(&bytes);
            parent
        })
        .collect()
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

impl Engine {
    fn engine_id(&self, hash: u64) -> u64 {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&hash.to_le_bytes());
        bytes[8..].copy_from_slice(&self.index.to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    /// Counts the cached leading blocks of `tokens`, caches the rest, publishes the changes.
    fn prefill(&self, tokens: &[u32]) {
        let hashes = block_hashes(tokens);
        let mut cache = self.cache.lock();
        let held = hashes
            .iter()
            .take_while(|hash| cache.contains(**hash))
            .count();
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .prompt_blocks
            .fetch_add(hashes.len() as u64, Ordering::Relaxed);
        self.stats
            .hit_blocks
            .fetch_add(held as u64, Ordering::Relaxed);
        for hash in &hashes[..held] {
            cache.touch(*hash);
        }
        if held == hashes.len() {
            return;
        }
        let ids: Vec<u64> = hashes[held..]
            .iter()
            .map(|hash| self.engine_id(*hash))
            .collect();
        let parent = held
            .checked_sub(1)
            .map(|index| self.engine_id(hashes[index]));
        let mut evicted = Vec::new();
        for (hash, id) in hashes[held..].iter().zip(&ids) {
            cache.insert(*hash, *id, &mut evicted);
        }
        // A block evicted by this same insertion (tiny caches only) is reported removed after
        // it was stored, as an engine would.
        let mut events = vec![EngineEvent::BlockStored(BlockStored {
            block_hashes: ids,
            parent_block_hash: parent,
            token_ids: tokens[held * BLOCK_SIZE..hashes.len() * BLOCK_SIZE].to_vec(),
            block_size: BLOCK_SIZE,
            ..BlockStored::default()
        })];
        if !evicted.is_empty() {
            events.push(EngineEvent::BlockRemoved(BlockRemoved {
                block_hashes: evicted,
                ..BlockRemoved::default()
            }));
        }
        let _ = self.events.send(EngineEventBatch {
            ts: now(),
            events,
            data_parallel_rank: None,
        });
    }

    fn reset(&self) {
        let mut cache = self.cache.lock();
        cache.clear();
        self.stats.requests.store(0, Ordering::Relaxed);
        self.stats.prompt_blocks.store(0, Ordering::Relaxed);
        self.stats.hit_blocks.store(0, Ordering::Relaxed);
        let _ = self.events.send(EngineEventBatch {
            ts: now(),
            events: vec![EngineEvent::AllBlocksCleared],
            data_parallel_rank: None,
        });
    }
}

/// Publish events as tagged maps (`{"type": "BlockStored", ...}`) instead of vLLM's positional
/// arrays: vllm-router's `kv_aware` policy decodes only maps. Our router reads both.
static MAP_LAYOUT: AtomicBool = AtomicBool::new(false);

fn encode_map_batch(batch: &EngineEventBatch) -> Vec<u8> {
    use rmp::encode::*;
    let mut out = Vec::with_capacity(64 + batch.events.len() * 128);
    let hashes = |out: &mut Vec<u8>, hashes: &[u64]| {
        let _ = write_array_len(out, hashes.len() as u32);
        for hash in hashes {
            let _ = write_uint(out, *hash);
        }
    };
    // vllm-router requires `group_idx` present and refuses the other hybrid-attention fields.
    let tail = |out: &mut Vec<u8>| {
        let _ = write_str(out, "group_idx");
        let _ = write_uint(out, 0);
    };
    let _ = write_array_len(&mut out, 3);
    let _ = write_f64(&mut out, batch.ts);
    let _ = write_array_len(&mut out, batch.events.len() as u32);
    for event in &batch.events {
        match event {
            EngineEvent::BlockStored(stored) => {
                let _ = write_map_len(&mut out, 10);
                let _ = write_str(&mut out, "type");
                let _ = write_str(&mut out, "BlockStored");
                let _ = write_str(&mut out, "lora_name");
                let _ = write_nil(&mut out);
                let _ = write_str(&mut out, "extra_keys");
                let _ = write_nil(&mut out);
                tail(&mut out);
                let _ = write_str(&mut out, "block_hashes");
                hashes(&mut out, &stored.block_hashes);
                let _ = write_str(&mut out, "parent_block_hash");
                match stored.parent_block_hash {
                    Some(parent) => drop(write_uint(&mut out, parent)),
                    None => drop(write_nil(&mut out)),
                }
                let _ = write_str(&mut out, "token_ids");
                let _ = write_array_len(&mut out, stored.token_ids.len() as u32);
                for token in &stored.token_ids {
                    let _ = write_uint(&mut out, u64::from(*token));
                }
                let _ = write_str(&mut out, "block_size");
                let _ = write_uint(&mut out, stored.block_size as u64);
                let _ = write_str(&mut out, "lora_id");
                let _ = write_nil(&mut out);
                let _ = write_str(&mut out, "medium");
                let _ = write_str(&mut out, "GPU");
            }
            EngineEvent::BlockRemoved(removed) => {
                let _ = write_map_len(&mut out, 4);
                let _ = write_str(&mut out, "type");
                let _ = write_str(&mut out, "BlockRemoved");
                tail(&mut out);
                let _ = write_str(&mut out, "block_hashes");
                hashes(&mut out, &removed.block_hashes);
                let _ = write_str(&mut out, "medium");
                let _ = write_str(&mut out, "GPU");
            }
            _ => {
                let _ = write_map_len(&mut out, 1);
                let _ = write_str(&mut out, "type");
                let _ = write_str(&mut out, "AllBlocksCleared");
            }
        }
    }
    let _ = write_nil(&mut out);
    out
}

async fn publish_loop(
    mut publisher: EnginePublisher,
    mut batches: mpsc::UnboundedReceiver<EngineEventBatch>,
) {
    while let Some(batch) = batches.recv().await {
        let payload = if MAP_LAYOUT.load(Ordering::Relaxed) {
            encode_map_batch(&batch)
        } else {
            encode_batch(&batch)
        };
        if let Err(error) = publisher.publish(payload).await {
            eprintln!("fake engine: cannot publish a KV event batch: {error}");
        }
    }
}

type Shared = Arc<Engine>;

fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(value).unwrap_or_default(),
    )
        .into_response()
}

fn bad_request(message: &str) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"error": {"message": message, "type": "invalid_request_error", "code": 400}}),
    )
}

/// The prompt's token ids: a string (words), a list of strings (the first), or token ids.
fn completion_tokens(body: &Value) -> Option<Vec<u32>> {
    match body.get("prompt")? {
        Value::String(text) => Some(words::text_ids(text)),
        Value::Array(items) => match items.first() {
            Some(Value::String(text)) => Some(words::text_ids(text)),
            Some(Value::Number(_)) => items
                .iter()
                .map(|item| item.as_u64().map(|id| id as u32))
                .collect(),
            _ => Some(Vec::new()),
        },
        _ => None,
    }
}

/// A chat's token ids: every message's text content, in order.
fn chat_tokens(body: &Value) -> Option<Vec<u32>> {
    let messages = body.get("messages")?.as_array()?;
    let mut ids = Vec::new();
    for message in messages {
        match message.get("content") {
            Some(Value::String(text)) => ids.extend(words::text_ids(text)),
            Some(Value::Array(parts)) => {
                for part in parts {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        ids.extend(words::text_ids(text));
                    }
                }
            }
            _ => {}
        }
    }
    Some(ids)
}

fn max_tokens(body: &Value) -> usize {
    body.get("max_tokens")
        .or_else(|| body.get("max_completion_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(16)
        .min(1 << 20) as usize
}

fn stream_flag(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

fn include_usage(body: &Value) -> bool {
    body.pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

async fn generate(engine: Shared, kind: Kind, raw: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&raw) else {
        return bad_request("the body is not JSON");
    };
    let tokens = match kind {
        Kind::Completion => completion_tokens(&body),
        Kind::Chat => chat_tokens(&body),
    };
    let Some(tokens) = tokens else {
        return bad_request(match kind {
            Kind::Completion => "`prompt` is missing",
            Kind::Chat => "`messages` is missing",
        });
    };
    engine.prefill(&tokens);
    let n = max_tokens(&body);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&engine.options.model)
        .to_owned();
    let id = format!(
        "cmpl-bench-{}-{}",
        engine.index,
        engine.stats.requests.load(Ordering::Relaxed)
    );
    let created = engine.created;
    if !stream_flag(&body) {
        let text = " w7".repeat(n);
        let answer = match kind {
            Kind::Completion => json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": "length"}],
                "usage": usage(tokens.len(), n),
            }),
            Kind::Chat => json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": null, "finish_reason": "length"}],
                "usage": usage(tokens.len(), n),
            }),
        };
        if !engine.options.token_delay.is_zero() {
            tokio::time::sleep(engine.options.token_delay * n as u32).await;
        }
        return json_response(StatusCode::OK, &answer);
    }
    let sse = |value: Value| Bytes::from(format!("data: {value}\n\n"));
    let (token, last) = match kind {
        Kind::Completion => (
            sse(
                json!({"id": id, "object": "text_completion", "created": created, "model": model,
                        "choices": [{"index": 0, "text": " w7", "logprobs": null, "finish_reason": null}]}),
            ),
            sse(
                json!({"id": id, "object": "text_completion", "created": created, "model": model,
                        "choices": [{"index": 0, "text": "", "logprobs": null, "finish_reason": "length"}]}),
            ),
        ),
        Kind::Chat => (
            sse(
                json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": {"content": " w7"}, "logprobs": null, "finish_reason": null}]}),
            ),
            sse(
                json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}]}),
            ),
        ),
    };
    let mut chunks: Vec<Bytes> = Vec::with_capacity(n + 4);
    if kind == Kind::Chat {
        chunks.push(sse(json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]})));
    }
    chunks.extend(std::iter::repeat_n(token, n));
    chunks.push(last);
    if include_usage(&body) {
        let object = match kind {
            Kind::Completion => "text_completion",
            Kind::Chat => "chat.completion.chunk",
        };
        chunks.push(sse(
            json!({"id": id, "object": object, "created": created, "model": model,
            "choices": [], "usage": usage(tokens.len(), n)}),
        ));
    }
    chunks.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let delay = engine.options.token_delay;
    let body = if delay.is_zero() {
        Body::from_stream(futures_util::stream::iter(
            chunks
                .into_iter()
                .map(Ok::<Bytes, std::convert::Infallible>),
        ))
    } else {
        let stream = futures_util::stream::unfold(chunks.into_iter(), move |mut rest| async move {
            let chunk = rest.next()?;
            tokio::time::sleep(delay).await;
            Some((Ok::<Bytes, std::convert::Infallible>(chunk), rest))
        });
        Body::from_stream(stream)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn completions(State(engine): State<Shared>, raw: Bytes) -> Response {
    generate(engine, Kind::Completion, raw).await
}

async fn chat_completions(State(engine): State<Shared>, raw: Bytes) -> Response {
    generate(engine, Kind::Chat, raw).await
}

/// vLLM's `/v1/completions/render`: the prompt's token ids, without generating.
async fn completions_render(State(engine): State<Shared>, raw: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let ids = completion_tokens(&body).unwrap_or_default();
    json_response(
        StatusCode::OK,
        &json!([{"token_ids": ids, "request_id": "cmpl-render", "model": engine.options.model,
                 "sampling_params": {"max_tokens": max_tokens(&body)}}]),
    )
}

/// vLLM's `/v1/chat/completions/render`.
async fn chat_render(State(engine): State<Shared>, raw: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let ids = chat_tokens(&body).unwrap_or_default();
    json_response(
        StatusCode::OK,
        &json!({"token_ids": ids, "request_id": "chatcmpl-render", "model": engine.options.model,
                "sampling_params": {"max_tokens": max_tokens(&body)}}),
    )
}

/// vLLM's `/tokenize`.
async fn tokenize(raw: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let ids = completion_tokens(&body)
        .or_else(|| chat_tokens(&body))
        .unwrap_or_default();
    json_response(
        StatusCode::OK,
        &json!({"count": ids.len(), "max_model_len": 1_000_000, "tokens": ids}),
    )
}

async fn models(State(engine): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [{"id": engine.options.model, "object": "model",
                 "created": engine.created, "owned_by": "gateway-bench", "max_model_len": 1_000_000}]}),
    )
}

async fn model_info(State(engine): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"model_path": engine.options.model, "tokenizer_path": null,
                "is_generation": true, "served_model_name": engine.options.model}),
    )
}

async fn server_info(State(engine): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"model_path": engine.options.model, "served_model_name": engine.options.model,
                "page_size": BLOCK_SIZE, "dp_size": 1, "tp_size": 1, "version": "gateway-bench"}),
    )
}

async fn health() -> &'static str {
    ""
}

async fn stats(State(engine): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "requests": engine.stats.requests.load(Ordering::Relaxed),
            "prompt_blocks": engine.stats.prompt_blocks.load(Ordering::Relaxed),
            "hit_blocks": engine.stats.hit_blocks.load(Ordering::Relaxed),
            "cached_blocks": engine.cache.lock().blocks.len(),
        }),
    )
}

/// `POST /_bench/reset[?layout=map|array]`: empties the cache and the counters (announced
/// with AllBlocksCleared), optionally switching the event layout of every engine.
async fn reset(State(engine): State<Shared>, uri: Uri) -> Response {
    match uri.query() {
        Some("layout=map") => MAP_LAYOUT.store(true, Ordering::Relaxed),
        Some("layout=array") => MAP_LAYOUT.store(false, Ordering::Relaxed),
        _ => {}
    }
    engine.reset();
    json_response(StatusCode::OK, &json!({"reset": true}))
}

async fn not_found(uri: Uri) -> Response {
    eprintln!("fake engine: no route for {uri}");
    (StatusCode::NOT_FOUND, "not found").into_response()
}

fn router(engine: Shared) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions/render", post(completions_render))
        .route("/v1/chat/completions/render", post(chat_render))
        .route("/tokenize", post(tokenize))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/health_generate", get(health))
        .route("/ping", get(health))
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/_bench/stats", get(stats))
        .route("/_bench/reset", post(reset))
        .fallback(not_found)
        .with_state(engine)
}

/// Starts `count` engines on 127.0.0.1; returns their addresses. They serve until the process
/// ends.
pub async fn start(count: usize, options: EngineOptions) -> std::io::Result<Vec<EngineAddress>> {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let mut addresses = Vec::with_capacity(count);
    for index in 0..count {
        let publisher = EnginePublisher::bind("127.0.0.1")
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))?;
        let events = publisher.events_endpoint().to_owned();
        let replay = publisher.replay_endpoint().to_owned();
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(publish_loop(publisher, receiver));
        let engine = Arc::new(Engine {
            index: index as u64 + 1,
            options: options.clone(),
            cache: Mutex::new(Lru::new(options.lru_blocks)),
            stats: Stats::default(),
            events: sender,
            created,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let http = format!("http://{}", listener.local_addr()?);
        let app = router(engine);
        tokio::spawn(async move {
            // Real engines answer with Nagle off (uvicorn's asyncio transports set
            // TCP_NODELAY), so a streamed answer's last small chunks are not held back waiting
            // for the client's delayed ACK.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("fake engine: server stopped: {error}");
            }
        });
        addresses.push(EngineAddress {
            http,
            events,
            replay,
        });
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        let mut evicted = Vec::new();
        lru.insert(1, 10, &mut evicted);
        lru.insert(2, 20, &mut evicted);
        lru.touch(1);
        lru.insert(3, 30, &mut evicted);
        assert_eq!(evicted, vec![20]);
        assert!(lru.contains(1) && lru.contains(3) && !lru.contains(2));
    }

    #[test]
    fn block_hashes_chain_over_full_blocks() {
        let tokens: Vec<u32> = (0..40).collect();
        let hashes = block_hashes(&tokens);
        assert_eq!(hashes.len(), 2);
        assert_eq!(block_hashes(&tokens[..32]), hashes);
        let mut other = tokens.clone();
        other[0] = 99;
        assert_ne!(block_hashes(&other)[1], hashes[1]);
    }
}
