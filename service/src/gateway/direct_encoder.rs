//! Token ids straight from the text for the tokenizer pipelines that Llama-3-, Qwen- and
//! GPT-2-style models (and our benches' word-level model) ship, without `tokenizers`'
//! offset-tracking machinery, which costs about 12 times the lookups themselves.
//!
//! Enters: at load, the parsed `tokenizer.json` and the loaded [`tokenizers::Tokenizer`]; per
//! request, a prompt text. Leaves: its token ids, the same ids `Tokenizer::encode_fast` gives,
//! or `None` when this text needs the full pipeline (the caller then uses it).
//!
//! The steps are `tokenizers`' own, in its order, with its semantics:
//! 1. added tokens split out (leftmost-longest, the non-normalized ones over the whole text,
//!    then the normalized ones over what is left);
//! 2. the normalizer: none, or NFC on ASCII text (which NFC leaves as it is);
//! 3. pre-tokenizers: `WhitespaceSplit`, `Split` (a regex or string, `Isolated` or `Removed`),
//!    `ByteLevel` (GPT-2's regex or none, the prefix space), in a `Sequence` whose `ByteLevel`
//!    comes last; GPT-2's, Llama-3's and Qwen2's regexes on ASCII text by the hand-written
//!    scanners of [`word_pattern`](super::word_pattern), any other regex or text on
//!    `fancy-regex`, the engine `tokenizers` is built with here;
//! 4. the model: `WordLevel` looked up in a table of its own, `BPE` through the model itself
//!    (its merges), each piece's ids then remembered under the piece as the pre-tokenizers
//!    cut it, so a remembered piece is not spelled in byte characters again;
//! 5. the post-processor's special tokens for one sequence (`TemplateProcessing`, `Bert`,
//!    `Roberta`, `ByteLevel`, or a `Sequence` of them).
//!
//! Any other pipeline, or an option these steps do not reproduce (truncation, padding, dropout,
//! added tokens that strip or match single words), gets no direct encoder, and a text is handed
//! back whenever an exact answer is not certain (NFC on non-ASCII text, an unknown word without
//! an unknown token, a model error). [`DirectEncoder::plan`] also checks itself against the
//! full pipeline on probe texts before it is used.

use super::word_pattern::WordPattern;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use serde_json::Value;
use std::borrow::Cow;
use tokenizers::{Model, ModelWrapper, Tokenizer};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// GPT-2's pre-tokenization regex, which `ByteLevel` applies when `use_regex` is set.
const BYTE_LEVEL_REGEX: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Texts the plan is checked on against the full pipeline before it is used.
const PROBES: &[&str] = &[
    "",
    "Hello world",
    "  The quick brown fox's 12345 jumps,\r\n over\tthe lazy dog!!  ",
    "I'm sure they'll've done it; 3.14159 — naïve café, 東京 😀\n\n\nend ",
    "w1 w22 w333 w4444 w99999 unknown-word [UNK]",
];

/// Why a tokenizer gets no direct encoder (logged once at load).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(String);

fn unsupported<T>(what: impl Into<String>) -> Result<T, Unsupported> {
    Err(Unsupported(what.into()))
}

/// The compiled pipeline of one tokenizer.
pub struct DirectEncoder {
    added: AddedTokens,
    ascii_only: bool,
    steps: Vec<PreStep>,
    /// Whether the pieces are spelled in GPT-2's byte characters before the model sees them
    /// (the pre-tokenizers end with `ByteLevel`); done at the model step, so a remembered
    /// piece costs no mapping.
    byte_level: bool,
    model: ModelStep,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
}

impl std::fmt::Debug for DirectEncoder {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DirectEncoder")
            .field("steps", &self.steps.len())
            .field("prefix", &self.prefix)
            .field("suffix", &self.suffix)
            .finish_non_exhaustive()
    }
}

