//! Property tests: random and mutated configuration documents never panic the loader, and a
//! configuration that loads never violates a rule.

mod config_fixtures;

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::name;
use dynamo_kv_router::plugins::prelude::*;
use dynamo_kv_router::router::{HintOrigin, RouterMode, RouterSetup};
use proptest::prelude::*;
use std::collections::HashSet;

const SELECTION_TYPES: &[&str] = &[
    "dynamo-default-cost-fn",
    "dynamo-default-cost-fn",
    "kvcr",
    "kvcr",
    "kvcr",
    "picky",
    "kv_fetch",
    "kvrc",
];
const HINT_TYPES: &[&str] = &[
    "kv_fetch",
    "kv_fetch",
    "audit_log",
    "audit_log",
    "audit_log",
    "harness_prefetch",
    "copy_too",
    "strict_default",
    "kvcr",
    "kv_fecth",
];
const PARAMETERS: &[&str] = &[
    "",
    "",
    "",
    "",
    "",
    "{}",
    "{shared_cache_multiplier: 0.5}",
    "{shared_cache_multiplier: 0}",
    "{shared_cache_multiplier: 7}",
    "{min_additional_blocks: 4}",
    "{max_blocks: 64}",
    "{max_blocks: x}",
    "{level: 3}",
    "{unknown: 1}",
    "[1, 2]",
    "7",
    "null",
];
const NAMES: &[Option<&str>] = &[
    None,
    None,
    None,
    None,
    None,
    Some("a"),
    Some("b"),
    Some("a b"),
    Some("''"),
    Some("kv_fetch"),
];
const MODES: &[Option<&str>] = &[
    None,
    None,
    None,
    Some("kv"),
    Some("kv"),
    Some("round-robin"),
    Some("random"),
    Some("least-loaded"),
    Some("fast"),
];
const BLOCK_SIZES: &[Option<&str>] = &[
    None,
    None,
    None,
    Some("16"),
    Some("16"),
    Some("1"),
    Some("0"),
    Some("-3"),
    Some("x"),
];

#[derive(Clone, Debug)]
struct HintModel {
    policy_type: &'static str,
    name: Option<&'static str>,
    parameters: &'static str,
}

#[derive(Clone, Debug)]
struct RoleModel {
    key: &'static str,
    selection: &'static str,
    bare: bool,
    parameters: &'static str,
    hints: Option<Vec<HintModel>>,
}

#[derive(Clone, Debug)]
struct DocumentModel {
    mode: Option<&'static str>,
    block_size: Option<&'static str>,
    roles: Vec<RoleModel>,
}

impl DocumentModel {
    fn yaml(&self) -> String {
        let mut out = String::new();
        if let Some(mode) = self.mode {
            out.push_str(&format!("router_mode: {mode}\n"));
        }
        if let Some(size) = self.block_size {
            out.push_str(&format!("block_size: {size}\n"));
        }
        if self.roles.is_empty() {
            return out;
        }
        out.push_str("worker_selection:\n");
        for role in &self.roles {
            if role.bare {
                out.push_str(&format!("  {}: {}\n", role.key, role.selection));
                continue;
            }
            out.push_str(&format!("  {}:\n    type: {}\n", role.key, role.selection));
            if !role.parameters.is_empty() {
                out.push_str(&format!("    parameters: {}\n", role.parameters));
            }
            match &role.hints {
                None => {}
                Some(hints) if hints.is_empty() => out.push_str("    hints: []\n"),
                Some(hints) => {
                    out.push_str("    hints:\n");
                    for hint in hints {
                        out.push_str(&format!("      - type: {}\n", hint.policy_type));
                        if let Some(name) = hint.name {
                            out.push_str(&format!("        name: {name}\n"));
                        }
                        if !hint.parameters.is_empty() {
                            out.push_str(&format!("        parameters: {}\n", hint.parameters));
                        }
                    }
                }
            }
        }
        out
    }
}

fn hint_model() -> impl Strategy<Value = HintModel> {
    (
        proptest::sample::select(HINT_TYPES),
        proptest::sample::select(NAMES),
        proptest::sample::select(PARAMETERS),
    )
        .prop_map(|(policy_type, name, parameters)| HintModel {
            policy_type,
            name,
            parameters,
        })
}

