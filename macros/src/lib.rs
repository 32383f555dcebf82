//! Attribute macros that register `dynamo-kv-router` policies at link time.
//!
//! Use them through `dynamo_kv_router::plugins::prelude` (`#[hint_policy]` and
//! `#[worker_selection_policy]`); a plugin crate depends on `dynamo-kv-router` alone. Each
//! attribute leaves the struct unchanged and adds a `const` registration record that
//! `PolicyRegistry::linked()` finds in any binary that links the crate.

mod ctxt;
mod expand;
mod parse;
mod type_text;
mod validate;

use proc_macro::TokenStream;
use validate::Kind;

/// Registers a hint policy at link time under a configuration name.
///
/// Put it on a struct that implements `HintPolicy`:
///
/// ```ignore
/// use dynamo_kv_router::plugins::prelude::*;
///
/// /// Prefetches the session's blocks.
/// #[hint_policy("harness_prefetch", defaults = [kvcr])]
/// #[derive(Deserialize)]
/// struct HarnessPrefetch {
///     max_blocks: usize,
/// }
///
/// impl HintPolicy for HarnessPrefetch {
///     fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
///         Ok(Vec::new())
///     }
/// }
/// ```
///
/// Arguments (the name first, the rest in any order, each at most once):
///
/// - `"name"` (required): the `type` used in the configuration; `[A-Za-z0-9_.-]+`, not a
///   reserved name (`any`, `none`, `default`, `kv`, `round-robin`, `random`, `least-loaded`).
/// - `defaults = [kvcr, "dynamo-default-cost-fn", any]`: the worker-selection policy types
///   under which the hint runs in a role entry without a `hints` key; `any` means every one.
///   Absent or `[]`: it runs only where a role lists it.
/// - `commits = KV_COPY`: the `Commitments` the policy sends (constants joined with `|`); a
///   policy that sends committed KV copies declares `KV_COPY`.
/// - `parameters = MyConfig`: the policy is built from a separate parameters type through
///   `TryFrom<MyConfig>` (a `From` impl works; the error type must be `Display`), and `MyConfig`
///   derives `Deserialize`. Without it the struct is its own parameters type and derives
///   `Deserialize`. Unknown parameter fields are rejected either way.
/// - `crate = path`: the path of the `dynamo-kv-router` crate when the dependency is renamed
///   (for example `crate = kvr` for `kvr = { package = "dynamo-kv-router", ... }`).
///
/// The struct's doc comment becomes the policy's description; its first paragraph is the
/// summary shown in listings. One instance is built per distinct `parameters` and shared by
/// every role that uses them; register by hand with `PolicyRegistry::register_hint_policy` for
/// a per-role constructor.
#[proc_macro_attribute]
pub fn hint_policy(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(Kind::Hint, args.into(), item.into()).into()
}

/// Registers a worker-selection policy at link time under a configuration name.
///
/// Put it on a struct that implements `WorkerSelectionPolicy`:
///
/// ```ignore
/// use dynamo_kv_router::plugins::prelude::*;
///
/// /// Always picks the first candidate.
/// #[worker_selection_policy("first_worker")]
/// #[derive(Deserialize)]
/// struct FirstWorker {}
///
/// impl WorkerSelectionPolicy for FirstWorker {
///     fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
///         let first = context.candidates().first().ok_or_else(|| PolicyError::new("no candidates"))?;
///         Ok(Selection::worker(first.worker))
///     }
/// }
/// ```
///
/// Arguments are those of [`macro@hint_policy`] without `defaults`: `"name"` (required),
/// `commits = KV_COPY` (declares that the policy may commit the booked worker to a KV copy;
/// the instance's `commitments()` says whether it does as configured), `parameters = MyConfig`,
/// and `crate = path`.
#[proc_macro_attribute]
pub fn worker_selection_policy(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(Kind::WorkerSelection, args.into(), item.into()).into()
}

fn entry(
    kind: Kind,
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    // An item that does not parse gets the compiler's own syntax error; adding ours would only
    // repeat it.
    let Ok(parsed) = syn::parse2::<syn::Item>(item.clone()) else {
        return item;
    };
    let args = parse::parse_args(args);
    match validate::validate(kind, args, &parsed) {
        Ok(policy) => expand::expand(&policy, item),
        Err(errors) => {
            // The item is still emitted, so one mistake in the attribute gives one error and no
            // cascade of "cannot find type" errors where the struct is used.
            let errors = errors.to_compile_error();
            quote::quote!(#item #errors)
        }
    }
}
