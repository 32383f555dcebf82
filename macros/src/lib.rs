//! Attribute macros for `dynamo-kv-router` policies. Use them through
//! `dynamo_kv_router::plugins::prelude`.

use proc_macro::TokenStream;

/// Registers a hint policy at link time.
#[proc_macro_attribute]
pub fn hint_policy(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Registers a worker-selection policy at link time.
#[proc_macro_attribute]
pub fn worker_selection_policy(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
