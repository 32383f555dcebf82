//! The report's SVG charts, drawn with plotters: line charts (linear or logarithmic time axis)
//! and grouped bars, each with its legend in a panel beside the plot so it never covers data.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Width of a whole chart, legend panel included.
const WIDTH: u32 = 1000;
/// Height of a chart.
const HEIGHT: u32 = 380;
/// Width of the legend panel at the right of the plot.
const LEGEND_WIDTH: u32 = 300;
/// Longest legend label, in characters, before it is shortened with an ellipsis.
const LEGEND_CHARS: usize = 46;

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

/// Whose a series is: a configuration (and stage), or the workload's reference line.
#[derive(Clone, Copy)]
pub(super) enum Owner {
    /// A configuration's position in the comparison and the stage (0 first; later stages are
    /// drawn lighter).
    Config { config: usize, stage: usize },
    /// A reference that belongs to no configuration, drawn black and dashed.
    Reference,
}

/// One series of a chart: its label, its points, and whose it is.
pub(super) struct Series {
    pub(super) label: String,
    pub(super) points: Vec<(f64, f64)>,
    pub(super) owner: Owner,
}

impl Series {
    fn color(&self) -> RGBAColor {
        match self.owner {
            Owner::Config { config, stage } => {
                let base = CONFIG_COLORS[config % CONFIG_COLORS.len()];
                if stage == 0 {
                    base.to_rgba()
                } else {
                    base.mix(0.45)
                }
            }
            Owner::Reference => BLACK.to_rgba(),
        }
    }
}

/// The axes of a chart.
pub(super) struct Axes<'a> {
    pub(super) title: &'a str,
    pub(super) x_label: &'a str,
    pub(super) y_label: &'a str,
    /// The top of the y axis; `None` fits the data.
    pub(super) y_max: Option<f64>,
}

/// How a chart draws its series.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// Lines over a linear x axis.
    Lines,
    /// Lines over a logarithmic x axis (positive x only).
    LogLines,
    /// One bar per series at each integer x, grouped side by side.
    Bars,
}

/// Draws a chart to an SVG string; a drawing error becomes a short note instead.
pub(super) fn chart(axes: &Axes<'_>, style: Style, series: &[Series]) -> String {
    let mut svg = String::new();
    match draw(&mut svg, axes, style, series) {
        Ok(()) => svg,
        Err(error) => format!(
            "<p>could not draw “{}”: {}</p>",
            super::escape(axes.title),
            super::escape(&error)
        ),
    }
}

fn draw(svg: &mut String, axes: &Axes<'_>, style: Style, series: &[Series]) -> Result<(), String> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(text)?;
    let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
    let bounds = Bounds::of(series, style);
    let y_top = axes.y_max.unwrap_or(bounds.y_top);
    match style {
        Style::Lines => {
            let x = bounds.x_min..bounds.x_max;
            let key_points = LINEAR_KEY_POINTS;
            plot_lines(&plot, axes, x, key_points, y_top, series, &|v| {
                axis_number(*v)
            })?;
        }
        Style::LogLines => {
            let (low, high) = bounds.log_range();
            let x = (low..high).log_scale();
            let key_points = log_key_points(low, high);
            plot_lines(&plot, axes, x, key_points, y_top, series, &log_axis_number)?;
        }
        Style::Bars => plot_bars(&plot, axes, &bounds, y_top, series)?,
    }
    draw_legend(&legend, style, series)?;
    root.present().map_err(text)?;
    Ok(())
}

fn text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// The data's extent.
struct Bounds {
    x_min: f64,
    x_max: f64,
    y_top: f64,
}

