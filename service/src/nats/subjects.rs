//! Upstream's subject names (`dynamo-runtime` 1.6.1 `discovery::EventScope::subject`): an
//! endpoint-scoped topic is published on `namespace.{ns}.component.{c}.endpoint.{e}.{topic}`,
//! each segment percent-encoded so that a `.`, `*` or `>` in a name cannot change the subject.

use std::fmt::Write as _;

/// The topic of KV events (upstream `dynamo_kv_router::protocols::KV_EVENT_SUBJECT`).
pub const KV_EVENT_TOPIC: &str = "kv-events";
/// The topic of the router replicas' booking sync (upstream `dynamo-llm`
/// `kv_router::ACTIVE_SEQUENCES_SUBJECT`).
pub const ACTIVE_SEQUENCES_TOPIC: &str = "active_sequences_events";

/// One subject segment as upstream encodes it: ASCII letters, digits, `-` and `_` as they
/// are, every other byte as `%XX`.
pub fn encode_segment(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_') {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

/// The subject an endpoint publishes `topic` on.
pub fn endpoint_subject(namespace: &str, component: &str, endpoint: &str, topic: &str) -> String {
    format!(
        "namespace.{}.component.{}.endpoint.{}.{}",
        encode_segment(namespace),
        encode_segment(component),
        encode_segment(endpoint),
        encode_segment(topic)
    )
}

/// Every endpoint's `topic` in `namespace`.
pub fn namespace_filter(namespace: &str, topic: &str) -> String {
    format!(
        "namespace.{}.component.*.endpoint.*.{}",
        encode_segment(namespace),
        encode_segment(topic)
    )
}

/// Every endpoint's `topic` in every namespace.
pub fn all_namespaces(topic: &str) -> String {
    format!(
        "namespace.*.component.*.endpoint.*.{}",
        encode_segment(topic)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_upstreams() {
        // The case of upstream's `test_event_scope_subject_prefix`.
        assert_eq!(
            endpoint_subject("ns.one", "worker/*", "generate.>", "kv.events/*"),
            "namespace.ns%2Eone.component.worker%2F%2A.endpoint.generate%2E%3E.kv%2Eevents%2F%2A"
        );
        assert_eq!(
            endpoint_subject("dynamo", "backend", "generate", KV_EVENT_TOPIC),
            "namespace.dynamo.component.backend.endpoint.generate.kv-events"
        );
        assert_eq!(
            namespace_filter("dynamo", KV_EVENT_TOPIC),
            "namespace.dynamo.component.*.endpoint.*.kv-events"
        );
    }
}
