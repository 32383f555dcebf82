//! Hit rate over time: the share of prompt blocks reused, block-weighted, in windows of arrival
//! time, for a simulated configuration and for the workload's ideal (an infinite cache on one
//! worker, the most any routing could reuse).

use crate::outcome::SimulationResult;
use crate::workload::PreparedWorkload;
use dynamo_kv_router::kv::SequenceHash;
use serde::Serialize;
use std::collections::HashSet;

/// Windows on the hit-rate-over-time curve.
const TIME_BUCKETS: usize = 40;

/// One point of the hit rate over time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HitRatePoint {
    /// Start of the window, in seconds of virtual time (by arrival).
    pub t_s: f64,
    /// Share of blocks local in the first stage.
    pub local: f64,
    /// Share of blocks local or fetched in the first stage.
    pub reused: f64,
}

/// The most a router could reuse on a workload: every block cached forever on one worker.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IdealHitRate {
    /// Share of all prompt blocks that an earlier request had already computed.
    pub overall: f64,
    /// The same, per window of arrival time (`local` and `reused` are equal).
    pub over_time: Vec<HitRatePoint>,
}

impl IdealHitRate {
    /// Replays `workload` in arrival order against one infinite cache: a request reuses the
    /// leading blocks whose sequence hash an earlier request produced (a sequence hash names
    /// its whole prefix), then adds all of its blocks.
    pub fn of(workload: &PreparedWorkload) -> Self {
        let mut windows = Windows::over(workload.requests.iter().map(|r| r.arrival_us));
        let mut cached: HashSet<SequenceHash> = HashSet::new();
        let (mut blocks, mut reused) = (0u64, 0u64);
        for request in &workload.requests {
            let hit = request
                .sequence_hashes
                .iter()
                .take_while(|hash| cached.contains(*hash))
                .count() as u64;
            cached.extend(request.sequence_hashes.iter().copied());
            let total = request.sequence_hashes.len() as u64;
            blocks += total;
            reused += hit;
            windows.add(request.arrival_us, total, hit, 0);
        }
        Self {
            overall: if blocks > 0 {
                reused as f64 / blocks as f64
            } else {
                0.0
            },
            over_time: windows.points(),
        }
    }
}

/// The first stage's hit rate over time of one simulation, by arrival.
pub fn hit_rate_over_time(result: &SimulationResult) -> Vec<HitRatePoint> {
    let mut windows = Windows::over(result.requests.iter().map(|r| r.arrival_us));
    for outcome in result.stage_outcomes.iter().filter(|o| o.stage == 0) {
        let arrival = result.requests[outcome.request as usize].arrival_us;
        windows.add(
            arrival,
            u64::from(outcome.blocks),
            u64::from(outcome.local),
            u64::from(outcome.fetched),
        );
    }
    windows.points()
}

/// Block tallies in [`TIME_BUCKETS`] equal windows between the first and the last arrival.
struct Windows {
    first_us: u64,
    width_us: u64,
    /// Per window: blocks, local blocks, fetched blocks.
    tallies: Vec<(u64, u64, u64)>,
}

impl Windows {
    /// Windows spanning `arrivals` (none when there are no arrivals).
    fn over(arrivals: impl Iterator<Item = u64> + Clone) -> Self {
        let first_us = arrivals.clone().min();
        let last_us = arrivals.max();
        match (first_us, last_us) {
            (Some(first_us), Some(last_us)) => Self {
                first_us,
                width_us: ((last_us - first_us) / TIME_BUCKETS as u64).max(1),
                tallies: vec![(0, 0, 0); TIME_BUCKETS],
            },
            _ => Self {
                first_us: 0,
                width_us: 1,
                tallies: Vec::new(),
            },
        }
    }

    fn add(&mut self, arrival_us: u64, blocks: u64, local: u64, fetched: u64) {
        let index = ((arrival_us.saturating_sub(self.first_us) / self.width_us) as usize)
            .min(TIME_BUCKETS - 1);
        if let Some(tally) = self.tallies.get_mut(index) {
            tally.0 += blocks;
            tally.1 += local;
            tally.2 += fetched;
        }
    }

    /// One point per window that saw blocks.
    fn points(&self) -> Vec<HitRatePoint> {
        self.tallies
            .iter()
            .enumerate()
            .filter(|(_, (blocks, _, _))| *blocks > 0)
            .map(|(index, (blocks, local, fetched))| HitRatePoint {
                t_s: (self.first_us + index as u64 * self.width_us) as f64 / 1e6,
                local: *local as f64 / *blocks as f64,
                reused: (*local + *fetched) as f64 / *blocks as f64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::PreparedRequest;
    use dynamo_kv_router::plugins::SessionContext;

    fn request(arrival_us: u64, sequence_hashes: &[u64]) -> PreparedRequest {
        PreparedRequest {
            arrival_us,
            prompt_tokens: sequence_hashes.len() * 4,
            output_tokens: 1,
            // The ideal reads sequence hashes only; the local hashes are filler.
            local_hashes: sequence_hashes
                .iter()
                .copied()
                .map(dynamo_kv_router::kv::LocalBlockHash)
                .collect(),
            sequence_hashes: sequence_hashes.iter().copied().map(SequenceHash).collect(),
            session: SessionContext::default(),
        }
    }

    #[test]
    fn the_ideal_reuses_every_prefix_seen_before() {
        let workload = PreparedWorkload {
            name: "w".into(),
            block_size: 4,
            requests: vec![
                request(0, &[1, 2, 3]),
                // Shares two leading blocks with the first request.
                request(1_000_000, &[1, 2, 9]),
                // A block seen before, but not as a prefix: nothing is reusable.
                request(2_000_000, &[7, 2]),
                request(3_000_000, &[1, 2, 3, 4]),
            ],
        };
        let ideal = IdealHitRate::of(&workload);
        // Reused: 0 + 2 + 0 + 3 of 3 + 3 + 2 + 4 blocks.
        assert_eq!(ideal.overall, 5.0 / 12.0);
        let first = ideal.over_time.first().unwrap();
        assert_eq!((first.t_s, first.reused), (0.0, 0.0));
        let last = ideal.over_time.last().unwrap();
        assert_eq!((last.reused, last.local), (0.75, 0.75));
        assert_eq!(ideal.over_time.len(), 4);
    }

    #[test]
    fn an_empty_workload_has_no_ideal() {
        let workload = PreparedWorkload {
            name: "w".into(),
            block_size: 4,
            requests: Vec::new(),
        };
        assert_eq!(IdealHitRate::of(&workload), IdealHitRate::default());
    }
}
