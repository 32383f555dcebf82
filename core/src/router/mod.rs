//! The run-time router: workers and their capabilities, the per-role policy setup.

pub mod setup;
pub mod worker;

pub use setup::{HintOrigin, RoleHint, RolePolicies, RouterMode, RouterSetup};
pub use worker::{Role, WorkerId};