fn role_model(key: &'static str) -> impl Strategy<Value = RoleModel> {
    (
        proptest::sample::select(SELECTION_TYPES),
        proptest::bool::weighted(0.2),
        proptest::sample::select(PARAMETERS),
        proptest::option::weighted(0.7, proptest::collection::vec(hint_model(), 0..3)),
    )
        .prop_map(move |(selection, bare, parameters, hints)| RoleModel {
            key,
            selection,
            bare,
            parameters,
            hints,
        })
}

fn document_model() -> impl Strategy<Value = DocumentModel> {
    (
        proptest::sample::select(MODES),
        proptest::sample::select(BLOCK_SIZES),
        proptest::option::of(role_model("aggregated")),
        proptest::option::of(role_model("prefill")),
        proptest::option::of(role_model("decode")),
        Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
    )
        .prop_map(|(mode, block_size, aggregated, prefill, decode, order)| {
            let mut roles: Vec<RoleModel> = [aggregated, prefill, decode]
                .into_iter()
                .flatten()
                .collect();
            if order % 2 == 1 {
                roles.reverse();
            }
            DocumentModel {
                mode,
                block_size,
                roles,
            }
        })
}

/// The rules a loaded setup must satisfy whatever document it came from.
fn assert_setup_keeps_the_rules(setup: &RouterSetup, registry: &PolicyRegistry) {
    assert!(setup.block_size > 0);
    if setup.router_mode == RouterMode::Kv {
        assert!(!setup.roles.is_empty());
    }
    for (role, policies) in &setup.roles {
        assert!(
            registry
                .worker_selection_policy(&policies.selection_type)
                .is_ok()
        );
        if setup.router_mode != RouterMode::Kv {
            assert!(policies.hints.is_empty(), "{role}: hints outside KV mode");
        }
        let mut labels = HashSet::new();
        for hint in &policies.hints {
            assert!(registry.hint_policy(&hint.policy_type).is_ok());
            assert!(
                labels.insert(hint.label().to_owned()),
                "{role}: duplicate label"
            );
            if let Some(name) = &hint.name {
                assert!(
                    name::check_syntax(name).is_ok(),
                    "{role}: bad name {name:?}"
                );
            }
            let repeats = policies
                .hints
                .iter()
                .filter(|other| other.policy_type == hint.policy_type)
                .count();
            if repeats > 1 {
                assert!(hint.name.is_some(), "{role}: repeated type without a name");
            }
        }
        let defaults = policies
            .hints
            .iter()
            .filter(|hint| hint.origin == HintOrigin::Default);
        if defaults.clone().count() > 0 {
            assert_eq!(
                defaults.clone().count(),
                policies.hints.len(),
                "{role}: mixed origins"
            );
            let expected: Vec<&str> = registry
                .default_hint_policies(&policies.selection_type)
                .map(|entry| entry.name.as_str())
                .collect();
            let actual: Vec<&str> = defaults.map(|hint| hint.policy_type.as_str()).collect();
            assert_eq!(actual, expected, "{role}: defaults not in name order");
        }
        if setup.router_mode == RouterMode::Kv
            && policies
                .selection
                .commitments
                .contains(Commitments::KV_COPY)
        {
            let senders = policies
                .hints
                .iter()
                .filter(|hint| hint.policy.commitments.contains(Commitments::KV_COPY))
                .count();
            assert_eq!(senders, 1, "{role}: KV copies need exactly one sender");
        }
    }
}

fn load_any(yaml: &str, registry: &PolicyRegistry) -> Option<RouterSetup> {
    let source = ConfigSource::new("fuzz.yaml", yaml);
    match config::load(&source, registry, &ConfigOverrides::default()) {
        Ok(setup) => Some(setup),
        Err(error) => {
            // Rendering must not panic either, and must name the file.
            let rendered = error.render(yaml);
            assert!(rendered.contains("fuzz.yaml"), "{rendered}");
            None
        }
    }
}

