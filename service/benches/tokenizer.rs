//! Prompt tokenization, the gateway's largest cost per request: `tokenizers`' full pipeline
//! (`encode_fast`) against the gateway's direct encoder, on the same texts, with the same ids
//! checked on every call.
//!
//! Tokenizers: a word-level one shaped like the gateway bench's (32,000 words `w0`…, split on
//! whitespace) and the Llama-3-style byte-level BPE fixture (`tests/fixtures/tiny-model`).
//! Texts: random words of that vocabulary, and English sentences, at about 512 and 8,192
//! tokens; a new text per call. "Cold" calls run after 64 MiB of other memory was walked, as
//! a gateway's requests do between network reads; "warm" calls repeat the text at once.
//! Prints the median microseconds per call.
//!
//! `cargo bench -p kv-router-service --bench tokenizer`

use indicatif::{ProgressBar, ProgressStyle};
use kv_router_service::gateway::direct_encoder::DirectEncoder;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use tokenizers::Tokenizer;

use dynamo_router_catalog as _;

/// Calls per cell.
const CALLS: usize = 60;

/// Memory walked before a cold call.
const EVICT_BYTES: usize = 64 << 20;

struct Model {
    name: &'static str,
    tokenizer: Tokenizer,
    direct: DirectEncoder,
}

impl Model {
    fn new(name: &'static str, json: Value) -> Self {
        let tokenizer = Tokenizer::from_bytes(serde_json::to_vec(&json).expect("serialize"))
            .expect("a tokenizer");
        let direct = DirectEncoder::plan(&json, &tokenizer).expect("a direct encoder");
        Self {
            name,
            tokenizer,
            direct,
        }
    }
}

fn word_level() -> Value {
    let mut vocab = serde_json::Map::new();
    for id in 0..32_000u32 {
        vocab.insert(format!("w{id}"), json!(id));
    }
    vocab.insert("[UNK]".into(), json!(32_000));
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 32_000, "content": "[UNK]", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    })
}

fn tiny_model() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-model/tokenizer.json");
    serde_json::from_slice(&std::fs::read(path).expect("read the fixture")).expect("JSON")
}

/// A splitmix64 stream, so every run sees the same texts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
}

fn random_words(rng: &mut Rng, count: usize) -> String {
    let words: Vec<String> = (0..count)
        .map(|_| format!("w{}", rng.next() % 32_000))
        .collect();
    words.join(" ")
}

/// English sentences of about `tokens` BPE tokens on the fixture (about 1.8 bytes a token).
fn english(rng: &mut Rng, tokens: usize) -> String {
    const SUBJECTS: &[&str] = &["The cat", "A teacher", "My neighbour", "The old engine"];
    const VERBS: &[&str] = &["reads", "repairs", "paints", "follows", "counts"];
    const OBJECTS: &[&str] = &["the letters", "a bicycle", "twelve boxes", "the river"];
    const ADVERBS: &[&str] = &["slowly", "every morning", "again", "without a word"];
    let mut text = String::new();
    while text.len() < tokens * 9 / 5 {
        let number = rng.next() % 1000;
        let sentence = format!(
            "{} {} {} {} ({number}).\n",
            rng.pick(SUBJECTS),
            rng.pick(VERBS),
            rng.pick(OBJECTS),
            rng.pick(ADVERBS)
        );
        text.push_str(&sentence);
    }
    text
}

fn evict(buffer: &mut [u8]) {
    for byte in buffer.iter_mut().step_by(64) {
        *byte = byte.wrapping_add(1);
    }
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

/// Median µs per call of the full pipeline and of the direct encoder, cold and warm.
fn measure(model: &Model, texts: &[String], buffer: &mut [u8]) -> [f64; 4] {
    let mut cells: [Vec<Duration>; 4] = Default::default();
    for text in texts {
        let mut ids = Vec::new();
        for (cell, direct) in [(0, false), (2, true)] {
            evict(buffer);
            for offset in 0..2 {
                let started = Instant::now();
                let encoded = if direct {
                    model.direct.encode(&model.tokenizer, text, true)
                } else {
                    let encoding = model.tokenizer.encode_fast(text.as_str(), true);
                    encoding.ok().map(|encoding| encoding.get_ids().to_vec())
                };
                cells[cell + offset].push(started.elapsed());
                let encoded = encoded.expect("encodes");
                if ids.is_empty() {
                    ids = encoded;
                } else {
                    assert_eq!(ids, encoded, "{}: the ids differ", model.name);
                }
            }
        }
    }
    cells.map(median)
}

fn main() {
    let models = [
        Model::new("word-level, 32,000 words", word_level()),
        Model::new("Llama-3-style byte-level BPE", tiny_model()),
    ];
    let mut rng = Rng(20_261_204);
    let mut buffer = vec![0u8; EVICT_BYTES];
    let progress = ProgressBar::new((models.len() * 2) as u64)
        .with_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("template"));
    let mut rows = Vec::new();
    for model in &models {
        for size in [512usize, 8192] {
            progress.set_message(format!("{} at {size}", model.name));
            let texts: Vec<String> = (0..CALLS)
                .map(|_| match model.name.starts_with("word") {
                    true => random_words(&mut rng, size),
                    false => english(&mut rng, size),
                })
                .collect();
            let tokens = model.direct.encode(&model.tokenizer, &texts[0], true);
            let tokens = tokens.expect("encodes").len();
            rows.push((model.name, tokens, measure(model, &texts, &mut buffer)));
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    println!(
        "{:<30} {:>7} | {:>16} | {:>16} | {:>13}",
        "tokenizer", "tokens", "full cold / warm", "direct cold/warm", "speed-up cold"
    );
    for (name, tokens, [full_cold, full_warm, direct_cold, direct_warm]) in rows {
        println!(
            "{name:<30} {tokens:>7} | {full_cold:>7.0} / {full_warm:>6.0} | {direct_cold:>7.0} / {direct_warm:>6.0} | {:>12.1}x",
            full_cold / direct_cold
        );
    }
    println!("(median µs per call, {CALLS} texts a cell)");
}
