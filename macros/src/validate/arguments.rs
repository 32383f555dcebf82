//! The attribute's arguments after the name: `defaults`, `commits`, `parameters` and `crate`,
//! each at most once, with a suggestion for a misspelt key.

use super::{DefaultHost, Kind};
use crate::ctxt::Ctxt;
use crate::parse::RawArg;
use dynamo_kv_router_names as names;
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Ident, LitStr, Path, Type};

/// The arguments as read, before the item is checked.
pub(super) struct Arguments {
    pub(super) name: LitStr,
    pub(super) defaults: Vec<DefaultHost>,
    pub(super) commits: Vec<Ident>,
    pub(super) parameters: Option<Type>,
    pub(super) crate_path: Option<Path>,
}

/// Reads every argument in order, recording each problem; `None` when the name is unusable.
pub(super) fn read_arguments(kind: Kind, args: Vec<RawArg>, cx: &mut Ctxt) -> Option<Arguments> {
    let mut reader = Reader {
        kind,
        name: None,
        name_seen: false,
        defaults: Vec::new(),
        commits: Vec::new(),
        parameters: None,
        crate_path: None,
        seen: Vec::new(),
    };
    for arg in args {
        match arg {
            RawArg::Positional(tokens) => reader.positional(&tokens, cx),
            RawArg::Bare(ident) => reader.bare(&ident, cx),
            RawArg::Empty(comma) => {
                cx.error_spanned_by(&comma, "unexpected `,`: separate arguments with one comma");
            }
            RawArg::KeyValue { key, value } => reader.key_value(&key, &value, cx),
        }
    }
    reader.finish(cx)
}

/// What has been read so far.
struct Reader {
    kind: Kind,
    name: Option<LitStr>,
    name_seen: bool,
    defaults: Vec<DefaultHost>,
    commits: Vec<Ident>,
    parameters: Option<Type>,
    crate_path: Option<Path>,
    seen: Vec<String>,
}

impl Reader {
    /// A positional argument: the policy name, given once.
    fn positional(&mut self, tokens: &TokenStream, cx: &mut Ctxt) {
        if self.name_seen {
            let attribute = self.kind.attribute();
            cx.error_spanned_by(
                tokens,
                format!(
                    "unexpected second policy name; a policy has one name: write `#[{attribute}(\"my_policy\", ...)]`"
                ),
            );
            return;
        }
        self.name_seen = true;
        self.name = super::name::read_name(self.kind, tokens, cx);
    }

    /// A bare identifier: a key without its value, an unquoted name, or an unknown key.
    fn bare(&mut self, ident: &Ident, cx: &mut Ctxt) {
        let kind = self.kind;
        let key = ident.to_string();
        if kind.arguments().contains(&key.as_str()) {
            cx.error_spanned_by(
                ident,
                format!("`{key}` takes a value: write {}", example(kind, &key)),
            );
        } else if !self.name_seen {
            self.name_seen = true;
            let attribute = kind.attribute();
            cx.error_spanned_by(
                ident,
                format!(
                    "the policy name must be a string literal: write `#[{attribute}(\"{key}\")]`"
                ),
            );
        } else {
            cx.error_spanned_by(ident, unknown_argument(kind, &key));
        }
    }

    /// `key = value`: a known key, given once, with a value.
    fn key_value(&mut self, key: &Ident, value: &TokenStream, cx: &mut Ctxt) {
        let kind = self.kind;
        let key_name = key.to_string();
        if !kind.arguments().contains(&key_name.as_str()) {
            if key_name == "defaults" {
                cx.error_spanned_by(
                    key,
                    "`defaults` applies only to hint policies: a worker-selection policy is not run by default under another policy; remove it",
                );
            } else {
                cx.error_spanned_by(key, unknown_argument(kind, &key_name));
            }
            return;
        }
        if self.seen.contains(&key_name) {
            cx.error_spanned_by(
                key,
                format!("duplicate argument `{key_name}`; give it once"),
            );
            return;
        }
        self.seen.push(key_name.clone());
        if value.is_empty() {
            cx.error_spanned_by(
                key,
                format!(
                    "`{key_name}` is missing its value: write {}",
                    example(kind, &key_name)
                ),
            );
            return;
        }
        self.assign(&key_name, value, cx);
    }

    /// Reads the value of a known key.
    fn assign(&mut self, key: &str, value: &TokenStream, cx: &mut Ctxt) {
        match key {
            "defaults" => self.defaults = read_defaults(self.kind, value, cx),
            "commits" => self.commits = read_commits(value, cx),
            "parameters" => match syn::parse2::<Type>(value.clone()) {
                Ok(ty) => self.parameters = Some(ty),
                Err(_) => cx.error_spanned_by(
                    value,
                    "`parameters` takes the type the policy is built from: write `parameters = MyConfig`",
                ),
            },
            "crate" => match syn::parse2::<Path>(value.clone()) {
                Ok(path) => self.crate_path = Some(path),
                Err(_) => cx.error_spanned_by(
                    value,
                    "`crate` takes the path of the `dynamo_kv_router` crate: write `crate = my_renamed_router`",
                ),
            },
            _ => {}
        }
    }

    /// The arguments, once a missing name has been reported.
    fn finish(self, cx: &mut Ctxt) -> Option<Arguments> {
        if !self.name_seen {
            let attribute = self.kind.attribute();
            cx.error_at(
                Span::call_site(),
                format!("missing policy name: write `#[{attribute}(\"my_policy\")]`"),
            );
        }
        Some(Arguments {
            name: self.name?,
            defaults: self.defaults,
            commits: self.commits,
            parameters: self.parameters,
            crate_path: self.crate_path,
        })
    }
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
        match names::check_syntax(&text) {
            Ok(()) => hosts.push(DefaultHost::Named(LitStr::new(&text, span))),
            Err(problem) => cx.error_spanned_by(
                &tokens,
                format!("invalid selection policy type {text:?} in `defaults`: {problem}"),
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

/// The expected argument closest to a misspelt one, if it is a likely typo.
fn closest<'a>(key: &str, expected: &[&'a str]) -> Option<&'a str> {
    names::closest(key, expected.iter().copied())
}