const SEEDS: &[&str] = &[
    "worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints:\n      - type: harness_prefetch\n        parameters:\n          max_blocks: 64\n  prefill:\n    type: dynamo-default-cost-fn\n    hints: []\n",
    "router_mode: kv\nblock_size: 16\nworker_selection:\n  decode:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 0.5}\n    hints:\n      - type: kv_fetch\n        parameters: {min_additional_blocks: 4}\n      - type: harness_prefetch\n        name: prefetch-a\n        parameters: {max_blocks: 64}\n  prefill: dynamo-default-cost-fn\n",
    "worker_selection:\n  decode: &e {type: kvcr, hints: [{type: kv_fetch, name: f}]}\n  prefill: *e\n",
];

#[derive(Clone, Debug)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, text: String },
    DuplicateLine { line: usize },
    SwapLines { a: usize, b: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let fragment = proptest::sample::select(vec![
        " ",
        "\n",
        ":",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&a ",
        "*a",
        "'",
        "\"",
        "#",
        "\t",
        "~",
        "hints: []",
        "name: x",
        "type: kvcr",
        "parameters: {}",
        "kv_fetch",
        "  ",
        "0",
        "-1",
        "é",
        "router_mode: round-robin\n",
        "!!str ",
        "<<: *a",
        "---\n",
        "\u{0}",
    ]);
    prop_oneof![
        (any::<usize>(), 1..8usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), proptest::collection::vec(fragment, 1..3)).prop_map(|(at, parts)| {
            Mutation::Insert {
                at,
                text: parts.concat(),
            }
        }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines { a, b }),
    ]
}

fn apply(text: &str, mutation: &Mutation) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    match mutation {
        Mutation::Delete { at, len } => {
            let at = at % (chars.len() + 1);
            let end = (at + len).min(chars.len());
            chars[..at].iter().chain(&chars[end..]).collect()
        }
        Mutation::Insert { at, text } => {
            let at = at % (chars.len() + 1);
            let mut out: String = chars[..at].iter().collect();
            out.push_str(text);
            out.extend(&chars[at..]);
            out
        }
        Mutation::DuplicateLine { line } if !lines.is_empty() => {
            let line = line % lines.len();
            lines.insert(line, lines[line]);
            lines.concat()
        }
        Mutation::SwapLines { a, b } if !lines.is_empty() => {
            let (a, b) = (a % lines.len(), b % lines.len());
            lines.swap(a, b);
            lines.concat()
        }
        _ => text.to_owned(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn random_documents_never_panic_and_loaded_ones_keep_the_rules(model in document_model()) {
        let registry = config_fixtures::registry();
        let yaml = model.yaml();
        if let Some(setup) = load_any(&yaml, &registry) {
            assert_setup_keeps_the_rules(&setup, &registry);
            // Listed hints are exactly the document's list, in order.
            for role in &model.roles {
                let policies = setup
                    .roles
                    .iter()
                    .find(|(key, _)| key.as_str() == role.key)
                    .map(|(_, policies)| policies);
                let Some(policies) = policies else { panic!("role {} missing", role.key) };
                if let (false, Some(hints)) = (role.bare, &role.hints) {
                    let listed: Vec<&str> = policies.hints.iter().map(|h| h.policy_type.as_str()).collect();
                    let expected: Vec<&str> = if setup.router_mode == RouterMode::Kv {
                        hints.iter().map(|h| h.policy_type).collect()
                    } else {
                        Vec::new()
                    };
                    prop_assert_eq!(listed, expected);
                    prop_assert!(policies.hints.iter().all(|h| h.origin == HintOrigin::Listed));
                }
            }
        }
    }

    #[test]
    fn mutated_documents_never_panic_and_loaded_ones_keep_the_rules(
        seed in proptest::sample::select(SEEDS),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let registry = config_fixtures::registry();
        let yaml = mutations.iter().fold(seed.to_owned(), |text, m| apply(&text, m));
        if let Some(setup) = load_any(&yaml, &registry) {
            assert_setup_keeps_the_rules(&setup, &registry);
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let registry = config_fixtures::registry();
        if let Some(setup) = load_any(&text, &registry) {
            assert_setup_keeps_the_rules(&setup, &registry);
        }
    }
}
