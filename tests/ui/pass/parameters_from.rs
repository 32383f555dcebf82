//! A separate parameters type, converted with `From`.

use dynamo_kv_router::plugins::prelude::*;

#[derive(Deserialize)]
pub struct PrefetchConfig {
    pub max_blocks: usize,
}

#[hint_policy("parameters_from", parameters = PrefetchConfig)]
pub struct Prefetch {
    pub max_blocks: usize,
}

impl From<PrefetchConfig> for Prefetch {
    fn from(config: PrefetchConfig) -> Self {
        Self { max_blocks: config.max_blocks }
    }
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    let entry = registry.hint_policy("parameters_from").unwrap();
    assert_eq!(entry.parameters_type.as_deref(), Some("PrefetchConfig"));
    assert_eq!(entry.summary, "");
    let partition = Partition { role: Role::Decode, block_size: 16 };
    let parameters = HintPolicyParameters::new(serde_json::json!({ "max_blocks": 4 }));
    assert!(entry.construct_hint(parameters, &partition).is_ok());
}
