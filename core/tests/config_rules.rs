//! Every configuration rule: a YAML case that fails with its message at its line and column,
//! and one that passes.

mod config_fixtures;

use config_fixtures::{failure, load, load_with};
use dynamo_kv_router::config::{
    self, ConfigOverrides, ConfigProblem, ConfigSource, MAX_CONFIG_BYTES, Position,
};
use dynamo_kv_router::plugins::prelude::*;
use dynamo_kv_router::router::{HintOrigin, RouterMode, RouterSetup};
use std::sync::atomic::{AtomicUsize, Ordering};

fn hint_labels(setup: &RouterSetup, role: Role) -> Vec<(String, HintOrigin)> {
    setup.roles[&role]
        .hints
        .iter()
        .map(|hint| (hint.label().to_owned(), hint.origin))
        .collect()
}

fn at(error: &dynamo_kv_router::config::ConfigError) -> (u32, u32) {
    (error.position.line, error.position.column)
}

// The page's YAML, as written.
const PAGE_YAML: &str = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters:
          max_blocks: 64
  prefill:
    type: dynamo-default-cost-fn
    hints: []
";

// The reference's YAML, as written.
const REFERENCE_YAML: &str = "\
router_mode: kv            # kv | round-robin | random | least-loaded  (CLI --router-mode overrides)
block_size: 16             # tokens per KV block
worker_selection:
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv_fetch
        parameters: {min_additional_blocks: 4}
      - type: harness_prefetch
        name: prefetch-a            # name is needed only when a type is listed twice
        parameters: {max_blocks: 64}
  prefill: dynamo-default-cost-fn   # bare form: type only, no parameters, default hints
";

#[test]
fn the_page_yaml_loads_as_written() {
    let setup = load(PAGE_YAML).unwrap();
    assert_eq!(setup.router_mode, RouterMode::Kv);
    assert_eq!(setup.block_size, config::DEFAULT_BLOCK_SIZE);
    assert_eq!(
        hint_labels(&setup, Role::Decode),
        [("harness_prefetch".to_owned(), HintOrigin::Listed)]
    );
    assert!(setup.roles[&Role::Prefill].hints.is_empty());
    assert!(!setup.roles.contains_key(&Role::Aggregated));
}

#[test]
fn the_reference_yaml_loads_as_written() {
    let setup = load(REFERENCE_YAML).unwrap();
    let decode = &setup.roles[&Role::Decode];
    assert_eq!(decode.selection_type, "kvcr");
    assert!(decode.selection.commitments.contains(Commitments::KV_COPY));
    assert_eq!(
        hint_labels(&setup, Role::Decode),
        [
            ("kv_fetch".to_owned(), HintOrigin::Listed),
            ("prefetch-a".to_owned(), HintOrigin::Listed)
        ]
    );
    assert_eq!(decode.hints[1].policy_type, "harness_prefetch");
    // The bare entry runs the defaults registered for its type and for any type.
    assert_eq!(
        hint_labels(&setup, Role::Prefill),
        [("audit_log".to_owned(), HintOrigin::Default)]
    );
}

// Rule 1: unknown types.

#[test]
fn rule1_unknown_hint_type_lists_linked_types_and_suggests_the_closest() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: kv_fecth
";
    let error = failure(yaml);
    assert_eq!(at(&error), (5, 15));
    assert_eq!(error.role, Some(Role::Decode));
    assert_eq!(
        error.to_string(),
        "router.yaml:5:15: worker_selection.decode.hints[0].type: unknown hint policy type `kv_fecth`; \
         did you mean `kv_fetch`?; linked hint policy types: audit_log, copy_too, harness_prefetch, \
         kv_fetch, strict_default; run `kv-router catalog` to list the linked policies, or link the \
         crate that provides it"
    );
}

#[test]
fn rule1_unknown_selection_type_in_the_bare_form_points_at_the_type() {
    let error = failure("worker_selection:\n  prefill: dynamo-default-cost\n");
    assert_eq!(at(&error), (2, 12));
    assert!(
        error.to_string().contains(
            "worker_selection.prefill: unknown worker-selection policy type `dynamo-default-cost`; \
             did you mean `dynamo-default-cost-fn`?"
        ),
        "{error}"
    );
}

