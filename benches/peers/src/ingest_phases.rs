//! The synthetic ingest by phase: the events of each eighth of the workers (which apply in
//! worker order), timed one event at a time, so that what a new block costs and what a block
//! other workers stored before costs show apart, and so does growing (ours growing as it fills
//! against ours sized up front). Once with blocks named by sequence hash and once by ids of
//! the engines' own (which ours files in a second table). `--only ingest-phases`.

use crate::engines::{self, Engine, Ours, UpstreamRadix};
use crate::workload::{BlockIds, Change, Workload};
use indicatif::ProgressBar;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Instant;

/// Groups of workers the ingest is split into.
const GROUPS: usize = 8;

/// One group of workers' events: stored blocks, how many of them were new to the cluster, and
/// each engine's time applying them (summed over the ingests).
#[derive(Clone, Copy, Debug, Default)]
struct Phase {
    stored: usize,
    new: usize,
    seconds: [f64; 3],
}

/// The per-phase table of `ingests` ingests per engine into fresh engines, the engines taking
/// turns, with blocks named as `ids` says.
pub fn table(workload: &Workload, ingests: usize, ids: BlockIds, progress: &ProgressBar) -> String {
    let mut phases = phases_of(workload);
    let distinct = engines::distinct_blocks_at_end(workload);
    let (workers, size) = (workload.workers, workload.block_size);
    progress.set_length(3 * ingests as u64);
    progress.set_message("ingest phases, the engines in turns");
    for _ in 0..ingests {
        let growing = Ours::new(workers, size).with_ids(ids);
        time_events(growing, workload, &mut phases, 0);
        progress.inc(1);
        let sized = Ours::with_capacity(workers, size, distinct).with_ids(ids);
        time_events(sized, workload, &mut phases, 1);
        progress.inc(1);
        let radix = UpstreamRadix::new(size).with_ids(ids);
        time_events(radix, workload, &mut phases, 2);
        progress.inc(1);
    }
    render(&phases, workload.workers, ingests)
}

/// The phases with their stored and new blocks counted, no time yet.
fn phases_of(workload: &Workload) -> Vec<Phase> {
    let mut phases = vec![Phase::default(); GROUPS];
    let mut seen = HashSet::new();
    for event in &workload.events {
        let phase = &mut phases[group_of(event.worker, workload.workers)];
        if let Change::Stored { blocks, .. } = &event.change {
            phase.stored += blocks.len();
            phase.new += blocks.iter().filter(|block| seen.insert(block.seq)).count();
        }
    }
    phases
}

fn group_of(worker: u32, workers: u32) -> usize {
    (worker as usize * GROUPS / workers.max(1) as usize).min(GROUPS - 1)
}

/// Ingests every event into `engine` (a fresh one), adding each event's time to its phase's
/// `column`; the events are converted to the engine's types first, as the bench's timed
/// ingests do.
fn time_events<E: Engine>(mut engine: E, workload: &Workload, phases: &mut [Phase], column: usize) {
    let native: Vec<E::Event> = workload.events.iter().map(|e| engine.convert(e)).collect();
    for (event, source) in native.into_iter().zip(&workload.events) {
        let start = Instant::now();
        engine.apply(event);
        let elapsed = start.elapsed().as_secs_f64();
        phases[group_of(source.worker, workload.workers)].seconds[column] += elapsed;
    }
    engine.sync();
}

impl Phase {
    /// `other`'s blocks and times added to this phase's.
    fn add(&mut self, other: &Phase) {
        self.stored += other.stored;
        self.new += other.new;
        for (total, seconds) in self.seconds.iter_mut().zip(other.seconds) {
            *total += seconds;
        }
    }
}

fn render(phases: &[Phase], workers: u32, ingests: usize) -> String {
    let mut out = String::from(
        "| workers | stored blocks | new to the cluster | ours, growing | ours, sized up front | upstream RadixTree |\n\
         |---|---|---|---|---|---|\n",
    );
    let mut totals = Phase::default();
    for (group, phase) in phases.iter().enumerate() {
        let first = group * workers as usize / GROUPS;
        let last = (group + 1) * workers as usize / GROUPS;
        let label = format!("{first}–{}", last.saturating_sub(1));
        write_row(&mut out, &label, phase, ingests);
        totals.add(phase);
    }
    write_row(&mut out, "all", &totals, ingests);
    let _ = write!(
        out,
        "\nNanoseconds per stored block, each event timed alone, {ingests} ingests per engine \
         into fresh engines in turns. Ours growing / RadixTree over all: **{:.2}×** the time \
         (sized up front: {:.2}×).",
        totals.seconds[0] / totals.seconds[2].max(f64::MIN_POSITIVE),
        totals.seconds[1] / totals.seconds[2].max(f64::MIN_POSITIVE),
    );
    out
}

/// One row of the table: `phase`'s blocks, its share of new ones, and each engine's time per
/// stored block over `ingests` ingests.
fn write_row(out: &mut String, label: &str, phase: &Phase, ingests: usize) {
    let blocks = (phase.stored * ingests).max(1) as f64;
    let [growing, sized, radix] = phase.seconds.map(|seconds| seconds * 1e9 / blocks);
    let _ = writeln!(
        out,
        "| {label} | {} | {:.0} % | {growing:.1} ns | {sized:.1} ns | {radix:.1} ns |",
        phase.stored,
        phase.new as f64 * 100.0 / phase.stored.max(1) as f64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Block, Event};

    fn stored(worker: u32, event_id: u64, seqs: &[u64]) -> Event {
        Event {
            worker,
            event_id,
            change: Change::Stored {
                parent: None,
                blocks: seqs.iter().map(|&seq| Block { local: seq, seq }).collect(),
            },
        }
    }

    #[test]
    fn phases_split_workers_in_eighths_and_count_blocks_new_to_the_cluster() {
        assert_eq!(group_of(0, 64), 0);
        assert_eq!(group_of(7, 64), 0);
        assert_eq!(group_of(8, 64), 1);
        assert_eq!(group_of(63, 64), 7);
        // Fewer workers than groups: each worker is its own phase, none out of range.
        assert_eq!(group_of(2, 3), 5);
        let workload = Workload {
            name: "tiny".into(),
            workers: 16,
            block_size: 16,
            events: vec![
                stored(0, 0, &[1, 2, 3]),
                stored(1, 0, &[1, 2, 4]),
                stored(2, 0, &[1, 5]),
                stored(15, 0, &[5, 6]),
                Event {
                    worker: 15,
                    event_id: 1,
                    change: Change::Removed { seqs: vec![6] },
                },
            ],
            queries: Vec::new(),
            checkpoints: None,
            expected: Vec::new(),
            memberships: 0,
        };
        let phases = phases_of(&workload);
        assert_eq!((phases[0].stored, phases[0].new), (6, 4));
        assert_eq!((phases[1].stored, phases[1].new), (2, 1));
        assert_eq!((phases[7].stored, phases[7].new), (2, 1));
        assert!(phases[2..7].iter().all(|phase| phase.stored == 0));
    }

    #[test]
    fn the_table_gives_each_engines_time_per_stored_block() {
        let mut phases = vec![Phase::default(); GROUPS];
        phases[0] = Phase {
            stored: 100,
            new: 25,
            seconds: [2e-6, 1e-6, 4e-6],
        };
        let table = render(&phases, 64, 2);
        assert!(
            table.contains("| 0–7 | 100 | 25 % | 10.0 ns | 5.0 ns | 20.0 ns |"),
            "{table}"
        );
        assert!(
            table.contains("**0.50×** the time (sized up front: 0.25×)"),
            "{table}"
        );
    }
}
