//! The configuration file's `nats` mapping: where `kv-router serve` reads the engines' KV
//! events (NATS JetStream, upstream's event plane) and syncs its replicas. Flags of the same
//! name (`--nats`, `--nats-consumer`, …) take precedence over it.
//!
//! ```yaml
//! nats:
//!   url: nats://127.0.0.1:4222   # required
//!   namespace: dynamo            # the Dynamo namespace whose workers' events are read
//!   stream: DYNAMO_KV_EVENTS     # the JetStream stream holding them
//!   consumer: router-a           # this replica's durable consumer (distinct per replica)
//!   sync_component: backend      # scope of the replicas' booking sync
//!   sync_endpoint: generate
//! ```
//!
//! Only the shape and the names are checked here; connecting is the service's business.

use super::error::{ConfigError, ConfigProblem};
use super::located::Located;
use serde::Deserialize;

/// The `nats` mapping, as parsed.
#[derive(Clone, Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a `nats` mapping with `url` and optional `namespace`, `stream`, `consumer`, `sync_component`, `sync_endpoint`"
)]
pub struct NatsSection {
    /// The server, `nats://host:port`.
    pub url: Located<String>,
    /// The Dynamo namespace.
    #[serde(default)]
    pub namespace: Option<Located<String>>,
    /// The JetStream stream.
    #[serde(default)]
    pub stream: Option<Located<String>>,
    /// The durable consumer.
    #[serde(default)]
    pub consumer: Option<Located<String>>,
    /// The component scoping the booking sync.
    #[serde(default)]
    pub sync_component: Option<Located<String>>,
    /// The endpoint scoping the booking sync.
    #[serde(default)]
    pub sync_endpoint: Option<Located<String>>,
}

/// The `nats` mapping, checked: absent keys are `None` (the service's defaults apply).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsSettings {
    /// The server, `nats://host:port`.
    pub url: String,
    /// The Dynamo namespace.
    pub namespace: Option<String>,
    /// The JetStream stream.
    pub stream: Option<String>,
    /// The durable consumer.
    pub consumer: Option<String>,
    /// The component scoping the booking sync.
    pub sync_component: Option<String>,
    /// The endpoint scoping the booking sync.
    pub sync_endpoint: Option<String>,
}

/// What is wrong with `url` as a NATS server address, if anything.
pub fn nats_url_problem(url: &str) -> Option<&'static str> {
    let Some(address) = url.strip_prefix("nats://") else {
        return Some("expected nats://host:port");
    };
    let Some((host, port)) = address.rsplit_once(':') else {
        return Some("expected nats://host:port");
    };
    if host.is_empty() {
        return Some("the host is empty");
    }
    if port.parse::<u16>().is_err() {
        return Some("the port must be a number from 0 to 65535");
    }
    None
}

/// What is wrong with `name` as a NATS stream, consumer, namespace or token name, if anything.
pub fn nats_name_problem(name: &str) -> Option<&'static str> {
    let bad = name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'));
    bad.then_some("it must be non-empty, without spaces, `.`, `*`, `>`, `/` or `\\`")
}

impl NatsSection {
    /// Checks the URL and every name; the first problem, at its position, is the error.
    pub fn check(&self, file: &str) -> Result<NatsSettings, ConfigError> {
        let fail = |key: &'static str, value: &Located<String>, reason: &str| {
            ConfigError::new(
                file,
                value.position,
                None,
                ConfigProblem::InvalidNats {
                    key,
                    value: value.value.clone(),
                    reason: reason.to_owned(),
                },
            )
        };
        if let Some(reason) = nats_url_problem(&self.url.value) {
            return Err(fail("url", &self.url, reason));
        }
        let names = [
            ("namespace", &self.namespace),
            ("stream", &self.stream),
            ("consumer", &self.consumer),
            ("sync_component", &self.sync_component),
            ("sync_endpoint", &self.sync_endpoint),
        ];
        for (key, value) in names {
            if let Some(value) = value
                && let Some(reason) = nats_name_problem(&value.value)
            {
                return Err(fail(key, value, reason));
            }
        }
        let plain = |value: &Option<Located<String>>| value.as_ref().map(|v| v.value.clone());
        Ok(NatsSettings {
            url: self.url.value.clone(),
            namespace: plain(&self.namespace),
            stream: plain(&self.stream),
            consumer: plain(&self.consumer),
            sync_component: plain(&self.sync_component),
            sync_endpoint: plain(&self.sync_endpoint),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_names_are_checked() {
        assert_eq!(nats_url_problem("nats://127.0.0.1:4222"), None);
        for bad in [
            "127.0.0.1:4222",
            "nats://:4222",
            "nats://h:x",
            "tcp://h:1",
            "nats://h",
        ] {
            assert!(nats_url_problem(bad).is_some(), "{bad}");
        }
        assert_eq!(nats_name_problem("router-a"), None);
        for bad in ["", "a.b", "a b", "a*", "a>", "a/b"] {
            assert!(nats_name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
