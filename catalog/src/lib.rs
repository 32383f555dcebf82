//! The built-in `dynamo-kv-router` policies. Linking this crate registers them:
//!
//! | Type | Kind | Commits |
//! |---|---|---|
//! | `dynamo-default-cost-fn` | worker selection | nothing |
//! | `kvcr` | worker selection | KV copies when `shared_cache_multiplier > 0` |
//! | `kv_fetch` | hint (default under `kvcr`) | sends KV copies |
//!
//! A router build that names no item of this crate must still link it:
//!
//! ```
//! use dynamo_router_catalog as _;
//! ```

pub mod cost;
mod cost_buffer;
pub mod default_cost;
pub mod fetch_source;
pub mod invalid_parameter;
pub mod kv_fetch;
pub mod kvcr;
pub mod picker;

#[cfg(test)]
mod test_support;

pub use default_cost::{DefaultCostConfig, DefaultCostFn};
pub use invalid_parameter::InvalidParameter;
pub use kv_fetch::{KvFetch, KvFetchConfig, kv_fetch_action};
pub use kvcr::{Kvcr, KvcrConfig};
