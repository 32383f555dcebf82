//! Hand-written scanners for the pre-tokenization regexes that GPT-2-, Llama-3- and Qwen-style
//! tokenizers ship, on ASCII text: the same matches `fancy-regex` finds, at a fraction of its
//! backtracking cost (the regex was about 70 % of a direct BPE encode).
//!
//! Enters: a regex's source (recognized only when it is one of [`WordPattern`]'s, character for
//! character) and an ASCII text. Leaves: the byte ranges of the regex's successive matches.
//! Text with any other byte goes to the regex itself; the caller checks.
//!
//! Every one of these regexes matches at every position of an ASCII text (its last
//! alternatives take any whitespace run, and the others any letter, digit or other character),
//! so the matches tile the text and each is the first alternative that matches where the
//! previous one ended, with the greedy quantifiers' backtracking worked out by hand below.

/// GPT-2's regex (`ByteLevel` with `use_regex`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama-3's regex (OpenAI's cl100k), digits in runs of up to three.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's regex: Llama-3's with one digit a match.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A recognized pre-tokenization regex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordPattern {
    /// GPT-2's.
    Gpt2,
    /// The cl100k family (Llama-3, Qwen2), with the longest digit run one match takes.
    Cl100k {
        /// 3 for Llama-3, 1 for Qwen2.
        digits: usize,
    },
}

impl WordPattern {
    /// The scanner for the regex `source`, when it is one of the known ones exactly.
    pub fn recognize(source: &str) -> Option<Self> {
        match source {
            GPT2 => Some(Self::Gpt2),
            LLAMA3 => Some(Self::Cl100k { digits: 3 }),
            QWEN2 => Some(Self::Cl100k { digits: 1 }),
            _ => None,
        }
    }

    /// The byte ranges of the regex's matches in `text`, in order, or `None` when `text` is
    /// not all ASCII (then only the regex can say).
    pub fn matches(self, text: &str) -> Option<Vec<(usize, usize)>> {
        let bytes = text.as_bytes();
        if !bytes.is_ascii() {
            return None;
        }
        let mut found = Vec::with_capacity(bytes.len() / 4 + 1);
        let mut at = 0;
        while at < bytes.len() {
            let end = match self {
                Self::Gpt2 => gpt2_match(bytes, at),
                Self::Cl100k { digits } => cl100k_match(bytes, at, digits),
            };
            debug_assert!(end > at, "every position starts a match");
            found.push((at, end));
            at = end;
        }
        Some(found)
    }
}

fn letter(byte: u8) -> bool {
    byte.is_ascii_alphabetic()
}

fn digit(byte: u8) -> bool {
    byte.is_ascii_digit()
}

