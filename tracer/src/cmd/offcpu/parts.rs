//! A run's stacks made into frames: kernel stacks by id, user stacks by process and id
//! (frame-pointer walks from the stack map, or walks unwound from copies), with the
//! binaries that cut them short and the tracing's own frames dropped.
use std::collections::{BTreeSet, HashMap, HashSet};

use tracer_common::offcpu::{
    STACK_COLLISION, STACK_COPIED, STACK_COPY_LOST, STACK_EMPTY, STACK_FULL, STACK_NOT_TAKEN,
};

use super::copies;
use crate::{
    model::stacks::{Frame, Missing, StackPart},
    sys::symbolize::{base_name, SymFrame, Symbolizer},
};

fn missing(id: i32) -> Missing {
    match id {
        STACK_NOT_TAKEN => Missing::NotTaken,
        STACK_EMPTY => Missing::Empty,
        STACK_COLLISION => Missing::Collision,
        STACK_FULL => Missing::MapFull,
        STACK_COPY_LOST | STACK_COPIED => Missing::CopyLost,
        _ => Missing::Unreadable,
    }
}

pub(super) fn frames(v: Vec<Vec<SymFrame>>) -> Vec<Frame> {
    v.into_iter()
        .flatten()
        .map(|f| Frame {
            name: f.name,
            inlined: f.inlined,
        })
        .collect()
}

/// Kernel frames that mean a wakeup ran in an interrupt, not in the task it
/// interrupted: x86's IRQ and system-vector entries, arm64's and powerpc's, softirqs run
/// on the way out of one, and the hrtimer interrupt every architecture has.
const INTERRUPT_FRAMES: &[&str] = &[
    "hrtimer_interrupt",
    "common_interrupt",
    "__irq_exit_rcu",
    "irq_exit_rcu",
    "handle_softirqs",
    "__do_softirq",
    "el1_interrupt",
    "el0_interrupt",
    "gic_handle_irq",
    "do_IRQ",
    "timer_interrupt",
];

/// Whether a waker's kernel stack ran in an interrupt.
pub(super) fn in_interrupt(kernel: &[Frame]) -> bool {
    kernel.iter().any(|f| {
        INTERRUPT_FRAMES.contains(&f.name.as_str())
            || f.name.starts_with("asm_sysvec_")
            || f.name.starts_with("sysvec_")
    })
}

/// Stacks made into frames, each id once: kernel stacks by id, user stacks by process
/// and id, with what could not be symbolized and the binaries that cut stacks short.
pub(super) struct Parts<'a> {
    pub(super) sym: &'a Symbolizer,
    pub(super) ips: &'a HashMap<u32, Vec<u64>>,
    /// Stacks unwound from copies that stop before a thread's first function.
    pub(super) cut_copies: &'a HashSet<u32>,
    pub(super) kcache: HashMap<i32, StackPart>,
    pub(super) ucache: HashMap<(u32, i32), (StackPart, Option<String>)>,
    pub(super) unsymbolized: BTreeSet<(u32, String)>,
    pub(super) truncated: BTreeSet<String>,
}

impl Parts<'_> {
    pub(super) fn kernel(&mut self, id: i32) -> StackPart {
        let (sym, ips) = (self.sym, self.ips);
        self.kcache
            .entry(id)
            .or_insert_with(|| match ips.get(&(id as u32)) {
                Some(a) if id >= 0 => {
                    StackPart::Frames(strip_tracing_frames(frames(sym.kernel(a))))
                }
                _ if id >= 0 => StackPart::Missing {
                    missing: Missing::Unreadable,
                },
                _ => StackPart::Missing {
                    missing: missing(id),
                },
            })
            .clone()
    }

    /// A user stack of process `tgid` (`comm` names it in a note if unsymbolized).
    pub(super) fn user(&mut self, tgid: u32, id: i32, comm: &str) -> (StackPart, Option<String>) {
        let (sym, ips, cut_copies) = (self.sym, self.ips, self.cut_copies);
        let unsymbolized = &mut self.unsymbolized;
        let got = self
            .ucache
            .entry((tgid, id))
            .or_insert_with(|| match ips.get(&(id as u32)) {
                Some(a) if id >= 0 => {
                    if !sym.knows(tgid) {
                        unsymbolized.insert((tgid, comm.to_string()));
                    }
                    let per_ip = sym.user(tgid, a);
                    let cut = if id as u32 >= copies::FIRST_ID {
                        // Unwound from a copy: framehop says whether it reached the root.
                        cut_copies.contains(&(id as u32)).then(|| {
                            let f = a.last().and_then(|&ip| sym.file_of(tgid, ip - 1));
                            format!("dwarf:{}", base_name(f.unwrap_or("[unknown]")))
                        })
                    } else {
                        truncated_at(sym, tgid, a, &per_ip)
                    };
                    (StackPart::Frames(frames(per_ip)), cut)
                }
                _ if id >= 0 => (
                    StackPart::Missing {
                        missing: Missing::Unreadable,
                    },
                    None,
                ),
                _ => (
                    StackPart::Missing {
                        missing: missing(id),
                    },
                    None,
                ),
            })
            .clone();
        if let Some(b) = &got.1 {
            self.truncated.insert(b.clone());
        }
        got
    }
}

/// Where a complete user stack ends: the outermost call of a process's main thread or
/// of a new thread (glibc and musl).
const STACK_ROOTS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "__libc_start_main_impl",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "thread_start",
    "start",
];

/// Whether a user stack was cut short, and the binary to blame. The kernel walks user
/// stacks by frame pointer: a function that keeps none hides its caller (and may send
/// the walk astray), and a walk that does not end in a thread's root call was lost.
/// `per_ip` is the symbolizer's frames per address (leaf first); the binary blamed holds
/// the first function without a frame pointer, else the outermost known frame.
fn truncated_at(
    sym: &Symbolizer,
    tgid: u32,
    ips: &[u64],
    per_ip: &[Vec<SymFrame>],
) -> Option<String> {
    let last = per_ip.last()?.last()?;
    let ends_at_root = STACK_ROOTS.contains(&last.name.as_str());
    // The outermost frame's own prologue does not matter: nothing above it is missing.
    let n = if ends_at_root {
        per_ip.len() - 1
    } else {
        per_ip.len()
    };
    for (i, frames) in per_ip.iter().enumerate().take(n) {
        if frames.last().and_then(|f| f.keeps_fp) == Some(false) {
            let addr = if i == 0 {
                ips[i]
            } else {
                ips[i].saturating_sub(1)
            };
            return Some(base_name(sym.file_of(tgid, addr).unwrap_or("[unknown]")).to_string());
        }
    }
    if ends_at_root {
        return None;
    }
    let file = ips
        .iter()
        .rev()
        .find_map(|&ip| sym.file_of(tgid, ip))
        .unwrap_or("[unknown]");
    Some(base_name(file).to_string())
}

/// The kernel frames of the tracing itself (the program, the tracepoint's call into it)
/// are not where the thread waited: everything up to the tracepoint's own frames is
/// dropped from the leaf end. (The program's address may be named after any nearby
/// kallsyms entry, so it is found through the frames that call it.)
fn strip_tracing_frames(mut f: Vec<Frame>) -> Vec<Frame> {
    let tracing = |n: &str| {
        n.starts_with("bpf_trace_run")
            || n.starts_with("__traceiter_")
            || n.starts_with("__bpf_trace_")
            || n.starts_with("perf_trace_")
    };
    if let Some(last) = f.iter().take(6).rposition(|fr| tracing(&fr.name)) {
        f.drain(..=last);
    }
    f
}
