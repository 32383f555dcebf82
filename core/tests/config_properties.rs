//! Property tests: random and mutated configuration documents never panic the loader, a
//! configuration that loads never violates a rule, every document the valid generator makes
//! loads, and breaking one at a marked place fails with an error located at that place.

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
                .filter(|hint| hint.constructed.commitments.contains(Commitments::KV_COPY))
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

/// A document the loader must accept: known policies, parameters they read, hints that respect
/// every rule (a committing `kvcr` gets exactly one KV-copy sender, by default or listed).
#[derive(Clone, Debug)]
struct ValidRole {
    key: &'static str,
    selection: &'static str,
    parameters: &'static str,
    /// `None`: no `hints` key (the registered defaults run).
    hints: Option<Vec<(&'static str, &'static str)>>,
}

fn valid_role(key: &'static str) -> impl Strategy<Value = ValidRole> {
    let selection = prop_oneof![
        Just(("dynamo-default-cost-fn", "")),
        Just(("dynamo-default-cost-fn", "{overlap_score_credit: 2}")),
        Just(("kvcr", "")),
        Just(("kvcr", "{shared_cache_multiplier: 0}")),
        Just(("kvcr", "{shared_cache_multiplier: 0.5}")),
        Just(("picky", "{}")),
    ];
    let plain_hints = proptest::sample::subsequence(
        vec![
            ("audit_log", ""),
            ("harness_prefetch", "{max_blocks: 64}"),
            ("strict_default", "{level: 3}"),
        ],
        0..=3,
    );
    (
        selection,
        plain_hints,
        proptest::bool::ANY,
        proptest::bool::ANY,
    )
        .prop_map(
            move |((selection, parameters), mut hints, listed, sender_first)| {
                let commits = parameters.contains("0.5");
                // `picky`'s default hint needs a parameter, so `picky` always lists its hints.
                if !listed && selection != "picky" {
                    return ValidRole {
                        key,
                        selection,
                        parameters,
                        hints: None,
                    };
                }
                if commits {
                    let sender = ("kv_fetch", "{min_additional_blocks: 4}");
                    if sender_first {
                        hints.insert(0, sender);
                    } else {
                        hints.push(sender);
                    }
                }
                ValidRole {
                    key,
                    selection,
                    parameters,
                    hints: Some(hints),
                }
            },
        )
}

fn valid_document() -> impl Strategy<Value = (Option<&'static str>, Vec<ValidRole>)> {
    (
        proptest::sample::select(vec![None, Some("16"), Some("1")]),
        proptest::option::of(valid_role("aggregated")),
        proptest::option::of(valid_role("prefill")),
        valid_role("decode"),
    )
        .prop_map(|(block_size, aggregated, prefill, decode)| {
            let roles = [aggregated, prefill, Some(decode)]
                .into_iter()
                .flatten()
                .collect();
            (block_size, roles)
        })
}

fn valid_yaml(block_size: Option<&'static str>, roles: &[ValidRole]) -> String {
    let roles = roles
        .iter()
        .map(|role| RoleModel {
            key: role.key,
            selection: role.selection,
            bare: false,
            parameters: role.parameters,
            hints: role.hints.as_ref().map(|hints| {
                hints
                    .iter()
                    .map(|&(policy_type, parameters)| HintModel {
                        policy_type,
                        name: None,
                        parameters,
                    })
                    .collect()
            }),
        })
        .collect();
    DocumentModel {
        mode: None,
        block_size,
        roles,
    }
    .yaml()
}

/// The text every breaking mutation writes; the error must point at it.
const MARK: &str = "zz_wrong";

/// Ways to break a valid document at one place, which the error must point at.
#[derive(Clone, Debug)]
enum Break {
    /// An unknown top-level key.
    TopLevelKey,
    /// An unknown key in the role at this index (modulo the number of roles).
    RoleKey(usize),
    /// An unknown selection type for that role.
    SelectionType(usize),
    /// An unknown hint type replacing that role's first listed hint (or added as a list).
    HintType(usize),
    /// A parameter field the role's selection policy does not read.
    ParameterField(usize),
}

fn breaking() -> impl Strategy<Value = Break> {
    prop_oneof![
        Just(Break::TopLevelKey),
        any::<usize>().prop_map(Break::RoleKey),
        any::<usize>().prop_map(Break::SelectionType),
        any::<usize>().prop_map(Break::HintType),
        any::<usize>().prop_map(Break::ParameterField),
    ]
}

/// Applies `how` to the valid document and returns the broken text.
fn broken_yaml(block_size: Option<&'static str>, mut roles: Vec<ValidRole>, how: &Break) -> String {
    let count = roles.len();
    match *how {
        Break::TopLevelKey => return valid_yaml(block_size, &roles) + &format!("{MARK}: 1\n"),
        Break::RoleKey(index) => {
            let yaml = valid_yaml(block_size, &roles);
            let header = format!("  {}:\n", roles[index % count].key);
            let at = yaml.find(&header).expect("the role is written") + header.len();
            return format!("{}    {MARK}: 1\n{}", &yaml[..at], &yaml[at..]);
        }
        Break::SelectionType(index) => roles[index % count].selection = MARK,
        Break::HintType(index) => {
            let hints = roles[index % count].hints.get_or_insert_with(Vec::new);
            match hints.first_mut() {
                Some(first) => *first = (MARK, ""),
                None => hints.push((MARK, "")),
            }
        }
        // Every selection policy of the stand-in catalog rejects a field it does not read.
        Break::ParameterField(index) => roles[index % count].parameters = "{zz_wrong: 1}",
    }
    valid_yaml(block_size, &roles)
}

/// The 1-based line and column of the first `MARK` in `yaml`.
fn mark_position(yaml: &str) -> (u32, u32) {
    for (index, line) in yaml.lines().enumerate() {
        if let Some(column) = line.find(MARK) {
            return (index as u32 + 1, line[..column].chars().count() as u32 + 1);
        }
    }
    panic!("no mark in\n{yaml}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_generators_valid_documents_load((block_size, roles) in valid_document()) {
        let registry = config_fixtures::registry();
        let yaml = valid_yaml(block_size, &roles);
        let source = ConfigSource::new("valid.yaml", yaml.as_str());
        let loaded = config::load(&source, &registry, &ConfigOverrides::default());
        let setup = match loaded {
            Ok(setup) => setup,
            Err(error) => panic!("a valid document was rejected:\n{yaml}\n{}", error.render(&yaml)),
        };
        assert_setup_keeps_the_rules(&setup, &registry);
        prop_assert_eq!(setup.roles.len(), roles.len());
    }

    #[test]
    fn a_broken_valid_document_fails_at_the_broken_place(
        (block_size, roles) in valid_document(),
        how in breaking(),
    ) {
        let registry = config_fixtures::registry();
        let yaml = broken_yaml(block_size, roles, &how);
        let source = ConfigSource::new("broken.yaml", yaml.as_str());
        let error = match config::load(&source, &registry, &ConfigOverrides::default()) {
            Ok(_) => panic!("a broken document ({how:?}) loaded:\n{yaml}"),
            Err(error) => error,
        };
        let position = (error.position.line, error.position.column);
        prop_assert_eq!(position, mark_position(&yaml), "{:?}: {}\n{}", how, error, yaml);
        prop_assert!(error.to_string().contains(MARK), "{}", error);
    }
}
