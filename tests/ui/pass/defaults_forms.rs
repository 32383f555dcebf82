//! Every form `defaults` accepts.

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

#[hint_policy("under_kvcr", defaults = [kvcr])]
#[derive(Deserialize)]
pub struct UnderKvcr {}
noop_hint!(UnderKvcr);

#[hint_policy("under_named", defaults = ["dynamo-default-cost-fn", my_policy,])]
#[derive(Deserialize)]
pub struct UnderNamed {}
noop_hint!(UnderNamed);

#[hint_policy("under_any", defaults = [any])]
#[derive(Deserialize)]
pub struct UnderAny {}
noop_hint!(UnderAny);

#[hint_policy("listed_only", defaults = [])]
#[derive(Deserialize)]
pub struct ListedOnly {}
noop_hint!(ListedOnly);

fn names<'a>(registry: &'a PolicyRegistry, selection: &'a str) -> Vec<&'a str> {
    registry.default_hint_policies(selection).map(|entry| entry.name.as_str()).collect()
}

fn main() {
    let registry = PolicyRegistry::linked().unwrap();
    assert_eq!(names(&registry, "kvcr"), ["under_any", "under_kvcr"]);
    assert_eq!(names(&registry, "dynamo-default-cost-fn"), ["under_any", "under_named"]);
    assert_eq!(names(&registry, "my_policy"), ["under_any", "under_named"]);
    assert_eq!(names(&registry, "other"), ["under_any"]);
    let named = registry.hint_policy("under_named").unwrap();
    assert_eq!(
        named.defaults,
        [HintHost::worker_selection("dynamo-default-cost-fn"), HintHost::worker_selection("my_policy")]
    );
    assert_eq!(registry.hint_policy("under_any").unwrap().defaults, [HintHost::AnyWorkerSelection]);
    assert!(registry.hint_policy("listed_only").unwrap().defaults.is_empty());
}
