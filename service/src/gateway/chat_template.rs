//! A model's chat templates, compiled with minijinja and rendered as Hugging Face transformers
//! renders them (`trim_blocks`, `lstrip_blocks`, no kept trailing newline, Python string and
//! dict methods, `raise_exception`, `strftime_now`, transformers' `tojson`).
//!
//! Enters: the template sources (`tokenizer_config.json`'s `chat_template`, a string or a list
//! of `{"name", "template"}`, or a `chat_template.jinja` file) and the special tokens, once at
//! load; then, per request, the render context (messages, tools, …).
//! Leaves: the rendered prompt text, or an error that keeps a template's deliberate
//! `raise_exception(...)` apart from other failures, so the client sees the template's words.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The name of the template used when no other applies (transformers' `default`).
pub const DEFAULT_TEMPLATE: &str = "default";
/// The name of the template used when the request carries `tools` (transformers' `tool_use`).
pub const TOOL_USE_TEMPLATE: &str = "tool_use";

/// One chat template's name and source text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedTemplate {
    /// `default`, `tool_use`, or another name from the config's list.
    pub name: String,
    /// The Jinja source.
    pub source: String,
}

/// How a template expects message `content`, as vLLM detects it ("content format").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentFormat {
    /// The template prints `content` as a string: text parts are joined with `"\n"`.
    String,
    /// The template loops over `content` parts: content is a list of `{"type": "text", ...}`.
    OpenAi,
}

/// The special tokens a template sees as globals (`bos_token`, …), from tokenizer_config.json.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `bos_token`.
    pub bos_token: Option<String>,
    /// `eos_token`.
    pub eos_token: Option<String>,
    /// `pad_token`.
    pub pad_token: Option<String>,
    /// `unk_token`.
    pub unk_token: Option<String>,
}

impl SpecialTokens {
    /// Reads the tokens from a parsed tokenizer_config.json; each may be a string or an
    /// AddedToken object `{"content": "..."}`; anything else counts as absent.
    pub fn from_config(config: &serde_json::Value) -> Self {
        let token = |key: &str| match config.get(key) {
            Some(serde_json::Value::String(text)) => Some(text.clone()),
            Some(serde_json::Value::Object(added)) => added
                .get("content")
                .and_then(|c| c.as_str())
                .map(str::to_owned),
            _ => None,
        };
        Self {
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
            pad_token: token("pad_token"),
            unk_token: token("unk_token"),
        }
    }

    fn entries(&self) -> [(&'static str, &Option<String>); 4] {
        [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
            ("pad_token", &self.pad_token),
            ("unk_token", &self.unk_token),
        ]
    }
}

/// Why a model's chat templates could not be read or compiled (a startup error).
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// `chat_template` is neither a string nor a list of named templates.
    #[error(
        "`chat_template` must be a string or a list of {{\"name\": ..., \"template\": ...}} objects ({detail}); fix the model's tokenizer_config.json"
    )]
    BadShape {
        /// What was wrong.
        detail: String,
    },
    /// A template has a syntax error.
    #[error(
        "chat template `{name}` does not compile at line {line}: {detail}\n    {line}: {source_line}\nfix the template (or put a corrected one in chat_template.jinja beside tokenizer.json)"
    )]
    Compile {
        /// The template's name.
        name: String,
        /// The 1-based line of the error.
        line: usize,
        /// minijinja's description.
        detail: String,
        /// The template's text on that line.
        source_line: String,
    },
}

/// Why rendering failed (a client error: the request does not fit the template).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The template called `raise_exception(message)`.
    #[error("{0}")]
    Raised(String),
    /// Another template failure (an undefined attribute, a type error, …).
    #[error("chat template `{name}` failed{at}: {detail}", at = line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Failed {
        /// The template's name.
        name: String,
        /// The template line, when known.
        line: Option<usize>,
        /// minijinja's description.
        detail: String,
    },
}

/// Reads the templates of tokenizer_config.json's `chat_template` (none when absent or null).
pub fn templates_from_config(
    config: &serde_json::Value,
) -> Result<Vec<NamedTemplate>, TemplateError> {
    match config.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::String(source)) => Ok(vec![NamedTemplate {
            name: DEFAULT_TEMPLATE.to_owned(),
            source: source.clone(),
        }]),
        Some(serde_json::Value::Array(items)) => items.iter().map(named_template).collect(),
        Some(other) => Err(TemplateError::BadShape {
            detail: format!("found {}", json_kind(other)),
        }),
    }
}

