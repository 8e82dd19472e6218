//! What the kernel under test offers, read from the kernel itself, so that the tests'
//! expectations follow the machine instead of naming facts of one VM.

use std::path::Path;

/// Kernel BTF (`/sys/kernel/btf/vmlinux`): what tp_btf programs (and auto's first choice)
/// need.
pub fn has_btf() -> bool {
    Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// PERF_TYPE_RAW, the type the core (CPU) PMU registers with on x86, arm64 and powerpc.
const PERF_TYPE_RAW: &str = "4";

/// A hardware PMU for the CPU: an event source registered as PERF_TYPE_RAW (x86's `cpu`,
/// arm64's `armv8_pmuv3*`, powerpc's `cpu`). Without one, `cycles` and the other hardware
/// events are "not supported".
pub fn hardware_pmu() -> bool {
    std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("type")).ok())
                .any(|t| t.trim() == PERF_TYPE_RAW)
        })
        .unwrap_or(false)
}

/// An IBM POWER pseries partition with the vcpudispatch statistics `tracer dtl` reads.
pub fn pseries() -> bool {
    Path::new("/proc/powerpc/vcpudispatch_stats").exists()
}

/// perf's kprobe PMU (`/sys/bus/event_source/devices/kprobe`, CONFIG_KPROBE_EVENTS): with
/// it the perf-sched mode has an attach path the kernel itself offers, so a refusal there
/// is the tracer's fault (fentry may still be refused at attach, so its absence says
/// nothing).
pub fn kprobe_pmu() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
}

/// Whether `tracer run --probe perf-sched` runs here (it needs fentry or kprobes on the
/// perf sched hooks, which no file states reliably: fentry can be refused at attach).
/// Tests use it to check that `tracer check` and auto agree with what run does.
pub fn perf_sched_runs() -> bool {
    crate::run_tracer(&["run", "--probe", "perf-sched", "-d", "200ms"])
        .status
        .success()
}
