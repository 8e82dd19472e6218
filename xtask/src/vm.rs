//! `cargo xtask vm-test`: the tracer on real Debian kernels under qemu, x86_64, ppc64le
//! (pseries) and aarch64 (virt), each booted with a busybox initramfs holding the tracer, the libraries it
//! links, the test workload and tests/vm's scripts. The guest runs the steps; the host
//! turns them into PASS/FAIL checks (vm/checks.rs) and shows each failing check's output.
//!
//! Provisioning comes from `provision::vm_test` and `provision::guest` (checked first, so
//! a second run changes nothing): qemu from Debian for each architecture; for ppc64le
//! and aarch64 the dpkg architecture and the cross toolchain, the ones cross-test uses
//! too. Kernel packages and busybox-static are downloaded with `apt-get download` into
//! `<target>/vm-cache` and unpacked there, never installed. The kernels are listed in
//! tests/vm/kernels; `--kernel PACKAGE` adds more.

mod checks;
mod initramfs;
mod protocol;
mod qemu;
mod stress;
mod tcg;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

pub use crate::arch::{Arch, AARCH64, ARCHES, PPC64LE, X86_64};
use crate::provision::{self, guest};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchChoice {
    #[value(name = "x86_64")]
    X86_64,
    #[value(name = "ppc64le")]
    Ppc64le,
    #[value(name = "aarch64")]
    Aarch64,
    #[value(name = "all")]
    All,
}

#[derive(clap::Args, Debug)]
pub struct VmTestArgs {
    /// Which guests to boot.
    #[arg(long, value_enum, default_value_t = ArchChoice::All)]
    pub arch: ArchChoice,
    /// Also test this Debian kernel package (repeatable), e.g. linux-image-6.1.0-47-amd64;
    /// its architecture comes from its name (amd64 or powerpc64le). With --stress, only
    /// these kernels are booted.
    #[arg(long = "kernel", value_name = "PACKAGE")]
    pub kernel: Vec<String>,
    /// Instead of the checks: boot each kernel --boots times under each of these loads
    /// (comma-separated), attaching to sched_switch and detaching for --stress-secs, and
    /// count the crashes (tests/vm/stress.sh).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LOAD")]
    pub stress: Vec<stress::Load>,
    /// Boots per load for --stress.
    #[arg(long, default_value_t = 8, requires = "stress")]
    pub boots: u32,
    /// Seconds of guest uptime each --stress boot spends attaching and detaching.
    #[arg(long, default_value_t = 60, requires = "stress")]
    pub stress_secs: u32,
    /// Run the guests on one emulator thread (`-accel tcg,thread=single`): a crash that
    /// goes away is a race between qemu's vCPU threads, not the guest's. Before qemu 8.1
    /// it keeps x86_64 guests from dying of a stale int3 (tests/vm/README.md), but it
    /// shifts some timing comparisons, so it is not the default.
    #[arg(long)]
    pub single_thread_tcg: bool,
    /// The x86_64 guests run the static (musl, release) tracer of `cargo xtask build
    /// --static` instead of the glibc one: every check then runs on it.
    #[arg(long = "static")]
    pub static_bin: bool,
}

/// The matrix: tests/vm/kernels plus `--kernel`, for the chosen architectures.
fn kernels(args: &VmTestArgs) -> Result<Vec<(&'static Arch, String)>> {
    let only_named = !args.stress.is_empty() && !args.kernel.is_empty();
    let mut list = if only_named {
        Vec::new()
    } else {
        guest::listed_kernels()?
    };
    for package in &args.kernel {
        let Some(arch) = ARCHES.iter().find(|a| package.contains(a.kernel_flavour)) else {
            bail!("cannot tell the architecture of {package}: expected a name with amd64, powerpc64le or arm64");
        };
        if !list
            .iter()
            .any(|(a, p)| a.name == arch.name && p == package)
        {
            list.push((arch, package.clone()));
        }
    }
    list.retain(|(a, _)| match args.arch {
        ArchChoice::All => true,
        ArchChoice::X86_64 => a.name == X86_64.name,
        ArchChoice::Ppc64le => a.name == PPC64LE.name,
        ArchChoice::Aarch64 => a.name == AARCH64.name,
    });
    if list.is_empty() {
        bail!("no kernel to test for --arch {:?}", args.arch);
    }
    Ok(list)
}

