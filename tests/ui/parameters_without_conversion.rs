use dynamo_kv_router::plugins::prelude::*;

#[derive(Deserialize)]
pub struct PrefetchConfig {
    pub max_blocks: usize,
}

#[hint_policy("my_prefetch", parameters = PrefetchConfig)]
pub struct Prefetch {
    pub config: PrefetchConfig,
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {}
