//! The `--nats` flags of `kv-router serve` (or the configuration file's `nats` mapping, which
//! the flags override): read the engines' KV events from NATS JetStream (upstream's event
//! plane) instead of subscribing to each engine's ZMQ publisher, and, unless
//! `--replica-sync-port` picks the ZMQ mesh, sync the replicas' bookings over NATS too.

use crate::command_error::CommandError;
use clap::Args;
use dynamo_kv_router::config::NatsSettings;
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
    /// durable JetStream consumer, in upstream's subjects and envelopes; without it (and
    /// without a `nats` mapping in the configuration), ZMQ.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// The Dynamo namespace whose workers' events are read [default: dynamo].
    #[arg(long, value_name = "NS")]
    pub nats_namespace: Option<String>,
    /// The JetStream stream holding the events, created if absent [default: DYNAMO_KV_EVENTS].
    #[arg(long, value_name = "NAME")]
    pub nats_stream: Option<String>,
    /// This replica's durable consumer (distinct per replica; the same across its restarts
    /// to resume from a snapshot); a random name when absent.
    #[arg(long, value_name = "NAME")]
    pub nats_consumer: Option<String>,
    /// The component whose endpoint scopes the replicas' booking sync over NATS
    /// (`namespace.{ns}.component.{c}.endpoint.{e}.active_sequences_events`) [default: backend].
    #[arg(long, value_name = "NAME")]
    pub nats_sync_component: Option<String>,
    /// The endpoint that scopes the replicas' booking sync over NATS [default: generate].
    #[arg(long, value_name = "NAME")]
    pub nats_sync_endpoint: Option<String>,
}

/// The NATS settings in effect: each flag, else the file's key, else the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveNats {
    /// The server.
    pub url: String,
    /// The Dynamo namespace.
    pub namespace: String,
    /// The JetStream stream.
    pub stream: String,
    /// The durable consumer, if named.
    pub consumer: Option<String>,
    /// The booking sync's component.
    pub sync_component: String,
    /// The booking sync's endpoint.
    pub sync_endpoint: String,
}

fn serve_error(message: String) -> CommandError {
    CommandError::Serve { message }
}

impl NatsArgs {
    /// The settings in effect, given the file's `nats` mapping; `None` when neither the flags
    /// nor the file name a server. A `--nats-…` flag without a server is an error.
    pub fn effective(
        &self,
        file: Option<&NatsSettings>,
    ) -> Result<Option<EffectiveNats>, CommandError> {
        let Some(url) = self.nats.clone().or_else(|| file.map(|f| f.url.clone())) else {
            let stray = [
                ("--nats-namespace", self.nats_namespace.is_some()),
                ("--nats-stream", self.nats_stream.is_some()),
                ("--nats-consumer", self.nats_consumer.is_some()),
                ("--nats-sync-component", self.nats_sync_component.is_some()),
                ("--nats-sync-endpoint", self.nats_sync_endpoint.is_some()),
            ];
            if let Some((flag, _)) = stray.iter().find(|(_, given)| *given) {
                return Err(serve_error(format!(
                    "{flag} needs a NATS server: give --nats nats://host:port or a `nats: {{url: …}}` mapping in the configuration"
                )));
            }
            return Ok(None);
        };
        let pick = |flag: &Option<String>, key: Option<&String>, default: &str| {
            flag.clone()
                .or_else(|| key.cloned())
                .unwrap_or_else(|| default.to_owned())
        };
        Ok(Some(EffectiveNats {
            url,
            namespace: pick(
                &self.nats_namespace,
                file.and_then(|f| f.namespace.as_ref()),
                DEFAULT_NAMESPACE,
            ),
            stream: pick(
                &self.nats_stream,
                file.and_then(|f| f.stream.as_ref()),
                DEFAULT_STREAM,
            ),
            consumer: self
                .nats_consumer
                .clone()
                .or_else(|| file.and_then(|f| f.consumer.clone())),
            sync_component: pick(
                &self.nats_sync_component,
                file.and_then(|f| f.sync_component.as_ref()),
                DEFAULT_COMPONENT,
            ),
            sync_endpoint: pick(
                &self.nats_sync_endpoint,
                file.and_then(|f| f.sync_endpoint.as_ref()),
                DEFAULT_ENDPOINT,
            ),
        }))
    }
}

