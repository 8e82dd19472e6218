//! perf stat's derived figures from a counter snapshot: values in perf's units (msec for
//! the clocks), "CPUs utilized", GHz, IPC, miss ratios and rates, and the per-thread and
//! per-CPU breakdowns. Typed and serialisable: the JSON report is these structs, and
//! `output::counters` renders the same structs as perf's text.
use std::collections::{BTreeMap, BTreeSet};

use super::event::EventSpec;
use super::set::{CounterSnapshot, EventReading, Reading, Scope};
use super::sys;

const HW: u32 = sys::PERF_TYPE_HARDWARE;

/// What a clock counted per CPU measures: wall time of the CPUs, idle included (`perf
/// stat -a` calls it "CPUs utilized" and says 2.000 on an idle 2-CPU machine).
pub const SYSTEM_WIDE_CLOCK_UNIT: &str = "CPUs counted (idle included)";

/// One counter as reported (JSON and text).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CounterJson {
    /// As the user wrote it.
    pub event: String,
    /// Scaled for multiplexing; msec for task-clock/cpu-clock (as perf), a count otherwise.
    /// null when not supported or never counted (running 0).
    pub value: Option<f64>,
    /// "msec" for the clocks, "" for counts (perf's units).
    pub unit: String,
    pub supported: bool,
    /// Why it is not supported.
    pub reason: Option<String>,
    /// The unscaled sum of the raw counts.
    pub raw: u64,
    pub enabled_ns: u64,
    pub running_ns: u64,
    /// running / enabled in percent: always a number when the counter was enabled at all
    /// (100.0 when not multiplexed), null when unsupported or never enabled. The text output
    /// shows it only below 100%, as perf does.
    pub running_pct: Option<f64>,
}

/// A figure perf prints after `#` on an event's line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Derived {
    /// The event whose line it belongs to.
    pub event: String,
    /// Stable identifier: cpus-utilized, ghz, ipc, rate, branch-miss-pct, cache-miss-pct.
    pub name: String,
    /// In `unit`: rates are scaled to K/M/G as perf prints them, percentages are 0..100.
    pub value: f64,
    /// perf's label: "CPUs utilized", "GHz", "insn per cycle", "/sec", "K/sec", "M/sec",
    /// "G/sec", "of all branches", "of all cache refs".
    pub unit: String,
}

/// id (tid or CPU) -> (event, value in the event's reported unit), in event order.
pub type Breakdown = BTreeMap<u32, Vec<(String, Option<f64>)>>;

/// perf stat's report for one snapshot (or interval delta).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CounterReport {
    pub counters: Vec<CounterJson>,
    pub derived: Vec<Derived>,
    /// task-clock / elapsed (or the sum of cpu-clock / elapsed system-wide).
    pub cpus_utilized: Option<f64>,
    /// System-wide: cpu-clock per CPU / elapsed.
    pub per_cpu_utilization: Option<Vec<(u32, f64)>>,
    /// tid -> (event, value) with values in the counters' units; only when asked for with a
    /// Threads target.
    pub per_thread: Option<Breakdown>,
    /// System-wide: cpu -> (event, value), as `perf stat -a -A`.
    pub per_cpu: Option<Breakdown>,
    /// The wall-clock time the figures are divided by.
    pub elapsed_ns: u64,
    /// The clock event `cpus_utilized` divides (task-clock, or cpu-clock system-wide).
    pub utilization_event: Option<String>,
}

/// The value in the reported unit (msec for clocks).
fn display_value(spec: &EventSpec, r: &Reading) -> Option<f64> {
    let v = r.scaled()?;
    Some(if spec.is_clock() { v / 1e6 } else { v })
}

/// perf's K/M/G scaling of a per-second rate.
fn rate_unit(per_sec: f64) -> (f64, &'static str) {
    if per_sec >= 1e9 {
        (per_sec / 1e9, "G/sec")
    } else if per_sec >= 1e6 {
        (per_sec / 1e6, "M/sec")
    } else if per_sec >= 1e3 {
        (per_sec / 1e3, "K/sec")
    } else {
        (per_sec, "/sec")
    }
}

