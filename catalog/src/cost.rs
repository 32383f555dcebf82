//! The upstream per-worker cost that `dynamo-default-cost-fn` and `kvcr` minimise.

use crate::invalid_parameter::{InvalidParameter, non_negative};
use dynamo_kv_router::plugins::{Candidate, PolicyError, RequestView, WorkerLoad};

/// Default of `overlap_score_credit`: a cached block saves one block of prefill.
pub const DEFAULT_OVERLAP_SCORE_CREDIT: f64 = 1.0;
/// Default of `prefill_load_scale`.
pub const DEFAULT_PREFILL_LOAD_SCALE: f64 = 1.0;
/// Default of `decode_active_request_weight`: active requests do not count beyond their blocks.
pub const DEFAULT_DECODE_ACTIVE_REQUEST_WEIGHT: f64 = 0.0;

/// The cost of booking a request on a worker; lower is better.
///
/// ```text
/// credit  = overlap_score_credit * overlap
/// prefill = (active_prefill_tokens + prompt_tokens) / block_size
/// cost    = prefill_load_scale * max(prefill - credit, 0)
///         + potential_decode_blocks
///         + decode_active_request_weight * active_requests
/// ```
/// `overlap` is the worker's cached prefix in blocks, plus, under `kvcr`, the shared-cache
/// credit for blocks a peer can supply. `potential_decode_blocks` is upstream's decode term: the
/// worker's distinct active blocks plus the request's blocks that no active request on that
/// worker shares ([`WorkerLoad::potential_decode_blocks`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    overlap_score_credit: f64,
    prefill_load_scale: f64,
    decode_active_request_weight: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            overlap_score_credit: DEFAULT_OVERLAP_SCORE_CREDIT,
            prefill_load_scale: DEFAULT_PREFILL_LOAD_SCALE,
            decode_active_request_weight: DEFAULT_DECODE_ACTIVE_REQUEST_WEIGHT,
        }
    }
}

impl CostModel {
    /// A cost model with the given weights, each a finite number ≥ 0.
    pub fn new(
        overlap_score_credit: f64,
        prefill_load_scale: f64,
        decode_active_request_weight: f64,
    ) -> Result<Self, InvalidParameter> {
        Ok(Self {
            overlap_score_credit: non_negative("overlap_score_credit", overlap_score_credit)?,
            prefill_load_scale: non_negative("prefill_load_scale", prefill_load_scale)?,
            decode_active_request_weight: non_negative(
                "decode_active_request_weight",
                decode_active_request_weight,
            )?,
        })
    }

    /// The cost of a worker with `load` that would serve `overlap` blocks of a `prompt_tokens`
    /// prompt from cache, with `block_size` tokens per block (not 0: see [`check_block_size`]).
    pub fn cost(
        &self,
        load: &WorkerLoad,
        overlap: f64,
        prompt_tokens: usize,
        block_size: u32,
    ) -> f64 {
        let prefill = PrefillBlocks::new(prompt_tokens, block_size).of(load);
        self.terms(load, prefill).cost(overlap)
    }

    /// The terms of the cost of a worker with `load` and `prefill` blocks of prefill (from
    /// [`PrefillBlocks`]) that do not depend on its overlap, so that several overlaps cost
    /// one computation of them.
    pub fn terms(&self, load: &WorkerLoad, prefill: f64) -> CostTerms {
        CostTerms {
            overlap_score_credit: self.overlap_score_credit,
            prefill_load_scale: self.prefill_load_scale,
            prefill,
            decode: count(load.potential_decode_blocks()),
            requests: self.decode_active_request_weight * count(load.active_requests),
        }
    }

    /// The cost of every candidate of `request`, in candidate order, with `overlap` giving each
    /// candidate's overlap in blocks.
    pub fn costs(
        &self,
        request: &RequestView<'_>,
        overlap: impl Fn(usize, &Candidate) -> f64,
    ) -> Result<Vec<f64>, PolicyError> {
        let mut costs = Vec::with_capacity(request.candidates.len());
        self.costs_into(request, overlap, &mut costs)?;
        Ok(costs)
    }

    /// [`CostModel::costs`] into `costs` (cleared first), reusing its allocation.
    pub fn costs_into(
        &self,
        request: &RequestView<'_>,
        overlap: impl Fn(usize, &Candidate) -> f64,
        costs: &mut Vec<f64>,
    ) -> Result<(), PolicyError> {
        let block_size = check_block_size(request.block_size)?;
        let prefill = PrefillBlocks::new(request.prompt_tokens, block_size);
        costs.clear();
        costs.extend(
            request
                .candidates
                .iter()
                .enumerate()
                .map(|(index, candidate)| {
                    self.terms(&candidate.load, prefill.of(&candidate.load))
                        .cost(overlap(index, candidate))
                }),
        );
        Ok(())
    }
}

/// The prefill blocks of the workers a prompt is costed on: `(active_prefill_tokens +
/// prompt_tokens) / block_size`. A division is slow next to the rest of a cost, so for a
/// power-of-two block size it multiplies by the inverse instead: scaling by a power of two
/// rounds nothing, as the division would not, so the results are the division's, bit for bit.
#[derive(Clone, Copy, Debug)]
pub struct PrefillBlocks {
    prompt_tokens: f64,
    block_size: f64,
    /// `1 / block_size` when that is exact (a power-of-two block size).
    inverse: Option<f64>,
}

