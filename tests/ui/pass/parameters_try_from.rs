//! A separate (generic) parameters type, converted with `TryFrom`; its error rejects parameters.

use dynamo_kv_router::plugins::prelude::*;
use std::collections::BTreeMap;

#[derive(Deserialize)]
pub struct Limits<T> {
    pub per_session: BTreeMap<String, T>,
}

#[hint_policy("parameters_try_from", parameters = Limits<usize>)]
pub struct Prefetch {
    pub per_session: BTreeMap<String, usize>,
}

impl TryFrom<Limits<usize>> for Prefetch {
    type Error = String;

    fn try_from(limits: Limits<usize>) -> Result<Self, String> {
        if limits.per_session.values().any(|limit| *limit == 0) {
            return Err("every limit must be at least 1".to_owned());
        }
        Ok(Self { per_session: limits.per_session })
    }
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    let entry = registry.hint_policy("parameters_try_from").unwrap();
    assert_eq!(entry.parameters_type.as_deref(), Some("Limits<usize>"));
    let partition = Partition { role: Role::Decode, block_size: 16 };
    let good = HintPolicyParameters::new(serde_json::json!({ "per_session": { "a": 2 } }));
    assert!(entry.construct_hint(good, &partition).is_ok());
    let bad = HintPolicyParameters::new(serde_json::json!({ "per_session": { "a": 0 } }));
    let error = entry.construct_hint(bad, &partition).err().unwrap();
    assert_eq!(error.to_string(), "every limit must be at least 1");
}
