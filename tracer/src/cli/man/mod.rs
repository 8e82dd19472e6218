//! The written half of the man pages: per page, the sections clap's definitions cannot
//! give (DEFINITIONS, EXAMPLES, EXIT STATUS, SEE ALSO, ...), in a small markup in the
//! `.txt` files beside this one, plus the sections generated from the code itself:
//! tracer-top(1)'s KEYS from the TUI's key table, tracer-serve(1)'s METRICS from the
//! table `metrics.rs` keeps (tested against what the exporter encodes), and EXIT STATUS.
//!
//! The markup, one construct a line:
//!
//! | line              | becomes |
//! |-------------------|---------|
//! | `# TITLE`         | a section (`.SH`) |
//! | `## Title`        | a subsection (`.SS`) |
//! | empty             | a paragraph break |
//! | `$ command`       | an example command line, checked against the clap definitions by a test; consecutive ones make one indented, unfilled block |
//! | `\| text`         | a verbatim line (sample output), in such a block too |
//! | `* term`          | a tagged paragraph: the term in bold, the lines after it its text |
//! | `- item`          | a bullet item (the lines after it continue it) |
//! | `@keys`, `@metrics`, `@web-config`, `@exit` | a generated section |
//! | anything else     | text, filled; `` `code` `` is set in bold |
use clap_mangen::roff::{bold, roman, Inline, Roff};

use crate::output::{stdout::EXIT_OUTPUT_CLOSED, tui::keys::BINDINGS};

pub mod metrics;

/// The written sections of page `name` (`tracer`, `run`, `top`, ...), rendered.
pub fn sections(name: &str) -> Roff {
    let text = match name {
        "tracer" => include_str!("tracer.txt"),
        "run" => include_str!("run.txt"),
        "record" => include_str!("record.txt"),
        "slow" => include_str!("slow.txt"),
        "top" => include_str!("top.txt"),
        "dtl" => include_str!("dtl.txt"),
        "check" => include_str!("check.txt"),
        "offcpu" => include_str!("offcpu.txt"),
        "serve" => include_str!("serve.txt"),
        "diff" => include_str!("diff.txt"),
        _ => "",
    };
    render(name, text)
}

/// Inline markup: `` `code` `` in bold, the rest roman.
fn inlines(text: &str) -> Vec<Inline> {
    text.split('`')
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .map(|(i, s)| if i % 2 == 1 { bold(s) } else { roman(s) })
        .collect()
}

/// What the lines since the last blank one were.
#[derive(PartialEq)]
enum Block {
    None,
    Text,
    Example,
}

fn render(page: &str, text: &str) -> Roff {
    let mut r = Roff::new();
    let mut block = Block::None;
    for line in text.lines() {
        let line = line.trim_end();
        let verbatim = line.strip_prefix("$ ").or_else(|| line.strip_prefix("| "));
        if block == Block::Example && verbatim.is_none() {
            r.control("fi", []).control("RE", []);
            block = Block::None;
        }
        if line.is_empty() {
            block = Block::None;
        } else if let Some(t) = line.strip_prefix("## ") {
            r.control("SS", [t]);
            block = Block::None;
        } else if let Some(t) = line.strip_prefix("# ") {
            r.control("SH", [t]);
            block = Block::None;
        } else if let Some(cmd) = verbatim {
            if block != Block::Example {
                r.control("PP", []).control("RS", ["4"]).control("nf", []);
                block = Block::Example;
            }
            r.text([roman(cmd)]);
        } else if let Some(term) = line.strip_prefix("* ") {
            r.control("TP", []).text(inlines(term));
            block = Block::Text;
        } else if let Some(item) = line.strip_prefix("- ") {
            r.control("IP", ["\\(bu", "2"]).text(inlines(item));
            block = Block::Text;
        } else if line == "@keys" {
            keys(&mut r);
        } else if line == "@metrics" {
            metrics::section(&mut r);
        } else if line == "@web-config" {
            metrics::web_config_section(&mut r);
        } else if line == "@exit" {
            exit_status(&mut r, page);
        } else {
            if block == Block::None {
                r.control("PP", []);
            }
            r.text(inlines(line));
            block = Block::Text;
        }
    }
    if block == Block::Example {
        r.control("fi", []).control("RE", []);
    }
    r
}

/// tracer-top(1)'s KEYS, from the table the TUI's footer and key handling are tested
/// against.
fn keys(r: &mut Roff) {
    r.control("SH", ["KEYS"]);
    for b in BINDINGS {
        let names: Vec<String> = b.keys.iter().map(|k| k.name()).collect();
        r.control("TP", [])
            .text([bold(names.join(" "))])
            .text([roman(b.does)]);
    }
}

/// The commands that trace a window and may start `-- COMMAND`.
const TRACING: &[&str] = &["run", "record", "slow", "top", "offcpu"];

/// EXIT STATUS, as `cli::main` and the commands return it.
fn exit_status(r: &mut Roff, page: &str) {
    let closed = EXIT_OUTPUT_CLOSED.to_string();
    let mut rows: Vec<(&str, String)> = Vec::new();
    match page {
        p if TRACING.contains(&p) => {
            let how = if p == "top" { "q, " } else { "" };
            rows.push((
                "0",
                format!(
                    "The window ended ({how}its --duration, Ctrl-C, SIGTERM, SIGHUP, or every \
                     -p/-t target gone) and the report was written."
                ),
            ));
            rows.push((
                "COMMAND's status",
                "With -- COMMAND: the command's exit status, 128+N when signal N killed it (as a \
                 shell reports it); 0 when it was still running as the window ended (it goes on, \
                 untraced). A command's own 2 cannot be told from the tracer's."
                    .into(),
            ));
        }
        "check" => {
            rows.push((
                "0",
                "This machine can trace: the capabilities are there and at least one probe mode \
                 loads and attaches."
                    .into(),
            ));
            rows.push((
                "1",
                "It cannot: the report says what is missing (privileges, or no probe mode that \
                 loads)."
                    .into(),
            ));
        }
        "serve" => rows.push((
            "0",
            "Stopped by SIGINT, SIGTERM or SIGHUP, after detaching its programs.".into(),
        )),
        "diff" => rows.push((
            "0",
            "Both reports were read and compared, and the comparison was written.".into(),
        )),
        "dtl" => rows.push((
            "0",
            "The statistics were read and printed; the settings it changed are restored.".into(),
        )),
        _ => rows.push((
            "0",
            "Success. Each command's own page says more (tracer-check(1) returns 1 when \
             the machine cannot trace; a traced COMMAND's status is returned as its own)."
                .into(),
        )),
    }
    rows.push((
        "2",
        "An error, in one line on standard error (`tracer: error: ...`), or a usage error \
         (clap's message and the usage)."
            .into(),
    ));
    rows.push((
        &closed,
        "Standard output was closed by its reader (`| head -1`): 128+SIGPIPE, what a shell \
         reports for a tool SIGPIPE ended; the run ends quietly."
            .into(),
    ));
    r.control("SH", ["EXIT STATUS"]);
    for (code, what) in rows {
        r.control("TP", []).text([bold(code)]).text(inlines(&what));
    }
}

#[cfg(test)]
mod tests;
