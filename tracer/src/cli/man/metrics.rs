//! tracer-serve(1)'s METRICS and WEB CONFIGURATION. The metric table is written here,
//! with what each series means; the tests below encode a fully populated exposition
//! with the exporter's own code and require the table to name exactly the families it
//! holds, with their types, so a metric added, renamed or retyped fails until the page
//! says so. The web-config example is parsed by the exporter's own parser.
use clap_mangen::roff::{bold, italic, roman, Roff};

/// One metric family, named as the classic text format spells it (counters with `_total`).
pub struct Metric {
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    pub labels: &'static str,
    pub meaning: &'static str,
}

const fn m(
    name: &'static str,
    kind: &'static str,
    labels: &'static str,
    meaning: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        meaning,
    }
}

/// The labels of a cgroup series and of a process series (the section's opening says
/// what they are).
const CG: &str = "the cgroup labels";
const PR: &str = "the process labels";

/// Every family `tracer serve` exposes.
pub const METRICS: &[Metric] = &[
    m("tracer_info", "gauge", "version, probe, runq_source",
      "Always 1: the build, the probe mode and where run-queue waits come from (wakeup or schedstat)."),
    m("tracer_cgroup_on_cpu_seconds_total", "counter", CG,
      "Time the cgroup's threads spent on a CPU."),
    m("tracer_process_on_cpu_seconds_total", "counter", PR,
      "Time the process's threads spent on a CPU."),
    m("tracer_cgroup_runq_wait_seconds_total", "counter", CG,
      "Time runnable (woken, new or preempted) but waiting for a CPU."),
    m("tracer_process_runq_wait_seconds_total", "counter", PR,
      "The same per process."),
    m("tracer_cgroup_off_cpu_seconds_total", "counter", "the cgroup labels, state=blocked|preempted",
      "Time off the CPU: asleep (blocked) or runnable and waiting (preempted)."),
    m("tracer_process_off_cpu_seconds_total", "counter", "the process labels, state=blocked|preempted",
      "The same per process."),
    m("tracer_cgroup_context_switches_total", "counter", "the cgroup labels, kind=voluntary|involuntary",
      "Switches out: voluntary (the thread blocked) or involuntary (preempted)."),
    m("tracer_process_context_switches_total", "counter", "the process labels, kind=voluntary|involuntary",
      "The same per process."),
    m("tracer_cgroup_migrations_total", "counter", CG,
      "Switch-ins on another CPU than the thread's previous one."),
    m("tracer_process_migrations_total", "counter", PR,
      "The same per process."),
    m("tracer_cgroup_runq_latency_seconds", "histogram", CG,
      "Run-queue latency: each wait from runnable until running."),
    m("tracer_process_runq_latency_seconds", "histogram", PR,
      "The same per process."),
    m("tracer_cgroup_on_cpu_slice_seconds", "histogram", CG,
      "On-CPU slices: switch-in to switch-out."),
    m("tracer_process_on_cpu_slice_seconds", "histogram", PR,
      "The same per process."),
    m("tracer_cgroup_off_cpu_period_seconds", "histogram", CG,
      "Off-CPU periods: switch-out to the next switch-in."),
    m("tracer_process_off_cpu_period_seconds", "histogram", PR,
      "The same per process."),
    m("tracer_cgroup_cpu_periods_total", "counter", CG,
      "CFS bandwidth periods with runnable tasks (cpu.stat nr_periods; cgroups with a quota or the cpu controller only)."),
    m("tracer_cgroup_cpu_throttled_periods_total", "counter", CG,
      "Periods in which the cgroup used up its quota (nr_throttled)."),
    m("tracer_cgroup_cpu_throttled_seconds_total", "counter", CG,
      "Time the quota kept the cgroup's tasks off the CPU (throttled_usec)."),
    m("tracer_cgroup_cpu_pressure_seconds_total", "counter", "the cgroup labels, kind=some|full",
      "cgroup v2 cpu.pressure totals: some task waited for a CPU (some), all non-idle tasks did (full)."),
    m("tracer_cpu_pressure_seconds_total", "counter", "kind=some|full",
      "The machine's /proc/pressure/cpu totals."),
    m("tracer_cpu_busy_seconds_total", "counter", "cpu",
      "Time each CPU ran threads, idle excluded."),
    m("tracer_cpu_steal_seconds_total", "counter", "cpu",
      "Time the hypervisor kept each vCPU from running (steal, /proc/stat)."),
    m("tracer_runqueue_length", "histogram", "cpu, le",
      "With --runqlen: tasks waiting for each CPU, sampled at 99 Hz (le 0 to 62, +Inf holds 63 or more); _sum / _count is the mean."),
    m("tracer_vcpu_dispatches_total", "counter", "cpu",
      "pseries, where /proc/powerpc/vcpudispatch_stats is on: dispatches of each vCPU (a re-enable restarts it)."),
    m("tracer_vcpu_dispatch_placement_total", "counter", "cpu, placement=same_cpu|same_chip|diff_chip|far_chip",
      "pseries: dispatches by where the physical CPU was relative to the previous one."),
    m("tracer_vcpu_dispatch_numa_total", "counter", "cpu, node=home|remote|far",
      "pseries: dispatches by NUMA distance from the vCPU's home node."),
    m("tracer_dtl_dispatch_latency_seconds", "histogram", "cpu",
      "pseries with --dtl: the Dispatch Trace Log's enqueue-to-dispatch time per vCPU."),
    m("tracer_dtl_entries_total", "counter", "cpu",
      "pseries with --dtl: Dispatch Trace Log entries read."),
    m("tracer_dtl_gaps_total", "counter", "cpu",
      "pseries with --dtl: places where entries were lost (a lower bound on lost entries)."),
    m("tracer_drops_total", "counter", "kind",
      "Events the kernel programs could not record, by kind (as tracer run's drops): alert on any increase."),
    m("tracer_bpf_run_time_seconds_total", "counter", "program",
      "Time the kernel spent in each of the tracer's programs (BPF run-time statistics)."),
    m("tracer_bpf_runs_total", "counter", "program",
      "Runs of each of the tracer's programs."),
    m("tracer_map_entries", "gauge", "map=threads|hist_scoped",
      "Entries in the kernel maps that grow with the machine: per-thread totals (threads) and per-process histograms (hist_scoped); alert before they fill (threads: --max-threads, default 65536; hist_scoped: 65536)."),
    m("tracer_series", "gauge", "scope=cgroup|process",
      "Series kept (bounded by --max-cgroups and --max-series)."),
    m("tracer_series_expired_total", "counter", "",
      "Process series removed after --expiry without activity."),
    m("tracer_series_overflow_total", "counter", "",
      "Process deltas summed into pid=\"other\" because --max-series was reached."),
    m("tracer_cgroup_series_overflow_total", "counter", "",
      "Cgroup deltas summed into cgroup=\"other\" because --max-cgroups was reached."),
    m("tracer_cgroup_series_filtered_total", "counter", "",
      "Cgroup deltas summed into cgroup=\"other\" by --cgroup-allow/--cgroup-deny."),
    m("tracer_known_cgroup_ids", "gauge", "",
      "Cgroup ids whose path the exporter knows."),
    m("tracer_cgroup_walks_total", "counter", "",
      "Walks of the cgroup v2 tree (at the start, and when an unknown id turns up)."),
    m("process_cpu_seconds_total", "counter", "",
      "The exporter's own user and system CPU time."),
    m("process_resident_memory_bytes", "gauge", "",
      "The exporter's own resident memory."),
];

