//! `commits` names `Commitments` constants, alone or joined with `|`.

use dynamo_kv_router::plugins::prelude::*;

macro_rules! noop_hint {
    ($name:ident) => {
        impl HintPolicy for $name {
            fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
                Ok(Vec::new())
            }
        }
    };
}

#[hint_policy("sends_copies", commits = KV_COPY, defaults = [kvcr])]
#[derive(Deserialize)]
pub struct SendsCopies {}
noop_hint!(SendsCopies);

#[hint_policy("joined", commits = NONE | KV_COPY)]
#[derive(Deserialize)]
pub struct Joined {}
noop_hint!(Joined);

#[hint_policy("sends_nothing", commits = NONE)]
#[derive(Deserialize)]
pub struct SendsNothing {}
noop_hint!(SendsNothing);

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    let partition = Partition { role: Role::Decode, block_size: 16 };
    for (name, expected) in [
        ("sends_copies", Commitments::KV_COPY),
        ("joined", Commitments::KV_COPY),
        ("sends_nothing", Commitments::NONE),
    ] {
        let entry = registry.hint_policy(name).unwrap();
        assert_eq!(entry.commitments, expected, "{name}");
        let built = entry.construct_hint(HintPolicyParameters::empty(), &partition).unwrap();
        assert_eq!(built.commitments, expected, "{name}");
    }
}
