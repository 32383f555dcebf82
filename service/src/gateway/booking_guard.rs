//! A booking the gateway holds for one try on one worker: its prefill is released at the
//! first frame of the worker's answer (unless the answer also ended there), all of its load
//! when the answer ends, fails or is abandoned (the client went away, the try was re-booked).
//! Dropping the guard releases it, so no path through the gateway can leak load. Enters: the
//! booking's id; leaves: calls to the service's `prefill_complete` and `free_reservation`.

use super::after_this_turn::after_this_turn;
use crate::selection::selection_service::SelectionService;
use std::sync::Arc;

/// One booking, released when dropped.
pub struct BookingGuard {
    service: Arc<SelectionService>,
    selection_id: String,
    prefill_released: bool,
}

impl BookingGuard {
    /// Holds the booking `selection_id` of `service`.
    pub fn new(service: Arc<SelectionService>, selection_id: String) -> Self {
        Self {
            service,
            selection_id,
            prefill_released: false,
        }
    }

    /// The booking id.
    pub fn selection_id(&self) -> &str {
        &self.selection_id
    }

    /// The worker computed the prompt: its prefill tokens are released (once), on this
    /// worker's next turn ([`after_this_turn`]), so that the answer's first frame reaches the
    /// client first.
    pub fn prefill_complete(&mut self) {
        if !self.prefill_released {
            self.prefill_released = true;
            let service = Arc::clone(&self.service);
            let selection_id = self.selection_id.clone();
            after_this_turn(move || {
                // Gone already when the answer ended first or the booking's TTL passed;
                // nothing is left to release then.
                let _ = service.prefill_complete(&selection_id);
            });
        }
    }
}

impl Drop for BookingGuard {
    fn drop(&mut self) {
        let _ = self.service.free_reservation(&self.selection_id);
    }
}
