//! Random engine event streams through a lossy transport — lost events, duplicates, engine
//! restarts, replays (some of them incomplete) and abandoned replays — never leave the index
//! different from what the engines hold: a worker the index trusts holds exactly what its
//! engine held after the last event the index applied (or, after an abandoned replay, only
//! blocks the engine held then), and a worker awaiting a replay is given no cached prefix.

use dynamo_kv_router::kv::{
    EngineBlockHash, EventOutcome, KvCacheEventData, KvIndex, LocalBlockHash, RouterEvent,
    SequenceHash, next_sequence_hash,
};
use dynamo_kv_router::router::WorkerId;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// One engine: the blocks it holds, its event numbering and its replay buffer.
#[derive(Default)]
struct Engine {
    /// Engine id → sequence hash of every block it holds.
    held: BTreeMap<u64, SequenceHash>,
    next_id: u64,
    next_block: u64,
    /// Every event since the engine (re)started, by id.
    buffer: Vec<RouterEvent>,
    /// What the engine held after each event since it (re)started, by id.
    history: Vec<BTreeMap<u64, SequenceHash>>,
    incarnation: u64,
}

impl Engine {
    fn publish(&mut self, worker: WorkerId, data: KvCacheEventData) -> RouterEvent {
        let event = RouterEvent::new(worker, self.next_id, data);
        self.next_id += 1;
        self.buffer.push(event.clone());
        self.history.push(self.held.clone());
        event
    }

    /// Applies one engine action and returns the event it publishes.
    fn act(&mut self, worker: WorkerId, action: &EngineAction) -> RouterEvent {
        match action {
            EngineAction::Store { parent, letters } => {
                let parent_id = parent
                    .and_then(|p| {
                        self.held
                            .keys()
                            .nth(usize::from(p) % self.held.len().max(1))
                    })
                    .copied();
                let mut chain = parent_id.and_then(|id| self.held.get(&id).copied());
                let mut blocks = Vec::new();
                for letter in letters {
                    // Block contents differ per incarnation and block, so equal sequence
                    // hashes only arise from equal prefixes.
                    let local = LocalBlockHash(
                        u64::from(*letter)
                            ^ (self.next_block << 8)
                            ^ (self.incarnation << 40)
                            ^ (worker.worker_id << 56),
                    );
                    let seq = next_sequence_hash(chain, local);
                    chain = Some(seq);
                    let id = 1_000 + self.next_block + (self.incarnation << 32);
                    self.next_block += 1;
                    self.held.insert(id, seq);
                    blocks.push((EngineBlockHash(id), local));
                }
                let data = KvCacheEventData::stored(parent_id.map(EngineBlockHash), blocks);
                self.publish(worker, data)
            }
            EngineAction::Remove(picks) => {
                let ids: Vec<u64> = picks
                    .iter()
                    .filter_map(|p| {
                        self.held
                            .keys()
                            .nth(usize::from(*p) % self.held.len().max(1))
                            .copied()
                    })
                    .collect();
                for id in &ids {
                    self.held.remove(id);
                }
                let data = KvCacheEventData::removed(ids.into_iter().map(EngineBlockHash));
                self.publish(worker, data)
            }
            EngineAction::Clear => {
                self.held.clear();
                self.publish(worker, KvCacheEventData::Cleared)
            }
        }
    }

    /// The engine restarts: empty cache, numbering and replay buffer start over.
    fn restart(&mut self) {
        self.held.clear();
        self.next_id = 0;
        self.buffer.clear();
        self.history.clear();
        self.incarnation += 1;
    }

    fn replay_from(&self, from: u64) -> Vec<RouterEvent> {
        self.buffer
            .iter()
            .filter(|event| event.event_id() >= from)
            .cloned()
            .collect()
    }
}

#[derive(Clone, Debug)]
enum EngineAction {
    Store {
        parent: Option<u8>,
        letters: Vec<u8>,
    },
    Remove(Vec<u8>),
    Clear,
}

/// What the transport does with the event an engine publishes.
#[derive(Clone, Copy, Debug)]
enum Delivery {
    Deliver,
    Lose,
    Duplicate,
}

#[derive(Clone, Debug)]
enum Step {
    /// Engine `worker` acts; the transport handles the event; a restarted engine's event 0
    /// is always delivered (losing it is indistinguishable from a stale duplicate).
    Act {
        worker: u8,
        restart: bool,
        action: EngineAction,
        delivery: Delivery,
    },
    /// The transport serves pending replay requests: fully, losing one replayed event, or
    /// giving up.
    Replay { mode: u8 },
}

fn action_strategy() -> impl Strategy<Value = EngineAction> {
    prop_oneof![
        6 => (proptest::option::weighted(0.7, any::<u8>()), proptest::collection::vec(any::<u8>(), 1..4))
            .prop_map(|(parent, letters)| EngineAction::Store { parent, letters }),
        3 => proptest::collection::vec(any::<u8>(), 0..3).prop_map(EngineAction::Remove),
        1 => Just(EngineAction::Clear),
    ]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let delivery = prop_oneof![
        14 => Just(Delivery::Deliver),
        3 => Just(Delivery::Lose),
        2 => Just(Delivery::Duplicate),
    ];
    prop_oneof![
        12 => (0u8..2, prop::bool::weighted(0.05), action_strategy(), delivery).prop_map(
            |(worker, restart, action, delivery)| Step::Act { worker, restart, action, delivery }
        ),
        3 => (0u8..4).prop_map(|mode| Step::Replay { mode }),
    ]
}

