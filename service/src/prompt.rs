//! A request's prompt, normalised: the router's sequence hashes and the prompt length.

use crate::error::ServiceError;
use crate::selection_request::PromptRequest;
use dynamo_kv_router::kv::hashing::{block_hashes, sequence_hashes};

/// A prompt ready for the router: one sequence hash per full block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalizedPrompt {
    /// The router's sequence hashes, one per full block.
    pub sequence_hashes: Vec<u64>,
    /// The prompt length in tokens.
    pub isl_tokens: usize,
    /// The sequence hashes a booking answer reports (signed, as upstream): the router's, or
    /// the caller's own for a hash-only prompt.
    pub reported_hashes: Vec<i64>,
}

impl PromptRequest {
    /// The prompt for a partition whose blocks hold `block_size` tokens. Token prompts are
    /// hashed here; hash-only prompts need `block_hashes`, `sequence_hashes` and `isl_tokens`.
    pub fn normalize(&self, block_size: u32) -> Result<NormalizedPrompt, ServiceError> {
        if let Some(tokens) = self.routing_tokens()? {
            let local = self.local_hashes(tokens, block_size)?;
            let chained = sequence_hashes(&local);
            let reported = chained.iter().map(|hash| *hash as i64).collect();
            return Ok(NormalizedPrompt {
                sequence_hashes: chained,
                isl_tokens: tokens.len(),
                reported_hashes: reported,
            });
        }
        let local = self.block_hashes.as_deref().ok_or_else(|| {
            ServiceError::BadRequest("block_hashes is required without token_ids".to_owned())
        })?;
        let given = self.sequence_hashes.as_deref().ok_or_else(|| {
            ServiceError::BadRequest("sequence_hashes is required without token_ids".to_owned())
        })?;
        let isl_tokens = self.isl_tokens.ok_or_else(|| {
            ServiceError::BadRequest("isl_tokens is required without token_ids".to_owned())
        })?;
        if isl_tokens == 0 {
            return Err(ServiceError::BadRequest(
                "isl_tokens must be greater than 0".to_owned(),
            ));
        }
        if local.len() != given.len() {
            return Err(ServiceError::BadRequest(format!(
                "block_hashes length {} must match sequence_hashes length {}",
                local.len(),
                given.len()
            )));
        }
        let local: Vec<u64> = local.iter().map(|hash| *hash as u64).collect();
        Ok(NormalizedPrompt {
            sequence_hashes: sequence_hashes(&local),
            isl_tokens,
            reported_hashes: given.to_vec(),
        })
    }

    /// The tokens to route on: `mm_routing_info.routing_token_ids` when present and non-empty,
    /// else `token_ids`.
    fn routing_tokens(&self) -> Result<Option<&[u32]>, ServiceError> {
        if let Some(info) = &self.mm_routing_info
            && !info.routing_token_ids.is_empty()
        {
            if info.block_mm_infos.iter().any(|info| !info.is_null()) {
                return Err(ServiceError::BadRequest(
                    "mm_routing_info.block_mm_infos is not supported by this router; send the \
                     routing tokens without per-block multimodal information"
                        .to_owned(),
                ));
            }
            return Ok(Some(&info.routing_token_ids));
        }
        Ok(self.token_ids.as_deref())
    }

    fn local_hashes(&self, tokens: &[u32], block_size: u32) -> Result<Vec<u64>, ServiceError> {
        if self.lora_name.is_some() || self.cache_salt.is_some() {
            return Err(ServiceError::BadRequest(
                "lora_name and cache_salt are not supported by this router yet; omit them"
                    .to_owned(),
            ));
        }
        if self.is_eagle == Some(true) {
            return Err(ServiceError::BadRequest(
                "is_eagle is not supported by this router; omit it".to_owned(),
            ));
        }
        Ok(block_hashes(tokens, block_size))
    }
}
