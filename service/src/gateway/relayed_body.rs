//! The worker's answer on its way to the client, frame by frame as it arrives (never buffered
//! whole). It holds the request's booking: the prefill is released at the first frame, the
//! booking at the end (each just after hyper has the frame, so the client does not wait for
//! the bookkeeping), at an upstream error and when the client goes away (the body is dropped,
//! which drops the worker's connection and so cancels the request there). A stream that fails
//! after bytes reached the client ends with an OpenAI error event instead of a cut. Enters: the
//! worker's body and its first frame, already read; leaves: frames for the client, metrics.

use super::after_this_turn::after_this_turn;
use super::booking_guard::BookingGuard;
use super::gateway_metrics::WorkerCounters;
use super::openai_error::OpenAiError;
use super::worker_connections::WorkerBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// What the relay needs to account for the answer.
pub struct RelayAccounting {
    /// The request's booking, released when the relay ends or is dropped.
    pub booking: BookingGuard,
    /// The serving worker's counters.
    pub counters: Arc<WorkerCounters>,
    /// When the request arrived.
    pub arrived: Instant,
    /// The serving worker, for logs.
    pub worker_id: u64,
}

/// The client's view of the worker's answer.
pub struct RelayedBody {
    first: Option<Frame<Bytes>>,
    upstream: Option<WorkerBody>,
    accounting: Option<RelayAccounting>,
    stream: bool,
}

impl RelayedBody {
    /// Relays `upstream`, whose first frame (`first`, if the body had one) was read already.
    /// `stream` says whether the answer is server-sent events.
    pub fn new(
        first: Option<Frame<Bytes>>,
        upstream: WorkerBody,
        accounting: RelayAccounting,
        stream: bool,
    ) -> Self {
        let mut body = Self {
            first,
            upstream: Some(upstream),
            accounting: Some(accounting),
            stream,
        };
        if body.first.is_none() {
            // An empty answer: it ended before any frame (hyper will not poll the body).
            body.first_frame_out();
        }
        body
    }

    /// The answer ended: its latency is taken now, and recorded with the booking's release on
    /// this worker's next turn, after hyper wrote the last frame ([`after_this_turn`]).
    fn finish(&mut self) {
        self.upstream = None;
        if let Some(accounting) = self.accounting.take() {
            let took = accounting.arrived.elapsed();
            after_this_turn(move || {
                accounting.counters.end_to_end.observe(took);
                drop(accounting.booking);
            });
        }
    }

    /// The first frame goes out: the worker computed the prompt.
    fn first_frame_out(&mut self) {
        if self.upstream.as_ref().is_some_and(Body::is_end_stream) {
            self.finish();
        } else if let Some(accounting) = self.accounting.as_mut() {
            accounting.booking.prefill_complete();
        }
    }

    /// Accounts for an upstream failure; the stream's closing error event, if it is one.
    fn failed(&mut self, error: hyper::Error) -> Option<Result<Frame<Bytes>, hyper::Error>> {
        let worker_id = self.accounting.as_ref().map_or(0, |a| a.worker_id);
        if let Some(accounting) = &self.accounting {
            accounting
                .counters
                .stream_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        tracing::warn!(worker_id, %error, "the worker's answer failed after bytes reached the client");
        self.finish();
        if self.stream {
            let event = OpenAiError::bad_gateway(format!(
                "worker {worker_id} failed mid-stream ({error}); the answer is incomplete"
            ))
            .to_sse_event();
            Some(Ok(Frame::data(Bytes::from(event))))
        } else {
            Some(Err(error))
        }
    }
}

impl Drop for RelayedBody {
    fn drop(&mut self) {
        if let Some(accounting) = self.accounting.take() {
            accounting
                .counters
                .disconnects
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(
                worker_id = accounting.worker_id,
                selection_id = accounting.booking.selection_id(),
                "client went away before the answer ended; booking released, worker request dropped"
            );
        }
    }
}

impl Body for RelayedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.first.take() {
            this.first_frame_out();
            return Poll::Ready(Some(Ok(frame)));
        }
        let Some(upstream) = this.upstream.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(upstream).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => {
                // hyper stops polling a body that says it ended: account for it now.
                if this.upstream.as_ref().is_some_and(Body::is_end_stream) {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(this.failed(error)),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.upstream.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self
            .upstream
            .as_ref()
            .map_or(SizeHint::with_exact(0), Body::size_hint);
        match self.first.as_ref().and_then(Frame::data_ref) {
            Some(first) => {
                let len = first.len() as u64;
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + len);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + len);
                }
                hint
            }
            None => rest,
        }
    }
}