fn derived_for(snap: &CounterSnapshot, ev: &EventReading, elapsed_ns: u64) -> Option<Derived> {
    if ev.unsupported.is_some() {
        return None;
    }
    let value = ev.total.scaled()?;
    let clock_ns = snap.clock().and_then(|c| c.total.scaled());
    let make = |name: &str, value: f64, unit: &str| {
        Some(Derived {
            event: ev.spec.name.clone(),
            name: name.to_string(),
            value,
            unit: unit.to_string(),
        })
    };
    let ratio = |den: Option<f64>| den.filter(|d| *d > 0.0).map(|d| value / d);
    if ev.spec.is_clock() {
        if elapsed_ns == 0 {
            return None;
        }
        // Counted per CPU (or for a cgroup hierarchy's root), the clocks run through
        // idle: label it, so the report's headline (traced threads' on-CPU time, idle
        // excluded) is not contradicted.
        let unit = if snap.idle_in_clocks {
            SYSTEM_WIDE_CLOCK_UNIT
        } else {
            "CPUs utilized"
        };
        return make("cpus-utilized", value / elapsed_ns as f64, unit);
    }
    if ev.spec.is(HW, sys::PERF_COUNT_HW_CPU_CYCLES) {
        return make("ghz", ratio(clock_ns)?, "GHz");
    }
    if ev.spec.is(HW, sys::PERF_COUNT_HW_INSTRUCTIONS) {
        if let Some(ipc) = ratio(snap.scaled(HW, sys::PERF_COUNT_HW_CPU_CYCLES)) {
            return make("ipc", ipc, "insn per cycle");
        }
    }
    if ev.spec.is(HW, sys::PERF_COUNT_HW_BRANCH_MISSES) {
        if let Some(r) = ratio(snap.scaled(HW, sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS)) {
            return make("branch-miss-pct", r * 100.0, "of all branches");
        }
    }
    if ev.spec.is(HW, sys::PERF_COUNT_HW_CACHE_MISSES) {
        if let Some(r) = ratio(snap.scaled(HW, sys::PERF_COUNT_HW_CACHE_REFERENCES)) {
            return make("cache-miss-pct", r * 100.0, "of all cache refs");
        }
    }
    // perf's rates are per second of the clock event (time on CPU), not of wall time.
    let per_sec = ratio(clock_ns.map(|ns| ns / 1e9))?;
    let (v, unit) = rate_unit(per_sec);
    make("rate", v, unit)
}

/// Builds perf stat's figures from a snapshot and the wall-clock time it covers.
pub fn report(snap: &CounterSnapshot, elapsed_ns: u64) -> CounterReport {
    let counters = snap
        .events
        .iter()
        .map(|ev| {
            let supported = ev.unsupported.is_none();
            let t = ev.total;
            CounterJson {
                event: ev.spec.name.clone(),
                value: if supported {
                    display_value(&ev.spec, &t)
                } else {
                    None
                },
                unit: if ev.spec.is_clock() { "msec" } else { "" }.to_string(),
                supported,
                reason: ev.unsupported.clone(),
                raw: t.value,
                enabled_ns: t.enabled,
                running_ns: t.running,
                running_pct: (supported && t.enabled > 0)
                    .then(|| t.running as f64 * 100.0 / t.enabled as f64),
            }
        })
        .collect();
    let derived = snap
        .events
        .iter()
        .filter_map(|ev| derived_for(snap, ev, elapsed_ns))
        .collect();
    let elapsed = (elapsed_ns > 0).then_some(elapsed_ns as f64);
    let cpus_utilized = snap
        .clock()
        .and_then(|c| c.total.scaled())
        .zip(elapsed)
        .map(|(ns, el)| ns / el);
    let per_cpu_utilization = if snap.system_wide {
        snap.clock().zip(elapsed).map(|(c, el)| {
            c.parts
                .iter()
                .filter_map(|(scope, r)| match scope {
                    Scope::Cpu(cpu) => r.scaled().map(|ns| (*cpu, ns / el)),
                    _ => None,
                })
                .collect()
        })
    } else {
        None
    };
    let breakdown = |want: bool, key: fn(&Scope) -> Option<u32>| {
        if !want {
            return None;
        }
        let mut ids = BTreeSet::new();
        for ev in &snap.events {
            ids.extend(ev.parts.iter().filter_map(|(s, _)| key(s)));
        }
        let map: Breakdown = ids
            .into_iter()
            .map(|id| {
                let row = snap
                    .events
                    .iter()
                    .map(|ev| {
                        let v = ev
                            .parts
                            .iter()
                            .find(|(s, _)| key(s) == Some(id))
                            .filter(|_| ev.unsupported.is_none())
                            .and_then(|(_, r)| display_value(&ev.spec, r));
                        (ev.spec.name.clone(), v)
                    })
                    .collect();
                (id, row)
            })
            .collect();
        Some(map)
    };
    let per_thread = breakdown(snap.per_thread, |s| match s {
        Scope::Thread { tid, .. } => Some(*tid),
        _ => None,
    });
    let per_cpu = breakdown(snap.system_wide, |s| match s {
        Scope::Cpu(c) => Some(*c),
        _ => None,
    });
    CounterReport {
        counters,
        derived,
        cpus_utilized,
        per_cpu_utilization,
        per_thread,
        per_cpu,
        elapsed_ns,
        utilization_event: snap.clock().map(|c| c.spec.name.clone()),
    }
}

