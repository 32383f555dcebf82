//! The `--nats` flags of `kv-router serve`: read the engines' KV events from NATS JetStream
//! (upstream's event plane) instead of subscribing to each engine's ZMQ publisher, and, unless
//! `--replica-sync-port` picks the ZMQ mesh, sync the replicas' bookings over NATS too.

use crate::command_error::CommandError;
use clap::Args;
use kv_router_service::SelectionService;
use kv_router_service::nats::replica_sync::{DEFAULT_COMPONENT, DEFAULT_ENDPOINT};
use kv_router_service::nats::{
    DEFAULT_NAMESPACE, DEFAULT_STREAM, NatsIngress, NatsOptions, NatsReplicaOptions,
    NatsReplicaSync,
};
use std::io::Write;
use std::sync::Arc;

/// Where the KV events come from when they come over NATS.
#[derive(Debug, Args)]
pub struct NatsArgs {
    /// Read the engines' KV events from this NATS server (`nats://host:port`) through a
    /// durable JetStream consumer, in upstream's subjects and envelopes; without it, ZMQ.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// The Dynamo namespace whose workers' events are read.
    #[arg(long, value_name = "NS", default_value = DEFAULT_NAMESPACE, requires = "nats")]
    pub nats_namespace: String,
    /// The JetStream stream holding the events (created if absent).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_STREAM, requires = "nats")]
    pub nats_stream: String,
    /// This replica's durable consumer (distinct per replica); a random name when absent.
    #[arg(long, value_name = "NAME", requires = "nats")]
    pub nats_consumer: Option<String>,
    /// The component whose endpoint scopes the replicas' booking sync over NATS
    /// (`namespace.{ns}.component.{c}.endpoint.{e}.active_sequences_events`).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_COMPONENT, requires = "nats")]
    pub nats_sync_component: String,
    /// The endpoint that scopes the replicas' booking sync over NATS.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_ENDPOINT, requires = "nats")]
    pub nats_sync_endpoint: String,
}

impl NatsArgs {
    /// The NATS ingress, started, when `--nats` was given.
    pub async fn start(
        &self,
        out: &mut dyn Write,
    ) -> Result<Option<Arc<NatsIngress>>, CommandError> {
        let Some(url) = &self.nats else {
            return Ok(None);
        };
        let consumer = self.nats_consumer.clone().unwrap_or_else(|| {
            use std::hash::{BuildHasher as _, Hasher as _};
            let random = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            format!("kv-router-{random:016x}")
        });
        let mut options = NatsOptions::new(url.clone(), consumer);
        options.namespace = self.nats_namespace.clone();
        options.stream = self.nats_stream.clone();
        let ingress =
            NatsIngress::start(options.clone())
                .await
                .map_err(|error| CommandError::Serve {
                    message: error.to_string(),
                })?;
        writeln!(
            out,
            "KV events from NATS {url}: stream {}, consumer {}, subjects {}",
            options.stream,
            options.consumer,
            kv_router_service::nats::subjects::namespace_filter(
                &options.namespace,
                kv_router_service::nats::subjects::KV_EVENT_TOPIC
            )
        )?;
        Ok(Some(ingress))
    }
}

impl NatsArgs {
    /// The booking sync over NATS, attached to `service` (not ready until joined), when
    /// `--nats` was given and `zmq_mesh` (`--replica-sync-port`) was not.
    pub async fn start_replica_sync(
        &self,
        service: &Arc<SelectionService>,
        zmq_mesh: bool,
        out: &mut dyn Write,
    ) -> Result<Option<Arc<NatsReplicaSync>>, CommandError> {
        let Some(url) = &self.nats else {
            return Ok(None);
        };
        if zmq_mesh {
            return Ok(None);
        }
        let mut options = NatsReplicaOptions::new(url.clone());
        options.namespace = self.nats_namespace.clone();
        options.component = self.nats_sync_component.clone();
        options.endpoint = self.nats_sync_endpoint.clone();
        let sync = NatsReplicaSync::start(service, &options)
            .await
            .map_err(|error| CommandError::Serve {
                message: error.to_string(),
            })?;
        writeln!(
            out,
            "replica {:016x} syncing bookings over NATS on {}",
            sync.replica_id(),
            sync.subject()
        )?;
        Ok(Some(sync))
    }
}
