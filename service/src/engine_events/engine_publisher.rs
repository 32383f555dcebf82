//! An engine's side of the KV-event protocol: a ZMQ PUB socket publishing numbered msgpack
//! batches and a ROUTER answering replay requests from a bounded buffer, as vLLM does. The
//! simulated engines of `serve --simulate` and the tests' fake engines use it.

use crate::engine_events::engine_event::{EngineEvent, EngineEventBatch};
use crate::engine_events::event_transport::TransportError;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Batches kept for replay (vLLM's default buffer is 10,000 steps).
pub const REPLAY_BUFFER: usize = 10_000;

type Buffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

/// A publishing engine: `events_endpoint` for SUB sockets, `replay_endpoint` for replays.
pub struct EnginePublisher {
    socket: PubSocket,
    next_seq: u64,
    buffer: Buffer,
    events_endpoint: String,
    replay_endpoint: String,
    replay_task: tokio::task::JoinHandle<()>,
}

impl Drop for EnginePublisher {
    fn drop(&mut self) {
        self.replay_task.abort();
    }
}

fn socket_error(endpoint: &str, error: impl std::fmt::Display) -> TransportError {
    TransportError::Socket {
        endpoint: endpoint.to_owned(),
        message: error.to_string(),
    }
}

impl EnginePublisher {
    /// Binds both sockets on `host` at free ports (`host` is an IP such as `127.0.0.1`).
    pub async fn bind(host: &str) -> Result<Self, TransportError> {
        Self::bind_at(&format!("tcp://{host}:0"), &format!("tcp://{host}:0")).await
    }

    /// Binds the publisher at `events` and the replay ROUTER at `replay` (`tcp://ip:port`).
    pub async fn bind_at(events: &str, replay: &str) -> Result<Self, TransportError> {
        let mut socket = PubSocket::new();
        let events_endpoint = socket
            .bind(events)
            .await
            .map_err(|error| socket_error(events, error))?
            .to_string();
        let mut router = RouterSocket::new();
        let replay_endpoint = router
            .bind(replay)
            .await
            .map_err(|error| socket_error(replay, error))?
            .to_string();
        let buffer: Buffer = Arc::default();
        let replay_task = tokio::spawn(serve_replays(router, Arc::clone(&buffer)));
        Ok(Self {
            socket,
            next_seq: 0,
            buffer,
            events_endpoint,
            replay_endpoint,
            replay_task,
        })
    }

    /// Where SUB sockets connect.
    pub fn events_endpoint(&self) -> &str {
        &self.events_endpoint
    }

    /// Where replay requests go.
    pub fn replay_endpoint(&self) -> &str {
        &self.replay_endpoint
    }

    /// The sequence number the next batch gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Numbers `payload`, keeps it for replay and publishes it; returns its sequence number.
    pub async fn publish(&mut self, payload: Vec<u8>) -> Result<u64, TransportError> {
        let (seq, payload) = self.record(payload);
        let message = ZmqMessage::try_from(vec![
            Bytes::new(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload,
        ])
        .map_err(|error| socket_error(&self.events_endpoint, error))?;
        self.socket
            .send(message)
            .await
            .map_err(|error| socket_error(&self.events_endpoint, error))?;
        Ok(seq)
    }

    /// Numbers `payload` and keeps it for replay without publishing it: a message subscribers
    /// lose. Returns its sequence number.
    pub fn lose(&mut self, payload: Vec<u8>) -> u64 {
        self.record(payload).0
    }

    /// An engine restart: numbering starts again at 0 and the replay buffer is emptied.
    pub fn restart(&mut self) {
        self.next_seq = 0;
        self.buffer.lock().clear();
    }

    fn record(&mut self, payload: Vec<u8>) -> (u64, Bytes) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let payload = Bytes::from(payload);
        let mut buffer = self.buffer.lock();
        if buffer.len() == REPLAY_BUFFER {
            buffer.pop_front();
        }
        buffer.push_back((seq, payload.clone()));
        (seq, payload)
    }
}

/// Answers `[id, b"", start_seq]` with `[id, b"", seq, payload]` for every kept batch from
/// `start_seq` on, then the end marker `[id, b"", -1, b""]`.
async fn serve_replays(mut router: RouterSocket, buffer: Buffer) {
    while let Ok(request) = router.recv().await {
        let frames = request.into_vec();
        let (Some(peer), Some(start)) = (frames.first(), frames.last()) else {
            continue;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            continue;
        };
        let start = u64::from_be_bytes(start);
        let batches: Vec<(u64, Bytes)> = buffer
            .lock()
            .iter()
            .filter(|(seq, _)| *seq >= start)
            .cloned()
            .collect();
        let end = (u64::MAX, Bytes::new());
        for (seq, payload) in batches.into_iter().chain(std::iter::once(end)) {
            let answer = ZmqMessage::try_from(vec![
                peer.clone(),
                Bytes::new(),
                Bytes::copy_from_slice(&seq.to_be_bytes()),
                payload,
            ]);
            let Ok(answer) = answer else { break };
            if router.send(answer).await.is_err() {
                break;
            }
        }
    }
}

/// Encodes a batch in vLLM's positional layout: `[ts, events, data_parallel_rank]`, events as
/// `["BlockStored", block_hashes, parent, token_ids, block_size, lora_id, medium, lora_name]`,
/// `["BlockRemoved", block_hashes, medium]` and `["AllBlocksCleared"]`.
pub fn encode_batch(batch: &EngineEventBatch) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + batch.events.len() * 128);
    // Writing into a Vec cannot fail.
    let _ = write_batch(&mut out, batch);
    out
}

