//! Policy names: what is valid, what is reserved, and which known name a typo meant.
//!
//! The one home of these rules. `dynamo-kv-router` checks registrations and configurations with
//! them at startup, and `dynamo-kv-router-macros` checks `#[hint_policy("...")]` and
//! `#[worker_selection_policy("...")]` with them at compile time (a proc-macro crate cannot
//! depend on the router, so both depend on this crate).

use std::fmt;

/// Names a policy cannot take: they mean something else in the configuration or the CLI.
pub const RESERVED_NAMES: &[&str] = &[
    "any",
    "none",
    "default",
    "kv",
    "round-robin",
    "random",
    "least-loaded",
];

/// Why a name cannot be a policy name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name holds a character outside `[A-Za-z0-9_.-]`.
    InvalidCharacter(char),
    /// The name is one of [`RESERVED_NAMES`].
    Reserved,
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("it is empty"),
            Self::InvalidCharacter(c) => write!(
                f,
                "it contains {c:?}; use only letters, digits, `_`, `.` and `-`"
            ),
            Self::Reserved => write!(
                f,
                "it is reserved (reserved names: {})",
                RESERVED_NAMES.join(", ")
            ),
        }
    }
}

impl std::error::Error for NameProblem {}

/// Checks that `name` matches `[A-Za-z0-9_.-]+`.
pub fn check_syntax(name: &str) -> Result<(), NameProblem> {
    if name.is_empty() {
        return Err(NameProblem::Empty);
    }
    match name.chars().find(|c| !is_name_char(*c)) {
        Some(c) => Err(NameProblem::InvalidCharacter(c)),
        None => Ok(()),
    }
}

/// Checks that `name` can name a policy: valid syntax and not reserved.
pub fn check_policy_name(name: &str) -> Result<(), NameProblem> {
    check_syntax(name)?;
    if RESERVED_NAMES.contains(&name) {
        return Err(NameProblem::Reserved);
    }
    Ok(())
}

/// Whether `c` may appear in a policy name.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// A valid name close to `name`: each character outside the alphabet becomes `_` (or
/// `my_policy` when nothing of `name` is left).
pub fn suggest_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .collect();
    if cleaned.chars().all(|c| c == '_') {
        "my_policy".to_owned()
    } else {
        cleaned
    }
}

/// The candidate closest to `name`, if one is close enough to be a likely typo (case is
/// ignored; transpositions count as one edit).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = name.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|candidate| {
            let distance = strsim::damerau_levenshtein(&wanted, &candidate.to_ascii_lowercase());
            (distance, candidate)
        })
        .filter(|(distance, candidate)| *distance <= (candidate.len().max(name.len()) / 3).max(2))
        .min()
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        assert_eq!(check_policy_name("kv_fetch"), Ok(()));
        assert_eq!(check_policy_name("dynamo-default-cost-fn"), Ok(()));
        assert_eq!(check_policy_name("acme.v2_fetch-1"), Ok(()));
    }

    #[test]
    fn rejects_empty_malformed_and_reserved() {
        assert_eq!(check_policy_name(""), Err(NameProblem::Empty));
        assert_eq!(
            check_policy_name("kv fetch"),
            Err(NameProblem::InvalidCharacter(' '))
        );
        assert_eq!(check_policy_name("any"), Err(NameProblem::Reserved));
        for reserved in RESERVED_NAMES {
            assert_eq!(check_syntax(reserved), Ok(()), "{reserved}");
            assert_eq!(check_policy_name(reserved), Err(NameProblem::Reserved));
        }
    }

    #[test]
    fn suggests_close_names_only() {
        let linked = ["kv_fetch", "kvcr", "dynamo-default-cost-fn"];
        assert_eq!(closest("kv_fecth", linked), Some("kv_fetch"));
        assert_eq!(
            closest("dynamo-default-cost", linked),
            Some("dynamo-default-cost-fn")
        );
        assert_eq!(closest("completely-different", linked), None);
        let arguments = ["defaults", "commits", "parameters", "crate"];
        assert_eq!(closest("comits", arguments), Some("commits"));
        assert_eq!(closest("Parameter", arguments), Some("parameters"));
    }

    #[test]
    fn suggested_names_are_valid() {
        assert_eq!(suggest_name("my prefetch"), "my_prefetch");
        assert_eq!(suggest_name("!!"), "my_policy");
        for name in ["my prefetch", "ä", "a/b", "x y z"] {
            assert_eq!(check_syntax(&suggest_name(name)), Ok(()), "{name}");
        }
    }
}
