//! An example catalog crate: the `harness_prefetch` hint policy of "Write a KV Hint Plugin".
//!
//! Linking this crate registers `harness_prefetch` (through `#[hint_policy]`); a router build
//! names it once, for example with `use harness_prefetch as _;`. [`register`] shows the manual
//! alternative: the page's `register_hint_policy` call, here under the name
//! `harness_prefetch_manual` so that both forms can live in one binary.

use dynamo_kv_router::plugins::prelude::*;

/// The action type this policy sends.
pub const PREFETCH_ACTION: &str = "kv.prefetch";

/// The version of the `kv.prefetch` payload format.
pub const PREFETCH_ACTION_VERSION: &str = "1.0";

/// The parameters of `harness_prefetch`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "dynamo_kv_router::serde")]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct PrefetchConfig {
    /// The most blocks one hint asks the worker to prefetch.
    #[serde(default = "default_max_blocks")]
    pub max_blocks: usize,
}

fn default_max_blocks() -> usize {
    64
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        Self {
            max_blocks: default_max_blocks(),
        }
    }
}

/// Asks the booked worker to prefetch the session's context it does not hold yet.
///
/// For a request that belongs to a session, it sends one `kv.prefetch` action naming the
/// session and up to `max_blocks` of the request's blocks past the worker's cached prefix.
/// Requests outside a session, or whose blocks the worker already holds, get no action.
#[hint_policy("harness_prefetch", parameters = PrefetchConfig)]
#[derive(Clone, Debug)]
pub struct HarnessPrefetch {
    config: PrefetchConfig,
}

impl HarnessPrefetch {
    /// A policy with `config`.
    pub fn new(config: PrefetchConfig) -> Self {
        Self { config }
    }

    /// Its parameters.
    pub fn config(&self) -> &PrefetchConfig {
        &self.config
    }
}

impl From<PrefetchConfig> for HarnessPrefetch {
    fn from(config: PrefetchConfig) -> Self {
        Self::new(config)
    }
}

impl HintPolicy for HarnessPrefetch {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        let Some(session_id) = context.session().session_id.as_deref() else {
            return Ok(Vec::new());
        };
        let hashes = context.sequence_hashes();
        let first_block = context.booked_cached_blocks().min(hashes.len());
        let end = first_block
            .saturating_add(self.config.max_blocks)
            .min(hashes.len());
        let Some(blocks) = hashes
            .get(first_block..end)
            .filter(|blocks| !blocks.is_empty())
        else {
            return Ok(Vec::new());
        };
        Ok(vec![HintAction::new(
            PREFETCH_ACTION,
            PREFETCH_ACTION_VERSION,
            dynamo_kv_router::serde_json::json!({
                "session_id": session_id,
                "first_block": first_block,
                "block_hashes": blocks,
            }),
        )])
    }
}

/// Registers the same policy by hand, with the page's snippet, as `harness_prefetch_manual`.
pub fn register(registry: &mut PolicyRegistry) -> Result<(), RegistryError> {
    registry.register_hint_policy(
        "harness_prefetch_manual",
        Arc::new(|parameters| {
            let config: PrefetchConfig = parameters.deserialize()?;
            Ok(HintPolicyConstructor::shared(HarnessPrefetch::new(config)))
        }),
        [],
    )?;
    Ok(())
}
