//! What perf's privilege modifiers (`:u :k :h :G :H`, the `exclude_*` bits) select on
//! this machine, where the architecture gives them a meaning of its own, so the report
//! can say when a modifier has no effect here instead of showing its count as if it had.
//!
//! The one place for the PMU's architecture-specific semantics. Today that is arm64,
//! where the bits map to exception levels (Documentation/arch/arm64/perf.rst and
//! `armv8pmu_set_event_filter()`): user space runs at EL0; the kernel at EL1, or at EL2
//! when it booted there with VHE, and then it *is* the hypervisor: exclude_hv is ignored
//! and `:k` counts EL2. Without VHE, KVM's hypervisor code runs at EL2 (`:h`), and a
//! counter excluding the host is only enabled on guest entry
//! (`kvm_pmu_counter_deferred()`). Elsewhere nothing is said.
//!
//! Where the kernel runs is read from its boot log (`/dev/kmsg`): "CPU: All CPU(s)
//! started at EL2" (or EL1), and VHE from "Virtualization Host Extensions" (cpufeature)
//! or "VHE mode initialized" (KVM). When the log no longer holds them, the configuration
//! is unknown and nothing is said.
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use crate::perf::AttrFields;

/// The architecture whose exclude bits this module knows, as `std::env::consts::ARCH`.
const ARM64: &str = "aarch64";

/// Where an arm64 kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm64Levels {
    /// Booted at EL1: no EL2 this kernel can use, so no hypervisor code and no guests.
    El1,
    /// Booted at EL2 with VHE: the kernel runs at EL2 and is the hypervisor.
    Vhe,
    /// Booted at EL2 without VHE: the kernel at EL1, KVM's hypervisor code at EL2.
    Nvhe,
}

impl Arm64Levels {
    pub fn describe(self) -> &'static str {
        match self {
            Arm64Levels::El1 => "arm64, kernel at EL1 without EL2",
            Arm64Levels::Vhe => "arm64, kernel at EL2 with VHE: it is the hypervisor",
            Arm64Levels::Nvhe => "arm64, kernel at EL1, KVM's hypervisor at EL2 (nVHE)",
        }
    }
}

/// From the kernel's boot messages; None when they do not say.
pub fn from_kernel_log(log: &str) -> Option<Arm64Levels> {
    if log.contains("CPU(s) started at EL1") {
        return Some(Arm64Levels::El1);
    }
    if !log.contains("CPU(s) started at EL2") {
        return None;
    }
    Some(
        if log.contains("Virtualization Host Extensions") || log.contains("VHE mode initialized") {
            Arm64Levels::Vhe
        } else {
            Arm64Levels::Nvhe
        },
    )
}

/// The kernel log as /dev/kmsg holds it now (non-blocking; one record a read).
fn kernel_log() -> Option<String> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut out = String::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
            // EPIPE: a record was overwritten while reading; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    Some(out)
}

/// This machine's configuration, when it is one this module knows (read once a run).
pub fn detect() -> Option<Arm64Levels> {
    static LEVELS: std::sync::OnceLock<Option<Arm64Levels>> = std::sync::OnceLock::new();
    *LEVELS.get_or_init(|| {
        if std::env::consts::ARCH != ARM64 {
            return None;
        }
        from_kernel_log(&kernel_log()?)
    })
}

/// (event, notice) for each counted hardware event whose modifiers mean something else
/// on this machine than they say.
pub fn notices<'a>(events: impl Iterator<Item = &'a str>) -> Vec<(String, String)> {
    let Some(levels) = detect() else {
        return Vec::new();
    };
    events
        .filter_map(|e| {
            let f = crate::perf::attr_fields(&crate::perf::parse_event(e).ok()?);
            let hardware = f.type_ != crate::perf::sys::PERF_TYPE_SOFTWARE;
            Some((e.to_string(), modifier_notice(levels, e, &f, hardware)?))
        })
        .collect()
}

/// What a counter with these exclude bits counts on an arm64 machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Counted {
    user: bool,
    kernel: bool,
    /// Hypervisor code at EL2 that is not the kernel (nVHE only).
    hyp: bool,
    /// KVM guests, if any run.
    guests: bool,
}

fn counted(levels: Arm64Levels, f: &AttrFields) -> Counted {
    let guests =
        |possible: bool| possible && !f.exclude_guest && !(f.exclude_user && f.exclude_kernel);
    match levels {
        // Without VHE a counter excluding the host is enabled only on guest entry; at
        // EL1 without EL2 no guest can run.
        Arm64Levels::El1 if f.exclude_host => Counted::default(),
        Arm64Levels::El1 => Counted {
            user: !f.exclude_user,
            kernel: !f.exclude_kernel,
            ..Counted::default()
        },
        Arm64Levels::Nvhe if f.exclude_host => Counted {
            guests: guests(true),
            ..Counted::default()
        },
        Arm64Levels::Nvhe => Counted {
            user: !f.exclude_user,
            kernel: !f.exclude_kernel,
            hyp: !f.exclude_hv,
            guests: guests(true),
        },
        // VHE: EL2 (the kernel) counts unless exclude_kernel or exclude_host; exclude_hv
        // is ignored; exclude_host also drops EL0.
        Arm64Levels::Vhe => Counted {
            user: !f.exclude_user && !f.exclude_host,
            kernel: !f.exclude_kernel && !f.exclude_host,
            hyp: false,
            guests: guests(true),
        },
    }
}