impl DirectEncoder {
    /// The direct encoder of `tokenizer` (whose serialized form is `json`), checked against
    /// `tokenizer.encode_fast` on a few probe texts, with and without special tokens.
    pub fn plan(json: &Value, tokenizer: &Tokenizer) -> Result<Self, Unsupported> {
        for option in ["truncation", "padding"] {
            if !json.get(option).is_none_or(Value::is_null) {
                return unsupported(format!("`{option}` is set"));
            }
        }
        let (prefix, suffix) = post_processor_ids(json.get("post_processor"))?;
        let steps = pre_steps(json.get("pre_tokenizer"))?;
        let encoder = Self {
            added: AddedTokens::from_json(json.get("added_tokens"))?,
            ascii_only: normalizer_needs_ascii(json.get("normalizer"))?,
            byte_level: matches!(steps.last(), Some(PreStep::ByteLevel { .. })),
            steps,
            model: ModelStep::from_model(json.get("model"), tokenizer.get_model())?,
            prefix,
            suffix,
        };
        encoder.check_against(tokenizer)?;
        Ok(encoder)
    }

    fn check_against(&self, tokenizer: &Tokenizer) -> Result<(), Unsupported> {
        for probe in PROBES {
            for add_special_tokens in [false, true] {
                let Some(direct) = self.encode(tokenizer, probe, add_special_tokens) else {
                    continue;
                };
                let full = tokenizer
                    .encode_fast(*probe, add_special_tokens)
                    .map(|encoding| encoding.get_ids().to_vec());
                if full.as_deref().ok() != Some(direct.as_slice()) {
                    return unsupported(format!(
                        "the direct encoder disagrees with tokenizers on {probe:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The ids of `text`, or `None` when it needs `tokenizer`'s full pipeline.
    pub fn encode(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        add_special_tokens: bool,
    ) -> Option<Vec<u32>> {
        if self.ascii_only && !text.is_ascii() {
            return None;
        }
        let mut ids = Vec::with_capacity(text.len() / 3 + self.prefix.len() + self.suffix.len());
        if add_special_tokens {
            ids.extend_from_slice(&self.prefix);
        }
        for part in self.added.split(text) {
            match part {
                Part::Added(id) => ids.push(id),
                Part::Text(piece) => self.encode_piece(tokenizer, piece, &mut ids)?,
            }
        }
        if add_special_tokens {
            ids.extend_from_slice(&self.suffix);
        }
        Some(ids)
    }

    fn encode_piece(&self, tokenizer: &Tokenizer, text: &str, ids: &mut Vec<u32>) -> Option<()> {
        let mut pieces = vec![Cow::Borrowed(text)];
        for step in &self.steps {
            pieces = step.apply(pieces);
        }
        let model = tokenizer.get_model();
        self.model.push_ids(model, &pieces, self.byte_level, ids)
    }
}

/// One stretch of the text after the added tokens were split out.
enum Part<'a> {
    Added(u32),
    Text(&'a str),
}

/// The added tokens, as `tokenizers` splits them out before anything else.
struct AddedTokens {
    raw: Option<(AhoCorasick, Vec<u32>)>,
    normalized: Option<(AhoCorasick, Vec<u32>)>,
}

impl AddedTokens {
    fn from_json(tokens: Option<&Value>) -> Result<Self, Unsupported> {
        let mut raw = (Vec::new(), Vec::new());
        let mut normalized = (Vec::new(), Vec::new());
        for token in tokens.and_then(Value::as_array).into_iter().flatten() {
            let flag = |name: &str| token.get(name).and_then(Value::as_bool).unwrap_or(false);
            if flag("single_word") || flag("lstrip") || flag("rstrip") {
                return unsupported("an added token strips spaces or matches single words");
            }
            let (Some(content), Some(id)) = (
                token.get("content").and_then(Value::as_str),
                token.get("id").and_then(Value::as_u64),
            ) else {
                return unsupported("an added token without `content` or `id`");
            };
            let id = u32::try_from(id).or_else(|_| unsupported("an added token id above u32"))?;
            if content.is_empty() {
                return unsupported("an empty added token");
            }
            let set = if flag("normalized") {
                &mut normalized
            } else {
                &mut raw
            };
            set.0.push(content.to_owned());
            set.1.push(id);
        }
        Ok(Self {
            raw: matcher(raw)?,
            normalized: matcher(normalized)?,
        })
    }

    fn split<'a>(&self, text: &'a str) -> Vec<Part<'a>> {
        let mut parts = Vec::new();
        for part in split_out(self.raw.as_ref(), text) {
            match part {
                Part::Text(piece) => parts.extend(split_out(self.normalized.as_ref(), piece)),
                added => parts.push(added),
            }
        }
        parts
    }
}

fn matcher(
    (patterns, ids): (Vec<String>, Vec<u32>),
) -> Result<Option<(AhoCorasick, Vec<u32>)>, Unsupported> {
    if patterns.is_empty() {
        return Ok(None);
    }
    AhoCorasickBuilder::new()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
        .map(|automaton| Some((automaton, ids)))
        .or_else(|error| unsupported(format!("the added tokens do not compile: {error}")))
}

/// `text` cut at the matches of `set`, empty stretches dropped.
fn split_out<'a>(set: Option<&(AhoCorasick, Vec<u32>)>, text: &'a str) -> Vec<Part<'a>> {
    let Some((automaton, ids)) = set else {
        return non_empty_text(text).into_iter().collect();
    };
    let mut parts = Vec::new();
    let mut start = 0;
    for found in automaton.find_iter(text) {
        parts.extend(non_empty_text(&text[start..found.start()]));
        parts.push(Part::Added(ids[found.pattern().as_usize()]));
        start = found.end();
    }
    parts.extend(non_empty_text(&text[start..]));
    parts
}

fn non_empty_text(text: &str) -> Option<Part<'_>> {
    (!text.is_empty()).then_some(Part::Text(text))
}

/// Whether the normalizer leaves only ASCII text as it is (NFC), `false` for none.
fn normalizer_needs_ascii(normalizer: Option<&Value>) -> Result<bool, Unsupported> {
    match normalizer {
        None | Some(Value::Null) => Ok(false),
        Some(value) if type_of(value) == Some("NFC") => Ok(true),
        Some(value) => unsupported(format!("the normalizer {}", describe(value))),
    }
}

/// One pre-tokenization step.
enum PreStep {
    WhitespaceSplit,
    Split {
        pattern: Pattern,
        isolated: bool,
    },
    /// GPT-2's byte-level step, but for its byte-to-character mapping, which the model step
    /// does (see [`DirectEncoder::byte_level`]).
    ByteLevel {
        add_prefix_space: bool,
        pattern: Option<Pattern>,
    },
}

/// A Split regex, with its hand-written scanner when it is a known one.
struct Pattern {
    regex: fancy_regex::Regex,
    scanner: Option<WordPattern>,
}

impl Pattern {
    fn new(source: &str) -> Result<Self, Unsupported> {
        let regex = fancy_regex::Regex::new(source).or_else(|error| {
            unsupported(format!("the regex {source:?} does not compile: {error}"))
        })?;
        Ok(Self {
            regex,
            scanner: WordPattern::recognize(source),
        })
    }
}

fn pre_steps(pre_tokenizer: Option<&Value>) -> Result<Vec<PreStep>, Unsupported> {
    let Some(value) = pre_tokenizer.filter(|value| !value.is_null()) else {
        return Ok(Vec::new());
    };
    let steps = if type_of(value) == Some("Sequence") {
        let members = value.get("pretokenizers").and_then(Value::as_array);
        let members = members.ok_or_else(|| Unsupported("a pre-tokenizer Sequence".into()))?;
        members
            .iter()
            .map(pre_step)
            .collect::<Result<Vec<_>, _>>()?
    } else {
        vec![pre_step(value)?]
    };
    let byte_level_at = steps
        .iter()
        .position(|step| matches!(step, PreStep::ByteLevel { .. }));
    if byte_level_at.is_some_and(|at| at + 1 != steps.len()) {
        return unsupported("a pre-tokenizer after ByteLevel");
    }
    Ok(steps)
}

fn pre_step(value: &Value) -> Result<PreStep, Unsupported> {
    let flag = |name: &str| value.get(name).and_then(Value::as_bool);
    match type_of(value) {
        Some("WhitespaceSplit") => Ok(PreStep::WhitespaceSplit),
        Some("Split") if flag("invert") == Some(false) => {
            let isolated = match value.get("behavior").and_then(Value::as_str) {
                Some("Isolated") => true,
                Some("Removed") => false,
                _ => return unsupported(format!("the pre-tokenizer {}", describe(value))),
            };
            let pattern = value.get("pattern");
            let source = match (
                pattern.and_then(|pattern| pattern.get("Regex")),
                pattern.and_then(|pattern| pattern.get("String")),
            ) {
                (Some(Value::String(regex)), None) => regex.clone(),
                (None, Some(Value::String(literal))) => fancy_regex::escape(literal).into_owned(),
                _ => return unsupported(format!("the Split pattern {}", describe(value))),
            };
            Ok(PreStep::Split {
                pattern: Pattern::new(&source)?,
                isolated,
            })
        }
        Some("ByteLevel") => Ok(PreStep::ByteLevel {
            add_prefix_space: flag("add_prefix_space").unwrap_or(true),
            pattern: match flag("use_regex").unwrap_or(true) {
                true => Some(Pattern::new(BYTE_LEVEL_REGEX)?),
                false => None,
            },
        }),
        _ => unsupported(format!("the pre-tokenizer {}", describe(value))),
    }
}

impl PreStep {
    fn apply<'a>(&self, pieces: Vec<Cow<'a, str>>) -> Vec<Cow<'a, str>> {
        let mut out = Vec::with_capacity(pieces.len() * 2);
        for piece in pieces {
            match self {
                PreStep::WhitespaceSplit => each_part(piece, &mut out, whitespace_parts),
                PreStep::Split { pattern, isolated } => {
                    each_part(piece, &mut out, |text, parts| {
                        pattern_parts(pattern, *isolated, text, parts)
                    })
                }
                PreStep::ByteLevel {
                    add_prefix_space,
                    pattern,
                } => {
                    let piece = match *add_prefix_space && !piece.starts_with(' ') {
                        true => Cow::Owned(format!(" {piece}")),
                        false => piece,
                    };
                    match pattern {
                        Some(pattern) => each_part(piece, &mut out, |text, parts| {
                            pattern_parts(pattern, true, text, parts)
                        }),
                        None => out.push(piece),
                    }
                }
            }
        }
        out
    }
}

