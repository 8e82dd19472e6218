//! `tracer dtl` and the hypervisor section against fixture trees built here and used as
//! `--root`: vcpudispatch_stats text, a cpuinfo with a timebase, DTL binaries whose
//! entries are written big-endian byte by byte (independently of the decoder).
use std::{
    fs,
    path::PathBuf,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use tracer::{
    cmd::dtl::{self as dtl_cmd, DtlConfig},
    model::hist::Histogram,
    output,
    pseries::{
        dtl, hypervisor,
        vcpudispatch::{self, DispatchCounters, StatsState},
    },
    sys::root::Root,
};

#[path = "dtl/cli.rs"]
mod cli;
#[path = "dtl/settings.rs"]
mod settings;

/// A temporary directory standing for `/`, removed on drop.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tracer-dtl-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Fixture { dir }
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.dir.join(abs.trim_start_matches('/'))
    }

    fn write(&self, abs: &str, bytes: impl AsRef<[u8]>) {
        let p = self.path(abs);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        // write-then-rename, so a concurrent reader never sees half a file
        let tmp = p.with_extension("fixture-tmp");
        fs::write(&tmp, bytes).unwrap();
        fs::rename(&tmp, &p).unwrap();
    }

    fn read(&self, abs: &str) -> String {
        fs::read_to_string(self.path(abs)).unwrap()
    }

    fn root(&self) -> Root {
        Root::new(&self.dir)
    }

    /// A pseries partition with statistics enabled and the documented example counters.
    fn pseries(name: &str) -> Self {
        let f = Fixture::new(name);
        f.write(vcpudispatch::STATS_PATH, DOC_STATS);
        f.write(vcpudispatch::FREQ_PATH, "50\n");
        f.write(
            "/proc/cpuinfo",
            "processor\t: 0\ncpu\t\t: POWER10 (architected), altivec supported\n\n\
             timebase\t: 512000000\nplatform\t: pSeries\nmodel\t\t: IBM,9080-HEX\n",
        );
        f.write(vcpudispatch::DTL_MASK_PATH, "0x07\n");
        f
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The example output of Documentation/arch/powerpc/vcpudispatch_stats.rst (4 vCPUs).
const DOC_STATS: &str = "cpu0 6839 4126 2683 30 0 6821 18 0\n\
cpu1 2515 1274 1229 12 0 2509 6 0\n\
cpu2 2317 1198 1109 10 0 2312 5 0\n\
cpu3 2259 1165 1088 6 0 2256 3 0\n";

/// One `struct dtl_entry`, big-endian, built field by field.
#[allow(clippy::too_many_arguments)]
fn be_entry(disp: u8, preempt: u8, proc_id: u16, e2d: u32, r2e: u32, w2r: u32, tb: u64) -> Vec<u8> {
    let mut b = vec![disp, preempt];
    b.extend_from_slice(&proc_id.to_be_bytes());
    b.extend_from_slice(&e2d.to_be_bytes());
    b.extend_from_slice(&r2e.to_be_bytes());
    b.extend_from_slice(&w2r.to_be_bytes());
    b.extend_from_slice(&tb.to_be_bytes());
    b.extend_from_slice(&0xc000_0000_0001_0000u64.to_be_bytes()); // fault_addr
    b.extend_from_slice(&0xc000_0000_0000_1234u64.to_be_bytes()); // srr0
    b.extend_from_slice(&0x8000_0000_0000_1033u64.to_be_bytes()); // srr1
    assert_eq!(b.len(), 48);
    b
}

fn args(duration: Option<Duration>) -> DtlConfig {
    DtlConfig {
        duration,
        dtl_freq: None,
        dtl_mask: None,
        raw: false,
        json: true,
    }
}

#[test]
fn snapshot_has_the_exact_counters_and_ratios() {
    let f = Fixture::pseries("snap");
    let r = dtl::snapshot(&f.root(), false).unwrap();
    assert!(r.stats_enabled);
    assert_eq!(r.vcpus.len(), 4);
    let c0 = &r.vcpus[0];
    assert_eq!(c0.cpu, 0);
    assert_eq!(
        c0.counters,
        DispatchCounters {
            total_disp: 6839,
            same_cpu_disp: 4126,
            same_chip_disp: 2683,
            diff_chip_disp: 30,
            far_chip_disp: 0,
            numa_home_disp: 6821,
            numa_remote_disp: 18,
            numa_far_disp: 0,
        }
    );
    assert_eq!(c0.home_ratio, Some(6821.0 / 6839.0));
    assert!(c0.delta.is_none() && c0.rates.is_none());

    let j = serde_json::to_value(&r).unwrap();
    let v3 = &j["vcpus"][3];
    assert_eq!(v3["cpu"], 3);
    for (name, want) in vcpudispatch::COUNTER_NAMES
        .iter()
        .zip([2259u64, 1165, 1088, 6, 0, 2256, 3, 0])
    {
        assert_eq!(v3[*name], want, "{name}");
    }
    assert_eq!(v3["home_ratio"].as_f64().unwrap(), 2256.0 / 2259.0);
    assert!(j["dtl"].is_null());

    let text = output::dtl::format_text(&r);
    assert!(text.contains("cpu3") && text.contains("99.7"), "{text}");
}

#[test]
fn stats_off_snapshot_says_so() {
    let f = Fixture::pseries("off");
    f.write(vcpudispatch::STATS_PATH, "off\n");
    let r = dtl::snapshot(&f.root(), false).unwrap();
    assert!(!r.stats_enabled && r.vcpus.is_empty());
    assert!(output::dtl::format_text(&r).contains("vcpudispatch_stats is off"));
}

#[test]
fn window_gives_deltas_and_rates_and_restores_the_frequency() {
    let f = Fixture::pseries("window");
    // cpu0 moves, cpu1 stays
    let later = DOC_STATS.replace(
        "cpu0 6839 4126 2683 30 0 6821 18 0",
        "cpu0 7839 4626 3153 60 0 7801 38 0",
    );
    let dir = f.path("/");
    let stats = f.path(vcpudispatch::STATS_PATH);
    let freq = f.path(vcpudispatch::FREQ_PATH);
    // The "kernel": counters move during the window; the frequency seen meanwhile is kept.
    let kernel = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let seen = fs::read_to_string(&freq).unwrap();
        let tmp = dir.join("stats.tmp");
        fs::write(&tmp, later).unwrap();
        fs::rename(&tmp, &stats).unwrap();
        seen
    });
    let mut a = args(Some(Duration::from_millis(400)));
    a.dtl_freq = Some(100);
    let r = dtl_cmd::collect_blocking(&a, &f.root()).unwrap();
    assert_eq!(
        kernel.join().unwrap(),
        "100\n",
        "frequency set during the window"
    );
    assert_eq!(
        f.read(vcpudispatch::FREQ_PATH),
        "50\n",
        "frequency restored"
    );
    assert!(
        !f.path(vcpudispatch::STATE_PATH).exists(),
        "state file removed"
    );

    let window = r.window_ns.unwrap();
    assert!(window >= 400_000_000, "{window}");
    let d0 = r.vcpus[0].delta.unwrap();
    assert_eq!(
        d0,
        DispatchCounters::from_array([1000, 500, 470, 30, 0, 980, 20, 0])
    );
    assert_eq!(r.vcpus[0].delta_home_ratio, Some(0.98));
    let rate = r.vcpus[0].rates.unwrap().total_disp;
    assert!(
        (rate - 1000.0 / (window as f64 / 1e9)).abs() < 1e-6,
        "{rate}"
    );
    assert_eq!(r.vcpus[1].delta.unwrap(), DispatchCounters::default());
    assert_eq!(r.vcpus[1].delta_home_ratio, None, "no dispatches: no ratio");
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["vcpus"][0]["delta"]["total_disp"], 1000);
    assert_eq!(j["vcpus"][0]["total_disp"], 7839);
}

