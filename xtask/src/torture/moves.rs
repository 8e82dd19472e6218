//! Sleep that `run_delay` counts as waiting, measured from the kernel's own events.
//!
//! Since delayed dequeue (EEVDF, Linux 6.12, `DELAY_DEQUEUE`) a thread that blocks with
//! negative lag stays on its run queue until it is picked or woken. The load balancer
//! can move such a sleeping thread to another CPU, and the enqueue there stamps
//! `sched_info.last_queued`: from that move to its arrival on a CPU, `run_delay` counts
//! the rest of its sleep as waiting. Torture seed 998066 (a `-p` main thread, 1 run in
//! 25): 80.96 ms between a softirq's `sched_migrate_task` of the sleeping thread and its
//! wakeup, exactly what its run_delay exceeded the tracer's waits by; ftrace's own
//! switch and wakeup events timed the same waits as the tracer.
//!
//! The harness records, in its own tracefs instance (trace clock CLOCK_MONOTONIC, the
//! workload's), the switch, waking, wakeup and migration events of each scenario, and
//! takes that time off run_delay where the floor of the waits timed from wakeups is
//! drawn. [`sleep_moves`] is the pure part.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use super::waits::{waits, Waits};

const EVENTS: &[&str] = &[
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
    "sched/sched_migrate_task",
];

/// One event of the trace, as far as [`sleep_moves`] needs it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Event {
    /// A thread left a CPU for `next`; `blocked`: its prev_state was not R (it is
    /// asleep now).
    Switch { prev: u64, blocked: bool, next: u64 },
    /// `try_to_wake_up()` began for the thread: a move from here is the wakeup's own.
    Waking(u64),
    /// The thread is runnable again (sched_wakeup, sched_wakeup_new).
    Wakeup(u64),
    /// The thread was moved to another CPU.
    Migrate(u64),
}

/// Per TID, the stretches (move, wakeup) in ns that its run_delay counted although it
/// slept: from the first move of the thread while asleep (not inside a wakeup) to the
/// wakeup that ended that sleep.
pub(super) type Moves = BTreeMap<u64, Vec<(u64, u64)>>;

#[derive(Clone, Copy)]
enum State {
    Awake,
    Asleep { moved: Option<u64> },
    Waking { moved: Option<u64> },
}

/// The stretches of sleep that run_delay counted, from events in time order.
pub(super) fn sleep_moves(events: impl IntoIterator<Item = (u64, Event)>) -> Moves {
    let mut state: BTreeMap<u64, State> = BTreeMap::new();
    let mut out = Moves::new();
    for (ts, e) in events {
        match e {
            Event::Switch { prev, blocked, .. } => {
                let s = if blocked {
                    State::Asleep { moved: None }
                } else {
                    State::Awake
                };
                state.insert(prev, s);
            }
            Event::Waking(t) => {
                if let Some(State::Asleep { moved }) = state.get(&t).copied() {
                    state.insert(t, State::Waking { moved });
                }
            }
            Event::Migrate(t) => {
                if let Some(State::Asleep { moved: None }) = state.get(&t) {
                    state.insert(t, State::Asleep { moved: Some(ts) });
                }
            }
            Event::Wakeup(t) => {
                if let Some(State::Asleep { moved: Some(m) } | State::Waking { moved: Some(m) }) =
                    state.get(&t).copied()
                {
                    out.entry(t).or_default().push((m, ts));
                }
                state.insert(t, State::Awake);
            }
        }
    }
    out
}

/// What run_delay counted of `tid`'s sleep between `from` and `to` (ns, by the wakeups
/// that ended those sleeps).
pub(super) fn counted_sleep(moves: &Moves, tid: u64, from: u64, to: u64) -> u64 {
    moves.get(&tid).map_or(0, |v| {
        v.iter()
            .filter(|(_, w)| *w > from && *w <= to)
            .map(|(m, w)| w - m)
            .sum()
    })
}

