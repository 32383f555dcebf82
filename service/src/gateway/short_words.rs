//! The word table's compact half: words of up to eight bytes, each kept as the 64-bit integer
//! its bytes make, five words and their ids to a cache line.
//!
//! Enters: a word's bytes (at load, with its id; per request, to look up). Leaves: the id of
//! the word, if it is held. [`WordIds`](super::word_ids::WordIds) sends here every word
//! [`short_key`] accepts, and keeps longer ones in its own slots.
//!
//! A word of 1 to 8 bytes whose last byte is not 0 is told apart from every other such word
//! by its bytes zero-padded to eight (two words with the same padding would differ only in
//! trailing zeros, which neither has), so the key is the word itself: a lookup compares
//! integers and never reads the word again.
//!
//! A word's hash names a bucket: one 64-byte line of five keys and their five ids. A lookup
//! compares the word's key with all five at once, without a branch per slot, so a word that is
//! not first in its bucket costs nothing more (with one slot per line, a quarter of the words
//! sat past their home slot at half load, and each such probe was a branch the CPU could only
//! guess). A word goes on to the next bucket only when its own is full, which at most half
//! load is rare. The 32,000 words of the gateway bench take 1 MiB, within one core's level-2
//! cache, where 32-byte slots at most a quarter full took 4 MiB.

use super::cache_prefetch::prefetch;

/// Slots in a bucket: five keys and their ids fill one 64-byte cache line.
const BUCKET_SLOTS: usize = 5;

/// Buckets per word held, at least, times [`BUCKET_SLOTS`]: the table doubles before words
/// fill half of its slots.
const SLOTS_PER_WORD: usize = 2;

/// Words of up to eight bytes and their ids (see the module documentation).
pub(super) struct ShortWords {
    seed: u64,
    mask: usize,
    buckets: Vec<Bucket>,
    /// Words held.
    len: usize,
}

/// One cache line of the table: up to five words' keys (filled from the first; 0 marks an
/// empty slot) and their ids.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    keys: [u64; BUCKET_SLOTS],
    ids: [u32; BUCKET_SLOTS],
}

const EMPTY: Bucket = Bucket {
    keys: [0; BUCKET_SLOTS],
    ids: [0; BUCKET_SLOTS],
};

impl Bucket {
    /// The slot holding `key`, found without a branch per slot.
    #[inline(always)]
    fn slot_of(&self, key: u64) -> Option<usize> {
        let mut hit = BUCKET_SLOTS;
        for at in (0..BUCKET_SLOTS).rev() {
            hit = if self.keys[at] == key { at } else { hit };
        }
        (hit < BUCKET_SLOTS).then_some(hit)
    }

    /// Whether every slot holds a word (a word whose home this is may then be further on).
    #[inline(always)]
    fn is_full(&self) -> bool {
        self.keys[BUCKET_SLOTS - 1] != 0
    }
}

/// `word` zero-padded to eight bytes as a little-endian integer, when it is a short word: 1
/// to 8 bytes, the last of them not 0. Read with loads that overlap instead of byte by byte.
#[inline(always)]
pub(super) fn short_key(word: &[u8]) -> Option<u64> {
    let len = word.len();
    let read4 = |at: usize| u32::from_le_bytes(word[at..at + 4].try_into().expect("4 bytes"));
    let key = match len {
        1..4 => {
            let first = u64::from(word[0]);
            let middle = u64::from(word[len / 2]) << (8 * (len / 2));
            let last = u64::from(word[len - 1]) << (8 * (len - 1));
            first | middle | last
        }
        4..8 => u64::from(read4(0)) | (u64::from(read4(len - 4)) << (8 * (len - 4))),
        8 => u64::from_le_bytes(word.try_into().expect("8 bytes")),
        _ => return None,
    };
    // The byte at the word's last position must not be 0.
    (key >> (8 * (len - 1)) != 0).then_some(key)
}

/// The 128-bit product of `a` and `b`, its halves folded together with XOR: a mix in which
/// every bit of either input reaches the low bits.
#[inline(always)]
pub(super) fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    full as u64 ^ (full >> 64) as u64
}

impl ShortWords {
    /// An empty table with room for `words` words before it grows, homes picked under `seed`.
    pub(super) fn with_capacity(words: usize, seed: u64) -> Self {
        let buckets = (words * SLOTS_PER_WORD)
            .div_ceil(BUCKET_SLOTS)
            .next_power_of_two()
            .max(4);
        Self {
            seed,
            mask: buckets - 1,
            buckets: vec![EMPTY; buckets],
            len: 0,
        }
    }

    /// Words held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bucket where a search for `key` starts.
    #[inline(always)]
    pub(super) fn home(&self, key: u64) -> usize {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        folded_multiply(key ^ self.seed, K) as usize & self.mask
    }

