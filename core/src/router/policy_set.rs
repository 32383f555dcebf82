//! The policies a router books with at one moment: a configuration's roles, their hint
//! policies with their failure counters, and the version that numbers the configuration. The
//! router holds it behind one atomic pointer ([`arc_swap::ArcSwap`]): a booking loads it once and
//! runs every stage under it, so replacing it ([`Router::replace_policies`](super::Router::replace_policies))
//! never splits a booking between two configurations.

use super::hint_assembly::{CountedHint, counted_hints, counted_list};
use crate::identity::{Role, WorkerId};
use crate::setup::RouterSetup;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One configuration's policies, as bookings read them.
pub(crate) struct PolicySet {
    /// The setup the configuration built.
    pub(crate) setup: Arc<RouterSetup>,
    /// Each role's hint policies with their failure counters.
    pub(crate) role_hints: BTreeMap<Role, Vec<CountedHint>>,
    /// Each role's shadows' hint policies, in shadow order, with counters of their own (a
    /// shadow's failures are not the live policies').
    pub(crate) shadow_hints: BTreeMap<Role, Vec<Vec<CountedHint>>>,
    /// 1 for the setup the router started with, one more for each replacement.
    pub(crate) version: u64,
}

impl PolicySet {
    /// The first policy set of a router.
    pub(crate) fn initial(setup: RouterSetup) -> Self {
        Self {
            role_hints: counted_hints(&setup, None),
            shadow_hints: shadow_hints(&setup),
            setup: Arc::new(setup),
            version: 1,
        }
    }

    /// The set that follows `self` with `setup`: hint policies that keep their role, type and
    /// label keep their failure counters, so `/metrics` counters never go backwards.
    pub(crate) fn successor(&self, setup: RouterSetup) -> Self {
        Self {
            role_hints: counted_hints(&setup, Some(&self.role_hints)),
            shadow_hints: shadow_hints(&setup),
            setup: Arc::new(setup),
            version: self.version + 1,
        }
    }
}

/// Each role's shadows' hint policies with fresh counters.
fn shadow_hints(setup: &RouterSetup) -> BTreeMap<Role, Vec<Vec<CountedHint>>> {
    setup
        .roles
        .iter()
        .map(|(role, policies)| {
            let shadows = policies
                .shadows
                .iter()
                .map(|shadow| counted_list(*role, &shadow.policies.hints, None))
                .collect();
            (*role, shadows)
        })
        .collect()
}

/// Why a router refused new policies. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyReplaceError {
    /// The new setup hashes prompts with a different block size than the index holds.
    #[error(
        "block_size {requested} differs from the running {running}: the index holds blocks of {running} tokens; restart the router to change the block size"
    )]
    BlockSizeChanged {
        /// The running block size.
        running: u32,
        /// The block size asked for.
        requested: u32,
    },
    /// The new setup drops a role that registered workers serve.
    #[error(
        "role `{role}` has no worker_selection entry in the new configuration, but {} registered worker(s) serve it (first: {first}); keep the role or deregister its workers first",
        .workers.len(),
        first = .workers[0]
    )]
    RoleInUse {
        /// The dropped role.
        role: Role,
        /// Its registered workers (never empty).
        workers: Vec<WorkerId>,
    },
}
