//! Where a flush puts each CPU's switches (at the scheduler's boundaries) and how one
//! CPU's pending events become an `FtraceEventBundle`.
use std::{collections::HashMap, io::Write};

use super::*;

impl<W: Write> TraceWriter<W> {
    /// Each CPU's pending switches at their boundaries (see `model::boundaries`); a
    /// waking still pending that its task's boundary would precede is moved to just
    /// before it, one already written raises the boundary to just after it.
    pub(super) fn place(&mut self) -> Vec<(u32, Vec<(u64, Switch)>)> {
        let mut out = Vec::with_capacity(self.cpus.len());
        for (&cpu, p) in self.cpus.iter_mut() {
            let switches = std::mem::take(&mut p.switches);
            let points: Vec<Point> = switches
                .iter()
                .map(|x| Point {
                    ts: x.s.ts,
                    runtime: x.s.runtime,
                    chained: x.s.chained,
                    fixed: x.s.repaired || x.s.edge,
                    woken: x.woken.map(|w| w.ts),
                })
                .collect();
            let at = place(&points, p.before);
            if log::log_enabled!(log::Level::Debug) {
                let moved = at.iter().zip(&points).filter(|(a, p)| **a < p.ts);
                let (n, ns) = moved.fold((0, 0), |(n, ns), (a, p)| (n + 1, ns + p.ts - a));
                log::debug!(
                    "cpu {cpu}: {} switches, {n} at an earlier boundary ({ns} ns in all)",
                    points.len()
                );
            }
            if let Some(x) = switches.last() {
                p.before = Some(x.s.ts);
            }
            out.push((cpu, at, switches));
        }
        let mut moves = Vec::new();
        let moved = &mut self.moved;
        let placed = out
            .into_iter()
            .map(|(cpu, mut at, switches)| {
                for (k, x) in switches.iter().enumerate() {
                    if let Some(w) = x.woken.filter(|w| at[k] <= w.ts) {
                        let pending = self
                            .cpus
                            .get(&w.cpu)
                            .and_then(|p| p.wakings.get(w.idx))
                            .is_some_and(|(seq, _)| *seq == w.seq);
                        if pending {
                            moves.push((w, at[k].saturating_sub(1)));
                        } else {
                            at[k] = (w.ts + 1).min(x.s.ts);
                        }
                    }
                    let d = x.s.ts.saturating_sub(at[k]);
                    for tid in [x.s.prev_tid, x.s.next_tid] {
                        if d > 0 && tid != 0 {
                            *moved.entry(tid).or_default() += d;
                        }
                    }
                }
                (
                    cpu,
                    at.into_iter()
                        .zip(switches.into_iter().map(|x| x.s))
                        .collect(),
                )
            })
            .collect();
        for (w, ts) in moves {
            if let Some(p) = self.cpus.get_mut(&w.cpu) {
                let waking = &mut p.wakings[w.idx].1;
                let d = waking.ts.saturating_sub(ts);
                if d > 0 {
                    *self.moved.entry(waking.tid).or_default() += d;
                }
                waking.ts = waking.ts.min(ts);
            }
        }
        placed
    }

    /// One CPU's bundle: `switches` at their boundaries, its pending wakings and task
    /// events.
    pub(super) fn bundle(
        &mut self,
        cpu: u32,
        mut switches: Vec<(u64, Switch)>,
        lost_now: u64,
    ) -> Option<pb::FtraceEventBundle> {
        let off = self.boot_offset;
        let p = self.cpus.get_mut(&cpu)?;
        if switches.is_empty() && p.wakings.is_empty() && p.tasks.is_empty() {
            return None;
        }
        let mut wakings: Vec<Wakeup> = std::mem::take(&mut p.wakings)
            .into_iter()
            .map(|(_, w)| w)
            .collect();
        let mut tasks = std::mem::take(&mut p.tasks);
        tasks.sort_by_key(|t| t.ts);
        let mut event = Vec::with_capacity(tasks.len());
        for t in &tasks {
            let ts = t.ts.max(p.last_task);
            p.last_task = ts;
            event.push(ftrace_event(ts + off, t));
        }
        // Boundaries go forward on a CPU (each at or after the switch before it);
        // sorting keeps the deltas unsigned anyway.
        switches.sort_by_key(|s| s.0);
        wakings.sort_by_key(|w| w.ts);
        let mut cs = pb::CompactSched::default();
        let mut interned: HashMap<String, u32> = HashMap::new();
        let mut intern = |s: &str, table: &mut Vec<String>| -> u32 {
            if let Some(&i) = interned.get(s) {
                return i;
            }
            let i = table.len() as u32;
            table.push(s.to_string());
            interned.insert(s.to_string(), i);
            i
        };
        let mut prev = p.last_switch;
        for (i, (at, s)) in switches.iter().enumerate() {
            let ts = (*at).max(prev);
            cs.switch_timestamp
                .push(if i == 0 { ts + off } else { ts - prev });
            prev = ts;
            cs.switch_prev_state
                .push(ftrace_prev_state(s.prev_state, s.preempt));
            cs.switch_next_pid.push(s.next_tid as i32);
            cs.switch_next_prio.push(s.next_prio);
            let idx = intern(&s.next_comm, &mut cs.intern_table);
            cs.switch_next_comm_index.push(idx);
        }
        p.last_switch = prev;
        let mut prev = p.last_waking;
        for (i, w) in wakings.iter().enumerate() {
            let ts = w.ts.max(prev);
            cs.waking_timestamp
                .push(if i == 0 { ts + off } else { ts - prev });
            prev = ts;
            cs.waking_pid.push(w.tid as i32);
            cs.waking_target_cpu.push(w.target_cpu as i32);
            cs.waking_prio.push(w.prio);
            let idx = intern(&w.comm, &mut cs.intern_table);
            cs.waking_comm_index.push(idx);
            // common_flags as ftrace records them; 1 is what a sched_waking has in
            // Perfetto's own traces (interrupts were off).
            cs.waking_common_flags.push(1);
        }
        p.last_waking = prev;
        let lost = lost_now > p.overrun_seen || p.gap;
        p.overrun_seen = lost_now;
        p.gap = false;
        self.in_buf.switches += switches.len() as u64;
        self.in_buf.wakings += wakings.len() as u64;
        self.in_buf.tasks += tasks.len() as u64;
        Some(pb::FtraceEventBundle {
            cpu: Some(cpu),
            lost_events: lost.then_some(true),
            compact_sched: Some(cs),
            event,
        })
    }
}
