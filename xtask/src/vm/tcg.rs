//! The one guest death `vm-test` boots a guest again for: multi-threaded TCG before qemu
//! 8.1 keeps executing a stale translation of the `int3` that `text_poke_bp` puts on an
//! x86_64 static-key site (tests/vm/README.md: the emulator's bug, fixed upstream by
//! `deba78709ae8`, whatever attaches to sched_switch). Anything else a guest dies of is a
//! failure, and a boot again is counted and named in the summary.

use super::stress::{cpus_after_nmi, message, read_crash};
use crate::arch::{Arch, X86_64};

/// Frames of the CPU that patches the key and waits for the other to take its IPI.
const PATCHING: &[&str] = &["text_poke_bp", "smp_text_poke"];

/// The site a trapping CPU is found at: `__schedule`, whose code there already holds the
/// final 5-byte NOP (`<0f> 1f 44 00 00`, or `0f <1f> ...` once the handler backed RIP up).
const NOP: [&str; 2] = ["<0f> 1f 44 00 00", "0f <1f> 44 00 00"];

/// Whether the console shows the stale-int3 death, and where: the qemu it can happen
/// with (x86_64, multi-threaded TCG, qemu before 8.1) and one of its faces: `Oops: int3`
/// in `__schedule` (6.12 oopses on the stale trap); a soft lockup of the patching CPU in
/// text_poke_bp's IPI sync, or an RCU stall, while a CPU traps (an `exc_int3` frame, or
/// RIP in `__schedule` on the NOP); or a hung guest whose CPUs an NMI found trapping.
/// `hang_from`: where the console stood when a hung guest was sent its NMI.
pub fn stale_int3(
    arch: &Arch,
    single_thread_tcg: bool,
    qemu: Option<(u32, u32)>,
    console: &str,
    hang_from: Option<usize>,
) -> Option<String> {
    if arch.name != X86_64.name || single_thread_tcg || qemu.is_none_or(|v| v >= (8, 1)) {
        return None;
    }
    let lines: Vec<&str> = console.lines().map(message).collect();
    let caught = trapping(&lines);
    if let Some(i) = lines.iter().position(|l| l.contains("Oops: int3")) {
        if let Some(rip) = lines[i..].iter().take(40).find(|l| l.starts_with("RIP: ")) {
            if rip.contains("__schedule+") {
                return Some(format!("Oops: int3 at {}", rip.trim_start_matches("RIP: ")));
            }
        }
    }
    if let Some(c) = read_crash(console) {
        let patching = c
            .trace
            .iter()
            .find(|f| PATCHING.iter().any(|p| f.starts_with(p)));
        if c.kind == "lockup" && caught {
            if let Some(f) = patching {
                return Some(format!(
                    "soft lockup patching a static key ({f}) while a CPU traps on int3"
                ));
            }
        }
        if c.kind == "stall" && caught {
            return Some(format!("{} while a CPU traps on int3", c.first));
        }
    }
    let after_nmi = hang_from.and_then(|at| console.get(at..))?;
    let nmi_lines: Vec<&str> = after_nmi.lines().map(message).collect();
    if !trapping(&nmi_lines) {
        return None;
    }
    let cpus = cpus_after_nmi(after_nmi);
    Some(format!("hung; the NMI found {}", cpus.join(", ")))
}

