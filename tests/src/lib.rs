//! Workspace-level tests of `dynamo-kv-router`: the policy macros (compile-fail cases under
//! `ui/`), registration by linking, and the catalogs a linked build holds.

/// The README, whose Rust examples run here as doc tests (`cargo test -p dynamo-kv-router-tests
/// --doc`), so a README example that stops compiling fails the tests.
#[doc = include_str!("../../README.md")]
pub mod readme {}
