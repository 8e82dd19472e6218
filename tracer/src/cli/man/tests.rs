//! The man pages as a reader gets them: rendered by groff without a warning, each with
//! the sections it promises, every example a command line the definitions accept, and
//! the generated sections equal to what the code does (keys, metrics, web config).
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
};

use clap::{CommandFactory as _, Parser as _};

use super::metrics::{METRICS, WEB_CONFIG_EXAMPLE};
use crate::{cli::Cli, output::tui::keys::BINDINGS};

/// The written text of every page, by name.
const TEXTS: &[(&str, &str)] = &[
    ("tracer", include_str!("tracer.txt")),
    ("run", include_str!("run.txt")),
    ("record", include_str!("record.txt")),
    ("slow", include_str!("slow.txt")),
    ("top", include_str!("top.txt")),
    ("dtl", include_str!("dtl.txt")),
    ("check", include_str!("check.txt")),
    ("offcpu", include_str!("offcpu.txt")),
    ("serve", include_str!("serve.txt")),
    ("diff", include_str!("diff.txt")),
];

/// The pages, rendered into a directory of their own.
fn pages() -> (PathBuf, Vec<PathBuf>) {
    let dir = std::env::temp_dir().join(format!(
        "tracer-man-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let pages = crate::cli::generate::man_pages(&dir).unwrap();
    (dir, pages)
}

/// groff, or a failure that names the package (`cargo xtask test` installs it).
fn groff(args: &[&str], page: &Path) -> std::process::Output {
    Command::new("groff")
        .args(args)
        .arg(page)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run groff ({e}): install the groff-base package (cargo xtask test does)")
        })
}

