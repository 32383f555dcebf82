use dynamo_kv_router::plugins::prelude::*;

pub struct PrefetchConfig {
    pub max_blocks: usize,
}

#[hint_policy("my_prefetch", parameters = PrefetchConfig)]
pub struct Prefetch {
    pub config: PrefetchConfig,
}

impl From<PrefetchConfig> for Prefetch {
    fn from(config: PrefetchConfig) -> Self {
        Self { config }
    }
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {}
