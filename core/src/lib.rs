//! `dynamo-kv-router`: a KV-aware request router for LLM serving with a plugin system.
//!
//! Worker-selection policies choose which worker serves a request; hint policies attach
//! engine-directed KV actions (such as `kv.fetch`) to the booked worker. Plugin authors start
//! from [`plugins::prelude`]; linking a catalog crate registers its policies.

pub mod config;
pub mod kv;
pub mod metrics;
pub mod plugins;
pub mod router;
pub mod wire;

#[doc(hidden)]
pub mod __private;
