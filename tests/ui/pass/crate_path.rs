//! `crate = path` names the runtime crate through another path (here a re-export).

mod framework {
    pub use dynamo_kv_router as router;
}

use framework::router::plugins::prelude::*;

#[hint_policy("through_reexport", crate = framework::router)]
#[derive(Deserialize)]
pub struct ThroughReexport {}

impl HintPolicy for ThroughReexport {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

#[worker_selection_policy("absolute_path", crate = ::dynamo_kv_router)]
#[derive(Deserialize)]
pub struct AbsolutePath {}

impl WorkerSelectionPolicy for AbsolutePath {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let first = context.candidates().first().ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(first.worker))
    }
}

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    assert!(registry.hint_policy("through_reexport").is_ok());
    assert!(registry.worker_selection_policy("absolute_path").is_ok());
}