/// cpu-0: ten entries, enqueue_to_dispatch 1..10 us; cpu-1: five entries whose timebase
/// goes backwards twice (two gaps).
fn dtl_fixture(f: &Fixture) -> (Vec<u64>, Vec<u64>) {
    let mut cpu0 = Vec::new();
    let mut e2d_ns = Vec::new();
    for i in 1..=10u32 {
        // 512 ticks = 1 us at 512 MHz
        cpu0.extend(be_entry(
            3, // decrementer_interrupt
            2, // H_CEDE
            0x10 + i as u16,
            512 * i,
            256,
            1024 * i,
            1_000_000 + u64::from(i) * 10_000,
        ));
        e2d_ns.push(1000 * u64::from(i));
    }
    let mut cpu1 = Vec::new();
    let mut e2d1 = Vec::new();
    for (i, (tb, disp, pre)) in [
        (5_000u64, 7u8, 4u8), // time_slice / time_slice
        (6_000, 0, 3),        // external_interrupt / H_CONFER
        (5_500, 5, 1),        // backwards: gap; firmware_internal_event (code 5)
        (7_000, 42, 77),      // unknown codes
        (1_000, 1, 2),        // backwards again
    ]
    .into_iter()
    .enumerate()
    {
        let ticks = 51_200 * (i as u32 + 1); // 100 us steps
        cpu1.extend(be_entry(disp, pre, 7, ticks, 0, 0, tb));
        e2d1.push(100_000 * (i as u64 + 1));
    }
    f.write("/sys/kernel/debug/powerpc/dtl/cpu-0", cpu0);
    f.write("/sys/kernel/debug/powerpc/dtl/cpu-1", cpu1);
    (e2d_ns, e2d1)
}

