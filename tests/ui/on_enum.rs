use dynamo_kv_router::plugins::prelude::*;

#[hint_policy("my_prefetch")]
#[derive(Deserialize)]
pub enum Prefetch {
    Off,
    On { max_blocks: usize },
}

impl HintPolicy for Prefetch {
    fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {}