/// The parts of `piece` whose byte ranges `cut` finds, kept borrowed from the request text
/// when `piece` is.
fn each_part<'a>(
    piece: Cow<'a, str>,
    out: &mut Vec<Cow<'a, str>>,
    cut: impl Fn(&str, &mut Vec<(usize, usize)>),
) {
    let mut ranges = Vec::new();
    cut(&piece, &mut ranges);
    match piece {
        Cow::Borrowed(text) => out.extend(
            ranges
                .into_iter()
                .map(|(start, end)| Cow::Borrowed(&text[start..end])),
        ),
        Cow::Owned(text) => out.extend(
            ranges
                .into_iter()
                .map(|(start, end)| Cow::Owned(text[start..end].to_owned())),
        ),
    }
}

/// `text` cut by `pattern` as `tokenizers` cuts it: the matches and the stretches between
/// them (`isolated`), or only the stretches between them; empty ones dropped. A regex error (a
/// backtracking limit) ends the matches there, as it does in `tokenizers`.
fn pattern_parts(pattern: &Pattern, isolated: bool, text: &str, parts: &mut Vec<(usize, usize)>) {
    let mut push = |start: usize, end: usize| {
        if start < end {
            parts.push((start, end));
        }
    };
    let mut previous = 0;
    let mut cut_at = |start: usize, end: usize| {
        push(previous, start);
        if isolated {
            push(start, end);
        }
        previous = end;
    };
    match pattern.scanner.and_then(|scanner| scanner.matches(text)) {
        Some(found) => found
            .into_iter()
            .for_each(|(start, end)| cut_at(start, end)),
        None => {
            for found in pattern.regex.find_iter(text) {
                let Ok(found) = found else { break };
                cut_at(found.start(), found.end());
            }
        }
    }
    push(previous, text.len());
}

