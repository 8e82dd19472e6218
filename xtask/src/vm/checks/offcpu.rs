//! `tracer offcpu --wakers` in the guest, in each probe mode: two busy-sleep workers (2
//! ms of work, 8 ms asleep, 1 s) whose off-CPU time (blocked and preempted: a period
//! runs from the switch-out to the switch-in, the wait after the wakeup included, as
//! offcputime's) is their life less what schedstat says they ran; their blocked stacks
//! name the kernel's nanosleep and were woken from the timer interrupt; tp-btf and
//! raw-tp refused in one line where the kernel has no BTF. In tp-btf mode on x86_64 and
//! arm64, `--unwind auto` copies the workers' stacks (`dwarf`): their blocked stacks must
//! be unwound to a thread's root (framehop's verdict: no `user_truncated`) through the
//! guest's libc, past the workload's own frames (the guest's binaries are stripped, so
//! the roots are not named).

use super::common::*;

const MODES: [&str; 3] = ["tp-btf", "raw-tp", "tracepoint"];
/// The workers' life (`--duration-ms`), ns; they end at the first iteration past it.
const LIFE_NS: f64 = 1e9;
/// Two iterations (2 ms of work, 8 ms asleep: the thread starts after the clock and
/// ends at the first check past it), and 5%.
const SLACK_NS: f64 = 20e6;
/// User frames a worker's sleep has at least: libc's clock_nanosleep, std's sleep, the
/// workload's loop, std's thread start, glibc's start_thread and clone3.
const MIN_FRAMES: usize = 6;

pub(super) fn check_offcpu(g: &GuestOutput, o: &Offers) -> Vec<Verdict> {
    let arch = g
        .step("facts-boot")
        .map(facts)
        .map(|f| fact(&f, "arch").to_string())
        .unwrap_or_default();
    MODES.iter().map(|m| check_mode(g, o, m, &arch)).collect()
}

/// ppc64le's 6.1 kernel gives a classic tracepoint's BPF program a kernel callchain of
/// one frame (`__schedule`, the tracepoint's caller): the walk from the caller regs
/// perf fetches stops there. Only there are the frame names and the wakers' interrupts
/// (told by frames) left unchecked, and the check says so; a one-frame stack anywhere
/// else fails.
fn stunted_kernel_stacks(arch: &str, blocked: &[&Json]) -> bool {
    arch == "ppc64le"
        && !blocked.is_empty()
        && blocked.iter().all(|s| s["kernel"].items().len() <= 1)
}

