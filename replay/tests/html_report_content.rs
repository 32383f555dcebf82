//! The HTML report's content: the table holds exactly the terminal table's values, names from
//! file names are escaped everywhere (table and plots), and each plot draws every configuration.

use dynamo_kv_router::config::ConfigOverrides;
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_router_catalog as _;
use kv_router_replay::{
    ClusterConfig, Comparison, ReplayOptions, SyntheticWorkload, builtin_configs, compare,
};

/// A file name a user may well have: HTML-special characters in it.
const HOSTILE: &str = "a<b>&\"c\"'d.yaml";

fn comparison() -> Comparison {
    let registry = PolicyRegistry::linked().expect("the built-in catalog is consistent");
    let mut workload = SyntheticWorkload {
        sessions: 40,
        ..SyntheticWorkload::default()
    }
    .generate();
    workload.name = "trace <1> & co.jsonl".into();
    let mut configs = builtin_configs(&registry, &ConfigOverrides::default()).unwrap();
    configs[0].name = HOSTILE.into();
    let options = ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: 3,
            ..ClusterConfig::default()
        },
        ..ReplayOptions::default()
    };
    compare(&workload.prepare(), Vec::new(), &configs, &options).unwrap()
}

fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The content of every `<tag>…</tag>` element in `html`, in order.
fn cells<'a>(html: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    html.split(open.as_str())
        .skip(1)
        .filter_map(|rest| rest.split_once(close.as_str()).map(|(cell, _)| cell))
        .collect()
}

#[test]
fn the_table_holds_the_terminal_tables_values_escaped() {
    let comparison = comparison();
    let html = comparison.to_html();
    let table = &html[html.find("<table>").unwrap()..html.find("</table>").unwrap()];
    let headers = cells(table, "th");
    assert_eq!(
        headers[1..],
        [escaped(HOSTILE), comparison.configs[1].name.clone()]
    );
    let body = &table[table.find("<tbody>").unwrap()..];
    let rows: Vec<Vec<&str>> = cells(body, "tr")
        .into_iter()
        .map(|row| cells(row, "td"))
        .collect();
    let expected = comparison.rows();
    assert_eq!(rows.len(), expected.len());
    for (row, (label, values)) in rows.iter().zip(&expected) {
        assert_eq!(row[0], escaped(label));
        let values: Vec<String> = values.iter().map(|v| escaped(v)).collect();
        assert_eq!(row[1..], values, "{label}");
    }
    // Spot checks against the report's own numbers.
    let served = rows.iter().find(|r| r[0] == "requests served").unwrap();
    let config = &comparison.configs[0];
    assert_eq!(served[1], format!("{}/{}", config.served, config.requests));
    assert!(
        rows.iter()
            .any(|r| r[0] == "router view right / mean error")
    );
}

#[test]
fn names_from_files_are_escaped_in_the_text_and_the_plots() {
    let html = comparison().to_html();
    assert!(
        !html.contains("a<b>"),
        "a raw file name leaked into the page"
    );
    assert!(!html.contains("trace <1>"));
    assert!(html.contains("Workload: trace &lt;1&gt; &amp; co.jsonl"));
    let svgs: Vec<&str> = html.split("<svg").skip(1).collect();
    assert_eq!(svgs.len(), 3);
    for svg in &svgs {
        // Each plot's legend names both configurations, escaped for SVG text.
        assert!(
            svg.contains("a&lt;b&gt;&amp;"),
            "legend of the hostile name missing"
        );
        assert!(svg.contains("default-cost no-hints"));
    }
}