/// The byte ranges of `text` between runs of whitespace (`char::is_whitespace`), ASCII bytes
/// judged one at a time and only other characters decoded.
fn whitespace_parts(text: &str, parts: &mut Vec<(usize, usize)>) {
    let bytes = text.as_bytes();
    let mut start = None;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        let (space, width) = if byte.is_ascii() {
            (
                matches!(byte, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r'),
                1,
            )
        } else {
            let character = text[at..].chars().next().expect("at a character boundary");
            (character.is_whitespace(), character.len_utf8())
        };
        match (space, start) {
            (true, Some(from)) => {
                parts.push((from, at));
                start = None;
            }
            (false, None) => start = Some(at),
            _ => {}
        }
        at += width;
    }
    if let Some(from) = start {
        parts.push((from, text.len()));
    }
}

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the others for
/// characters from U+0100 on, in byte order.
fn byte_char(byte: u8) -> char {
    static TABLE: std::sync::LazyLock<[char; 256]> = std::sync::LazyLock::new(|| {
        let printable = |byte: u8| matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for byte in 0..=255u8 {
            table[byte as usize] = match printable(byte) {
                true => char::from(byte),
                false => {
                    let shifted = char::from_u32(next).expect("U+0100..U+0143 are characters");
                    next += 1;
                    shifted
                }
            };
        }
        table
    });
    TABLE[byte as usize]
}

