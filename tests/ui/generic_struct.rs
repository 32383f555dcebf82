use dynamo_kv_router::plugins::prelude::*;

#[hint_policy("my_prefetch")]
#[derive(Deserialize)]
pub struct Prefetch<T> {
    pub max_blocks: T,
}

impl<T: Send + Sync> HintPolicy for Prefetch<T> {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {}
