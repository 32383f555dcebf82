//! The finds of every engine, taken in turns: each engine is filled once, then the engines take
//! turns at a few queries each (the first engine of a turn rotating), after an untimed warm-up
//! pass, round after round, so that the machine's drift over seconds and a stall of a few
//! milliseconds fall on every engine alike. Measured engine after engine, one engine's whole
//! find phase lasted a few milliseconds, and its p99 (the tenth slowest of about a thousand
//! calls) was whatever this VM did in those milliseconds. Between two of its turns an engine's
//! caches hold what the others read, as a router's hold what it did between two requests. On
//! a replayed workload (one with checkpoints) the engines take turns query by query, each
//! applying the events up to the query before its timed find.
//! Enters: the engines' makers, the workload, their timed ingests; leaves: one report each.

use crate::engines::Engine;
use crate::measure::{
    EngineReport, IngestSample, Latency, Rounds, ingest, summarize_ingests, timed_find,
};
use crate::workload::Workload;
use indicatif::ProgressBar;
use std::ops::Range;
use std::time::Duration;

/// One engine in the turns: its finds, whatever its types.
pub trait Contender {
    /// Times the finds (hashes given) of `queries`.
    fn finds(&mut self, workload: &Workload, queries: Range<usize>);
    /// Times the finds from tokens of `queries`.
    fn finds_from_tokens(&mut self, workload: &Workload, queries: Range<usize>);
    /// Applies the events up to query `n`'s checkpoint, then times its find.
    fn replay_find(&mut self, workload: &Workload, n: usize);
    /// Forgets the finds timed so far (a warm-up's).
    fn forget_finds(&mut self);
    /// The report, with the finds' percentiles.
    fn into_report(self: Box<Self>) -> EngineReport;
}

/// An engine, filled for its finds, and what it measured so far.
pub struct Filled<E: Engine> {
    engine: E,
    report: EngineReport,
    depths: Vec<u32>,
    finds: Vec<Duration>,
    finds_from_tokens: Vec<Duration>,
    /// Events applied so far, when replaying.
    applied: usize,
}

impl<E: Engine + 'static> Filled<E> {
    /// `make()`'s engine, filled with every event of `workload` (or left empty, for a workload
    /// that is replayed), its ingest figures taken from `ingests` (the timed ingests into fresh
    /// engines, taken in turns by the caller; an ingest of its own when there are none).
    pub fn boxed(
        make: impl Fn() -> E,
        workload: &Workload,
        ingests: &[IngestSample],
    ) -> Box<dyn Contender> {
        let mut engine = make();
        let mut report = EngineReport {
            engine: engine.name(),
            ..EngineReport::default()
        };
        let replayed = workload.checkpoints.is_some();
        // The fill is the only ingest figure when no timed ingests were given.
        let own: Vec<IngestSample> = (!replayed || ingests.is_empty())
            .then(|| ingest(&mut engine, workload))
            .into_iter()
            .collect();
        summarize_ingests(&mut report, if ingests.is_empty() { &own } else { ingests });
        if replayed {
            // A replay starts from an empty engine.
            engine = make();
        }
        Box::new(Self {
            engine,
            report,
            depths: vec![0; workload.workers as usize],
            finds: Vec::new(),
            finds_from_tokens: Vec::new(),
            applied: 0,
        })
    }
}

impl<E: Engine> Filled<E> {
    /// Times query `n`'s find with its hashes given, in `phase`.
    fn find_with_hashes(&mut self, workload: &Workload, n: usize, phase: &'static str) {
        let hashes = self.engine.hashes(&workload.queries[n]);
        let expected = (n, workload.expected[n].as_slice());
        self.finds.push(timed_find(
            &mut self.engine,
            |e| e.find(hashes),
            &mut self.report,
            phase,
            expected,
            &mut self.depths,
        ));
    }
}

