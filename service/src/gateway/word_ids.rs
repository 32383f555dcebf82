//! A table from short strings to ids built for prompts: a `WordLevel` vocabulary (word in, id
//! out), and the direct encoder's cache of BPE pieces.
//!
//! Enters: at load, a `WordLevel` model's `(word, id)` pairs (or, as pieces are met, a piece
//! and a value); per request, the words of a text (already cut, or cut here by
//! [`whitespace_words`](super::whitespace_words)). Leaves: their ids, or the unknown token's
//! for a word not in the vocabulary.
//!
//! Words of up to eight bytes (most words of a prompt, and every word of a vocabulary like
//! `w0`…`w31999`) live in `ShortWords` (`short_words.rs`), where the word is its own 64-bit
//! key, five to a cache line. Longer ones live here, in an open-addressing table with 32-byte
//! slots (two per cache line), at most a quarter full. A word of up to 16 bytes lives in its
//! slot as one zero-padded 128-bit key, so a lookup reads it with two overlapping loads,
//! hashes the key with two multiplications and compares it in one instruction; a longer word
//! is hashed with XXH3 and kept in a shared buffer. A word's slot is prefetched when the word
//! is cut and read sixteen words later, so a prompt's cache misses overlap instead of queueing
//! one after another.

use super::cache_prefetch::prefetch;
use super::short_words::{ShortWords, folded_multiply, short_key};
use super::unsupported_tokenizer::Unsupported;
use super::whitespace_words::for_each_word;
use std::borrow::Cow;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Words up to this many bytes live in their slot.
const INLINE_WORD: usize = 16;

/// How many words after its prefetch a word's slot is read.
const LOOKUP_DISTANCE: usize = 16;

/// Slots per long word held, at least: their table doubles before they fill a quarter of its
/// slots. At that load most words sit in their home slot, and a prompt's lookups took about a
/// quarter less time than at half (`benches/tokenizer.rs`).
const SLOTS_PER_WORD: usize = 4;

/// Long words' slots the table starts with; it doubles as they come.
const FIRST_LONG_SLOTS: usize = 64;

/// A word-level vocabulary (see the module documentation).
pub struct WordIds {
    seed: u64,
    /// Words of up to eight bytes.
    short: ShortWords,
    mask: usize,
    /// Longer words' slots.
    slots: Vec<WordSlot>,
    long_words: Vec<u8>,
    /// Longer words held; their table doubles before they fill a quarter of its slots.
    long_len: usize,
}

#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct WordSlot {
    /// The word's hash with the top bit set (0 marks an empty slot).
    tag: u64,
    id: u32,
    len: u32,
    /// The word zero-padded, little-endian, when it fits; else its offset in `long_words`.
    key: u128,
}

const EMPTY: WordSlot = WordSlot {
    tag: 0,
    id: 0,
    len: 0,
    key: 0,
};

/// A longer word as the table looks it up: its tag and, for a word of up to 16 bytes, its key.
#[derive(Clone, Copy)]
struct Probe {
    tag: u64,
    key: u128,
}

/// A word waiting for its lookup: a short word's key, or a longer word's probe.
#[derive(Clone, Copy)]
enum Waiting {
    Short(u64),
    Long(Probe),
}

impl WordIds {
    /// An empty table with room for `words` short words before it grows (longer words' slots
    /// grow as they come).
    pub fn with_capacity(words: usize) -> Self {
        use std::hash::{BuildHasher, RandomState};
        let seed = RandomState::new().hash_one(0u8);
        Self {
            seed,
            short: ShortWords::with_capacity(words, seed.rotate_left(17)),
            mask: FIRST_LONG_SLOTS - 1,
            slots: vec![EMPTY; FIRST_LONG_SLOTS],
            long_words: Vec::new(),
            long_len: 0,
        }
    }

    /// Words held.
    pub fn len(&self) -> usize {
        self.short.len() + self.long_len
    }

