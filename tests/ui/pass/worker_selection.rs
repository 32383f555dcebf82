//! `#[worker_selection_policy]`: self parameters, a separate parameters type, and `commits`.

use dynamo_kv_router::plugins::prelude::*;

/// Picks the first candidate.
///
/// Useful in tests only.
#[worker_selection_policy("first_worker")]
#[derive(Deserialize)]
pub struct FirstWorker {}

impl WorkerSelectionPolicy for FirstWorker {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let first = context.candidates().first().ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(first.worker))
    }
}

#[derive(Deserialize)]
pub struct CopyingConfig {
    #[serde(default)]
    pub share: bool,
}

/// May commit the booked worker to a KV copy.
#[worker_selection_policy("copying", commits = KV_COPY, parameters = CopyingConfig)]
pub struct Copying {
    share: bool,
}

impl From<CopyingConfig> for Copying {
    fn from(config: CopyingConfig) -> Self {
        Self { share: config.share }
    }
}

impl WorkerSelectionPolicy for Copying {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let first = context.candidates().first().ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(first.worker))
    }

    fn commitments(&self) -> Commitments {
        if self.share { Commitments::KV_COPY } else { Commitments::NONE }
    }
}

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    let partition = Partition { role: Role::Decode, block_size: 16 };

    let first = registry.worker_selection_policy("first_worker").unwrap();
    assert_eq!(first.kind, dynamo_kv_router::plugins::PolicyKind::WorkerSelection);
    assert_eq!(first.summary, "Picks the first candidate.");
    assert_eq!(first.description, "Picks the first candidate.\n\nUseful in tests only.");
    assert!(first.construct_worker_selection(WorkerSelectionParameters::empty(), &partition).is_ok());
    assert!(registry.hint_policy("first_worker").is_err());

    let copying = registry.worker_selection_policy("copying").unwrap();
    assert_eq!(copying.commitments, Commitments::KV_COPY);
    let on = WorkerSelectionParameters::new(serde_json::json!({ "share": true }));
    let built = copying.construct_worker_selection(on, &partition).unwrap();
    assert_eq!(built.commitments, Commitments::KV_COPY);
    let off = copying.construct_worker_selection(WorkerSelectionParameters::empty(), &partition).unwrap();
    assert_eq!(off.commitments, Commitments::NONE);
}
