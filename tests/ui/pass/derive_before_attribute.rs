//! `#[derive(Deserialize)]` may come before the attribute.

use dynamo_kv_router::plugins::prelude::*;

#[derive(Deserialize)]
#[hint_policy("derive_first")]
pub struct Prefetch {
    pub max_blocks: usize,
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    assert!(registry.hint_policy("derive_first").is_ok());
}