/// A notice for an event whose modifiers select nothing that runs here, or select the
/// same as no modifiers; None when they mean what they say (or no modifier is given).
pub fn modifier_notice(
    levels: Arm64Levels,
    event: &str,
    f: &AttrFields,
    hardware: bool,
) -> Option<String> {
    let (base, mods) = event.rsplit_once(':')?;
    if !hardware || mods.is_empty() {
        return None;
    }
    let all = AttrFields {
        exclude_user: false,
        exclude_kernel: false,
        exclude_hv: false,
        exclude_guest: false,
        exclude_host: false,
        ..*f
    };
    let this = counted(levels, f);
    let host = this.user || this.kernel || this.hyp;
    let why = levels.describe();
    if !host && !this.guests {
        return Some(format!(
            "{event}: `:{mods}` selects no exception level where code runs on this machine ({why}): it reads 0"
        ));
    }
    if !host {
        return Some(format!(
            "{event}: `:{mods}` counts only KVM guests on this machine ({why}): 0 unless one runs"
        ));
    }
    let every = counted(levels, &all);
    if this == every {
        return Some(format!(
            "{event}: `:{mods}` has no effect on this machine ({why}): it counts what {base} counts"
        ));
    }
    (Counted {
        guests: every.guests,
        ..this
    } == every)
        .then(|| {
            format!(
                "{event}: `:{mods}` differs from {base} on this machine only by KVM guests ({why})"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::{attr_fields, parse_event};

    fn notice(levels: Arm64Levels, e: &str) -> Option<String> {
        modifier_notice(levels, e, &attr_fields(&parse_event(e).unwrap()), true)
    }

    /// A record's sequence number (`prio,seq,time,flags;text`).
    fn seq_of(record: &str) -> Option<u64> {
        record.split(';').next()?.split(',').nth(1)?.parse().ok()
    }

    /// The first record /dev/kmsg holds now, by one read of a fresh open.
    fn first_seq() -> u64 {
        use std::io::Read as _;
        let mut f = std::fs::File::open("/dev/kmsg").expect("cannot open /dev/kmsg");
        let mut buf = vec![0u8; 8192];
        let n = f.read(&mut buf).expect("a record");
        seq_of(&String::from_utf8_lossy(&buf[..n])).expect("a sequence number")
    }

    /// From the first record the kernel still holds: the boot banner where the log has
    /// not wrapped (a machine up for long, or one whose log filled with lockdown lines,
    /// has lost it), else the first record a fresh open reads, or one between that and
    /// the first after (records written meanwhile may push the oldest out).
    #[test]
    #[ignore = "needs root (reads /dev/kmsg)"]
    fn reads_the_live_kernel_log_from_its_first_record() {
        let before = first_seq();
        let log = kernel_log().expect("cannot open /dev/kmsg");
        let after = first_seq();
        let first = log.lines().next().and_then(seq_of).expect("a first record");
        if before == 0 {
            assert!(
                log.contains("Linux version"),
                "{} bytes, no boot banner",
                log.len()
            );
        }
        assert!(
            (before..=after).contains(&first),
            "the log read begins at record {first}, the kernel's first was {before}..{after}"
        );
    }

    #[test]
    fn reads_the_boot_level_from_the_kernel_log() {
        assert_eq!(
            from_kernel_log("[0.1] CPU: All CPU(s) started at EL1\n"),
            Some(Arm64Levels::El1)
        );
        let el2 = "CPU features: detected: Virtualization Host Extensions\n\
                   CPU: All CPU(s) started at EL2\n";
        assert_eq!(from_kernel_log(el2), Some(Arm64Levels::Vhe));
        assert_eq!(
            from_kernel_log(
                "CPU: All CPU(s) started at EL2\nkvm [1]: Hyp mode initialized successfully\n"
            ),
            Some(Arm64Levels::Nvhe)
        );
        assert_eq!(from_kernel_log("rotated away"), None);
    }

    /// The seed's table (Documentation/arch/arm64/perf.rst), per configuration.
    #[test]
    fn says_which_modifiers_mean_nothing_here() {
        use Arm64Levels::*;
        for levels in [El1, Vhe, Nvhe] {
            assert_eq!(notice(levels, "cycles"), None);
            assert_eq!(notice(levels, "cycles:u"), None, "{levels:?}");
            assert_eq!(notice(levels, "cycles:k"), None, "{levels:?}");
        }
        // No EL2: nothing runs there, and no guest can.
        assert!(notice(El1, "cycles:h")
            .unwrap()
            .contains("selects no exception level"));
        assert!(notice(El1, "cycles:G")
            .unwrap()
            .contains("selects no exception level"));
        assert!(notice(El1, "cycles:H").unwrap().contains("has no effect"));
        assert!(notice(El1, "cycles:ukh").unwrap().contains("has no effect"));
        // VHE: exclude_hv is ignored, the kernel is the hypervisor.
        assert!(notice(Vhe, "cycles:h")
            .unwrap()
            .contains("selects no exception level"));
        assert!(notice(Vhe, "cycles:G").unwrap().contains("only KVM guests"));
        assert!(notice(Vhe, "cycles:H")
            .unwrap()
            .contains("only by KVM guests"));
        assert_eq!(notice(Vhe, "cycles:kh"), None);
        // nVHE: :h is KVM's hypervisor code, a real level.
        assert_eq!(notice(Nvhe, "cycles:h"), None);
        assert!(notice(Nvhe, "cycles:G")
            .unwrap()
            .contains("only KVM guests"));
        assert!(notice(Nvhe, "cycles:H")
            .unwrap()
            .contains("only by KVM guests"));
        // Software events have no exception levels to speak of here.
        let tc = attr_fields(&parse_event("task-clock:u").unwrap());
        assert_eq!(modifier_notice(El1, "task-clock:u", &tc, false), None);
    }
}