impl<E: Engine + 'static> Contender for Filled<E> {
    fn finds(&mut self, workload: &Workload, queries: Range<usize>) {
        for n in queries {
            self.find_with_hashes(workload, n, "find");
        }
    }

    fn finds_from_tokens(&mut self, workload: &Workload, queries: Range<usize>) {
        for n in queries {
            let tokens = workload.queries[n].tokens.as_deref().unwrap_or_default();
            let expected = (n, workload.expected[n].as_slice());
            self.finds_from_tokens.push(timed_find(
                &mut self.engine,
                |e| e.find_tokens(tokens),
                &mut self.report,
                "find from tokens",
                expected,
                &mut self.depths,
            ));
        }
    }

    fn replay_find(&mut self, workload: &Workload, n: usize) {
        let checkpoint = workload.checkpoints.as_ref().map_or(self.applied, |c| c[n]);
        for event in &workload.events[self.applied..checkpoint] {
            let event = self.engine.convert(event);
            self.engine.apply(event);
        }
        if self.applied < checkpoint {
            self.engine.sync();
        }
        self.applied = checkpoint;
        self.find_with_hashes(workload, n, "replay find");
    }

    fn forget_finds(&mut self) {
        self.finds.clear();
        self.finds_from_tokens.clear();
    }

    fn into_report(self: Box<Self>) -> EngineReport {
        let Self {
            mut report,
            finds,
            finds_from_tokens,
            ..
        } = *self;
        report.find = Latency::of(finds);
        if !finds_from_tokens.is_empty() {
            report.find_tokens = Some(Latency::of(finds_from_tokens));
        }
        report
    }
}

/// Runs the finds of `contenders` on `workload` in turns and returns their reports, in the
/// order given: `rounds.warmup_rounds` untimed passes over the queries, then
/// `rounds.find_rounds` timed ones, each engine taking `rounds.turn_queries` queries a turn
/// (their finds with hashes given, then from tokens when every query has tokens); a workload
/// with checkpoints is replayed once, the engines taking turns query by query.
pub fn in_turns(
    mut contenders: Vec<Box<dyn Contender>>,
    workload: &Workload,
    rounds: Rounds,
    progress: &ProgressBar,
) -> Vec<EngineReport> {
    let count = workload.queries.len();
    let mut turns = Turns::default();
    if workload.checkpoints.is_some() {
        progress.set_length(count as u64);
        progress.set_message("replayed finds, the engines in turns");
        for n in 0..count {
            turns.take(&mut contenders, |c| c.replay_find(workload, n));
            progress.inc(1);
        }
    } else {
        let passes = rounds.warmup_rounds + rounds.find_rounds;
        progress.set_length((count * passes) as u64);
        let with_tokens = workload.queries.iter().all(|q| q.tokens.is_some());
        progress.set_message("finds, the engines in turns");
        let turn = rounds.turn_queries;
        for round in 0..passes {
            if round == rounds.warmup_rounds {
                for contender in contenders.iter_mut() {
                    contender.forget_finds();
                }
            }
            for start in (0..count).step_by(turn) {
                let chunk = start..(start + turn).min(count);
                turns.take(&mut contenders, |c| c.finds(workload, chunk.clone()));
                if with_tokens {
                    turns.take(&mut contenders, |c| {
                        c.finds_from_tokens(workload, chunk.clone())
                    });
                }
                progress.inc(chunk.len() as u64);
            }
        }
    }
    contenders.into_iter().map(|c| c.into_report()).collect()
}

/// Whose turn comes first: the engines take turns in their order, starting one further each
/// time, so that none is always the first after another's.
#[derive(Default)]
struct Turns {
    first: usize,
}

impl Turns {
    /// One turn: `step` for every contender, in turn order.
    fn take(
        &mut self,
        contenders: &mut [Box<dyn Contender>],
        mut step: impl FnMut(&mut dyn Contender),
    ) {
        let engines = contenders.len();
        for k in 0..engines {
            step(contenders[(self.first + k) % engines].as_mut());
        }
        self.first += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A contender that logs its name when asked to forget, the one call that needs no workload.
    struct Logged(&'static str, Rc<RefCell<Vec<&'static str>>>);

    impl Contender for Logged {
        fn finds(&mut self, _: &Workload, _: Range<usize>) {}
        fn finds_from_tokens(&mut self, _: &Workload, _: Range<usize>) {}
        fn replay_find(&mut self, _: &Workload, _: usize) {}
        fn forget_finds(&mut self) {
            self.1.borrow_mut().push(self.0);
        }
        fn into_report(self: Box<Self>) -> EngineReport {
            EngineReport::default()
        }
    }

    #[test]
    fn every_engine_takes_each_turn_and_the_first_rotates() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut contenders: Vec<Box<dyn Contender>> = ["a", "b", "c"]
            .into_iter()
            .map(|name| Box::new(Logged(name, log.clone())) as Box<dyn Contender>)
            .collect();
        let mut turns = Turns::default();
        for _ in 0..4 {
            turns.take(&mut contenders, |c| c.forget_finds());
        }
        assert_eq!(
            *log.borrow(),
            ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
        );
    }
}