#[test]
fn raw_log_gives_exact_counts_percentiles_reasons_and_gaps() {
    let f = Fixture::pseries("raw");
    let (e2d0, e2d1) = dtl_fixture(&f);
    let r = dtl::snapshot(&f.root(), true).unwrap();
    let d = r.dtl.as_ref().unwrap();
    assert_eq!(d.timebase_hz, 512_000_000);
    assert_eq!(d.entries, 15);
    assert_eq!(d.lost, 2);
    assert_eq!(d.per_vcpu.len(), 2);
    assert_eq!((d.per_vcpu[0].cpu, d.per_vcpu[0].lost), (0, 0));
    assert_eq!((d.per_vcpu[1].cpu, d.per_vcpu[1].lost), (1, 2));

    // Percentiles are those of a histogram of exactly these ns values...
    let mut h = Histogram::new();
    for &v in e2d0.iter().chain(&e2d1) {
        h.record(v);
    }
    assert_eq!(d.dispatch_latency, h.summary());
    assert_eq!(
        d.dispatch_latency.sum_ns,
        e2d0.iter().chain(&e2d1).sum::<u64>()
    );
    // ...and within the histogram's 1/32 resolution of the true ones.
    let close = |got: Option<u64>, want: u64| {
        let g = got.unwrap() as f64;
        assert!(
            (g - want as f64).abs() <= want as f64 / 32.0,
            "{g} vs {want}"
        );
    };
    let p0 = &d.per_vcpu[0].dispatch_latency;
    close(p0.p50_ns, 5_000);
    close(p0.p90_ns, 9_000);
    close(p0.max_ns, 10_000);
    close(d.per_vcpu[1].dispatch_latency.p50_ns, 300_000);
    close(d.dispatch_latency.max_ns, 500_000);
    close(d.per_vcpu[0].waiting_to_ready.p50_ns, 10_000);
    assert_eq!(d.ready_to_enqueue.sum_ns, 10 * 500);
    // steal = enqueue_to_dispatch + ready_to_enqueue
    assert_eq!(d.steal_ns, e2d0.iter().chain(&e2d1).sum::<u64>() + 10 * 500);

    let dr = &d.dispatch_reasons;
    assert_eq!(dr["decrementer_interrupt"], 10);
    assert_eq!(dr["time_slice"], 1);
    assert_eq!(dr["external_interrupt"], 1);
    assert_eq!(
        dr["firmware_internal_event"], 2,
        "codes 1 and 5 share the name"
    );
    assert_eq!(dr["unknown_42"], 1);
    assert_eq!(dr.values().sum::<u64>(), 15);
    let pr = &d.preempt_reasons;
    assert_eq!(pr["H_CEDE"], 11);
    assert_eq!(pr["time_slice"], 1);
    assert_eq!(pr["H_CONFER"], 1);
    assert_eq!(pr["firmware_internal_event"], 1);
    assert_eq!(pr["unknown_77"], 1);

    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["dtl"]["entries"], 15);
    assert_eq!(j["dtl"]["lost"], 2);
    assert_eq!(j["dtl"]["dispatch_reasons"]["decrementer_interrupt"], 10);
    assert_eq!(j["dtl"]["preempt_reasons"]["H_CEDE"], 11);
    assert!(j["dtl"]["dispatch_latency"]["p99_ns"].is_u64());
    assert!(j["dtl"]["ready_to_enqueue"]["count"] == 15);
    assert!(j["dtl"]["waiting_to_ready"]["count"] == 15);
    let text = output::dtl::format_text(&r);
    for want in ["15 entries", "2 gaps", "usecs", "H_CEDE", "unknown_42"] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
}

