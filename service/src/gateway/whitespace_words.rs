//! The words of a text as `tokenizers`' `WhitespaceSplit` cuts them: the stretches between
//! characters that are `char::is_whitespace`, empty ones dropped.
//!
//! Enters: a prompt text (any UTF-8). Leaves: the byte range of each word, in order. ASCII text
//! is scanned eight bytes at a time: a word ends only at a byte at or below the space or at or
//! above 0x80 (which then decides by the character it starts), so one 64-bit test passes over
//! eight bytes that cannot end it.

/// Calls `each(start, end)` for the byte range of every word of `text`, in order.
#[inline]
pub fn for_each_word(text: &str, mut each: impl FnMut(usize, usize)) {
    let bytes = text.as_bytes();
    let mut at = 0;
    loop {
        let Some(start) = next_word_start(text, at) else {
            return;
        };
        let (end, after) = word_end(text, start);
        each(start, end);
        match after {
            Some(after) => at = after,
            None => return,
        }
        debug_assert!(at <= bytes.len());
    }
}

/// The first byte at or after `at` that is not whitespace, if any.
#[inline]
fn next_word_start(text: &str, mut at: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    while let Some(&byte) = bytes.get(at) {
        match whitespace_width(text, at, byte) {
            Some(width) => at += width,
            None => return Some(at),
        }
    }
    None
}

/// The end of the word starting at `start` and, when whitespace ended it, where scanning goes
/// on (after that whitespace character); `None` when the word runs to the end of the text.
#[inline]
fn word_end(text: &str, start: usize) -> (usize, Option<usize>) {
    let bytes = text.as_bytes();
    let mut at = start + char_width(bytes[start]);
    loop {
        at = next_special_byte(bytes, at);
        let Some(&byte) = bytes.get(at) else {
            return (bytes.len(), None);
        };
        match whitespace_width(text, at, byte) {
            Some(width) => return (at, Some(at + width)),
            None => at += char_width(byte),
        }
    }
}

/// How many bytes the whitespace character at `at` (whose first byte is `byte`) takes, or
/// `None` when the character there is not whitespace.
#[inline(always)]
fn whitespace_width(text: &str, at: usize, byte: u8) -> Option<usize> {
    if byte.is_ascii() {
        // `char::is_whitespace` on ASCII: tab, line feed, vertical tab, form feed, carriage
        // return and space.
        return matches!(byte, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ').then_some(1);
    }
    let character = text[at..].chars().next()?;
    character.is_whitespace().then_some(character.len_utf8())
}

/// The UTF-8 width of the character whose first byte is `byte`.
#[inline(always)]
fn char_width(byte: u8) -> usize {
    match byte {
        0..0x80 => 1,
        0xC0..0xE0 => 2,
        0xE0..0xF0 => 3,
        _ => 4,
    }
}

/// The first index at or after `at` whose byte could end a word (at or below a space, or not
/// ASCII), or `bytes.len()`.
#[inline(always)]
fn next_special_byte(bytes: &[u8], mut at: usize) -> usize {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        // For a byte below 0x80, adding 0x80 - 0x21 sets its top bit exactly when it is
        // 0x21 or above; no byte carries into the next (0x7F + 0x5F < 0x100).
        let printable = (word & !HIGH).wrapping_add(LOW * 0x5F);
        let special = (!printable | word) & HIGH;
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        if byte <= b' ' || !byte.is_ascii() {
            return at;
        }
        at += 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
