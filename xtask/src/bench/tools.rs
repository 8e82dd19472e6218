//! The tools compared, their start (timed to attached) and their programs' inventory.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    inspect::{bpftool_progs, is_switch_prog, scan_fds},
    system::{interrupted, BpfStats, Proc},
};

/// The bpftrace equivalents of cpudist (on-CPU slice) and runqlat (run-queue latency).
pub(super) const BPFTRACE_SCRIPT: &str = r#"// cpudist equivalent: on-CPU time of each slice, in microseconds
tracepoint:sched:sched_switch
{
	$start = @oncpu_start[args->prev_pid];
	if ($start) {
		@oncpu_us = hist((nsecs - $start) / 1000);
	}
	@oncpu_start[args->next_pid] = nsecs;
}

// runqlat equivalent: from wakeup (or preemption) to running, in microseconds
tracepoint:sched:sched_wakeup,
tracepoint:sched:sched_wakeup_new
{
	@qtime[args->pid] = nsecs;
}

tracepoint:sched:sched_switch
{
	if (args->prev_state == 0) {
		@qtime[args->prev_pid] = nsecs;
	}
	$q = @qtime[args->next_pid];
	if ($q) {
		@runq_us = hist((nsecs - $q) / 1000);
	}
	delete(@qtime[args->next_pid]);
}

END
{
	clear(@oncpu_start);
	clear(@qtime);
}
"#;

// ---------------------------------------------------------------------------------------
// Tools.

pub(super) struct Tool {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    /// (process label, argv) for each process the tool runs.
    pub(super) procs: Vec<(String, Vec<String>)>,
    /// The key of the cpudist+runqlat row this one is compared with.
    pub(super) versus: &'static str,
}

/// What an untimed warm-up start showed about one of the tool's processes.
#[derive(Clone, Debug)]
pub(super) struct Expect {
    /// Attach fds to wait for: bpf_link when the process uses any, else perf_event.
    pub(super) links: usize,
    pub(super) perf_events: usize,
    pub(super) progs: usize,
    pub(super) switch_tags: BTreeSet<String>,
    /// Per program: its translated size and the helpers (map operations among them) its
    /// code calls, from `bpftool prog dump xlated`: a static inventory, not run counts.
    pub(super) code: Vec<Code>,
}

#[derive(Clone, Debug)]
pub(super) struct Code {
    pub(super) program: String,
    pub(super) insns: usize,
    pub(super) calls: BTreeMap<String, usize>,
}

