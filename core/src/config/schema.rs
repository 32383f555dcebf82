//! The YAML schema of a router configuration, as parsed, with the position of every entry.
//!
//! ```yaml
//! router_mode: kv            # kv | round-robin | random | least-loaded
//! block_size: 16             # tokens per KV block
//! worker_selection:
//!   decode:
//!     type: kvcr
//!     parameters: {shared_cache_multiplier: 0.5}
//!     hints:
//!       - type: kv_fetch
//!         parameters: {min_additional_blocks: 4}
//!     shadow:                # candidates evaluated beside the live policies, off the hot path
//!       - type: dynamo-default-cost-fn
//!         name: default-cost
//!   prefill: dynamo-default-cost-fn
//! ```

pub use super::located::Located;
use super::parameter_tree::ParameterNode;
use super::position::Position;
use crate::identity::Role;
use serde::de::DeserializeOwned;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::marker::PhantomData;

/// A key that, when present, must hold a value (an empty value is an error, not "absent").
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a router configuration: a mapping with `router_mode`, `block_size`, `worker_selection` and optional `nats`"
)]
pub struct RouterConfig {
    /// `kv` (default), `round-robin`, `random` or `least-loaded`.
    #[serde(default, deserialize_with = "present")]
    pub router_mode: Option<Located<String>>,
    /// Tokens per KV block (default 16).
    #[serde(default, deserialize_with = "present")]
    pub block_size: Option<Located<u32>>,
    /// The per-role policies.
    #[serde(default, deserialize_with = "present")]
    pub worker_selection: Option<Located<WorkerSelectionConfig>>,
    /// The event plane over NATS JetStream, for `kv-router serve` (see
    /// [`NatsSection`](super::nats_section::NatsSection)).
    #[serde(default, deserialize_with = "present")]
    pub nats: Option<Located<super::nats_section::NatsSection>>,
}

/// The `worker_selection` mapping: one optional entry per role.
#[derive(Clone, Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping from roles (`aggregated`, `prefill`, `decode`) to worker-selection entries"
)]
pub struct WorkerSelectionConfig {
    /// The `aggregated` role.
    #[serde(default, deserialize_with = "present")]
    pub aggregated: Option<Located<RoleEntry>>,
    /// The `prefill` role.
    #[serde(default, deserialize_with = "present")]
    pub prefill: Option<Located<RoleEntry>>,
    /// The `decode` role.
    #[serde(default, deserialize_with = "present")]
    pub decode: Option<Located<RoleEntry>>,
}

impl WorkerSelectionConfig {
    /// The configured roles, in the order they appear in the file.
    pub fn roles(&self) -> Vec<(Role, &Located<RoleEntry>)> {
        let mut roles: Vec<_> = [
            (Role::Aggregated, &self.aggregated),
            (Role::Prefill, &self.prefill),
            (Role::Decode, &self.decode),
        ]
        .into_iter()
        .filter_map(|(role, entry)| entry.as_ref().map(|entry| (role, entry)))
        .collect();
        roles.sort_by_key(|(role, entry)| (entry.position, *role));
        roles
    }
}

/// One role's entry: a bare type (`prefill: dynamo-default-cost-fn`) or a mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleEntry {
    /// The worker-selection policy type; for the bare form, positioned at the entry.
    pub policy_type: Located<String>,
    /// The selection policy's `parameters`, if the key is present.
    pub parameters: Option<ParameterNode>,
    /// The `hints` list, if the key is present (absent: the registered defaults run).
    pub hints: Option<Located<Vec<Located<HintEntry>>>>,
    /// The `shadow` list, if the key is present: policies evaluated beside the live ones
    /// (never in a shadow entry itself).
    pub shadow: Option<Located<Vec<Located<ShadowEntry>>>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a worker-selection entry: a policy type, or a mapping with `type` and optional `parameters`, `hints` and `shadow`"
)]
struct RoleEntryMapping {
    #[serde(rename = "type")]
    policy_type: Located<String>,
    #[serde(default)]
    parameters: Option<ParameterNode>,
    #[serde(default, deserialize_with = "present")]
    hints: Option<Located<Vec<Located<HintEntry>>>>,
    #[serde(default, deserialize_with = "present")]
    shadow: Option<Located<Vec<Located<ShadowEntry>>>>,
}

impl<'de> Deserialize<'de> for RoleEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BareOrMappingVisitor::<RoleEntry>(PhantomData))
    }
}

impl BareOrMapping for RoleEntry {
    type Mapping = RoleEntryMapping;
    const EXPECTING: &'static str = "a worker-selection entry: a policy type (`prefill: dynamo-default-cost-fn`) or a mapping with `type` and optional `parameters`, `hints` and `shadow`";

    fn bare(policy_type: &str) -> Self {
        RoleEntry::bare(policy_type)
    }

    fn from_mapping(mapping: RoleEntryMapping) -> Self {
        RoleEntry {
            policy_type: mapping.policy_type,
            parameters: mapping.parameters,
            hints: mapping.hints,
            shadow: mapping.shadow,
        }
    }
}