fn byte_chars(text: &str) -> String {
    text.bytes().map(byte_char).collect()
}

/// How pieces become ids.
enum ModelStep {
    WordLevel {
        vocab: WordIds,
        unknown: Option<u32>,
    },
    /// BPE through the model, its answers kept per piece (the model's own cache answers with
    /// a fresh string per token).
    Bpe(PieceIds),
}

/// Pieces up to this many bytes are remembered.
const CACHED_PIECE_BYTES: usize = 128;

/// Pieces remembered at most (about 8 MiB for English-sized pieces).
const CACHED_PIECES: usize = 1 << 16;

/// The ids the BPE model gave each piece, bounded: once full, new pieces are not kept.
#[derive(Default)]
struct PieceIds(parking_lot::RwLock<std::collections::HashMap<Box<str>, Box<[u32]>>>);

impl PieceIds {
    /// `piece`'s ids, remembered under the piece as the pre-tokenizers gave it (before the
    /// byte-level spelling, when `byte_level`).
    fn push_ids(
        &self,
        model: &ModelWrapper,
        piece: &str,
        byte_level: bool,
        ids: &mut Vec<u32>,
    ) -> Option<()> {
        if let Some(known) = self.0.read().get(piece) {
            ids.extend_from_slice(known);
            return Some(());
        }
        let tokens = match byte_level {
            true => model.tokenize(&byte_chars(piece)),
            false => model.tokenize(piece),
        };
        let tokens = tokens.ok()?;
        let start = ids.len();
        ids.extend(tokens.iter().map(|token| token.id));
        if piece.len() <= CACHED_PIECE_BYTES {
            let mut known = self.0.write();
            if known.len() < CACHED_PIECES {
                known.insert(Box::from(piece), Box::from(&ids[start..]));
            }
        }
        Some(())
    }
}

impl ModelStep {
    fn from_model(json: Option<&Value>, model: &ModelWrapper) -> Result<Self, Unsupported> {
        match model {
            ModelWrapper::WordLevel(_) => {
                let json = json.ok_or_else(|| Unsupported("no model".into()))?;
                let words = json.get("vocab").and_then(Value::as_object);
                let words = words.ok_or_else(|| Unsupported("a WordLevel model's vocab".into()))?;
                let mut vocab = WordIds::with_capacity(words.len());
                for (word, id) in words {
                    let id = id.as_u64().and_then(|id| u32::try_from(id).ok());
                    let id = id.ok_or_else(|| Unsupported(format!("the id of {word:?}")))?;
                    vocab.insert(word, id)?;
                }
                let unknown = json.get("unk_token").and_then(Value::as_str);
                let unknown = unknown.and_then(|token| vocab.get(token));
                Ok(ModelStep::WordLevel { vocab, unknown })
            }
            ModelWrapper::BPE(bpe) if bpe.dropout.is_none_or(|dropout| dropout == 0.0) => {
                Ok(ModelStep::Bpe(PieceIds::default()))
            }
            ModelWrapper::BPE(_) => unsupported("a BPE model with dropout"),
            ModelWrapper::WordPiece(_) => unsupported("a WordPiece model"),
            ModelWrapper::Unigram(_) => unsupported("a Unigram model"),
        }
    }

