//! `dynamo-kv-router`: a KV-aware request router for LLM serving with a plugin system.
//!
//! Worker-selection policies choose which worker serves a request; hint policies attach
//! engine-directed KV actions (such as `kv.fetch`) to the booked worker. Plugin authors start
//! from [`plugins::prelude`]; linking a catalog crate registers its policies.

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
