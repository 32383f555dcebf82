//! Many threads booking, completing and releasing while another applies KV events: the
//! accounting adds up.

mod router_fixtures;

use dynamo_kv_router::kv::{
    KvCacheEventData, RouterEvent, SequenceHash, sequence_hashes_for_tokens,
};
use dynamo_kv_router::plugins::WorkerLoad;
use dynamo_kv_router::router::{Role, Router, RouterMode, RouterOptions};
use router_fixtures::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A KV-mode router for the decode role: longest cached prefix, and a `kv.fetch` hint.
fn decode_router(options: RouterOptions) -> Arc<Router> {
    let policies = role_policies("longest", LongestPrefix, vec![hint("fetch", CopySender)]);
    Arc::new(Router::new(
        setup(RouterMode::Kv, vec![(Role::Decode, policies)]),
        options,
    ))
}

/// Waits (at most 10 s) until `flag` is set.
fn wait_until(flag: &AtomicBool, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !flag.load(Ordering::Acquire) {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} never happened"
        );
        std::thread::yield_now();
    }
}

#[test]
fn concurrent_bookings_and_events_keep_the_accounting_exact() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 300;
    let router = decode_router(RouterOptions::default());
    for id in 1..=8 {
        assert!(router.register_worker(hinting(id, Role::Decode)).is_ok());
    }
    let prompts: Vec<Vec<u32>> = (0..16).map(|n| tokens(64, n % 4)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // The bookers start once events are being applied, so the two overlap however the threads
    // are scheduled (on 2 cores the bookers could otherwise finish before the event thread ran).
    let applying = Arc::new(AtomicBool::new(false));

    let events = {
        let router = Arc::clone(&router);
        let prompts = prompts.clone();
        let stop = Arc::clone(&stop);
        let applying = Arc::clone(&applying);
        std::thread::spawn(move || {
            let mut ids = [0u64; 9];
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let w = 1 + round % 8;
                let prompt = &prompts[round % prompts.len()];
                let event = if round % 7 == 6 {
                    let hashes = sequence_hashes_for_tokens(prompt, BLOCK_SIZE);
                    RouterEvent::new(
                        worker(w as u64),
                        ids[w],
                        KvCacheEventData::removed(hashes.iter().skip(8).map(|h| engine_of(*h))),
                    )
                } else {
                    stored(worker(w as u64), ids[w], prompt, 4 + round % 12)
                };
                ids[w] += 1;
                let _ = router.apply_event(&event);
                applying.store(true, Ordering::Release);
                round += 1;
            }
            round
        })
    };

    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let router = Arc::clone(&router);
            let prompts = prompts.clone();
            let applying = Arc::clone(&applying);
            std::thread::spawn(move || {
                wait_until(&applying, "the event thread applying an event");
                // Expected outstanding load per worker from this thread.
                let mut outstanding: BTreeMap<u64, WorkerLoad> = BTreeMap::new();
                let mut live = Vec::new();
                for n in 0..PER_THREAD {
                    let id = format!("t{t}-{n}");
                    let prompt = prompts[(n + t) % prompts.len()].clone();
                    let Ok(booking) = router.book(&request(&id, Role::Decode, prompt)) else {
                        panic!("booking failed");
                    };
                    let prefill = 64 - booking.stats.cached_blocks as u64 * u64::from(BLOCK_SIZE);
                    live.push((
                        id,
                        booking.worker.worker_id,
                        prefill,
                        (n + t) % prompts.len(),
                    ));
                    if n % 3 == 0 {
                        let (id, _, _, _) = live.remove(0);
                        router.release(&id);
                    }
                    if n % 5 == 0
                        && let Some(entry) = live.last_mut()
                    {
                        router.prefill_complete(&entry.0);
                        entry.2 = 0;
                    }
                }
                for (_, worker_id, prefill, _) in &live {
                    let load = outstanding.entry(*worker_id).or_default();
                    load.active_prefill_tokens += prefill;
                    load.active_requests += 1;
                }
                (outstanding, live)
            })
        })
        .collect();

    let mut expected: BTreeMap<u64, WorkerLoad> = BTreeMap::new();
    let mut live_ids = Vec::new();
    // Active blocks are the union of the live prompts' block hashes per worker.
    let mut active: BTreeMap<u64, BTreeSet<SequenceHash>> = BTreeMap::new();
    for handle in handles {
        let (outstanding, live) = handle.join().expect("booking thread");
        for (worker_id, load) in outstanding {
            let total = expected.entry(worker_id).or_default();
            total.active_prefill_tokens += load.active_prefill_tokens;
            total.active_requests += load.active_requests;
        }
        for (id, worker_id, _, prompt) in live {
            active
                .entry(worker_id)
                .or_default()
                .extend(sequence_hashes_for_tokens(&prompts[prompt], BLOCK_SIZE));
            live_ids.push(id);
        }
    }
    for (worker_id, blocks) in &active {
        if let Some(load) = expected.get_mut(worker_id) {
            load.active_blocks = blocks.len() as u64;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = events.join().expect("event thread");
    assert!(rounds > 0);

    let actual: BTreeMap<u64, WorkerLoad> = router
        .workers()
        .into_iter()
        .filter(|(_, load)| load.active_requests > 0)
        .map(|(info, load)| (info.id.worker_id, load))
        .collect();
    assert_eq!(actual, expected);
    let metrics = router.metrics();
    assert_eq!(metrics.bookings, (THREADS * PER_THREAD) as u64);
    assert_eq!(metrics.booking_latency.count, metrics.bookings);
    assert_eq!(metrics.active_bookings, live_ids.len() as u64);
    assert_eq!(
        metrics.events.applied + metrics.events.ignored.values().sum::<u64>(),
        rounds as u64
    );

    for id in &live_ids {
        router.release(id);
    }
    assert!(
        router
            .workers()
            .iter()
            .all(|(_, load)| *load == WorkerLoad::default())
    );
    assert_eq!(router.metrics().active_bookings, 0);
}

/// Bookings run while workers register and deregister, KV events arrive, abandoned bookings
/// expire by their TTL and metrics are read: at the end every booking is accounted for exactly
/// once (released by its caller or expired), every event is counted, and no load remains.
#[test]
fn bookings_during_churn_events_expiry_and_metric_reads_account_exactly() {
    use std::time::{Duration, Instant};

    const THREADS: usize = 3;
    /// A booking is abandoned (never released) one time in this many.
    const ABANDON_EVERY: usize = 10;
    const TTL: Duration = Duration::from_millis(400);
    /// Long enough for the first abandoned bookings to expire while others are still booked.
    const RUN: Duration = Duration::from_millis(1_000);

    let options = RouterOptions {
        booking_ttl: TTL,
        ..RouterOptions::default()
    };
    let router = decode_router(options);
    // Workers 1–4 stay; 5–8 come and go.
    for id in 1..=8 {
        assert!(router.register_worker(hinting(id, Role::Decode)).is_ok());
    }
    let prompts: Vec<Vec<u32>> = (0..12).map(|n| tokens(64, n % 3)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    let churn = {
        let router = Arc::clone(&router);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut changes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = 5 + changes % 4;
                let registered = router.workers().iter().any(|(w, _)| w.id == worker(id));
                if registered {
                    router.deregister_worker(worker(id)).expect("registered");
                } else {
                    router
                        .register_worker(hinting(id, Role::Decode))
                        .expect("not registered");
                }
                changes += 1;
                std::thread::yield_now();
            }
            changes
        })
    };
    let events = {
        let router = Arc::clone(&router);
        let prompts = prompts.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut ids = [0u64; 9];
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let w = 1 + (sent as usize) % 8;
                let prompt = &prompts[sent as usize % prompts.len()];
                let event = stored(worker(w as u64), ids[w], prompt, 1 + sent as usize % 4);
                ids[w] += 1;
                let _ = router.apply_event(&event);
                sent += 1;
            }
            sent
        })
    };
    let reader = {
        let router = Arc::clone(&router);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut last = 0;
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let metrics = router.metrics();
                assert!(metrics.bookings >= last, "the booking counter went back");
                last = metrics.bookings;
                let text = router.prometheus_text();
                assert!(text.contains("kv_router_bookings_total "));
                reads += 1;
            }
            reads
        })
    };
    let bookers: Vec<_> = (0..THREADS)
        .map(|t| {
            let router = Arc::clone(&router);
            let prompts = prompts.clone();
            std::thread::spawn(move || {
                let (mut booked, mut abandoned) = (0usize, 0usize);
                while started.elapsed() < RUN {
                    let id = format!("t{t}-{booked}");
                    let prompt = prompts[(booked + t) % prompts.len()].clone();
                    router
                        .book(&request(&id, Role::Decode, prompt))
                        .expect("workers 1-4 are always registered");
                    if booked % ABANDON_EVERY == 0 {
                        abandoned += 1;
                    } else {
                        router.prefill_complete(&id);
                        router.release(&id);
                    }
                    booked += 1;
                }
                (booked, abandoned)
            })
        })
        .collect();
    let (mut booked, mut abandoned) = (0, 0);
    for handle in bookers {
        let (b, a) = handle.join().expect("booking thread");
        booked += b;
        abandoned += a;
    }
    stop.store(true, Ordering::Relaxed);
    let changes = churn.join().expect("churn thread");
    let sent = events.join().expect("event thread");
    let reads = reader.join().expect("reader thread");
    assert!(changes > 0 && sent > 0 && reads > 0 && abandoned > 0);
    let during_run = router.metrics().bookings_expired;
    assert!(
        during_run > 0,
        "abandoned bookings expired while others were booked"
    );

    std::thread::sleep(TTL + Duration::from_millis(50));
    router.expire_stale_bookings();
    let metrics = router.metrics();
    assert_eq!(metrics.bookings, booked as u64);
    assert_eq!(metrics.booking_latency.count, booked as u64);
    assert_eq!(
        metrics.bookings_expired, abandoned as u64,
        "each abandoned booking expired once, and no released one"
    );
    assert_eq!(metrics.active_bookings, 0);
    assert_eq!(
        metrics.events.applied + metrics.events.ignored.values().sum::<u64>(),
        sent
    );
    assert!(
        router
            .workers()
            .iter()
            .all(|(_, load)| *load == WorkerLoad::default()),
        "{:?}",
        router.workers()
    );
}
