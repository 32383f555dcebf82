//! The service's state as one value (the worker records and the index as upstream
//! `RouterEvent`s, the shape of `GET /workers` and `GET /dump`) and its snapshot file.
//!
//! File format: the 8-byte magic `KVRSNAP2`, the payload length (u64 little-endian), the
//! payload's XXH3-64 checksum (u64 little-endian), then the payload (JSON). A file whose
//! magic, length or checksum does not match is rejected whole, never applied in part. Files
//! are written to `PATH.tmp`, synced, then renamed over `PATH`, so a crash mid-write leaves
//! the previous snapshot.
//!
//! Format 2 holds the index in upstream's dump form (local hashes chained through parents).
//! Format 1 (`KVRSNAP1`) held one root event per block with its sequence hash as
//! `tokens_hash`: it lacks the blocks' local hashes, so an index restored from it could not
//! dump itself in upstream's form, and its files are refused (the replica starts cold and the
//! engines' replays refill it).

use crate::selection::selection_service::SelectionService;
use crate::worker_record::{PartitionKey, WorkerRequest};
use dynamo_kv_router::identity::WorkerId;
use dynamo_kv_router::kv::RouterEvent;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"KVRSNAP2";
/// The magic of format 1, whose files are refused.
const MAGIC_V1: &[u8; 8] = b"KVRSNAP1";
const HEADER: usize = 24;

/// One partition of a dump: upstream's `{block_size, events}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DumpEntry {
    /// Tokens per block.
    pub block_size: u32,
    /// The index as upstream's stored events (see `Router::export_events`).
    pub events: Vec<RouterEvent>,
}

/// What a replica needs to serve like another: its workers and its index.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RouterState {
    /// The worker records (`GET /workers`).
    pub workers: Vec<serde_json::Value>,
    /// The index per partition, keyed `"model:group"` (`GET /dump`).
    pub dump: BTreeMap<String, DumpEntry>,
    /// Where the event plane stood when the state was captured, for a router that reads a
    /// durable stream (NATS JetStream): absent otherwise, and in files written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_plane: Option<EventPlanePosition>,
}

/// The point of a durable event stream up to which a captured state holds every event (it
/// ends before any event still held for a worker not registered yet). A router restored from
/// the state continues the stream after `stream_seq`, with each worker's event numbering
/// continued after its `last_event_id`, so an event delivered again that the state already
/// holds is a duplicate, not a gap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPlanePosition {
    /// The stream (`DYNAMO_KV_EVENTS` by default).
    pub stream: String,
    /// The durable consumer that read it.
    pub consumer: String,
    /// The last stream sequence whose events the state holds.
    pub stream_seq: u64,
    /// The last envelope sequence applied per publisher (upstream's envelope dedupe).
    pub publishers: Vec<PublisherPosition>,
    /// The last event id applied per worker rank.
    pub cursors: Vec<RankPosition>,
}

/// The last envelope a publisher's stream delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherPosition {
    /// The envelope's `publisher_id`.
    pub publisher_id: u64,
    /// Its last envelope `sequence` applied.
    pub sequence: u64,
}

/// The last event id a worker rank's index applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPosition {
    /// The worker.
    pub worker_id: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
    /// The last event id applied.
    pub last_event_id: u64,
}

