//! A fast path for the longest part of a prompt body: the top-level `"token_ids"` array of
//! plain integers is read by a tight loop, and the rest of the body (with `[]` in its place)
//! by `serde_json`. Reading 8,192 tokens element by element through `serde_json`'s visitor
//! machinery costs several times as much as the loop.
//!
//! Anything this path does not recognise exactly (no such key, a `null`, a negative or
//! fractional or out-of-range number, a leading zero, malformed JSON) makes it step aside, and
//! the body is read by `serde_json` alone, with its own answers and error messages.

/// A body whose top-level `"token_ids"` array was taken out.
#[derive(Debug, PartialEq, Eq)]
pub struct SplitTokens {
    /// The array's tokens.
    pub token_ids: Vec<u32>,
    /// The body with `[]` in place of the array.
    pub rest: Vec<u8>,
}

/// Takes the top-level `"token_ids"` integer array out of the JSON object `body`, or `None`
/// when the body has none this path can read (the caller then reads the body as it is).
pub fn split_token_ids(body: &[u8]) -> Option<SplitTokens> {
    let mut at = skip_whitespace(body, 0);
    if body.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_whitespace(body, at);
        if body.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(body, at)?;
        let key = &body[at..key_end];
        at = skip_whitespace(body, key_end);
        if body.get(at) != Some(&b':') {
            return None;
        }
        at = skip_whitespace(body, at + 1);
        if key == b"\"token_ids\"" && body.get(at) == Some(&b'[') {
            let (token_ids, end) = integer_array(body, at)?;
            let mut rest = Vec::with_capacity(body.len() - (end - at) + 2);
            rest.extend_from_slice(&body[..at]);
            rest.extend_from_slice(b"[]");
            rest.extend_from_slice(&body[end..]);
            return Some(SplitTokens { token_ids, rest });
        }
        at = skip_value(body, at)?;
        at = skip_whitespace(body, at);
        match body.get(at) {
            Some(b',') => at += 1,
            _ => return None,
        }
    }
}

fn skip_whitespace(body: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = body.get(at) {
        at += 1;
    }
    at
}

