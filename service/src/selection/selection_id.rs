//! Fresh selection ids for bookings that came without one: UUID v4 text drawn from one
//! process-wide SplitMix64 generator, seeded from entropy once.
//!
//! `uuid::Uuid::new_v4` asks the kernel for 16 random bytes (`getrandom`) on every call, one
//! system call on the path of every gateway request and every `/select_and_reserve` without an
//! id. The generator's 128 bits per id are a bijection of its counter, so the ids of one
//! process never repeat, and two processes (router replicas) start from independent seeds.
//! The ids name bookings; they are not secrets.

use dynamo_kv_router::rng::SplitMix64;
use std::sync::LazyLock;

static IDS: LazyLock<SplitMix64> = LazyLock::new(SplitMix64::from_entropy);

/// A new selection id, as UUID v4 text (`xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`).
pub fn new_selection_id() -> String {
    selection_id_from(&IDS)
}

/// A new selection id drawn from `ids`.
fn selection_id_from(ids: &SplitMix64) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&ids.next_u64().to_le_bytes());
    bytes[8..].copy_from_slice(&ids.next_u64().to_le_bytes());
    let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
    // Written into a stack buffer: `to_string` goes through the formatting machinery.
    let mut text = uuid::Uuid::encode_buffer();
    uuid.hyphenated().encode_lower(&mut text).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_version_4_uuids() {
        for _ in 0..100 {
            let id = new_selection_id();
            let parsed = uuid::Uuid::parse_str(&id).expect("a UUID");
            assert_eq!(parsed.get_version_num(), 4, "{id}");
            assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{id}");
            assert_eq!(id, parsed.hyphenated().to_string());
        }
    }

    #[test]
    fn ids_do_not_repeat_within_a_process_or_across_seeds() {
        let ids = SplitMix64::seeded(7);
        let drawn: HashSet<String> = (0..100_000).map(|_| selection_id_from(&ids)).collect();
        assert_eq!(drawn.len(), 100_000);
        let other = SplitMix64::seeded(8);
        assert!((0..1_000).all(|_| !drawn.contains(&selection_id_from(&other))));
    }
}