impl PrefillBlocks {
    /// The prefill blocks of a `prompt_tokens` prompt, `block_size` tokens per block (not 0:
    /// see [`check_block_size`]).
    pub fn new(prompt_tokens: usize, block_size: u32) -> Self {
        Self {
            prompt_tokens: prompt_tokens as f64,
            block_size: f64::from(block_size),
            inverse: block_size
                .is_power_of_two()
                .then(|| 1.0 / f64::from(block_size)),
        }
    }

    /// The prefill blocks of a worker with `load`.
    pub fn of(&self, load: &WorkerLoad) -> f64 {
        let tokens = count(load.active_prefill_tokens) + self.prompt_tokens;
        match self.inverse {
            Some(inverse) => tokens * inverse,
            None => tokens / self.block_size,
        }
    }
}

/// The overlap-independent terms of one worker's cost ([`CostModel::terms`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostTerms {
    overlap_score_credit: f64,
    prefill_load_scale: f64,
    /// Prefill blocks: the worker's in flight plus the prompt's.
    prefill: f64,
    /// Potential decode blocks.
    decode: f64,
    /// The weighted active requests.
    requests: f64,
}

impl CostTerms {
    /// The cost with `overlap` blocks served from cache.
    pub fn cost(&self, overlap: f64) -> f64 {
        let credit = self.overlap_score_credit * overlap;
        self.prefill_load_scale * (self.prefill - credit).max(0.0) + self.decode + self.requests
    }
}

/// `n` as a float, exactly as `n as f64` rounds it. Counts below 2⁶³ (all of them, in
/// practice) take the signed conversion, one instruction where the unsigned one takes several.
#[inline]
pub fn count(n: u64) -> f64 {
    match i64::try_from(n) {
        Ok(signed) => signed as f64,
        Err(_) => large_count(n),
    }
}

/// `count` of a count of 2⁶³ or more, out of line: inlined, the compiler folds both arms of
/// `count` back into the several-instruction unsigned conversion.
#[cold]
#[inline(never)]
fn large_count(n: u64) -> f64 {
    n as f64
}

/// The error for a booking with no candidate (the router never asks for one).
pub fn no_candidates() -> PolicyError {
    PolicyError::new("no candidate workers to choose from; register a worker for the role")
}

/// Rejects a zero block size, which would make every prefill cost infinite.
pub fn check_block_size(block_size: u32) -> Result<u32, PolicyError> {
    if block_size == 0 {
        Err(PolicyError::new(
            "the request's block_size is 0; configure a block_size of at least 1 token",
        ))
    } else {
        Ok(block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(prefill: u64, blocks: u64, requests: u64) -> WorkerLoad {
        WorkerLoad {
            active_prefill_tokens: prefill,
            active_blocks: blocks,
            active_requests: requests,
            additional_active_blocks: 0,
        }
    }

    #[test]
    fn default_weights_follow_the_formula() {
        let model = CostModel::default();
        // (32 + 64) / 16 = 6 blocks of prefill, 2 cached: 4 + 10 active blocks.
        assert_eq!(model.cost(&load(32, 10, 3), 2.0, 64, 16), 14.0);
        // Credit beyond the prefill clamps at zero.
        assert_eq!(model.cost(&load(0, 5, 1), 9.0, 64, 16), 5.0);
    }

    #[test]
    fn weights_scale_each_term() {
        let model = CostModel::new(0.5, 2.0, 1.5).unwrap();
        // prefill 6, credit 0.5 * 2 = 1 → 2 * 5 = 10; + 10 blocks; + 1.5 * 3 requests.
        assert_eq!(model.cost(&load(32, 10, 3), 2.0, 64, 16), 24.5);
    }

    #[test]
    fn rejects_negative_and_non_finite_weights() {
        let error = CostModel::new(1.0, -1.0, 0.0).unwrap_err();
        assert_eq!(error.field, "prefill_load_scale");
        let error = CostModel::new(f64::NAN, 1.0, 0.0).unwrap_err();
        assert_eq!(error.field, "overlap_score_credit");
        let error = CostModel::new(1.0, 1.0, f64::INFINITY).unwrap_err();
        assert_eq!(error.field, "decode_active_request_weight");
    }

    #[test]
    fn prefill_blocks_divide_as_every_time() {
        for block_size in [7, 16, 1, 1 << 31, 48] {
            let blocks = PrefillBlocks::new(1000, block_size);
            for tokens in [0, 13, 5, 1 << 40, 12_345_677, u64::MAX] {
                let load = load(tokens, 0, 0);
                let expected = (tokens as f64 + 1000.0) / f64::from(block_size);
                assert_eq!(blocks.of(&load).to_bits(), expected.to_bits(), "{tokens}");
            }
        }
    }

    #[test]
    fn counts_convert_as_the_cast_does() {
        for n in [
            0,
            1,
            12_345,
            (1 << 53) + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(count(n).to_bits(), (n as f64).to_bits(), "{n}");
        }
    }

    #[test]
    fn zero_block_size_is_an_error_not_a_panic() {
        assert!(check_block_size(0).is_err());
        assert_eq!(check_block_size(16).unwrap(), 16);
    }
}
