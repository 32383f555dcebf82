//! The life of a booking after its selection: `POST /reservations` books a cached selection
//! or a named worker, `POST /reservations/{id}/prefill_complete` releases its prefill,
//! `POST /reservations/{id}/output_block` grows its decode load, and
//! `DELETE /reservations/{id}` releases it.

use crate::error::{ServiceError, book_error};
use crate::partition::Partition;
use crate::replica::hook::LocalBooking;
use crate::selection::selection_request::{PromptRequest, ReservationRequest};
use crate::selection::selection_response::ReservationResponse;
use crate::selection::selection_service::SelectionService;
use crate::worker_record::PartitionKey;
use dynamo_kv_router::kv::SequenceHash;
use dynamo_kv_router::router::{Prompt, Role, RouteRequest, WorkerId};
use std::time::Instant;

impl SelectionService {
    /// `POST /reservations`: books the selection cached under `selection_id`, or (with
    /// `worker_id`) the named worker.
    pub fn create_reservation(
        &self,
        mut request: ReservationRequest,
    ) -> Result<ReservationResponse, ServiceError> {
        let prompt = request.take_prompt();
        let key = PartitionKey {
            model_name: request.model_name.clone(),
            routing_group: request.routing_group.clone(),
        };
        let partition = self.ready_partition(&key)?;
        let selection_id = request.selection_id.clone();
        let (route, worker, prefill) = match request.worker_id {
            Some(worker_id) => {
                self.pending.lock().remove(&key, &selection_id);
                self.explicit_booking(&partition, &request, &prompt, worker_id)?
            }
            None => self.pending_booking(&key, &selection_id)?,
        };
        let endpoint = self.schedulable_endpoint(worker, &key)?;
        self.claim(&selection_id, &key)?;
        let booked = partition.router.book_on(&route, worker, prefill);
        let mut reservations = self.reservations.lock();
        let booking = match booked {
            Ok(booking) => {
                reservations.install(&selection_id, booking.worker);
                booking
            }
            Err(error) => {
                reservations.abandon(&selection_id);
                return Err(book_error(error, &key));
            }
        };
        drop(reservations);
        if let Prompt::Blocks {
            sequence_hashes,
            prompt_tokens,
        } = &route.prompt
        {
            let cached = booking.stats.cached_blocks * partition.block_size as usize;
            self.tell_replica(
                &partition,
                &selection_id,
                worker,
                LocalBooking::Booked {
                    sequence_hashes,
                    prefill_tokens: prefill.unwrap_or(prompt_tokens.saturating_sub(cached)),
                },
            );
        }
        if request.worker_id.is_none() {
            self.pending.lock().remove(&key, &selection_id);
        }
        Ok(ReservationResponse {
            selection_id,
            model_name: key.model_name,
            routing_group: key.routing_group,
            worker_id: worker.worker_id,
            dp_rank: worker.dp_rank,
            endpoint,
        })
    }

    /// The booking a `/select` cached under `selection_id`.
    fn pending_booking(
        &self,
        key: &PartitionKey,
        selection_id: &str,
    ) -> Result<(RouteRequest, WorkerId, Option<usize>), ServiceError> {
        let pending = self
            .pending
            .lock()
            .get(key, selection_id, Instant::now())
            .ok_or_else(|| {
                ServiceError::NotFound(format!(
                    "no pending selection {selection_id} for {key} (expired, already used, or \
                     never selected)"
                ))
            })?;
        let route = RouteRequest::new(
            selection_id,
            pending.role,
            Prompt::Blocks {
                sequence_hashes: pending.sequence_hashes,
                prompt_tokens: pending.isl_tokens,
            },
        )
        .with_session(pending.session);
        Ok((route, pending.worker, None))
    }

