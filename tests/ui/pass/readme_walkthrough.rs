//! The README's "Write a hint policy" code, compiled and run.

// my_catalog/src/lib.rs
use dynamo_kv_router::plugins::prelude::*;

/// The parameters, as written under `parameters:` in the configuration.
#[derive(Deserialize)]
pub struct PrefetchConfig {
    pub max_blocks: usize,
}

/// Asks the booked worker to prefetch the session's context it does not hold yet.
///
/// The first paragraph of this comment is the summary that policy listings show.
#[hint_policy("harness_prefetch", parameters = PrefetchConfig)]
pub struct HarnessPrefetch {
    config: PrefetchConfig,
}

impl HarnessPrefetch {
    pub fn new(config: PrefetchConfig) -> Self {
        Self { config }
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
            return Ok(Vec::new()); // not part of a session: nothing to do
        };
        let hashes = context.sequence_hashes();
        let first = context.booked_cached_blocks().min(hashes.len());
        let end = (first + self.config.max_blocks).min(hashes.len());
        if first == end {
            return Ok(Vec::new());
        }
        Ok(vec![HintAction::new(
            "kv.prefetch",
            "1.0",
            serde_json::json!({ "session_id": session_id, "block_hashes": &hashes[first..end] }),
        )])
    }
}

mod manual {
    use super::*;

    pub fn register(registry: &mut PolicyRegistry) -> Result<(), RegistryError> {
        registry.register_hint_policy(
            "harness_prefetch",
            Arc::new(|parameters| {
                let config: PrefetchConfig = parameters.deserialize()?;
                Ok(HintPolicyConstructor::shared(HarnessPrefetch::new(config)))
            }),
            [],
        )?;
        Ok(())
    }
}

fn main() {
    let mut registry = PolicyRegistry::new();
    manual::register(&mut registry).unwrap();
    let linked = PolicyRegistry::linked().unwrap();
    let entry = linked.hint_policy("harness_prefetch").unwrap();
    assert_eq!(
        entry.summary,
        "Asks the booked worker to prefetch the session's context it does not hold yet."
    );
    assert!(registry.hint_policy("harness_prefetch").is_ok());
}