    fn push_ids(
        &self,
        model: &ModelWrapper,
        pieces: &[Cow<'_, str>],
        byte_level: bool,
        ids: &mut Vec<u32>,
    ) -> Option<()> {
        match self {
            ModelStep::WordLevel { vocab, unknown } if byte_level => {
                let spelled: Vec<Cow<'_, str>> = pieces
                    .iter()
                    .map(|piece| Cow::Owned(byte_chars(piece)))
                    .collect();
                vocab.extend_ids(&spelled, *unknown, ids)
            }
            ModelStep::WordLevel { vocab, unknown } => vocab.extend_ids(pieces, *unknown, ids),
            ModelStep::Bpe(known) => {
                for piece in pieces {
                    known.push_ids(model, piece, byte_level, ids)?;
                }
                Some(())
            }
        }
    }
}

/// A word-level vocabulary: an open-addressing table of 32-byte slots (two per cache line)
/// keyed by the word's XXH3 under a per-process seed; words up to 16 bytes live in their slot,
/// longer ones in one shared buffer. Lookups come in batches whose slots are prefetched
/// first, so a prompt's cache misses overlap instead of queueing one after another.
struct WordIds {
    seed: u64,
    mask: usize,
    slots: Vec<WordSlot>,
    long_words: Vec<u8>,
}

/// Words up to this many bytes live in their slot.
const INLINE_WORD: usize = 16;

/// Lookups whose slots are prefetched together.
const LOOKUP_BATCH: usize = 16;

#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct WordSlot {
    /// The word's hash with the top bit set (0 marks an empty slot).
    tag: u64,
    id: u32,
    len: u32,
    /// The word itself when it fits, else its offset in `long_words` (first 8 bytes).
    bytes: [u8; INLINE_WORD],
}

const EMPTY: WordSlot = WordSlot {
    tag: 0,
    id: 0,
    len: 0,
    bytes: [0; INLINE_WORD],
};

impl WordIds {
    fn with_capacity(words: usize) -> Self {
        use std::hash::{BuildHasher, RandomState};
        let slots = (words * 2).next_power_of_two().max(16);
        Self {
            seed: RandomState::new().hash_one(0u8),
            mask: slots - 1,
            slots: vec![EMPTY; slots],
            long_words: Vec::new(),
        }
    }

    fn tag(&self, word: &[u8]) -> u64 {
        xxh3_64_with_seed(word, self.seed) | (1 << 63)
    }

    fn holds(&self, slot: &WordSlot, tag: u64, word: &[u8]) -> bool {
        if slot.tag != tag || slot.len as usize != word.len() {
            return false;
        }
        if word.len() <= INLINE_WORD {
            // The lengths are equal, so the slot's padding is not compared.
            return slot.bytes[..word.len()] == *word;
        }
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&slot.bytes[..8]);
        let start = u64::from_le_bytes(offset) as usize;
        self.long_words[start..start + word.len()] == *word
    }

    /// The slot holding `word`, or the empty one where it would go (the table is never full:
    /// it has at least twice as many slots as words).
    fn position(&self, tag: u64, word: &[u8]) -> usize {
        let mut at = tag as usize & self.mask;
        loop {
            let slot = &self.slots[at];
            if slot.tag == 0 || self.holds(slot, tag, word) {
                return at;
            }
            at = (at + 1) & self.mask;
        }
    }

    /// Adds `word` (a later id for the same word replaces the earlier, as in a JSON object).
    fn insert(&mut self, word: &str, id: u32) -> Result<(), Unsupported> {
        let bytes = word.as_bytes();
        let len = u32::try_from(bytes.len()).or_else(|_| unsupported("a word above 4 GiB"))?;
        let tag = self.tag(bytes);
        let at = self.position(tag, bytes);
        if self.slots[at].tag != 0 {
            self.slots[at].id = id;
            return Ok(());
        }
        let mut inline = [0u8; INLINE_WORD];
        if let Some(padded) = padded(bytes) {
            inline = padded;
        } else {
            inline[..8].copy_from_slice(&(self.long_words.len() as u64).to_le_bytes());
            self.long_words.extend_from_slice(bytes);
        }
        self.slots[at] = WordSlot {
            tag,
            id,
            len,
            bytes: inline,
        };
        Ok(())
    }

    fn get(&self, word: &str) -> Option<u32> {
        let bytes = word.as_bytes();
        let slot = &self.slots[self.position(self.tag(bytes), bytes)];
        (slot.tag != 0).then_some(slot.id)
    }

    /// The ids of `words` (`unknown` for a word not in the vocabulary) appended to `ids`;
    /// `None` when a word is unknown and there is no unknown token.
    fn extend_ids(
        &self,
        words: &[Cow<'_, str>],
        unknown: Option<u32>,
        ids: &mut Vec<u32>,
    ) -> Option<()> {
        let mut tags = [0u64; LOOKUP_BATCH];
        for batch in words.chunks(LOOKUP_BATCH) {
            for (tag, word) in tags.iter_mut().zip(batch) {
                *tag = self.tag(word.as_bytes());
                prefetch(&self.slots[*tag as usize & self.mask]);
            }
            for (tag, word) in tags.iter().zip(batch) {
                let slot = &self.slots[self.position(*tag, word.as_bytes())];
                ids.push(if slot.tag != 0 { slot.id } else { unknown? });
            }
        }
        Some(())
    }
}

