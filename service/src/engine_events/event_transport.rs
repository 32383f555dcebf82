//! How the service reaches an engine's ZMQ sockets: a small trait (subscribe to the KV-event
//! publisher; ask the replay endpoint for a range), and its implementation on the pure-Rust
//! `zeromq` crate.
//!
//! Frames: a published message is `[topic, seq (u64 big-endian), payload]`. A replay request
//! is `[b"", start_seq (8 bytes big-endian)]` on a DEALER connected to the engine's ROUTER; the
//! answers are `[b"", seq, payload]` (or with one more leading frame), until an empty payload.

use async_trait::async_trait;
use bytes::Bytes;
use std::time::Duration;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

/// A transport failure; the listener reconnects or gives up the replay.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The endpoint is not a `tcp://host:port` (or `ipc://path`) the router can connect to.
    #[error("invalid endpoint `{endpoint}`: {reason}")]
    InvalidEndpoint {
        /// The endpoint.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The socket failed.
    #[error("ZMQ error on {endpoint}: {message}")]
    Socket {
        /// The endpoint.
        endpoint: String,
        /// The error.
        message: String,
    },
    /// Nothing came within the time allowed.
    #[error("no answer from {endpoint} within {waited:?}")]
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// How long it waited.
        waited: Duration,
    },
}

/// One replayed batch: its sequence number and msgpack payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayedBatch {
    /// The batch's sequence number.
    pub seq: u64,
    /// The msgpack `EventBatch`.
    pub payload: Bytes,
}

/// A live subscription to a publisher.
#[async_trait]
pub trait EventStream: Send {
    /// The next message's frames.
    async fn next(&mut self) -> Result<Vec<Bytes>, TransportError>;
}

/// Connects to engines.
#[async_trait]
pub trait EventTransport: Send + Sync + 'static {
    /// Subscribes to the messages of the publisher at `endpoint` whose topic starts with one
    /// of `topics` (the empty topic is every message), once it is reachable.
    async fn subscribe(
        &self,
        endpoint: &str,
        topics: &[String],
    ) -> Result<Box<dyn EventStream>, TransportError>;

    /// Asks the replay endpoint for every batch from `start_seq` on, waiting at most `wait`
    /// for each answer.
    async fn replay(
        &self,
        endpoint: &str,
        start_seq: u64,
        wait: Duration,
    ) -> Result<Vec<ReplayedBatch>, TransportError>;
}

/// Checks that the router can connect to `endpoint`: `tcp://host:port` with a concrete host
/// (a publisher's `tcp://*:5557` bind address is not), or `ipc://path`.
pub fn validate_endpoint(endpoint: &str) -> Result<(), TransportError> {
    let invalid = |reason: &str| TransportError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    if let Some(address) = endpoint.strip_prefix("tcp://") {
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| invalid("expected tcp://host:port"))?;
        if host.is_empty() || host == "*" || host == "0.0.0.0" {
            return Err(invalid(
                "a bind address is not connectable; give the engine's host or IP",
            ));
        }
        port.parse::<u16>()
            .map_err(|_| invalid("the port must be a number from 0 to 65535"))?;
        return Ok(());
    }
    if endpoint.starts_with("ipc://") {
        return Ok(());
    }
    Err(invalid("expected tcp://host:port or ipc://path"))
}

/// The transport on the pure-Rust `zeromq` crate.
#[derive(Clone, Copy, Debug, Default)]
pub struct ZmqTransport;

struct ZmqStream {
    endpoint: String,
    socket: SubSocket,
}

fn socket_error(endpoint: &str, error: impl std::fmt::Display) -> TransportError {
    TransportError::Socket {
        endpoint: endpoint.to_owned(),
        message: error.to_string(),
    }
}

#[async_trait]
impl EventStream for ZmqStream {
    async fn next(&mut self) -> Result<Vec<Bytes>, TransportError> {
        let message = self
            .socket
            .recv()
            .await
            .map_err(|error| socket_error(&self.endpoint, error))?;
        Ok(message.into_vec())
    }
}

#[async_trait]
impl EventTransport for ZmqTransport {
    async fn subscribe(
        &self,
        endpoint: &str,
        topics: &[String],
    ) -> Result<Box<dyn EventStream>, TransportError> {
        validate_endpoint(endpoint)?;
        let mut socket = SubSocket::new();
        for topic in topics {
            socket
                .subscribe(topic)
                .await
                .map_err(|error| socket_error(endpoint, error))?;
        }
        socket
            .connect(endpoint)
            .await
            .map_err(|error| socket_error(endpoint, error))?;
        Ok(Box::new(ZmqStream {
            endpoint: endpoint.to_owned(),
            socket,
        }))
    }

    async fn replay(
        &self,
        endpoint: &str,
        start_seq: u64,
        wait: Duration,
    ) -> Result<Vec<ReplayedBatch>, TransportError> {
        validate_endpoint(endpoint)?;
        let endpoint = endpoint.to_owned();
        // The zeromq crate panics on some peer failures inside recv: keep them in a task of
        // their own so that a failed replay is an error, not a dead listener.
        let task = tokio::spawn(replay_exchange(endpoint.clone(), start_seq, wait));
        task.await
            .map_err(|error| socket_error(&endpoint, format!("replay task failed: {error}")))?
    }
}

async fn replay_exchange(
    endpoint: String,
    start_seq: u64,
    wait: Duration,
) -> Result<Vec<ReplayedBatch>, TransportError> {
    let timeout = || TransportError::Timeout {
        endpoint: endpoint.clone(),
        waited: wait,
    };
    let mut socket = DealerSocket::new();
    tokio::time::timeout(wait, socket.connect(&endpoint))
        .await
        .map_err(|_| timeout())?
        .map_err(|error| socket_error(&endpoint, error))?;
    let request = ZmqMessage::try_from(vec![
        Bytes::new(),
        Bytes::copy_from_slice(&start_seq.to_be_bytes()),
    ])
    .map_err(|error| socket_error(&endpoint, error))?;
    socket
        .send(request)
        .await
        .map_err(|error| socket_error(&endpoint, error))?;
    let mut batches = Vec::new();
    loop {
        let message = tokio::time::timeout(wait, socket.recv())
            .await
            .map_err(|_| timeout())?
            .map_err(|error| socket_error(&endpoint, error))?;
        let frames = message.into_vec();
        let (seq, payload) = match frames.as_slice() {
            [_, seq, payload] | [_, _, seq, payload] => (seq, payload),
            other => {
                return Err(socket_error(
                    &endpoint,
                    format!("replay answer has {} frames; expected 3 or 4", other.len()),
                ));
            }
        };
        if payload.is_empty() {
            return Ok(batches);
        }
        let seq: [u8; 8] = seq.as_ref().try_into().map_err(|_| {
            socket_error(
                &endpoint,
                format!("replay seq frame has {} bytes; expected 8", seq.len()),
            )
        })?;
        batches.push(ReplayedBatch {
            seq: u64::from_be_bytes(seq),
            payload: payload.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::validate_endpoint;

    #[test]
    fn endpoints_must_be_connectable() {
        assert!(validate_endpoint("tcp://127.0.0.1:5557").is_ok());
        assert!(validate_endpoint("tcp://engine-0:5557").is_ok());
        assert!(validate_endpoint("ipc:///tmp/kv").is_ok());
        for bad in [
            "tcp://*:5557",
            "tcp://127.0.0.1",
            "127.0.0.1:5557",
            "tcp://h:99999",
        ] {
            assert!(validate_endpoint(bad).is_err(), "{bad}");
        }
    }
}
