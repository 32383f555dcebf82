//! Judges the attribute's arguments and the item it is placed on, collecting every error under
//! the token that caused it, and produces the [`Policy`] that `expand` turns into code.
//!
//! The checks are split by what they read: `arguments` (the attribute's arguments after the
//! name), `name` (the policy name, by the rules of `dynamo-kv-router-names`) and `item` (the
//! struct the attribute is placed on).

mod arguments;
mod item;
mod name;

use crate::ctxt::Ctxt;
use crate::parse::RawArg;
use proc_macro2::Span;
use syn::{Expr, Ident, Item, LitStr, Path, Type};

/// Which attribute is being expanded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `#[hint_policy]`.
    Hint,
    /// `#[worker_selection_policy]`.
    WorkerSelection,
}

impl Kind {
    /// The attribute's name.
    pub fn attribute(self) -> &'static str {
        match self {
            Kind::Hint => "hint_policy",
            Kind::WorkerSelection => "worker_selection_policy",
        }
    }

    /// The trait the annotated struct must implement.
    fn trait_name(self) -> &'static str {
        match self {
            Kind::Hint => "HintPolicy",
            Kind::WorkerSelection => "WorkerSelectionPolicy",
        }
    }

    /// The manual registration method, for messages that suggest it.
    fn register_method(self) -> &'static str {
        match self {
            Kind::Hint => "register_hint_policy",
            Kind::WorkerSelection => "register_worker_selection_policy",
        }
    }

    /// The arguments this attribute accepts after the name.
    fn arguments(self) -> &'static [&'static str] {
        match self {
            Kind::Hint => &["defaults", "commits", "parameters", "crate"],
            Kind::WorkerSelection => &["commits", "parameters", "crate"],
        }
    }
}

/// A selection policy a hint policy runs under by default.
pub enum DefaultHost {
    /// `any`: every selection policy.
    Any,
    /// A selection policy type name.
    Named(LitStr),
}

/// A validated attribute on a validated struct.
pub struct Policy {
    /// Which attribute.
    pub kind: Kind,
    /// The policy name.
    pub name: LitStr,
    /// Default hosts (hint policies only).
    pub defaults: Vec<DefaultHost>,
    /// The commitment constants, each with the user's span.
    pub commits: Vec<Ident>,
    /// A separate parameters type, if given.
    pub parameters: Option<Type>,
    /// The path of the runtime crate, if overridden.
    pub crate_path: Option<Path>,
    /// The struct's name.
    pub ident: Ident,
    /// The values of the struct's `#[doc]` attributes, in order.
    pub docs: Vec<Expr>,
}

/// Checks the arguments and the item; returns every problem combined.
pub fn validate(kind: Kind, args: Vec<RawArg>, item: &Item) -> syn::Result<Policy> {
    let mut cx = Ctxt::default();
    let arguments = arguments::read_arguments(kind, args, &mut cx);
    let target = item::read_item(kind, item, &mut cx);
    cx.check()?;
    match (arguments, target) {
        (Some(arguments), Some((ident, docs))) => Ok(Policy {
            kind,
            name: arguments.name,
            defaults: arguments.defaults,
            commits: arguments.commits,
            parameters: arguments.parameters,
            crate_path: arguments.crate_path,
            ident,
            docs,
        }),
        // Every path that yields `None` records an error first.
        _ => Err(syn::Error::new(
            Span::call_site(),
            format!("`#[{}]` could not be read", kind.attribute()),
        )),
    }
}
