//! The README's "Use the router in a program" walk-through, compiled and run as written.

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes};
use dynamo_kv_router::plugins::{PolicyRegistry, SessionContext};
use dynamo_kv_router::router::{
    Prompt, Role, RouteRequest, Router, RouterOptions, WorkerCapabilities, WorkerId, WorkerInfo,
};
use dynamo_router_catalog as _;

const CONFIG: &str = "\
worker_selection:
  aggregated:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
";

fn walkthrough() -> Result<String, Box<dyn std::error::Error>> {
    // Startup: the linked policies, the configuration, the router.
    let registry = PolicyRegistry::linked()?;
    let source = ConfigSource::new("router.yaml", CONFIG);
    let setup = config::load(&source, &registry, &ConfigOverrides::default())
        .map_err(|error| error.render(&source.text))?;
    let router = Router::new(setup, RouterOptions::default());

    // Workers register with what they advertise.
    for id in [1, 2] {
        let endpoint = format!("tcp://10.0.0.{id}:23280");
        let info = WorkerInfo::new(
            WorkerId::new(id, 0),
            Role::Aggregated,
            WorkerCapabilities::hint_source(endpoint),
        );
        router.register_worker(info)?;
    }

    // Worker 1 reports, through a KV event, that it holds the prompt's 4 blocks: each named by
    // the engine's own id and carrying its local hash (its own tokens only, not chained).
    let tokens: Vec<u32> = (0..64).collect();
    let blocks = block_hashes(&tokens, 16)
        .into_iter()
        .enumerate()
        .map(|(i, local)| (EngineBlockHash(100 + i as u64), local));
    let stored = KvCacheEventData::stored(None, blocks);
    router.apply_event(&RouterEvent::new(WorkerId::new(1, 0), 0, stored));

    // Book a request, pass the hint (if any) to the booked worker, release when done.
    let request = RouteRequest::new("req-1", Role::Aggregated, Prompt::Tokens(tokens))
        .with_session(SessionContext::new("chat-42"));
    let booking = router.book(&request)?;
    let hint_json = booking.hint.as_ref().map(|hint| hint.to_json());
    router.prefill_complete("req-1");
    router.release("req-1");
    Ok(format!(
        "booked {} (cached {} of {} blocks), hint: {}",
        booking.worker,
        booking.stats.cached_blocks,
        booking.stats.blocks,
        hint_json.as_deref().unwrap_or("none")
    ))
}

#[test]
fn the_readme_walkthrough_books_the_worker_that_holds_the_prompt() {
    let summary = walkthrough().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(summary, "booked 1:0 (cached 4 of 4 blocks), hint: none");
}

#[test]
fn the_readme_salted_request_hashes_apart_from_the_plain_one() {
    use dynamo_kv_router::kv::RequestIdentity;

    let request = RouteRequest::new("req-1", Role::Decode, Prompt::Tokens(vec![1, 2, 3, 4]))
        .with_identity(
            RequestIdentity::plain()
                .with_lora("my-lora")
                .with_cache_namespace("tenant-a"),
        );
    let tokens: Vec<u32> = (1..=12).collect();
    let salted = dynamo_kv_router::kv::sequence_hashes_for_request(&tokens, 4, &request.identity);
    let plain = dynamo_kv_router::kv::sequence_hashes_for_tokens(&tokens, 4);
    assert_eq!(salted.len(), plain.len());
    assert!(salted.iter().zip(&plain).all(|(a, b)| a != b));
}

/// The README's block is this file's walk-through, word for word (the doc test of the README
/// compiles it; this test runs it).
#[test]
fn the_readme_shows_this_walkthrough_as_it_runs() {
    let readme = include_str!("../../README.md");
    let first_line = "use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};";
    let start = readme
        .find(first_line)
        .expect("the README shows the walk-through");
    let end = start + readme[start..].find("```").expect("the block is closed");
    let block = &readme[start..end];
    assert!(
        include_str!("readme_router.rs").contains(block),
        "the README's walk-through differs from tests/tests/readme_router.rs; copy the file's \
         code into the README:\n{block}"
    );
}
