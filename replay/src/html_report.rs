//! The comparison as one self-contained HTML page with inline SVG plots: hit rate over time, the
//! TTFT CDF, and per-worker load.

use crate::report::Comparison;
use plotters::prelude::*;
use std::fmt::Write as _;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 360;

/// One colour per configuration, the same in every plot (Tableau's 10, which stay apart on
/// white and for the common colour-vision deficiencies).
const CONFIG_COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One series of a line chart: its label, its points, and whose it is.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    /// The configuration's position in the comparison: picks the colour.
    config: usize,
    /// 0 for a configuration's first stage; later stages are drawn lighter.
    stage: usize,
}

impl Series {
    fn color(&self) -> RGBAColor {
        let base = CONFIG_COLORS[self.config % CONFIG_COLORS.len()];
        if self.stage == 0 {
            base.to_rgba()
        } else {
            base.mix(0.45)
        }
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draws a line chart to an SVG string; a drawing error becomes a short note instead.
fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    y_max: Option<f64>,
) -> String {
    let mut svg = String::new();
    let drawn = draw(&mut svg, title, x_label, y_label, series, y_max);
    match drawn {
        Ok(()) => svg,
        Err(error) => format!(
            "<p>could not draw “{}”: {}</p>",
            escape(title),
            escape(&error)
        ),
    }
}

fn draw(
    svg: &mut String,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    y_max: Option<f64>,
) -> Result<(), String> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x_min, mut x_max, mut y_top) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (x, y) in all {
        x_min = x_min.min(*x);
        x_max = x_max.max(*x);
        y_top = y_top.max(*y);
    }
    if !x_min.is_finite() {
        (x_min, x_max) = (0.0, 1.0);
    }
    if x_max <= x_min {
        x_max = x_min + 1.0;
    }
    let y_top = y_max.unwrap_or(if y_top > 0.0 { y_top * 1.05 } else { 1.0 });
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    let error = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_min..x_max, 0.0..y_top)
        .map_err(|e| error(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| error(&e))?;
    for one in series {
        let color = one.color();
        chart
            .draw_series(
                LineSeries::new(one.points.iter().copied(), color.stroke_width(2)).point_size(2),
            )
            .map_err(|e| error(&e))?
            .label(one.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| error(&e))?;
    root.present().map_err(|e| error(&e))?;
    drop(chart);
    drop(root);
    Ok(())
}

impl Comparison {
    /// The comparison as a single self-contained HTML page.
    pub fn to_html(&self) -> String {
        let hit_rate: Vec<Series> = self
            .configs
            .iter()
            .enumerate()
            .map(|(config, c)| Series {
                config,
                stage: 0,
                label: format!("{} (local + fetched)", c.name),
                points: c
                    .hit_rate_over_time
                    .iter()
                    .map(|p| (p.t_s, p.reused * 100.0))
                    .collect(),
            })
            .collect();
        let cdf: Vec<Series> = self
            .configs
            .iter()
            .enumerate()
            .map(|(config, c)| Series {
                config,
                stage: 0,
                label: c.name.clone(),
                points: c.ttft_cdf.iter().map(|(ms, f)| (*ms, f * 100.0)).collect(),
            })
            .collect();
        let load: Vec<Series> = self
            .configs
            .iter()
            .enumerate()
            .flat_map(|(config, c)| {
                let several = c.load.len() > 1;
                c.load.iter().enumerate().map(move |(stage, l)| Series {
                    config,
                    stage,
                    label: if several {
                        format!("{} ({})", c.name, l.role)
                    } else {
                        c.name.clone()
                    },
                    points: l
                        .busy_s
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (i as f64, *s))
                        .collect(),
                })
            })
            .collect();
        let mut page = String::new();
        let w = &self.workload;
        let _ = write!(
            page,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kv-router replay</title>\
             <style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}\
             td,th{{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}}td:first-child,th:first-child{{text-align:left}}\
             figure{{margin:1.5em 0}}</style></head><body>\n<h1>kv-router replay</h1>\n\
             <p>Workload: {} — {} requests, {} blocks of {} tokens, {:.0} s of arrivals.</p>\n",
            escape(&w.name),
            w.requests,
            w.blocks,
            w.block_size,
            w.span_s
        );
        let c = &self.cluster;
        let _ = writeln!(
            page,
            "<p>Cluster: {} workers per role, {} KV blocks each, prefill {} tokens/s, decode {} tokens/s per request, fetch {} blocks/s + {} ms.</p>",
            c.workers_per_role,
            c.kv_capacity_blocks,
            c.prefill_tokens_per_s,
            c.decode_tokens_per_s,
            c.fetch_blocks_per_s,
            c.fetch_latency_us / 1000.0
        );
        page.push_str("<table><thead><tr><th></th>");
        for config in &self.configs {
            let _ = write!(page, "<th>{}</th>", escape(&config.name));
        }
        page.push_str("</tr></thead><tbody>\n");
        for (label, cells) in self.rows() {
            let _ = write!(page, "<tr><td>{}</td>", escape(&label));
            for cell in cells {
                let _ = write!(page, "<td>{}</td>", escape(&cell));
            }
            page.push_str("</tr>\n");
        }
        page.push_str("</tbody></table>\n");
        for (caption, svg) in [
            (
                "Prefix hit rate over time (block-weighted, first stage, by arrival)",
                line_chart(
                    "Hit rate over time",
                    "time (s)",
                    "blocks reused (%)",
                    &hit_rate,
                    Some(100.0),
                ),
            ),
            (
                "Estimated time to first token",
                line_chart("TTFT CDF", "TTFT (ms)", "requests (%)", &cdf, Some(100.0)),
            ),
            (
                "Busy time (prefill, fetch, transfer) of each worker",
                line_chart("Per-worker load", "worker", "busy (s)", &load, None),
            ),
        ] {
            let _ = writeln!(
                page,
                "<figure>{svg}<figcaption>{}</figcaption></figure>",
                escape(caption)
            );
        }
        page.push_str("</body></html>\n");
        page
    }
}