/// `\s` on ASCII: Unicode's White_Space, which leaves out the separators 0x1C–0x1F.
fn space(byte: u8) -> bool {
    matches!(byte, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}

fn line_break(byte: u8) -> bool {
    matches!(byte, b'\r' | b'\n')
}

/// `[^\s\p{L}\p{N}]`.
fn other(byte: u8) -> bool {
    !letter(byte) && !digit(byte) && !space(byte)
}

/// The end of the run of bytes from `from` that `class` takes.
fn run(text: &[u8], from: usize, class: fn(u8) -> bool) -> usize {
    text[from..]
        .iter()
        .position(|byte| !class(*byte))
        .map_or(text.len(), |length| from + length)
}

/// The length of `'s|'t|'re|'ve|'m|'ll|'d` at `at` (ASCII-case-insensitively if asked).
fn contraction(text: &[u8], at: usize, any_case: bool) -> Option<usize> {
    let tail = &text[at + 1..];
    let fold = |byte: u8| match any_case {
        true => byte.to_ascii_lowercase(),
        false => byte,
    };
    let first = fold(*tail.first()?);
    let second = tail.get(1).map(|byte| fold(*byte));
    match (first, second) {
        (b's' | b't' | b'm' | b'd', _) => Some(2),
        (b'r' | b'v', Some(b'e')) | (b'l', Some(b'l')) => Some(3),
        _ => None,
    }
}

/// The end of the whitespace match at `at` (`text[at]` is whitespace): `\s+(?!\S)`, which
/// gives the run's last character back when a non-space follows and the run has more than
/// one, else `\s+`.
fn trailing_space_match(text: &[u8], at: usize, end: usize) -> usize {
    match end < text.len() && end - at >= 2 {
        true => end - 1,
        false => end,
    }
}

fn gpt2_match(text: &[u8], at: usize) -> usize {
    let byte = text[at];
    if byte == b'\''
        && let Some(length) = contraction(text, at, false)
    {
        return at + length;
    }
    let after_space = match byte == b' ' {
        true => text.get(at + 1).copied(),
        false => None,
    };
    for class in [letter as fn(u8) -> bool, digit, other] {
        if class(byte) {
            return run(text, at, class);
        }
        if after_space.is_some_and(class) {
            return run(text, at + 1, class);
        }
    }
    trailing_space_match(text, at, run(text, at, space))
}

fn cl100k_match(text: &[u8], at: usize, digits: usize) -> usize {
    let byte = text[at];
    let next = text.get(at + 1).copied();
    if byte == b'\''
        && let Some(length) = contraction(text, at, true)
    {
        return at + length;
    }
    // `[^\r\n\p{L}\p{N}]?\p{L}+`
    if letter(byte) {
        return run(text, at, letter);
    }
    if !line_break(byte) && !digit(byte) && next.is_some_and(letter) {
        return run(text, at + 1, letter);
    }
    // `\p{N}{1,digits}`
    if digit(byte) {
        return run(text, at, digit).min(at + digits);
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    if other(byte) {
        return run(text, run(text, at, other), line_break);
    }
    if byte == b' ' && next.is_some_and(other) {
        return run(text, run(text, at + 1, other), line_break);
    }
    // `\s*[\r\n]+`: the whitespace up to and with the run's last line break.
    let end = run(text, at, space);
    if let Some(last_break) = text[at..end].iter().rposition(|byte| line_break(*byte)) {
        return at + last_break + 1;
    }
    trailing_space_match(text, at, end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The three regexes, compiled once for all cases.
    static REGEXES: std::sync::LazyLock<Vec<(&str, fancy_regex::Regex)>> =
        std::sync::LazyLock::new(|| {
            [GPT2, LLAMA3, QWEN2]
                .into_iter()
                .map(|source| (source, fancy_regex::Regex::new(source).expect("compiles")))
                .collect()
        });

    fn by_regex(source: &str, text: &str) -> Vec<(usize, usize)> {
        let (_, regex) = REGEXES
            .iter()
            .find(|(known, _)| *known == source)
            .expect("one of the three");
        regex
            .find_iter(text)
            .map(|found| found.expect("no backtracking limit"))
            .map(|found| (found.start(), found.end()))
            .collect()
    }

    fn agree(source: &str, text: &str) {
        let pattern = WordPattern::recognize(source).expect("recognized");
        let scanned = pattern.matches(text).expect("ASCII");
        assert_eq!(scanned, by_regex(source, text), "{pattern:?} on {text:?}");
    }

    /// Texts drawn from the bytes each alternative turns on, most of them many times over.
    fn ascii_text() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "a", "Z", "word", "7", "1234567", "'", "'s", "'S", "'re", "'VE", "'ll", "'Ll", "'d",
            "'m", "'t", "'x", " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f",
            "\x00", "\x7f", "!", "?!", ".", "-", "_", "(", "}", "\"",
        ]);
        prop::collection::vec(pieces, 0..40).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]
        #[test]
        fn every_scanner_finds_its_regexes_matches(text in ascii_text()) {
            for source in [GPT2, LLAMA3, QWEN2] {
                agree(source, &text);
            }
        }

        #[test]
        fn any_ascii_bytes_too(bytes in prop::collection::vec(0u8..128, 0..64)) {
            let text = String::from_utf8(bytes).expect("ASCII");
            for source in [GPT2, LLAMA3, QWEN2] {
                agree(source, &text);
            }
        }
    }

    #[test]
    fn the_edges_of_each_alternative() {
        for text in [
            "",
            " ",
            "  ",
            "x  ",
            "  x",
            "a \n b",
            "a \n\t b",
            "'",
            "'s",
            "'sa",
            "it's",
            "IT'S",
            " 'll",
            "12345678",
            " 12",
            "!!\r\n\r\nx",
            " !x",
            "\t\tx",
            "\x1c\x1dx",
            "end\n",
        ] {
            for source in [GPT2, LLAMA3, QWEN2] {
                agree(source, text);
            }
        }
    }

    #[test]
    fn other_regexes_and_non_ascii_texts_are_left_to_the_regex() {
        assert_eq!(WordPattern::recognize(r"\w+|[^\w\s]+"), None);
        assert_eq!(WordPattern::recognize(&format!("{GPT2} ")), None);
        let pattern = WordPattern::recognize(LLAMA3).expect("recognized");
        assert_eq!(pattern.matches("café"), None);
    }
}