#[test]
fn rule1_a_hint_type_used_as_a_selection_type_is_unknown_there() {
    let error = failure("worker_selection:\n  decode:\n    type: kv_fetch\n");
    assert_eq!(at(&error), (3, 11));
    assert!(
        error
            .to_string()
            .contains("`kv_fetch` is a hint policy, not a worker-selection policy"),
        "{error}"
    );
}

#[test]
fn rule1_known_types_pass() {
    let setup =
        load("worker_selection:\n  decode:\n    type: kvcr\n    hints: [{type: kv_fetch}]\n");
    assert!(setup.is_ok());
}

// Rule 2: parameters.

#[test]
fn rule2_parameters_must_be_a_mapping() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    parameters: [1, 2]
";
    let error = failure(yaml);
    assert_eq!(at(&error), (4, 17));
    assert_eq!(
        error.to_string(),
        "router.yaml:4:17: worker_selection.decode.parameters: parameters must be a mapping of field \
         names to values, found a sequence; write them as `parameters: {field: value}`"
    );
}

#[test]
fn rule2_a_rejected_parameter_names_the_full_field_path_and_points_at_the_value() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: audit_log
      - type: harness_prefetch
        parameters:
          max_blocks: x
";
    let error = failure(yaml);
    assert_eq!(at(&error), (8, 23));
    let ConfigProblem::Parameters {
        error: rejection, ..
    } = &*error.problem
    else {
        panic!("expected a parameter error, got {error}");
    };
    assert_eq!(
        rejection.to_string(),
        "worker_selection.decode.hints[1].parameters.max_blocks: invalid type: string \"x\", expected usize"
    );
    assert!(
        error.to_string().ends_with(
            "run `kv-router catalog describe harness_prefetch` for the policy's parameters)"
        ),
        "{error}"
    );
}

#[test]
fn rule2_a_selection_policy_check_names_its_field() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    parameters:
      shared_cache_multiplier: 2.5
    hints: []
";
    let error = failure(yaml);
    assert_eq!(at(&error), (5, 32));
    assert!(error.to_string().contains(
        "worker_selection.decode.parameters.shared_cache_multiplier: must be between 0 and 1"
    ));
}

#[test]
fn rule2_unknown_parameter_fields_are_errors() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: kv_fetch
        parameters: {min_additional_blocks: 4, max_blocks: 9}
";
    let error = failure(yaml);
    // An unknown field is a mistake in the key, so the caret points at the key (column 48,
    // where `max_blocks` starts), as for every other unknown key; a bad value points at the value.
    let line = yaml.lines().nth(5).unwrap();
    assert_eq!(line.find("max_blocks").unwrap() + 1, 48);
    assert_eq!(at(&error), (6, 48));
    assert!(
        error.to_string().contains(
            "worker_selection.decode.hints[0].parameters.max_blocks: unknown field `max_blocks`"
        ),
        "{error}"
    );
    // Also for a provider whose type does not deny unknown fields.
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters: {max_blocks: 4, depth: 2}
";
    let error = failure(yaml);
    assert_eq!(at(&error), (6, 37), "at the key `depth`");
    assert!(
        error.to_string().contains(
            "worker_selection.decode.hints[0].parameters.depth: unknown field `depth`; remove it or correct its spelling"
        ),
        "{error}"
    );
}

#[test]
fn rule2_missing_required_parameters_point_at_the_entry() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
";
    let error = failure(yaml);
    assert_eq!(at(&error), (5, 9));
    assert!(
        error
            .to_string()
            .contains("worker_selection.decode.hints[0].parameters: missing field `max_blocks`"),
        "{error}"
    );
}

#[test]
fn rule2_valid_and_empty_parameters_pass() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    parameters:
    hints:
      - type: kv_fetch
        parameters: {}
";
    assert!(load(yaml).is_ok());
}

// Rule 3: hints: [], listed hints, and defaults.

#[test]
fn rule3_an_empty_list_runs_no_hints_even_where_defaults_exist() {
    let setup =
        load("worker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n")
            .unwrap();
    assert!(setup.roles[&Role::Decode].hints.is_empty());
}

