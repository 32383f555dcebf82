use dynamo_kv_router::plugins::prelude::*;

#[hint_policy("my_prefetch")]
#[derive(Deserialize)]
pub struct Prefetch {
    pub max_blocks: usize,
}

fn main() {}
