//! Summaries of the samples, the printed tables and the target checks.

use std::{collections::BTreeSet, path::Path, time::Duration};

use serde::Serialize;

use super::{
    inspect::clock_ticks,
    measure::Row,
    stats::{max, median, min, print_table, round},
    tools::{Expect, Tool},
    workloads::{strings, Config, Load},
};

/// One target check on a tracer row.
#[derive(Serialize)]
pub(super) struct Target {
    pub(super) load: &'static str,
    pub(super) tool: String,
    pub(super) what: &'static str,
    pub(super) value: f64,
    pub(super) limit: f64,
    pub(super) unit: &'static str,
    pub(super) met: bool,
}

pub(super) struct Summary {
    pub(super) ns: f64,
    /// Minus the bpf_stats overhead of each program run.
    pub(super) net_ns: f64,
    pub(super) net_x_libbpf: f64,
    /// The programs' net run time as % of the load's own CPU time: the throughput loss to
    /// expect from the programs alone, independent of the run-to-run noise.
    pub(super) bpf_share_pct: f64,
    pub(super) x_floor: f64,
    pub(super) x_libbpf: f64,
    pub(super) loss_pct: f64,
    pub(super) cpu_pct: f64,
    pub(super) cpu_pct_schedstat: f64,
    pub(super) rss_mib: f64,
    pub(super) startup_ms: f64,
    pub(super) startup_cpu_ms: f64,
}

pub(super) struct Report<'a> {
    pub(super) rows: Vec<Row>,
    pub(super) tools: &'a [Tool],
    pub(super) expects: &'a [Vec<Expect>],
    pub(super) loads: &'a [Load],
    pub(super) cfg: &'a Config,
    pub(super) quick: bool,
    pub(super) tracer: &'a Path,
    pub(super) stats_method: &'static str,
    /// Per load: ns/run samples of the empty program, and its size in bytes.
    pub(super) overhead: Vec<(&'static str, Vec<f64>, u64)>,
    pub(super) niced: bool,
    pub(super) stats_sysctl: String,
    pub(super) load_before: String,
    pub(super) load_after: String,
    pub(super) elapsed: Duration,
    pub(super) serve: Option<super::serve::ServeRow>,
}

