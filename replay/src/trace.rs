//! Mooncake JSON Lines traces: one request a line with `timestamp` (ms), `input_length`,
//! `output_length` and `hash_ids` (one id per 512-token block).

use crate::workload::{Workload, WorkloadRequest};
use dynamo_kv_router::plugins::SessionContext;
use serde::Deserialize;
use std::io::BufRead;
use std::path::Path;

/// Tokens per `hash_ids` entry in Mooncake traces.
pub const MOONCAKE_BLOCK_SIZE: u32 = 512;

/// One line of a Mooncake trace, as written in the file (other fields are ignored).
#[derive(Debug, Deserialize)]
struct TraceLine {
    timestamp: f64,
    input_length: usize,
    output_length: usize,
    hash_ids: Vec<u64>,
}

/// A line of a trace that could not be used, with its 1-based line number.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BadLine {
    /// The 1-based line number in the file.
    pub line: usize,
    /// What was wrong with it.
    pub message: String,
}

/// A trace that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("cannot read trace `{path}`: {source}; check the path (--trace or KV_ROUTER_TRACE)")]
    Io {
        /// The trace file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A bad line in strict mode.
    #[error(
        "trace `{path}` line {line}: {message} (strict mode stops at the first bad line; drop --strict to skip it)"
    )]
    BadLine {
        /// The trace file.
        path: String,
        /// The 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// No usable request in the file.
    #[error(
        "trace `{path}` has no usable request ({bad} bad lines); expected Mooncake JSON Lines with timestamp, input_length, output_length, hash_ids"
    )]
    Empty {
        /// The trace file.
        path: String,
        /// How many lines were bad.
        bad: usize,
    },
}

/// A trace read into a workload, with the lines that were skipped.
#[derive(Clone, Debug)]
pub struct LoadedTrace {
    /// The usable requests.
    pub workload: Workload,
    /// Lines that were skipped (empty in strict mode, which fails instead).
    pub bad_lines: Vec<BadLine>,
}

/// Reads a Mooncake trace file; `strict` makes the first bad line an error instead of a skip.
pub fn read_trace_file(path: &Path, strict: bool) -> Result<LoadedTrace, TraceError> {
    let display = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: display.clone(),
        source,
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| display.clone());
    read_trace(std::io::BufReader::new(file), &display, &name, strict)
}

/// Reads a Mooncake trace from `reader`; `path` names it in errors, `name` names the workload.
pub fn read_trace(
    reader: impl BufRead,
    path: &str,
    name: &str,
    strict: bool,
) -> Result<LoadedTrace, TraceError> {
    let mut requests = Vec::new();
    let mut bad_lines = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let number = index + 1;
        let line = line.map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(&line) {
            Ok(request) => requests.push(request),
            Err(message) => {
                if strict {
                    return Err(TraceError::BadLine {
                        path: path.to_owned(),
                        line: number,
                        message,
                    });
                }
                tracing::warn!(
                    trace = path,
                    line = number,
                    "skipping bad trace line: {message}"
                );
                bad_lines.push(BadLine {
                    line: number,
                    message,
                });
            }
        }
    }
    if requests.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_owned(),
            bad: bad_lines.len(),
        });
    }
    let mut workload = Workload {
        name: name.to_owned(),
        block_size: MOONCAKE_BLOCK_SIZE,
        requests,
    };
    workload.sort_by_arrival();
    Ok(LoadedTrace {
        workload,
        bad_lines,
    })
}

fn parse_line(line: &str) -> Result<WorkloadRequest, String> {
    let parsed: TraceLine = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    if !parsed.timestamp.is_finite() || parsed.timestamp < 0.0 {
        return Err(format!(
            "timestamp {} must be a finite number of milliseconds ≥ 0",
            parsed.timestamp
        ));
    }
    let block = MOONCAKE_BLOCK_SIZE as usize;
    let full = parsed.input_length / block;
    let ceil = parsed.input_length.div_ceil(block);
    if parsed.hash_ids.len() < full || parsed.hash_ids.len() > ceil {
        return Err(format!(
            "hash_ids has {} ids but input_length {} needs {full}..={ceil} (one per {block}-token block)",
            parsed.hash_ids.len(),
            parsed.input_length
        ));
    }
    let mut block_ids = parsed.hash_ids;
    // Only full blocks are cached and routed on; the id of a trailing partial block is dropped.
    block_ids.truncate(full);
    Ok(WorkloadRequest {
        arrival_us: (parsed.timestamp * 1000.0).round() as u64,
        prompt_tokens: parsed.input_length,
        output_tokens: parsed.output_length,
        block_ids,
        session: SessionContext::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        r#"{"timestamp": 5, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 3]}"#;

    fn read(text: &str, strict: bool) -> Result<LoadedTrace, TraceError> {
        read_trace(text.as_bytes(), "t.jsonl", "t", strict)
    }

    #[test]
    fn parses_good_lines_and_drops_partial_block_ids() {
        let text = format!(
            "{GOOD}\n\n{}\n",
            r#"{"timestamp": 1.5, "input_length": 1024, "output_length": 9, "hash_ids": [1, 2], "extra": true}"#
        );
        let loaded = read(&text, true).unwrap();
        assert!(loaded.bad_lines.is_empty());
        let requests = &loaded.workload.requests;
        assert_eq!(requests.len(), 2);
        // Sorted by arrival: the 1.5 ms line comes first.
        assert_eq!(requests[0].arrival_us, 1500);
        assert_eq!(requests[0].block_ids, vec![1, 2]);
        assert_eq!(requests[1].arrival_us, 5000);
        assert_eq!(requests[1].block_ids, vec![1, 2]);
        assert_eq!(requests[1].prompt_tokens, 1100);
        assert_eq!(loaded.workload.block_size, 512);
    }

    #[test]
    fn bad_lines_are_reported_with_line_numbers() {
        let text = format!(
            "{GOOD}\nnot json\n{}\n{GOOD}\n{}\n",
            r#"{"timestamp": 1, "input_length": 5000, "output_length": 1, "hash_ids": [1]}"#,
            r#"{"timestamp": -3, "input_length": 10, "output_length": 1, "hash_ids": []}"#
        );
        let loaded = read(&text, false).unwrap();
        assert_eq!(loaded.workload.requests.len(), 2);
        let lines: Vec<usize> = loaded.bad_lines.iter().map(|b| b.line).collect();
        assert_eq!(lines, vec![2, 3, 5]);
        assert!(loaded.bad_lines[0].message.contains("invalid JSON"));
        assert!(loaded.bad_lines[1].message.contains("hash_ids has 1 ids"));
        assert!(loaded.bad_lines[2].message.contains("timestamp"));
    }

    #[test]
    fn strict_mode_fails_at_the_first_bad_line() {
        let text = format!("{GOOD}\n{GOOD}\n{{\"timestamp\": 1}}\n");
        let err = read(&text, true).unwrap_err();
        match &err {
            TraceError::BadLine { line, .. } => assert_eq!(*line, 3),
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("line 3"));
    }

    #[test]
    fn empty_trace_and_missing_file_are_errors() {
        assert!(matches!(
            read("\n\nnope\n", false),
            Err(TraceError::Empty { bad: 1, .. })
        ));
        let missing = read_trace_file(Path::new("/definitely/not/here.jsonl"), false);
        assert!(matches!(missing, Err(TraceError::Io { .. })));
    }
}
