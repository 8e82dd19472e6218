//! Reading the workload's truth: its file, and the entities (threads, exec histories)
//! with the least and the most the tracer may have seen of each.

use std::{
    collections::BTreeMap,
    io::Read,
    path::Path,
    time::{Duration, Instant},
};

use super::rows::ms;
use super::scenario::Target;
use crate::json::Json;

/// A leader reaped by a non-main thread's exec runs its exit path after its last record.
pub(super) const REAPED_LEADER_NS: f64 = 3e6;

/// The workload's truth file as text: the lines after its 64-byte header (its first 8
/// bytes count the bytes used), up to the unused zeros.
pub(super) fn read_truth(truth: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(truth) else {
        return String::new();
    };
    let mut head = [0u8; 64];
    if f.read_exact(&mut head).is_err() {
        return String::new();
    }
    let used = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    let mut body = Vec::new();
    let _ = f.take(used).read_to_end(&mut body);
    String::from_utf8_lossy(&body).replace('\0', "\n")
}

/// Waits (up to `limit`) for the workload process to exit, reads its main thread's
/// final schedstat from the zombie, then reaps it. The main thread's exit path (the
/// process's teardown: 1.2-1.4 ms on this VM on 2026-12-03, past the 1% bound) runs after
/// its own last record; the record line is the workload's own zombie record's, which
/// raises that thread's upper bound as it does a child's. None when it did not exit in
/// time (then killed) or the figures could not be read.
pub(super) fn reap_recording_zombie(
    w: &mut std::process::Child,
    limit: Duration,
) -> Option<String> {
    use tracer_truth::zombie::{zombie, Zombie};
    let pid = w.id();
    let t = Instant::now();
    let last = loop {
        match zombie(pid, false) {
            Zombie::Running if t.elapsed() <= limit => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Zombie::Exited(f) => break f,
            Zombie::Running | Zombie::Gone => {
                let _ = w.kill();
                let _ = w.wait();
                return None;
            }
        }
    };
    let _ = w.wait();
    let f = last?;
    Some(format!(
        "{{\"ev\":\"exit\",\"role\":\"zombie\",\"grp\":\"\",\"tid\":{pid},\"pid\":{pid},\
         \"run_ns\":{},\"wait_ns\":{},\"slices\":{},\"cpu_ns\":0,\"t_ns\":0,\"born_ns\":0}}",
        f.run_ns, f.wait_ns, f.slices
    ))
}

