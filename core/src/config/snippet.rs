//! Renders a diagnostic for people: the message, `--> file:line:column`, and the offending
//! line of the file with a caret under the entry (the layout of rustc's diagnostics).
//! [`ConfigError::render`](super::ConfigError::render) describes itself as a [`Diagnostic`].

use super::position::Position;
use crate::identity::Role;
use std::fmt::{self, Write};

/// Lines of context shown before the offending line.
const CONTEXT_LINES: usize = 2;
/// Longest stretch of a line shown; long lines are cropped around the caret.
const MAX_SHOWN_CHARS: usize = 120;

/// What a rendered error says and where it points.
pub(super) struct Diagnostic<'a> {
    /// The problem, shown after `error: `.
    pub(super) message: &'a dyn fmt::Display,
    /// The file, as named to the loader.
    pub(super) file: &'a str,
    /// Where the offending entry starts.
    pub(super) position: Position,
    /// The role the entry belongs to, if any.
    pub(super) role: Option<Role>,
}

/// The error with its snippet; without a known position, the message alone.
pub(super) fn render(error: &Diagnostic<'_>, source: &str) -> String {
    let mut out = format!("error: {}\n", error.message);
    let position = error.position;
    if !position.is_known() {
        let _ = writeln!(out, "  --> {}", error.file);
        return out;
    }
    let _ = writeln!(out, "  --> {}:{}", error.file, position);
    let lines: Vec<&str> = source.lines().collect();
    let index = position.line as usize - 1;
    let Some(line) = lines.get(index) else {
        return out;
    };
    let first = index.saturating_sub(CONTEXT_LINES);
    let width = (index + 1).to_string().len();
    let (skip, caret_at) = crop(line, position.column as usize);
    let _ = writeln!(out, "{:width$} |", "");
    for (offset, text) in lines[first..=index].iter().enumerate() {
        let shown = visible(text, skip);
        let _ = writeln!(out, "{:>width$} | {}", first + offset + 1, shown.trim_end());
    }
    let _ = writeln!(out, "{:width$} | {}^", "", " ".repeat(caret_at));
    if let Some(role) = error.role {
        let _ = writeln!(out, "{:width$} = in role `{role}`", "");
    }
    out
}

/// Characters to skip at the start of each shown line, and the caret's offset after skipping.
fn crop(line: &str, column: usize) -> (usize, usize) {
    let column = column.max(1) - 1;
    let length = line.chars().count();
    if length <= MAX_SHOWN_CHARS || column < MAX_SHOWN_CHARS / 2 {
        return (0, column);
    }
    let skip = column - MAX_SHOWN_CHARS / 2;
    (skip, column - skip)
}

/// The part of `text` shown: control characters made visible, cropped to the window.
fn visible(text: &str, skip: usize) -> String {
    text.chars()
        .skip(skip)
        .take(MAX_SHOWN_CHARS)
        .map(|c| {
            if c == '\t' {
                ' '
            } else if c.is_control() {
                '�'
            } else {
                c
            }
        })
        .collect()
}