impl RankPosition {
    /// Every worker rank's last applied event id in `service`'s indexes, sorted.
    pub fn of_service(service: &SelectionService) -> Vec<RankPosition> {
        let mut cursors: Vec<RankPosition> = service
            .partitions()
            .iter()
            .flat_map(|partition| {
                partition
                    .router
                    .workers()
                    .into_iter()
                    .filter_map(|(info, _)| {
                        let last_event_id = partition
                            .router
                            .worker_index_state(info.id)?
                            .last_event_id?;
                        Some(RankPosition {
                            worker_id: info.id.worker_id,
                            dp_rank: info.id.dp_rank,
                            last_event_id,
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        cursors.sort_unstable_by_key(|cursor| (cursor.worker_id, cursor.dp_rank));
        cursors
    }
}

/// What applying a state did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Workers registered.
    pub workers: usize,
    /// (worker, block) memberships restored into the index.
    pub blocks: usize,
    /// Worker ranks whose event numbering continues where the state's event-plane position
    /// says (0 without one).
    pub resumed_ranks: usize,
}

/// Continues each rank's event numbering after its recorded id; returns how many ranks of
/// registered workers it did.
fn resume_numbering(service: &SelectionService, cursors: &[RankPosition]) -> usize {
    let partitions = service.partitions();
    cursors
        .iter()
        .filter(|cursor| {
            let worker = WorkerId::new(cursor.worker_id, cursor.dp_rank);
            partitions.iter().any(|partition| {
                partition
                    .router
                    .resume_event_numbering(worker, cursor.last_event_id)
            })
        })
        .count()
}

/// Why a state or snapshot could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file could not be read or written.
    #[error("snapshot {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file is not a whole snapshot.
    #[error("snapshot {path} is corrupt or truncated ({reason}); ignoring it")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What did not match.
        reason: String,
    },
    /// The file was written by an earlier version, in a format this one does not read.
    #[error(
        "snapshot {path} was written by an earlier version of kv-router (format 1: blocks without their local hashes, which upstream's dump form needs); ignoring it and starting cold: the engines' replays refill the index, and the next snapshot is written in the current format"
    )]
    OldFormat {
        /// The file.
        path: PathBuf,
    },
    /// A partition's index could not be dumped.
    #[error("cannot capture partition {partition}: {source}")]
    Dump {
        /// The partition (`"model:group"`).
        partition: String,
        /// Why.
        source: dynamo_kv_router::kv::DumpError,
    },
    /// The state is not what `GET /workers` and `GET /dump` answer.
    #[error("malformed router state: {0}")]
    Malformed(String),
}

impl RouterState {
    /// `service`'s state now. Fails if a partition's index cannot be dumped.
    pub fn capture(service: &SelectionService) -> Result<Self, SnapshotError> {
        let workers = service
            .list_workers(None, None)
            .into_iter()
            .filter_map(|record| serde_json::to_value(record).ok())
            .collect();
        let dump = service
            .partitions()
            .into_iter()
            .map(|partition| {
                let key = partition.key.dump_key();
                let events = partition
                    .dump_events()
                    .map_err(|error| SnapshotError::Dump {
                        partition: key.clone(),
                        source: error,
                    })?;
                Ok((
                    key,
                    DumpEntry {
                        block_size: partition.block_size,
                        events,
                    },
                ))
            })
            .collect::<Result<_, SnapshotError>>()?;
        Ok(Self {
            workers,
            dump,
            event_plane: None,
        })
    }

    /// Reads the bodies of the answers to `GET /workers` and `GET /dump`.
    pub fn from_answers(workers: &[u8], dump: &[u8]) -> Result<Self, SnapshotError> {
        let workers = serde_json::from_slice(workers)
            .map_err(|error| SnapshotError::Malformed(format!("GET /workers: {error}")))?;
        let dump = serde_json::from_slice(dump)
            .map_err(|error| SnapshotError::Malformed(format!("GET /dump: {error}")))?;
        Ok(Self {
            workers,
            dump,
            event_plane: None,
        })
    }

    /// Registers the workers (which starts their event listeners) and restores the index
    /// into their partitions, outside the engines' event numbering: the engines' own events,
    /// replayed from where their numbering allows, then follow. Every worker record is
    /// checked before anything is applied.
    pub fn apply(self, service: &SelectionService) -> Result<Restored, SnapshotError> {
        let requests: Vec<WorkerRequest> = self
            .workers
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()
            .map_err(|error| SnapshotError::Malformed(format!("a worker record: {error}")))?;
        let mut keys = Vec::new();
        for key in self.dump.keys() {
            let (model_name, routing_group) = key.split_once(':').ok_or_else(|| {
                SnapshotError::Malformed(format!("dump key `{key}` is not `model:group`"))
            })?;
            keys.push(PartitionKey {
                model_name: model_name.to_owned(),
                routing_group: routing_group.to_owned(),
            });
        }
        let mut restored = Restored::default();
        for request in requests {
            if let Err(error) = service.upsert_worker(request) {
                tracing::warn!(%error, "a worker of the restored state was refused");
                continue;
            }
            restored.workers += 1;
        }
        for (key, entry) in keys.into_iter().zip(self.dump.into_values()) {
            match service.partition(&key) {
                Some(partition) if partition.block_size == entry.block_size => {
                    restored.blocks += partition.router.restore_events(&entry.events);
                }
                _ => {
                    tracing::warn!(partition = %key, "no partition with that block size; its dump is skipped")
                }
            }
        }
        if let Some(position) = &self.event_plane {
            restored.resumed_ranks = resume_numbering(service, &position.cursors);
        }
        Ok(restored)
    }

