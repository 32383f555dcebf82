//! Policy names: what is valid, what is reserved, and which linked name a typo meant.
//!
//! The rules live in `dynamo-kv-router-names`, which the attribute macros check names with at
//! compile time; this module is their home in the router's API.

pub use dynamo_kv_router_names::{
    NameProblem, RESERVED_NAMES, check_policy_name, check_syntax, closest,
};