    fn explicit_booking(
        &self,
        partition: &Partition,
        request: &ReservationRequest,
        prompt: &PromptRequest,
        worker_id: u64,
    ) -> Result<(RouteRequest, WorkerId, Option<usize>), ServiceError> {
        let (sequence_hashes, isl_tokens) = if prompt.token_ids.is_some()
            || prompt.mm_routing_info.is_some()
        {
            let normalized = prompt.normalize(partition.block_size, partition.eagle)?;
            (normalized.sequence_hashes, normalized.isl_tokens)
        } else {
            let given = prompt.sequence_hashes.as_deref().ok_or_else(|| {
                ServiceError::BadRequest("sequence_hashes is required without token_ids".to_owned())
            })?;
            let isl_tokens = prompt.isl_tokens.ok_or_else(|| {
                ServiceError::BadRequest("isl_tokens is required without token_ids".to_owned())
            })?;
            let hashes = if prompt.block_hashes.is_some() {
                prompt
                    .normalize(partition.block_size, partition.eagle)?
                    .sequence_hashes
            } else {
                given
                    .iter()
                    .map(|hash| SequenceHash(*hash as u64))
                    .collect()
            };
            (hashes, isl_tokens)
        };
        if let Some(tokens) = request.effective_prefill_tokens
            && tokens > isl_tokens
        {
            return Err(ServiceError::BadRequest(format!(
                "effective_prefill_tokens ({tokens}) must not exceed isl_tokens ({isl_tokens})"
            )));
        }
        let worker = WorkerId::new(worker_id, request.dp_rank.unwrap_or(0));
        let role = match request.role {
            Some(role) => role.0,
            None => self
                .catalog
                .read()
                .get(&worker_id)
                .map_or(Role::Aggregated, |entry| entry.record.role.0),
        };
        let route = RouteRequest::new(
            request.selection_id.clone(),
            role,
            Prompt::Blocks {
                sequence_hashes,
                prompt_tokens: isl_tokens,
            },
        );
        Ok((route, worker, request.effective_prefill_tokens))
    }

    /// `POST /reservations/{id}/prefill_complete`: the booking's prefill tokens are released.
    pub fn prefill_complete(&self, selection_id: &str) -> Result<(), ServiceError> {
        let (partition, worker) = {
            let reservations = self.reservations.lock();
            let reservation = reservations
                .get(selection_id)
                .ok_or_else(|| reservation_not_found(selection_id))?;
            (self.partition(&reservation.partition), reservation.worker)
        };
        if let Some(partition) = partition {
            partition.router.prefill_complete(selection_id);
            if let Some(worker) = worker {
                self.tell_replica(
                    &partition,
                    selection_id,
                    worker,
                    LocalBooking::PrefillCompleted,
                );
            }
        }
        Ok(())
    }

    /// `DELETE /reservations/{id}`: all the booking's load is released.
    pub fn free_reservation(&self, selection_id: &str) -> Result<(), ServiceError> {
        let reservation = self
            .reservations
            .lock()
            .remove(selection_id)
            .ok_or_else(|| reservation_not_found(selection_id))?;
        if let Some(partition) = self.partition(&reservation.partition) {
            partition.router.release(selection_id);
            if let Some(worker) = reservation.worker {
                self.tell_replica(&partition, selection_id, worker, LocalBooking::Freed);
            }
        }
        Ok(())
    }

    /// `POST /reservations/{id}/output_block`: the booking generated one more output block,
    /// which adds one block to its worker's decode load until the booking is released
    /// (upstream's `add_output_block`; like upstream, output blocks are not sent to peer
    /// replicas). `decay_fraction` must lie in `0.0..=1.0` (400 otherwise, as upstream); this
    /// router counts whole blocks, so it does not scale the block by the fraction.
    pub fn add_output_block(
        &self,
        selection_id: &str,
        decay_fraction: Option<f64>,
    ) -> Result<(), ServiceError> {
        if let Some(fraction) = decay_fraction
            && !(0.0..=1.0).contains(&fraction)
        {
            return Err(ServiceError::BadRequest(
                "decay_fraction must be between 0.0 and 1.0".to_owned(),
            ));
        }
        let partition = {
            let reservations = self.reservations.lock();
            let reservation = reservations
                .get(selection_id)
                .filter(|reservation| reservation.worker.is_some())
                .ok_or_else(|| reservation_not_found(selection_id))?;
            self.partition(&reservation.partition)
        };
        let grown =
            partition.is_some_and(|partition| partition.router.add_output_blocks(selection_id, 1));
        if grown {
            return Ok(());
        }
        // The router released the booking (its TTL passed): forget it here too.
        self.reservations.lock().remove(selection_id);
        Err(reservation_not_found(selection_id))
    }
}

fn reservation_not_found(selection_id: &str) -> ServiceError {
    ServiceError::NotFound(format!("reservation {selection_id} not found"))
}
