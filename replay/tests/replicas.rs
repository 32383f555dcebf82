//! Router replicas in the replay: bookings go round-robin, the others learn them
//! `sync_lag` bookings late, and releases travel the same way.

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, LocalBlockHash, RouterEvent, SequenceHash,
};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{
    Prompt, Role, RouteRequest, RouterOptions, WorkerCapabilities, WorkerId, WorkerInfo,
};
use dynamo_router_catalog as _;
use kv_router_replay::replicas::ReplicatedRouter;
use kv_router_replay::router_port::RouterPort;

fn replicated(replicas: usize, sync_lag: u64) -> ReplicatedRouter {
    let registry = PolicyRegistry::linked().expect("the built-in catalog is consistent");
    let source = ConfigSource::new("t.yaml", "router_mode: least-loaded\nblock_size: 4\n");
    let setup = config::load(&source, &registry, &ConfigOverrides::default())
        .unwrap_or_else(|error| panic!("{}", error.render(&source.text)));
    let router = ReplicatedRouter::new(&setup, RouterOptions::default(), replicas, sync_lag);
    for id in 1..=2 {
        let info = WorkerInfo::new(
            WorkerId::new(id, 0),
            Role::Aggregated,
            WorkerCapabilities::default(),
        );
        router.register_worker(info).unwrap();
    }
    router
}

fn request(id: &str) -> RouteRequest {
    RouteRequest::new(
        id,
        Role::Aggregated,
        Prompt::Blocks {
            sequence_hashes: vec![SequenceHash(7), SequenceHash(8)],
            prompt_tokens: 8,
        },
    )
}

fn requests_on(router: &ReplicatedRouter, replica: usize) -> u64 {
    router.replicas()[replica]
        .workers()
        .iter()
        .map(|(_, load)| load.active_requests)
        .sum()
}

#[test]
fn a_peer_learns_a_booking_sync_lag_bookings_late_and_its_release_too() {
    let router = replicated(2, 2);
    router.book(&request("a")).unwrap(); // on replica 0
    assert_eq!((requests_on(&router, 0), requests_on(&router, 1)), (1, 0));
    router.book(&request("b")).unwrap(); // on replica 1, which has not seen `a`
    assert_eq!(requests_on(&router, 1), 1);
    router.book(&request("c")).unwrap(); // two bookings later: `a` reached replica 1
    assert_eq!(requests_on(&router, 1), 2);
    for id in ["a", "b", "c"] {
        router.release(id);
    }
    for id in ["d", "e", "f", "g"] {
        router.book(&request(id)).unwrap();
        router.release(id);
    }
    assert_eq!((requests_on(&router, 0), requests_on(&router, 1)), (0, 0));
}

#[test]
fn without_lag_every_replica_sees_every_booking_at_once_and_events_reach_all() {
    let router = replicated(3, 0);
    let event = RouterEvent::new(
        WorkerId::new(1, 0),
        0,
        KvCacheEventData::stored(None, [(EngineBlockHash(1), LocalBlockHash(7))]),
    );
    router.apply_event(&event);
    for replica in router.replicas() {
        assert_eq!(
            replica.cached_prefix(WorkerId::new(1, 0), &[SequenceHash(7)]),
            1
        );
    }
    for n in 0..6 {
        router.book(&request(&format!("r{n}"))).unwrap();
        for r in 0..3 {
            assert_eq!(requests_on(&router, r), n + 1);
        }
    }
}
