//! The simulated engine's own block ids: a bijection of the sequence hash, so `kv.fetch`
//! payloads (which name engine ids) can be mapped back without a table, while still differing
//! from the sequence hash the router matches on.

const MULTIPLIER: u64 = 0xD1B5_4A32_D192_ED03;
const MASK: u64 = 0x005E_ED0F_B10C_5EED;

const fn inverse(multiplier: u64) -> u64 {
    // Newton's iteration for the inverse modulo 2^64 of an odd number.
    let mut inverse = multiplier;
    let mut step = 0;
    while step < 6 {
        inverse = inverse.wrapping_mul(2u64.wrapping_sub(multiplier.wrapping_mul(inverse)));
        step += 1;
    }
    inverse
}

const INVERSE: u64 = inverse(MULTIPLIER);

/// The engine block hash a simulated worker reports for a block with this sequence hash.
pub const fn engine_block_hash(sequence_hash: u64) -> u64 {
    sequence_hash.wrapping_mul(MULTIPLIER) ^ MASK
}

/// The sequence hash of the block with this engine block hash.
pub const fn sequence_hash_of(engine_block_hash: u64) -> u64 {
    (engine_block_hash ^ MASK).wrapping_mul(INVERSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_differs() {
        let rng = dynamo_kv_router::rng::SplitMix64::seeded(3);
        for value in [0, 1, u64::MAX]
            .into_iter()
            .chain((0..1000).map(|_| rng.next_u64()))
        {
            assert_eq!(sequence_hash_of(engine_block_hash(value)), value);
            assert_ne!(engine_block_hash(value), value);
        }
    }
}