/// A msgpack write into a `Vec` (which cannot fail; the type only carries `?`).
struct EncodeError;

impl From<std::io::Error> for EncodeError {
    fn from(_: std::io::Error) -> Self {
        EncodeError
    }
}

impl From<rmp::encode::ValueWriteError> for EncodeError {
    fn from(_: rmp::encode::ValueWriteError) -> Self {
        EncodeError
    }
}

fn write_batch(out: &mut Vec<u8>, batch: &EngineEventBatch) -> Result<(), EncodeError> {
    use rmp::encode::*;
    write_array_len(out, 3)?;
    write_f64(out, batch.ts)?;
    write_array_len(out, batch.events.len() as u32)?;
    for event in &batch.events {
        match event {
            EngineEvent::BlockStored(stored) => {
                write_array_len(out, 8)?;
                write_str(out, "BlockStored")?;
                write_hashes(out, &stored.block_hashes)?;
                match stored.parent_block_hash {
                    Some(parent) => write_uint(out, parent).map(drop)?,
                    None => write_nil(out)?,
                }
                write_array_len(out, stored.token_ids.len() as u32)?;
                for token in &stored.token_ids {
                    write_uint(out, u64::from(*token))?;
                }
                write_uint(out, stored.block_size as u64)?;
                write_optional_uint(out, stored.lora_id)?;
                write_optional_str(out, stored.medium.as_deref())?;
                write_optional_str(out, stored.lora_name.as_deref())?;
            }
            EngineEvent::BlockRemoved(removed) => {
                write_array_len(out, 3)?;
                write_str(out, "BlockRemoved")?;
                write_hashes(out, &removed.block_hashes)?;
                write_optional_str(out, removed.medium.as_deref())?;
            }
            EngineEvent::AllBlocksCleared => {
                write_array_len(out, 1)?;
                write_str(out, "AllBlocksCleared")?;
            }
            EngineEvent::Ignored => {
                write_array_len(out, 1)?;
                write_str(out, "Ignored")?;
            }
        }
    }
    match batch.data_parallel_rank {
        Some(rank) => Ok(write_uint(out, u64::from(rank)).map(drop)?),
        None => Ok(write_nil(out)?),
    }
}

fn write_hashes(out: &mut Vec<u8>, hashes: &[u64]) -> Result<(), EncodeError> {
    rmp::encode::write_array_len(out, hashes.len() as u32)?;
    for hash in hashes {
        rmp::encode::write_uint(out, *hash)?;
    }
    Ok(())
}

fn write_optional_uint(out: &mut Vec<u8>, value: Option<u64>) -> Result<(), EncodeError> {
    match value {
        Some(value) => Ok(rmp::encode::write_uint(out, value).map(drop)?),
        None => Ok(rmp::encode::write_nil(out)?),
    }
}

fn write_optional_str(out: &mut Vec<u8>, value: Option<&str>) -> Result<(), EncodeError> {
    match value {
        Some(value) => Ok(rmp::encode::write_str(out, value)?),
        None => Ok(rmp::encode::write_nil(out)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_events::engine_event::{BlockRemoved, BlockStored};
    use crate::engine_events::msgpack_batch::decode_event_batch;

    #[test]
    fn encoded_batches_decode_to_themselves() {
        let batch = EngineEventBatch {
            ts: 12.5,
            events: vec![
                EngineEvent::BlockStored(BlockStored {
                    block_hashes: vec![1, u64::MAX],
                    parent_block_hash: Some(7),
                    token_ids: (0..32).collect(),
                    block_size: 16,
                    lora_id: Some(2),
                    medium: Some("GPU".to_owned()),
                    lora_name: Some("adapter".to_owned()),
                    ..BlockStored::default()
                }),
                EngineEvent::BlockRemoved(BlockRemoved {
                    block_hashes: vec![1],
                    ..BlockRemoved::default()
                }),
                EngineEvent::AllBlocksCleared,
            ],
            data_parallel_rank: Some(3),
        };
        assert_eq!(decode_event_batch(&encode_batch(&batch)), Ok(batch));
    }
}
