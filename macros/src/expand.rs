//! Turns a validated [`Policy`] into the item plus its link-time registration.

use crate::validate::{DefaultHost, Kind, Policy};
use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};

/// The struct, unchanged, followed by a `const` registration submitted through `inventory`.
pub fn expand(policy: &Policy, item: TokenStream) -> TokenStream {
    let private = match &policy.crate_path {
        Some(path) => quote!(#path::__private),
        None => quote!(::dynamo_kv_router::__private),
    };
    let ident = &policy.ident;
    let name = &policy.name;
    let build = build(policy, &private);
    let defaults = defaults(policy, &private);
    let commitments = commitments(policy, &private);
    let doc = doc(policy);
    let parameters_type = parameters_type(policy);
    let parameters_schema = parameters_schema(policy, &private);

    quote! {
        #item

        #[doc(hidden)]
        const _: () = {
            #parameters_schema

            const REGISTRATION: #private::PolicyRegistration = #private::PolicyRegistration {
                name: #name,
                build: #build,
                defaults: &[#(#defaults),*],
                commitments: #commitments,
                doc: #doc,
                type_name: ::core::stringify!(#ident),
                parameters_type: #parameters_type,
                parameters_schema: __parameters_schema,
                crate_name: ::core::env!("CARGO_PKG_NAME"),
                file: ::core::file!(),
                line: ::core::line!(),
            };
            #private::inventory::submit! { REGISTRATION }
        };
    }
}

/// The registration's `build`: the provider of the policy's kind.
///
/// The provider is also the check that the struct implements the policy trait (and that the
/// parameters type is `Deserialize`): its type arguments carry the user's spans, so an
/// unsatisfied bound is reported once, under the struct name or the parameters type.
fn build(policy: &Policy, private: &TokenStream) -> TokenStream {
    let ident = &policy.ident;
    let at_ident = respan(private.clone(), ident.span());
    let private_at_ident = &at_ident;
    let provider = match (policy.kind, &policy.parameters) {
        (Kind::Hint, None) => {
            quote_spanned!(ident.span()=> #private_at_ident::build_hint_from_self::<#ident>)
        }
        (Kind::Hint, Some(parameters)) => {
            quote_spanned!(ident.span()=> #private_at_ident::build_hint_via::<#ident, #parameters>)
        }
        (Kind::WorkerSelection, None) => {
            quote_spanned!(ident.span()=> #private_at_ident::build_selection_from_self::<#ident>)
        }
        (Kind::WorkerSelection, Some(parameters)) => {
            quote_spanned!(ident.span()=> #private_at_ident::build_selection_via::<#ident, #parameters>)
        }
    };
    match policy.kind {
        Kind::Hint => quote!(#private::RegisteredBuild::Hint(#provider)),
        Kind::WorkerSelection => quote!(#private::RegisteredBuild::WorkerSelection(#provider)),
    }
}

/// The default hosts, as `HintHost` values.
fn defaults(policy: &Policy, private: &TokenStream) -> Vec<TokenStream> {
    policy
        .defaults
        .iter()
        .map(|host| match host {
            DefaultHost::Any => quote!(#private::HintHost::AnyWorkerSelection),
            DefaultHost::Named(name) => {
                quote!(#private::HintHost::WorkerSelection(#private::Cow::Borrowed(#name)))
            }
        })
        .collect()
}

/// The union of the commitment constants; each keeps the user's span, so a misspelling is
/// reported under their token.
fn commitments(policy: &Policy, private: &TokenStream) -> TokenStream {
    match policy.commits.split_first() {
        None => quote!(#private::Commitments::NONE),
        Some((first, rest)) => {
            let mut tokens = quote!(#private::Commitments::#first);
            for next in rest {
                tokens = quote!(#tokens.union(#private::Commitments::#next));
            }
            tokens
        }
    }
}

/// Doc lines joined with newlines; `concat!` also expands `#[doc = include_str!(..)]`.
fn doc(policy: &Policy) -> TokenStream {
    match policy.docs.split_last() {
        None => quote!(""),
        Some((last, init)) => quote!(::core::concat!(#(#init, "\n",)* #last)),
    }
}

/// The name of the parameters type, as written.
fn parameters_type(policy: &Policy) -> TokenStream {
    let ident = &policy.ident;
    match &policy.parameters {
        Some(parameters) => {
            let text = crate::type_text::type_text(parameters);
            quote!(#text)
        }
        None => quote!(::core::stringify!(#ident)),
    }
}

/// The function recording the parameters' JSON Schema: `Some` when the parameters type (the
/// struct itself without `parameters =`) implements `JsonSchema`, `None` otherwise, by autoref
/// specialization, so a type that does not derive it still compiles and is "not described".
///
/// The type tokens keep the user's spans; an unresolved type is the same error at the same
/// place as in the provider, which rustc reports once.
fn parameters_schema(policy: &Policy, private: &TokenStream) -> TokenStream {
    let parameters = match &policy.parameters {
        Some(parameters) => quote!(#parameters),
        None => {
            let ident = &policy.ident;
            quote!(#ident)
        }
    };
    quote! {
        fn __parameters_schema() -> ::core::option::Option<#private::schemars::Schema> {
            #[allow(unused_imports)]
            use #private::{DescribedParameters as _, UndescribedParameters as _};
            (&#private::ParametersProbe::<#parameters>::NEW).parameters_schema()
        }
    }
}

/// The same tokens, every one at `span` (so a failed bound on the provider is reported there).
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let TokenTree::Group(group) = &tree {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                tree = TokenTree::Group(inner);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}
