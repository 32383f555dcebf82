//! The parameters of one policy as `catalog describe` prints them: a row per field of its
//! parameters schema, with the field's type (and range), default and doc comment.

use dynamo_kv_router::schemars::Schema;
use serde_json::{Map, Value};
use std::io::Write;

/// One parameter of a policy, read from its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParameterRow {
    /// The field name, as written under `parameters`.
    pub name: String,
    /// Its JSON type and range (`number ≥ 0`, `integer or null`).
    pub kind: String,
    /// Its default as JSON, `required`, or `-` when neither is known.
    pub default: String,
    /// Its doc comment, on one line.
    pub doc: String,
}

/// The rows of `schema`'s top-level properties, in name order.
pub fn parameter_rows(schema: &Schema) -> Vec<ParameterRow> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    properties
        .iter()
        .map(|(name, property)| {
            let property = property.as_object();
            let default = match property.and_then(|p| p.get("default")) {
                Some(value) => value.to_string(),
                None if required.contains(&name.as_str()) => "required".to_owned(),
                None => "-".to_owned(),
            };
            let doc = property
                .and_then(|p| p.get("description"))
                .and_then(Value::as_str)
                .map(|doc| doc.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default();
            ParameterRow {
                name: name.clone(),
                kind: property.map_or_else(|| "any".to_owned(), kind_text),
                default,
                doc,
            }
        })
        .collect()
}

/// A property's type and range, in words.
fn kind_text(property: &Map<String, Value>) -> String {
    let mut text = match property.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if property.contains_key("enum") => "one of the listed values".to_owned(),
        _ => "any".to_owned(),
    };
    if let Some(Value::Array(values)) = property.get("enum") {
        let values: Vec<String> = values.iter().map(Value::to_string).collect();
        text = format!("{text} ({})", values.join(", "));
    }
    let bound = |key: &str| property.get(key).map(Value::to_string);
    match (bound("minimum"), bound("maximum")) {
        (Some(min), Some(max)) => text.push_str(&format!(" {min}..={max}")),
        (Some(min), None) => text.push_str(&format!(" ≥ {min}")),
        (None, Some(max)) => text.push_str(&format!(" ≤ {max}")),
        (None, None) => {}
    }
    if let Some(min) = bound("exclusiveMinimum") {
        text.push_str(&format!(" > {min}"));
    }
    if let Some(max) = bound("exclusiveMaximum") {
        text.push_str(&format!(" < {max}"));
    }
    text
}

/// Writes `rows` as an aligned table under a header, each line indented by `indent`.
pub fn write_parameter_table(
    out: &mut dyn Write,
    rows: &[ParameterRow],
    indent: &str,
) -> std::io::Result<()> {
    let header = ParameterRow {
        name: "PARAMETER".to_owned(),
        kind: "TYPE".to_owned(),
        default: "DEFAULT".to_owned(),
        doc: "DOC".to_owned(),
    };
    let width = |cell: fn(&ParameterRow) -> &str| {
        std::iter::once(&header)
            .chain(rows)
            .map(|row| cell(row).chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (
        width(|row| &row.name),
        width(|row| &row.kind),
        width(|row| &row.default),
    );
    for row in std::iter::once(&header).chain(rows) {
        let line = format!(
            "{indent}{:w0$}  {:w1$}  {:w2$}  {}",
            row.name, row.kind, row.default, row.doc
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_show_type_range_default_and_doc() {
        let schema = Schema::try_from(json!({
            "type": "object",
            "required": ["url"],
            "properties": {
                "share": {"type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.0,
                          "description": "What a copy\n is worth."},
                "seed": {"type": ["integer", "null"], "minimum": 0},
                "url": {"type": "string"},
            },
        }))
        .unwrap();
        let rows = parameter_rows(&schema);
        let texts: Vec<_> = rows
            .iter()
            .map(|r| format!("{}|{}|{}|{}", r.name, r.kind, r.default, r.doc))
            .collect();
        assert_eq!(
            texts,
            [
                "seed|integer or null ≥ 0|-|",
                "share|number 0.0..=1.0|0.0|What a copy is worth.",
                "url|string|required|",
            ]
        );
        let mut out = Vec::new();
        write_parameter_table(&mut out, &rows, "  ").unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("  PARAMETER  TYPE "), "{out}");
    }
}
