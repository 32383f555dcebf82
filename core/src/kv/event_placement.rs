//! Where a KV event's blocks live and who owns them, as upstream's `RouterEvent` says: the
//! storage tier, the residency domain (read leniently: upstream turns values it does not know
//! into an unsupported domain rather than an error), and the placement the two decide.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The storage tier an event's blocks live in (upstream `StorageTier`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageTier {
    /// Accelerator memory: the only tier this index holds.
    #[default]
    Device,
    /// Pinned host memory.
    HostPinned,
    /// Local disk.
    Disk,
    /// Storage outside the worker.
    External,
}

/// The lifetime that owns an event's blocks (upstream `residency_domain`), as it came over the
/// wire: absent, one upstream knows, or one it does not support.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ResidencyDomain {
    /// The field was absent (older publishers): the blocks belong to the worker.
    #[default]
    Missing,
    /// `"worker"`: the blocks belong to the worker rank.
    Worker,
    /// `"cache_owner"`: the blocks belong to a persistent cache owner, not to the worker.
    CacheOwner,
    /// A string upstream does not know; such events are not applied.
    Unknown(String),
    /// Not a string (for example `null`); such events are not applied.
    Invalid,
}

/// Where an event applies, by upstream's rules for its tier and residency domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventPlacement {
    /// The worker's device cache: the index applies it.
    Device,
    /// Another tier or a cache owner: not indexed, counted.
    OtherTier,
    /// A residency domain upstream rejects: not applied, counted.
    Unsupported,
}

impl StorageTier {
    /// The tier of an engine event's `medium` (vLLM/SGLang ZMQ events), as upstream maps it;
    /// `None` for a medium upstream does not know.
    pub fn from_kv_medium(medium: &str) -> Option<Self> {
        match medium {
            "GPU" | "DEVICE" => Some(Self::Device),
            "CPU" | "CPU_PINNED" | "CPU_TIER1" => Some(Self::HostPinned),
            "CPU_TIER2" | "DISK" | "NVME" | "STORAGE" => Some(Self::Disk),
            "EXTERNAL" | "NETWORK" | "REMOTE" | "SHARED" => Some(Self::External),
            _ => None,
        }
    }
}

impl ResidencyDomain {
    /// Whether the field was absent.
    pub fn is_missing(&self) -> bool {
        matches!(self, ResidencyDomain::Missing)
    }
}

impl Serialize for ResidencyDomain {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ResidencyDomain::Missing | ResidencyDomain::Invalid => serializer.serialize_none(),
            ResidencyDomain::Worker => serializer.serialize_str("worker"),
            ResidencyDomain::CacheOwner => serializer.serialize_str("cache_owner"),
            ResidencyDomain::Unknown(value) => serializer.serialize_str(value),
        }
    }
}

impl<'de> Deserialize<'de> for ResidencyDomain {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ResidencyDomainVisitor)
    }
}

/// Reads any value: known strings, other strings, and (as upstream) anything else as invalid.
struct ResidencyDomainVisitor;

impl ResidencyDomainVisitor {
    fn from_str(value: &str) -> ResidencyDomain {
        match value {
            "worker" => ResidencyDomain::Worker,
            "cache_owner" => ResidencyDomain::CacheOwner,
            other => ResidencyDomain::Unknown(other.to_owned()),
        }
    }
}

impl<'de> Visitor<'de> for ResidencyDomainVisitor {
    type Value = ResidencyDomain;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a residency-domain string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<ResidencyDomain, E> {
        Ok(Self::from_str(value))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<ResidencyDomain, E> {
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<ResidencyDomain, E> {
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<ResidencyDomain, E> {
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<ResidencyDomain, E> {
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<ResidencyDomain, E> {
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_none<E: de::Error>(self) -> Result<ResidencyDomain, E> {
        // An explicit null is malformed, not absent: treating it as absent would turn a
        // malformed clear into a rank-wide reset.
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_unit<E: de::Error>(self) -> Result<ResidencyDomain, E> {
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<ResidencyDomain, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(ResidencyDomain::Invalid)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ResidencyDomain, A::Error> {
        while map
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        Ok(ResidencyDomain::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_media_map_to_tiers_as_upstream() {
        assert_eq!(
            StorageTier::from_kv_medium("GPU"),
            Some(StorageTier::Device)
        );
        assert_eq!(
            StorageTier::from_kv_medium("CPU_TIER1"),
            Some(StorageTier::HostPinned)
        );
        assert_eq!(StorageTier::from_kv_medium("NVME"), Some(StorageTier::Disk));
        assert_eq!(
            StorageTier::from_kv_medium("SHARED"),
            Some(StorageTier::External)
        );
        assert_eq!(StorageTier::from_kv_medium("gpu"), None);
    }
}
