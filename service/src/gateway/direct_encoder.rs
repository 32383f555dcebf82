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
//! 4. the model: `WordLevel` looked up in a table of its own ([`word_ids`](super::word_ids);
//!    after `WhitespaceSplit` alone, cutting and looking up are one pass over the text, with
//!    no list of pieces in between), `BPE` through the model itself (its merges), each piece's
//!    ids then remembered under the piece as the pre-tokenizers cut it, so a remembered piece
//!    is not spelled in byte characters again (the remembered pieces are read under one lock
//!    per text);
//! 5. the post-processor's special tokens for one sequence (`TemplateProcessing`, `Bert`,
//!    `Roberta`, `ByteLevel`, or a `Sequence` of them).
//!
//! Any other pipeline, or an option these steps do not reproduce (truncation, padding, dropout,
//! added tokens that strip or match single words), gets no direct encoder, and a text is handed
//! back whenever an exact answer is not certain (NFC on non-ASCII text, an unknown word without
//! an unknown token, a model error). [`DirectEncoder::plan`] also checks itself against the
//! full pipeline on probe texts before it is used.

use super::unsupported_tokenizer::Unsupported;
use super::whitespace_words::for_each_word;
use super::word_ids::WordIds;
use super::word_pattern::WordPattern;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use serde_json::Value;
use std::borrow::Cow;
use tokenizers::{Model, ModelWrapper, Tokenizer};

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
        if let (ModelStep::WordLevel { vocab, unknown }, [PreStep::WhitespaceSplit], false) =
            (&self.model, self.steps.as_slice(), self.byte_level)
        {
            // The word-level pipeline in one pass: no pieces are collected in between.
            return vocab.extend_whitespace_words(text, *unknown, ids);
        }
        let mut pieces = vec![Cow::Borrowed(text)];
        for step in self.steps.iter().filter(|step| !step.passes_through()) {
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
    /// Whether the step hands every piece on as it is (a `ByteLevel` step that neither adds a
    /// space nor cuts: its byte-level spelling is the model step's business).
    fn passes_through(&self) -> bool {
        matches!(
            self,
            PreStep::ByteLevel {
                add_prefix_space: false,
                pattern: None
            }
        )
    }

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

/// The byte ranges of `text` between runs of whitespace (`char::is_whitespace`).
fn whitespace_parts(text: &str, parts: &mut Vec<(usize, usize)>) {
    for_each_word(text, |start, end| parts.push((start, end)));
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

/// Pieces remembered at most. Those of up to 8 bytes take at most 2 MiB of buckets; a longer
/// one takes 128–256 bytes of slots (a quarter full or less) and its own bytes.
const CACHED_PIECES: usize = 1 << 16;

/// The ids the BPE model gave each piece, bounded: once full, new pieces are not kept.
#[derive(Default)]
struct PieceIds(parking_lot::RwLock<PieceTable>);

/// Pieces and their ids: a piece of one token keeps it in the table's slot, a piece of more
/// keeps where its ids are in `lists` there, with [`SEVERAL`] set.
struct PieceTable {
    pieces: WordIds,
    /// The ids of every remembered piece of more than one token, one after another, so that
    /// reading a piece's ids after its slot is one more memory access, not two.
    lists: Vec<u32>,
}

/// Marks a slot's value as a piece's ids in [`PieceTable::lists`]: their count in the
/// [`LIST_LEN_BITS`] bits below this one, their start in the [`LIST_START_BITS`] bits below
/// those.
const SEVERAL: u32 = 1 << 31;

/// Bits of a [`SEVERAL`] value that give the ids' start in [`PieceTable::lists`]: room for
/// [`CACHED_PIECES`] pieces of [`CACHED_PIECE_BYTES`] ids each.
const LIST_START_BITS: u32 = 23;

/// Bits of a [`SEVERAL`] value that give how many ids the piece has.
const LIST_LEN_BITS: u32 = 8;

impl Default for PieceTable {
    fn default() -> Self {
        Self {
            pieces: WordIds::with_capacity(1024),
            lists: Vec::new(),
        }
    }
}

impl PieceTable {
    fn get(&self, piece: &str) -> Option<&[u32]> {
        let value = self.pieces.get_ref(piece)?;
        Some(match *value & SEVERAL {
            0 => std::slice::from_ref(value),
            _ => {
                let start = (*value & ((1 << LIST_START_BITS) - 1)) as usize;
                let len = ((*value >> LIST_START_BITS) & ((1 << LIST_LEN_BITS) - 1)) as usize;
                &self.lists[start..start + len]
            }
        })
    }

    /// Remembers `piece`'s `ids`, unless the table is full (or the ids would not fit a
    /// [`SEVERAL`] value, which a piece of [`CACHED_PIECE_BYTES`] or fewer always does).
    fn remember(&mut self, piece: &str, ids: &[u32]) {
        if self.pieces.len() >= CACHED_PIECES || self.pieces.get(piece).is_some() {
            return;
        }
        let value = match ids {
            [id] if id & SEVERAL == 0 => *id,
            _ => {
                let start = self.lists.len();
                if ids.len() >= 1 << LIST_LEN_BITS || start + ids.len() > 1 << LIST_START_BITS {
                    return;
                }
                self.lists.extend_from_slice(ids);
                SEVERAL | ((ids.len() as u32) << LIST_START_BITS) | start as u32
            }
        };
        // A piece under CACHED_PIECE_BYTES always fits a slot's length.
        let _ = self.pieces.insert(piece, value);
    }
}

impl PieceIds {
    /// The ids of `pieces` appended to `ids`: remembered ones read under one read lock for the
    /// whole text (a lock per piece cost more than the lookups), new ones tokenized by
    /// `model` with the lock released and then remembered under the piece as the
    /// pre-tokenizers gave it (before the byte-level spelling, when `byte_level`).
    fn push_ids(
        &self,
        model: &ModelWrapper,
        pieces: &[Cow<'_, str>],
        byte_level: bool,
        ids: &mut Vec<u32>,
    ) -> Option<()> {
        let mut known = self.0.read();
        for piece in pieces {
            if let Some(remembered) = known.get(piece) {
                ids.extend_from_slice(remembered);
                continue;
            }
            let start = ids.len();
            parking_lot::RwLockReadGuard::unlocked(&mut known, || {
                tokenize(model, piece, byte_level, ids)
            })?;
            if piece.len() <= CACHED_PIECE_BYTES {
                parking_lot::RwLockReadGuard::unlocked(&mut known, || {
                    self.0.write().remember(piece, &ids[start..]);
                });
            }
        }
        Some(())
    }
}

/// `piece`'s ids from the BPE model itself, spelled in GPT-2's byte characters first when
/// `byte_level`.
fn tokenize(model: &ModelWrapper, piece: &str, byte_level: bool, ids: &mut Vec<u32>) -> Option<()> {
    let tokens = match byte_level {
        true => model.tokenize(&byte_chars(piece)),
        false => model.tokenize(piece),
    };
    ids.extend(tokens.ok()?.iter().map(|token| token.id));
    Some(())
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
            ModelStep::Bpe(known) => known.push_ids(model, pieces, byte_level, ids),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_pieces_give_back_their_ids() {
        let mut table = PieceTable::default();
        let long: Vec<u32> = (0..128).collect();
        let remembered: [(&str, &[u32]); 6] = [
            ("one", &[7]),
            ("two", &[1, 2]),
            ("high", &[SEVERAL | 5]),
            ("none", &[]),
            ("long-piece", &long),
            ("three", &[3, 4, 5]),
        ];
        for (piece, ids) in remembered {
            table.remember(piece, ids);
        }
        for (piece, ids) in remembered {
            assert_eq!(table.get(piece), Some(ids), "{piece}");
        }
        table.remember("two", &[9]);
        assert_eq!(
            table.get("two"),
            Some(&[1, 2][..]),
            "the first answer stays"
        );
        assert_eq!(table.get("four"), None);
    }

    #[test]
    fn ids_that_would_not_fit_a_value_are_not_remembered() {
        let mut table = PieceTable::default();
        let too_many: Vec<u32> = (0..1 << LIST_LEN_BITS).collect();
        table.remember("too-many", &too_many);
        assert_eq!(table.get("too-many"), None);
        table.lists = vec![0; (1 << LIST_START_BITS) - 2];
        table.remember("past-the-end", &[1, 2, 3]);
        assert_eq!(table.get("past-the-end"), None);
        table.remember("up-to-the-end", &[1, 2]);
        assert_eq!(table.get("up-to-the-end"), Some(&[1, 2][..]));
    }
}
