//! The guest architectures of `cargo xtask vm-test`: how each is emulated, where its
//! binaries and libraries come from, and the further machine configurations its kernels
//! are booted in. Below `provision` (which installs their qemu and downloads their
//! kernels) and `vm`.

use std::path::PathBuf;

use crate::toolchain::{self, Cross};

/// A guest architecture.
pub struct Arch {
    /// As `uname -m` says it.
    pub name: &'static str,
    /// Debian's name.
    pub deb_arch: &'static str,
    /// What a Debian kernel package of this architecture has in its name.
    pub kernel_flavour: &'static str,
    /// Cross-built with this toolchain (None: the host's).
    pub cross: Option<&'static Cross>,
    pub qemu: &'static str,
    pub qemu_package: &'static str,
    pub qemu_args: &'static [&'static str],
    /// The kernel console (`console=`).
    pub console: &'static str,
    /// More kernel command line.
    pub cmdline: &'static str,
    /// The port the steps write to, as the guest names it.
    pub results_port: &'static str,
    /// The qemu device behind it: None for a second `-serial`; else a device taking a
    /// `chardev=` (arm64's `virt` has one UART, so the results go to a PCI 8250).
    pub results_device: Option<&'static str>,
    /// Where the guest's shared libraries come from on the host (the host's own; a
    /// cross architecture's are in its toolchain's sysroot).
    pub lib_dirs: &'static [&'static str],
    /// A boot running longer is declared hung (VMTEST_TIMEOUT overrides).
    pub timeout_secs: u64,
    /// More kernel command line when the guest counts time in instructions (qemu's
    /// `-icount`).
    pub icount_cmdline: &'static str,
    /// More boots of each kernel in another machine configuration, for some steps.
    pub extra_boots: &'static [ExtraBoot],
}

/// A further boot of a kernel with more `-M` properties, running only `steps`.
pub struct ExtraBoot {
    /// Prefixes its checks' names.
    pub label: &'static str,
    pub machine: &'static str,
    pub steps: &'static str,
}

impl Arch {
    pub fn strip(&self) -> String {
        self.cross.map_or("strip".into(), |c| c.strip())
    }

    pub fn lib_dirs(&self) -> Vec<PathBuf> {
        match self.cross {
            Some(c) => vec![PathBuf::from(c.lib_dir())],
            None => self.lib_dirs.iter().map(PathBuf::from).collect(),
        }
    }
}

pub const X86_64: Arch = Arch {
    name: "x86_64",
    deb_arch: "amd64",
    kernel_flavour: "amd64",
    cross: None,
    qemu: "qemu-system-x86_64",
    qemu_package: "qemu-system-x86",
    qemu_args: &["-M", "pc", "-accel", "tcg", "-cpu", "max"],
    console: "ttyS0",
    // The TSC sync test fails under emulation; then sched_clock (schedstat's clock) and
    // the clocksource (bpf_ktime_get_ns) part ways by up to a tick per reading, and the
    // comparisons against schedstat measure that, not the tracer. TCG's TSCs are one
    // host clock: tell the kernel to trust them.
    cmdline: "tsc=reliable",
    results_port: "/dev/ttyS1",
    results_device: None,
    lib_dirs: &[
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
    ],
    timeout_secs: 300,
    // Under -icount, 6.1 never brings CPU 1 up at boot (the boot CPU waits in
    // native_cpu_up until the NMI watchdog; 6.12 boots): boot on one CPU and let the
    // guest's init online the other (tests/vm/init).
    icount_cmdline: "maxcpus=1 vmtest.online",
    extra_boots: &[],
};

pub const PPC64LE: Arch = Arch {
    name: "ppc64le",
    deb_arch: "ppc64el",
    kernel_flavour: "powerpc64le",
    cross: Some(&toolchain::PPC64LE),
    qemu: "qemu-system-ppc64",
    qemu_package: "qemu-system-ppc",
    // The spectre capabilities default to workarounds TCG cannot emulate (warnings only).
    qemu_args: &[
        "-M",
        "pseries,cap-cfpc=broken,cap-sbbc=broken,cap-ibs=broken,cap-ccf-assist=off",
        "-cpu",
        "POWER9",
        "-accel",
        "tcg",
    ],
    console: "hvc0",
    cmdline: "",
    results_port: "/dev/hvc1",
    results_device: None,
    lib_dirs: &[],
    timeout_secs: 300,
    icount_cmdline: "",
    extra_boots: &[],
};

/// arm64 on qemu's `virt` board with every feature TCG has (`-cpu max`: PMUv3, so the
/// hardware-counter checks count for real). The kernel runs at EL1; `EL2_BOOT` boots it
/// once more at EL2 (VHE) for the exception-level checks.
pub const AARCH64: Arch = Arch {
    name: "aarch64",
    deb_arch: "arm64",
    kernel_flavour: "arm64",
    cross: Some(&toolchain::AARCH64),
    qemu: "qemu-system-aarch64",
    qemu_package: "qemu-system-arm",
    // pauth-impdef: pointer authentication (Debian's kernel signs every return address)
    // with qemu's own hash instead of QARMA, which is slow to emulate.
    qemu_args: &["-M", "virt", "-cpu", "max,pauth-impdef=on", "-accel", "tcg"],
    console: "ttyAMA0",
    cmdline: "",
    results_port: "/dev/ttyS0",
    results_device: Some("pci-serial"),
    lib_dirs: &[],
    // With pauth-impdef the steps take about what the x86_64 guest's take on the same
    // host (`tracer check` 17-29 s against 21 s, a probe mode 8-13 s against 7-11 s, at
    // a load average of 15-25); the bound leaves room for a slower host.
    timeout_secs: 600,
    // With EL2 (`virtualization=on`) the kernel boots at EL2 and, on `-cpu max`, keeps
    // running there with VHE: the other exclude_* regime of the arm64 PMU.
    icount_cmdline: "",
    extra_boots: &[ExtraBoot {
        label: "EL2/VHE boot",
        machine: "virtualization=on",
        steps: "facts-boot,pmu-levels",
    }],
};

pub const ARCHES: [&Arch; 3] = [&X86_64, &PPC64LE, &AARCH64];
