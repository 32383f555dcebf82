//! The bench's text tables: a label column, then one right-aligned column per gateway.

/// `value` with `digits` decimals, or `-` when it is not a number.
pub fn fmt(value: f64, digits: usize) -> String {
    if value.is_finite() {
        format!("{value:.digits$}")
    } else {
        "-".to_owned()
    }
}

/// The table of `rows` (a label and one cell per column) under the column `names`.
pub fn layout(names: &[&str], rows: &[(String, Vec<String>)]) -> String {
    let width0 = rows
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(10);
    let widths: Vec<usize> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            rows.iter()
                .map(|(_, cells)| cells[i].chars().count())
                .chain(std::iter::once(name.len()))
                .max()
                .unwrap_or(8)
        })
        .collect();
    let mut out = String::new();
    out.push_str(&format!("{:<width0$}", "", width0 = width0));
    for (name, w) in names.iter().zip(&widths) {
        out.push_str(&format!(" | {:>w$}", name, w = *w));
    }
    out.push('\n');
    out.push_str(&"-".repeat(width0 + widths.iter().map(|w| w + 3).sum::<usize>()));
    out.push('\n');
    for (label, cells) in rows {
        out.push_str(&format!("{label:<width0$}"));
        for (cell, w) in cells.iter().zip(&widths) {
            out.push_str(&format!(" | {cell:>w$}", w = *w));
        }
        out.push('\n');
    }
    out
}
