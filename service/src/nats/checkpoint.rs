//! Checkpoints of a router that reads the event plane, and where its consumer starts.
//!
//! **Enters:** the service's state (workers and index) and the consumer's position, taken
//! together under the ingress's routing lock, so the state holds exactly the stream's events
//! up to one sequence; at startup, the position of the checkpoint the state was restored from.
//! **Leaves:** a snapshot file whose [`EventPlanePosition`] names that sequence, each worker
//! rank's last event id and each publisher's last envelope; then the acknowledgement of that
//! sequence (`AckPolicy::All`), so the consumer's acknowledgement floor never passes what a
//! written checkpoint holds.
//!
//! A restarted process restores the checkpoint and reads on from the sequence after it: that
//! is where it acknowledged. Nothing is lost (every later event is still in the stream) and
//! nothing is applied twice (each rank's event numbering continues after its recorded id, and
//! sequences up to the checkpoint's are skipped). The consumer is recreated at that sequence
//! rather than reused as it is: the server would redeliver what the dead process had been
//! sent but not acknowledged only after `ack_wait`, behind newer events.

use super::NatsError;
use super::ingress::{NatsIngress, acknowledge, create_consumer};
use crate::selection::selection_service::SelectionService;
use crate::selection::snapshot::{
    EventPlanePosition, PublisherPosition, RankPosition, RouterState, SnapshotError,
};
use async_nats::jetstream::consumer::DeliverPolicy;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Where a router's consumer started reading the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeKind {
    /// From the stream's first event, into a fresh index (the index is rebuilt from the
    /// stream).
    FromStreamStart {
        /// Why not from a checkpoint.
        reason: String,
    },
    /// After the checkpoint's sequence, where the consumer had acknowledged.
    FromCheckpoint {
        /// The checkpoint's last stream sequence.
        stream_seq: u64,
        /// The consumer's acknowledgement floor the server had kept (`None` when the server
        /// had no such consumer).
        ack_floor: Option<u64>,
        /// Events the stream no longer holds after the checkpoint (its `max_age` dropped
        /// them): the index misses them.
        aged_out: u64,
    },
}

