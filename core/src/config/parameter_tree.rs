//! A policy's `parameters` as written, with the position of every node, so that an error a
//! provider reports for a field path can point at that field in the file.

use super::position::Position;
use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// One node of a `parameters` value and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct ParameterNode {
    /// Where the node starts.
    pub position: Position,
    /// For a mapping entry, where its key was written (errors about a field point there);
    /// otherwise the same as `position`.
    pub key_position: Position,
    /// The value.
    pub value: ParameterValue,
}

/// The value of a [`ParameterNode`]: the JSON data model, keeping the written key order.
#[derive(Clone, Debug, PartialEq)]
pub enum ParameterValue {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer or a finite float.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// A sequence.
    Sequence(Vec<ParameterNode>),
    /// A mapping, in written order.
    Mapping(Vec<(String, ParameterNode)>),
}

impl ParameterValue {
    /// What kind of value this is, for messages (`a string`, `a sequence`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ParameterValue::Null => "null",
            ParameterValue::Bool(_) => "a boolean",
            ParameterValue::Number(_) => "a number",
            ParameterValue::String(_) => "a string",
            ParameterValue::Sequence(_) => "a sequence",
            ParameterValue::Mapping(_) => "a mapping",
        }
    }
}

impl ParameterNode {
    fn from_spanned(spanned: Spanned<ParameterValue>) -> Self {
        let position = Position::of(&spanned.referenced);
        Self {
            position,
            key_position: position,
            value: spanned.value,
        }
    }

    /// The value as JSON, which is what providers read.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            ParameterValue::Null => serde_json::Value::Null,
            ParameterValue::Bool(value) => serde_json::Value::Bool(*value),
            ParameterValue::Number(value) => serde_json::Value::Number(value.clone()),
            ParameterValue::String(value) => serde_json::Value::String(value.clone()),
            ParameterValue::Sequence(items) => {
                serde_json::Value::Array(items.iter().map(ParameterNode::to_json).collect())
            }
            ParameterValue::Mapping(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(key, node)| (key.clone(), node.to_json()))
                    .collect(),
            ),
        }
    }

    /// The position of the value of the deepest node on `path` (`max_blocks`, `inner.depth`,
    /// `list[2]`), stopping at the last segment that exists: where a bad value is written.
    pub fn position_of(&self, path: &str) -> Position {
        self.walk(path).0.position
    }

    /// Where the deepest field on `path` is written: its key (or, for a sequence item, the
    /// item), stopping at the last segment that exists. Errors about a field itself, such as an
    /// unknown field, point there.
    pub fn field_position_of(&self, path: &str) -> Position {
        self.walk(path).1
    }

    /// The deepest node on `path`, and where it is written (its key, for a mapping entry).
    fn walk(&self, path: &str) -> (&ParameterNode, Position) {
        let mut node = self;
        let mut position = self.position;
        for segment in path_segments(path) {
            let next = match (&node.value, segment) {
                (ParameterValue::Mapping(entries), Segment::Key(key)) => entries
                    .iter()
                    .find(|(name, _)| name == key)
                    .map(|(_, child)| child),
                (ParameterValue::Sequence(items), Segment::Index(index)) => items.get(index),
                _ => None,
            };
            match next {
                Some(child) => {
                    position = match segment {
                        Segment::Key(_) => child.key_position,
                        Segment::Index(_) => child.position,
                    };
                    node = child;
                }
                None => break,
            }
        }
        (node, position)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits `a.b[3].c` into `a`, `b`, `3`, `c`.
fn path_segments(path: &str) -> Vec<Segment<'_>> {
    let mut segments = Vec::new();
    for part in path.split('.').filter(|part| !part.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(at) => part.split_at(at),
            None => (part, ""),
        };
        if !key.is_empty() {
            segments.push(Segment::Key(key));
        }
        while let Some(open) = rest.strip_prefix('[') {
            let Some(close) = open.find(']') else { break };
            match open[..close].parse() {
                Ok(index) => segments.push(Segment::Index(index)),
                Err(_) => segments.push(Segment::Key(&open[..close])),
            }
            rest = &open[close + 1..];
        }
    }
    segments
}

impl<'de> Deserialize<'de> for ParameterNode {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Spanned::<ParameterValue>::deserialize(deserializer).map(ParameterNode::from_spanned)
    }
}

impl<'de> Deserialize<'de> for ParameterValue {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = ParameterValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a parameter value (null, boolean, number, string, sequence or mapping)")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(ParameterValue::Null)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(ParameterValue::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        ParameterValue::deserialize(deserializer)
    }

    fn visit_bool<E>(self, value: bool) -> Result<Self::Value, E> {
        Ok(ParameterValue::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
        Ok(ParameterValue::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
        Ok(ParameterValue::Number(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Self::Value, E> {
        match i64::try_from(value) {
            Ok(value) => Ok(ParameterValue::Number(value.into())),
            Err(_) => self.visit_u128(u128::try_from(value).unwrap_or(u128::MAX)),
        }
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Self::Value, E> {
        u64::try_from(value)
            .map(|value| ParameterValue::Number(value.into()))
            .map_err(|_| E::custom(format!("integer {value} is out of the 64-bit range")))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
        serde_json::Number::from_f64(value)
            .map(ParameterValue::Number)
            .ok_or_else(|| E::custom(format!("{value} is not a finite number")))
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(ParameterValue::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
        Ok(ParameterValue::String(value))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
        Err(E::custom("binary values are not accepted as parameters"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<ParameterNode>()? {
            items.push(item);
        }
        Ok(ParameterValue::Sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries: Vec<(String, ParameterNode)> = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let mut value = map.next_value::<ParameterNode>()?;
            value.key_position = Position::of(&key.referenced);
            let key = key.value;
            if entries.iter().any(|(existing, _)| *existing == key) {
                return Err(de::Error::custom(format!(
                    "duplicate parameter key `{key}`"
                )));
            }
            entries.push((key, value));
        }
        Ok(ParameterValue::Mapping(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_paths() {
        assert_eq!(
            path_segments("a.b[3].c"),
            [
                Segment::Key("a"),
                Segment::Key("b"),
                Segment::Index(3),
                Segment::Key("c")
            ]
        );
        assert_eq!(path_segments("[0]"), [Segment::Index(0)]);
        assert!(path_segments("").is_empty());
    }
}
