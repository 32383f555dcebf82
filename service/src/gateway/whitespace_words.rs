//! The words of a text as `tokenizers`' `WhitespaceSplit` cuts them: the stretches between
//! characters that are `char::is_whitespace`, empty ones dropped.
//!
//! Enters: a prompt text (any UTF-8). Leaves: the byte range of each word, in order.
//!
//! The text is read in blocks of 64 bytes. Each block gives a mask of its whitespace bytes, bit
//! `i` for byte `i`, and the words' starts and ends are where that mask changes: one
//! `trailing_zeros` a start or an end, with no branch on the bytes themselves. A block of
//! ASCII bytes is classified with vector compares (SSE2 on x86_64). A block with a byte of
//! 0x80 or above (a character beyond ASCII, which may be whitespace such as U+00A0 or U+3000)
//! is classified character by character. The text's last block is padded with spaces, so the
//! word that runs to the end closes there like any other, and the words are handed out from
//! one place (where the caller's closure is inlined).

/// Bytes per block.
const BLOCK: usize = 64;

/// Calls `each(start, end)` for the byte range of every word of `text`, in order.
#[inline]
pub fn for_each_word(text: &str, mut each: impl FnMut(usize, usize)) {
    let bytes = text.as_bytes();
    let mut classifier = Classifier::default();
    // Where the open word started, when one is open.
    let mut start = 0;
    let mut open = false;
    let mut at = 0;
    loop {
        let padded;
        let block: &[u8; BLOCK] = match bytes.get(at..at + BLOCK) {
            Some(block) => block.try_into().expect("a block"),
            None => {
                padded = padded_tail(&bytes[at..]);
                &padded
            }
        };
        let inside = !classifier.whitespace(text, at, block);
        // A bit for each byte where a word starts or ends: the inside mask against itself one
        // byte later, the byte before the block counting as inside when a word is open.
        let mut changes = inside ^ ((inside << 1) | u64::from(open));
        while changes != 0 {
            let position = at + changes.trailing_zeros() as usize;
            changes &= changes - 1;
            if open {
                each(start, position);
            } else {
                start = position;
            }
            open = !open;
        }
        // The padded block holds at least one space past the text, so no word is open after it.
        if at + BLOCK > bytes.len() {
            debug_assert!(!open);
            return;
        }
        at += BLOCK;
    }
}

/// The text's last bytes (fewer than a block) followed by spaces.
#[inline]
fn padded_tail(tail: &[u8]) -> [u8; BLOCK] {
    let mut block = [b' '; BLOCK];
    block[..tail.len()].copy_from_slice(tail);
    block
}

/// Classifies blocks in order, carrying a character that a block began and the next ends.
#[derive(Default)]
struct Classifier {
    /// Bytes of such a character at the start of the next block.
    spilled: usize,
    /// Whether that character is whitespace.
    spilled_whitespace: bool,
}

impl Classifier {
    /// The mask of `block`'s whitespace bytes; `block` is `text[at..]`, padded with spaces past
    /// the text's end.
    #[inline(always)]
    fn whitespace(&mut self, text: &str, at: usize, block: &[u8; BLOCK]) -> u64 {
        if block.is_ascii() {
            return ascii_whitespace(block);
        }
        self.characters(text, at)
    }

    /// The mask of a block with bytes beyond ASCII, character by character.
    #[cold]
    #[inline(never)]
    fn characters(&mut self, text: &str, at: usize) -> u64 {
        let mut mask = 0u64;
        // The character the previous block began covers the first `spilled` bytes.
        if self.spilled_whitespace {
            mask |= low_bits(self.spilled);
        }
        let mut offset = self.spilled;
        self.spilled = 0;
        while offset < BLOCK {
            let position = at + offset;
            let Some(character) = text.get(position..).and_then(|rest| rest.chars().next()) else {
                // Past the text: the padding, all spaces.
                mask |= !low_bits(offset);
                break;
            };
            let width = character.len_utf8();
            let whitespace = character.is_whitespace();
            if whitespace {
                mask |= low_bits(width.min(BLOCK - offset)) << offset;
            }
            if offset + width > BLOCK {
                self.spilled = offset + width - BLOCK;
                self.spilled_whitespace = whitespace;
            }
            offset += width;
        }
        mask
    }
}

/// The lowest `count` bits set (`count` at most 64).
#[inline(always)]
fn low_bits(count: usize) -> u64 {
    match count {
        BLOCK.. => u64::MAX,
        count => (1u64 << count) - 1,
    }
}

