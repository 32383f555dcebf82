//! The three identities of a KV block, each its own type so they are never mixed up:
//!
//! - [`LocalBlockHash`]: a block's own content (its tokens, salted by the request identity,
//!   plus its multimodal objects), not chained. What an upstream KV event carries as
//!   `tokens_hash`.
//! - [`SequenceHash`]: a block chained with every block before it, so equal sequence hashes
//!   mean equal prefixes. What the index matches requests on.
//! - [`EngineBlockHash`]: the engine's own id for a block (upstream's
//!   `ExternalSequenceBlockHash`, `block_hash` in events). What `removed`, `parent_hash` and
//!   `kv.fetch` payloads name.
//!
//! All three serialise as a bare `u64`, as upstream writes them.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! block_identity {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        #[repr(transparent)]
        pub struct $name(pub u64);

        impl $name {
            /// The hash as a plain `u64`.
            #[inline]
            pub const fn get(self) -> u64 {
                self.0
            }

            /// Views a slice of these hashes as the plain `u64`s they wrap.
            #[inline]
            pub fn as_u64s(hashes: &[$name]) -> &[u64] {
                // SAFETY: the type is `repr(transparent)` over `u64`, so a slice of it has the
                // layout of a slice of `u64` of the same length; the result borrows `hashes`.
                unsafe { std::slice::from_raw_parts(hashes.as_ptr().cast::<u64>(), hashes.len()) }
            }

            /// Views a slice of plain `u64`s as these hashes.
            #[inline]
            pub fn from_u64s(hashes: &[u64]) -> &[$name] {
                // SAFETY: as in `as_u64s`, in the other direction.
                unsafe { std::slice::from_raw_parts(hashes.as_ptr().cast::<$name>(), hashes.len()) }
            }
        }

        impl From<u64> for $name {
            fn from(hash: u64) -> Self {
                Self(hash)
            }
        }

        impl From<$name> for u64 {
            fn from(hash: $name) -> u64 {
                hash.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

block_identity!(
    /// A block's local hash: its own tokens (and multimodal objects) under the request's salt,
    /// not chained with the blocks before it (upstream `LocalBlockHash`, an event's `tokens_hash`).
    LocalBlockHash
);

block_identity!(
    /// A block's sequence hash: its local hash chained with every block before it (upstream
    /// `SequenceHash`). Equal sequence hashes mean equal prefixes; the index matches on these.
    SequenceHash
);

block_identity!(
    /// The engine's own id for a block (upstream `ExternalSequenceBlockHash`, `block_hash` in
    /// events): what `removed`, `parent_hash` and `kv.fetch` payloads name.
    EngineBlockHash
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_serialise_as_bare_integers() {
        assert_eq!(
            serde_json::to_string(&EngineBlockHash(u64::MAX)).ok(),
            Some(u64::MAX.to_string())
        );
        assert_eq!(
            serde_json::from_str::<LocalBlockHash>("15310707395893867146").ok(),
            Some(LocalBlockHash(15310707395893867146))
        );
        assert!(serde_json::from_str::<SequenceHash>("-1").is_err());
    }

    #[test]
    fn slices_view_both_ways() {
        let hashes = [SequenceHash(1), SequenceHash(2)];
        assert_eq!(SequenceHash::as_u64s(&hashes), &[1, 2]);
        assert_eq!(
            SequenceHash::from_u64s(&[3, 4]),
            &[SequenceHash(3), SequenceHash(4)]
        );
    }
}
