//! The hasher of the index's maps (and of the router's tables keyed by a `u64`): keys are 64-bit
//! block hashes or serial numbers, so one folded multiply mixes them well enough (engine ids and
//! serials may be small integers) at a fraction of SipHash's cost.

use std::hash::{BuildHasher, Hasher};

/// Builds [`U64Hasher`]s.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct U64HashBuilder;

/// Mixes one `u64` key with a 128-bit folded multiply.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct U64Hasher(u64);

const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

impl BuildHasher for U64HashBuilder {
    type Hasher = U64Hasher;

    fn build_hasher(&self) -> U64Hasher {
        U64Hasher(0)
    }
}

/// Mixes one `u64` key with a 128-bit folded multiply (the hash of the index's tables).
#[inline]
pub(crate) fn mix(key: u64) -> u64 {
    let product = u128::from(key) * u128::from(MULTIPLIER);
    (product as u64) ^ ((product >> 64) as u64)
}

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(MULTIPLIER);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = self.0.rotate_left(29) ^ value;
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }
}

/// A map keyed by 64-bit hashes.
pub(crate) type U64Map<V> = std::collections::HashMap<u64, V, U64HashBuilder>;