/// The end (one past the closing quote) of the string starting at `at`.
fn skip_string(body: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < body.len() {
        match body[i] {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// The end of the value starting at `at` (strings and nesting followed; the rest is left to
/// `serde_json`, which reads the whole body afterwards).
fn skip_value(body: &[u8], at: usize) -> Option<usize> {
    match body.get(at)? {
        b'"' => skip_string(body, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < body.len() {
                match body[i] {
                    b'"' => {
                        i = skip_string(body, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = at;
            while i < body.len() && !matches!(body[i], b',' | b'}' | b']') {
                i += 1;
            }
            Some(i)
        }
    }
}

/// The integers of the array starting at `at` and the end of the array, if every element is
/// a JSON integer in `u32`'s range.
fn integer_array(body: &[u8], at: usize) -> Option<(Vec<u32>, usize)> {
    // Each element takes at least two bytes ("d,"); real token ids take at most 7 ("dddddd,"),
    // so this capacity rarely needs to grow and never over-reserves much.
    let mut tokens = Vec::with_capacity((body.len() - at) / 6 + 1);
    let mut i = skip_whitespace(body, at + 1);
    if body.get(i) == Some(&b']') {
        return Some((tokens, i + 1));
    }
    loop {
        let rest = body.get(i..)?;
        let (value, count) = leading_digits(rest);
        if count == 0 || count > 10 || (count > 1 && rest[0] == b'0') || value > u64::from(u32::MAX)
        {
            return None;
        }
        tokens.push(value as u32);
        i += count;
        match body.get(i) {
            Some(b',') => {
                i += 1;
                if let Some(b' ' | b'\n' | b'\r' | b'\t') = body.get(i) {
                    i = skip_whitespace(body, i);
                }
            }
            Some(b']') => return Some((tokens, i + 1)),
            _ => {
                i = skip_whitespace(body, i);
                match body.get(i) {
                    Some(b',') => i = skip_whitespace(body, i + 1),
                    Some(b']') => return Some((tokens, i + 1)),
                    _ => return None,
                }
            }
        }
    }
}

const ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);

/// The value and count of the decimal digits `bytes` starts with (counting stops past 10
/// digits, too many for a `u32`). Up to 7 digits followed by anything are read 8 bytes at a
/// time; longer numbers and the last bytes of a body digit by digit.
#[inline]
fn leading_digits(bytes: &[u8]) -> (u64, usize) {
    if let Some(chunk) = bytes.first_chunk::<8>() {
        let chunk = u64::from_le_bytes(*chunk);
        // A byte's top bit is set in `byte + 0x46` for bytes above '9' and in `byte - 0x30`
        // for bytes below '0' (and for non-ASCII bytes in one of the two). Carries and borrows
        // only run from a non-digit towards later bytes, so the lowest flagged byte is the
        // first non-digit.
        let non_digits = (chunk.wrapping_add(0x4646_4646_4646_4646) | chunk.wrapping_sub(ZEROS))
            & 0x8080_8080_8080_8080;
        if non_digits != 0 {
            let count = (non_digits.trailing_zeros() / 8) as usize;
            if count == 0 {
                return (0, 0);
            }
            // The digits' values, moved to the top bytes: the bytes below are leading zeros.
            let digits = chunk.wrapping_sub(ZEROS) << (8 * (8 - count));
            return (eight_digits(digits), count);
        }
    }
    let mut value = 0;
    let mut count = 0;
    while let Some(&digit @ b'0'..=b'9') = bytes.get(count) {
        if count > 10 {
            break;
        }
        value = value * 10 + u64::from(digit - b'0');
        count += 1;
    }
    (value, count)
}

/// The number written by eight digit values (0–9), one a byte, the first in the lowest byte.
#[inline]
fn eight_digits(digits: u64) -> u64 {
    // Pairs, then quadruples, then the whole: each step multiplies and adds neighbours.
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8);
    let mask = 0x0000_00FF_0000_00FF;
    let high = (pairs & mask).wrapping_mul(100 + (1_000_000 << 32));
    let low = ((pairs >> 16) & mask).wrapping_mul(1 + (10_000 << 32));
    high.wrapping_add(low) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(body: &str) -> Option<(Vec<u32>, String)> {
        split_token_ids(body.as_bytes()).map(|split| {
            (
                split.token_ids,
                String::from_utf8(split.rest).expect("utf-8"),
            )
        })
    }

    #[test]
    fn the_top_level_array_is_taken_out() {
        assert_eq!(
            split(r#"{"model_name": "m", "token_ids": [1, 22 ,333,4294967295], "x": 1}"#),
            Some((
                vec![1, 22, 333, u32::MAX],
                r#"{"model_name": "m", "token_ids": [], "x": 1}"#.to_owned()
            ))
        );
        assert_eq!(
            split(r#" { "a": {"token_ids": [9]}, "b": "\"token_ids\": [8]", "c": [[1], {"d": null}], "token_ids" : [ ] }"#),
            Some((
                vec![],
                r#" { "a": {"token_ids": [9]}, "b": "\"token_ids\": [8]", "c": [[1], {"d": null}], "token_ids" : [] }"#
                    .to_owned()
            ))
        );
        assert_eq!(
            split(r#"{"token_ids":[0,7]}"#),
            Some((vec![0, 7], r#"{"token_ids":[]}"#.to_owned()))
        );
    }

    #[test]
    fn anything_unusual_steps_aside() {
        for body in [
            r#"{"model_name": "m"}"#,
            r#"{"token_ids": null}"#,
            r#"{"token_ids": [1, -2]}"#,
            r#"{"token_ids": [1.5]}"#,
            r#"{"token_ids": [1e3]}"#,
            r#"{"token_ids": [01]}"#,
            r#"{"token_ids": [4294967296]}"#,
            r#"{"token_ids": [99999999999999999999]}"#,
            r#"{"token_ids": [1,]}"#,
            r#"{"token_ids": [1 2]}"#,
            r#"{"token_ids": ["1"]}"#,
            r#"{"token_ids": [1"#,
            r#"{"a" 1, "token_ids": [1]}"#,
            r#"{"a": 1 "token_ids": [1]}"#,
            r#"[1, 2]"#,
            "",
        ] {
            assert_eq!(split(body), None, "{body}");
        }
    }

    #[test]
    fn digits_of_every_length_read_right() {
        for value in [
            0u64, 7, 42, 999, 1_000, 65_535, 128_255, 1_000_000, 9_999_999,
        ] {
            for tail in [",", "]", " ,", ", ", "]}", "\n]", "x", ""] {
                for padding in ["", "        "] {
                    let text = format!("{value}{tail}{padding}");
                    let count = value.to_string().len();
                    assert_eq!(leading_digits(text.as_bytes()), (value, count), "{text:?}");
                }
            }
        }
        assert_eq!(leading_digits(b"12345678,"), (12_345_678, 8));
        assert_eq!(leading_digits(b"4294967295]"), (4_294_967_295, 10));
        assert_eq!(leading_digits(b"123\xff5678"), (123, 3));
        assert_eq!(leading_digits(b"12/45678"), (12, 2));
        assert_eq!(leading_digits(b":2345678"), (0, 0));
        assert_eq!(leading_digits(b"123456789012345"), (12_345_678_901, 11));
    }

    #[test]
    fn tokens_match_serde_json() {
        let tokens: Vec<u32> = (0..5_000u32)
            .map(|t| t.wrapping_mul(2_654_435_761) >> (t % 32))
            .chain(0..1_000)
            .collect();
        let body =
            serde_json::to_vec(&serde_json::json!({"token_ids": tokens, "z": [1]})).expect("json");
        let split = split_token_ids(&body).expect("split");
        assert_eq!(split.token_ids, tokens);
        assert_eq!(split.rest, br#"{"token_ids":[],"z":[1]}"#);
    }
}