#[test]
fn rule3_no_hints_key_runs_the_defaults_in_name_order_with_default_parameters() {
    let setup = load("worker_selection:\n  decode:\n    type: kvcr\n").unwrap();
    assert_eq!(
        hint_labels(&setup, Role::Decode),
        [
            ("audit_log".to_owned(), HintOrigin::Default),
            ("kv_fetch".to_owned(), HintOrigin::Default)
        ]
    );
    let setup = load("worker_selection:\n  decode: dynamo-default-cost-fn\n").unwrap();
    assert_eq!(
        hint_labels(&setup, Role::Decode),
        [("audit_log".to_owned(), HintOrigin::Default)]
    );
}

#[test]
fn rule3_listed_hints_replace_the_defaults_and_keep_their_order() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: harness_prefetch
        parameters: {max_blocks: 1}
      - type: audit_log
";
    let setup = load(yaml).unwrap();
    assert_eq!(
        hint_labels(&setup, Role::Decode),
        [
            ("harness_prefetch".to_owned(), HintOrigin::Listed),
            ("audit_log".to_owned(), HintOrigin::Listed)
        ]
    );
}

#[test]
fn rule3_a_default_that_rejects_default_parameters_fails_at_the_role() {
    let error = failure("worker_selection:\n  decode: picky\n");
    assert_eq!(at(&error), (2, 11));
    assert!(
        error.to_string().contains(
            "worker_selection.decode: hint policy `strict_default` runs by default under `picky` but rejects default parameters"
        ),
        "{error}"
    );
    assert!(load("worker_selection:\n  decode: {type: picky, hints: []}\n").is_ok());
}

// Rule 4: names.

#[test]
fn rule4_a_repeated_type_without_names_fails() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters: {max_blocks: 1}
      - type: harness_prefetch
        parameters: {max_blocks: 2}
";
    let error = failure(yaml);
    assert_eq!(at(&error), (5, 9));
    assert_eq!(
        error.to_string(),
        "router.yaml:5:9: worker_selection.decode.hints[0]: hint type `harness_prefetch` is listed 2 \
         times in this role and this entry has no `name`; give each of its entries a unique `name`"
    );
}

#[test]
fn rule4_a_repeated_type_with_unique_names_passes() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: harness_prefetch, name: near, parameters: {max_blocks: 1}}
      - {type: harness_prefetch, name: far, parameters: {max_blocks: 64}}
";
    let setup = load(yaml).unwrap();
    assert_eq!(
        hint_labels(&setup, Role::Decode),
        [
            ("near".to_owned(), HintOrigin::Listed),
            ("far".to_owned(), HintOrigin::Listed)
        ]
    );
}

#[test]
fn rule4_duplicate_names_fail() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - {type: harness_prefetch, name: near, parameters: {max_blocks: 1}}
      - {type: harness_prefetch, name: near, parameters: {max_blocks: 64}}
";
    let error = failure(yaml);
    assert_eq!(at(&error), (6, 40));
    assert!(
        error.to_string().contains(
            "worker_selection.decode.hints[1]: hint name `near` is already used by worker_selection.decode.hints[0] in this role"
        ),
        "{error}"
    );
}

#[test]
fn rule4_a_name_equal_to_another_entrys_type_fails() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: audit_log
      - {type: harness_prefetch, name: audit_log, parameters: {max_blocks: 1}}
";
    let error = failure(yaml);
    assert!(
        error
            .to_string()
            .contains("hint name `audit_log` is already used by worker_selection.decode.hints[0]"),
        "{error}"
    );
}

#[test]
fn rule4_malformed_names_fail() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: audit_log
        name: audit log
";
    let error = failure(yaml);
    assert_eq!(at(&error), (6, 15));
    assert_eq!(
        error.to_string(),
        "router.yaml:6:15: worker_selection.decode.hints[0].name: invalid hint name \"audit log\": it \
         contains ' '; use only letters, digits, `_`, `.` and `-`"
    );
    let error = failure(&yaml.replace("audit log", "''"));
    assert!(error.to_string().contains("it is empty"), "{error}");
}

// Rule 5: hints only on the KV path.

const HINTED: &str = "\
router_mode: round-robin
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: audit_log
";

