//! The struct is its own parameters type.

use dynamo_kv_router::plugins::prelude::*;

/// Prefetches blocks.
#[hint_policy("self_parameters")]
#[derive(Deserialize)]
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
    let entry = registry.hint_policy("self_parameters").unwrap();
    assert_eq!(entry.summary, "Prefetches blocks.");
    assert_eq!(entry.type_name.as_deref(), Some("Prefetch"));
    assert_eq!(entry.parameters_type.as_deref(), Some("Prefetch"));
    assert!(entry.defaults.is_empty());
    assert_eq!(entry.commitments, Commitments::NONE);
    let partition = Partition { role: Role::Decode, block_size: 16 };
    let parameters = HintPolicyParameters::new(serde_json::json!({ "max_blocks": 4 }));
    assert!(entry.construct_hint(parameters, &partition).is_ok());
}
