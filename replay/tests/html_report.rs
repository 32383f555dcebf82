//! The HTML report's plots, read back with an XML parser: each SVG is well-formed, names every
//! configuration (and the ideal hit rate) in a legend beside the plot, never over the data.

use kv_router_replay::hit_rate::{HitRatePoint, IdealHitRate};
use kv_router_replay::summary::RoleLoad;
use kv_router_replay::{ClusterConfig, Comparison, ConfigReport, WorkloadInfo};

/// The x where the legend panel starts (the plot is left of it).
const LEGEND_X: f64 = 700.0;

fn config(name: &str, roles: &[&str], scale: f64) -> ConfigReport {
    ConfigReport {
        name: name.to_owned(),
        router_mode: "kv".to_owned(),
        hit_rate_over_time: (0..10)
            .map(|i| HitRatePoint {
                t_s: f64::from(i) * 3.0,
                local: 0.4 * scale,
                reused: 0.5 * scale,
            })
            .collect(),
        ttft_cdf: (1..=50)
            .map(|i| (f64::from(i) * 7.5 * scale, f64::from(i) / 50.0))
            .collect(),
        load: roles
            .iter()
            .map(|role| RoleLoad {
                role: (*role).to_owned(),
                busy_s: vec![3.0 * scale, 2.5, 4.0 * scale, 1.0],
                max_over_mean: 1.2,
            })
            .collect(),
        ..ConfigReport::default()
    }
}

fn comparison() -> Comparison {
    Comparison {
        workload: WorkloadInfo {
            name: "generated".to_owned(),
            requests: 100,
            blocks: 1000,
            block_size: 16,
            span_s: 27.0,
            bad_lines: Vec::new(),
            ideal_hit_rate: IdealHitRate {
                overall: 0.8,
                over_time: (0..10)
                    .map(|i| HitRatePoint {
                        t_s: f64::from(i) * 3.0,
                        local: 0.8,
                        reused: 0.8,
                    })
                    .collect(),
            },
        },
        cluster: ClusterConfig::default().resolve(16).unwrap(),
        configs: vec![
            config("kvcr+kv_fetch", &["aggregated"], 1.0),
            config("a <b> & \"c\"", &["aggregated"], 0.9),
            config("split", &["prefill", "decode"], 0.7),
        ],
    }
}

/// The SVG documents of the page, in order.
fn svgs(html: &str) -> Vec<&str> {
    html.match_indices("<svg")
        .map(|(start, _)| {
            let end = start + html[start..].find("</svg>").expect("every svg is closed");
            &html[start..end + "</svg>".len()]
        })
        .collect()
}

/// The text nodes of an SVG with their x positions.
fn texts(document: &roxmltree::Document<'_>) -> Vec<(f64, String)> {
    document
        .descendants()
        .filter(|node| node.has_tag_name("text"))
        .map(|node| {
            let x = node
                .attribute("x")
                .and_then(|x| x.parse().ok())
                .unwrap_or(0.0);
            let text: String = node
                .descendants()
                .filter(roxmltree::Node::is_text)
                .filter_map(|child| child.text())
                .collect();
            (x, text.trim().to_owned())
        })
        .collect()
}

#[test]
fn every_plot_is_well_formed_and_names_every_configuration_beside_the_data() {
    let comparison = comparison();
    let html = comparison.to_html();
    let svgs = svgs(&html);
    assert_eq!(svgs.len(), 3, "hit rate, TTFT CDF, busy time");
    for (index, svg) in svgs.iter().enumerate() {
        let document = roxmltree::Document::parse(svg)
            .unwrap_or_else(|error| panic!("svg {index} is not well-formed: {error}"));
        let texts = texts(&document);
        for config in &comparison.configs {
            let legend = texts
                .iter()
                .find(|(_, text)| text.starts_with(&config.name))
                .unwrap_or_else(|| panic!("svg {index} does not name `{}`", config.name));
            assert!(legend.0 >= LEGEND_X, "svg {index}: legend over the plot");
        }
        // The data (points and bars) stays left of the legend panel; only the legend's small
        // swatches sit in it.
        for node in document.descendants() {
            let number = |name| node.attribute(name).and_then(|v| v.parse::<f64>().ok());
            match node.tag_name().name() {
                "circle" => {
                    let x = number("cx").unwrap();
                    assert!(x < LEGEND_X, "svg {index}: a data point at x = {x}");
                }
                "rect" if number("x").is_some_and(|x| x >= LEGEND_X) => {
                    let height = number("height").unwrap();
                    assert!(height <= 13.0, "svg {index}: a bar in the legend panel");
                }
                _ => {}
            }
        }
    }
}

#[test]
fn the_hit_rate_plot_carries_the_ideal_and_the_ttft_axis_is_logarithmic() {
    let comparison = comparison();
    let html = comparison.to_html();
    let svgs = svgs(&html);
    let hit_rate = roxmltree::Document::parse(svgs[0]).unwrap();
    assert!(
        texts(&hit_rate)
            .iter()
            .any(|(x, text)| *x >= LEGEND_X && text.starts_with("ideal")),
        "the ideal line is in the legend"
    );
    assert!(html.contains("Ideal hit rate (every block cached forever on one worker): 80.0%"));
    let ttft = roxmltree::Document::parse(svgs[1]).unwrap();
    let labels: Vec<String> = texts(&ttft).into_iter().map(|(_, text)| text).collect();
    assert!(labels.iter().any(|text| text.contains("logarithmic")));
    // Decades are labelled: 10 and 100 ms lie inside 7.5 ms .. 375 ms.
    assert!(labels.iter().any(|text| text == "10"), "{labels:?}");
    assert!(labels.iter().any(|text| text == "100"), "{labels:?}");
}

#[test]
fn busy_time_is_one_bar_per_worker_and_series() {
    let comparison = comparison();
    let html = comparison.to_html();
    let busy = roxmltree::Document::parse(svgs(&html)[2]).unwrap();
    // Series: two single-role configurations and the split one's two roles; four workers each.
    let series = 4;
    let workers = 4;
    let bars = busy
        .descendants()
        .filter(|node| node.has_tag_name("rect"))
        .filter(|node| {
            node.attribute("x")
                .and_then(|x| x.parse::<f64>().ok())
                .is_some_and(|x| x < LEGEND_X)
                && node.attribute("fill").is_some_and(|fill| fill != "none")
                && node.attribute("width") != Some("1000")
        })
        .count();
    assert_eq!(bars, series * workers);
    let labels: Vec<String> = texts(&busy).into_iter().map(|(_, text)| text).collect();
    assert!(labels.iter().any(|text| text == "split (prefill)"));
    assert!(labels.iter().any(|text| text == "split (decode)"));
}
