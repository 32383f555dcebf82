use dynamo_kv_router::plugins::prelude::*;

#[hint_policy("my_prefetch")]
pub fn prefetch(_: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
    Ok(Vec::new())
}

fn main() {}