impl EffectiveNats {
    /// The NATS ingress, connected but not reading yet (the replica start begins it after
    /// any snapshot is restored); its consumer reads and applies the events on `ingest` (the
    /// KV ingest thread's runtime). With `checkpoint_every` (a `--snapshot` is kept)
    /// acknowledgements follow the snapshot writes, and the server waits long enough for them
    /// before it redelivers.
    pub async fn connect(
        &self,
        checkpoint_every: Option<std::time::Duration>,
        ingest: tokio::runtime::Handle,
        out: &mut dyn Write,
    ) -> Result<Arc<NatsIngress>, CommandError> {
        if checkpoint_every.is_some() && self.consumer.is_none() {
            return Err(serve_error(
                "--snapshot with NATS needs --nats-consumer NAME (or `nats: {consumer: NAME}`), a \
                 name of this replica's own that stays the same across restarts: the snapshot \
                 records how far that consumer read, and a restart resumes there"
                    .to_owned(),
            ));
        }
        let consumer = self.consumer.clone().unwrap_or_else(|| {
            use std::hash::{BuildHasher as _, Hasher as _};
            let random = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            format!("kv-router-{random:016x}")
        });
        let mut options = NatsOptions::new(self.url.clone(), consumer);
        options.namespace = self.namespace.clone();
        options.stream = self.stream.clone();
        if let Some(every) = checkpoint_every {
            options.checkpointed = true;
            options.ack_wait = options.ack_wait.max(every * 3);
        }
        let ingress = NatsIngress::connect_on(options.clone(), ingest)
            .await
            .map_err(|error| serve_error(error.to_string()))?;
        writeln!(
            out,
            "KV events from NATS {}: stream {}, consumer {}, subjects {}",
            self.url,
            options.stream,
            options.consumer,
            kv_router_service::nats::subjects::namespace_filter(
                &options.namespace,
                kv_router_service::nats::subjects::KV_EVENT_TOPIC
            )
        )?;
        Ok(ingress)
    }

    /// The booking sync over NATS, attached to `service` (not ready until joined), unless
    /// `zmq_mesh` (`--replica-sync-port`) picks the ZMQ mesh.
    pub async fn start_replica_sync(
        &self,
        service: &Arc<SelectionService>,
        zmq_mesh: bool,
        out: &mut dyn Write,
    ) -> Result<Option<Arc<NatsReplicaSync>>, CommandError> {
        if zmq_mesh {
            return Ok(None);
        }
        let mut options = NatsReplicaOptions::new(self.url.clone());
        options.namespace = self.namespace.clone();
        options.component = self.sync_component.clone();
        options.endpoint = self.sync_endpoint.clone();
        let sync = NatsReplicaSync::start(service, &options)
            .await
            .map_err(|error| serve_error(error.to_string()))?;
        writeln!(
            out,
            "replica {:016x} syncing bookings over NATS on {}",
            sync.replica_id(),
            sync.subject()
        )?;
        Ok(Some(sync))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(nats: Option<&str>, consumer: Option<&str>, stream: Option<&str>) -> NatsArgs {
        NatsArgs {
            nats: nats.map(str::to_owned),
            nats_namespace: None,
            nats_stream: stream.map(str::to_owned),
            nats_consumer: consumer.map(str::to_owned),
            nats_sync_component: None,
            nats_sync_endpoint: None,
        }
    }

    #[test]
    fn flags_override_the_file_which_overrides_the_defaults() {
        let file = NatsSettings {
            url: "nats://file:4222".to_owned(),
            consumer: Some("from-file".to_owned()),
            stream: Some("FILE_STREAM".to_owned()),
            ..NatsSettings::default()
        };
        let only_file = args(None, None, None)
            .effective(Some(&file))
            .unwrap()
            .unwrap();
        assert_eq!(only_file.url, "nats://file:4222");
        assert_eq!(only_file.consumer.as_deref(), Some("from-file"));
        assert_eq!(only_file.stream, "FILE_STREAM");
        assert_eq!(only_file.namespace, DEFAULT_NAMESPACE);
        let flags = args(Some("nats://flag:1"), Some("from-flag"), None)
            .effective(Some(&file))
            .unwrap()
            .unwrap();
        assert_eq!(flags.url, "nats://flag:1");
        assert_eq!(flags.consumer.as_deref(), Some("from-flag"));
        assert_eq!(flags.stream, "FILE_STREAM");
        assert_eq!(args(None, None, None).effective(None).unwrap(), None);
    }

    #[test]
    fn a_nats_flag_without_a_server_is_refused() {
        let error = args(None, Some("r"), None).effective(None).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("--nats-consumer needs a NATS server"),
            "{error}"
        );
    }
}