fn named_template(item: &serde_json::Value) -> Result<NamedTemplate, TemplateError> {
    let field = |key: &str| item.get(key).and_then(serde_json::Value::as_str);
    match (field("name"), field("template")) {
        (Some(name), Some(source)) => Ok(NamedTemplate {
            name: name.to_owned(),
            source: source.to_owned(),
        }),
        _ => Err(TemplateError::BadShape {
            detail: format!("an entry is {item} without string `name` and `template`"),
        }),
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A model's compiled chat templates, ready to render per request.
pub struct ChatTemplates {
    env: Environment<'static>,
    formats: BTreeMap<String, ContentFormat>,
}

impl ChatTemplates {
    /// Compiles `templates` (at least one) with `special` as globals.
    pub fn compile(
        templates: Vec<NamedTemplate>,
        special: &SpecialTokens,
    ) -> Result<Self, TemplateError> {
        let mut env = hf_environment();
        for (key, token) in special.entries() {
            if let Some(token) = token {
                env.add_global(key, token.clone());
            }
        }
        let mut formats = BTreeMap::new();
        for template in templates {
            let source = neutralize_generation_tags(&template.source);
            formats.insert(template.name.clone(), content_format(&source));
            env.add_template_owned(template.name.clone(), source)
                .map_err(|error| compile_error(&template, &error))?;
        }
        Ok(Self { env, formats })
    }

    /// The template a request uses, as transformers picks it: `tool_use` when the request
    /// has tools and the model has one, else `default`; `None` when there is no `default`.
    pub fn select(&self, with_tools: bool) -> Option<&str> {
        let pick = |name: &'static str| self.formats.contains_key(name).then_some(name);
        with_tools
            .then(|| pick(TOOL_USE_TEMPLATE))
            .flatten()
            .or_else(|| pick(DEFAULT_TEMPLATE))
    }

    /// How template `name` expects message content.
    pub fn content_format(&self, name: &str) -> ContentFormat {
        self.formats
            .get(name)
            .copied()
            .unwrap_or(ContentFormat::String)
    }

    /// Renders template `name` with `context` (a map of the template's variables).
    pub fn render(&self, name: &str, context: Value) -> Result<String, RenderError> {
        let failed = |error: &Error| render_error(name, error);
        let template = self.env.get_template(name).map_err(|e| failed(&e))?;
        template.render(context).map_err(|e| failed(&e))
    }
}

/// The environment transformers' `_compile_jinja_template` builds, in minijinja.
fn hf_environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build();
    if let Ok(syntax) = syntax {
        env.set_syntax(syntax);
    }
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env
}

/// Marks an error raised on purpose by the template, so rendering can tell it apart.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

fn render_error(name: &str, error: &Error) -> RenderError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(raised) = current.downcast_ref::<RaisedByTemplate>() {
            return RenderError::Raised(raised.0.clone());
        }
        source = current.source();
    }
    RenderError::Failed {
        name: name.to_owned(),
        line: error.line(),
        detail: error
            .detail()
            .map_or_else(|| error.kind().to_string(), str::to_owned),
    }
}

fn compile_error(template: &NamedTemplate, error: &Error) -> TemplateError {
    let line = error.line().unwrap_or(1);
    let source_line = template
        .source
        .lines()
        .nth(line.saturating_sub(1))
        .unwrap_or_default()
        .trim()
        .to_owned();
    TemplateError::Compile {
        name: template.name.clone(),
        line,
        detail: error
            .detail()
            .map_or_else(|| error.kind().to_string(), str::to_owned),
        source_line,
    }
}

/// transformers' `{% generation %}` … `{% endgeneration %}` (assistant-mask tracking) changes
/// nothing in the text; minijinja does not know the tag, so it becomes an always-true `if`
/// with the same whitespace control.
fn neutralize_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start..start + len + 2];
        out.push_str(&rest[..start]);
        out.push_str(&rewrite_generation_tag(tag).unwrap_or_else(|| tag.to_owned()));
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

fn rewrite_generation_tag(tag: &str) -> Option<String> {
    let inner = &tag[2..tag.len() - 2];
    let open = inner.strip_prefix(['-', '+']).map_or("", |_| &inner[..1]);
    let close = inner
        .strip_suffix(['-', '+'])
        .map_or("", |_| &inner[inner.len() - 1..]);
    let word = inner.trim_matches(['-', '+']).trim();
    let replacement = match word {
        "generation" => "if true",
        "endgeneration" => "endif",
        _ => return None,
    };
    Some(format!("{{%{open} {replacement} {close}%}}"))
}