    /// The state as snapshot-file bytes.
    pub fn encode(&self) -> Vec<u8> {
        let payload = serde_json::to_vec(self).expect("a router state always serializes");
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Reads snapshot-file bytes; anything but a whole, matching file is an error.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Self, SnapshotError> {
        let corrupt = |reason: String| SnapshotError::Corrupt {
            path: path.to_owned(),
            reason,
        };
        if bytes.len() >= 8 && &bytes[..8] == MAGIC_V1 {
            return Err(SnapshotError::OldFormat {
                path: path.to_owned(),
            });
        }
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(corrupt("no KVRSNAP2 header".to_owned()));
        }
        let length = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let checksum = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
        let payload = &bytes[HEADER..];
        if payload.len() as u64 != length {
            return Err(corrupt(format!(
                "{} payload bytes, the header says {length}",
                payload.len()
            )));
        }
        if xxhash_rust::xxh3::xxh3_64(payload) != checksum {
            return Err(corrupt("checksum mismatch".to_owned()));
        }
        serde_json::from_slice(payload).map_err(|error| corrupt(error.to_string()))
    }

    /// Writes the snapshot atomically: `PATH.tmp`, synced, renamed over `path`.
    pub fn write(&self, path: &Path) -> Result<(), SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: path.to_owned(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp).map_err(io)?;
            file.write_all(&self.encode()).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// [`RouterState::write`] on a blocking thread, so the async runtime keeps serving.
    pub async fn write_off_runtime(self, path: &Path) -> Result<(), SnapshotError> {
        let owned = path.to_owned();
        tokio::task::spawn_blocking(move || self.write(&owned))
            .await
            .map_err(|error| SnapshotError::Malformed(format!("the writer stopped: {error}")))?
    }

    /// Reads the snapshot at `path`; `Ok(None)` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>, SnapshotError> {
        match std::fs::read(path) {
            Ok(bytes) => Self::decode(path, &bytes).map(Some),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SnapshotError::Io {
                path: path.to_owned(),
                source,
            }),
        }
    }

    /// Blocks the state's dump events store (a worker's block is written once, or again on a
    /// path written from the root).
    pub fn blocks(&self) -> usize {
        self.dump
            .values()
            .flat_map(|entry| &entry.events)
            .map(RouterEvent::block_count)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> RouterState {
        RouterState {
            event_plane: None,
            workers: vec![serde_json::json!({"worker_id": 1})],
            dump: BTreeMap::from([(
                "m:default".to_owned(),
                DumpEntry {
                    block_size: 16,
                    events: Vec::new(),
                },
            )]),
        }
    }

    #[test]
    fn bytes_round_trip_and_any_damage_is_refused() {
        let path = Path::new("snap");
        let bytes = state().encode();
        let back = RouterState::decode(path, &bytes).unwrap();
        assert_eq!(back.workers, state().workers);
        for cut in [0, 10, HEADER, bytes.len() - 1] {
            let error = RouterState::decode(path, &bytes[..cut]).unwrap_err();
            assert!(
                error.to_string().contains("corrupt or truncated"),
                "{error}"
            );
        }
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(
            RouterState::decode(path, &flipped)
                .unwrap_err()
                .to_string()
                .contains("checksum mismatch")
        );
    }

    #[test]
    fn a_format_1_file_is_refused_with_a_clear_message() {
        let mut bytes = state().encode();
        bytes[..8].copy_from_slice(MAGIC_V1);
        let error = RouterState::decode(Path::new("snap"), &bytes).unwrap_err();
        assert!(matches!(error, SnapshotError::OldFormat { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains("earlier version"), "{message}");
        assert!(message.contains("starting cold"), "{message}");
    }
}