fn worker(n: u8) -> WorkerId {
    WorkerId::new(u64::from(n) + 1, u32::from(n))
}

/// Whether the index reflects the engine as of the last event it applied: exactly when
/// `exact`, else a subset of it.
fn check(index: &KvIndex, worker: WorkerId, engine: &Engine, exact: bool) {
    let state = index.worker_state(worker).expect("tracked");
    if state.replay_from.is_some() {
        // Not trusted: no cached prefix for any block the engine or index might hold.
        for seq in engine.held.values() {
            assert_eq!(index.prefix_length(&[*seq], worker), 0);
        }
        return;
    }
    let empty = BTreeMap::new();
    let held = match state.last_event_id {
        Some(id) => engine
            .history
            .get(id as usize)
            .expect("an event of this incarnation"),
        None => &empty,
    };
    for (id, seq) in held {
        let known = index.engine_block_hash(worker, *seq);
        if exact {
            assert_eq!(
                known,
                Some(EngineBlockHash(*id)),
                "{worker} lacks block {id}"
            );
        } else {
            assert!(known.is_none_or(|k| k == EngineBlockHash(*id)));
        }
    }
    if exact {
        assert_eq!(state.blocks, held.len(), "{worker} holds extra blocks");
    } else {
        assert!(state.blocks <= held.len(), "{worker} holds extra blocks");
    }
}

/// Applies `event`; an applied `cleared` or restart makes the index's view whole again.
fn deliver(index: &mut KvIndex, event: &RouterEvent, exact: &mut bool) {
    let outcome = index.apply(event);
    let resets = matches!(event.event.data, KvCacheEventData::Cleared) || event.event_id() == 0;
    if outcome == EventOutcome::Applied && resets {
        *exact = true;
    }
}

/// After a whole replay: if the worker still waits (the engine restarted since the gap and
/// cannot replay the old numbering), the transport gives up, as upstream resets the worker.
fn settle(index: &mut KvIndex, worker: WorkerId, exact: &mut bool) {
    if index.replay_request(worker).is_some() {
        assert!(index.abandon_recovery(worker));
        *exact = false;
    }
}

fn run(steps: Vec<Step>) {
    let mut index = KvIndex::new();
    let mut engines: Vec<Engine> = (0..2).map(|_| Engine::default()).collect();
    // Whether the index has seen each engine's whole history since its last reset point.
    let mut exact = [true; 2];
    for n in 0..2 {
        index.add_worker(worker(n));
    }
    for step in steps {
        match step {
            Step::Act {
                worker: n,
                restart,
                action,
                delivery,
            } => {
                let w = worker(n);
                let engine = &mut engines[usize::from(n)];
                if restart {
                    engine.restart();
                }
                let event = engine.act(w, &action);
                let delivery = if restart { Delivery::Deliver } else { delivery };
                let times = match delivery {
                    Delivery::Deliver => 1,
                    Delivery::Lose => 0,
                    Delivery::Duplicate => 2,
                };
                for _ in 0..times {
                    deliver(&mut index, &event, &mut exact[usize::from(n)]);
                }
            }
            Step::Replay { mode } => {
                for request in index.replay_requests() {
                    let n = usize::from(request.worker.dp_rank as u8);
                    let events = engines[n].replay_from(request.from_event_id);
                    match mode {
                        // The engine cannot replay: give up, reset the worker.
                        0 => {
                            assert!(index.abandon_recovery(request.worker));
                            exact[n] = false;
                        }
                        // A replay that loses its first event leaves the worker waiting.
                        1 if events.len() > 1 => {
                            for event in &events[1..] {
                                deliver(&mut index, event, &mut exact[n]);
                            }
                            // Still waiting for the lost one, unless a replayed `cleared`
                            // made it moot.
                            let clears = events[1..]
                                .iter()
                                .any(|e| matches!(e.event.data, KvCacheEventData::Cleared));
                            if !clears {
                                assert_eq!(
                                    index.replay_request(request.worker),
                                    Some(request.from_event_id)
                                );
                            }
                        }
                        _ => {
                            for event in &events {
                                deliver(&mut index, event, &mut exact[n]);
                            }
                            // Replayed twice: duplicates change nothing.
                            if mode == 3 {
                                for event in &events {
                                    deliver(&mut index, event, &mut exact[n]);
                                }
                            }
                            settle(&mut index, request.worker, &mut exact[n]);
                        }
                    }
                }
            }
        }
        for n in 0..2u8 {
            check(
                &index,
                worker(n),
                &engines[usize::from(n)],
                exact[usize::from(n)],
            );
        }
    }
    // Catch up: serve every replay; the trusted index then matches each engine.
    for request in index.replay_requests() {
        let n = usize::from(request.worker.dp_rank as u8);
        for event in engines[n].replay_from(request.from_event_id) {
            deliver(&mut index, &event, &mut exact[n]);
        }
        settle(&mut index, request.worker, &mut exact[n]);
    }
    for n in 0..2u8 {
        assert_eq!(index.replay_request(worker(n)), None);
        check(
            &index,
            worker(n),
            &engines[usize::from(n)],
            exact[usize::from(n)],
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_index_never_differs_from_what_the_engines_hold(
        steps in proptest::collection::vec(step_strategy(), 1..80)
    ) {
        run(steps);
    }
}
