//! The Rust snippet of "Write a KV Hint Plugin", verbatim, inside a function that returns the
//! registry's error type.

use dynamo_kv_router::plugins::prelude::*;

#[derive(Deserialize)]
struct PrefetchConfig {
    max_blocks: usize,
}

struct HarnessPrefetch {
    config: PrefetchConfig,
}

impl HarnessPrefetch {
    fn new(config: PrefetchConfig) -> Self {
        Self { config }
    }
}

impl HintPolicy for HarnessPrefetch {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        let blocks = context.sequence_hashes().len().min(self.config.max_blocks);
        Ok(vec![HintAction::new(
            "kv.prefetch",
            "1.0",
            serde_json::json!({ "blocks": blocks }),
        )])
    }
}

fn register(registry: &mut PolicyRegistry) -> Result<(), RegistryError> {
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

fn register_with_defaults(registry: &mut PolicyRegistry) -> Result<(), RegistryError> {
    registry.register_hint_policy(
        "prefetch_under_mine",
        Arc::new(|parameters| {
            let config: PrefetchConfig = parameters.deserialize()?;
            Ok(HintPolicyConstructor::shared(HarnessPrefetch::new(config)))
        }),
        [HintHost::worker_selection("my_policy")],
    )?;
    registry.register_hint_policy(
        "prefetch_everywhere",
        Arc::new(|parameters| {
            let config: PrefetchConfig = parameters.deserialize()?;
            Ok(HintPolicyConstructor::shared(HarnessPrefetch::new(config)))
        }),
        [HintHost::AnyWorkerSelection],
    )?;
    Ok(())
}

#[test]
fn the_page_snippet_registers_and_builds_the_policy() {
    let mut registry = PolicyRegistry::new();
    register(&mut registry).unwrap();
    let entry = registry.hint_policy("harness_prefetch").unwrap();
    assert!(entry.defaults.is_empty());
    let partition = Partition {
        role: Role::Decode,
        block_size: 16,
    };
    let parameters = HintPolicyParameters::new(serde_json::json!({ "max_blocks": 64 }));
    let built = entry.construct_hint(parameters, &partition).unwrap();
    assert_eq!(built.commitments, Commitments::NONE);

    let bad = HintPolicyParameters::new(serde_json::json!({ "max_blocks": "x" }));
    let error = entry.construct_hint(bad, &partition).err().unwrap();
    assert_eq!(
        error.to_string(),
        "max_blocks: invalid type: string \"x\", expected usize"
    );
}

#[test]
fn the_defaults_argument_accepts_each_documented_form() {
    let mut registry = PolicyRegistry::new();
    register_with_defaults(&mut registry).unwrap();
    let mine: Vec<_> = registry
        .default_hint_policies("my_policy")
        .map(|entry| entry.name.as_str())
        .collect();
    assert_eq!(mine, ["prefetch_everywhere", "prefetch_under_mine"]);
    let other: Vec<_> = registry
        .default_hint_policies("kvcr")
        .map(|entry| entry.name.as_str())
        .collect();
    assert_eq!(other, ["prefetch_everywhere"]);
}
