//! Read-only routes: `/ready`, `/loads`, `/overlap_scores` and `/metrics`.

use crate::error::ServiceError;
use crate::selection::selection_request::OverlapScoresRequest;
use crate::selection::selection_response::{
    ModelLoadResponse, OverlapScoresResponse, PotentialLoad, ReadyResponse,
    SharedCacheOverlapScore, WorkerOverlapScore,
};
use crate::selection::selection_service::SelectionService;
use crate::worker_record::{PartitionKey, WorkerLifecycle};
use dynamo_kv_router::metrics::escape_label;
use dynamo_kv_router::router::WorkerId;

impl SelectionService {
    /// `GET /ready`: ready once some worker is schedulable.
    pub fn ready(&self) -> ReadyResponse {
        let workers = self.list_workers(None, None);
        let schedulable_workers = workers
            .iter()
            .filter(|record| record.lifecycle == WorkerLifecycle::Schedulable)
            .count();
        let replica_ready = self.replica.get().is_none_or(|replica| replica.ready());
        ReadyResponse {
            ready: schedulable_workers > 0 && replica_ready,
            schedulable_workers,
            workers,
        }
    }

    /// `GET /loads`: the reserved load of every worker rank, per partition.
    pub fn loads(
        &self,
        model_name: Option<&str>,
        routing_group: Option<&str>,
    ) -> Vec<ModelLoadResponse> {
        self.partitions()
            .iter()
            .filter(|partition| model_name.is_none_or(|name| partition.key.model_name == name))
            .filter(|partition| {
                routing_group.is_none_or(|group| partition.key.routing_group == group)
            })
            .map(|partition| ModelLoadResponse {
                model_name: partition.key.model_name.clone(),
                routing_group: partition.key.routing_group.clone(),
                loads: partition
                    .router
                    .workers()
                    .into_iter()
                    .map(|(info, load)| PotentialLoad {
                        worker_id: info.id.worker_id,
                        dp_rank: info.id.dp_rank,
                        potential_prefill_tokens: load.active_prefill_tokens as usize,
                        potential_decode_blocks: load.active_blocks as usize,
                        active_requests: load.active_requests as usize,
                    })
                    .collect(),
                pending_count: 0,
                pending_isl_tokens: 0,
            })
            .collect()
    }

    /// `POST /potential_loads`: each registered rank's load of the partition if the prompt
    /// were booked there: its reserved prefill plus the prompt's uncached tokens on that rank,
    /// its active blocks plus the prompt's blocks, its active requests.
    pub fn potential_loads(
        &self,
        mut request: OverlapScoresRequest,
    ) -> Result<Vec<PotentialLoad>, ServiceError> {
        let key = PartitionKey {
            model_name: std::mem::take(&mut request.model_name),
            routing_group: std::mem::take(&mut request.routing_group),
        };
        let partition = self.ready_partition(&key)?;
        let prompt = request
            .take_prompt()
            .normalize(partition.block_size, partition.eagle)?;
        let block_size = partition.block_size as usize;
        Ok(partition
            .router
            .workers()
            .into_iter()
            .map(|(info, load)| {
                let cached = partition
                    .router
                    .cached_prefix(info.id, &prompt.sequence_hashes);
                let uncached = prompt.isl_tokens.saturating_sub(cached * block_size);
                PotentialLoad {
                    worker_id: info.id.worker_id,
                    dp_rank: info.id.dp_rank,
                    potential_prefill_tokens: load.active_prefill_tokens as usize + uncached,
                    potential_decode_blocks: load.active_blocks as usize
                        + prompt.sequence_hashes.len(),
                    active_requests: load.active_requests as usize,
                }
            })
            .collect())
    }

