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
//! 1. [`rng`]: SplitMix64, the seedable random source, and [`clock`]: the time readings of
//!    what expires by the clock (predicted cache entries), monotonic or set by the caller (no
//!    imports).
//! 2. [`identity`] and [`block_identity`]: who caches (a worker and the role it serves) and
//!    what is cached (the block identities of the KV events).
//! 3. [`kv`]: KV events and where their blocks live, block hashing, and the index of which
//!    worker caches which block (its overlap pass gives each candidate's cached prefix and the
//!    engine ids it recorded, and says whose those ids are).
//! 4. [`plugins`]: the plugin API (policies, their contexts, parameters and commitments) and
//!    the [`PolicyRegistry`](plugins::PolicyRegistry) of every linked policy. It implements its
//!    block lookup for the index ([`plugins::BlockLookup`] for [`kv::KvIndex`]), so that `kv`
//!    needs nothing from above.
//! 5. [`wire`]: the hint envelope as it travels to the engine.
//! 6. [`setup`]: what a router runs per role (its mode and constructed policies), as
//!    configuration loading produces it.
//! 7. [`config`]: the YAML configuration, its startup checks and their error snippets.
//! 8. [`metrics`]: the router's counters, the booking-latency histogram and their Prometheus
//!    text.
//! 9. [`router`]: registered workers and their load, and the booking pipeline. It re-exports
//!    the identities and the setup types under their earlier paths ([`router::worker`],
//!    [`router::setup`]).
//!
//! The crates above this one (the catalog, the replay, the service, the CLI) use only its
//! public API.

pub mod block_identity;
pub mod clock;
pub mod config;
pub mod identity;
pub mod kv;
pub mod metrics;
pub mod plugins;
pub mod rng;
pub mod router;
pub mod setup;
pub mod wire;

/// The `schemars` this crate is built with. A plugin crate describes its parameters to
/// `kv-router schema` and `catalog describe` by deriving `JsonSchema` with
/// `#[schemars(crate = "dynamo_kv_router::schemars")]`.
pub use schemars;
/// The `serde` this crate is built with. A plugin crate that depends on `dynamo-kv-router`
/// alone derives `Deserialize` for its parameters with
/// `#[serde(crate = "dynamo_kv_router::serde")]`.
pub use serde;
/// The `serde_json` this crate is built with: action payloads are `serde_json::Value`s, and
/// `dynamo_kv_router::serde_json::json!` builds them without a dependency of your own.
pub use serde_json;

#[doc(hidden)]
pub mod __private;
