//! How a provider hands out policy instances: one shared by all partitions, or one per partition.

use super::{HintPolicy, ParameterError, WorkerSelectionPolicy};
use crate::identity::Role;
use std::sync::Arc;

/// The partition (role entry) a policy instance is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The role.
    pub role: Role,
    /// Tokens per KV block in this router.
    pub block_size: u32,
}

type BuildFn<P> = dyn Fn(&Partition) -> Result<Arc<P>, ParameterError> + Send + Sync;

/// Hands out instances of a policy trait object `P` for the partitions that configure it.
pub struct PolicyConstructor<P: ?Sized> {
    build: ConstructorKind<P>,
}

enum ConstructorKind<P: ?Sized> {
    Shared(Arc<P>),
    PerPartition(Box<BuildFn<P>>),
}

/// The constructor a hint-policy provider returns.
pub type HintPolicyConstructor = PolicyConstructor<dyn HintPolicy>;

/// The constructor a worker-selection provider returns.
pub type WorkerSelectionConstructor = PolicyConstructor<dyn WorkerSelectionPolicy>;

impl<P: ?Sized> PolicyConstructor<P> {
    /// The instance for `partition`: the shared one, or a new one built for it.
    pub fn construct(&self, partition: &Partition) -> Result<Arc<P>, ParameterError> {
        match &self.build {
            ConstructorKind::Shared(policy) => Ok(Arc::clone(policy)),
            ConstructorKind::PerPartition(build) => build(partition),
        }
    }

    /// Whether one instance is shared by every partition.
    pub fn is_shared(&self) -> bool {
        matches!(self.build, ConstructorKind::Shared(_))
    }
}

/// The constructors of one policy trait object: `shared` and `per_partition`, the same for
/// both kinds of policy.
macro_rules! constructors {
    ($policy:ident) => {
        impl PolicyConstructor<dyn $policy> {
            /// One instance, shared by every role that configures the policy with these
            /// parameters.
            pub fn shared(policy: impl $policy + 'static) -> Self {
                Self {
                    build: ConstructorKind::Shared(Arc::new(policy)),
                }
            }

            /// A new instance for each role, built by `build` at startup.
            pub fn per_partition<T>(
                build: impl Fn(&Partition) -> Result<T, ParameterError> + Send + Sync + 'static,
            ) -> Self
            where
                T: $policy + 'static,
            {
                Self {
                    build: ConstructorKind::PerPartition(Box::new(move |partition| {
                        Ok(Arc::new(build(partition)?) as Arc<dyn $policy>)
                    })),
                }
            }
        }
    };
}

constructors!(HintPolicy);
constructors!(WorkerSelectionPolicy);