/// A CPU caught in the trap: an `exc_int3` frame, or RIP in `__schedule` with the NOP.
fn trapping(lines: &[&str]) -> bool {
    let on_nop = lines.iter().enumerate().any(|(i, l)| {
        l.starts_with("RIP: ")
            && l.contains("__schedule+")
            && lines[i..]
                .iter()
                .take(4)
                .any(|c| c.starts_with("Code: ") && NOP.iter().any(|n| c.contains(n)))
    });
    on_nop || lines.iter().any(|l| l.contains("exc_int3"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: Option<(u32, u32)> = Some((7, 2));

    #[test]
    fn the_oops_of_6_12_in_schedule() {
        let c = "[ 41.2] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                 [ 41.2] CPU: 1 PID: 300 Comm: tracer Not tainted 6.12.117+deb12-amd64 #1\n\
                 [ 41.2] RIP: 0010:__schedule+0x338/0xb10\n\
                 [ 41.2] Code: 48 8b 45 00 <1f> 44 00 00\n";
        let s = stale_int3(&X86_64, false, OLD, c, None).unwrap();
        assert!(s.contains("__schedule+0x338"), "{s}");
        // Elsewhere it is not the emulator's bug; nor with a fixed or single-threaded qemu.
        let other = c.replace("__schedule+0x338", "bpf_prog_run+0x12");
        assert_eq!(stale_int3(&X86_64, false, OLD, &other, None), None);
        assert_eq!(stale_int3(&X86_64, false, Some((8, 1)), c, None), None);
        assert_eq!(stale_int3(&X86_64, true, OLD, c, None), None);
        assert_eq!(stale_int3(&X86_64, false, None, c, None), None);
    }

    #[test]
    fn the_soft_lockup_of_the_patching_cpu() {
        let c = "[ 90.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [tracer:148]\n\
                 [ 90.1] RIP: 0010:smp_call_function_many_cond+0x12e/0x3b0\n\
                 [ 90.1] Call Trace:\n\
                 [ 90.1]  <TASK>\n\
                 [ 90.1]  on_each_cpu_cond_mask+0x24/0x40\n\
                 [ 90.1]  text_poke_bp_batch+0x1a0/0x250\n\
                 [ 90.1]  text_poke_bp+0x49/0x70\n\
                 [ 90.1]  </TASK>\n\
                 [ 90.1] NMI backtrace for cpu 1\n\
                 [ 90.1] RIP: 0010:__schedule+0x1bc/0x9c0\n\
                 [ 90.1] Code: 48 89 df e9 53 03 00 00 <0f> 1f 44 00 00 48 8b\n";
        assert!(stale_int3(&X86_64, false, OLD, c, None)
            .unwrap()
            .contains("text_poke_bp_batch"));
        // A lockup with no CPU trapping, or not in the patching code, is ours to explain.
        let alone = c.replace("<0f> 1f 44 00 00", "<48> 8b 45 00 00");
        assert_eq!(stale_int3(&X86_64, false, OLD, &alone, None), None);
        let elsewhere = c.replace("text_poke_bp", "bpf_map_update");
        assert_eq!(stale_int3(&X86_64, false, OLD, &elsewhere, None), None);
    }

    #[test]
    fn an_rcu_stall_while_a_cpu_traps() {
        let c = "[ 60.2] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n\
                 [ 60.2] NMI backtrace for cpu 1\n\
                 [ 60.2] RIP: 0010:__schedule+0x1bc/0x9c0\n\
                 [ 60.2] Code: 48 89 df e9 53 03 00 00 <0f> 1f 44 00 00 48 8b\n";
        assert!(stale_int3(&X86_64, false, OLD, c, None).is_some());
        let elsewhere = c.replace("__schedule+0x1bc", "do_idle+0x10");
        assert_eq!(stale_int3(&X86_64, false, OLD, &elsewhere, None), None);
    }

    #[test]
    fn a_hang_the_nmi_finds_in_the_int3_handler() {
        let before = "[ 12.0] Run /init as init process\n";
        let c = format!(
            "{before}[ 99.0] Kernel panic - not syncing: NMI: Not continuing\n\
             [ 99.0] CPU: 0 PID: 0 Comm: swapper/0 Not tainted 6.1.0-57-amd64 #1\n\
             [ 99.0] RIP: 0010:asm_exc_int3+0x0/0x40\n"
        );
        assert!(stale_int3(&X86_64, false, OLD, &c, Some(before.len()))
            .unwrap()
            .contains("asm_exc_int3"));
        let idle = c.replace("asm_exc_int3+0x0/0x40", "native_safe_halt+0xb/0x10");
        assert_eq!(
            stale_int3(&X86_64, false, OLD, &idle, Some(before.len())),
            None
        );
        // A hang with no look inside says nothing.
        assert_eq!(stale_int3(&X86_64, false, OLD, before, None), None);
    }
}
