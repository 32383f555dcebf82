//! The attribute macros record a parameters schema exactly when the parameters type derives
//! `JsonSchema`; a type that does not still compiles and is "not described".

use dynamo_kv_router::plugins::PolicyKind;
use dynamo_kv_router::plugins::prelude::*;

/// The parameters of `described_via`.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct DescribedConfig {
    /// Blocks to warm.
    #[serde(default = "three")]
    #[schemars(range(min = 1, max = 8))]
    pub blocks: usize,
}

fn three() -> usize {
    3
}

/// Warms blocks.
#[hint_policy("described_via", parameters = DescribedConfig)]
pub struct DescribedVia;

impl From<DescribedConfig> for DescribedVia {
    fn from(_: DescribedConfig) -> Self {
        Self
    }
}

impl HintPolicy for DescribedVia {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

/// Its own parameters, described.
#[worker_selection_policy("described_self")]
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "dynamo_kv_router::schemars")]
pub struct DescribedSelf {
    /// A weight.
    pub weight: f64,
}

impl WorkerSelectionPolicy for DescribedSelf {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        context
            .candidates()
            .first()
            .map(|candidate| Selection::worker(candidate.worker))
            .ok_or_else(|| PolicyError::new("no candidates"))
    }
}

/// Its own parameters, not described (no `JsonSchema`).
#[hint_policy("undescribed_self")]
#[derive(Deserialize)]
pub struct UndescribedSelf {
    pub depth: u32,
}

impl HintPolicy for UndescribedSelf {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn registry() -> PolicyRegistry {
    PolicyRegistry::linked().expect("the linked registrations are valid")
}

#[test]
fn a_parameters_type_deriving_json_schema_is_described() {
    let registry = registry();
    let schema = registry
        .describe_parameters(PolicyKind::Hint, "described_via")
        .expect("described")
        .to_value();
    let blocks = &schema["properties"]["blocks"];
    assert_eq!(blocks["minimum"], 1, "{schema}");
    assert_eq!(blocks["maximum"], 8, "{schema}");
    assert_eq!(blocks["default"], 3, "{schema}");
    assert_eq!(blocks["description"], "Blocks to warm.", "{schema}");
    assert_eq!(schema["additionalProperties"], false, "{schema}");

    let schema = registry
        .describe_parameters(PolicyKind::WorkerSelection, "described_self")
        .expect("described")
        .to_value();
    assert_eq!(
        schema["required"],
        serde_json::json!(["weight"]),
        "{schema}"
    );
}

#[test]
fn a_parameters_type_without_json_schema_is_not_described() {
    assert!(
        registry()
            .describe_parameters(PolicyKind::Hint, "undescribed_self")
            .is_none()
    );
}
