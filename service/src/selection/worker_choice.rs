//! `POST /select` and `POST /select_and_reserve`: choosing a worker for a prompt, by the role's
//! selection policy or as the caller pinned it, among the workers `allowed_worker_ids` admits.

use crate::error::{ServiceError, book_error};
use crate::partition::Partition;
use crate::replica::hook::LocalBooking;
use crate::selection::prompt::NormalizedPrompt;
use crate::selection::reservations::PendingSelection;
use crate::selection::selection_id::new_selection_id;
use crate::selection::selection_request::{PromptRequest, SelectRequest, WorkerRank};
use crate::selection::selection_response::SelectResponse;
use crate::selection::selection_service::{BookedRequest, SelectionService};
use crate::worker_record::PartitionKey;
use dynamo_kv_router::router::{
    Booking, BookingStats, CandidateFilter, Prompt, Role, RouteRequest, WorkerId,
};
use std::time::Instant;

/// Whether a selection books load or only chooses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// `/select_and_reserve`: reserve load and run the hint policies.
    Book,
    /// `/select`: only choose.
    Query,
}

impl SelectionService {
    /// `POST /select`: chooses a worker without booking. With a `selection_id`, the choice is
    /// cached so that `POST /reservations` can book it.
    pub fn select(&self, request: SelectRequest) -> Result<SelectResponse, ServiceError> {
        self.run_selection(request, Admission::Query)
    }

    /// `POST /select_and_reserve`: chooses a worker, books load on it and runs the role's hint
    /// policies.
    pub fn select_and_reserve(
        &self,
        request: SelectRequest,
    ) -> Result<SelectResponse, ServiceError> {
        self.run_selection(request, Admission::Book)
    }

    fn run_selection(
        &self,
        mut request: SelectRequest,
        admission: Admission,
    ) -> Result<SelectResponse, ServiceError> {
        let key = PartitionKey {
            model_name: std::mem::take(&mut request.model_name),
            routing_group: std::mem::take(&mut request.routing_group),
        };
        let prompt_request = request.take_prompt();
        let partition = self.ready_partition(&key)?;
        let role = request.role.unwrap_or_default().0;
        let selection_id = match admission {
            Admission::Book => Some(
                request
                    .selection_id
                    .clone()
                    .unwrap_or_else(new_selection_id),
            ),
            Admission::Query => request.selection_id.clone(),
        };
        let booking_id = selection_id
            .as_deref()
            .filter(|_| admission == Admission::Book);
        if let Some(id) = booking_id {
            self.claim(id, &key)?;
        }
        let result = self.select_on(
            &partition,
            &request,
            &prompt_request,
            role,
            admission,
            selection_id.clone(),
        );
        if let Some(id) = booking_id {
            let mut reservations = self.reservations.lock();
            match &result {
                Ok((booking, _)) => reservations.install(id, booking.worker),
                Err(_) => reservations.abandon(id),
            }
        }
        let (booking, prompt) = result?;
        match (admission, &selection_id) {
            (Admission::Query, Some(id)) => {
                self.cache_selection(&key, id, &booking, &prompt, &request, role)
            }
            (Admission::Book, Some(id)) => {
                self.announce_booking(&partition, id, &booking, &prompt, &prompt_request)
            }
            _ => {}
        }
        self.response(&partition, booking, prompt, admission, selection_id)
    }

    /// Keeps a `/select` choice under its id for a later `POST /reservations`.
    fn cache_selection(
        &self,
        key: &PartitionKey,
        id: &str,
        booking: &Booking,
        prompt: &NormalizedPrompt,
        request: &SelectRequest,
        role: Role,
    ) {
        self.pending.lock().insert(
            key.clone(),
            id.to_owned(),
            PendingSelection {
                worker: booking.worker,
                role,
                sequence_hashes: prompt.sequence_hashes.clone(),
                isl_tokens: prompt.isl_tokens,
                session: request.session(),
                at: Instant::now(),
            },
        );
    }