pub(super) fn inventory(bpftool: &Path, id: u32, program: &str) -> Result<Code> {
    let out = Command::new(bpftool)
        .args(["prog", "dump", "xlated", "id", &id.to_string()])
        .output()
        .with_context(|| format!("cannot run {}", bpftool.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut code = Code {
        program: program.to_string(),
        insns: 0,
        calls: BTreeMap::new(),
    };
    for line in text.lines() {
        let Some((n, insn)) = line.trim_start().split_once(": ") else {
            continue;
        };
        if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        code.insns += 1;
        if let Some(callee) = insn.split_once(" call ").map(|x| x.1) {
            let name = callee.split(['#', ' ']).next().unwrap_or(callee);
            let name = if name.starts_with("pc") {
                "bpf-to-bpf call"
            } else {
                name
            };
            *code.calls.entry(name.to_string()).or_default() += 1;
        }
    }
    Ok(code)
}

/// One run of the tool, attached: its processes and their programs.
pub(super) struct Running {
    pub(super) procs: Vec<Proc>,
    /// (process index, program id, display name) of the tool's programs.
    pub(super) progs: Vec<(usize, u32, String)>,
    /// The program id whose run_cnt counts the switches.
    pub(super) switch_id: u32,
    pub(super) switch_name: String,
    pub(super) foreign: Vec<String>,
    pub(super) startup: Duration,
    /// CPU time of the tool's processes when it was found attached (schedstat ns).
    pub(super) startup_cpu_ns: u64,
}

pub(super) fn start_tool(
    tool: &Tool,
    expect: Option<&[Expect]>,
    bpftool: &Path,
    logs: &Path,
) -> Result<Running> {
    let before: BTreeSet<u32> = bpftool_progs(bpftool)?.into_keys().collect();
    let t0 = Instant::now();
    let mut procs = Vec::new();
    for (label, argv) in &tool.procs {
        procs.push(Proc::spawn(label, argv, logs)?);
    }
    // Attached: see the `bench` module documentation (bench/mod.rs). Without an expectation (the warm-up), any of
    // the process's programs having run is enough, and we then give it a second to finish.
    let deadline = t0 + Duration::from_secs(60);
    let (startup, startup_cpu_ns) = loop {
        let mut ready = true;
        for (i, p) in procs.iter_mut().enumerate() {
            p.check_alive()?;
            let scan = scan_fds(p.pid())?;
            let ran = |tags: Option<&BTreeSet<String>>| {
                scan.progs
                    .values()
                    .any(|f| f.run_cnt > 0 && tags.is_none_or(|t| t.contains(&f.tag)))
            };
            ready &= match expect {
                None => ran(None),
                Some(e) => {
                    let e = &e[i];
                    scan.progs.len() >= e.progs
                        && scan.links >= e.links
                        && scan.perf_events >= e.perf_events
                        && ran(Some(&e.switch_tags))
                }
            };
        }
        if ready {
            break (
                t0.elapsed(),
                procs
                    .iter()
                    .map(|p| super::inspect::sched_ns(p.pid()))
                    .sum(),
            );
        }
        interrupted()?;
        ensure!(
            Instant::now() < deadline,
            "{} did not attach within a minute",
            tool.label
        );
        sleep(Duration::from_micros(500));
    };
    if expect.is_none() {
        sleep(Duration::from_secs(1));
    }

    let after = bpftool_progs(bpftool)?;
    let appeared: BTreeSet<u32> = after
        .keys()
        .copied()
        .filter(|id| !before.contains(id))
        .collect();
    let mut progs = Vec::new();
    let mut owned = BTreeSet::new();
    let mut switch = None;
    for (i, p) in procs.iter().enumerate() {
        let scan = scan_fds(p.pid())?;
        let mut seen: HashMap<String, usize> = HashMap::new();
        for id in scan.progs.keys().filter(|id| appeared.contains(id)) {
            owned.insert(*id);
            let meta = &after[id];
            let n = seen.entry(meta.name.clone()).or_default();
            *n += 1;
            let name = match *n {
                1 => format!("{}:{}", p.label, meta.name),
                n => format!("{}:{}#{n}", p.label, meta.name),
            };
            let is_switch = match expect {
                None => is_switch_prog(&meta.name),
                Some(e) => e[i].switch_tags.contains(&scan.progs[id].tag),
            };
            if is_switch && switch.is_none() && i == 0 {
                switch = Some((*id, name.clone()));
            }
            progs.push((i, *id, name));
        }
    }
    let foreign = appeared
        .iter()
        .filter(|id| !owned.contains(id))
        .map(|id| format!("{} ({}, id {id})", after[id].name, after[id].kind))
        .collect();
    let (switch_id, switch_name) = switch.with_context(|| {
        format!(
            "{}: no sched_switch program among its programs {:?}",
            tool.label,
            progs.iter().map(|p| &p.2).collect::<Vec<_>>()
        )
    })?;
    Ok(Running {
        procs,
        progs,
        switch_id,
        switch_name,
        foreign,
        startup,
        startup_cpu_ns,
    })
}

/// Starts the tool once, untimed, to learn what "attached" looks like for it.
pub(super) fn warm_up(tool: &Tool, bpftool: &Path, logs: &Path) -> Result<Vec<Expect>> {
    let _stats = BpfStats::on()?;
    let mut run = start_tool(tool, None, bpftool, logs)?;
    let mut expect = Vec::new();
    for (i, p) in run.procs.iter().enumerate() {
        let scan = scan_fds(p.pid())?;
        let mine: Vec<&(usize, u32, String)> = run.progs.iter().filter(|x| x.0 == i).collect();
        let switch_tags: BTreeSet<String> = mine
            .iter()
            .filter(|x| is_switch_prog(x.2.split(':').nth(1).unwrap_or("")))
            .filter_map(|x| scan.progs.get(&x.1).map(|f| f.tag.clone()))
            .collect();
        ensure!(
            !switch_tags.is_empty(),
            "{}: no sched_switch program among {:?}",
            p.label,
            mine.iter().map(|x| &x.2).collect::<Vec<_>>()
        );
        let code = mine
            .iter()
            .map(|x| inventory(bpftool, x.1, &x.2))
            .collect::<Result<Vec<_>>>()?;
        expect.push(Expect {
            links: scan.links,
            perf_events: if scan.links > 0 { 0 } else { scan.perf_events },
            progs: mine.len(),
            switch_tags,
            code,
        });
    }
    if !run.foreign.is_empty() {
        eprintln!(
            "xtask bench: programs loaded by someone else meanwhile (ignored): {}",
            run.foreign.join(", ")
        );
    }
    for p in &mut run.procs {
        p.stop(Duration::from_secs(20))?;
    }
    Ok(expect)
}
