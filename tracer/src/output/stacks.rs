//! `tracer offcpu`'s text report (totals, notes, the top stacks) and its JSON document.
use std::io::Write;

use crate::model::{
    stacks::{Missing, OffcpuReport, StackPart},
    words::escape,
};

fn secs(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} us", ns as f64 / 1e3)
    }
}

fn missing_text(m: Missing) -> &'static str {
    match m {
        Missing::NotTaken => "(not taken)",
        Missing::Empty => "(none: a kernel thread, or not readable)",
        Missing::Collision => "(lost: stack map collision)",
        Missing::MapFull => "(lost: stack map full)",
        Missing::Unreadable => "(unreadable)",
        Missing::CopyLost => "(lost: ring buffer full)",
    }
}

fn write_part(out: &mut dyn Write, part: &StackPart) -> std::io::Result<()> {
    match part {
        StackPart::Frames(f) => {
            for fr in f {
                let tag = if fr.inlined { " (inlined)" } else { "" };
                writeln!(out, "      {}{tag}", escape(&fr.name))?;
            }
        }
        StackPart::Missing { missing } => writeln!(out, "      {}", missing_text(*missing))?,
    }
    Ok(())
}

/// The text report: `top` stacks (0: all), each kernel frames first (leaf on top), then
/// the user frames.
pub fn write_text(r: &OffcpuReport, top: usize, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Off-CPU stacks: {}, {}, states {}, periods of at least {}, probe {}, unwind {}",
        escape(&r.target),
        secs(r.window_ns),
        r.states,
        secs(r.min_ns),
        r.probe,
        r.unwind
    )?;
    writeln!(
        out,
        "off-CPU {} (blocked {}, preempted {}) in {} stacks",
        secs(r.total_ns),
        secs(r.blocked_ns),
        secs(r.preempted_ns),
        r.stacks.len()
    )?;
    let d = &r.drops;
    let maps = d.kernel_stack_collisions
        + d.user_stack_collisions
        + d.stack_map_full
        + d.start_map_full
        + d.sums_map_full;
    if d.any() {
        if maps > 0 {
            writeln!(
            out,
            "drops: stack collisions {} kernel / {} user, stack map full {}, switch-outs not recorded {}, periods not added {} ({})",
            d.kernel_stack_collisions,
            d.user_stack_collisions,
            d.stack_map_full,
            d.start_map_full,
            d.sums_map_full,
            secs(d.sums_map_full_ns)
        )?;
        }
        if d.wakers_map_full > 0 {
            writeln!(
                out,
                "drops: {} wakers not kept (their map was full)",
                d.wakers_map_full
            )?;
        }
        if d.copies_lost + d.copy_slots_failed > 0 {
            writeln!(
                out,
                "drops: {} periods' stack copies lost (ring buffer full), {} switch-outs without a copy slot",
                d.copies_lost, d.copy_slots_failed
            )?;
        }
        if d.switch_ins_unseen_lost > 0 {
            writeln!(
                out,
                "drops: {} periods lost: their switch-in was not reported, and without kernel BTF their time cannot be rebuilt from the thread's runtime",
                d.switch_ins_unseen_lost
            )?;
        }
    } else {
        writeln!(out, "drops: none")?;
    }
    if d.switch_ins_unseen_timed > 0 {
        writeln!(
            out,
            "note: {} periods' switch-ins were not reported by the kernel; each was timed from its thread's runtime at the next switch-out",
            d.switch_ins_unseen_timed
        )?;
    }
    for n in &r.notes {
        writeln!(out, "note: {}", escape(n))?;
    }
    let n = if top == 0 {
        r.stacks.len()
    } else {
        top.min(r.stacks.len())
    };
    for (i, s) in r.stacks.iter().take(n).enumerate() {
        let pct = if r.total_ns > 0 {
            100.0 * s.total_ns as f64 / r.total_ns as f64
        } else {
            0.0
        };
        writeln!(out)?;
        writeln!(
            out,
            "#{} {} ({pct:.1}%) {} {} PID {} TID {}, {} periods",
            i + 1,
            secs(s.total_ns),
            s.state.name(),
            escape(&s.comm),
            s.pid,
            s.tid,
            s.count
        )?;
        writeln!(out, "    kernel:")?;
        write_part(out, &s.kernel)?;
        writeln!(out, "    user:")?;
        write_part(out, &s.user)?;
        if let Some(b) = &s.user_truncated {
            writeln!(
                out,
                "      [likely truncated here: {} has no frame pointers]",
                escape(b)
            )?;
        }
        if let Some(w) = &s.waker {
            let who = format!("{} PID {} TID {}", escape(&w.comm), w.pid, w.tid);
            if w.interrupt {
                writeln!(out, "    woken from an interrupt (on {who}):")?;
            } else {
                writeln!(out, "    woken by {who}:")?;
            }
            writeln!(out, "    waker kernel:")?;
            write_part(out, &w.kernel)?;
            writeln!(out, "    waker user:")?;
            write_part(out, &w.user)?;
        }
    }
    if n < r.stacks.len() {
        writeln!(out)?;
        writeln!(
            out,
            "({} more stacks: --top 0, --folded or --json for all)",
            r.stacks.len() - n
        )?;
    }
    Ok(())
}

/// The JSON document.
pub fn write_json(r: &OffcpuReport, out: &mut dyn Write) -> std::io::Result<()> {
    let doc = serde_json::to_string_pretty(r)?;
    out.write_all(crate::output::json::terminal_safe(doc).as_bytes())?;
    writeln!(out)
}
