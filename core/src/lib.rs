//! `dynamo-kv-router`: a KV-aware request router for LLM serving with a plugin system.
//!
//! Worker-selection policies choose which worker serves a request; hint policies attach
//! engine-directed KV actions (such as `kv.fetch`) to the booked worker. Plugin authors start
//! from [`plugins::prelude`]; linking a catalog crate registers its policies.
//!
//! # Layers, bottom to top
//!
//! Below this crate, `dynamo-kv-router-names` holds the policy-name rules (used here through
//! [`plugins::name`] and by the attribute macros of `dynamo-kv-router-macros` at compile
//! time). Inside it, each module imports only from the ones listed before it:
//!
//! 1. [`rng`]: SplitMix64, the seedable random source (no imports).
//! 2. [`kv`]: KV events, block hashing and the index of which worker caches which block.
//! 3. [`plugins`]: the plugin API (policies, their contexts, parameters and commitments) and
//!    the [`PolicyRegistry`](plugins::PolicyRegistry) of every linked policy.
//! 4. [`wire`]: the hint envelope as it travels to the engine.
//! 5. [`config`]: the YAML configuration, its startup checks and their error snippets.
//! 6. [`metrics`]: the router's counters, the booking-latency histogram and their Prometheus
//!    text.
//! 7. [`router`]: registered workers and their load, and the booking pipeline.
//!
//! Two exceptions remain: the worker identities `WorkerId` and `Role` live in
//! [`router::worker`] and every layer from [`kv`] up uses them, and [`config`] builds the
//! [`router::setup`] types it hands to the router. The crates above this one (the catalog, the
//! replay, the CLI) use only its public API.

pub mod block_identity;
pub mod config;
pub mod kv;
pub mod metrics;
pub mod plugins;
pub mod rng;
pub mod router;
pub mod wire;

/// The `serde` this crate is built with. A plugin crate that depends on `dynamo-kv-router`
/// alone derives `Deserialize` for its parameters with
/// `#[serde(crate = "dynamo_kv_router::serde")]`.
pub use serde;
/// The `serde_json` this crate is built with: action payloads are `serde_json::Value`s, and
/// `dynamo_kv_router::serde_json::json!` builds them without a dependency of your own.
pub use serde_json;

#[doc(hidden)]
pub mod __private;