impl fmt::Display for ResumeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeKind::FromStreamStart { reason } => {
                write!(f, "reading the stream from its first event ({reason})")
            }
            ResumeKind::FromCheckpoint {
                stream_seq,
                ack_floor,
                aged_out,
            } => {
                write!(f, "resuming the stream after sequence {stream_seq}")?;
                match ack_floor {
                    Some(floor) => write!(f, " (the consumer had acknowledged through {floor})")?,
                    None => write!(f, " (the server had no such consumer; created again)")?,
                }
                if *aged_out > 0 {
                    write!(
                        f,
                        "; {aged_out} messages after the checkpoint aged out of the stream and are missing"
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// What [`NatsIngress::write_checkpoint`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointWritten {
    /// The last stream sequence the file holds.
    pub stream_seq: u64,
    /// Blocks in the file's index.
    pub blocks: usize,
    /// Whether the consumer's acknowledgement moved to `stream_seq` (it does not when there
    /// was nothing new, when events of unregistered workers are held from before it, or when
    /// the acknowledgement failed: the next checkpoint acknowledges again).
    pub acknowledged: bool,
}

fn jetstream_error(operation: &'static str, error: impl fmt::Display) -> NatsError {
    NatsError::JetStream {
        operation,
        message: error.to_string(),
    }
}

impl NatsIngress {
    /// Starts reading: after `resume`'s sequence when it is a checkpoint of this stream and
    /// consumer whose state has been restored into the service (see [`RouterState::apply`]),
    /// else from the stream's first event. Call it once.
    pub async fn begin(
        &self,
        resume: Option<&EventPlanePosition>,
    ) -> Result<ResumeKind, NatsError> {
        let options = &self.options;
        let mut stream = self.stream.clone();
        let info = stream
            .info()
            .await
            .map_err(|error| jetstream_error("stream info", error))?;
        let reason = match resume {
            None => "no checkpoint".to_owned(),
            Some(position) if position.stream != options.stream => format!(
                "the checkpoint is of stream `{}`, not `{}`",
                position.stream, options.stream
            ),
            Some(position) if position.consumer != options.consumer => format!(
                "the checkpoint is of consumer `{}`, not `{}`; give --nats-consumer the same name to resume",
                position.consumer, options.consumer
            ),
            Some(position) if info.state.last_sequence < position.stream_seq => format!(
                "the stream ends at sequence {}, before the checkpoint's {}: it was created again",
                info.state.last_sequence, position.stream_seq
            ),
            Some(position) => {
                let ack_floor = match self.stream.consumer_info(&options.consumer).await {
                    Ok(consumer) => Some(consumer.ack_floor.stream_sequence),
                    Err(_) => None,
                };
                if let Some(floor) = ack_floor.filter(|floor| *floor > position.stream_seq) {
                    tracing::warn!(
                        floor,
                        checkpoint = position.stream_seq,
                        "the consumer acknowledged past the checkpoint (an older snapshot file?); reading again from the checkpoint"
                    );
                }
                self.resume_at(position);
                let _ = self.stream.delete_consumer(&options.consumer).await;
                let consumer = create_consumer(
                    &self.stream,
                    options,
                    DeliverPolicy::ByStartSequence {
                        start_sequence: position.stream_seq + 1,
                    },
                )
                .await?;
                self.spawn_consumer(consumer);
                let aged_out = info
                    .state
                    .first_sequence
                    .saturating_sub(position.stream_seq + 1);
                return Ok(ResumeKind::FromCheckpoint {
                    stream_seq: position.stream_seq,
                    ack_floor,
                    aged_out,
                });
            }
        };
        // A fresh index must see the stream from its start: drop what an earlier process of
        // this replica acknowledged. A missing consumer is not an error.
        let _ = self.stream.delete_consumer(&options.consumer).await;
        let consumer = create_consumer(&self.stream, options, DeliverPolicy::All).await?;
        self.spawn_consumer(consumer);
        Ok(ResumeKind::FromStreamStart { reason })
    }

    /// Takes the checkpoint's stream sequence and publisher positions as its own.
    fn resume_at(&self, position: &EventPlanePosition) {
        let mut routing = self.shared.routing.lock();
        routing.applied_seq = position.stream_seq;
        routing.ack_point = None;
        routing.publishers = position
            .publishers
            .iter()
            .map(|publisher| (publisher.publisher_id, publisher.sequence))
            .collect();
        self.shared
            .handled_stream_seq
            .store(position.stream_seq, Ordering::Relaxed);
        self.shared
            .stats
            .acked_stream_seq
            .store(position.stream_seq, Ordering::Relaxed);
    }

    /// `service`'s state with the position it holds exactly, and the message to acknowledge
    /// once the state is written (`None` when there is nothing to acknowledge). Events are not
    /// applied meanwhile.
    pub fn checkpoint(
        &self,
        service: &SelectionService,
    ) -> Result<(RouterState, Option<async_nats::jetstream::Message>), SnapshotError> {
        let routing = self.shared.routing.lock();
        let mut state = RouterState::capture(service)?;
        // Events held for workers not registered yet are not in the index: the checkpoint
        // ends before the oldest of them, so a restart reads them again.
        let stream_seq = match routing.oldest_held_seq() {
            Some(held) => routing.applied_seq.min(held.saturating_sub(1)),
            None => routing.applied_seq,
        };
        let ack_point = routing
            .ack_point
            .clone()
            .filter(|_| stream_seq == routing.applied_seq);
        let mut publishers: Vec<PublisherPosition> = routing
            .publishers
            .iter()
            .map(|(&publisher_id, &sequence)| PublisherPosition {
                publisher_id,
                sequence,
            })
            .collect();
        publishers.sort_unstable_by_key(|publisher| publisher.publisher_id);
        state.event_plane = Some(EventPlanePosition {
            stream: self.options.stream.clone(),
            consumer: self.options.consumer.clone(),
            stream_seq,
            publishers,
            cursors: RankPosition::of_service(service),
        });
        Ok((state, ack_point))
    }

    /// Writes a checkpoint of `service` to `path` (atomically, see [`RouterState::write`]),
    /// then acknowledges what it holds.
    pub async fn write_checkpoint(
        &self,
        service: &Arc<SelectionService>,
        path: &Path,
    ) -> Result<CheckpointWritten, SnapshotError> {
        let (state, ack_point) = self.checkpoint(service)?;
        let stream_seq = state
            .event_plane
            .as_ref()
            .map_or(0, |plane| plane.stream_seq);
        let blocks = state.blocks();
        state.write_off_runtime(path).await?;
        let acknowledged = match ack_point {
            Some(message) => acknowledge(&self.shared.stats, &message).await,
            None => false,
        };
        Ok(CheckpointWritten {
            stream_seq,
            blocks,
            acknowledged,
        })
    }
}