    /// Whether no word is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    fn probe(&self, word: &[u8]) -> Probe {
        match inline_key(word) {
            Some(key) => Probe {
                tag: short_hash(key, word.len(), self.seed) | (1 << 63),
                key,
            },
            None => Probe {
                tag: xxh3_64_with_seed(word, self.seed) | (1 << 63),
                key: 0,
            },
        }
    }

    #[inline(always)]
    fn holds(&self, slot: &WordSlot, probe: Probe, word: &[u8]) -> bool {
        if slot.tag != probe.tag || slot.len as usize != word.len() {
            return false;
        }
        if word.len() <= INLINE_WORD {
            return slot.key == probe.key;
        }
        let start = slot.key as usize;
        self.long_words[start..start + word.len()] == *word
    }

    /// The slot holding `word`, or the empty one where it would go (the table is never full:
    /// it grows before a quarter of its slots hold words).
    #[inline(always)]
    fn position(&self, probe: Probe, word: &[u8]) -> usize {
        let mut at = probe.tag as usize & self.mask;
        loop {
            let slot = &self.slots[at];
            if slot.tag == 0 || self.holds(slot, probe, word) {
                return at;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Adds `word` (a later id for the same word replaces the earlier, as in a JSON object).
    pub fn insert(&mut self, word: &str, id: u32) -> Result<(), Unsupported> {
        let bytes = word.as_bytes();
        if let Some(key) = short_key(bytes) {
            self.short.insert(key, id);
            return Ok(());
        }
        let len = u32::try_from(bytes.len())
            .map_err(|_| Unsupported(format!("a word of {} bytes", bytes.len())))?;
        let probe = self.probe(bytes);
        let at = self.position(probe, bytes);
        if self.slots[at].tag != 0 {
            self.slots[at].id = id;
            return Ok(());
        }
        let key = match bytes.len() <= INLINE_WORD {
            true => probe.key,
            false => {
                let offset = self.long_words.len() as u128;
                self.long_words.extend_from_slice(bytes);
                offset
            }
        };
        self.slots[at] = WordSlot {
            tag: probe.tag,
            id,
            len,
            key,
        };
        self.long_len += 1;
        if self.long_len * SLOTS_PER_WORD > self.slots.len() {
            self.grow();
        }
        Ok(())
    }

    /// Doubles the slots, each word moved by the tag it keeps (nothing is hashed again).
    fn grow(&mut self) {
        let slots = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; slots]);
        self.mask = slots - 1;
        for slot in old.into_iter().filter(|slot| slot.tag != 0) {
            let mut at = slot.tag as usize & self.mask;
            while self.slots[at].tag != 0 {
                at = (at + 1) & self.mask;
            }
            self.slots[at] = slot;
        }
    }

    /// The id of `word`, if it is in the vocabulary.
    pub fn get(&self, word: &str) -> Option<u32> {
        self.get_ref(word).copied()
    }

    /// The id of `word` where the table keeps it, if it is in the vocabulary.
    #[inline(always)]
    pub fn get_ref(&self, word: &str) -> Option<&u32> {
        let bytes = word.as_bytes();
        if let Some(key) = short_key(bytes) {
            return self.short.get_ref(key);
        }
        let slot = &self.slots[self.position(self.probe(bytes), bytes)];
        (slot.tag != 0).then_some(&slot.id)
    }

    /// The ids of `words` (`unknown` for a word not in the vocabulary) appended to `ids`;
    /// `None` when a word is unknown and there is no unknown token.
    pub fn extend_ids(
        &self,
        words: &[Cow<'_, str>],
        unknown: Option<u32>,
        ids: &mut Vec<u32>,
    ) -> Option<()> {
        let mut batch = Batch::new(self, unknown);
        for word in words {
            batch.push(word.as_bytes(), ids)?;
        }
        batch.finish(ids)
    }

    /// The ids of `text`'s whitespace-separated words (`tokenizers`' `WhitespaceSplit`
    /// followed by this model) appended to `ids`; `None` as [`extend_ids`](Self::extend_ids).
    pub fn extend_whitespace_words(
        &self,
        text: &str,
        unknown: Option<u32>,
        ids: &mut Vec<u32>,
    ) -> Option<()> {
        let mut batch = Batch::new(self, unknown);
        let mut known = true;
        let bytes = text.as_bytes();
        for_each_word(text, |start, end| {
            if known {
                known = batch.push(&bytes[start..end], ids).is_some();
            }
        });
        known.then_some(())?;
        batch.finish(ids)
    }
}

/// The last [`LOOKUP_DISTANCE`] words, whose slots were prefetched when they were pushed: a
/// word is looked up when the one that many words after it is pushed, so every lookup comes
/// the same distance after its prefetch.
struct Batch<'t, 'w> {
    table: &'t WordIds,
    unknown: Option<u32>,
    words: [&'w [u8]; LOOKUP_DISTANCE],
    waiting: [Waiting; LOOKUP_DISTANCE],
    /// Words pushed so far.
    pushed: usize,
}

impl<'t, 'w> Batch<'t, 'w> {
    fn new(table: &'t WordIds, unknown: Option<u32>) -> Self {
        Self {
            table,
            unknown,
            words: [&[]; LOOKUP_DISTANCE],
            waiting: [Waiting::Short(0); LOOKUP_DISTANCE],
            pushed: 0,
        }
    }

    /// Hashes `word` and prefetches its slot; looks up the word pushed [`LOOKUP_DISTANCE`]
    /// before it.
    #[inline(always)]
    fn push(&mut self, word: &'w [u8], ids: &mut Vec<u32>) -> Option<()> {
        let table = self.table;
        let waiting = match short_key(word) {
            Some(key) => {
                table.short.prefetch(table.short.home(key));
                Waiting::Short(key)
            }
            None => {
                let probe = table.probe(word);
                prefetch(&table.slots[probe.tag as usize & table.mask]);
                Waiting::Long(probe)
            }
        };
        let at = self.pushed % LOOKUP_DISTANCE;
        if self.pushed >= LOOKUP_DISTANCE {
            ids.push(self.lookup(at)?);
        }
        self.words[at] = word;
        self.waiting[at] = waiting;
        self.pushed += 1;
        Some(())
    }

    #[inline(always)]
    fn lookup(&self, at: usize) -> Option<u32> {
        let table = self.table;
        let id = match self.waiting[at] {
            Waiting::Short(key) => table.short.get_ref(key),
            Waiting::Long(probe) => {
                let slot = &table.slots[table.position(probe, self.words[at])];
                (slot.tag != 0).then_some(&slot.id)
            }
        };
        id.copied().or(self.unknown)
    }

    /// Looks up the words still waiting, in order.
    fn finish(&mut self, ids: &mut Vec<u32>) -> Option<()> {
        let waiting = self.pushed.min(LOOKUP_DISTANCE);
        for pushed in self.pushed - waiting..self.pushed {
            ids.push(self.lookup(pushed % LOOKUP_DISTANCE)?);
        }
        self.pushed = 0;
        Some(())
    }
}

/// `word` zero-padded to 16 bytes as a little-endian integer, when it fits; read with loads
/// that overlap instead of byte by byte.
#[inline(always)]
fn inline_key(word: &[u8]) -> Option<u128> {
    let len = word.len();
    let read8 = |at: usize| u64::from_le_bytes(word[at..at + 8].try_into().expect("8 bytes"));
    let read4 = |at: usize| u32::from_le_bytes(word[at..at + 4].try_into().expect("4 bytes"));
    let (low, high) = match len {
        0 => (0, 0),
        1..4 => {
            let first = u64::from(word[0]);
            let middle = u64::from(word[len / 2]) << (8 * (len / 2));
            let last = u64::from(word[len - 1]) << (8 * (len - 1));
            (first | middle | last, 0)
        }
        4..8 => {
            let low = u64::from(read4(0));
            let high = u64::from(read4(len - 4)) << (8 * (len - 4));
            (low | high, 0)
        }
        8 => (read8(0), 0),
        9..=INLINE_WORD => (read8(0), read8(len - 8) >> (8 * (INLINE_WORD - len))),
        _ => return None,
    };
    Some(u128::from(low) | (u128::from(high) << 64))
}

/// A hash of an inline word's key and length under `seed` (two folded multiplications).
#[inline(always)]
fn short_hash(key: u128, len: usize, seed: u64) -> u64 {
    const K1: u64 = 0x9E37_79B9_7F4A_7C15;
    const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let low = key as u64 ^ seed;
    let high = (key >> 64) as u64 ^ seed.rotate_left(29) ^ len as u64;
    folded_multiply(folded_multiply(low, K1) ^ high, K2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_keys_are_the_zero_padded_bytes() {
        let text = b"abcdefghijklmnopq";
        for len in 0..=INLINE_WORD {
            let mut padded = [0u8; INLINE_WORD];
            padded[..len].copy_from_slice(&text[..len]);
            assert_eq!(
                inline_key(&text[..len]),
                Some(u128::from_le_bytes(padded)),
                "{len} bytes"
            );
        }
        assert_eq!(inline_key(text), None);
    }

    #[test]
    fn words_that_differ_only_in_trailing_zero_bytes_are_different_words() {
        let words = [
            "a",
            "a\0",
            "a\0\0",
            "\0",
            "\0a",
            "abcdefg",
            "abcdefg\0",
            "abcdefgh",
        ];
        let mut table = WordIds::with_capacity(words.len());
        for (id, word) in words.iter().enumerate() {
            table.insert(word, id as u32).expect("inserts");
        }
        assert_eq!(table.len(), words.len());
        for (id, word) in words.iter().enumerate() {
            assert_eq!(table.get(word), Some(id as u32), "{word:?}");
        }
        let mut ids = Vec::new();
        table
            .extend_ids(&words.map(Cow::Borrowed), None, &mut ids)
            .expect("all known");
        assert_eq!(ids, (0..words.len() as u32).collect::<Vec<_>>());
        assert_eq!(table.get("\0\0"), None);
    }

    #[test]
    fn a_table_sized_for_few_words_grows_and_keeps_them_all() {
        let mut table = WordIds::with_capacity(1);
        let words: Vec<String> = (0..5_000)
            .map(|n| format!("piece-{n}").repeat(n % 5 + 1))
            .collect();
        for (id, word) in words.iter().enumerate() {
            table.insert(word, id as u32).expect("inserts");
        }
        assert_eq!(table.len(), words.len());
        for (id, word) in words.iter().enumerate() {
            assert_eq!(table.get(word), Some(id as u32), "{word}");
        }
        table.insert(&words[7], 70).expect("replaces");
        assert_eq!((table.len(), table.get(&words[7])), (words.len(), Some(70)));
    }

    #[test]
    fn every_word_finds_its_id_and_others_none() {
        let words: Vec<String> = (0..3_000)
            .map(|n| match n % 4 {
                0 => format!("w{n}"),
                1 => format!("{n:0>16}"),
                2 => format!("a-longer-word-number-{n}"),
                _ => "x".repeat(n % 40 + 1) + &n.to_string(),
            })
            .collect();
        let mut table = WordIds::with_capacity(words.len() + 1);
        table.insert("", 9_999).expect("inserts");
        for (id, word) in words.iter().enumerate() {
            table.insert(word, id as u32).expect("inserts");
        }
        for (id, word) in words.iter().enumerate() {
            assert_eq!(table.get(word), Some(id as u32), "{word}");
            assert_eq!(table.get(&format!("{word}?")), None, "{word}?");
        }
        assert_eq!(table.get(""), Some(9_999));
        let text = words.join(" \t");
        let mut ids = Vec::new();
        table
            .extend_whitespace_words(&text, None, &mut ids)
            .expect("all known");
        assert_eq!(ids, (0..words.len() as u32).collect::<Vec<_>>());
        let mut ids = Vec::new();
        assert_eq!(
            table.extend_whitespace_words("w0 nope", None, &mut ids),
            None
        );
        let mut ids = Vec::new();
        table
            .extend_whitespace_words("w0 nope w4", Some(7), &mut ids)
            .expect("unknown given");
        assert_eq!(ids, [0, 7, 4]);
    }
}
