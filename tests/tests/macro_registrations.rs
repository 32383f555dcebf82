//! What `#[hint_policy]` and `#[worker_selection_policy]` register, as the registry and its
//! listings see it.

use dynamo_kv_router::plugins::PolicyKind;
use dynamo_kv_router::plugins::prelude::*;
use renamed_dependency_fixture as _;

/// Prefetches the next blocks
/// of the session.
///
/// Sends `kv.prefetch` for at most `max_blocks` blocks.
#[hint_policy("documented", defaults = [kvcr], commits = KV_COPY)]
#[derive(Deserialize)]
pub struct Documented {
    pub max_blocks: usize,
    #[serde(default)]
    pub depth: Depth,
}

/// A nested parameter, to show nested field paths.
#[derive(Default, Deserialize)]
pub struct Depth {
    #[serde(default)]
    pub levels: u32,
}

impl HintPolicy for Documented {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

const PARTITION: Partition = Partition {
    role: Role::Decode,
    block_size: 16,
};

fn registry() -> PolicyRegistry {
    PolicyRegistry::linked().expect("the linked registrations are valid")
}

#[test]
fn the_doc_comment_becomes_description_and_summary() {
    let registry = registry();
    let entry = registry.hint_policy("documented").unwrap();
    assert_eq!(
        entry.description,
        "Prefetches the next blocks\nof the session.\n\nSends `kv.prefetch` for at most `max_blocks` blocks."
    );
    assert_eq!(entry.summary, "Prefetches the next blocks of the session.");
}

#[test]
fn the_registration_records_what_listings_show() {
    let registry = registry();
    let entry = registry.hint_policy("documented").unwrap();
    assert_eq!(entry.kind, PolicyKind::Hint);
    assert_eq!(entry.defaults, [HintHost::worker_selection("kvcr")]);
    assert_eq!(entry.commitments, Commitments::KV_COPY);
    assert_eq!(entry.type_name.as_deref(), Some("Documented"));
    assert_eq!(entry.parameters_type.as_deref(), Some("Documented"));
    assert_eq!(
        entry.location.crate_name.as_deref(),
        Some("dynamo-kv-router-tests")
    );
    assert_eq!(entry.location.file, "tests/tests/macro_registrations.rs");
    let attribute_line = include_str!("macro_registrations.rs")
        .lines()
        .position(|line| line.starts_with("#[hint_policy(\"documented\""))
        .map(|index| index + 1);
    assert_eq!(Some(entry.location.line as usize), attribute_line);
    assert!(
        registry
            .default_hint_policies("kvcr")
            .any(|e| e.name == "documented")
    );
}

#[test]
fn unknown_parameter_fields_are_rejected_with_their_path() {
    let registry = registry();
    let entry = registry.hint_policy("documented").unwrap();
    let typo = HintPolicyParameters::new(serde_json::json!({ "max_blocks": 4, "max_block": 4 }));
    let error = entry.construct_hint(typo, &PARTITION).err().unwrap();
    assert_eq!(
        error.to_string(),
        "max_block: unknown field `max_block`; remove it or correct its spelling"
    );
    let nested =
        HintPolicyParameters::new(serde_json::json!({ "max_blocks": 4, "depth": { "level": 1 } }));
    let error = entry.construct_hint(nested, &PARTITION).err().unwrap();
    assert_eq!(
        error.to_string(),
        "depth.level: unknown field `level`; remove it or correct its spelling"
    );
    let wrong = HintPolicyParameters::new(serde_json::json!({ "max_blocks": "x" }));
    let error = entry.construct_hint(wrong, &PARTITION).err().unwrap();
    assert_eq!(
        error.to_string(),
        "max_blocks: invalid type: string \"x\", expected usize"
    );
    let good = HintPolicyParameters::new(serde_json::json!({ "max_blocks": 4 }));
    let built = entry.construct_hint(good, &PARTITION).unwrap();
    assert_eq!(built.commitments, Commitments::KV_COPY);
}

#[test]
fn a_catalog_with_a_renamed_dependency_registers_through_crate_path() {
    let registry = registry();
    let hint = registry.hint_policy("renamed_dependency_hint").unwrap();
    assert_eq!(hint.defaults, [HintHost::AnyWorkerSelection]);
    assert_eq!(
        hint.location.crate_name.as_deref(),
        Some("renamed-dependency-fixture")
    );
    let selection = registry
        .worker_selection_policy("renamed_dependency_selection")
        .unwrap();
    assert!(
        selection
            .construct_worker_selection(WorkerSelectionParameters::empty(), &PARTITION)
            .is_ok()
    );
}