fn check_mode(g: &GuestOutput, o: &Offers, mode: &str, arch: &str) -> Verdict {
    let mut c = Check::new(format!("offcpu {mode}: off-CPU time against schedstat"));
    let Some(step) = need_step(g, "offcpu", &mut c) else {
        return c.done(None);
    };
    let rc = step.part(&format!("{mode}-rc")).trim().to_string();
    let err = step.part(&format!("{mode}-err")).trim().to_string();
    if mode != "tracepoint" && !o.btf {
        c.expect(rc != "0" && err.lines().count() == 1, || {
            format!("without BTF {mode} must be refused in one line: rc {rc}, {err}")
        });
        c.note("refused without BTF, in one line");
        return c.done(Some(step));
    }
    if !c.expect(rc == "0", || format!("exit status {rc}: {err}")) {
        return c.done(Some(step));
    }
    // One pretty-printed document.
    let Ok(doc) = crate::json::parse(step.part(&format!("{mode}-json"))) else {
        c.fail("no JSON report");
        return c.done(Some(step));
    };
    c.expect(doc["probe"].as_str() == Some(mode), || {
        format!("the report says probe {}", doc["probe"])
    });
    // framehop unwinds x86_64 and arm64; the copies need tp_btf's task pointers.
    let dwarf = mode == "tp-btf" && matches!(arch, "x86_64" | "aarch64");
    let unwind = if dwarf { "dwarf" } else { "fp" };
    c.expect(doc["unwind"].as_str() == Some(unwind), || {
        format!(
            "the report says unwind {}, expected {unwind}",
            doc["unwind"]
        )
    });
    let truth = step.part(&format!("truth-{mode}"));
    let workers: Vec<Json> = crate::json::lines(truth)
        .into_iter()
        .filter(|t| t["tid"] != t["pid"])
        .collect();
    c.expect(workers.len() == 2, || {
        format!("{} workers in the truth", workers.len())
    });
    let stacks = doc["stacks"].items();
    let mut shown = Vec::new();
    for w in &workers {
        let tid = w["tid"].as_u64().unwrap_or(0);
        let all: Vec<&Json> = stacks
            .iter()
            .filter(|s| s["tid"].as_u64() == Some(tid))
            .collect();
        let off: u64 = all.iter().filter_map(|s| s["total_ns"].as_u64()).sum();
        let mine: Vec<&Json> = all
            .iter()
            .copied()
            .filter(|s| s["state"] == "blocked")
            .collect();
        let blocked: u64 = mine.iter().filter_map(|s| s["total_ns"].as_u64()).sum();
        let want = LIFE_NS - w["run_ns"].as_u64().unwrap_or(0) as f64;
        c.expect((off as f64 - want).abs() <= SLACK_NS + 0.05 * want, || {
            format!(
                "tid {tid}: off-CPU {:.1} ms, its life less schedstat's run {:.1} ms",
                off as f64 / 1e6,
                want / 1e6
            )
        });
        shown.push(format!(
            "{:.0} vs {:.0} ms ({:.0} blocked)",
            off as f64 / 1e6,
            want / 1e6,
            blocked as f64 / 1e6
        ));
        if stunted_kernel_stacks(arch, &mine) {
            c.note(format!(
                "tid {tid}: kernel stacks of one frame here (ppc64le: a classic \
                 tracepoint's callchain stops at __schedule); names and interrupts unchecked"
            ));
            continue;
        }
        if dwarf {
            let whole_ns: u64 = mine
                .iter()
                .filter(|s| s["user_truncated"].as_str().is_none())
                .filter(|s| s["user"].items().len() >= MIN_FRAMES)
                .filter_map(|s| s["total_ns"].as_u64())
                .sum();
            let whole = whole_ns;
            c.note(format!(
                "tid {tid}: {:.0} of {:.0} ms asleep unwound whole (dwarf)",
                whole as f64 / 1e6,
                blocked as f64 / 1e6
            ));
            c.expect(whole * 10 >= blocked * 9, || {
                let how: Vec<String> = mine
                    .iter()
                    .map(|s| {
                        format!(
                            "{} frames, cut {}",
                            s["user"].items().len(),
                            s["user_truncated"]
                        )
                    })
                    .collect();
                format!(
                    "tid {tid}: {:.1} of {:.1} ms asleep in stacks unwound whole: {how:?}",
                    whole as f64 / 1e6,
                    blocked as f64 / 1e6
                )
            });
        }
        let named = mine.iter().any(|s| {
            s["kernel"]
                .items()
                .iter()
                .any(|f| f["name"].as_str().is_some_and(|n| n.contains("nanosleep")))
        });
        c.expect(named, || {
            format!("tid {tid}: no blocked stack names nanosleep")
        });
        let by_irq: u64 = mine
            .iter()
            .filter(|s| s["waker"]["interrupt"] == true)
            .filter_map(|s| s["total_ns"].as_u64())
            .sum();
        c.expect(by_irq * 2 >= blocked, || {
            format!(
                "tid {tid}: an interrupt woke {:.1} of its {:.1} ms asleep",
                by_irq as f64 / 1e6,
                blocked as f64 / 1e6
            )
        });
    }
    c.note(format!("workers off-CPU {}", shown.join(", ")));
    c.done(Some(step))
}