#[test]
fn rule5_hints_under_a_non_kv_mode_fail() {
    let error = failure(HINTED);
    assert_eq!(at(&error), (6, 7));
    assert_eq!(
        error.to_string(),
        "router.yaml:6:7: worker_selection.decode.hints: 1 hint policy is listed while router_mode is \
         `round-robin`; hints run only on the KV path: use router_mode `kv`, or `hints: []`"
    );
}

#[test]
fn rule5_the_command_line_mode_applies_before_the_check() {
    let kv = ConfigOverrides {
        router_mode: Some(RouterMode::Kv),
    };
    assert_eq!(load_with(HINTED, kv).unwrap().router_mode, RouterMode::Kv);
    let random = ConfigOverrides {
        router_mode: Some(RouterMode::Random),
    };
    let kv_file = HINTED.replace("round-robin", "kv");
    let error = load_with(&kv_file, random).err().unwrap();
    assert!(
        error.to_string().contains("router_mode is `random`"),
        "{error}"
    );
}

#[test]
fn rule5_an_empty_list_and_defaults_are_fine_outside_kv_mode() {
    let setup =
        load(&HINTED.replace("    hints:\n      - type: audit_log\n", "    hints: []\n")).unwrap();
    assert!(setup.roles[&Role::Decode].hints.is_empty());
    // Without a `hints` key no default hint is attached: hints never run outside KV mode.
    let setup = load("router_mode: least-loaded\nworker_selection:\n  decode: kvcr\n").unwrap();
    assert!(setup.roles[&Role::Decode].hints.is_empty());
}

// Rule 6: KV copies need exactly one sender.

#[test]
fn rule6_a_committing_selection_policy_without_a_sender_fails() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: audit_log
";
    let error = failure(yaml);
    assert_eq!(at(&error), (6, 7));
    assert_eq!(
        error.to_string(),
        "router.yaml:6:7: worker_selection.decode.hints: worker-selection policy `kvcr`, as configured, \
         commits KV copies, but the role runs no hint policy that sends them; add exactly one to \
         `hints` (linked: `copy_too`, `kv_fetch`), or configure `kvcr` not to commit copies"
    );
    let error = failure(
        &yaml
            .replace("      - type: audit_log\n", "")
            .replace("hints:", "hints: []"),
    );
    assert!(
        error
            .to_string()
            .contains("runs no hint policy that sends them")
    );
}

#[test]
fn rule6_two_senders_fail() {
    let yaml = "\
worker_selection:
  decode:
    type: kvcr
    parameters: {shared_cache_multiplier: 0.5}
    hints:
      - type: kv_fetch
      - type: copy_too
";
    let error = failure(yaml);
    assert_eq!(at(&error), (6, 7));
    assert!(
        error.to_string().contains(
            "worker-selection policy `kvcr` commits KV copies and 2 hint policies send them (`kv_fetch`, `copy_too`); keep exactly one"
        ),
        "{error}"
    );
}

#[test]
fn rule6_exactly_one_sender_passes_and_a_non_committing_instance_needs_none() {
    assert!(
        load(&REFERENCE_YAML.replace(
            "      - type: kv_fetch\n        parameters: {min_additional_blocks: 4}\n",
            "      - type: copy_too\n"
        ))
        .is_ok()
    );
    // kvcr with the default multiplier commits nothing: no sender needed.
    assert!(load("worker_selection:\n  decode: {type: kvcr, hints: []}\n").is_ok());
    // Its default hints include the sender.
    assert!(
        load(
            "worker_selection:\n  decode: {type: kvcr, parameters: {shared_cache_multiplier: 1}}\n"
        )
        .is_ok()
    );
}

// Rule 7: duplicate keys, unknown keys, alias bombs, oversized files; nothing panics.

#[test]
fn rule7_duplicate_keys_fail_at_the_second_key() {
    let error = failure("block_size: 16\nworker_selection:\n  decode: kvcr\nblock_size: 32\n");
    assert_eq!(at(&error), (4, 1));
    assert_eq!(
        error.to_string(),
        "router.yaml:4:1: duplicate mapping key `block_size` is not allowed here; each key may appear \
         once in a mapping: remove or merge the repeated key"
    );
    let error =
        failure("worker_selection:\n  decode:\n    type: kvcr\n    parameters: {a: 1, a: 2}\n");
    assert_eq!(at(&error), (4, 24));
}