/// A page as a reader sees it, whitespace folded: no hyphenation, a wide line, no
/// bold/underline overstriking.
fn text(page: &Path) -> String {
    let out = groff(
        &["-man", "-Tutf8", "-rHY=0", "-rLL=300n", "-P", "-cbou"],
        page,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fold(&String::from_utf8_lossy(&out.stdout))
}

fn fold(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn page_name(p: &Path) -> String {
    let f = p.file_stem().unwrap().to_string_lossy();
    f.strip_prefix("tracer-").unwrap_or(&f).to_string()
}

#[test]
fn every_page_renders_without_a_warning() {
    let (dir, pages) = pages();
    assert!(!pages.is_empty());
    for p in &pages {
        // -ww: every warning category; -z: no output, only diagnostics.
        let out = groff(&["-ww", "-z", "-b", "-man", "-Tutf8"], p);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.trim().is_empty(),
            "{}: groff -ww says:\n{err}",
            p.display()
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_page_has_its_sections() {
    let (dir, pages) = pages();
    let sections = |name: &str| -> Vec<&str> {
        let mut s = vec![
            "NAME",
            "SYNOPSIS",
            "OPTIONS",
            "EXIT STATUS",
            "EXAMPLES",
            "SEE ALSO",
        ];
        s.extend(match name {
            "run" => &["DEFINITIONS", "TARGETS", "OUTPUT"][..],
            "top" => &["KEYS", "COLUMNS"],
            "serve" => &["METRICS", "WEB CONFIGURATION"],
            "record" => &["FILE FORMAT"],
            "offcpu" => &["DEFINITIONS"],
            "tracer" => &["SUBCOMMANDS"],
            _ => &[],
        });
        s
    };
    assert_eq!(pages.len(), TEXTS.len(), "a page without written sections");
    for p in &pages {
        let name = page_name(p);
        let roff = std::fs::read_to_string(p).unwrap();
        for s in sections(&name) {
            let heading = if s.contains(' ') {
                format!(".SH \"{s}\"\n")
            } else {
                format!(".SH {s}\n")
            };
            assert!(roff.contains(&heading), "{name}: no {s} section");
        }
    }
    let run = text(&dir.join("tracer-run.1"));
    for term in [
        "on-CPU time",
        "slice",
        "run-queue wait",
        "off-CPU time",
        "blocked",
        "preempted",
        "CPUs utilized",
    ] {
        assert!(run.contains(term), "tracer-run(1) does not define {term}");
    }
    let check = std::fs::read_to_string(dir.join("tracer-check.1")).unwrap();
    assert!(
        check.contains(".TP\n\\fB1\\fR\n"),
        "check's status 1 is in its page"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn top_lists_every_key_of_the_key_table() {
    let (dir, _) = pages();
    let top = text(&dir.join("tracer-top.1"));
    for b in BINDINGS {
        let names: Vec<String> = b.keys.iter().map(|k| k.name()).collect();
        let want = fold(&format!("{} {}", names.join(" "), b.does));
        assert!(top.contains(&want), "tracer-top(1) lacks «{want}»");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// An exposition with something in every family the exporter has.
fn every_family() -> crate::model::series::Exposition {
    use crate::model::series::{Book, CgroupCpu, DtlVcpu, Exposition, Owner, ProgramStats};
    use crate::sys::cgroups::{Pressure, Throttling};
    let cgroup = "/system.slice/a.service";
    let mut book = Book::new(10, 10, u64::MAX);
    let mut d = tracer_common::ThreadStats::zeroed();
    d.on_cpu_ns = 1_000_000;
    let o = Owner {
        pid: 42,
        comm: "w",
        cgroup,
    };
    book.add_thread(o, &d, 1);
    let mut h = crate::model::snapshot::HistSet::new();
    h.runq.record(1500);
    book.add_hist(o, &h, 1);
    let mut dispatch = crate::model::hist::Histogram::new();
    dispatch.record(2000);
    let pressure = Pressure {
        some_ns: 5,
        full_ns: Some(3),
    };
    let mut cpu = CgroupCpu::default();
    cpu.update(
        Some(Throttling {
            periods: 2,
            throttled_periods: 1,
            throttled_ns: 7,
        }),
        Some(pressure),
    );
    Exposition {
        book,
        bounds_ns: crate::output::openmetrics::default_bounds_ns(),
        probe: "tp-btf".into(),
        runq_source: "wakeup".into(),
        cpu_busy_ns: vec![5],
        cpu_steal_ns: vec![1],
        drops: vec![("ring_full".into(), 0)],
        programs: vec![ProgramStats {
            name: "switch".into(),
            run_time_ns: 9,
            run_count: 3,
        }],
        map_entries: 3,
        hist_entries: 2,
        hist_map: "hist_scoped",
        self_cpu_s: 0.5,
        self_rss_bytes: 1 << 20,
        vcpu_dispatch: vec![(0, [8, 1, 2, 3, 2, 4, 3, 1])],
        dtl: vec![DtlVcpu {
            cpu: 0,
            dispatch,
            entries: 1,
            gaps: 0,
        }],
        cgroup_labels: Default::default(),
        cgroup_cpu: [(cgroup.to_string(), cpu)].into(),
        host_pressure: Some(pressure),
        cgroups_filtered: 0,
        cgroup_names: 1,
        cgroup_walks: 1,
        runqlen: vec![crate::model::runqlen::CpuSamples {
            cpu: 0,
            samples: 3,
            waiting: 2,
            slots: [1, 1, 0].into_iter().chain([1]).collect(),
        }],
    }
}

/// (name, type) of every family in the exporter's classic text.
fn encoded_families() -> BTreeSet<(String, String)> {
    use crate::output::openmetrics::{encode, Format};
    let text = encode(Arc::new(Mutex::new(every_family())), Format::Classic).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_string(), kind.to_string())
        })
        .collect()
}

#[test]
fn serve_documents_exactly_the_families_the_exporter_encodes() {
    let got = encoded_families();
    let documented: BTreeSet<(String, String)> = METRICS
        .iter()
        .map(|m| (m.name.to_string(), m.kind.to_string()))
        .collect();
    let missing: Vec<_> = got.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&got).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "tracer-serve(1)'s METRICS (cli/man/metrics.rs) and the exporter differ:\n\
         encoded but not documented: {missing:?}\ndocumented but not encoded: {stale:?}"
    );
    assert_eq!(documented.len(), METRICS.len(), "a metric listed twice");
    let (dir, _) = pages();
    let page = text(&dir.join("tracer-serve.1"));
    for m in METRICS {
        assert!(
            page.contains(&format!("{} {}", m.name, m.kind)),
            "{}",
            m.name
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The specimen above must reach every family the exporter's source names: a new family
/// whose data the specimen leaves empty would be encoded by nobody here and slip past
/// the test above.
#[test]
fn the_specimen_reaches_every_family_the_exporter_names() {
    let names: BTreeSet<String> = encoded_families().into_iter().map(|(n, _)| n).collect();
    let sources = [
        include_str!("../../output/openmetrics/mod.rs"),
        include_str!("../../output/openmetrics/machine.rs"),
    ];
    let mut seen = 0;
    for src in sources {
        // The exporter's code, not its tests; escaped quotes out of the way.
        let src = src
            .split("#[cfg(test)]")
            .next()
            .unwrap()
            .replace("\\\"", "");
        for lit in src.split('"').skip(1).step_by(2) {
            if !(lit.starts_with("tracer_") || lit.starts_with("process_")) || lit.contains(' ') {
                continue;
            }
            for scope in ["cgroup", "process"] {
                let base = lit.replace("{scope}", scope);
                let base = base.split("_{").next().unwrap();
                seen += 1;
                assert!(
                    names
                        .iter()
                        .any(|n| n == base || n.starts_with(&format!("{base}_"))),
                    "the exporter names {lit}, which the specimen does not encode"
                );
            }
        }
    }
    assert!(seen > 40, "the scan found only {seen} names");
}

#[test]
fn the_web_config_example_is_accepted_by_the_exporter() {
    let cfg = crate::sys::webconfig::WebConfig::parse(WEB_CONFIG_EXAMPLE, Path::new("/etc/tracer"))
        .unwrap();
    let (cert, key) = cfg.tls.expect("the example has TLS");
    assert_eq!(cert, Path::new("/etc/tracer/server.crt"));
    assert_eq!(key, Path::new("/etc/tracer/server.key"));
    assert_eq!(cfg.users.keys().collect::<Vec<_>>(), ["prometheus"]);
}

/// Shell words of an example: quotes removed, cut at a pipe or a redirection.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in line.split_whitespace() {
        if matches!(w, "|" | ">" | "<" | "2>") {
            break;
        }
        out.push(w.trim_matches('\'').to_string());
    }
    out
}

#[test]
fn every_example_is_a_command_line_tracer_accepts() {
    let mut n = 0;
    for (page, text) in TEXTS {
        for line in text.lines().filter_map(|l| l.strip_prefix("$ ")) {
            let w = words(line);
            assert_eq!(w[..2], ["sudo", "tracer"], "{page}: {line}");
            if *page != "tracer" {
                assert_eq!(
                    w[2], *page,
                    "tracer-{page}(1) shows another command: {line}"
                );
            }
            if let Err(e) = Cli::try_parse_from(&w[1..]) {
                panic!("tracer-{page}(1)'s example `{line}` does not parse:\n{e}");
            }
            n += 1;
        }
    }
    assert!(n >= 30, "{n} examples");
    // And every subcommand with a page has examples.
    for sub in Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
    {
        let (_, text) = TEXTS
            .iter()
            .find(|(p, _)| *p == sub.get_name())
            .unwrap_or_else(|| panic!("no written sections for {}", sub.get_name()));
        assert!(text.contains("\n$ sudo tracer "), "{}", sub.get_name());
    }
}
