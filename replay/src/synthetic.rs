//! The embedded default workload: generated, seeded multi-turn sessions with shared system
//! prompts, so a replay does something meaningful without any file.

use crate::workload::{Workload, WorkloadRequest};
use dynamo_kv_router::plugins::SessionContext;
use dynamo_kv_router::rng::SplitMix64;
use serde::{Deserialize, Serialize};

/// Parameters of the generated workload. Every field has a default; equal parameters and seed
/// give an identical workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticWorkload {
    /// Seed of every random choice.
    pub seed: u64,
    /// Tokens per block.
    pub block_size: u32,
    /// Number of conversations.
    pub sessions: usize,
    /// Number of distinct system prompts; sessions pick one with a skewed (Zipf-like) choice, so a
    /// few are shared by many sessions.
    pub system_prompts: usize,
    /// Shortest and longest system prompt, in tokens.
    pub system_prompt_tokens: (u64, u64),
    /// Fewest and most turns per session.
    pub turns: (u64, u64),
    /// Shortest and longest user message per turn, in tokens.
    pub user_tokens: (u64, u64),
    /// Shortest and longest answer per turn, in tokens (it becomes context of the next turn).
    pub output_tokens: (u64, u64),
    /// New sessions per second (Poisson arrivals).
    pub session_rate_per_s: f64,
    /// Mean time between a session's turns, in seconds (exponential).
    pub think_time_s: f64,
}

impl Default for SyntheticWorkload {
    fn default() -> Self {
        Self {
            seed: 42,
            block_size: 16,
            sessions: 600,
            system_prompts: 8,
            system_prompt_tokens: (1024, 3072),
            turns: (2, 8),
            user_tokens: (64, 512),
            output_tokens: (64, 384),
            session_rate_per_s: 4.0,
            think_time_s: 10.0,
        }
    }
}

/// A session's growing context: the ids of its full blocks and the tokens of its partial tail.
struct Context {
    block_ids: Vec<u64>,
    tokens: u64,
}

impl Context {
    fn extend(&mut self, tokens: u64, block_size: u64, next_id: &mut u64) {
        self.tokens += tokens;
        while (self.block_ids.len() as u64 + 1) * block_size <= self.tokens {
            self.block_ids.push(*next_id);
            *next_id += 1;
        }
    }
}

impl SyntheticWorkload {
    /// Generates the requests, sorted by arrival.
    pub fn generate(&self) -> Workload {
        let rng = SplitMix64::seeded(self.seed);
        let block_size = u64::from(self.block_size.max(1));
        let mut next_id: u64 = 1;
        let prompts: Vec<Context> = (0..self.system_prompts.max(1))
            .map(|_| {
                let mut context = Context {
                    block_ids: Vec::new(),
                    tokens: 0,
                };
                let tokens = rng.range(self.system_prompt_tokens.0, self.system_prompt_tokens.1);
                context.extend(tokens, block_size, &mut next_id);
                context
            })
            .collect();
        // Zipf(1) weights: prompt k is chosen with probability ∝ 1 / (k + 1).
        let weights: Vec<f64> = (0..prompts.len()).map(|k| 1.0 / (k as f64 + 1.0)).collect();
        let total_weight: f64 = weights.iter().sum();
        let mut requests = Vec::new();
        let mut session_start = 0.0f64;
        for session in 0..self.sessions {
            session_start += rng.exponential(1.0 / self.session_rate_per_s.max(1e-9));
            let mut pick = rng.next_f64() * total_weight;
            let mut prompt_index = prompts.len() - 1;
            for (index, weight) in weights.iter().enumerate() {
                if pick < *weight {
                    prompt_index = index;
                    break;
                }
                pick -= weight;
            }
            let prompt = &prompts[prompt_index];
            let mut context = Context {
                block_ids: prompt.block_ids.clone(),
                tokens: prompt.tokens,
            };
            // The system prompt's partial tail is the session's own from here on.
            let turns = rng.range(self.turns.0, self.turns.1);
            let mut arrival = session_start;
            for turn in 0..turns {
                if turn > 0 {
                    arrival += rng.exponential(self.think_time_s.max(0.0));
                }
                let user = rng.range(self.user_tokens.0, self.user_tokens.1);
                context.extend(user, block_size, &mut next_id);
                let output = rng.range(self.output_tokens.0, self.output_tokens.1);
                requests.push(WorkloadRequest {
                    arrival_us: (arrival * 1e6) as u64,
                    prompt_tokens: context.tokens as usize,
                    output_tokens: output as usize,
                    block_ids: context.block_ids.clone(),
                    session: SessionContext::new(format!("s{session}"))
                        .with_attribute("turn", turn.to_string())
                        .with_attribute("system_prompt", prompt_index.to_string()),
                });
                context.extend(output, block_size, &mut next_id);
            }
        }
        let mut workload = Workload {
            name: format!(
                "generated: {} sessions, {} shared system prompts, seed {}",
                self.sessions, self.system_prompts, self.seed
            ),
            block_size: self.block_size.max(1),
            requests,
        };
        workload.sort_by_arrival();
        workload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload_other_seed_differs() {
        let params = SyntheticWorkload {
            sessions: 50,
            ..SyntheticWorkload::default()
        };
        assert_eq!(params.generate(), params.generate());
        let other = SyntheticWorkload {
            seed: 43,
            ..params.clone()
        };
        assert_ne!(params.generate().requests, other.generate().requests);
    }

    #[test]
    fn turns_extend_their_session_and_prompts_are_shared() {
        let workload = SyntheticWorkload {
            sessions: 100,
            ..SyntheticWorkload::default()
        }
        .generate();
        let block_size = workload.block_size as usize;
        let mut by_session: std::collections::BTreeMap<String, Vec<&WorkloadRequest>> =
            Default::default();
        for request in &workload.requests {
            assert_eq!(request.block_ids.len(), request.prompt_tokens / block_size);
            let id = request.session.session_id.clone().unwrap();
            by_session.entry(id).or_default().push(request);
        }
        assert_eq!(by_session.len(), 100);
        for turns in by_session.values() {
            for pair in turns.windows(2) {
                let (earlier, later) = (pair[0], pair[1]);
                assert!(later.prompt_tokens > earlier.prompt_tokens);
                // Every full block of the earlier turn is a prefix of the later turn.
                assert_eq!(
                    &later.block_ids[..earlier.block_ids.len()],
                    &earlier.block_ids[..]
                );
            }
        }
        // The most popular system prompt's first block starts many sessions.
        let mut first_blocks: std::collections::HashMap<u64, usize> = Default::default();
        for turns in by_session.values() {
            *first_blocks.entry(turns[0].block_ids[0]).or_default() += 1;
        }
        assert!(first_blocks.len() <= 8);
        assert!(first_blocks.values().copied().max().unwrap() >= 20);
        assert!(
            workload
                .requests
                .windows(2)
                .all(|w| w[0].arrival_us <= w[1].arrival_us)
        );
    }
}