#[test]
fn rule7_unknown_keys_fail_at_every_level() {
    let error = failure("routing_mode: kv\n");
    assert_eq!(at(&error), (1, 1));
    assert_eq!(
        error.to_string(),
        "router.yaml:1:1: unknown field `routing_mode`, expected one of router_mode, block_size, \
         worker_selection, nats; remove the key or correct its spelling"
    );
    let error = failure("worker_selection:\n  deocde: kvcr\n");
    assert_eq!(at(&error), (2, 3));
    assert!(
        error.to_string().contains("unknown field `deocde`"),
        "{error}"
    );
    let error = failure("worker_selection:\n  decode:\n    type: kvcr\n    hint: []\n");
    assert_eq!(at(&error), (4, 5));
    assert!(
        error.to_string().contains("unknown field `hint`"),
        "{error}"
    );
    let error = failure(
        "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n      - type: kv_fetch\n        nmae: x\n",
    );
    assert_eq!(at(&error), (6, 9));
    assert!(
        error.to_string().contains("unknown field `nmae`"),
        "{error}"
    );
}

#[test]
fn rule7_alias_bombs_stop_at_the_budget() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    parameters:
      a: &a [x, x, x, x, x, x, x, x, x, x]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
";
    let error = failure(yaml);
    assert!(
        matches!(*error.problem, ConfigProblem::Budget { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("safety budget"), "{error}");
    assert!(error.position.line >= 8, "{error}");
    // A few aliases are fine.
    let yaml = "\
worker_selection:
  decode: &entry
    type: dynamo-default-cost-fn
    hints: []
  prefill: *entry
";
    let setup = load(yaml).unwrap();
    assert_eq!(setup.roles.len(), 2);
}

#[test]
fn rule7_oversized_files_are_refused_before_parsing() {
    let big = format!(
        "# {}\nworker_selection:\n  decode: kvcr\n",
        "x".repeat(MAX_CONFIG_BYTES)
    );
    let error = failure(&big);
    assert!(
        matches!(*error.problem, ConfigProblem::TooLarge { .. }),
        "{error}"
    );
    assert_eq!(error.position, Position::UNKNOWN);
    assert!(
        error
            .to_string()
            .starts_with("router.yaml: the configuration is"),
        "{error}"
    );

    let dir = std::env::temp_dir().join(format!("kv-router-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.yaml");
    std::fs::write(&path, &big).unwrap();
    let error = ConfigSource::read(&path).err().unwrap();
    assert!(
        matches!(*error.problem, ConfigProblem::TooLarge { .. }),
        "{error}"
    );
    let path = dir.join("small.yaml");
    std::fs::write(&path, PAGE_YAML).unwrap();
    assert_eq!(ConfigSource::read(&path).unwrap().text, PAGE_YAML);
    std::fs::remove_dir_all(&dir).unwrap();
    let error = ConfigSource::read("/nonexistent/router.yaml".as_ref())
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("cannot read the configuration"),
        "{error}"
    );
}

#[test]
fn rule7_malformed_documents_fail_with_a_position() {
    for (yaml, line) in [
        ("worker_selection:\n  decode: [kvcr\n", 2),
        ("- 1\n", 1),
        ("worker_selection:\n  decode:\n", 2),
        (
            "worker_selection:\n  decode:\n    type: kvcr\n    hints:\n      - kv_fetch\n",
            5,
        ),
        ("block_size: -1\n", 1),
        ("---\nblock_size: 1\n---\nblock_size: 2\n", 3),
    ] {
        let error = failure(yaml);
        assert_eq!(error.position.line, line, "{yaml:?}: {error}");
    }
    let error =
        failure("worker_selection:\n  decode:\n    type: kvcr\n    hints:\n      - kv_fetch\n");
    assert!(
        error
            .to_string()
            .contains("expected a hint entry: a mapping with `type`"),
        "{error}"
    );
}

// Top-level values.

#[test]
fn router_mode_and_block_size_are_checked() {
    let error = failure("router_mode: fast\nworker_selection:\n  decode: kvcr\n");
    assert_eq!(at(&error), (1, 14));
    assert!(
        error.to_string().contains("unknown router mode `fast`"),
        "{error}"
    );
    let error = failure("block_size: 0\nworker_selection:\n  decode: kvcr\n");
    assert_eq!(at(&error), (1, 13));
    assert!(
        error.to_string().contains("block_size: must be at least 1"),
        "{error}"
    );
    let setup = load("router_mode: random\nblock_size: 64\n").unwrap();
    assert_eq!(
        (setup.router_mode, setup.block_size),
        (RouterMode::Random, 64)
    );
    let error = failure("block_size: 16\n");
    assert!(matches!(*error.problem, ConfigProblem::NoRoles), "{error}");
}

#[test]
fn the_nats_mapping_is_checked_where_it_is_written() {
    let source = |yaml: &str| dynamo_kv_router::config::ConfigSource::new("router.yaml", yaml);
    let load_nats = |yaml: &str| {
        dynamo_kv_router::config::load_with_nats(
            &source(yaml),
            &config_fixtures::registry(),
            &dynamo_kv_router::config::ConfigOverrides::default(),
        )
        .map(|(_, nats)| ((), nats))
    };
    let base = "worker_selection:\n  decode: kvcr\n";
    let (_, nats) = load_nats(&format!(
        "{base}nats:\n  url: nats://127.0.0.1:4222\n  consumer: router-a\n"
    ))
    .unwrap();
    let nats = nats.expect("the mapping is read");
    assert_eq!(nats.url, "nats://127.0.0.1:4222");
    assert_eq!(nats.consumer.as_deref(), Some("router-a"));
    assert_eq!(nats.stream, None);
    assert_eq!(load_nats(base).unwrap().1, None);
    let error = load_nats(&format!("{base}nats:\n  url: 127.0.0.1:4222\n")).unwrap_err();
    assert_eq!(at(&error), (4, 8));
    assert!(
        error
            .to_string()
            .contains("nats.url: `127.0.0.1:4222` is not usable: expected nats://host:port"),
        "{error}"
    );
    let error = load_nats(&format!(
        "{base}nats:\n  url: nats://h:1\n  stream: kv.events\n"
    ))
    .unwrap_err();
    assert_eq!(at(&error), (5, 11));
    let error = load_nats(&format!("{base}nats:\n  url: nats://h:1\n  subject: x\n")).unwrap_err();
    assert!(
        error.to_string().contains("unknown field `subject`"),
        "{error}"
    );
    let error = load_nats(&format!("{base}nats:\n  stream: S\n")).unwrap_err();
    assert!(error.to_string().contains("missing field `url`"), "{error}");
    // `config::load` (what `kv-router check` runs) reports it too.
    assert!(
        failure(&format!("{base}nats:\n  url: tcp://h:1\n"))
            .to_string()
            .contains("nats.url")
    );
}

#[test]
fn the_first_mistake_in_file_order_is_reported() {
    let yaml = "\
worker_selection:
  prefill:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters: {max_blocks: many}
  aggregated: kvrc
  decode:
    type: kvcr
    hints: [{type: kv_fetch}, {type: kv_fetch}]
";
    let error = failure(yaml);
    assert_eq!(at(&error), (6, 34));
    assert_eq!(error.role, Some(Role::Prefill));
}

#[test]
fn constructors_run_once_per_role_at_startup() {
    let built = Arc::new(AtomicUsize::new(0));
    let mut registry = config_fixtures::registry();
    let counter = Arc::clone(&built);
    registry
        .register_hint_policy(
            "counted",
            Arc::new(move |_| {
                let counter = Arc::clone(&counter);
                Ok(HintPolicyConstructor::per_partition(move |_| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok(config_fixtures::Quiet {
                        commits: Commitments::NONE,
                    })
                }))
            }),
            [],
        )
        .unwrap();
    let yaml = "\
worker_selection:
  prefill: {type: dynamo-default-cost-fn, hints: [{type: counted}]}
  decode: {type: dynamo-default-cost-fn, hints: [{type: counted}]}
";
    let source = ConfigSource::new("router.yaml", yaml);
    let setup = config::load(&source, &registry, &ConfigOverrides::default()).unwrap();
    assert_eq!(built.load(Ordering::SeqCst), 2);
    assert_eq!(setup.roles.len(), 2);
}

