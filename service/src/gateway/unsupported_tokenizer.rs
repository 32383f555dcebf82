//! Why a tokenizer gets no direct encoder: the reason, logged once when the model loads, after
//! which its prompts go through the `tokenizers` pipeline. Enters: what the direct encoder or its
//! word table could not take; leaves: an [`Unsupported`] error.

/// Why a tokenizer gets no direct encoder (logged once at load).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub(super) String);