/// The number after `key` (the last occurrence: a comm before it may hold anything).
fn field(s: &str, key: &str) -> Option<u64> {
    let at = s.rfind(key)? + key.len();
    let digits: &str = &s[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// One line of ftrace's text output: `comm-pid [cpu] flags secs.usecs: event: fields`.
/// The comm is at most 15 bytes, so the first ` [NNN] ` with a time and an event after
/// it is the real one.
pub(super) fn parse_line(line: &str) -> Option<(u64, Event)> {
    let mut from = 0;
    while let Some(i) = line[from..].find(" [") {
        from += i + 2;
        if let Some(e) = parse_after_cpu(&line[from..]) {
            return Some(e);
        }
    }
    None
}

/// `NNN] flags secs.usecs: event: fields`, or None where that is not what follows.
fn parse_after_cpu(rest: &str) -> Option<(u64, Event)> {
    let close = rest.find("] ")?;
    if close == 0 || !rest[..close].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut words = rest[close + 2..].splitn(3, ' ');
    let (_flags, ts) = (words.next()?, words.next()?);
    let (secs, frac) = ts.strip_suffix(':')?.split_once('.')?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ns =
        secs.parse::<u64>().ok()? * 1_000_000_000 + format!("{frac:0<9}").parse::<u64>().ok()?;
    let (name, fields) = words.next()?.split_once(": ")?;
    let e = match name {
        "sched_switch" => {
            let (prev, state) = prev_fields(fields)?;
            // The last `next_pid=`: next_comm comes before it and may hold anything.
            Event::Switch {
                prev,
                blocked: !state.starts_with('R'),
                next: field(fields, " next_pid=")?,
            }
        }
        "sched_waking" => Event::Waking(field(fields, " pid=")?),
        "sched_wakeup" | "sched_wakeup_new" => Event::Wakeup(field(fields, " pid=")?),
        "sched_migrate_task" => Event::Migrate(field(fields, " pid=")?),
        _ => return None,
    };
    Some((ns, e))
}

/// `prev_pid=N prev_prio=N prev_state=S ==> ` after a comm that may hold anything.
fn prev_fields(fields: &str) -> Option<(u64, &str)> {
    let mut from = 0;
    while let Some(i) = fields[from..].find(" prev_pid=") {
        from += i + 1;
        if let Some(f) = prev_fields_at(&fields[from - 1 + " prev_pid=".len()..]) {
            return Some(f);
        }
    }
    None
}

/// `N prev_prio=N prev_state=S ==> ...`: the PID and the state.
fn prev_fields_at(rest: &str) -> Option<(u64, &str)> {
    let (pid, rest) = rest.split_once(" prev_prio=")?;
    let (prio, rest) = rest.split_once(" prev_state=")?;
    let (state, _) = rest.split_once(" ==> ")?;
    let number = |s: &str| {
        !s.is_empty()
            && s.trim_start_matches('-')
                .bytes()
                .all(|b| b.is_ascii_digit())
    };
    if !number(prio) || state.contains(' ') {
        return None;
    }
    Some((pid.parse().ok()?, state))
}

/// What the kernel's own events of a scenario say, where they were read whole.
#[derive(Default)]
pub(super) struct Kernel {
    /// Sleep run_delay counted as waiting (empty where not measured).
    pub(super) moves: Moves,
    /// The waits as the tracepoints time them (None: not measured).
    pub(super) waits: Option<Waits>,
}

/// The harness's own tracefs instance: its events, buffer and clock, apart from the
/// global trace (which a user or the VM tests may be using).
pub(super) struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// Makes the instance, or says why there is none (no tracefs, no instances).
    pub(super) fn open(pid: u32) -> Result<Ledger, String> {
        let root = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .map(Path::new)
            .find(|p| p.join("instances").is_dir())
            .ok_or("no tracefs with instances at /sys/kernel/tracing")?;
        remove_stale(root);
        let dir = root.join(format!("instances/tracer-torture-{pid}"));
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let l = Ledger { dir };
        l.write("trace_clock", "mono")?;
        // 16 MiB a CPU holds a scenario's switches (about 250,000 events a CPU), within
        // 512 MiB on a large machine.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kb = (512 * 1024 / cpus).clamp(1024, 16 * 1024);
        l.write("buffer_size_kb", &kb.to_string())?;
        l.write("tracing_on", "0")?;
        for e in EVENTS {
            l.write(&format!("events/{e}/enable"), "1")?;
        }
        Ok(l)
    }

    fn write(&self, file: &str, v: &str) -> Result<(), String> {
        let p = self.dir.join(file);
        std::fs::write(&p, v).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// Empties the buffer and starts recording (before the workload starts).
    pub(super) fn start(&self) -> Result<(), String> {
        self.write("tracing_on", "0")?;
        self.write("trace", "")?;
        self.write("tracing_on", "1")
    }

    /// Stops recording and reads what run_delay counted of sleep and the waits, per TID,
    /// with the number of events and their text (kept beside a failing scenario's
    /// output). An overrun ring has lost events: then there is no figure (and no
    /// allowance).
    pub(super) fn read(&self) -> Result<(Kernel, usize, Vec<u8>), String> {
        self.write("tracing_on", "0")?;
        let mut lost = 0u64;
        if let Ok(cpus) = std::fs::read_dir(self.dir.join("per_cpu")) {
            for c in cpus.flatten() {
                let stats = std::fs::read_to_string(c.path().join("stats")).unwrap_or_default();
                lost += stats
                    .lines()
                    .filter(|l| l.starts_with("overrun:"))
                    .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .sum::<u64>();
            }
        }
        if lost > 0 {
            return Err(format!("ftrace's ring overran ({lost} events lost)"));
        }
        let raw = std::fs::read(self.dir.join("trace")).map_err(|e| format!("trace: {e}"))?;
        let text = String::from_utf8_lossy(&raw);
        let events: Vec<(u64, Event)> = text.lines().filter_map(parse_line).collect();
        let n = events.len();
        let k = Kernel {
            waits: Some(waits(events.iter().cloned())),
            moves: sleep_moves(events),
        };
        Ok((k, n, raw))
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let _ = self.write("tracing_on", "0");
        for e in EVENTS {
            let _ = self.write(&format!("events/{e}/enable"), "0");
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Instances left by a harness that died (its PID gone).
fn remove_stale(root: &Path) {
    let Ok(dirs) = std::fs::read_dir(root.join("instances")) else {
        return;
    };
    for d in dirs.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("tracer-torture-") else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(d.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_998066: &str = "\
  tracer-torture-1685    [000] d..2. 42534.465642: sched_switch: prev_comm=tracer-torture prev_pid=1685 prev_prio=120 prev_state=S ==> next_comm=tracer-torture next_pid=1692 next_prio=120
  tracer-torture-1686    [001] dNs1. 42534.466592: sched_migrate_task: comm=tracer-torture pid=1685 prio=120 orig_cpu=0 dest_cpu=1
          <idle>-0       [000] d.h3. 42534.547539: sched_waking: comm=tracer-torture pid=1685 prio=120 target_cpu=001
          <idle>-0       [000] d.h3. 42534.547540: sched_migrate_task: comm=tracer-torture pid=1685 prio=120 orig_cpu=1 dest_cpu=0
          <idle>-0       [000] dNh4. 42534.547542: sched_wakeup: comm=tracer-torture pid=1685 prio=120 target_cpu=000
          <idle>-0       [000] d..2. 42534.547551: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=tracer-torture next_pid=1685 next_prio=120
  tracer-torture-1685    [000] d..2. 42534.547715: sched_switch: prev_comm=tracer-torture prev_pid=1685 prev_prio=120 prev_state=S ==> next_comm=x next_pid=1702 next_prio=120
  tracer-torture-1686    [000] d.h2. 42534.652540: sched_waking: comm=tracer-torture pid=1685 prio=120 target_cpu=000
  tracer-torture-1686    [000] d.h2. 42534.652541: sched_migrate_task: comm=tracer-torture pid=1685 prio=120 orig_cpu=0 dest_cpu=1
          <idle>-0       [001] dNh2. 42534.652573: sched_wakeup: comm=tracer-torture pid=1685 prio=120 target_cpu=001
";

    #[test]
    fn a_sleeping_thread_moved_by_the_balancer_counts_until_its_wakeup() {
        let m = sleep_moves(SEED_998066.lines().filter_map(parse_line));
        // Only the softirq's move; the one inside the second wakeup is the wakeup's own.
        assert_eq!(
            m.get(&1685),
            Some(&vec![(42_534_466_592_000, 42_534_547_542_000)])
        );
        assert_eq!(counted_sleep(&m, 1685, 0, u64::MAX), 80_950_000);
        assert_eq!(counted_sleep(&m, 1685, 42_534_547_542_000, u64::MAX), 0);
        assert_eq!(counted_sleep(&m, 1686, 0, u64::MAX), 0);
    }

    #[test]
    fn a_runnable_thread_moved_counts_nothing() {
        let m = sleep_moves([
            (
                1,
                Event::Switch {
                    prev: 7,
                    blocked: false,
                    next: 0,
                },
            ),
            (2, Event::Migrate(7)),
            (
                3,
                Event::Switch {
                    prev: 8,
                    blocked: true,
                    next: 0,
                },
            ),
            (4, Event::Waking(8)),
            (5, Event::Migrate(8)),
            (6, Event::Wakeup(8)),
        ]);
        assert!(m.is_empty());
    }

    #[test]
    fn hostile_comms_do_not_move_the_fields() {
        let l = "  a [001] b ==>-12   [001] d..2. 5.000001: sched_switch: prev_comm=x prev_pid=9 y prev_pid=12 prev_prio=120 prev_state=D ==> next_comm= pid=3 next_pid=4 next_prio=120";
        assert_eq!(
            parse_line(l),
            Some((
                5_000_001_000,
                Event::Switch {
                    prev: 12,
                    blocked: true,
                    next: 4
                }
            ))
        );
        let l = "  p pid=5-33  [000] d..2. 1.5: sched_wakeup: comm=a pid=7 b pid=33 prio=120 target_cpu=000";
        assert_eq!(parse_line(l), Some((1_500_000_000, Event::Wakeup(33))));
        assert_eq!(parse_line("# tracer: nop"), None);
    }
}