#[test]
fn the_renderer_shows_the_line_and_a_caret() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters:
          max_blocks: x
";
    let error = failure(yaml);
    assert_eq!(
        error.render(yaml),
        "\
error: worker_selection.decode.hints[0].parameters.max_blocks: invalid type: string \"x\", expected usize; fix the value (run `kv-router catalog describe harness_prefetch` for the policy's parameters)
  --> router.yaml:7:23
  |
5 |       - type: harness_prefetch
6 |         parameters:
7 |           max_blocks: x
  |                       ^
  = in role `decode`
"
    );
}

const SHADOW_YAML: &str = "\
worker_selection:
  decode:
    type: kvcr
    hints:
      - type: kv_fetch
    shadow:
      - dynamo-default-cost-fn
      - type: kvcr
        name: kvcr-wide
        parameters: {shared_cache_multiplier: 0.9}
        hints:
          - type: kv_fetch
";

#[test]
fn shadows_load_as_roles_do_with_their_names() {
    let setup = load(SHADOW_YAML).unwrap();
    let decode = &setup.roles[&Role::Decode];
    let shadows: Vec<(&str, &str)> = decode
        .shadows
        .iter()
        .map(|shadow| {
            (
                shadow.name.as_str(),
                shadow.policies.selection_type.as_str(),
            )
        })
        .collect();
    assert_eq!(
        shadows,
        [
            ("dynamo-default-cost-fn", "dynamo-default-cost-fn"),
            ("kvcr-wide", "kvcr")
        ]
    );
    let wide = &decode.shadows[1].policies;
    assert_eq!(
        wide.hints
            .iter()
            .map(|hint| hint.label())
            .collect::<Vec<_>>(),
        ["kv_fetch"]
    );
    assert!(wide.shadows.is_empty());
    // The live hints are the role's own.
    assert_eq!(hint_labels(&setup, Role::Decode).len(), 1);
}

