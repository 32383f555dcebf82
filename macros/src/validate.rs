//! Judges the attribute's arguments and the item it is placed on, collecting every error under
//! the token that caused it, and produces the [`Policy`] that `expand` turns into code.

use crate::ctxt::Ctxt;
use crate::parse::RawArg;
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
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

/// Names a policy cannot take. Mirrors `RESERVED_NAMES` in `core/src/plugins/name.rs` (a test
/// in the workspace test crate keeps the two lists equal).
pub const RESERVED_NAMES: &[&str] = &[
    "any",
    "none",
    "default",
    "kv",
    "round-robin",
    "random",
    "least-loaded",
];

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
    let arguments = read_arguments(kind, args, &mut cx);
    let target = read_item(kind, item, &mut cx);
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

struct Arguments {
    name: LitStr,
    defaults: Vec<DefaultHost>,
    commits: Vec<Ident>,
    parameters: Option<Type>,
    crate_path: Option<Path>,
}

fn read_arguments(kind: Kind, args: Vec<RawArg>, cx: &mut Ctxt) -> Option<Arguments> {
    let attribute = kind.attribute();
    let mut name: Option<LitStr> = None;
    let mut name_seen = false;
    let mut defaults = Vec::new();
    let mut commits = Vec::new();
    let mut parameters = None;
    let mut crate_path = None;
    let mut seen: Vec<String> = Vec::new();

    for arg in args {
        match arg {
            RawArg::Positional(tokens) => {
                if name_seen {
                    cx.error_spanned_by(
                        &tokens,
                        format!(
                            "unexpected second policy name; a policy has one name: write `#[{attribute}(\"my_policy\", ...)]`"
                        ),
                    );
                    continue;
                }
                name_seen = true;
                name = read_name(kind, &tokens, cx);
            }
            RawArg::Bare(ident) => {
                let key = ident.to_string();
                if kind.arguments().contains(&key.as_str()) {
                    cx.error_spanned_by(
                        &ident,
                        format!("`{key}` takes a value: write {}", example(kind, &key)),
                    );
                } else if !name_seen {
                    name_seen = true;
                    cx.error_spanned_by(
                        &ident,
                        format!(
                            "the policy name must be a string literal: write `#[{attribute}(\"{key}\")]`"
                        ),
                    );
                } else {
                    cx.error_spanned_by(&ident, unknown_argument(kind, &key));
                }
            }
            RawArg::Empty(comma) => {
                cx.error_spanned_by(&comma, "unexpected `,`: separate arguments with one comma");
            }
            RawArg::KeyValue { key, value } => {
                let key_name = key.to_string();
                if !kind.arguments().contains(&key_name.as_str()) {
                    if key_name == "defaults" {
                        cx.error_spanned_by(
                            &key,
                            "`defaults` applies only to hint policies: a worker-selection policy is not run by default under another policy; remove it",
                        );
                    } else {
                        cx.error_spanned_by(&key, unknown_argument(kind, &key_name));
                    }
                    continue;
                }
                if seen.contains(&key_name) {
                    cx.error_spanned_by(
                        &key,
                        format!("duplicate argument `{key_name}`; give it once"),
                    );
                    continue;
                }
                seen.push(key_name.clone());
                if value.is_empty() {
                    cx.error_spanned_by(
                        &key,
                        format!(
                            "`{key_name}` is missing its value: write {}",
                            example(kind, &key_name)
                        ),
                    );
                    continue;
                }
                match key_name.as_str() {
                    "defaults" => defaults = read_defaults(kind, &value, cx),
                    "commits" => commits = read_commits(&value, cx),
                    "parameters" => match syn::parse2::<Type>(value.clone()) {
                        Ok(ty) => parameters = Some(ty),
                        Err(_) => cx.error_spanned_by(
                            &value,
                            "`parameters` takes the type the policy is built from: write `parameters = MyConfig`",
                        ),
                    },
                    "crate" => match syn::parse2::<Path>(value.clone()) {
                        Ok(path) => crate_path = Some(path),
                        Err(_) => cx.error_spanned_by(
                            &value,
                            "`crate` takes the path of the `dynamo_kv_router` crate: write `crate = my_renamed_router`",
                        ),
                    },
                    _ => {}
                }
            }
        }
    }

    if !name_seen {
        cx.error_at(
            Span::call_site(),
            format!("missing policy name: write `#[{attribute}(\"my_policy\")]`"),
        );
    }
    Some(Arguments {
        name: name?,
        defaults,
        commits,
        parameters,
        crate_path,
    })
}