impl Bounds {
    fn of(series: &[Series], style: Style) -> Self {
        let (mut x_min, mut x_max, mut y_top) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        for (x, y) in series.iter().flat_map(|s| s.points.iter()) {
            if style == Style::LogLines && *x <= 0.0 {
                continue;
            }
            x_min = x_min.min(*x);
            x_max = x_max.max(*x);
            y_top = y_top.max(*y);
        }
        if !x_min.is_finite() {
            (x_min, x_max) = (if style == Style::LogLines { 1.0 } else { 0.0 }, 1.0);
        }
        if x_max <= x_min {
            x_max = if style == Style::LogLines {
                x_min * 10.0
            } else {
                x_min + 1.0
            };
        }
        let y_top = if y_top > 0.0 { y_top * 1.05 } else { 1.0 };
        Self {
            x_min,
            x_max,
            y_top,
        }
    }

    /// The x extent of a logarithmic axis, to a little past the data. Plotters ticks only the
    /// decades that start inside the axis, so it starts at the power of ten below the data
    /// when that leaves less than half a decade empty (data from 12 ms gets its ticks at 20 and
    /// 50 ms); further below, it starts at the data.
    fn log_range(&self) -> (f64, f64) {
        let low = self.x_min.max(1e-3);
        let exponent = low.log10();
        let low = if exponent - exponent.floor() < 0.5 {
            10f64.powi(exponent.floor() as i32)
        } else {
            low
        };
        (low, self.x_max.max(low) * 1.05)
    }
}

/// Key points a linear x axis asks plotters for (plotters' own default).
const LINEAR_KEY_POINTS: usize = 10;

/// Key points a logarithmic x axis from `low` to `high` asks plotters for: enough that it puts
/// a tick at 1 to 9 times every power of ten (only 1, 2 and 5 are labelled, see
/// [`log_axis_number`]).
fn log_key_points(low: f64, high: f64) -> usize {
    let decades = (high / low).log10().ceil().max(1.0) as usize;
    10 * decades + 1
}