/// The METRICS section.
pub fn section(r: &mut Roff) {
    r.control("SH", ["METRICS"]);
    r.control("PP", []).text([roman(
        "Served on /metrics in the Prometheus text format 0.0.4, or OpenMetrics when the \
         scraper's Accept header asks for it. Times are in seconds; histograms are classic, \
         with le bounds at powers of two of nanoseconds (1.024us to 17.2s) unless --buckets \
         says otherwise, so each bucket holds whole kernel buckets. Families with no series \
         (the pseries ones elsewhere, pressure without PSI) are left out.",
    )]);
    r.control("PP", []).text([roman(
        "The cgroup labels: cgroup (its cgroup v2 path cut at --cgroup-depth, or \"other\"), \
         and what the path says about the workload where it does: namespace, pod, pod_uid, \
         qos, container, container_id, runtime, service. The process labels: pid, comm, \
         and its cgroup's labels.",
    )]);
    for x in METRICS {
        r.control("TP", [])
            .text([bold(x.name), roman(" "), italic(x.kind)]);
        if x.labels.is_empty() {
            r.text([roman(x.meaning)]);
        } else {
            r.text([
                roman(x.meaning),
                roman(" Labels: "),
                roman(x.labels),
                roman("."),
            ]);
        }
    }
}

/// A web config the exporter accepts (the tests parse it with the exporter's parser).
pub const WEB_CONFIG_EXAMPLE: &str = "tls_server_config:
  cert_file: server.crt
  key_file: server.key
basic_auth_users:
  prometheus: $2y$10$nBBPxkDHkMzjTKgQCm4m1uVWypuYrxGl3p/f0o9CaDOxN8kELOmOa
";

/// The WEB CONFIGURATION section.
pub fn web_config_section(r: &mut Roff) {
    r.control("SH", ["WEB CONFIGURATION"]);
    r.control("PP", []).text([roman(
        "--web.config.file FILE reads a YAML file in the Prometheus exporters' format (as \
         node_exporter does). tracer accepts these keys and refuses any other with a one-line \
         error, so that no setting a user believes in force is ignored:",
    )]);
    for (key, what) in [
        (
            "tls_server_config.cert_file",
            "The certificate chain (PEM), relative to the file's directory. Needs key_file.",
        ),
        (
            "tls_server_config.key_file",
            "Its private key (PEM). Needs cert_file.",
        ),
        (
            "basic_auth_users",
            "A mapping of user names to bcrypt hashes (cost at most 14; htpasswd -nBC 10 USER \
             makes one). With users, every request needs one of them.",
        ),
    ] {
        r.control("TP", []).text([bold(key)]).text([roman(what)]);
    }
    r.control("PP", []).text([roman("For example:")]);
    r.control("PP", []).control("RS", ["4"]).control("nf", []);
    for line in WEB_CONFIG_EXAMPLE.lines() {
        r.text([roman(line)]);
    }
    r.control("fi", []).control("RE", []);
    r.control("PP", []).text([roman(
        "A --listen address other than loopback needs a web config with TLS and users, or \
         --insecure-listen.",
    )]);
}