    /// The id of the word whose key is `key`, where the table keeps it, if it is held.
    #[inline(always)]
    pub(super) fn get_ref(&self, key: u64) -> Option<&u32> {
        let mut at = self.home(key);
        loop {
            let bucket = &self.buckets[at];
            if let Some(slot) = bucket.slot_of(key) {
                return Some(&bucket.ids[slot]);
            }
            if !bucket.is_full() {
                return None;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Adds the word whose key is `key` with `id` (a later id replaces an earlier one).
    pub(super) fn insert(&mut self, key: u64, id: u32) {
        let mut at = self.home(key);
        loop {
            let bucket = &mut self.buckets[at];
            if let Some(slot) = bucket.slot_of(key) {
                bucket.ids[slot] = id;
                return;
            }
            if let Some(slot) = bucket.keys.iter().position(|held| *held == 0) {
                bucket.keys[slot] = key;
                bucket.ids[slot] = id;
                break;
            }
            at = (at + 1) & self.mask;
        }
        self.len += 1;
        if self.len * SLOTS_PER_WORD > self.buckets.len() * BUCKET_SLOTS {
            self.grow();
        }
    }

    /// Doubles the buckets.
    fn grow(&mut self) {
        let buckets = self.buckets.len() * 2;
        let old = std::mem::replace(&mut self.buckets, vec![EMPTY; buckets]);
        self.mask = buckets - 1;
        self.len = 0;
        for bucket in old {
            for (key, id) in bucket.keys.into_iter().zip(bucket.ids) {
                if key != 0 {
                    self.insert(key, id);
                }
            }
        }
    }

    /// Asks the CPU to bring in the bucket `home` (a hint only).
    #[inline(always)]
    pub(super) fn prefetch(&self, home: usize) {
        prefetch(&self.buckets[home]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_zero_padded_bytes_of_short_words_only() {
        let text = b"abcdefghi";
        for len in 1..=8 {
            let mut padded = [0u8; 8];
            padded[..len].copy_from_slice(&text[..len]);
            assert_eq!(
                short_key(&text[..len]),
                Some(u64::from_le_bytes(padded)),
                "{len} bytes"
            );
        }
        assert_eq!(short_key(b""), None);
        assert_eq!(short_key(text), None, "nine bytes");
        assert_eq!(short_key(b"a\0"), None, "a last byte of 0");
        assert_eq!(short_key(b"\0a"), Some(0x6100));
    }

    #[test]
    fn a_table_grows_and_keeps_every_word() {
        let mut table = ShortWords::with_capacity(1, 7);
        let keys: Vec<u64> = (1..=5_000u64).map(|n| n.wrapping_mul(0x1_0001)).collect();
        for (id, key) in keys.iter().enumerate() {
            table.insert(*key, id as u32);
        }
        assert_eq!(table.len(), keys.len());
        for (id, key) in keys.iter().enumerate() {
            assert_eq!(table.get_ref(*key), Some(&(id as u32)));
        }
        assert_eq!(table.get_ref(u64::MAX), None);
        table.insert(keys[3], 99);
        assert_eq!(
            (table.len(), table.get_ref(keys[3])),
            (keys.len(), Some(&99))
        );
    }

    /// The first `count` keys whose home in `table` is bucket `home`.
    fn homed(table: &ShortWords, home: usize, count: usize) -> Vec<u64> {
        (1..u64::MAX)
            .filter(|key| table.home(*key) == home)
            .take(count)
            .collect()
    }

    #[test]
    fn words_past_a_full_bucket_are_found_and_others_are_not() {
        let mut table = ShortWords::with_capacity(16, 11);
        let last = table.mask;
        // Keys whose home is the last bucket, more than it holds, so the rest wrap around to
        // the first bucket; keys whose home is that first bucket, which they share; and keys
        // of the last bucket never inserted.
        let homed_last = homed(&table, last, 2 * BUCKET_SLOTS + 4);
        let (at_last, strangers) = homed_last.split_at(BUCKET_SLOTS + 3);
        let at_first = homed(&table, 0, 2);
        let inserted: Vec<u64> = at_last.iter().chain(&at_first).copied().collect();
        for (id, key) in inserted.iter().enumerate() {
            table.insert(*key, id as u32);
        }
        assert_eq!(table.mask, last, "no growth, so the buckets overflowed");
        for (id, key) in inserted.iter().enumerate() {
            assert_eq!(table.get_ref(*key), Some(&(id as u32)), "key {key}");
        }
        for key in strangers {
            assert_eq!(table.get_ref(*key), None, "key {key} was never inserted");
        }
    }
}