/// `word` zero-padded to a slot's bytes, when it fits in one.
#[inline(always)]
fn padded(word: &[u8]) -> Option<[u8; INLINE_WORD]> {
    let mut padded = [0u8; INLINE_WORD];
    padded.get_mut(..word.len())?.copy_from_slice(word);
    Some(padded)
}

/// Asks the CPU to bring `slot`'s cache line in (a hint; nothing on other targets).
#[inline(always)]
fn prefetch(slot: &WordSlot) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of every x86_64 target, and a prefetch only hints the cache: it
        // neither reads nor writes memory as the program sees it.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((slot as *const WordSlot).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

/// The ids the post-processor puts before and after one sequence when special tokens are
/// added.
fn post_processor_ids(processor: Option<&Value>) -> Result<(Vec<u32>, Vec<u32>), Unsupported> {
    let Some(processor) = processor.filter(|value| !value.is_null()) else {
        return Ok((Vec::new(), Vec::new()));
    };
    match type_of(processor) {
        Some("ByteLevel") => Ok((Vec::new(), Vec::new())),
        Some("Sequence") => {
            let members = processor.get("processors").and_then(Value::as_array);
            let members = members.ok_or_else(|| Unsupported("a processor Sequence".into()))?;
            let mut around = (Vec::new(), Vec::new());
            for member in members {
                let (prefix, suffix) = post_processor_ids(Some(member))?;
                if !(prefix.is_empty() && suffix.is_empty()) {
                    if !(around.0.is_empty() && around.1.is_empty()) {
                        return unsupported("two post-processors that add tokens");
                    }
                    around = (prefix, suffix);
                }
            }
            Ok(around)
        }
        Some("BertProcessing" | "RobertaProcessing") => {
            let id = |name: &str| {
                processor
                    .get(name)
                    .and_then(|pair| pair.get(1))
                    .and_then(Value::as_u64)
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| Unsupported(format!("the processor's `{name}`")))
            };
            Ok((vec![id("cls")?], vec![id("sep")?]))
        }
        Some("TemplateProcessing") => template_ids(processor),
        _ => unsupported(format!("the post-processor {}", describe(processor))),
    }
}

fn template_ids(processor: &Value) -> Result<(Vec<u32>, Vec<u32>), Unsupported> {
    let single = processor.get("single").and_then(Value::as_array);
    let single = single.ok_or_else(|| Unsupported("a template without `single`".into()))?;
    let (mut prefix, mut suffix) = (Vec::new(), Vec::new());
    let mut seen_sequence = false;
    for piece in single {
        if piece.get("Sequence").is_some() {
            if seen_sequence {
                return unsupported("a single template with two sequences");
            }
            seen_sequence = true;
            continue;
        }
        let name = piece
            .get("SpecialToken")
            .and_then(|special| special.get("id"))
            .and_then(Value::as_str)
            .ok_or_else(|| Unsupported(format!("the template piece {piece}")))?;
        let ids = processor
            .get("special_tokens")
            .and_then(|specials| specials.get(name))
            .and_then(|special| special.get("ids"))
            .and_then(Value::as_array)
            .ok_or_else(|| Unsupported(format!("the template's special token {name:?}")))?;
        let target = if seen_sequence {
            &mut suffix
        } else {
            &mut prefix
        };
        for id in ids {
            let id = id.as_u64().and_then(|id| u32::try_from(id).ok());
            target.push(id.ok_or_else(|| Unsupported(format!("an id of {name:?}")))?);
        }
    }
    Ok((prefix, suffix))
}

fn type_of(value: &Value) -> Option<&str> {
    value.get("type").and_then(Value::as_str)
}

fn describe(value: &Value) -> String {
    type_of(value).map_or_else(|| value.to_string(), |name| format!("`{name}`"))
}