#[test]
fn small_values_at_one_ghz_are_exact() {
    let f = Fixture::pseries("ghz");
    f.write("/proc/cpuinfo", "timebase : 1000000000\n");
    let mut b = Vec::new();
    for (i, v) in [10u32, 20, 30, 40, 50].into_iter().enumerate() {
        b.extend(be_entry(3, 2, 0, v, 0, 0, i as u64));
    }
    f.write("/sys/kernel/debug/powerpc/dtl/cpu-0", b);
    let r = dtl::snapshot(&f.root(), true).unwrap();
    let s = &r.dtl.unwrap().dispatch_latency;
    assert_eq!(
        (s.p50_ns, s.p90_ns, s.max_ns),
        (Some(30), Some(50), Some(50))
    );
}

#[test]
fn malformed_inputs_are_errors_naming_the_file() {
    // a short entry
    let f = Fixture::pseries("short");
    dtl_fixture(&f);
    f.write("/sys/kernel/debug/powerpc/dtl/cpu-1", vec![0u8; 48 + 20]);
    let e = dtl::snapshot(&f.root(), true).unwrap_err().to_string();
    assert!(e.contains("dtl/cpu-1") && e.contains("short entry"), "{e}");

    // garbage in the statistics
    let f = Fixture::pseries("garbage");
    f.write(
        vcpudispatch::STATS_PATH,
        "cpu0 1 2 3 4 5 6 7 8\nhello world\n",
    );
    let e = dtl::snapshot(&f.root(), false).unwrap_err().to_string();
    assert!(
        e.contains("vcpudispatch_stats") && e.contains("line 2"),
        "{e}"
    );
    f.write(vcpudispatch::STATS_PATH, "cpu0 1 2 3 4 5 6 7\n");
    let e = dtl::snapshot(&f.root(), false).unwrap_err().to_string();
    assert!(
        e.contains("vcpudispatch_stats") && e.contains("7 counters"),
        "{e}"
    );

    // missing files
    let f = Fixture::pseries("missing");
    dtl_fixture(&f);
    fs::remove_file(f.path("/proc/cpuinfo")).unwrap();
    let e = dtl::snapshot(&f.root(), true).unwrap_err().to_string();
    assert!(e.contains("proc/cpuinfo"), "{e}");
    f.write("/proc/cpuinfo", "processor : 0\n");
    let e = dtl::snapshot(&f.root(), true).unwrap_err().to_string();
    assert!(e.contains("proc/cpuinfo") && e.contains("timebase"), "{e}");

    let f = Fixture::pseries("nodebugfs");
    let e = dtl::snapshot(&f.root(), true).unwrap_err().to_string();
    assert!(e.contains("powerpc/dtl") && e.contains("debugfs"), "{e}");

    let f = Fixture::new("x86");
    let e = dtl::snapshot(&f.root(), false).unwrap_err().to_string();
    assert!(
        e.starts_with("not a pseries partition: ")
            && e.ends_with("/proc/powerpc/vcpudispatch_stats not found"),
        "{e}"
    );
    let e = dtl_cmd::run(&args(Some(Duration::ZERO)), &f.root()).unwrap_err();
    assert!(e.to_string().contains("not a pseries partition"));
}

