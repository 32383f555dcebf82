//! Two link-time registrations with one name: `PolicyRegistry::linked()` fails and names both.
//! (A binary of its own, so the duplicate does not affect other tests.)

use dynamo_kv_router::plugins::{PolicyRegistry, RegistryError};

mod first {
    use dynamo_kv_router::plugins::prelude::*;

    /// The first registration.
    #[hint_policy("duplicated")]
    #[derive(Deserialize)]
    pub struct First {}

    impl HintPolicy for First {
        fn build_hints(&self, _: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
            Ok(Vec::new())
        }
    }
}

mod second {
    use dynamo_kv_router::plugins::prelude::*;

    /// The second registration, of another kind but with the same name.
    #[worker_selection_policy("duplicated")]
    #[derive(Deserialize)]
    pub struct Second {}

    impl WorkerSelectionPolicy for Second {
        fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
            let first = context
                .candidates()
                .first()
                .ok_or_else(|| PolicyError::new("no candidates"))?;
            Ok(Selection::worker(first.worker))
        }
    }
}

/// The lines of this file that hold a registration of `duplicated`.
fn registration_lines() -> Vec<usize> {
    include_str!("duplicate_linked.rs")
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            line.trim_start().starts_with("#[") && line.contains("(\"duplicated\")")
        })
        .map(|(index, _)| index + 1)
        .collect()
}

#[test]
fn linked_fails_naming_both_registrations() {
    let error = PolicyRegistry::linked().expect_err("a name registered twice is an error");
    let RegistryError::Duplicate {
        name,
        first,
        second,
    } = &error
    else {
        panic!("expected a duplicate-name error, got: {error}");
    };
    assert_eq!(name, "duplicated");
    let lines = registration_lines();
    assert_eq!(lines.len(), 2);
    let mut reported = [first.line as usize, second.line as usize];
    reported.sort_unstable();
    assert_eq!(reported.as_slice(), lines.as_slice());
    let message = error.to_string();
    for line in lines {
        let location =
            format!("crate `dynamo-kv-router-tests` at tests/tests/duplicate_linked.rs:{line}");
        assert!(
            message.contains(&location),
            "missing {location:?} in: {message}"
        );
    }
}
