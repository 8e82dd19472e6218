//! The parts of a `tracer run --json` report that `tracer diff` reads, and how a file
//! that is not such a report is told apart: empty, cut short, not JSON, another
//! document, an interval instead of the totals.
use std::collections::BTreeMap;

use serde::{de::IgnoredAny, Deserialize};
use tracer_common::hist::{bucket_index, bucket_upper};

use crate::model::{hist::Histogram, scheduler::Scheduler};

/// One report, as `tracer run --json` writes it (fields diff does not read are skipped).
#[derive(Clone, Debug, Deserialize)]
pub struct RunDoc {
    /// `model::report::SCHEMA`; 0 for reports from before the field.
    #[serde(default)]
    pub schema: u32,
    pub kind: String,
    pub time: String,
    pub duration_ns: u64,
    pub target: String,
    pub probe: String,
    pub probe_attach: String,
    pub runq_source: String,
    pub scheduler: Option<Scheduler>,
    pub cpus_utilized: f64,
    pub cpus_utilized_source: String,
    pub on_cpu_ns: u64,
    pub threads: Vec<ThreadDoc>,
    pub threads_total: u64,
    pub histograms: HistsDoc,
    #[serde(default)]
    pub drops: BTreeMap<String, u64>,
    pub counters: Option<CountersDoc>,
    pub command: Option<CommandDoc>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ThreadDoc {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub on_cpu_ns: u64,
    pub slices: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub runq_wait_ns: u64,
    pub runq_waits: u64,
    pub off_cpu_ns: u64,
    pub blocked_ns: u64,
    pub preempted_ns: u64,
    pub migrations: u64,
    /// Non-zero on a row that sums that many exited threads of the process.
    #[serde(default, rename = "folded_threads")]
    pub folded: u32,
    pub slice_counters: Option<BTreeMap<String, u64>>,
    pub counters: Option<BTreeMap<String, Option<f64>>>,
    pub histograms: Option<HistsDoc>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct HistsDoc {
    pub on_cpu: HistDoc,
    pub runq: HistDoc,
    pub off_cpu: HistDoc,
}

#[derive(Clone, Debug, Deserialize)]
pub struct HistDoc {
    pub sum_ns: u64,
    pub buckets: Vec<BucketDoc>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
pub struct BucketDoc {
    pub le_ns: u64,
    pub count: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CountersDoc {
    pub counters: Vec<CounterDoc>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CounterDoc {
    pub event: String,
    pub value: Option<f64>,
    #[serde(default)]
    pub unit: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CommandDoc {
    pub argv: Vec<String>,
}

impl HistDoc {
    /// The histogram again, from its non-empty buckets: percentiles of merged rows are
    /// then computed as the run computes them. Refuses a bound that is not one of the
    /// tracer's buckets.
    pub fn histogram(&self) -> Result<Histogram, String> {
        let mut h = Histogram::new();
        for b in &self.buckets {
            let i = bucket_index(b.le_ns);
            if bucket_upper(i) != b.le_ns {
                return Err(format!(
                    "le_ns {} is not a bucket bound of the tracer's histograms",
                    b.le_ns
                ));
            }
            h.add_bucket(i, b.count);
        }
        h.sum_ns = self.sum_ns;
        Ok(h)
    }
}

/// Why a file is not a report diff can compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DocError {
    Empty,
    /// The JSON ends inside a document.
    Truncated {
        line: usize,
        column: usize,
    },
    NotJson(String),
    /// Valid JSON, not a run report; says what it is when it can.
    NotARunReport(String),
    /// The last document is an interval of an interval run.
    NotTotal {
        interval: Option<u64>,
        documents: usize,
    },
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::Empty => write!(f, "empty, not a tracer report"),
            DocError::Truncated { line, column } => write!(
                f,
                "truncated: the JSON ends inside a document (line {line}, column {column}); \
                 was the run or the copy cut short?"
            ),
            DocError::NotJson(why) => write!(f, "not JSON, so not a tracer report ({why})"),
            DocError::NotARunReport(why) => {
                write!(f, "not a `tracer run --json` report: {why}")
            }
            DocError::NotTotal {
                interval,
                documents,
            } => {
                let which = interval.map_or("a report".to_string(), |i| format!("interval {i}"));
                if *documents > 1 {
                    write!(
                        f,
                        "its last report is {which}, not the total: the run ended before \
                         printing its totals (diff compares whole runs)"
                    )
                } else {
                    write!(
                        f,
                        "{which}, not a total report (diff compares whole runs: the last line \
                         of `tracer run -i ... --json` is the total)"
                    )
                }
            }
        }
    }
}

/// What a document's first keys say about it.
#[derive(Deserialize)]
struct Shape {
    kind: Option<String>,
    interval: Option<u64>,
    probe: Option<IgnoredAny>,
    threads: Option<IgnoredAny>,
    stacks: Option<IgnoredAny>,
    run_ok: Option<IgnoredAny>,
}

fn located(e: &serde_json::Error) -> String {
    // serde_json's message already ends with "at line L column C".
    e.to_string()
}

/// The total report in `bytes`: one document, or the last of JSON Lines (`-i`).
/// Returns it with the number of documents the file held.
pub fn parse(bytes: &[u8]) -> Result<(RunDoc, usize), DocError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(DocError::Empty);
    }
    // Where each document ends, without building any of them.
    let mut stream = serde_json::Deserializer::from_slice(bytes).into_iter::<IgnoredAny>();
    let mut bounds = Vec::new();
    let mut start = 0;
    loop {
        match stream.next() {
            None => break,
            Some(Ok(_)) => {
                let end = stream.byte_offset();
                bounds.push((start, end));
                start = end;
            }
            Some(Err(e)) if e.is_eof() => {
                return Err(DocError::Truncated {
                    line: e.line(),
                    column: e.column(),
                })
            }
            Some(Err(e)) => return Err(DocError::NotJson(located(&e))),
        }
    }
    let documents = bounds.len();
    let (s, e) = *bounds.last().ok_or(DocError::Empty)?;
    let last = &bytes[s..e];
    // Which field is wrong only for an object: serde's message for anything else names
    // this parser's own types ("expected struct Shape with 6 elements").
    let shape: Shape = serde_json::from_slice(last).map_err(|e| match kind_of(last) {
        "object" => DocError::NotARunReport(format!("a field of the wrong type ({})", located(&e))),
        k => DocError::NotARunReport(format!("a JSON {k} where a report object belongs")),
    })?;
    if shape.probe.is_none() || shape.threads.is_none() {
        let what = if shape.stacks.is_some() {
            "it looks like `tracer offcpu --json` output (it has `stacks`)"
        } else if shape.run_ok.is_some() {
            "it looks like `tracer check --json` output (it has `run_ok`)"
        } else {
            "it has no `probe` and `threads`"
        };
        return Err(DocError::NotARunReport(what.into()));
    }
    if shape.kind.as_deref() != Some("total") {
        return Err(DocError::NotTotal {
            interval: shape.interval,
            documents,
        });
    }
    let doc: RunDoc =
        serde_json::from_slice(last).map_err(|e| DocError::NotARunReport(located(&e)))?;
    // The histograms must read back, or merged percentiles would be wrong.
    let mut hists = vec![&doc.histograms];
    hists.extend(doc.threads.iter().filter_map(|t| t.histograms.as_ref()));
    for h in hists {
        for one in [&h.on_cpu, &h.runq, &h.off_cpu] {
            one.histogram().map_err(DocError::NotARunReport)?;
        }
    }
    Ok((doc, documents))
}

/// "array", "string", ... for a document that is not an object.
fn kind_of(doc: &[u8]) -> &'static str {
    match doc.iter().find(|c| !c.is_ascii_whitespace()) {
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b'{') => "object",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}
