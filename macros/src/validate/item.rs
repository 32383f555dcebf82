//! The item under the attribute: a non-generic struct, whose name and doc comments the
//! registration records.

use super::Kind;
use crate::ctxt::Ctxt;
use syn::{Expr, Ident, Item};

/// Returns the struct's name and doc comments, or records why the item cannot be registered.
pub(super) fn read_item(kind: Kind, item: &Item, cx: &mut Ctxt) -> Option<(Ident, Vec<Expr>)> {
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