fn example(kind: Kind, key: &str) -> String {
    match key {
        "defaults" => "`defaults = [kvcr]` (selection policy types, or `any`)".to_owned(),
        "commits" => "`commits = KV_COPY`".to_owned(),
        "parameters" => "`parameters = MyConfig`".to_owned(),
        "crate" => "`crate = my_renamed_router`".to_owned(),
        _ => format!("`#[{}(\"my_policy\")]`", kind.attribute()),
    }
}

fn unknown_argument(kind: Kind, key: &str) -> String {
    let expected = kind.arguments();
    let mut message = format!(
        "unknown argument `{key}`, expected one of: {}",
        expected.join(", ")
    );
    if let Some(close) = closest(key, expected) {
        message.push_str(&format!("; did you mean `{close}`?"));
    }
    message
}

fn read_name(kind: Kind, tokens: &TokenStream, cx: &mut Ctxt) -> Option<LitStr> {
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
    match check_name(&value) {
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
                    suggest_name(&value)
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

fn read_defaults(kind: Kind, value: &TokenStream, cx: &mut Ctxt) -> Vec<DefaultHost> {
    let mut trees = value.clone().into_iter();
    let (Some(TokenTree::Group(group)), None) = (trees.next(), trees.next()) else {
        cx.error_spanned_by(value, defaults_not_a_list(kind, value));
        return Vec::new();
    };
    if group.delimiter() != proc_macro2::Delimiter::Bracket {
        cx.error_spanned_by(value, defaults_not_a_list(kind, &group.stream()));
        return Vec::new();
    }
    let mut hosts = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for element in crate::parse::parse_args(group.stream()) {
        let (tokens, text, span) = match element {
            RawArg::Bare(ident) => {
                let text = ident.to_string();
                (ident.to_token_stream(), text, ident.span())
            }
            RawArg::Positional(tokens) => match syn::parse2::<LitStr>(tokens.clone()) {
                Ok(lit) => (tokens, lit.value(), lit.span()),
                Err(_) => {
                    cx.error_spanned_by(
                        &tokens,
                        "a default is a selection policy type: write an identifier (`kvcr`), a string (`\"dynamo-default-cost-fn\"`) or `any`",
                    );
                    continue;
                }
            },
            RawArg::KeyValue { key, value } => {
                let tokens = quote::quote!(#key = #value);
                cx.error_spanned_by(
                    &tokens,
                    "a default is a selection policy type: write an identifier (`kvcr`), a string (`\"dynamo-default-cost-fn\"`) or `any`",
                );
                continue;
            }
            RawArg::Empty(comma) => {
                cx.error_spanned_by(&comma, "unexpected `,`: separate defaults with one comma");
                continue;
            }
        };
        if names.contains(&text) {
            cx.error_spanned_by(
                &tokens,
                format!("`{text}` is listed twice in `defaults`; list it once"),
            );
            continue;
        }
        names.push(text.clone());
        if text == "any" {
            hosts.push(DefaultHost::Any);
            continue;
        }
        match check_syntax(&text) {
            Ok(()) => hosts.push(DefaultHost::Named(LitStr::new(&text, span))),
            Err(problem) => cx.error_spanned_by(
                &tokens,
                format!(
                    "invalid selection policy type {text:?} in `defaults`: {}",
                    problem.describe()
                ),
            ),
        }
    }
    hosts
}

fn defaults_not_a_list(kind: Kind, inner: &TokenStream) -> String {
    let attribute = kind.attribute();
    let shown = inner.to_string();
    if shown.is_empty() {
        format!(
            "`defaults` takes a list in brackets: write `#[{attribute}(\"my_policy\", defaults = [kvcr])]`"
        )
    } else {
        format!("`defaults` takes a list in brackets: write `defaults = [{shown}]`")
    }
}

fn read_commits(value: &TokenStream, cx: &mut Ctxt) -> Vec<Ident> {
    let mut commits = Vec::new();
    let mut expect_ident = true;
    for tree in value.clone() {
        match (&tree, expect_ident) {
            (TokenTree::Ident(ident), true) => {
                commits.push(ident.clone());
                expect_ident = false;
            }
            (TokenTree::Punct(punct), false) if punct.as_char() == '|' => expect_ident = true,
            _ => {
                cx.error_spanned_by(
                    value,
                    "`commits` takes the name of a `Commitments` constant: write `commits = KV_COPY`",
                );
                return Vec::new();
            }
        }
    }
    if expect_ident {
        cx.error_spanned_by(
            value,
            "`commits` takes the name of a `Commitments` constant: write `commits = KV_COPY`",
        );
        return Vec::new();
    }
    commits
}

/// Returns the struct's name and doc comments, or records why the item cannot be registered.
fn read_item(kind: Kind, item: &Item, cx: &mut Ctxt) -> Option<(Ident, Vec<Expr>)> {
    let attribute = kind.attribute();
    let trait_name = kind.trait_name();
    let method = kind.register_method();
    let not_a_struct = |what: &str| {
        format!(
            "`#[{attribute}]` goes on a struct, not on {what}: registration needs one concrete policy type that implements `{trait_name}`; put the attribute on that struct, or register by hand with `registry.{method}(...)`"
        )
    };
    match item {
        Item::Struct(item) => {
            if !item.generics.params.is_empty() {
                cx.error_spanned_by(
                    &item.generics,
                    format!(
                        "`#[{attribute}]` cannot register a generic struct: registration needs one concrete type, and `{}` has generic parameters; remove them, or register each instantiation by hand with `registry.{method}(...)`",
                        item.ident
                    ),
                );
                return None;
            }
            let docs = item
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("doc"))
                .filter_map(|attr| match &attr.meta {
                    syn::Meta::NameValue(doc) => Some(doc.value.clone()),
                    _ => None,
                })
                .collect();
            Some((item.ident.clone(), docs))
        }
        Item::Enum(item) => {
            let (keyword, ident) = (&item.enum_token, &item.ident);
            let head = quote::quote!(#keyword #ident);
            cx.error_spanned_by(head, not_a_struct("an enum"));
            None
        }
        Item::Fn(item) => {
            let (keyword, ident) = (&item.sig.fn_token, &item.sig.ident);
            let head = quote::quote!(#keyword #ident);
            cx.error_spanned_by(head, not_a_struct("a function"));
            None
        }
        Item::Union(item) => {
            let (keyword, ident) = (&item.union_token, &item.ident);
            let head = quote::quote!(#keyword #ident);
            cx.error_spanned_by(head, not_a_struct("a union"));
            None
        }
        Item::Trait(item) => {
            let (keyword, ident) = (&item.trait_token, &item.ident);
            let head = quote::quote!(#keyword #ident);
            cx.error_spanned_by(head, not_a_struct("a trait"));
            None
        }
        other => {
            cx.error_spanned_by(other, not_a_struct("this item"));
            None
        }
    }
}

/// Why a string cannot be a policy name.
pub enum NameProblem {
    Empty,
    InvalidCharacter(char),
    Reserved,
}

impl NameProblem {
    fn describe(&self) -> String {
        match self {
            NameProblem::Empty => "it is empty".to_owned(),
            NameProblem::InvalidCharacter(c) => {
                format!("it contains {c:?}; use only letters, digits, `_`, `.` and `-`")
            }
            NameProblem::Reserved => format!("it is reserved ({})", RESERVED_NAMES.join(", ")),
        }
    }
}

/// `[A-Za-z0-9_.-]+`, as `check_syntax` in `core/src/plugins/name.rs`.
fn check_syntax(name: &str) -> Result<(), NameProblem> {
    if name.is_empty() {
        return Err(NameProblem::Empty);
    }
    match name.chars().find(|c| !is_name_char(*c)) {
        Some(c) => Err(NameProblem::InvalidCharacter(c)),
        None => Ok(()),
    }
}

fn check_name(name: &str) -> Result<(), NameProblem> {
    check_syntax(name)?;
    if RESERVED_NAMES.contains(&name) {
        return Err(NameProblem::Reserved);
    }
    Ok(())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

fn suggest_name(name: &str) -> String {
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

/// The expected argument closest to a misspelt one, if it is a likely typo.
fn closest<'a>(key: &str, expected: &[&'a str]) -> Option<&'a str> {
    expected
        .iter()
        .map(|candidate| (edit_distance(key, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len() / 3).max(1))
        .min()
        .map(|(_, candidate)| candidate)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}