    /// `POST /overlap_scores`: how many leading prompt blocks each schedulable worker rank of
    /// the partition caches.
    pub fn overlap_scores(
        &self,
        mut request: OverlapScoresRequest,
    ) -> Result<OverlapScoresResponse, ServiceError> {
        let prompt_request = request.take_prompt();
        let key = PartitionKey {
            model_name: request.model_name,
            routing_group: request.routing_group,
        };
        let partition = self.ready_partition(&key)?;
        let prompt = prompt_request.normalize(partition.block_size, partition.eagle)?;
        let ranks: Vec<WorkerId> = self
            .catalog
            .read()
            .values()
            .map(|entry| &entry.record)
            .filter(|record| record.lifecycle == WorkerLifecycle::Schedulable && record.is_in(&key))
            .flat_map(|record| {
                record
                    .dp_ranks()
                    .map(|rank| WorkerId::new(record.worker_id, rank))
            })
            .collect();
        let workers = ranks
            .into_iter()
            .map(|worker| {
                let blocks = partition
                    .router
                    .cached_prefix(worker, &prompt.sequence_hashes);
                WorkerOverlapScore {
                    worker_id: worker.worker_id,
                    dp_rank: worker.dp_rank,
                    device_blocks: blocks,
                    host_pinned_blocks: blocks,
                    disk_blocks: blocks,
                    host_pinned_extension_blocks: 0,
                    disk_extension_blocks: 0,
                    shared_beyond_device_blocks: None,
                }
            })
            .collect();
        Ok(OverlapScoresResponse {
            block_size: partition.block_size,
            num_blocks: prompt.sequence_hashes.len(),
            workers,
            shared_cache: SharedCacheOverlapScore::default(),
        })
    }

    /// `GET /dump`: per partition (`"model:group"`), its block size and its index as upstream
    /// `RouterEvent`s in upstream's dump form (see `Router::export_events`: per worker rank,
    /// `stored` events of local hashes chained through the worker's engine hashes, parents
    /// first), which this project's index and upstream's radix trees rebuild.
    pub fn dump(&self) -> Result<serde_json::Value, ServiceError> {
        let mut out = serde_json::Map::new();
        for partition in self.partitions() {
            let events = partition.dump_events().map_err(|error| {
                ServiceError::Internal(format!("cannot dump partition {}: {error}", partition.key))
            })?;
            out.insert(
                partition.key.dump_key(),
                serde_json::json!({
                    "block_size": partition.block_size,
                    "events": events,
                }),
            );
        }
        Ok(serde_json::Value::Object(out))
    }

    /// `GET /metrics`: every partition router's Prometheus text, each sample labelled with
    /// its `model_name` and `routing_group`, under one `HELP`/`TYPE` header per metric.
    pub fn prometheus_text(&self) -> String {
        let mut headers = std::collections::BTreeSet::new();
        let mut out = String::new();
        for partition in self.partitions() {
            let labels = format!(
                "model_name=\"{}\",routing_group=\"{}\"",
                escape_label(&partition.key.model_name),
                escape_label(&partition.key.routing_group)
            );
            for line in partition.router.prometheus_text().lines() {
                if line.starts_with('#') {
                    if headers.insert(line.to_owned()) {
                        out.push_str(line);
                        out.push('\n');
                    }
                    continue;
                }
                out.push_str(&label_sample(line, &labels));
                out.push('\n');
            }
        }
        out.push_str(&self.ingress.prometheus_text());
        if let Some(replica) = self.replica.get() {
            out.push_str(&replica.prometheus_text());
        }
        for source in self.metric_sources.read().iter() {
            out.push_str(&source.prometheus_text());
        }
        out
    }
}

/// Adds `labels` to one Prometheus sample line.
fn label_sample(line: &str, labels: &str) -> String {
    match (line.find('{'), line.find(' ')) {
        (Some(brace), Some(space)) if brace < space => {
            let (name, rest) = line.split_at(brace);
            let rest = &rest[1..];
            if rest.starts_with('}') {
                format!("{name}{{{labels}{rest}")
            } else {
                format!("{name}{{{labels},{rest}")
            }
        }
        (_, Some(space)) => {
            let (name, rest) = line.split_at(space);
            format!("{name}{{{labels}}}{rest}")
        }
        _ => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::label_sample;

    #[test]
    fn labels_are_added_to_plain_and_labelled_samples() {
        assert_eq!(label_sample("a_total 3", "m=\"x\""), "a_total{m=\"x\"} 3");
        assert_eq!(
            label_sample("a_total{role=\"p\"} 3", "m=\"x\""),
            "a_total{m=\"x\",role=\"p\"} 3"
        );
        assert_eq!(label_sample("a_total{} 3", "m=\"x\""), "a_total{m=\"x\"} 3");
    }
}
