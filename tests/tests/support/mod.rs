//! A small cluster for the router tests: configurations loaded as at startup, workers with and
//! without `router_hint`, prompts, and `stored` events with engine block hashes.

use dynamo_kv_router::config::{self, ConfigError, ConfigOverrides, ConfigSource};
use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, RouterEvent, SequenceHash, block_hashes,
    sequence_hashes_for_tokens,
};
use dynamo_kv_router::plugins::{PolicyRegistry, SessionContext};
use dynamo_kv_router::router::{
    Booking, Prompt, Role, RouteRequest, Router, RouterOptions, RouterSetup, WorkerCapabilities,
    WorkerId, WorkerInfo,
};

/// The block size the configurations below leave at its default.
pub const BLOCK_SIZE: u32 = config::DEFAULT_BLOCK_SIZE;

/// Loads `yaml` as the router does at startup, with every policy linked into this test.
pub fn load(name: &str, yaml: &str) -> Result<RouterSetup, ConfigError> {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    config::load(
        &ConfigSource::new(name, yaml),
        &registry,
        &ConfigOverrides::default(),
    )
}

/// A router running `yaml`, which must be valid.
pub fn router(name: &str, yaml: &str) -> Router {
    let setup = load(name, yaml).unwrap_or_else(|error| panic!("{}", error.render(yaml)));
    Router::new(setup, RouterOptions::default())
}

/// Worker `id` (data-parallel rank 0).
pub fn worker(id: u64) -> WorkerId {
    WorkerId::new(id, 0)
}

/// The control endpoint worker `id` serves KV from.
pub fn endpoint(id: u64) -> String {
    format!("tcp://10.0.0.{id}:23280")
}

/// Worker `id` in `role`, accepting hints and serving KV at [`endpoint`].
pub fn hinting(id: u64, role: Role) -> WorkerInfo {
    WorkerInfo::new(
        worker(id),
        role,
        WorkerCapabilities::hint_source(endpoint(id)),
    )
}

/// `blocks` full blocks of distinct tokens starting at `first_token`.
pub fn prompt(first_token: u32, blocks: u32) -> Vec<u32> {
    (first_token..first_token + blocks * BLOCK_SIZE).collect()
}

/// The engine's own id for block `index` of worker `id` (what `kv.fetch` must name).
pub fn engine_hash(id: u64, index: usize) -> EngineBlockHash {
    EngineBlockHash(0x00e0_0000_0000 + id * 0x1_0000 + index as u64)
}

/// The router-computable sequence hashes of `tokens`.
#[allow(dead_code)]
pub fn sequence_hashes(tokens: &[u32]) -> Vec<SequenceHash> {
    sequence_hashes_for_tokens(tokens, BLOCK_SIZE)
}

/// Event `event_id` of worker `id`: it stored the first `blocks` blocks of `tokens` from the
/// root, each named by its engine hash and carrying its local hash, as engines report them.
pub fn stored(id: u64, event_id: u64, tokens: &[u32], blocks: usize) -> RouterEvent {
    let blocks = block_hashes(tokens, BLOCK_SIZE)
        .into_iter()
        .take(blocks)
        .enumerate()
        .map(|(index, local)| (engine_hash(id, index), local));
    RouterEvent::new(worker(id), event_id, KvCacheEventData::stored(None, blocks))
}

/// Books `request_id` for `role` with `tokens`, in `session` when given.
pub fn book(
    router: &Router,
    request_id: &str,
    role: Role,
    tokens: Vec<u32>,
    session: Option<&str>,
) -> Booking {
    let mut request = RouteRequest::new(request_id, role, Prompt::Tokens(tokens));
    if let Some(session) = session {
        request = request.with_session(SessionContext::new(session));
    }
    router
        .book(&request)
        .unwrap_or_else(|error| panic!("{request_id} is booked: {error}"))
}

/// The hint's wire text, or `None` when the booking carries no hint.
pub fn envelope(booking: &Booking) -> Option<String> {
    booking.hint.as_ref().map(|hint| hint.to_json())
}

/// `[a, b, c]` as JSON.
pub fn json_list<T: serde::Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).expect("numbers serialise")
}

/// Applies `event`, which must change the index.
pub fn apply(router: &Router, event: &RouterEvent) {
    assert_eq!(
        router.apply_event(event),
        dynamo_kv_router::kv::EventOutcome::Applied,
        "{}",
        event.to_json()
    );
}