/// vLLM's content-format detection: a template that loops over a message's `content`
/// (`{% for part in message['content'] %}`, `message.content`, …, where `message` loops over
/// `messages`) takes OpenAI-style parts; any other takes strings.
fn content_format(source: &str) -> ContentFormat {
    let loops = for_loops(source);
    let message_vars: Vec<&str> = loops
        .iter()
        .filter(|(_, iter)| iter == "messages" || iter.starts_with("messages["))
        .map(|(target, _)| target.as_str())
        .collect();
    let over_content = loops.iter().any(|(_, iter)| {
        message_vars.iter().any(|var| {
            [".content", "['content']", "[\"content\"]"]
                .iter()
                .any(|access| iter.starts_with(&format!("{var}{access}")))
        })
    });
    if over_content {
        ContentFormat::OpenAi
    } else {
        ContentFormat::String
    }
}

/// `(target, iterable without spaces)` of each `{% for target in iterable %}`.
fn for_loops(source: &str) -> Vec<(String, String)> {
    let mut loops = Vec::new();
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let inner = rest[start + 2..start + len].trim_matches(['-', '+']).trim();
        let mut words = inner.split_whitespace();
        if let (Some("for"), Some(target), Some("in")) = (words.next(), words.next(), words.next())
        {
            let iterable: String = words.collect::<Vec<_>>().concat();
            loops.push((target.to_owned(), iterable));
        }
        rest = &rest[start + len + 2..];
    }
    loops
}

/// `strftime_now(format)`: the current time (UTC) formatted like Python's `strftime`.
fn strftime_now(format: String) -> Result<Value, Error> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    Ok(Value::from(strftime(&format, seconds)))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The civil date and time of `seconds` since the Unix epoch, in UTC.
struct Civil {
    year: i64,
    month: usize,
    day: u64,
    hour: u64,
    minute: u64,
    second: u64,
    weekday: usize,
    yearday: u64,
}

fn civil(seconds: u64) -> Civil {
    let days = seconds / 86_400;
    let secs = seconds % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as usize;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][month - 1];
    let yearday = before + day + u64::from(leap && month > 2);
    Civil {
        year,
        month,
        day,
        hour: secs / 3600,
        minute: secs % 3600 / 60,
        second: secs % 60,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 3) % 7) as usize,
        yearday,
    }
}

fn strftime(format: &str, seconds: u64) -> String {
    let t = civil(seconds);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            out.push('%');
            break;
        };
        let hour12 = if t.hour.is_multiple_of(12) {
            12
        } else {
            t.hour % 12
        };
        let _ = match spec {
            'Y' => write!(out, "{}", t.year),
            'y' => write!(out, "{:02}", t.year.rem_euclid(100)),
            'm' => write!(out, "{:02}", t.month),
            'd' => write!(out, "{:02}", t.day),
            'e' => write!(out, "{:>2}", t.day),
            'H' => write!(out, "{:02}", t.hour),
            'I' => write!(out, "{hour12:02}"),
            'M' => write!(out, "{:02}", t.minute),
            'S' => write!(out, "{:02}", t.second),
            'p' => write!(out, "{}", if t.hour < 12 { "AM" } else { "PM" }),
            'j' => write!(out, "{:03}", t.yearday),
            'B' => write!(out, "{}", MONTHS[t.month - 1]),
            'b' | 'h' => write!(out, "{}", &MONTHS[t.month - 1][..3]),
            'A' => write!(out, "{}", WEEKDAYS[t.weekday]),
            'a' => write!(out, "{}", &WEEKDAYS[t.weekday][..3]),
            'F' => write!(out, "{}-{:02}-{:02}", t.year, t.month, t.day),
            'T' => write!(out, "{:02}:{:02}:{:02}", t.hour, t.minute, t.second),
            '%' => write!(out, "%"),
            other => write!(out, "%{other}"),
        };
    }
    out
}

