//! What every check shares: the bounds, what the kernel offers, the probe modes, a
//! check's verdict and the readers of the guest's steps. The checks' own prelude (each
//! imports it whole); below all of them.

pub(super) use crate::json::{self, Items, Json};
pub(super) use crate::vm::protocol::{GuestOutput, Step};

/// Against schedstat under emulation (`tracer_truth::ON_CPU_EMULATED`: 2% or 1 ms), with
/// per-wait and per-slice allowances on top (`tracer_truth::EMULATED_PER_*`).
pub(super) const BOUND: tracer_truth::Bound = tracer_truth::ON_CPU_EMULATED;
/// Its relative part, as the messages show it and the cycle counts use it.
pub(super) const TOLERANCE: f64 = BOUND.rel;
pub(super) const PER_WAIT_NS: f64 = tracer_truth::EMULATED_PER_WAIT_NS;
pub(super) const PER_SLICE_NS: f64 = tracer_truth::EMULATED_PER_SLICE_NS;

/// What the kernel offers, from its config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offers {
    pub btf: bool,
    pub fentry: bool,
    pub kprobes: bool,
    pub pseries: bool,
    pub schedstat: bool,
    /// arm64's PMU driver (PMUv3 under qemu's -cpu max): hardware counters that count.
    pub arm_pmu: bool,
}

impl Offers {
    pub fn from_config(config: &str) -> Offers {
        let on = |name: &str| {
            config
                .lines()
                .any(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')) == Some("y"))
        };
        let btf = on("CONFIG_DEBUG_INFO_BTF");
        Offers {
            btf,
            // BPF trampolines attach through ftrace direct calls.
            fentry: btf && on("CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS"),
            // aya attaches kprobes through perf's kprobe PMU.
            kprobes: on("CONFIG_KPROBES") && on("CONFIG_KPROBE_EVENTS"),
            pseries: on("CONFIG_PPC_SPLPAR"),
            schedstat: on("CONFIG_SCHED_INFO"),
            arm_pmu: on("CONFIG_ARM_PMU") && on("CONFIG_HW_PERF_EVENTS"),
        }
    }

    pub fn describe(&self) -> String {
        let yn = |b: bool| if b { "yes" } else { "no" };
        format!(
            "BTF {}, fentry {}, kprobes {}, pseries DTL {}, schedstat {}, arm64 PMU {}",
            yn(self.btf),
            yn(self.fentry),
            yn(self.kprobes),
            yn(self.pseries),
            yn(self.schedstat),
            yn(self.arm_pmu)
        )
    }
}

/// A probe mode as the guest runs it (step `run-NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    TpBtf,
    RawTp,
    Tracepoint,
    PerfSched,
    /// perf-sched with kprobes asked for over fentry.
    PerfSchedKprobe,
}

pub const MODES: [Mode; 5] = [
    Mode::TpBtf,
    Mode::RawTp,
    Mode::Tracepoint,
    Mode::PerfSched,
    Mode::PerfSchedKprobe,
];

impl Mode {
    pub fn step(self) -> &'static str {
        match self {
            Mode::TpBtf => "run-tp-btf",
            Mode::RawTp => "run-raw-tp",
            Mode::Tracepoint => "run-tracepoint",
            Mode::PerfSched => "run-perf-sched",
            Mode::PerfSchedKprobe => "run-perf-sched-kprobe",
        }
    }

    /// The name `tracer run --probe` takes and reports.
    pub fn probe(self) -> &'static str {
        match self {
            Mode::TpBtf => "tp-btf",
            Mode::RawTp => "raw-tp",
            Mode::Tracepoint => "tracepoint",
            Mode::PerfSched | Mode::PerfSchedKprobe => "perf-sched",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Mode::PerfSchedKprobe => "perf-sched via kprobe",
            Mode::PerfSched => "perf-sched",
            m => m.probe(),
        }
    }

    /// Whether the kernel offers everything the tracer needs for this mode; when not, the
    /// word its refusal must name. The tracer reads task_struct offsets from BTF in every
    /// mode but the classic tracepoints (tracer check says so too).
    pub fn needs(self, o: &Offers) -> Result<(), &'static str> {
        let btf = if o.btf { Ok(()) } else { Err("BTF") };
        match self {
            Mode::Tracepoint => Ok(()),
            Mode::TpBtf | Mode::RawTp => btf,
            Mode::PerfSched => btf.and(if o.fentry || o.kprobes {
                Ok(())
            } else {
                Err("kprobe")
            }),
            Mode::PerfSchedKprobe => btf.and(if o.kprobes { Ok(()) } else { Err("kprobe") }),
        }
    }
}

/// One check's verdict.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub name: String,
    pub pass: bool,
    /// One line: what was found.
    pub summary: String,
    /// Why it failed, one reason a line.
    pub problems: Vec<String>,
    /// The guest's output for a failure.
    pub transcript: Option<String>,
}

/// One check being made. A failed comparison fails it, timing ones included: no step is
/// run again to get a pass (a tolerance too tight for emulation is widened from what the
/// guest kernel reports, never retried away).
pub(super) struct Check {
    pub(super) name: String,
    problems: Vec<String>,
    notes: Vec<String>,
}

impl Check {
    pub(super) fn new(name: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            problems: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(super) fn expect(&mut self, ok: bool, problem: impl FnOnce() -> String) -> bool {
        if !ok {
            self.problems.push(problem());
        }
        ok
    }

    pub(super) fn fail(&mut self, problem: impl Into<String>) {
        self.problems.push(problem.into());
    }

    pub(super) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub(super) fn done(self, step: Option<&Step>) -> Verdict {
        let pass = self.problems.is_empty();
        Verdict {
            name: self.name,
            pass,
            summary: self.notes.join("; "),
            transcript: if pass {
                None
            } else {
                step.map(Step::transcript)
            },
            problems: self.problems,
        }
    }
}

/// The step, or a failed check saying it never ran.
pub(super) fn need_step<'a>(g: &'a GuestOutput, name: &str, c: &mut Check) -> Option<&'a Step> {
    match g.step(name) {
        Some(s) if s.rc.is_some() => Some(s),
        Some(_) => {
            c.fail(format!("the guest died during step {name}"));
            None
        }
        None => {
            c.fail(format!("the guest never ran step {name}"));
            None
        }
    }
}

/// key=value lines.
pub(super) fn facts(step: &Step) -> Vec<(String, String)> {
    step.stdout()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

pub(super) fn fact<'a>(f: &'a [(String, String)], key: &str) -> &'a str {
    f.iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// A crash rather than a refusal: a Rust panic (exit 101), a signal, or a panic message.
pub(super) fn crashed(step: &Step) -> Option<String> {
    let rc = step.rc?;
    if rc == 101 || step.stderr().contains("panicked at") {
        return Some(format!("the tracer panicked (exit status {rc})"));
    }
    if rc >= 128 {
        return Some(format!("the tracer was killed by signal {}", rc - 128));
    }
    None
}

/// The last JSON document of a step's stdout (the totals).
pub(super) fn report(step: &Step, c: &mut Check) -> Option<Json> {
    let doc = json::lines(step.stdout()).pop();
    if doc.is_none() {
        c.fail("no JSON report on stdout");
    }
    doc
}
