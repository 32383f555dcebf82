//! R router replicas behind one address, as the replay sees them: every replica receives every
//! KV event, bookings go round-robin over the replicas, and a replica learns another's booking,
//! prefill completion and release only `sync_lag` bookings later (its view of the load is that
//! stale). With one replica and no lag it is the single router.

use crate::router_port::RouterPort;
use dynamo_kv_router::kv::{RouterEvent, SequenceHash};
use dynamo_kv_router::router::{
    BookError, Booking, Prompt, RouteRequest, Router, RouterError, RouterOptions, RouterSetup,
    WorkerId, WorkerInfo,
};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

/// A booking change on its way to the other replicas.
enum Change {
    Booked {
        worker: WorkerId,
        hashes: Vec<SequenceHash>,
        prefill_tokens: u64,
    },
    PrefillCompleted,
    Released,
}

struct InFlight {
    /// Delivered once this many bookings have been made.
    due: u64,
    origin: usize,
    request_id: String,
    change: Change,
}

/// Router replicas with delayed booking sync.
pub struct ReplicatedRouter {
    replicas: Vec<Router>,
    sync_lag: u64,
    bookings: Cell<u64>,
    in_flight: RefCell<VecDeque<InFlight>>,
    owner: RefCell<HashMap<String, usize>>,
}

impl ReplicatedRouter {
    /// `replicas` routers (at least one) running `setup`; peers learn of bookings `sync_lag`
    /// bookings late.
    pub fn new(
        setup: &RouterSetup,
        options: RouterOptions,
        replicas: usize,
        sync_lag: u64,
    ) -> Self {
        Self {
            replicas: (0..replicas.max(1))
                .map(|_| Router::new(setup.clone(), options))
                .collect(),
            sync_lag,
            bookings: Cell::new(0),
            in_flight: RefCell::new(VecDeque::new()),
            owner: RefCell::new(HashMap::new()),
        }
    }

    /// The replicas.
    pub fn replicas(&self) -> &[Router] {
        &self.replicas
    }

    fn send(&self, origin: usize, request_id: &str, change: Change) {
        if self.replicas.len() == 1 {
            return;
        }
        self.in_flight.borrow_mut().push_back(InFlight {
            due: self.bookings.get() + self.sync_lag,
            origin,
            request_id: request_id.to_owned(),
            change,
        });
        self.deliver();
    }

    /// Applies every change whose time has come to the replicas that did not make it.
    fn deliver(&self) {
        let now = self.bookings.get();
        let mut in_flight = self.in_flight.borrow_mut();
        while in_flight.front().is_some_and(|change| change.due <= now) {
            let Some(item) = in_flight.pop_front() else {
                break;
            };
            let id = format!("replica{}/{}", item.origin, item.request_id);
            for (r, replica) in self.replicas.iter().enumerate() {
                if r == item.origin {
                    continue;
                }
                match &item.change {
                    Change::Booked {
                        worker,
                        hashes,
                        prefill_tokens,
                    } => {
                        let _ = replica.record_peer_booking(&id, *worker, hashes, *prefill_tokens);
                    }
                    Change::PrefillCompleted => replica.peer_prefill_complete(&id),
                    Change::Released => {
                        replica.release_peer_booking(&id);
                    }
                }
            }
        }
    }
}

impl RouterPort for ReplicatedRouter {
    fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError> {
        for replica in &self.replicas {
            replica.register_worker(info.clone())?;
        }
        Ok(())
    }

    fn apply_event(&self, event: &RouterEvent) {
        for replica in &self.replicas {
            replica.apply_event(event);
        }
    }

    fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        let count = self.bookings.get();
        self.bookings.set(count + 1);
        self.deliver();
        let origin = (count % self.replicas.len() as u64) as usize;
        let booking = self.replicas[origin].book(request)?;
        self.owner
            .borrow_mut()
            .insert(request.request_id.clone(), origin);
        let (hashes, prompt_tokens) = match &request.prompt {
            Prompt::Blocks {
                sequence_hashes,
                prompt_tokens,
            } => (sequence_hashes.clone(), *prompt_tokens),
            _ => (Vec::new(), 0),
        };
        let block_size = self.replicas[origin].setup().block_size as usize;
        let cached = booking.stats.cached_blocks * block_size;
        self.send(
            origin,
            &request.request_id,
            Change::Booked {
                worker: booking.worker,
                hashes,
                prefill_tokens: prompt_tokens.saturating_sub(cached) as u64,
            },
        );
        Ok(booking)
    }

    fn prefill_complete(&self, request_id: &str) {
        let origin = self.owner.borrow().get(request_id).copied();
        if let Some(origin) = origin {
            self.replicas[origin].prefill_complete(request_id);
            self.send(origin, request_id, Change::PrefillCompleted);
        }
    }

    fn release(&self, request_id: &str) {
        let origin = self.owner.borrow_mut().remove(request_id);
        if let Some(origin) = origin {
            self.replicas[origin].release(request_id);
            self.send(origin, request_id, Change::Released);
        }
    }

    fn cached_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize {
        self.replicas[0].cached_prefix(worker, sequence_hashes)
    }

    fn run_shadows(&self) {
        for replica in &self.replicas {
            replica.run_pending_shadows(None);
        }
    }

    fn shadow_reports(&self) -> Vec<dynamo_kv_router::metrics::ShadowReport> {
        crate::shadow_table::merge_shadow_reports(
            self.replicas
                .iter()
                .flat_map(|replica| replica.shadow_reports()),
        )
    }
}
