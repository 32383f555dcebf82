//! Bookings made by other router replicas, mirrored into this router so that its cost
//! function sees the load every replica booked, and state restored from a peer's dump or a
//! snapshot.
//!
//! A peer booking reserves load on the worker exactly as a local booking does (same load
//! cells, so selection sees it) but lives in its own ledger: it never counts as a booking of
//! this router, the peer's prefill-complete and free events release it, and if those are
//! lost it expires after the router's booking TTL like a local booking; the expirations are
//! counted by [`Router::peer_bookings_expired`].

use super::workers::ActiveChain;
use super::{BookError, Router, WorkerId};
use crate::block_identity::SequenceHash;
use crate::kv::RouterEvent;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Router {
    /// Records a booking another replica made of `worker` (in the worker's registered role):
    /// the request's full-block `sequence_hashes` become active on the worker and
    /// `prefill_tokens` are reserved until [`Router::peer_prefill_complete`], then everything
    /// until [`Router::release_peer_booking`] or the booking TTL. `request_id` must be unique
    /// across replicas (prefix it with the peer's id). A second record of the same id
    /// replaces the first. Fails, reserving nothing, when `worker` is not registered.
    pub fn record_peer_booking(
        &self,
        request_id: &str,
        worker: WorkerId,
        sequence_hashes: &[SequenceHash],
        prefill_tokens: u64,
    ) -> Result<(), BookError> {
        let now = Instant::now();
        self.expire_peer_bookings_at(now);
        let state = self.state.read();
        let entry = state.workers.get(worker).ok_or(BookError::NotRegistered {
            role: super::Role::Aggregated,
            worker,
        })?;
        let chain = ActiveChain {
            hashes: (!sequence_hashes.is_empty()).then(|| Arc::from(sequence_hashes)),
            untracked_blocks: 0,
        };
        self.peer_ledger.lock().reserve(
            request_id,
            entry.info.role,
            entry,
            prefill_tokens,
            chain,
            now + self.options.booking_ttl,
        );
        Ok(())
    }

    /// A peer reported that its booking's prefill finished; unknown ids are harmless.
    pub fn peer_prefill_complete(&self, request_id: &str) {
        self.peer_ledger.lock().prefill_complete(request_id);
    }

    /// A peer reported that its booking finished; returns whether it was held.
    pub fn release_peer_booking(&self, request_id: &str) -> bool {
        self.peer_ledger.lock().release(request_id) > 0
    }

    /// Releases peer bookings older than the TTL now; returns how many.
    pub fn expire_peer_bookings(&self) -> u64 {
        self.expire_peer_bookings_at(Instant::now())
    }

    /// Peer bookings held now.
    pub fn peer_bookings(&self) -> u64 {
        self.peer_ledger.lock().active_bookings()
    }

    /// Peer bookings released by their TTL since the router started (their free event was
    /// lost or the peer died).
    pub fn peer_bookings_expired(&self) -> u64 {
        self.peer_expired.load(Ordering::Relaxed)
    }

    /// Applies events copied from another router (a peer's `/dump`, a snapshot) to the
    /// registered workers without touching their engine event numbering (see
    /// [`KvIndex::restore`](crate::kv::KvIndex::restore)); returns how many (worker, block)
    /// memberships they added.
    pub fn restore_events(&self, events: &[RouterEvent]) -> usize {
        let mut state = self.state.write();
        let before = state.index.memberships();
        for event in events {
            state.index.restore(event);
        }
        state.index.memberships().saturating_sub(before)
    }

    fn expire_peer_bookings_at(&self, now: Instant) -> u64 {
        let mut ledger = self.peer_ledger.lock();
        if !ledger.has_expired(now) {
            return 0;
        }
        let expired = ledger.expire(now);
        drop(ledger);
        if expired > 0 {
            tracing::warn!(expired, "peer bookings released by their TTL");
            self.peer_expired.fetch_add(expired, Ordering::Relaxed);
        }
        expired
    }
}