impl RoleEntry {
    /// The bare form, `prefill: dynamo-default-cost-fn`: the type alone. Its position is
    /// unknown here; the caller's `Located` wrapper knows it (see [`locate_bare_types`]).
    fn bare(policy_type: &str) -> Self {
        RoleEntry {
            policy_type: Located {
                position: Position::UNKNOWN,
                value: policy_type.to_owned(),
            },
            parameters: None,
            hints: None,
            shadow: None,
        }
    }
}

/// One item of a role's `shadow` list: a selection policy (with its hints) that sees every
/// request of the role and records what it would have done, without booking anything.
#[derive(Clone, Debug, PartialEq)]
pub struct ShadowEntry {
    /// The policies, as a role entry would give them (never with a `shadow` of their own).
    pub policies: RoleEntry,
    /// The shadow's name in `/shadow` and on `/metrics` (default: its selection type); needed
    /// when the role shadows one type more than once.
    pub name: Option<Located<String>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a shadow entry: a policy type, or a mapping with `type` and optional `parameters`, `hints` and `name`"
)]
struct ShadowEntryMapping {
    #[serde(rename = "type")]
    policy_type: Located<String>,
    #[serde(default)]
    parameters: Option<ParameterNode>,
    #[serde(default, deserialize_with = "present")]
    hints: Option<Located<Vec<Located<HintEntry>>>>,
    #[serde(default, deserialize_with = "present")]
    name: Option<Located<String>>,
}

impl<'de> Deserialize<'de> for ShadowEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BareOrMappingVisitor::<ShadowEntry>(PhantomData))
    }
}

impl BareOrMapping for ShadowEntry {
    type Mapping = ShadowEntryMapping;
    const EXPECTING: &'static str = "a shadow entry: a policy type (`- dynamo-default-cost-fn`) or a mapping with `type` and optional `parameters`, `hints` and `name`";

    fn bare(policy_type: &str) -> Self {
        ShadowEntry {
            policies: RoleEntry::bare(policy_type),
            name: None,
        }
    }

    fn from_mapping(mapping: ShadowEntryMapping) -> Self {
        ShadowEntry {
            policies: RoleEntry {
                policy_type: mapping.policy_type,
                parameters: mapping.parameters,
                hints: mapping.hints,
                shadow: None,
            },
            name: mapping.name,
        }
    }
}

/// An entry written either as a bare policy type (`prefill: dynamo-default-cost-fn`) or as a
/// mapping: role entries and shadow entries.
trait BareOrMapping: Sized {
    /// The mapping form, as parsed.
    type Mapping: DeserializeOwned;
    /// What the entry looks like, for the error of any other shape.
    const EXPECTING: &'static str;
    /// The bare form: the type alone, its position filled in by the caller's `Located`.
    fn bare(policy_type: &str) -> Self;
    /// The mapping form.
    fn from_mapping(mapping: Self::Mapping) -> Self;
}

/// Reads a [`BareOrMapping`] entry from either of its forms.
struct BareOrMappingVisitor<T>(PhantomData<T>);

impl<'de, T: BareOrMapping> Visitor<'de> for BareOrMappingVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(T::bare(value))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::Mapping::deserialize(de::value::MapAccessDeserializer::new(map)).map(T::from_mapping)
    }
}

/// One item of a role's `hints` list.
#[derive(Clone, Debug, PartialEq)]
pub struct HintEntry {
    /// The hint policy type.
    pub policy_type: Located<String>,
    /// The hint policy's `parameters`, if the key is present.
    pub parameters: Option<ParameterNode>,
    /// The entry's name, needed when the role lists the type more than once.
    pub name: Option<Located<String>>,
}

const HINT_ENTRY_EXPECTED: &str =
    "a hint entry: a mapping with `type` and optional `parameters` and `name` (`- type: kv_fetch`)";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a hint entry")]
struct HintEntryMapping {
    #[serde(rename = "type")]
    policy_type: Located<String>,
    #[serde(default)]
    parameters: Option<ParameterNode>,
    #[serde(default, deserialize_with = "present")]
    name: Option<Located<String>>,
}

impl<'de> Deserialize<'de> for HintEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(HintEntryVisitor)
    }
}

/// Accepts only a mapping, so that `- kv_fetch` is reported as a hint entry of the wrong shape.
struct HintEntryVisitor;

impl<'de> Visitor<'de> for HintEntryVisitor {
    type Value = HintEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HINT_ENTRY_EXPECTED)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mapping = HintEntryMapping::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(HintEntry {
            policy_type: mapping.policy_type,
            parameters: mapping.parameters,
            name: mapping.name,
        })
    }
}

/// Gives a bare role entry's type the position of the entry itself.
pub(super) fn locate_bare_types(config: &mut RouterConfig) {
    let Some(selection) = config.worker_selection.as_mut() else {
        return;
    };
    let selection = &mut selection.value;
    for entry in [
        &mut selection.aggregated,
        &mut selection.prefill,
        &mut selection.decode,
    ]
    .into_iter()
    .flatten()
    {
        if !entry.value.policy_type.position.is_known() {
            entry.value.policy_type.position = entry.position;
        }
        for shadow in entry
            .value
            .shadow
            .iter_mut()
            .flat_map(|list| &mut list.value)
        {
            let policy_type = &mut shadow.value.policies.policy_type;
            if !policy_type.position.is_known() {
                policy_type.position = shadow.position;
            }
        }
    }
}