/// The mask of an ASCII block's whitespace bytes: tab, line feed, vertical tab, form feed,
/// carriage return and space (`char::is_whitespace` on ASCII). With SSE2 (part of every x86_64
/// target): four 16-byte loads, two compares each and one `movemask`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ascii_whitespace(block: &[u8; BLOCK]) -> u64 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_sub_epi8,
    };
    let mut mask = 0u64;
    for lane in 0..BLOCK / 16 {
        // SAFETY: SSE2 is part of every x86_64 target; the load reads the 16 bytes of `block`
        // at `16 * lane` (below 64), with no alignment required.
        let lane_mask = unsafe {
            let bytes = _mm_loadu_si128(block.as_ptr().add(16 * lane).cast::<__m128i>());
            let space = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b' ' as i8));
            // Tab to carriage return are 0x09..=0x0D: the byte less 9 is at most 4, unsigned.
            let shifted = _mm_sub_epi8(bytes, _mm_set1_epi8(9));
            let control = _mm_cmpeq_epi8(_mm_min_epu8(shifted, _mm_set1_epi8(4)), shifted);
            _mm_movemask_epi8(_mm_or_si128(space, control)) as u16
        };
        mask |= u64::from(lane_mask) << (16 * lane);
    }
    mask
}

/// The mask of an ASCII block's whitespace bytes (as the x86_64 version), byte by byte.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn ascii_whitespace(block: &[u8; BLOCK]) -> u64 {
    let mut mask = 0u64;
    for (index, &byte) in block.iter().enumerate() {
        let whitespace = (byte == b' ') | (byte.wrapping_sub(9) <= 4);
        mask |= u64::from(whitespace) << index;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for_each_word(text, |start, end| out.push(&text[start..end]));
        out
    }

    #[test]
    fn words_are_what_split_whitespace_gives() {
        for text in [
            "",
            " ",
            "a",
            "w1 w22 w333",
            "  leading and trailing  ",
            "tabs\tand\nnew\r\nlines\x0bvertical\x0cfeed",
            "control\x01chars\x1fare\x7fwords",
            "no\u{a0}break\u{3000}ideographic\u{2028}line\u{85}next\u{1680}ogham",
            "naïve café 東京 😀 mixed\u{2003}em space",
            "abcdefghijklmnopqrstuvwxyz0123456789 abcdefgh abcdefghi",
            "\u{200b}zero-width is not whitespace\u{200b}",
        ] {
            let expected: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(words(text), expected, "{text:?}");
        }
    }

    #[test]
    fn every_ascii_byte_is_classified_as_char_is_whitespace_does() {
        for byte in 0..0x80u8 {
            let text = format!("a{}b", char::from(byte));
            let expected: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(words(&text), expected, "byte {byte:#x}");
        }
    }

    /// Words and whitespace of every kind placed on and around the blocks' edges: a word that
    /// ends on a block's last byte or runs into the next block, a multi-byte character (word or
    /// whitespace) split between two blocks, texts of exactly one and two blocks.
    #[test]
    fn words_across_block_edges() {
        let pieces = ["a", "\u{a0}", "\u{3000}", "東", "😀", " ", "\u{85}", "é"];
        for length in [62, 63, 64, 65, 126, 127, 128, 129] {
            for fill in ['x', ' '] {
                for piece in pieces {
                    for tail in ["", "b", " b", "\u{2028}b", "b "] {
                        let mut text: String = std::iter::repeat_n(fill, length).collect();
                        text.push_str(piece);
                        text.push_str(tail);
                        let expected: Vec<&str> = text.split_whitespace().collect();
                        assert_eq!(words(&text), expected, "{text:?}");
                    }
                }
            }
        }
    }

    fn texts() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            4 => "[a-z]{1,20}",
            3 => Just(" ".to_string()),
            1 => "[\t\n\u{b}\u{c}\r \u{1c}-\u{1f}]{1,3}",
            1 => "[\u{85}\u{a0}\u{1680}\u{2000}-\u{200b}\u{2028}\u{2029}\u{202f}\u{205f}\u{3000}]",
            1 => "[é東😀\u{7f}\u{80}-\u{9f}]{1,4}",
        ];
        prop::collection::vec(piece, 0..80).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn words_of_any_text_are_what_split_whitespace_gives(text in texts()) {
            let expected: Vec<&str> = text.split_whitespace().collect();
            prop_assert_eq!(words(&text), expected);
        }
    }
}