    /// Tells the in-process observer and the peer replicas of a booking just made.
    fn announce_booking(
        &self,
        partition: &Partition,
        id: &str,
        booking: &Booking,
        prompt: &NormalizedPrompt,
        prompt_request: &PromptRequest,
    ) {
        if let Some(observer) = &self.observer {
            observer.booked(BookedRequest {
                selection_id: id.to_owned(),
                worker: booking.worker,
                token_ids: prompt_request.routing_tokens().map(<[u32]>::to_vec),
                hint: booking.hint.clone(),
            });
        }
        let cached = booking.stats.cached_blocks * partition.block_size as usize;
        self.tell_replica(
            partition,
            id,
            booking.worker,
            LocalBooking::Booked {
                sequence_hashes: &prompt.sequence_hashes,
                prefill_tokens: prompt.isl_tokens.saturating_sub(cached),
            },
        );
    }

    /// Chooses (and, for a booking, reserves) a worker of `role` for the prompt. With
    /// `allowed_worker_ids`, the role's selection policy chooses among the allowed workers
    /// only (every worker's overlap is still scored), as upstream's scheduler filters its
    /// candidates; none allowed is upstream's "no endpoints" (503), and a pinned worker
    /// outside the set is upstream's `PinnedWorkerNotAllowed` (400).
    fn select_on(
        &self,
        partition: &Partition,
        request: &SelectRequest,
        prompt: &PromptRequest,
        role: Role,
        admission: Admission,
        selection_id: Option<String>,
    ) -> Result<(Booking, NormalizedPrompt), ServiceError> {
        let prompt = prompt.normalize(partition.block_size, partition.eagle)?;
        let mut route = RouteRequest::new(
            selection_id.unwrap_or_default(),
            role,
            Prompt::Blocks {
                sequence_hashes: prompt.sequence_hashes.clone(),
                prompt_tokens: prompt.isl_tokens,
            },
        )
        .with_session(request.session());
        if let Some(allowed) = &request.allowed_worker_ids {
            route = route.with_allowed_workers(CandidateFilter::new(allowed.iter().copied()));
        }
        if let Some(pinned) = request.pinned_worker {
            return self.select_pinned(partition, &route, pinned, admission, prompt);
        }
        let booking = match admission {
            Admission::Book => partition.router.book(&route),
            Admission::Query => partition.router.preview(&route),
        }
        .map_err(|error| book_error(error, &partition.key))?;
        Ok((booking, prompt))
    }

    /// A pinned worker is booked (or, for a query, reported) as is: no policy runs.
    fn select_pinned(
        &self,
        partition: &Partition,
        route: &RouteRequest,
        pinned: WorkerRank,
        admission: Admission,
        prompt: NormalizedPrompt,
    ) -> Result<(Booking, NormalizedPrompt), ServiceError> {
        let worker = WorkerId::new(pinned.worker_id, pinned.dp_rank);
        if let Some(filter) = &route.allowed_workers
            && !filter.allows(worker)
        {
            return Err(ServiceError::BadRequest(format!(
                "pinned worker {} is not in allowed worker set",
                pinned.worker_id
            )));
        }
        self.schedulable_endpoint(worker, &partition.key)?;
        let booking = match admission {
            Admission::Book => partition.router.book_on(route, worker, None),
            Admission::Query => Ok(Booking {
                request_id: route.request_id.clone(),
                role: route.role,
                worker,
                hint: None,
                committed_kv_copy: None,
                stats: BookingStats {
                    blocks: prompt.sequence_hashes.len(),
                    cached_blocks: partition
                        .router
                        .cached_prefix(worker, &prompt.sequence_hashes),
                    ..Default::default()
                },
            }),
        }
        .map_err(|error| book_error(error, &partition.key))?;
        Ok((booking, prompt))
    }
}