/// The guest's binaries for one architecture.
struct GuestBins {
    tracer: PathBuf,
    workload: PathBuf,
}

/// Builds the tracer (embedding the eBPF object) and the workload for every architecture
/// asked for: the host's through `cargo xtask build`'s own path, ppc64le cross-compiled
/// with the environment `cargo xtask cross-test` uses, so the two share their artifacts.
fn build_bins(
    arches: &[&'static Arch],
    static_bin: bool,
) -> Result<Vec<(&'static str, GuestBins)>> {
    let built = crate::build(false)?;
    let static_tracer = if static_bin {
        Some(crate::package::build_static(true)?)
    } else {
        None
    };
    let target = crate::target_dir()?;
    let mut out = Vec::new();
    for arch in arches {
        let mut cargo = crate::cargo(None, "build", &target);
        cargo.env("TRACER_EBPF_DIR", &built.ebpf_dir);
        let dir = match arch.cross {
            None => {
                cargo.args(["--package", "tracer-tests", "--bin", "tracer-workload"]);
                target.join("debug")
            }
            Some(cross) => {
                let t = cross.rust_target;
                cargo
                    .args(["--target", t])
                    .args(["--package", "tracer", "--package", "tracer-tests"])
                    .args(["--bin", "tracer", "--bin", "tracer-workload"]);
                cross.env(&mut cargo);
                target.join(t).join("debug")
            }
        };
        crate::cmd::run(&mut cargo)
            .with_context(|| format!("building the {} guest's binaries failed", arch.name))?;
        let bins = GuestBins {
            tracer: if arch.cross.is_none() {
                static_tracer.clone().unwrap_or_else(|| built.bin.clone())
            } else {
                dir.join("tracer")
            },
            workload: dir.join("tracer-workload"),
        };
        for b in [&bins.tracer, &bins.workload] {
            if !b.exists() {
                bail!("cargo reported success but built no {}", b.display());
            }
        }
        out.push((arch.name, bins));
    }
    Ok(out)
}

/// Packs the guest's initramfs: busybox, the binaries (stripped) with their libraries,
/// tests/vm's init and steps, and /dev/console.
/// `extra` are more programs for the guest's /bin (name, host path), with their libraries.
fn pack(
    arch: &Arch,
    bins: &GuestBins,
    busybox: &Path,
    extra: &[(String, PathBuf)],
    dir: &Path,
) -> Result<PathBuf> {
    let strip = arch.strip();
    let tracer = initramfs::stripped(&bins.tracer, &dir.join("bin/tracer"), &strip)?;
    let workload = initramfs::stripped(&bins.workload, &dir.join("bin/tracer-workload"), &strip)?;
    let lib_dirs = arch.lib_dirs();
    let mut all: Vec<&Path> = vec![&tracer, &workload];
    all.extend(extra.iter().map(|(_, p)| p.as_path()));
    let libs = initramfs::needed_libraries(&all, &lib_dirs)?;
    let vm_dir = crate::workspace_root().join("tests/vm");
    let path = dir.join("initramfs.cpio");
    let mut c = initramfs::Cpio::create(&path)?;
    for d in ["dev", "proc", "sys", "tmp", "run", "lib", "vmtest"] {
        c.dir(d)?;
    }
    c.char_dev("dev/console", 0o600, 5, 1)?;
    // Both loaders' paths (/lib64/ld-linux-x86-64.so.2, /lib64/ld64.so.2) land in /lib.
    c.symlink("lib64", "lib")?;
    c.copy("init", 0o755, &vm_dir.join("init"))?;
    c.copy("vmtest/steps.sh", 0o644, &vm_dir.join("steps.sh"))?;
    c.copy("vmtest/stress.sh", 0o644, &vm_dir.join("stress.sh"))?;
    c.copy("bin/busybox", 0o755, busybox)?;
    c.copy("bin/tracer", 0o755, &tracer)?;
    c.copy("bin/tracer-workload", 0o755, &workload)?;
    for (name, from) in extra {
        c.copy(&format!("bin/{name}"), 0o755, from)?;
    }
    for (name, from) in &libs {
        c.copy(&format!("lib/{name}"), 0o755, from)?;
    }
    c.finish()?;
    println!(
        "vm-test: packed {} ({:.1} MiB: busybox, tracer, tracer-workload, {}{})",
        path.display(),
        std::fs::metadata(&path)?.len() as f64 / (1 << 20) as f64,
        extra
            .iter()
            .map(|(n, _)| format!("{n}, "))
            .collect::<String>(),
        libs.iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(path)
}

/// How long one guest may run before it is declared hung: VMTEST_TIMEOUT, else the
/// architecture's own bound.
fn timeout(arch: &Arch) -> Duration {
    let secs = std::env::var("VMTEST_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(arch.timeout_secs);
    Duration::from_secs(secs)
}

/// What went wrong with a boot that did not complete: the step it was in and the first
/// kernel error line on its console.
fn crash_summary(boot: &qemu::Boot, guest: &protocol::GuestOutput) -> String {
    let console = std::fs::read_to_string(&boot.console_log).unwrap_or_default();
    let error = stress::read_crash(&console)
        .map(|c| c.describe())
        .unwrap_or_else(|| "no kernel error on the console".into());
    let after = guest.steps.last().map_or("boot", |s| s.name.as_str());
    format!(
        "{} after step {after} ({error})",
        if boot.timed_out { "hung" } else { "stopped" }
    )
}

/// One VM's outcome.
struct VmResult {
    label: String,
    verdicts: Vec<checks::Verdict>,
    secs: f64,
    /// Why its guest was booted again (the stale-int3 death of a first boot), if it was,
    /// and how many of its checks come from that second boot.
    retry: Option<(usize, String)>,
}

fn print_verdicts(r: &VmResult) {
    println!("\nvm-test: {} ({:.0} s)", r.label, r.secs);
    for v in &r.verdicts {
        let mark = if v.pass { "PASS" } else { "FAIL" };
        if v.summary.is_empty() {
            println!("  {mark} {}", v.name);
        } else {
            println!("  {mark} {}: {}", v.name, v.summary);
        }
        for p in &v.problems {
            println!("       - {p}");
        }
        if let Some(t) = &v.transcript {
            for line in t.lines().take(60) {
                println!("       | {line}");
            }
            if t.lines().count() > 60 {
                println!("       | ... ({} more lines)", t.lines().count() - 60);
            }
        }
    }
}

/// Boots one kernel as `test_kernel_main` does, then in each of its architecture's
/// other machine configurations.
fn test_kernel(
    arch: &Arch,
    kernel: &guest::Kernel,
    initrd: &Path,
    work: &Path,
    single: bool,
) -> Result<VmResult> {
    let mut r = test_kernel_main(arch, kernel, initrd, work, single)?;
    let offers = checks::Offers::from_config(&kernel.config);
    for extra in arch.extra_boots {
        let mut opts = qemu::Options::checks(&format!("vmtest.steps={}", extra.steps), single);
        opts.machine = Some(extra.machine);
        // qemu's option parser takes '=' and ',' in a path (`-monitor unix:...`) for its
        // own: the directory is named after the property without them.
        let dir = work
            .join(&kernel.package)
            .join(extra.machine.replace(['=', ','], "-"));
        println!("\nvm-test: [{}] booting again: {}", arch.name, extra.label);
        let boot = qemu::boot(
            arch,
            &kernel.image,
            initrd,
            &dir,
            timeout(arch),
            arch.name,
            &opts,
        )?;
        r.secs += boot.secs;
        let guest = protocol::parse(&boot.results);
        let mut verdicts = checks::evaluate_steps(&guest, arch.name, &offers);
        if boot.timed_out || !guest.done {
            verdicts.push(checks::Verdict {
                name: "the guest powered off by itself".into(),
                pass: false,
                summary: String::new(),
                problems: vec![crash_summary(&boot, &guest)],
                transcript: Some(boot.console_tail(40)),
            });
        }
        r.verdicts.extend(verdicts.into_iter().map(|mut v| {
            v.name = format!("[{}] {}", extra.label, v.name);
            v
        }));
    }
    Ok(r)
}

/// Boots a kernel with all steps. A guest that died gets one more boot only when its
/// console shows the stale-int3 death of multi-threaded TCG before qemu 8.1 (`tcg`):
/// anything else it died of stands. Returns the boot that counts, its steps, the seconds
/// both took, and why the first was booted again, if it was.
fn boot_with_a_second_chance(
    arch: &Arch,
    kernel: &guest::Kernel,
    initrd: &Path,
    dir: &Path,
    single: bool,
) -> Result<(qemu::Boot, protocol::GuestOutput, f64, Option<String>)> {
    let mut boot = qemu::boot(
        arch,
        &kernel.image,
        initrd,
        dir,
        timeout(arch),
        arch.name,
        &qemu::Options::checks("", single),
    )?;
    let mut secs = boot.secs;
    let mut guest = protocol::parse(&boot.results);
    let mut retry = None;
    if boot.timed_out || !guest.done {
        let what = crash_summary(&boot, &guest);
        let console = std::fs::read_to_string(&boot.console_log).unwrap_or_default();
        let hang_from = boot.hang.as_ref().map(|h| h.console_before);
        let known = tcg::stale_int3(arch, single, qemu::version(arch.qemu), &console, hang_from);
        let Some(sig) = known else {
            println!(
                "vm-test: [{}] the guest {what}: not the known TCG int3 death, not booted again",
                arch.name
            );
            return Ok((boot, guest, secs, None));
        };
        println!(
            "vm-test: [{}] the guest {what}: the known TCG int3 death ({sig}); booting it again \
             (counted in the summary)",
            arch.name
        );
        retry = Some(format!("first boot {what}: {sig}"));
        boot = qemu::boot(
            arch,
            &kernel.image,
            initrd,
            &dir.join("after-crash"),
            timeout(arch),
            arch.name,
            &qemu::Options::checks("", single),
        )?;
        secs += boot.secs;
        guest = protocol::parse(&boot.results);
    }
    Ok((boot, guest, secs, retry))
}

/// Boots one kernel and evaluates its checks. A failed check fails: no step is run again.
fn test_kernel_main(
    arch: &Arch,
    kernel: &guest::Kernel,
    initrd: &Path,
    work: &Path,
    single: bool,
) -> Result<VmResult> {
    let offers = checks::Offers::from_config(&kernel.config);
    let label = format!("{} {} ({})", arch.name, kernel.package, kernel.version);
    println!("\nvm-test: booting {label}: {}", offers.describe());
    // Counting time in instructions runs every vCPU on one host thread.
    let single = single || qemu::icount_shift().is_some();
    if !single && arch.name == X86_64.name && qemu::version(arch.qemu).is_some_and(|v| v < (8, 1)) {
        println!(
            "vm-test: [{}] {} is older than 8.1: a guest may die of a stale int3 while \
             programs attach (tests/vm/README.md); --single-thread-tcg avoids it",
            arch.name, arch.qemu
        );
    }
    let dir = work.join(&kernel.package);
    let (boot, guest, secs, retry) = boot_with_a_second_chance(arch, kernel, initrd, &dir, single)?;
    let mut verdicts = checks::evaluate(&guest, arch.name, &offers);
    if boot.timed_out || !guest.done {
        verdicts.push(checks::Verdict {
            name: "the guest powered off by itself".into(),
            pass: false,
            summary: String::new(),
            problems: vec![format!(
                "{}; console log {}, results {}",
                if boot.timed_out {
                    format!("killed after {} s", timeout(arch).as_secs())
                } else {
                    "it stopped before the last step".to_string()
                },
                boot.console_log.display(),
                boot.results_log.display()
            )],
            transcript: Some(boot.console_tail(40)),
        });
    }
    Ok(VmResult {
        label,
        retry: retry.map(|why| (verdicts.len(), why)),
        verdicts,
        secs,
    })
}

pub fn vm_test(args: VmTestArgs) -> Result<()> {
    let start = Instant::now();
    let matrix = kernels(&args)?;
    let mut arches: Vec<&'static Arch> = Vec::new();
    for (a, _) in &matrix {
        if !arches.iter().any(|x| x.name == a.name) {
            arches.push(a);
        }
    }
    let cache = crate::target_dir()?.join("vm-cache");
    let work = crate::target_dir()?.join("vm-test");

    let mut apt = provision::vm_test(&arches)?;
    let t_provision = start.elapsed().as_secs_f64();

    let bins = build_bins(&arches, args.static_bin)?;
    let t_build = start.elapsed().as_secs_f64() - t_provision;

    let mut results = Vec::new();
    for arch in &arches {
        let busybox = guest::busybox(&mut apt, arch, &cache)?;
        let bins = &bins
            .iter()
            .find(|(n, _)| *n == arch.name)
            .context("no binaries")?
            .1;
        let mut extra = Vec::new();
        if args.stress.contains(&stress::Load::Runqlat) {
            let sbin = guest::libbpf_tools(&mut apt, arch, &cache)?;
            extra.push(("runqlat".to_string(), sbin.join("runqlat")));
        }
        let initrd = pack(arch, bins, &busybox, &extra, &work.join(arch.name))?;
        for (_, package) in matrix.iter().filter(|(a, _)| a.name == arch.name) {
            let kernel = guest::kernel(&mut apt, arch, package, &cache)?;
            if args.stress.is_empty() {
                results.push(test_kernel(
                    arch,
                    &kernel,
                    &initrd,
                    &work,
                    args.single_thread_tcg,
                )?);
            } else {
                let timeout = match std::env::var("VMTEST_TIMEOUT") {
                    Ok(_) => timeout(arch),
                    Err(_) => Duration::from_secs(u64::from(args.stress_secs) + 150),
                };
                stress::run(
                    arch,
                    &kernel,
                    &initrd,
                    &work,
                    &args.stress,
                    args.boots,
                    args.stress_secs,
                    timeout,
                    args.single_thread_tcg,
                )?;
            }
        }
    }
    if !args.stress.is_empty() {
        println!(
            "\nvm-test: stress done in {:.0} s",
            start.elapsed().as_secs_f64()
        );
        return Ok(());
    }

    let mut passed = 0;
    let mut failed = 0;
    let mut known = 0;
    let mut retried = Vec::new();
    for r in &results {
        print_verdicts(r);
        passed += r.verdicts.iter().filter(|v| v.pass).count();
        failed += r.verdicts.iter().filter(|v| !v.pass).count();
        known += r
            .verdicts
            .iter()
            .map(|v| v.summary.matches("KNOWN (").count())
            .sum::<usize>();
        if let Some((n, why)) = &r.retry {
            retried.push((*n, format!("{} ({why})", r.label)));
        }
    }
    println!(
        "\nvm-test: provisioning {t_provision:.0} s, builds {t_build:.0} s, {} VM(s) {:.0} s, total {:.0} s",
        results.len(),
        results.iter().map(|r| r.secs).sum::<f64>(),
        start.elapsed().as_secs_f64()
    );
    println!("vm-test: {}", summary_line(passed, failed, &retried));
    if known > 0 {
        println!("vm-test: {known} known open bug(s) let through, each printed as KNOWN above (docs/testing.md#open-bugs)");
    }
    if failed > 0 {
        bail!("{failed} vm-test check(s) failed: see FAIL above");
    }
    Ok(())
}

/// `57 passed, 0 failed, 19 on a retry: x86_64 ... (first boot ...)`: every check that
/// comes from a guest booted a second time is counted, with the reason.
fn summary_line(passed: usize, failed: usize, retried: &[(usize, String)]) -> String {
    let mut s = format!("{passed} passed, {failed} failed");
    if !retried.is_empty() {
        let n: usize = retried.iter().map(|(n, _)| n).sum();
        let who: Vec<&str> = retried.iter().map(|(_, w)| w.as_str()).collect();
        s.push_str(&format!(", {n} on a retry: {}", who.join("; ")));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_retry_is_in_the_summary_line() {
        assert_eq!(super::summary_line(57, 0, &[]), "57 passed, 0 failed");
        let r = [(
            19,
            "x86_64 linux-image-amd64 (first boot hung: int3)".to_string(),
        )];
        assert_eq!(
            super::summary_line(57, 0, &r),
            "57 passed, 0 failed, 19 on a retry: x86_64 linux-image-amd64 (first boot hung: int3)"
        );
    }
}