#[test]
fn busy_hint_names_the_other_consumer() {
    let f = Fixture::pseries("busy");
    // vcpudispatch_stats is on in this fixture
    let h = vcpudispatch::busy_hint(&f.root());
    assert!(h.contains("vcpudispatch_stats is enabled"), "{h}");
    // a debugfs reader and a perf process
    f.write(vcpudispatch::STATS_PATH, "off\n");
    f.write("/proc/321/comm", "dtl-reader\n");
    fs::create_dir_all(f.path("/proc/321/fd")).unwrap();
    std::os::unix::fs::symlink(
        "/sys/kernel/debug/powerpc/dtl/cpu-3",
        f.path("/proc/321/fd/4"),
    )
    .unwrap();
    f.write("/proc/654/comm", "perf\n");
    let h = vcpudispatch::busy_hint(&f.root());
    assert!(
        h.contains("PID 321 (dtl-reader)") && h.contains("cpu-3"),
        "{h}"
    );
    assert!(h.contains("PID 654 (perf)") && h.contains("vpa_dtl"), "{h}");
    // nobody found: the generic advice
    let g = Fixture::pseries("busy2");
    g.write(vcpudispatch::STATS_PATH, "off\n");
    let h = vcpudispatch::busy_hint(&g.root());
    assert!(h.contains("vpa_dtl") && h.contains("fuser"), "{h}");
}

#[test]
fn hypervisor_snapshot_from_proc_stat_and_vcpudispatch() {
    let f = Fixture::new("steal");
    let stat = |s0: u64, s1: u64| {
        format!(
            "cpu  2 0 2 2 0 0 0 {} 0 0\ncpu0 1 0 1 1 0 0 0 {s0} 0 0\ncpu1 1 0 1 1 0 0 0 {s1} 0 0\nctxt 1\n",
            s0 + s1
        )
    };
    f.write("/proc/stat", stat(10, 20));
    let root = f.root();
    let before = hypervisor::Snapshot::take(&root).unwrap();
    assert!(before.dispatch.is_none());
    f.write("/proc/stat", stat(10 + before.user_hz, 20));
    let after = hypervisor::Snapshot::take(&root).unwrap();
    let r = hypervisor::report(&before, &after, None, 4_000_000_000);
    assert_eq!(r.source, "steal");
    assert_eq!(r.cpus[0].steal_ns, 1_000_000_000);
    assert_eq!(r.cpus[0].steal_percent, Some(25.0));
    assert_eq!(r.cpus[1].steal_ns, 0);
    assert_eq!(r.total_steal_percent, Some(12.5));
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["cpus"][0]["steal_ns"], 1_000_000_000u64);
    assert!(output::hypervisor::format_text(&r).contains("cpu0"));
    let r1 = hypervisor::report(&before, &after, Some(&[1]), 4_000_000_000);
    assert_eq!(r1.total_steal_ns, 0);

    // on pseries with statistics on, the dispatch view comes along
    let p = Fixture::pseries("steal-pseries");
    p.write("/proc/stat", stat(0, 0));
    let b = hypervisor::Snapshot::take(&p.root()).unwrap();
    p.write(
        vcpudispatch::STATS_PATH,
        DOC_STATS.replace("cpu2 2317", "cpu2 2417"),
    );
    let a = hypervisor::Snapshot::take(&p.root()).unwrap();
    let r = hypervisor::report(&b, &a, Some(&[2]), 1_000_000_000);
    assert_eq!(r.source, "vcpudispatch_stats");
    let d = r.dispatch.unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].delta.unwrap().total_disp, 100);

    // malformed and missing /proc/stat name the file
    f.write("/proc/stat", "cpu0 1 2\n");
    let e = hypervisor::Snapshot::take(&root).unwrap_err().to_string();
    assert!(e.contains("proc/stat"), "{e}");
    let e = hypervisor::Snapshot::take(&Fixture::new("nostat").root())
        .unwrap_err()
        .to_string();
    assert!(e.contains("proc/stat"), "{e}");
}

#[test]
fn stats_state_parsing_of_the_fixture_file() {
    let f = Fixture::pseries("state");
    let StatsState::On(v) = vcpudispatch::read_stats(&f.root()).unwrap() else {
        panic!("expected counters");
    };
    assert_eq!(v.iter().map(|c| c.cpu).collect::<Vec<_>>(), [0, 1, 2, 3]);
}
