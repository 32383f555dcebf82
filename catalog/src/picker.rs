//! Turning per-worker costs into one choice: the minimum with a random tie-break, or a
//! temperature-controlled softmax sample.

use crate::invalid_parameter::{InvalidParameter, non_negative};
use dynamo_kv_router::rng::SplitMix64;

/// Chooses an index from a list of costs (lower is better).
///
/// - `router_temperature` 0: the minimum cost; ties (costs within a relative 10⁻⁹ of the
///   minimum) are broken uniformly at random.
/// - `router_temperature` T > 0: index i with probability ∝ exp(−(cᵢ − c_min) / ((c_max − c_min)·T)).
///   Costs are range-normalised first, so T means the same on a busy and an idle cluster; when
///   every cost is equal the pick is uniform.
///
/// Draws come from a [`SplitMix64`] fixed by `seed` (or seeded from entropy).
#[derive(Debug)]
pub struct CostPicker {
    temperature: f64,
    rng: SplitMix64,
}

impl CostPicker {
    /// A picker at `router_temperature` (finite, ≥ 0) drawing from a generator fixed by `seed`.
    pub fn new(temperature: f64, seed: Option<u64>) -> Result<Self, InvalidParameter> {
        Ok(Self {
            temperature: non_negative("router_temperature", temperature)?,
            rng: SplitMix64::new(seed),
        })
    }

    /// The temperature.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// The chosen index, or `None` when `costs` is empty.
    pub fn pick(&self, costs: &[f64]) -> Option<usize> {
        let (min, max) = min_max(costs)?;
        if self.temperature == 0.0 || is_tied(max, min) {
            let mut ties = costs
                .iter()
                .enumerate()
                .filter(|(_, cost)| is_tied(**cost, min))
                .map(|(index, _)| index);
            let first_tie = ties.next();
            // The draw is made only when there is a tie to break.
            let others = ties.clone().count();
            if others == 0 {
                return first_tie;
            }
            let nth = self.rng.below(others + 1);
            return if nth == 0 {
                first_tie
            } else {
                ties.nth(nth - 1)
            };
        }
        let weights = softmax_weights(costs, self.temperature);
        let total: f64 = weights.iter().sum();
        let mut target = self.rng.next_f64() * total;
        for (index, weight) in weights.iter().enumerate() {
            if target < *weight {
                return Some(index);
            }
            target -= weight;
        }
        // Rounding left the target past the last weight: that is the last index.
        Some(costs.len() - 1)
    }
}

/// The least and greatest of `costs`, or `None` when there are none: what folding `f64::min`
/// and `f64::max` over them gives (NaNs are skipped; for equal zeros of either sign either may
/// come back, which no comparison of costs tells apart), folded in four independent lanes so
/// that each comparison need not wait for the one before.
pub fn min_max(costs: &[f64]) -> Option<(f64, f64)> {
    let first = *costs.first()?;
    let mut min = [first; 4];
    let mut max = [first; 4];
    let mut lanes = costs.chunks_exact(4);
    for chunk in &mut lanes {
        for lane in 0..4 {
            min[lane] = f64::min(min[lane], chunk[lane]);
            max[lane] = f64::max(max[lane], chunk[lane]);
        }
    }
    for &cost in lanes.remainder() {
        min[0] = f64::min(min[0], cost);
        max[0] = f64::max(max[0], cost);
    }
    Some((
        f64::min(f64::min(min[0], min[1]), f64::min(min[2], min[3])),
        f64::max(f64::max(max[0], max[1]), f64::max(max[2], max[3])),
    ))
}

/// Whether `cost` equals `min` up to floating-point noise.
pub fn is_tied(cost: f64, min: f64) -> bool {
    cost - min <= 1e-9 * min.abs().max(1.0)
}

