//! `router-build`: the `kv-router` command line with the built-in policies and two example
//! catalogs linked. Linking a catalog crate registers its policies; nothing else is needed.
//!
//! ```text
//! cargo run -p router-build -- catalog
//! cargo run -p router-build -- check examples/router-build/page.yaml
//! ```

use dynamo_router_catalog as _; // dynamo-default-cost-fn, kvcr, kv_fetch
use harness_prefetch as _; // harness_prefetch
use session_affinity as _; // session-affinity

fn main() -> std::process::ExitCode {
    kv_router::run()
}