/// A number on an axis: as few digits as its size needs.
fn axis_number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A number on a logarithmic axis: only 1, 2 and 5 times a power of ten are labelled, so the
/// labels stay apart where the decades are narrow.
fn log_axis_number(value: &f64) -> String {
    if *value <= 0.0 {
        return String::new();
    }
    let mantissa = value / 10f64.powf(value.log10().floor());
    if [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|wanted| (mantissa - wanted).abs() < 0.02 * wanted)
    {
        axis_number(*value)
    } else {
        String::new()
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The frame every chart shares: title, margins and room for the axis labels.
fn builder<'a, 'b>(area: &'a Area<'b>, axes: &Axes<'_>) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(axes.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    builder
}

fn plot_lines<X>(
    area: &Area<'_>,
    axes: &Axes<'_>,
    x: X,
    x_key_points: usize,
    y_top: f64,
    series: &[Series],
    x_format: &dyn Fn(&f64) -> String,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = builder(area, axes)
        .build_cartesian_2d(x, 0.0..y_top)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc(axes.x_label)
        .y_desc(axes.y_label)
        .x_labels(x_key_points)
        .x_label_formatter(x_format)
        .y_label_formatter(&|v| axis_number(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(text)?;
    for one in series {
        let color = one.color();
        let points = one.points.iter().copied();
        match one.owner {
            Owner::Reference => {
                chart
                    .draw_series(DashedLineSeries::new(points, 8, 5, color.stroke_width(2)))
                    .map_err(text)?;
            }
            Owner::Config { .. } => {
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)).point_size(2))
                    .map_err(text)?;
            }
        }
    }
    Ok(())
}

/// Bars at x = 0, 1, 2, …: at each x, one bar per series side by side, in series order.
fn plot_bars(
    area: &Area<'_>,
    axes: &Axes<'_>,
    bounds: &Bounds,
    y_top: f64,
    series: &[Series],
) -> Result<(), String> {
    let slots = bounds.x_max.max(0.0).round() as usize + 1;
    let x_range: RangedCoordf64 = (-0.5..slots as f64 - 0.5).into();
    let mut chart = builder(area, axes)
        .build_cartesian_2d(x_range, 0.0..y_top)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc(axes.x_label)
        .y_desc(axes.y_label)
        .x_labels(slots.min(24) + 1)
        .x_label_formatter(&|v| {
            let nearest = v.round();
            if (v - nearest).abs() < 1e-6 && nearest >= 0.0 {
                format!("{nearest:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| axis_number(*v))
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(text)?;
    let group = 0.8;
    let width = group / series.len().max(1) as f64;
    for (position, one) in series.iter().enumerate() {
        let color = one.color();
        let left = -group / 2.0 + position as f64 * width;
        chart
            .draw_series(one.points.iter().map(|(x, y)| {
                let x0 = x + left;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.9, *y)], color.filled())
            }))
            .map_err(text)?;
    }
    Ok(())
}

/// The legend panel: a swatch and a label per series, top to bottom.
fn draw_legend(area: &Area<'_>, style: Style, series: &[Series]) -> Result<(), String> {
    let font = ("sans-serif", 13).into_font().color(&BLACK);
    let mut y = 44;
    for one in series {
        let color = one.color();
        match (style, one.owner) {
            (Style::Bars, _) => {
                area.draw(&Rectangle::new([(8, y - 6), (22, y + 6)], color.filled()))
                    .map_err(text)?;
            }
            (_, Owner::Reference) => {
                area.draw(&PathElement::new(
                    vec![(4, y), (10, y)],
                    color.stroke_width(2),
                ))
                .map_err(text)?;
                area.draw(&PathElement::new(
                    vec![(15, y), (22, y)],
                    color.stroke_width(2),
                ))
                .map_err(text)?;
            }
            (_, Owner::Config { .. }) => {
                area.draw(&PathElement::new(
                    vec![(4, y), (22, y)],
                    color.stroke_width(2),
                ))
                .map_err(text)?;
            }
        }
        area.draw(&Text::new(shorten(&one.label), (30, y - 7), font.clone()))
            .map_err(text)?;
        y += 22;
    }
    Ok(())
}

/// The label, cut to [`LEGEND_CHARS`] characters with an ellipsis.
fn shorten(label: &str) -> String {
    if label.chars().count() <= LEGEND_CHARS {
        return label.to_owned();
    }
    let kept: String = label.chars().take(LEGEND_CHARS - 1).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The x-axis labels of a logarithmic chart of one series over `xs`.
    fn log_axis_labels(xs: &[f64]) -> Vec<String> {
        let axes = Axes {
            title: "t",
            x_label: "x",
            y_label: "y",
            y_max: Some(1.0),
        };
        let series = [Series {
            label: "one".into(),
            points: xs.iter().map(|x| (*x, 0.5)).collect(),
            owner: Owner::Config {
                config: 0,
                stage: 0,
            },
        }];
        let svg = chart(&axes, Style::LogLines, &series);
        let document = roxmltree::Document::parse(&svg).unwrap();
        document
            .descendants()
            .filter(|node| node.has_tag_name("text"))
            .filter_map(|node| node.text())
            .map(|text| text.trim().to_owned())
            .collect()
    }

    #[test]
    fn a_log_axis_labels_the_first_decade_of_data_that_starts_just_above_a_power_of_ten() {
        let labels = log_axis_labels(&[12.0, 40.0, 150.0, 420.0]);
        for wanted in ["20", "50", "100", "200"] {
            assert!(
                labels.iter().any(|label| label == wanted),
                "{wanted} in {labels:?}"
            );
        }
    }

    #[test]
    fn a_log_axis_starts_at_the_data_when_the_power_of_ten_below_is_far() {
        assert_eq!(
            Bounds::of(
                &[Series {
                    label: String::new(),
                    points: vec![(60.0, 1.0), (400.0, 1.0)],
                    owner: Owner::Reference,
                }],
                Style::LogLines
            )
            .log_range()
            .0,
            60.0
        );
        let labels = log_axis_labels(&[60.0, 400.0]);
        assert!(labels.iter().any(|label| label == "100"), "{labels:?}");
        assert!(!labels.iter().any(|label| label == "10"), "{labels:?}");
    }
}
