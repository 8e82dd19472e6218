//! Turns the guest's steps into PASS/FAIL checks. What to expect comes from the kernel
//! package's own config (so a kernel added to the matrix brings its expectations along),
//! cross-checked against what the guest saw at boot; the numbers are checked against the
//! guest kernel's schedstat as each workload thread recorded it at its end.

mod auto;
mod common;
mod dtl;
mod irq;
mod offcpu;
mod pmu;
mod runqlen;
mod serve;
mod threads;
mod tracer_check;

use super::protocol::GuestOutput;
#[cfg(test)]
use auto::best_mode;
use auto::check_auto;
use common::{fact, facts, MODES};
pub use common::{Offers, Verdict};
use dtl::check_dtl;
use threads::check_mode;
#[cfg(test)]
use threads::kernel_version;
use tracer_check::{check_check, check_facts};

/// The checks of a boot that ran only some steps (`vmtest.steps=`): its facts and the
/// hardware counters' exception levels.
pub fn evaluate_steps(g: &GuestOutput, arch: &str, o: &Offers) -> Vec<Verdict> {
    let mut v = vec![check_facts(g, arch, o)];
    v.extend(pmu::check_levels(g, o));
    v
}

/// Every check for one VM.
pub fn evaluate(g: &GuestOutput, arch: &str, o: &Offers) -> Vec<Verdict> {
    let mut v = vec![check_facts(g, arch, o)];
    v.extend(check_check(g, o));
    for mode in MODES {
        v.push(check_mode(g, mode, o));
    }
    v.extend(check_auto(g, o));
    v.push(serve::check_serve(g, o));
    v.push(runqlen::check_runqlen(g, o));
    v.push(irq::check_irq(g, o));
    v.extend(offcpu::check_offcpu(g, o));
    let cpus = g
        .step("facts-boot")
        .map(facts)
        .and_then(|f| fact(&f, "cpus").parse().ok())
        .unwrap_or(0);
    v.extend(check_dtl(g, o, cpus));
    v.extend(pmu::check_pmu(g, o));
    if !g.done {
        v.push(Verdict {
            name: "the guest ran every step".into(),
            pass: false,
            summary: String::new(),
            problems: vec!["the guest stopped before the end of steps.sh".into()],
            transcript: None,
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::common::*;
    use super::*;
    use crate::vm::protocol;

    const X86: &str = "CONFIG_DEBUG_INFO_BTF=y\nCONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y\n\
                       CONFIG_KPROBES=y\nCONFIG_KPROBE_EVENTS=y\nCONFIG_SCHED_INFO=y\n";
    const PPC: &str = "CONFIG_KPROBES=y\nCONFIG_KPROBE_EVENTS=y\nCONFIG_SCHED_INFO=y\n\
                       CONFIG_PPC_SPLPAR=y\n# CONFIG_DEBUG_INFO_BTF is not set\n";

    #[test]
    fn expectations_come_from_the_config() {
        let x = Offers::from_config(X86);
        assert!(x.btf && x.fentry && x.kprobes && !x.pseries && x.schedstat);
        let p = Offers::from_config(PPC);
        assert!(!p.btf && !p.fentry && p.kprobes && p.pseries);
        assert_eq!(Mode::TpBtf.needs(&p), Err("BTF"));
        assert_eq!(Mode::PerfSchedKprobe.needs(&p), Err("BTF"));
        assert_eq!(Mode::Tracepoint.needs(&p), Ok(()));
        assert_eq!(best_mode(&p), Mode::Tracepoint);
        assert_eq!(best_mode(&x), Mode::TpBtf);
    }

    /// A guest on 6.12 that ran step `name`, its report holding `threads` (entries in
    /// task-local storage).
    fn run_step(name: &str, threads: &str, truth: &str, extra: &str) -> String {
        format!(
            "@@vmtest begin facts-boot\n@@vmtest part stdout\nrelease=6.12.117+deb12-amd64\n\n\
             @@vmtest end facts-boot rc=0 t0=0 t1=0\n\
             @@vmtest begin {name}\n@@vmtest part stdout\n{{\"probe\":\"tp-btf\",\"threads\":[{threads}],\
             \"maps\":{{\"threads_live\":3,\"threads_capacity\":null}},\"drops\":{{\"x\":0}},\"histograms\":{{\"on_cpu\":{{\"count\":3}},\"runq\":{{\"count\":2}},\
             \"off_cpu\":{{\"count\":1}}}}}}\n\n@@vmtest part stderr\n\n@@vmtest part truth-busy\n{truth}\n\n{extra}\
             @@vmtest end {name} rc=0 t0=1 t1=3\n"
        )
    }

    #[test]
    fn accuracy_is_judged_per_thread_against_schedstat() {
        let th = |tid: u64, on: u64| {
            format!(
                "{{\"tid\":{tid},\"pid\":10,\"on_cpu_ns\":{on},\"runq_wait_ns\":5000000,\"slices\":4,\
                 \"voluntary_switches\":3,\"runq_waits\":2,\"involuntary_switches\":1}}"
            )
        };
        let truth = "{\"tid\":11,\"pid\":10,\"cpu_ns\":1,\"run_ns\":500000000,\"wait_ns\":5050000,\"slices\":4}";
        let o = Offers::from_config(X86);
        let good = protocol::parse(&run_step("run-tp-btf", &th(11, 505_000_000), truth, ""));
        let v = check_mode(&good, Mode::TpBtf, &o);
        assert!(v.pass, "{v:?}");
        assert!(v.summary.contains("+1.00%"), "{}", v.summary);
        let bad = protocol::parse(&run_step("run-tp-btf", &th(11, 520_000_000), truth, ""));
        let v = check_mode(&bad, Mode::TpBtf, &o);
        assert!(!v.pass);
        assert!(v.problems[0].contains("+4.00%"), "{:?}", v.problems);
        assert!(v.transcript.unwrap().contains("truth-busy"));
        let missing = protocol::parse(&run_step("run-tp-btf", &th(12, 500_000_000), truth, ""));
        assert!(!check_mode(&missing, Mode::TpBtf, &o).pass);
    }

    /// The open bug of the busy workload's leader is let through only for that thread,
    /// that sign and that size, and said.
    #[test]
    fn the_known_leader_excess_is_excused_narrowly_and_said() {
        let th = |tid: u64, rq: u64| {
            format!(
                "{{\"tid\":{tid},\"pid\":10,\"on_cpu_ns\":500000000,\"runq_wait_ns\":{rq},\"slices\":4,\
                 \"voluntary_switches\":3,\"runq_waits\":2,\"involuntary_switches\":1}}"
            )
        };
        let truth = |tid: u64| {
            format!("{{\"tid\":{tid},\"pid\":10,\"cpu_ns\":1,\"run_ns\":500000000,\"wait_ns\":5000000,\"slices\":4}}")
        };
        let o = Offers::from_config(X86);
        let check = |tid: u64, rq: u64| {
            check_mode(
                &protocol::parse(&run_step("run-tp-btf", &th(tid, rq), &truth(tid), "")),
                Mode::TpBtf,
                &o,
            )
        };
        let v = check(10, 6_800_000);
        assert!(v.pass, "{v:?}");
        assert!(
            v.summary.contains("KNOWN (") && v.summary.contains("1.80 ms"),
            "{}",
            v.summary
        );
        // Too much, the other sign, or a worker: failures.
        assert!(!check(10, 7_600_000).pass);
        assert!(!check(10, 3_200_000).pass);
        assert!(!check(11, 6_800_000).pass);
    }

    /// The kernel's stale switch clock (steps.sh `clock_skips`) is allowed for the thread
    /// it touched, that much and no more, and said.
    #[test]
    fn a_clock_skip_from_ftrace_is_allowed_for_its_thread_only() {
        let th = |on: u64, rq: u64| {
            format!(
                "{{\"tid\":11,\"pid\":10,\"on_cpu_ns\":{on},\"runq_wait_ns\":{rq},\"slices\":4,\
                 \"voluntary_switches\":3,\"runq_waits\":2,\"involuntary_switches\":1}}"
            )
        };
        // schedstat moved 3 ms of the thread's on-CPU into its wait.
        let truth =
            "{\"tid\":11,\"pid\":10,\"run_ns\":100000000,\"wait_ns\":50000000,\"slices\":4}";
        let ours = th(103_000_000, 47_000_000);
        let o = Offers::from_config(X86);
        let skips = |s: &str| format!("@@vmtest part clock-skips\n{s}\n\n");
        let v = check_mode(
            &protocol::parse(&run_step("run-tp-btf", &ours, truth, "")),
            Mode::TpBtf,
            &o,
        );
        assert!(!v.pass, "no allowance without the trace: {v:?}");
        let allowed = run_step("run-tp-btf", &ours, truth, &skips("11 3100000\n12 9000000"));
        let v = check_mode(&protocol::parse(&allowed), Mode::TpBtf, &o);
        assert!(v.pass, "{v:?}");
        assert!(
            v.summary
                .contains("clock-skip allowance up to 3.10 ms (tid 11)"),
            "{}",
            v.summary
        );
        let other = run_step("run-tp-btf", &ours, truth, &skips("12 9000000"));
        assert!(!check_mode(&protocol::parse(&other), Mode::TpBtf, &o).pass);
        let beyond = run_step(
            "run-tp-btf",
            &th(106_000_000, 44_000_000),
            truth,
            &skips("11 3100000"),
        );
        let v = check_mode(&protocol::parse(&beyond), Mode::TpBtf, &o);
        assert!(!v.pass);
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains("a clock skip of 3.100 ms")),
            "{:?}",
            v.problems
        );
        // The column for wakeups that showed no N adds to the thread's allowance.
        let split = run_step("run-tp-btf", &ours, truth, &skips("11 1000000 2100000"));
        let v = check_mode(&protocol::parse(&split), Mode::TpBtf, &o);
        assert!(v.pass, "{v:?}");
        assert!(
            v.summary.contains("showed no N") && v.summary.contains("up to 2.10 ms (tid 11)"),
            "{}",
            v.summary
        );
        let short = run_step("run-tp-btf", &ours, truth, &skips("11 1000000 100000"));
        assert!(!check_mode(&protocol::parse(&short), Mode::TpBtf, &o).pass);
        let garbled = run_step("run-tp-btf", &ours, truth, &skips("11 3100000\neleven"));
        assert!(!check_mode(&protocol::parse(&garbled), Mode::TpBtf, &o).pass);
    }

    /// A wait off its run_delay passes where ftrace's own switch events time the same
    /// waits as the tracer (steps.sh `ftrace_waits`), and says so; not where they
    /// disagree, nor where ftrace's ring overran.
    #[test]
    fn a_wait_off_run_delay_passes_only_where_the_kernels_switch_events_agree() {
        let ours = "{\"tid\":11,\"pid\":10,\"on_cpu_ns\":100000000,\"runq_wait_ns\":46900000,\
                    \"slices\":4,\"voluntary_switches\":3,\"runq_waits\":7,\"involuntary_switches\":1}";
        // run_delay 7.4% above the tracer's wait (stop 39's CI, arm64 6.1).
        let truth =
            "{\"tid\":11,\"pid\":10,\"run_ns\":100000000,\"wait_ns\":50620000,\"slices\":4}";
        let o = Offers::from_config(X86);
        let with = |parts: &str| {
            check_mode(
                &protocol::parse(&run_step("run-tp-btf", ours, truth, parts)),
                Mode::TpBtf,
                &o,
            )
        };
        assert!(!with("").pass);
        let v = with("@@vmtest part ftrace-waits\n11 46950000 7\n\n");
        assert!(v.pass, "{v:?}");
        assert!(
            v.summary
                .contains("off the 7 waits ftrace's switch events time"),
            "{}",
            v.summary
        );
        assert!(!with("@@vmtest part ftrace-waits\n11 50600000 7\n\n").pass);
        assert!(!with("@@vmtest part ftrace-waits\n12 46950000 7\n\n").pass);
        let overran = "@@vmtest part ftrace-waits\n11 46950000 7\n\n\
                       @@vmtest part ftrace-overrun\n/t/per_cpu/cpu0/stats:overrun: 3\n\n";
        assert!(!with(overran).pass);
        assert!(!with("@@vmtest part ftrace-waits\n11 x 7\n\n").pass);
    }

    #[test]
    fn tp_btf_keeps_its_entries_in_task_storage_from_6_4_on() {
        assert_eq!(kernel_version("6.12.117+deb12-amd64"), Some((6, 12)));
        assert_eq!(kernel_version("6.1.0-57-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("x"), None);
        let th =
            "{\"tid\":11,\"pid\":10,\"on_cpu_ns\":500000000,\"runq_wait_ns\":5000000,\"slices\":4,\
                  \"voluntary_switches\":3,\"runq_waits\":2,\"involuntary_switches\":1}";
        let truth = "{\"tid\":11,\"pid\":10,\"cpu_ns\":1,\"run_ns\":500000000,\"wait_ns\":5000000,\"slices\":4}";
        let o = Offers::from_config(X86);
        let on_612 = run_step("run-tp-btf", th, truth, "");
        let v = check_mode(&protocol::parse(&on_612), Mode::TpBtf, &o);
        assert!(v.pass, "{v:?}");
        assert!(v.summary.contains("task-local storage"), "{}", v.summary);
        // 6.12 with the THREADS hash: task storage was not used where it should be.
        let hash_612 = on_612.replace("\"threads_capacity\":null", "\"threads_capacity\":16384");
        let v = check_mode(&protocol::parse(&hash_612), Mode::TpBtf, &o);
        assert!(!v.pass);
        assert!(
            v.problems[0].contains("the THREADS hash"),
            "{:?}",
            v.problems
        );
        // 6.1: the hash is right, task storage would be wrong.
        let hash_61 = hash_612.replace("6.12.117+deb12-amd64", "6.1.0-57-amd64");
        let v = check_mode(&protocol::parse(&hash_61), Mode::TpBtf, &o);
        assert!(v.pass, "{v:?}");
        let storage_61 = on_612.replace("6.12.117+deb12-amd64", "6.1.0-57-amd64");
        assert!(!check_mode(&protocol::parse(&storage_61), Mode::TpBtf, &o).pass);
        // A report without the field fails rather than passing unchecked.
        let none = on_612.replace("\"threads_capacity\":null", "\"other\":1");
        assert!(!check_mode(&protocol::parse(&none), Mode::TpBtf, &o).pass);
    }

    #[test]
    fn perf_sched_must_attach_the_way_asked() {
        let th = "{\"tid\":11,\"pid\":10,\"on_cpu_ns\":500000000,\"runq_wait_ns\":0,\"slices\":4,\"voluntary_switches\":3}";
        let truth =
            "{\"tid\":11,\"pid\":10,\"cpu_ns\":1,\"run_ns\":500000000,\"wait_ns\":0,\"slices\":4}";
        let o = Offers::from_config(X86);
        let fentry = "@@vmtest part kprobes\n\n@@vmtest part ftrace\n__perf_event_task_sched_in (1) D direct-->x\n\n";
        let text =
            run_step("run-perf-sched-kprobe", th, truth, fentry).replace("tp-btf", "perf-sched");
        let v = check_mode(&protocol::parse(&text), Mode::PerfSchedKprobe, &o);
        assert!(!v.pass);
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains("via fentry, expected kprobe")),
            "{v:?}"
        );
        let text = run_step("run-perf-sched", th, truth, fentry).replace("tp-btf", "perf-sched");
        assert!(check_mode(&protocol::parse(&text), Mode::PerfSched, &o).pass);
    }

    #[test]
    fn a_missing_feature_must_be_refused_by_name_never_by_a_crash() {
        let p = Offers::from_config(PPC);
        let step = |rc: i32, err: &str| {
            protocol::parse(&format!(
                "@@vmtest begin run-tp-btf\n@@vmtest part stdout\n\n@@vmtest part stderr\n{err}\n\n\
                 @@vmtest end run-tp-btf rc={rc} t0=0 t1=1\n"
            ))
        };
        let ok = step(2, "tracer: error: probe mode tp-btf does not work here: /sys/kernel/btf/vmlinux: not found");
        assert!(check_mode(&ok, Mode::TpBtf, &p).pass);
        let vague = step(2, "tracer: error: something failed");
        assert!(!check_mode(&vague, Mode::TpBtf, &p).pass);
        let panic = step(101, "thread 'main' panicked at src/btf.rs:1: no BTF");
        let v = check_mode(&panic, Mode::TpBtf, &p);
        assert!(!v.pass && v.problems[0].contains("panicked"), "{v:?}");
    }

    #[test]
    fn a_guest_that_never_ran_a_step_fails_that_check() {
        let o = Offers::from_config(X86);
        let v = evaluate(&GuestOutput::default(), "x86_64", &o);
        assert!(v.iter().all(|v| !v.pass || v.name.is_empty()));
        assert!(v.iter().any(|v| v
            .problems
            .iter()
            .any(|p| p.contains("never ran step check"))));
    }
}
