//! The policy name: a string literal without suffix that the shared name rules accept.

use super::Kind;
use crate::ctxt::Ctxt;
use dynamo_kv_router_names::{self as names, NameProblem, RESERVED_NAMES};
use proc_macro2::TokenStream;
use syn::LitStr;

pub(super) fn read_name(kind: Kind, tokens: &TokenStream, cx: &mut Ctxt) -> Option<LitStr> {
    let attribute = kind.attribute();
    let Ok(name) = syn::parse2::<LitStr>(tokens.clone()) else {
        cx.error_spanned_by(
            tokens,
            format!(
                "the policy name must be a string literal: write `#[{attribute}(\"my_policy\")]`"
            ),
        );
        return None;
    };
    if !name.suffix().is_empty() {
        cx.error_spanned_by(&name, "remove the suffix from the policy name");
        return None;
    }
    let value = name.value();
    match names::check_policy_name(&value) {
        Ok(()) => {}
        Err(NameProblem::Empty) => {
            cx.error_spanned_by(
                &name,
                format!(
                    "the policy name is empty: write a name such as `#[{attribute}(\"my_policy\")]`"
                ),
            );
            return None;
        }
        Err(NameProblem::InvalidCharacter(c)) => {
            cx.error_spanned_by(
                &name,
                format!(
                    "invalid policy name {value:?}: it contains {c:?}; use only letters, digits, `_`, `.` and `-` (for example \"{}\")",
                    names::suggest_name(&value)
                ),
            );
            return None;
        }
        Err(NameProblem::Reserved) => {
            cx.error_spanned_by(
                &name,
                format!(
                    "the policy name \"{value}\" is reserved (reserved names: {}); choose another name",
                    RESERVED_NAMES.join(", ")
                ),
            );
            return None;
        }
    }
    Some(name)
}