impl Report<'_> {
    pub(super) fn find(&self, load: &str, key: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.load == load && r.tool_key == key)
    }

    /// The bpf_stats overhead per program run under `load`, in ns.
    pub(super) fn overhead(&self, load: &str) -> f64 {
        self.overhead
            .iter()
            .find(|o| o.0 == load)
            .map_or(0.0, |o| median(&o.1))
    }

    pub(super) fn net_ns(&self, r: &Row) -> f64 {
        median(&r.ns_per_switch)
            - self.overhead(r.load) * r.bpf_runs as f64 / r.switches.max(1) as f64
    }

    pub(super) fn summary(&self, r: &Row) -> Summary {
        let ns = median(&r.ns_per_switch);
        let net_ns = self.net_ns(r);
        let of = |key| {
            self.find(r.load, key)
                .map_or(f64::NAN, |o| ns / median(&o.ns_per_switch))
        };
        let net_of = |key| {
            self.find(r.load, key)
                .map_or(f64::NAN, |o| net_ns / self.net_ns(o))
        };
        let hz = clock_ticks();
        let stats_ns = self.overhead(r.load) * r.bpf_runs as f64;
        let load_ns = r.load_ticks as f64 / hz * 1e9;
        Summary {
            ns,
            net_ns,
            net_x_libbpf: net_of(r.versus),
            bpf_share_pct: (r.bpf_ns as f64 - stats_ns) / (load_ns - stats_ns) * 100.0,
            x_floor: of("floor"),
            x_libbpf: of(r.versus),
            loss_pct: (1.0 - median(&r.with) / median(&r.without)) * 100.0,
            cpu_pct: r.cpu_ticks as f64 / hz / r.cpu_wall * 100.0,
            cpu_pct_schedstat: r.cpu_sched_ns as f64 / 1e9 / r.cpu_wall * 100.0,
            rss_mib: r.rss_kib.iter().copied().max().unwrap_or(0) as f64 / 1024.0,
            startup_ms: median(&r.startup_ms),
            startup_cpu_ms: median(&r.startup_cpu_ms),
        }
    }

    pub(super) fn print(&self) {
        println!(
            "\nIn-kernel cost per sched_switch, throughput and footprint ({} run{}, medians; {})",
            self.cfg.runs,
            if self.cfg.runs == 1 { "" } else { "s" },
            if self.quick {
                "QUICK mode: not for quoting"
            } else {
                "full mode"
            }
        );
        let head = [
            "load",
            "tool",
            "ns/switch",
            "net",
            "x floor",
            "x cpudist+runqlat",
            "BPF % of load CPU",
            "tput loss %",
            "user CPU %",
            "(schedstat)",
            "RSS MiB",
            "start-up ms",
            "(CPU ms)",
        ];
        let mut table = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
        for r in &self.rows {
            let s = self.summary(r);
            table.push(vec![
                r.load.to_string(),
                r.tool.clone(),
                format!("{:.1}", s.ns),
                format!("{:.1}", s.net_ns),
                format!("{:.2}", s.x_floor),
                format!("{:.2}", s.x_libbpf),
                format!("{:.1}", s.bpf_share_pct),
                format!("{:.1}", s.loss_pct),
                format!("{:.2}", s.cpu_pct),
                format!("{:.2}", s.cpu_pct_schedstat),
                format!("{:.1}", s.rss_mib),
                format!("{:.1}", s.startup_ms),
                format!("{:.1}", s.startup_cpu_ms),
            ]);
        }
        print_table(&table);

        println!(
            "\nThroughput, median [min-max] over alternating runs (with = BPF statistics off)"
        );
        let mut table = vec![strings(&[
            "load",
            "tool",
            "without",
            "with",
            "with, stats on",
            "loss %",
            "other CPUs busy w/o | with",
        ])];
        for r in &self.rows {
            let f = |v: &[f64]| format!("{:.0} [{:.0}-{:.0}]", median(v), min(v), max(v));
            table.push(vec![
                r.load.to_string(),
                r.tool.clone(),
                f(&r.without),
                f(&r.with),
                f(&r.with_stats),
                format!("{:.1}", self.summary(r).loss_pct),
                format!(
                    "{:.2} | {:.2}",
                    median(&r.other_without),
                    median(&r.other_with)
                ),
            ]);
        }
        print_table(&table);

        println!("\nWhere the in-kernel time goes (sums over the statistics-on loads)");
        let mut table = vec![strings(&[
            "load",
            "tool",
            "program",
            "runs/switch",
            "ns/run",
            "ns/switch",
            "verified insns",
        ])];
        for r in &self.rows {
            for (name, &(runs, ns)) in &r.progs {
                table.push(vec![
                    r.load.to_string(),
                    r.tool.clone(),
                    name.clone(),
                    format!("{:.3}", runs as f64 / r.switches as f64),
                    if runs == 0 {
                        "-".into()
                    } else {
                        format!("{:.1}", ns as f64 / runs as f64)
                    },
                    format!("{:.1}", ns as f64 / r.switches as f64),
                    r.verified.get(name).map_or("-".into(), |v| v.to_string()),
                ]);
            }
        }
        print_table(&table);

        println!();
        for (load, samples, xlated) in &self.overhead {
            println!(
                "bpf_stats overhead under {load}: an empty program ({xlated} bytes) measures {:.1} ns/run [{:.1}-{:.1}]; \"net\" subtracts it from every program run",
                median(samples),
                min(samples),
                max(samples)
            );
        }
        println!("\nWhat each program's code calls (static, from bpftool prog dump xlated; not run counts)");
        for (tool, expect) in self.tools.iter().zip(self.expects) {
            for c in expect.iter().flat_map(|e| &e.code) {
                let calls: Vec<String> = c.calls.iter().map(|(k, n)| format!("{n}x {k}")).collect();
                println!(
                    "  {:<24} {:<28} {:>5} insns: {}",
                    tool.label,
                    c.program,
                    c.insns,
                    calls.join(", ")
                );
            }
        }
        println!("\nTargets (tracer rows)");
        for t in self.targets() {
            println!("  {}", t.0);
        }
        println!(
            "\nmachine load average before/after: {} / {}",
            self.load_before, self.load_after
        );
        let foreign: BTreeSet<&String> = self.rows.iter().flat_map(|r| &r.foreign).collect();
        if !foreign.is_empty() {
            println!(
                "programs loaded by others during the runs (not counted): {}",
                foreign.into_iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }

    /// (text, JSON record) of each target check on the tracer rows (issue 27's table:
    /// ratios measured in this run, the floor's and the peers' rows beside the tracer's).
    pub(super) fn targets(&self) -> Vec<(String, Target)> {
        let mut out = Vec::new();
        for r in self
            .rows
            .iter()
            .filter(|r| r.tool_key.starts_with("tracer") || r.tool_key == "offcpu")
        {
            let s = self.summary(r);
            let floor_loss = self
                .find(r.load, "floor")
                .map_or(f64::NAN, |f| self.summary(f).loss_pct);
            let peer = self.find(r.load, r.versus).map(|p| self.summary(p));
            let peer_startup = peer.as_ref().map_or(f64::NAN, |p| p.startup_ms);
            let peer_startup_cpu = peer.as_ref().map_or(f64::NAN, |p| p.startup_cpu_ms);
            let checks: Vec<(&str, f64, f64, &str)> = if r.tool_key == "offcpu" {
                vec![("ns/switch vs offcputime", s.x_libbpf, 0.5, "x")]
            } else {
                vec![
                    ("ns/switch vs cpudist+runqlat", s.x_libbpf, 0.18, "x"),
                    ("  net of bpf_stats overhead", s.net_x_libbpf, 0.18, "x"),
                    ("ns/switch vs floor", s.x_floor, 3.0, "x"),
                    // Only where the empty program's loss is above the noise (the
                    // messaging load's is about 0, and a ratio to it means nothing).
                    (
                        "throughput loss vs floor's",
                        if floor_loss >= 1.0 {
                            s.loss_pct / floor_loss
                        } else {
                            f64::NAN
                        },
                        2.0,
                        "x",
                    ),
                    ("  BPF share of the load's CPU", s.bpf_share_pct, 3.0, "%"),
                    ("user CPU", s.cpu_pct, 0.5, "% of one CPU"),
                    ("peak RSS", s.rss_mib, 40.0, "MiB"),
                    ("start-up (wall)", s.startup_ms, 100.0, "ms"),
                    (
                        "start-up vs the peer's (wall)",
                        s.startup_ms / peer_startup,
                        2.0,
                        "x",
                    ),
                    (
                        "start-up CPU vs the peer's",
                        s.startup_cpu_ms / peer_startup_cpu,
                        2.0,
                        "x",
                    ),
                ]
            };
            for (what, value, limit, unit) in checks {
                if value.is_nan() {
                    continue;
                }
                let met = value <= limit;
                out.push((
                    format!(
                        "{:<9} {:<10} {:<29} {:>8.2} {unit} (target <= {limit}): {}",
                        r.load,
                        r.tool,
                        what,
                        value,
                        if met { "met" } else { "MISSED" }
                    ),
                    Target {
                        load: r.load,
                        tool: r.tool.clone(),
                        what,
                        value: round(value, 3),
                        limit,
                        unit,
                        met,
                    },
                ));
            }
        }
        out
    }
}
