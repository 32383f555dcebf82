//! A request's prompt, normalised: the router's sequence hashes and the prompt length.

use crate::error::ServiceError;
use crate::selection::selection_request::PromptRequest;
use dynamo_kv_router::kv::{
    BlockExtraInfo, LocalBlockHash, RequestIdentity, SequenceHash, local_block_hashes,
    sequence_hashes,
};

/// A prompt ready for the router: one sequence hash per full block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalizedPrompt {
    /// The router's sequence hashes, one per full block.
    pub sequence_hashes: Vec<SequenceHash>,
    /// The prompt length in tokens.
    pub isl_tokens: usize,
    /// The sequence hashes a booking answer reports (signed, as upstream): the router's, or
    /// the caller's own for a hash-only prompt.
    pub reported_hashes: Vec<i64>,
}

impl PromptRequest {
    /// The identity that salts the prompt's block hashes: `lora_name`, `cache_salt` (upstream's
    /// cache namespace), the multimodal objects of `block_mm_infos`, and `is_eagle` (else
    /// `default_eagle`, the partition's setting).
    pub fn identity(&self, default_eagle: bool) -> Result<RequestIdentity, ServiceError> {
        let mut identity =
            RequestIdentity::plain().with_eagle(self.is_eagle.unwrap_or(default_eagle));
        if let Some(name) = self.lora_name.as_deref().filter(|name| !name.is_empty()) {
            identity = identity.with_lora(name);
        }
        if let Some(salt) = self.cache_salt.as_deref().filter(|salt| !salt.is_empty()) {
            identity = identity.with_cache_namespace(salt);
        }
        let infos = match &self.mm_routing_info {
            Some(info) if !info.routing_token_ids.is_empty() => Some(&info.block_mm_infos),
            _ => self.block_mm_infos.as_ref(),
        };
        if let Some(infos) = infos {
            let hashes = infos
                .iter()
                .enumerate()
                .map(|(block, info)| mm_hashes(block, info))
                .collect::<Result<Vec<_>, _>>()?;
            identity = identity.with_block_mm_hashes(hashes);
        }
        Ok(identity)
    }

    /// The prompt for a partition whose blocks hold `block_size` tokens and whose workers run
    /// EAGLE when `eagle`. Token prompts are hashed here; hash-only prompts need
    /// `block_hashes`, `sequence_hashes` and `isl_tokens`.
    pub fn normalize(
        &self,
        block_size: u32,
        eagle: bool,
    ) -> Result<NormalizedPrompt, ServiceError> {
        if let Some(tokens) = self.routing_tokens() {
            let local = local_block_hashes(tokens, block_size, &self.identity(eagle)?);
            let chained = sequence_hashes(&local);
            let reported = chained.iter().map(|hash| hash.get() as i64).collect();
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
        let local: Vec<LocalBlockHash> = local
            .iter()
            .map(|hash| LocalBlockHash(*hash as u64))
            .collect();
        Ok(NormalizedPrompt {
            sequence_hashes: sequence_hashes(&local),
            isl_tokens,
            reported_hashes: given.to_vec(),
        })
    }

    /// The tokens to route on: `mm_routing_info.routing_token_ids` when present and non-empty,
    /// else `token_ids`.
    pub fn routing_tokens(&self) -> Option<&[u32]> {
        match &self.mm_routing_info {
            Some(info) if !info.routing_token_ids.is_empty() => Some(&info.routing_token_ids),
            _ => self.token_ids.as_deref(),
        }
    }
}

/// The multimodal object hashes of block `block` (`null` = none).
fn mm_hashes(block: usize, info: &serde_json::Value) -> Result<Vec<u64>, ServiceError> {
    if info.is_null() {
        return Ok(Vec::new());
    }
    let info: BlockExtraInfo = serde_json::from_value(info.clone()).map_err(|error| {
        ServiceError::BadRequest(format!(
            "block_mm_infos[{block}]: {error}; expected {{\"mm_objects\": [{{\"mm_hash\", \"offsets\"}}]}} or null"
        ))
    })?;
    Ok(info
        .mm_objects
        .iter()
        .map(|object| object.mm_hash)
        .collect())
}
