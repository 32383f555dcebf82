//! The direct encoder gives the ids `tokenizers`' full pipeline gives, on random texts and on
//! every pipeline variant it accepts (the Llama-3-style fixture, GPT-2's byte-level regex with
//! a prefix space, an NFC normalizer, Bert-style post-processing, word-level models with and
//! without an unknown token), and it declines the pipelines and texts it cannot reproduce.

use kv_router_service::gateway::direct_encoder::DirectEncoder;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;
use tokenizers::Tokenizer;

fn fixture_json() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-model/tokenizer.json");
    serde_json::from_slice(&std::fs::read(path).expect("read the fixture")).expect("JSON")
}

fn tokenizer(json: &Value) -> Tokenizer {
    Tokenizer::from_bytes(serde_json::to_vec(json).expect("serialize")).expect("a tokenizer")
}

/// The fixture with `edit` applied.
fn variant(edit: impl FnOnce(&mut Value)) -> Value {
    let mut json = fixture_json();
    edit(&mut json);
    json
}

fn gpt2_style() -> Value {
    variant(|json| {
        json["pre_tokenizer"] = json!({"type": "ByteLevel", "add_prefix_space": true,
            "trim_offsets": true, "use_regex": true});
        json["post_processor"] = json!({"type": "ByteLevel", "add_prefix_space": true,
            "trim_offsets": true, "use_regex": true});
    })
}

fn nfc_bert_style() -> Value {
    variant(|json| {
        json["normalizer"] = json!({"type": "NFC"});
        json["post_processor"] = json!({"type": "BertProcessing",
            "sep": ["<|end_of_text|>", 1001], "cls": ["<|begin_of_text|>", 1000]});
        json["added_tokens"]
            .as_array_mut()
            .expect("added tokens")
            .push(
                json!({"id": 1005, "content": "fox", "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": true, "special": false}),
            );
    })
}

fn word_level(unknown: bool) -> Value {
    let mut vocab = serde_json::Map::new();
    for (id, word) in [
        "the",
        "quick",
        "brown",
        "fox",
        "w1",
        "w22",
        "naïve",
        "東京",
        "supercalifragilistic",
        "supercalifragilisticexpialidocious",
        "abcdefgh",
        "abcdefghijklmno",
        "abcdefghijklmnop",
        "abcdefghijklmnopq",
        "ab\u{1}cd",
    ]
    .iter()
    .enumerate()
    {
        vocab.insert((*word).into(), json!(id));
    }
    vocab.insert("[UNK]".into(), json!(100));
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 100, "content": "[UNK]", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab,
            "unk_token": if unknown { "[UNK]" } else { "<missing>" }}
    })
}

/// Every accepted variant, named.
fn variants() -> Vec<(&'static str, Value)> {
    vec![
        ("llama-3-style fixture", fixture_json()),
        ("gpt-2 byte-level regex", gpt2_style()),
        ("nfc and bert processing", nfc_bert_style()),
        ("word level", word_level(true)),
        ("word level without unknown", word_level(false)),
    ]
}

struct Case {
    name: &'static str,
    tokenizer: Tokenizer,
    direct: DirectEncoder,
}

fn cases() -> Vec<Case> {
    variants()
        .into_iter()
        .map(|(name, json)| {
            let tokenizer = tokenizer(&json);
            let direct = DirectEncoder::plan(&json, &tokenizer)
                .unwrap_or_else(|why| panic!("{name}: no direct encoder: {why}"));
            Case {
                name,
                tokenizer,
                direct,
            }
        })
        .collect()
}

/// Checks `text` on every case: the direct ids equal the full pipeline's whenever the direct
/// encoder answers, and it answers every text it is sure of.
fn assert_same(cases: &[Case], text: &str) {
    for case in cases {
        for add_special_tokens in [false, true] {
            let full = case
                .tokenizer
                .encode_fast(text, add_special_tokens)
                .map(|encoding| encoding.get_ids().to_vec());
            let direct = case
                .direct
                .encode(&case.tokenizer, text, add_special_tokens);
            match (&direct, &full) {
                (Some(direct), Ok(full)) => assert_eq!(
                    direct, full,
                    "{}: {text:?} (special tokens {add_special_tokens})",
                    case.name
                ),
                (Some(direct), Err(error)) => panic!(
                    "{}: {text:?} gave {direct:?} where tokenizers fails: {error}",
                    case.name
                ),
                (None, _) => {
                    let may_decline = (case.name == "nfc and bert processing" && !text.is_ascii())
                        || (case.name == "word level without unknown" && full.is_err());
                    assert!(may_decline, "{}: declined {text:?}", case.name);
                }
            }
        }
    }
}

const PIECES: &[&str] = &[
    "supercalifragilistic",
    "supercalifragilisticexpialidocious",
    "supercalifragilisticexpialidociouz",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|end",
    "fox",
    "the",
    "quick",
    "w1",
    "w22",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\u{a0}",
    "\u{3000}",
    "'s",
    "'LL",
    "don't",
    "123456",
    "3.14",
    "!!",
    "...",
    "naïve",
    "nai\u{308}ve",
    "東京",
    "😀",
    "[UNK]",
    "abcdefgh",
    "abcdefghijklmno",
    "abcdefghijklmnop",
    "abcdefghijklmnopq",
    "ab\u{1}cd",
    "\u{b}",
    "\u{c}",
    "\u{1f}",
    "\u{85}",
    "\u{2028}",
    "\u{200b}",
];

/// Text made of the pieces pre-tokenizers and added tokens care about.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        proptest::sample::select(PIECES).prop_map(str::to_owned),
        "[a-zA-Z]{1,8}",
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn the_direct_ids_are_the_full_pipelines(text in text()) {
        CASES.with(|cases| assert_same(cases, &text));
    }
}

thread_local! {
    static CASES: Vec<Case> = cases();
}

#[test]
fn long_and_edge_texts_match() {
    let cases = cases();
    let english = "The quick brown fox's 12 jumps, over\r\nthe lazy dog!! ".repeat(300);
    for text in [
        "",
        " ",
        "\n\n\n",
        "<|begin_of_text|><|begin_of_text|>",
        "<|begin_of_text|>the<|eot_id|>",
        english.as_str(),
    ] {
        assert_same(&cases, text);
    }
}

#[test]
fn pipelines_it_cannot_reproduce_get_none_and_say_why() {
    let declined = [
        (
            variant(|json| {
                json["pre_tokenizer"] = json!({"type": "Metaspace", "replacement": "▁",
                    "prepend_scheme": "always", "split": true});
            }),
            "`Metaspace`",
        ),
        (
            variant(|json| {
                json["truncation"] = json!({"direction": "Right", "max_length": 8,
                    "strategy": "LongestFirst", "stride": 0});
            }),
            "`truncation`",
        ),
        (
            variant(|json| json["normalizer"] = json!({"type": "Lowercase"})),
            "`Lowercase`",
        ),
        (
            variant(|json| json["added_tokens"][0]["lstrip"] = json!(true)),
            "strips spaces",
        ),
        (
            variant(|json| {
                json["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
                    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                     "use_regex": false},
                    {"type": "WhitespaceSplit"}]});
            }),
            "after ByteLevel",
        ),
    ];
    for (json, reason) in declined {
        let why = DirectEncoder::plan(&json, &tokenizer(&json))
            .expect_err("declined")
            .to_string();
        assert!(why.contains(reason), "{why:?} should name {reason:?}");
    }
}
