use dynamo_kv_router::plugins::prelude::*;

#[hint_policy("my prefetch", comits = KV_COPY, defaults = kvcr)]
#[derive(Deserialize)]
pub struct Prefetch {
    pub max_blocks: usize,
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {}