/// The target's task-clock in ns (scaled), None if not counted.
pub fn task_clock_ns(snap: &CounterSnapshot) -> Option<f64> {
    snap.scaled(sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_TASK_CLOCK)
}

/// The target's context switches (scaled), None if not counted.
pub fn context_switches(snap: &CounterSnapshot) -> Option<f64> {
    snap.scaled(sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_CONTEXT_SWITCHES)
}

/// Snapshots built by hand, for the figures' tests here and the text's in `output`.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use crate::perf::event::parse_event;

    pub fn ev(name: &str, parts: &[(Scope, Reading)], unsupported: Option<&str>) -> EventReading {
        let total = parts.iter().fold(Reading::default(), |a, (_, r)| a.add(*r));
        EventReading {
            spec: parse_event(name).unwrap(),
            unsupported: unsupported.map(str::to_string),
            total,
            parts: parts.to_vec(),
        }
    }

    pub fn r(value: u64, enabled: u64, running: u64) -> Reading {
        Reading {
            value,
            enabled,
            running,
        }
    }

    /// A synthetic one-second run of a process: 987.65 ms on CPU.
    pub fn synthetic() -> CounterSnapshot {
        let t = Scope::Task(42);
        CounterSnapshot {
            events: vec![
                ev(
                    "task-clock",
                    &[(t, r(987_654_321, 987_654_321, 987_654_321))],
                    None,
                ),
                ev("cs", &[(t, r(1234, 987_654_321, 987_654_321))], None),
                ev("cycles:u", &[], Some("ENOENT: test")),
                ev(
                    "instructions",
                    &[(t, r(1_500_000_000, 1_000_000, 500_000))],
                    None,
                ),
                // Enabled but never on the PMU (multiplexed out): never counted.
                ev("page-faults", &[(t, r(0, 1_000, 0))], None),
            ],
            system_wide: false,
            idle_in_clocks: false,
            per_thread: false,
        }
    }

    /// Two seconds on CPU with every hardware ratio perf derives, never multiplexed.
    pub fn hardware() -> CounterSnapshot {
        let t = Scope::Task(1);
        let full = |v| r(v, 10, 10);
        CounterSnapshot {
            events: vec![
                ev("task-clock", &[(t, full(2_000_000_000))], None),
                ev("cycles", &[(t, full(6_000_000_000))], None),
                ev("instructions", &[(t, full(9_000_000_000))], None),
                ev("branches", &[(t, full(1_000_000))], None),
                ev("branch-misses", &[(t, full(12_345))], None),
                ev("cache-references", &[(t, full(1000))], None),
                ev("cache-misses", &[(t, full(250))], None),
            ],
            system_wide: false,
            idle_in_clocks: false,
            per_thread: false,
        }
    }

    /// Two CPUs counted for 0.5 s: CPU0 busy, CPU1 half.
    pub fn system_wide() -> CounterSnapshot {
        let c = Scope::Cpu;
        CounterSnapshot {
            events: vec![
                ev(
                    "cpu-clock",
                    &[
                        (c(0), r(500_000_000, 500_000_000, 500_000_000)),
                        (c(1), r(250_000_000, 500_000_000, 500_000_000)),
                    ],
                    None,
                ),
                ev("cs", &[(c(0), r(10, 1, 1)), (c(1), r(30, 1, 1))], None),
            ],
            system_wide: true,
            idle_in_clocks: true,
            per_thread: false,
        }
    }

    /// Two threads of PID 7 over 10 ms: TID 7 ran 3 ms, TID 8 never ran; cycles unsupported.
    pub fn per_thread() -> CounterSnapshot {
        let th = |tid| Scope::Thread { tgid: 7, tid };
        CounterSnapshot {
            events: vec![
                ev(
                    "task-clock",
                    &[
                        (th(7), r(3_000_000, 3_000_000, 3_000_000)),
                        (th(8), r(0, 0, 0)),
                    ],
                    None,
                ),
                ev("cycles", &[], Some("ENOENT")),
            ],
            system_wide: false,
            idle_in_clocks: false,
            per_thread: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn report_figures() {
        let rep = report(&synthetic(), 1_000_000_000);
        assert!((rep.cpus_utilized.unwrap() - 0.987654321).abs() < 1e-12);
        let cs = &rep.counters[1];
        assert_eq!((cs.value, cs.running_pct), (Some(1234.0), Some(100.0)));
        let cyc = &rep.counters[2];
        assert_eq!(
            (cyc.value, cyc.supported, cyc.running_pct),
            (None, false, None)
        );
        let insn = &rep.counters[3];
        assert_eq!((insn.value, insn.running_pct), (Some(3e9), Some(50.0)));
        let pf = &rep.counters[4];
        assert_eq!((pf.value, pf.running_pct), (None, Some(0.0)));
        let names: Vec<(&str, &str, &str)> = rep
            .derived
            .iter()
            .map(|d| (d.event.as_str(), d.name.as_str(), d.unit.as_str()))
            .collect();
        // Without cycles, instructions get a rate; perf's rates are per second of task-clock.
        assert_eq!(
            names,
            vec![
                ("task-clock", "cpus-utilized", "CPUs utilized"),
                ("cs", "rate", "K/sec"),
                ("instructions", "rate", "G/sec"),
            ]
        );
        assert!((rep.derived[1].value - 1234.0 / 0.987654321 / 1e3).abs() < 1e-9);
    }

    #[test]
    fn hardware_ratios() {
        let rep = report(&hardware(), 1_000_000_000);
        let get = |n: &str| rep.derived.iter().find(|d| d.name == n).unwrap().value;
        assert!((get("ghz") - 3.0).abs() < 1e-12);
        assert!((get("ipc") - 1.5).abs() < 1e-12);
        assert!((get("branch-miss-pct") - 1.2345).abs() < 1e-9);
        assert!((get("cache-miss-pct") - 25.0).abs() < 1e-9);
        assert!((rep.cpus_utilized.unwrap() - 2.0).abs() < 1e-12);
        // 1M branches per 2 s of task-clock.
        let rate = rep.derived.iter().find(|d| d.event == "branches").unwrap();
        assert_eq!((rate.name.as_str(), rate.unit.as_str()), ("rate", "K/sec"));
        assert!((rate.value - 500.0).abs() < 1e-9);
    }

    #[test]
    fn json_shape() {
        let rep = report(&synthetic(), 1_000_000_000);
        let v = serde_json::to_value(&rep).unwrap();
        assert_eq!(v["counters"][0]["event"], "task-clock");
        assert_eq!(v["counters"][0]["unit"], "msec");
        assert_eq!(v["counters"][0]["running_pct"], 100.0);
        assert_eq!(v["counters"][2]["value"], serde_json::Value::Null);
        assert_eq!(v["counters"][2]["supported"], false);
        assert_eq!(v["counters"][2]["reason"], "ENOENT: test");
        assert_eq!(v["derived"][0]["unit"], "CPUs utilized");
        assert_eq!(v["per_cpu_utilization"], serde_json::Value::Null);
        assert_eq!(v["elapsed_ns"], 1_000_000_000u64);
    }

    #[test]
    fn system_wide_and_per_thread_breakdowns() {
        let rep = report(&system_wide(), 500_000_000);
        assert_eq!(rep.per_cpu_utilization, Some(vec![(0, 1.0), (1, 0.5)]));
        assert_eq!(rep.utilization_event.as_deref(), Some("cpu-clock"));
        assert!((rep.cpus_utilized.unwrap() - 1.5).abs() < 1e-12);
        assert_eq!(
            rep.per_cpu.as_ref().unwrap()[&1],
            vec![("cpu-clock".into(), Some(250.0)), ("cs".into(), Some(30.0))]
        );
        assert_eq!(rep.derived[0].unit, SYSTEM_WIDE_CLOCK_UNIT);

        let rep = report(&per_thread(), 10_000_000);
        let pt = rep.per_thread.as_ref().unwrap();
        assert_eq!(
            pt[&7],
            vec![("task-clock".into(), Some(3.0)), ("cycles".into(), None)]
        );
        // A thread that never ran while counted: 0, not "never counted".
        assert_eq!(
            pt[&8],
            vec![("task-clock".into(), Some(0.0)), ("cycles".into(), None)]
        );
    }

    #[test]
    fn task_clock_and_switches_are_the_scaled_totals() {
        let snap = synthetic();
        assert_eq!(task_clock_ns(&snap), Some(987_654_321.0));
        assert_eq!(context_switches(&snap), Some(1234.0));
        assert_eq!(task_clock_ns(&system_wide()), None);
    }
}
