//! Workspace-level tests of `dynamo-kv-router`: the policy macros (compile-fail cases under
//! `ui/`), registration by linking, and the catalogs a linked build holds.