/// The unnormalised softmax weights exp(−(cᵢ − c_min) / ((c_max − c_min)·T)); all 1 when the
/// costs are equal.
pub fn softmax_weights(costs: &[f64], temperature: f64) -> Vec<f64> {
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = max - min;
    costs
        .iter()
        .map(|cost| {
            if is_tied(max, min) {
                1.0
            } else {
                (-(cost - min) / (range * temperature)).exp()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PICKS: usize = 10_000;

    fn frequencies(picker: &CostPicker, costs: &[f64]) -> Vec<f64> {
        let mut counts = vec![0usize; costs.len()];
        for _ in 0..PICKS {
            counts[picker.pick(costs).unwrap()] += 1;
        }
        counts
            .into_iter()
            .map(|count| count as f64 / PICKS as f64)
            .collect()
    }

    #[test]
    fn zero_temperature_takes_the_unique_minimum() {
        let picker = CostPicker::new(0.0, Some(1)).unwrap();
        for _ in 0..100 {
            assert_eq!(picker.pick(&[3.0, 1.0, 2.0]), Some(1));
        }
        assert_eq!(picker.pick(&[]), None);
    }

    #[test]
    fn zero_temperature_spreads_ties() {
        let picker = CostPicker::new(0.0, Some(7)).unwrap();
        let freq = frequencies(&picker, &[1.0, 5.0, 1.0, 1.0 + 1e-12]);
        assert_eq!(freq[1], 0.0);
        for index in [0, 2, 3] {
            assert!((freq[index] - 1.0 / 3.0).abs() < 0.03, "{freq:?}");
        }
    }

    /// Each frequency is within 0.02 of its softmax probability: over 10,000 picks the standard
    /// deviation of a frequency is at most 0.005, so 0.02 is four of them.
    #[test]
    fn positive_temperature_matches_softmax_probabilities() {
        let costs = [2.0, 4.0, 3.0, 10.0];
        for temperature in [0.25, 1.0, 4.0] {
            let picker = CostPicker::new(temperature, Some(2024)).unwrap();
            let weights = softmax_weights(&costs, temperature);
            let total: f64 = weights.iter().sum();
            let freq = frequencies(&picker, &costs);
            for (weight, observed) in weights.iter().zip(&freq) {
                let expected = weight / total;
                assert!(
                    (observed - expected).abs() < 0.02,
                    "T={temperature}: expected {expected}, observed {observed} ({freq:?})"
                );
            }
        }
    }

    #[test]
    fn softmax_normalises_by_the_cost_range() {
        // c_min gets weight 1, c_max gets exp(-1/T), whatever the scale of the costs.
        let small = softmax_weights(&[1.0, 2.0], 0.5);
        let large = softmax_weights(&[100.0, 200.0], 0.5);
        assert_eq!(small, large);
        assert_eq!(small[0], 1.0);
        assert!((small[1] - (-2.0f64).exp()).abs() < 1e-12);
        assert_eq!(softmax_weights(&[3.0, 3.0], 1.0), [1.0, 1.0]);
    }

    #[test]
    fn fixed_seed_reproduces_the_picks() {
        let costs = [1.0, 1.5, 2.0];
        let a = CostPicker::new(1.0, Some(99)).unwrap();
        let b = CostPicker::new(1.0, Some(99)).unwrap();
        let picks_a: Vec<_> = (0..200).map(|_| a.pick(&costs)).collect();
        let picks_b: Vec<_> = (0..200).map(|_| b.pick(&costs)).collect();
        assert_eq!(picks_a, picks_b);
    }

    #[test]
    fn min_max_is_the_fold_of_min_and_max() {
        assert_eq!(min_max(&[]), None);
        let rng = SplitMix64::new(Some(5));
        for len in 1..40 {
            let mut costs: Vec<f64> = (0..len).map(|_| rng.next_f64() * 100.0).collect();
            if len % 3 == 0 {
                costs[rng.below(len)] = f64::NAN;
            }
            let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(min_max(&costs), Some((min, max)), "{costs:?}");
        }
        assert!(min_max(&[f64::NAN]).is_some_and(|(min, max)| min.is_nan() && max.is_nan()));
    }

    #[test]
    fn rejects_a_negative_temperature() {
        let error = CostPicker::new(-0.5, None).unwrap_err();
        assert_eq!(error.field, "router_temperature");
    }
}