pub(super) fn wait_for_done(truth: &Path, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if read_truth(truth).contains("\"ev\":\"done\"") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Per-thread numbers: schedstat on-CPU, run_delay, slices.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Stat {
    pub(super) run: f64,
    pub(super) wait: f64,
    pub(super) slices: f64,
}

impl Stat {
    pub(super) fn of(l: &Json) -> Stat {
        let g = |k: &str| l[k].as_f64().unwrap_or(0.0);
        Stat {
            run: g("run_ns"),
            wait: g("wait_ns"),
            slices: g("slices"),
        }
    }
    pub(super) fn minus(self, o: Stat) -> Stat {
        Stat {
            run: self.run - o.run,
            wait: self.wait - o.wait,
            slices: self.slices - o.slices,
        }
    }
    pub(super) fn plus(self, o: Stat) -> Stat {
        Stat {
            run: self.run + o.run,
            wait: self.wait + o.wait,
            slices: self.slices + o.slices,
        }
    }
}

/// One thread of the workload, or the threads an exec joins into one task history.
pub(super) struct Entity {
    pub(super) name: String,
    pub(super) keys: Vec<(u64, u64)>,
    /// What the tracer must have seen (before subtracting wall time outside the window).
    pub(super) lo: Stat,
    /// The most it may have seen.
    pub(super) hi: Stat,
    /// Where `lo` and `hi` start at a baseline the thread wrote after the tracer attached
    /// (`-p`, `-t`, `--cgroup`): its figures from birth, all inside the window when it
    /// was born after the opening (a thread born during start-up, seed 235626: 1 ms
    /// of its running before the baseline is the window's). See [`Entity::hi_in`].
    pub(super) whole: Option<Stat>,
    /// Its birth (wall time), for `whole`.
    pub(super) born_ns: u64,
    /// Wall time of the start of `lo` (birth or baseline) and of the record that ends it
    /// (the last one, or `block`: the last inside the window before sleeping past it).
    pub(super) b_ns: u64,
    pub(super) e_ns: u64,
    /// When it certainly lived as a target: from its first instruction (or its join) to
    /// its last record (or its leave). Its on- plus off-CPU time inside the window covers
    /// at least that part of it. None for an exec history with a reaped leader (two
    /// threads at once).
    pub(super) life: Option<(u64, u64)>,
    /// A `--cgroup` joiner that stays: its record before the sleep ahead of its move.
    /// The slice in which it moved began after it, and nothing before that slice is
    /// the target's (a joiner was once charged a sleep from the opening).
    pub(super) joined_after: Option<u64>,
    /// The name it gave itself (prctl), when it did.
    pub(super) comm: Option<Vec<u8>>,
    pub(super) slack_ns: f64,
    pub(super) slack_slices: f64,
    pub(super) expected: bool,
    pub(super) truth_text: String,
}

impl Entity {
    /// The upper end of its figures in a window opened at `open` (wall time). Born
    /// after the opening, all of its time is the window's; born before, of its time
    /// before the baseline no more than the wall time from the opening to the baseline
    /// (`b_ns`) can be (seeds 133326, 133364: a starter born just before the opening
    /// spun 1.25 ms while the programs attached, before the baseline).
    pub(super) fn hi_in(&self, open: u64) -> Stat {
        match self.whole {
            Some(w) if self.born_ns >= open => w,
            Some(w) if self.b_ns > open => {
                let span = (self.b_ns - open) as f64;
                let before = w.minus(self.hi);
                self.hi.plus(Stat {
                    run: before.run.min(span),
                    wait: before.wait.min(span),
                    slices: before.slices,
                })
            }
            _ => self.hi,
        }
    }
}

pub(super) fn build_entities(
    lines: &[Json],
    target: Target,
    ready: (u64, u64, u64),
) -> (Vec<Entity>, Vec<String>) {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    let key = |l: &Json| {
        (
            l["tid"].as_u64().unwrap_or(0),
            l["pid"].as_u64().unwrap_or(0),
        )
    };
    let ev = |l: &Json| l["ev"].as_str().unwrap_or("").to_string();
    let role = |l: &Json| l["role"].as_str().unwrap_or("").to_string();
    let t = |l: &Json| l["t_ns"].as_u64().unwrap_or(0);
    let born = |l: &Json| l["born_ns"].as_u64().unwrap_or(0);
    let cmd = target == Target::Cmd;

    // Exec histories.
    let mut groups: BTreeMap<String, Vec<&Json>> = BTreeMap::new();
    let mut plain: BTreeMap<(u64, u64), Vec<&Json>> = BTreeMap::new();
    for l in lines {
        match ev(l).as_str() {
            "start" | "done" => {}
            _ => match l["grp"].as_str() {
                Some(g) if !g.is_empty() => groups.entry(g.to_string()).or_default().push(l),
                _ => plain.entry(key(l)).or_default().push(l),
            },
        }
    }
    let expected_for = |role: &str| match target {
        Target::Tid => role == "main" || role == "resident",
        // -p PID: its threads and what they start from then on, not a child that was
        // already there (perf stat -p counts the same).
        Target::Pid => role != "joiner" && role != "sleep-proc",
        _ => true,
    };
    for (g, ls) in &groups {
        let find = |e: &str| ls.iter().find(|l| ev(l) == e).copied();
        let Some(fin) = find("end") else {
            problems.push(format!(
                "exec history {g}: no record after the exec: {}",
                show(ls)
            ));
            continue;
        };
        let pre = find("pre-exec");
        let leader = find("leader");
        let mut keys = vec![key(fin)];
        let mut total = Stat::of(fin);
        let mut slack_ns = 0.0;
        let mut slack_slices = 0.0;
        let name;
        if let Some(ld) = leader {
            if let Some(p) = pre {
                keys.push(key(p));
            }
            total = total.plus(Stat::of(ld));
            slack_ns = REAPED_LEADER_NS;
            slack_slices = 2.0;
            name = format!(
                "exec from a non-main thread (TID {} became {}, leader reaped)",
                pre.map_or(0, |p| key(p).0),
                key(fin).0
            );
        } else {
            name = format!("exec from the main thread (TID {})", key(fin).0);
        }
        // The process's zombie, recorded by its parent: the exec'd thread's exit path
        // ran after its own last record (seed 13: 13 slices and 0.22 ms, which the
        // tracer had to the slice and the ns).
        let mut hi = total;
        let zombie = plain
            .get(&key(fin))
            .and_then(|ls| ls.iter().find(|l| ev(l) == "exit"));
        if let Some(z) = zombie {
            let tail = Stat::of(z).minus(Stat::of(fin));
            if tail.run >= 0.0 && tail.wait >= 0.0 && tail.slices >= 0.0 {
                hi = total.plus(tail);
            }
        }
        out.push(Entity {
            name,
            keys,
            lo: total,
            hi,
            whole: None,
            born_ns: born(fin),
            b_ns: born(fin),
            e_ns: t(fin),
            life: leader.is_none().then(|| (born(fin), t(fin))),
            joined_after: None,
            comm: None,
            slack_ns,
            slack_slices,
            expected: expected_for("exec"),
            truth_text: show(ls),
        });
    }
    for (k, ls) in &plain {
        let find = |e: &str| ls.iter().find(|l| ev(l) == e).copied();
        // A parent's record of its child's zombie (`exit`) raises the truth's upper end
        // to the child's final schedstat: its exit path runs after its own last record.
        // Alone (a child whose records are an exec history) it adds nothing.
        let zombie = find("exit");
        if zombie.is_some() && ls.len() == 1 {
            continue;
        }
        let Some(fin) = find("end") else {
            problems.push(format!(
                "TID {} (PID {}): no final record: {}",
                k.0,
                k.1,
                show(ls)
            ));
            continue;
        };
        let r = role(fin);
        // A thread that sleeps past the close records where it stopped (`block`): what
        // follows happens after the window.
        let last = find("block").unwrap_or(fin);
        let f = Stat::of(last);
        let mut lo = f;
        let mut hi = f;
        let mut b_ns = born(fin);
        let mut e_ns = t(last);
        let mut life = (born(fin), t(fin));
        let mut whole = None;
        let mut gap = false;
        let mut joined_after = None;
        if let Some(base) = find("base") {
            lo = f.minus(Stat::of(base));
            // Under -- CMD the time before the baseline is inside the window too.
            if !cmd {
                hi = lo;
                whole = Some(f);
            }
            b_ns = t(base);
        }
        if target == Target::Cgroup {
            if let Some(j) = find("join") {
                lo = f.minus(Stat::of(j));
                hi = lo;
                whole = None;
                b_ns = t(j);
                life.0 = t(j);
                joined_after = find("pre-join").map(t);
            }
            if let Some(lv) = find("leave") {
                // Traced while in the cgroup, and only then: its
                // record at the move is all of it.
                lo = Stat::of(lv);
                hi = lo;
                whole = None;
                e_ns = t(lv);
                life.1 = t(lv);
                joined_after = None;
                if let Some(rj) = find("rejoin") {
                    // Back in the cgroup from its record at the return to its last:
                    // that is the cgroup's too. Its life inside has a hole, so no
                    // span is certain.
                    lo = lo.plus(f.minus(Stat::of(rj)));
                    hi = lo;
                    e_ns = t(last);
                    gap = true;
                }
            }
        }
        // A move out of the cgroup ends what the tracer may see only under --cgroup;
        // elsewhere a leaver's exit tail is traced too (CI's seed 345355: the main
        // thread, 13 slices after its last record, which the tracer had to the slice).
        let left = find("leave").filter(|_| target == Target::Cgroup && find("rejoin").is_none());
        if let (Some(z), None, None) = (zombie, find("block"), left) {
            let tail = Stat::of(z).minus(f);
            if tail.run >= 0.0 && tail.wait >= 0.0 && tail.slices >= 0.0 {
                hi = hi.plus(tail);
                whole = whole.map(|w| w.plus(tail));
            }
        }
        let comm = l_name(fin);
        let is_t = k.0 == ready.1 || k.0 == ready.2;
        out.push(Entity {
            name: format!("{r} TID {} (PID {})", k.0, k.1),
            keys: vec![*k],
            lo,
            hi,
            whole,
            born_ns: born(fin),
            b_ns,
            e_ns,
            life: (!gap).then_some(life),
            joined_after,
            comm,
            slack_ns: 0.0,
            slack_slices: 0.0,
            expected: expected_for(&r) && (target != Target::Tid || is_t),
            truth_text: show(ls),
        });
    }
    (out, problems)
}

/// The name a record says its thread gave itself (`name_hex`).
fn l_name(l: &Json) -> Option<Vec<u8>> {
    let h = l["name_hex"].as_str()?;
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

pub(super) fn show(ls: &[&Json]) -> String {
    ls.iter()
        .map(|l| {
            format!(
                "{} tid {} run {} wait {} slices {}",
                l["ev"].as_str().unwrap_or(""),
                l["tid"].as_u64().unwrap_or(0),
                ms(l["run_ns"].as_f64().unwrap_or(0.0)),
                ms(l["wait_ns"].as_f64().unwrap_or(0.0)),
                l["slices"].as_u64().unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod zombie_tests {
    use super::*;

    #[test]
    fn a_reaped_workload_leaves_its_final_schedstat() {
        let mut c = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let pid = c.id();
        let line = reap_recording_zombie(&mut c, Duration::from_secs(20)).expect("a record");
        let j: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(j["ev"], "exit");
        assert_eq!(j["tid"], pid);
        assert!(j["run_ns"].as_u64().unwrap() > 0, "{line}");
        // Reaped: no zombie left behind.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;

    /// A `-p` thread with a baseline: what followed it, and of what came before no more
    /// than the window saw (all of it when it was born after the opening: seed 235626).
    #[test]
    fn a_thread_born_inside_the_window_owns_its_time_before_the_baseline() {
        let text = r#"{"ev":"base","role":"starter","tid":7,"pid":5,"t_ns":2000,"born_ns":1000,"run_ns":1000000,"wait_ns":100,"slices":3}
{"ev":"end","role":"starter","tid":7,"pid":5,"t_ns":3000,"born_ns":1000,"run_ns":1300000,"wait_ns":150,"slices":5}"#;
        let (es, problems) = build_entities(&crate::json::lines(text), Target::Pid, (0, 0, 0));
        assert!(problems.is_empty(), "{problems:?}");
        let e = &es[0];
        assert_eq!(e.lo.run, 300_000.0);
        // Opened before its birth: the whole of it.
        assert_eq!(e.hi_in(900).run, 1_300_000.0);
        assert_eq!(e.hi_in(1000).slices, 5.0);
        // Opened after its birth, 500 ns before the baseline: that much of its running.
        assert_eq!(e.hi_in(1500).run, 300_500.0);
        assert_eq!(e.hi_in(1500).slices, 5.0);
        // Opened at the baseline: only from there.
        assert_eq!(e.hi_in(2000).run, 300_000.0);
    }

    /// A thread that moved out of the workload's cgroup and then exited: its exit tail
    /// is the tracer's to see unless the target is that cgroup.
    #[test]
    fn a_leavers_exit_tail_counts_unless_the_target_is_its_cgroup() {
        let text = r#"{"ev":"leave","role":"leave","tid":5,"pid":5,"t_ns":2000,"born_ns":1000,"run_ns":1000000,"wait_ns":100,"slices":3}
{"ev":"end","role":"leave","tid":5,"pid":5,"t_ns":3000,"born_ns":1000,"run_ns":1300000,"wait_ns":150,"slices":5}
{"ev":"exit","role":"zombie","tid":5,"pid":5,"t_ns":0,"born_ns":0,"run_ns":1400000,"wait_ns":160,"slices":9}"#;
        let lines = crate::json::lines(text);
        for target in [Target::System, Target::Pid, Target::Cmd] {
            let (es, problems) = build_entities(&lines, target, (0, 0, 0));
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(es[0].hi.slices, 9.0, "{target:?}");
            assert_eq!(es[0].hi.run, 1_400_000.0, "{target:?}");
        }
        let (es, _) = build_entities(&lines, Target::Cgroup, (0, 0, 0));
        assert_eq!(es[0].hi.slices, 3.0);
        assert_eq!(es[0].hi.run, 1_000_000.0);
    }

    /// A thread that left the cgroup and came back: the cgroup's figures are its time
    /// before the leave and after the return, with its exit tail (it died inside).
    #[test]
    fn a_thread_that_comes_back_counts_before_it_left_and_after_it_returned() {
        let text = r#"{"ev":"leave","role":"leave","tid":5,"pid":5,"t_ns":2000,"born_ns":1000,"run_ns":1000000,"wait_ns":100,"slices":3}
{"ev":"rejoin","role":"leave","tid":5,"pid":5,"t_ns":3000,"born_ns":1000,"run_ns":1500000,"wait_ns":130,"slices":6}
{"ev":"end","role":"leave","tid":5,"pid":5,"t_ns":4000,"born_ns":1000,"run_ns":1800000,"wait_ns":150,"slices":8}
{"ev":"exit","role":"zombie","tid":5,"pid":5,"t_ns":0,"born_ns":0,"run_ns":1900000,"wait_ns":160,"slices":9}"#;
        let lines = crate::json::lines(text);
        let (es, problems) = build_entities(&lines, Target::Cgroup, (0, 0, 0));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(es[0].lo.run, 1_300_000.0);
        assert_eq!(es[0].lo.wait, 120.0);
        assert_eq!(es[0].lo.slices, 5.0);
        assert_eq!(es[0].hi.run, 1_400_000.0);
        assert_eq!(es[0].e_ns, 4000);
        assert!(es[0].life.is_none());
        assert_eq!(es[0].joined_after, None);
    }

    /// A joiner that stays: nothing before its record ahead of the move is the
    /// cgroup's (`lifetime::joined`); elsewhere it bounds nothing.
    #[test]
    fn a_joiner_counts_from_its_record_before_the_move() {
        let text = r#"{"ev":"base","role":"joiner","tid":6,"pid":6,"t_ns":1500,"born_ns":1000,"run_ns":100,"wait_ns":10,"slices":1}
{"ev":"pre-join","role":"joiner","tid":6,"pid":6,"t_ns":1800,"born_ns":1000,"run_ns":500,"wait_ns":20,"slices":2}
{"ev":"join","role":"joiner","tid":6,"pid":6,"t_ns":2000,"born_ns":1000,"run_ns":600,"wait_ns":30,"slices":3}
{"ev":"end","role":"joiner","tid":6,"pid":6,"t_ns":3000,"born_ns":1000,"run_ns":900,"wait_ns":40,"slices":5}"#;
        let lines = crate::json::lines(text);
        let (es, problems) = build_entities(&lines, Target::Cgroup, (0, 0, 0));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(es[0].joined_after, Some(1800));
        assert_eq!(es[0].life, Some((2000, 3000)));
        let (es, _) = build_entities(&lines, Target::System, (0, 0, 0));
        assert_eq!(es[0].joined_after, None);
    }
}
