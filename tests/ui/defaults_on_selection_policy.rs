use dynamo_kv_router::plugins::prelude::*;

#[worker_selection_policy("first_worker", defaults = [kvcr])]
#[derive(Deserialize)]
pub struct FirstWorker {}

impl WorkerSelectionPolicy for FirstWorker {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let first = context.candidates().first().ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(first.worker))
    }
}

fn main() {}