/// How transformers' `tojson` lays out JSON (Python's `json.dumps` arguments).
struct JsonLayout {
    ensure_ascii: bool,
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)` (`separators` and `sort_keys` by keyword only): Python's `json.dumps`, not HTML-escaped (unlike Jinja's and minijinja's
/// own `tojson`), so a template prints JSON exactly as the engine's Python would.
fn tojson(
    value: &Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let argument = |positional: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        match positional {
            Some(value) => Ok(Some(value)),
            None => kwargs.get::<Option<Value>>(name),
        }
    };
    let ensure_ascii = argument(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = json_indent(argument(indent, "indent")?)?;
    let (item_separator, key_separator) =
        json_separators(argument(None, "separators")?, indent.is_some())?;
    let sort_keys = argument(None, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let layout = JsonLayout {
        ensure_ascii,
        indent,
        item_separator,
        key_separator,
        sort_keys,
    };
    let mut out = String::new();
    write_json(&mut out, value, &layout, 0)?;
    Ok(Value::from_safe_string(out))
}

fn json_indent(indent: Option<Value>) -> Result<Option<String>, Error> {
    match indent {
        None => Ok(None),
        Some(value) if value.is_none() || value.is_undefined() => Ok(None),
        Some(value) if value.kind() == ValueKind::String => {
            Ok(Some(value.as_str().unwrap_or_default().to_owned()))
        }
        Some(value) => {
            let spaces = i64::try_from(value)?;
            Ok(Some(" ".repeat(spaces.max(0) as usize)))
        }
    }
}

fn json_separators(separators: Option<Value>, indented: bool) -> Result<(String, String), Error> {
    let default_item = if indented { "," } else { ", " };
    let Some(value) = separators.filter(|v| !v.is_none() && !v.is_undefined()) else {
        return Ok((default_item.to_owned(), ": ".to_owned()));
    };
    let pair: Vec<Value> = value.try_iter()?.collect();
    match pair.as_slice() {
        [item, key] => Ok((item.to_string(), key.to_string())),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: `separators` must be a pair (item_separator, key_separator)",
        )),
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    layout: &JsonLayout,
    depth: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_json_number(out, value),
        ValueKind::String => write_json_string(out, value.as_str().unwrap_or_default(), layout),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_json_container(out, ('[', ']'), items.len(), layout, depth, |out, i| {
                write_json(out, &items[i], layout, depth + 1)
            })?;
        }
        ValueKind::Map => write_json_map(out, value, layout, depth)?,
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of type {kind} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

fn write_json_map(
    out: &mut String,
    value: &Value,
    layout: &JsonLayout,
    depth: usize,
) -> Result<(), Error> {
    let mut entries: Vec<(String, Value)> = Vec::new();
    for key in value.try_iter()? {
        let item = value.get_item(&key)?;
        let key = match key.kind() {
            ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
            ValueKind::None => "null".to_owned(),
            ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
            _ => key.to_string(),
        };
        entries.push((key, item));
    }
    if layout.sort_keys {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
    }
    write_json_container(out, ('{', '}'), entries.len(), layout, depth, |out, i| {
        write_json_string(out, &entries[i].0, layout);
        out.push_str(&layout.key_separator);
        write_json(out, &entries[i].1, layout, depth + 1)
    })
}

fn write_json_container(
    out: &mut String,
    (open, close): (char, char),
    len: usize,
    layout: &JsonLayout,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&layout.item_separator);
        }
        if let Some(indent) = &layout.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(indent) = &layout.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

fn write_json_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        out.push_str(&value.to_string());
    } else {
        let float = f64::try_from(value.clone()).unwrap_or(f64::NAN);
        out.push_str(&python_float_repr(float));
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, in exponent form outside
/// 1e-4 <= |x| < 1e16, always with a `.0` or an exponent.
fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let plain = format!("{value}");
        if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        }
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    }
}

/// A JSON string as Python's `json.dumps` escapes it.
fn write_json_string(out: &mut String, text: &str, layout: &JsonLayout) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (layout.ensure_ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, context: Value) -> Result<String, RenderError> {
        let templates = vec![NamedTemplate {
            name: DEFAULT_TEMPLATE.to_owned(),
            source: source.to_owned(),
        }];
        let special = SpecialTokens {
            bos_token: Some("<s>".to_owned()),
            ..SpecialTokens::default()
        };
        let compiled = ChatTemplates::compile(templates, &special).expect("compiles");
        compiled.render(DEFAULT_TEMPLATE, context)
    }

    #[test]
    fn blocks_are_trimmed_and_the_trailing_newline_dropped() {
        let source = "{{ bos_token }}\n{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n";
        let context = minijinja::context! { messages => vec![
            minijinja::context! { role => "user" },
            minijinja::context! { role => "assistant" },
        ]};
        assert_eq!(
            render(source, context).expect("renders"),
            "<s>\n  user\n  assistant\n"
        );
    }

    #[test]
    fn python_methods_work() {
        let source = "{{ ' a b '.strip().split(' ') | join(',') }}|{{ 'abc'.startswith('a') }}|{% for k, v in d.items() %}{{ k }}={{ v }}{% endfor %}|{{ d.get('x', 'none') }}";
        let context = minijinja::context! { d => minijinja::context! { k => 1 } };
        assert_eq!(
            render(source, context).expect("renders"),
            "a,b|True|k=1|none"
        );
    }

    #[test]
    fn raise_exception_keeps_its_message() {
        let error = render(
            "{{ raise_exception('roles must alternate') }}",
            Value::UNDEFINED,
        )
        .expect_err("raises");
        assert!(matches!(&error, RenderError::Raised(m) if m == "roles must alternate"));
    }

    #[test]
    fn tojson_is_pythons_json_dumps() {
        let value = serde_json::json!({"b": [1, 2.5, 1e20], "a": "<x> é\n", "e": {}});
        let context = minijinja::context! { v => Value::from(minijinja::value::Serde(&value)) };
        assert_eq!(
            render("{{ v | tojson }}", context.clone()).expect("renders"),
            r#"{"a": "<x> é\n", "b": [1, 2.5, 1e+20], "e": {}}"#
        );
        assert_eq!(
            render("{{ v.b | tojson(indent=2) }}", context.clone()).expect("renders"),
            "[\n  1,\n  2.5,\n  1e+20\n]"
        );
        assert_eq!(
            render("{{ v.a | tojson(ensure_ascii=true) }}", context).expect("renders"),
            r#""<x> \u00e9\n""#
        );
    }

    #[test]
    fn float_repr_follows_python() {
        for (value, repr) in [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (123456.789, "123456.789"),
        ] {
            assert_eq!(python_float_repr(value), repr);
        }
    }

    #[test]
    fn strftime_formats_a_known_instant() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        assert_eq!(
            strftime("%d %b %Y %H:%M:%S %A %j %I%p %%", 1_709_211_909),
            "29 Feb 2024 13:05:09 Thursday 060 01PM %"
        );
    }

    #[test]
    fn generation_tags_are_neutral() {
        let source =
            "{% for m in messages %}{%- generation -%} {{ m }} {%- endgeneration %}{% endfor %}";
        let context = minijinja::context! { messages => vec!["a", "b"] };
        assert_eq!(render(source, context).expect("renders"), "ab");
    }

    #[test]
    fn content_format_is_detected_like_vllm() {
        assert_eq!(
            content_format("{% for message in messages %}{{ message['content'] }}{% endfor %}"),
            ContentFormat::String
        );
        assert_eq!(
            content_format(
                "{%- for message in messages %}{%- for part in message['content'] %}{{ part.text }}{% endfor %}{% endfor %}"
            ),
            ContentFormat::OpenAi
        );
        assert_eq!(
            content_format(
                "{% for m in messages %}{% for c in m.content | selectattr('type') %}{% endfor %}{% endfor %}"
            ),
            ContentFormat::OpenAi
        );
    }

    #[test]
    fn a_list_of_templates_is_read_and_selected() {
        let config = serde_json::json!({"chat_template": [
            {"name": "default", "template": "d"},
            {"name": "tool_use", "template": "t"},
        ]});
        let templates = templates_from_config(&config).expect("reads");
        let compiled =
            ChatTemplates::compile(templates, &SpecialTokens::default()).expect("compiles");
        assert_eq!(compiled.select(false), Some(DEFAULT_TEMPLATE));
        assert_eq!(compiled.select(true), Some(TOOL_USE_TEMPLATE));
        let bad = serde_json::json!({"chat_template": 3});
        assert!(templates_from_config(&bad).is_err());
    }

    #[test]
    fn special_tokens_may_be_added_token_objects() {
        let config = serde_json::json!({"bos_token": {"content": "<b>", "lstrip": false}, "eos_token": "<e>", "pad_token": null});
        let special = SpecialTokens::from_config(&config);
        assert_eq!(special.bos_token.as_deref(), Some("<b>"));
        assert_eq!(special.eos_token.as_deref(), Some("<e>"));
        assert_eq!(special.pad_token, None);
    }
}