#[test]
fn two_shadows_with_one_name_fail_at_the_second() {
    let yaml = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    shadow:
      - dynamo-default-cost-fn
      - type: kvcr
        name: dynamo-default-cost-fn
";
    let error = failure(yaml);
    assert_eq!(at(&error), (7, 15));
    let message = error.to_string();
    assert!(
        message.contains("worker_selection.decode.shadow[1]")
            && message.contains("already used by worker_selection.decode.shadow[0]"),
        "{message}"
    );
}

#[test]
fn a_shadow_is_checked_as_a_role_entry_is_at_its_own_path() {
    let unknown = failure(
        "worker_selection:\n  decode:\n    type: kvcr\n    shadow:\n      - type: no-such-policy\n",
    );
    assert_eq!(at(&unknown), (5, 15));
    assert!(
        unknown
            .to_string()
            .contains("worker_selection.decode.shadow[0].type"),
        "{unknown}"
    );
    let bad_parameter = failure(
        "worker_selection:\n  decode:\n    type: kvcr\n    shadow:\n      - type: kvcr\n        parameters: {shared_cache_multiplier: 3}\n",
    );
    assert_eq!(at(&bad_parameter).0, 6);
    assert!(
        bad_parameter
            .to_string()
            .contains("worker_selection.decode.shadow[0].parameters.shared_cache_multiplier"),
        "{bad_parameter}"
    );
    let bad_name = failure(
        "worker_selection:\n  decode:\n    type: kvcr\n    shadow:\n      - type: kvcr\n        name: 'has space'\n",
    );
    assert_eq!(at(&bad_name), (6, 15));
    assert!(
        bad_name.to_string().contains("invalid shadow name"),
        "{bad_name}"
    );
}

#[test]
fn shadows_need_the_kv_path_and_have_no_shadows_of_their_own() {
    let blind = failure(
        "router_mode: round-robin\nworker_selection:\n  decode:\n    type: dynamo-default-cost-fn\n    hints: []\n    shadow: [kvcr]\n",
    );
    assert_eq!(at(&blind).0, 6);
    assert!(
        blind.to_string().contains("router_mode is `round-robin`"),
        "{blind}"
    );
    let nested = failure(
        "worker_selection:\n  decode:\n    type: kvcr\n    shadow:\n      - type: kvcr\n        shadow: [kvcr]\n",
    );
    assert_eq!(at(&nested).0, 6);
    assert!(
        nested.to_string().contains("unknown field `shadow`"),
        "{nested}"
    );
}
