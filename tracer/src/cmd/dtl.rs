//! `tracer dtl`: the pseries hypervisor's dispatch statistics and Dispatch Trace Log.
//!
//! The command loop: settings changed through a guard, the window sampled until its end or
//! a signal, the log polled in raw mode.
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::cmd::session::signals::{self, Signals};
use crate::{
    error::TracerError,
    model::hist,
    output::dtl::format_text,
    pseries::{
        dtl::{
            read::{check_complete, ensure_debugfs, open_all, read_available, read_timebase},
            report::{attach_dtl, base_report},
            DtlAnalyzer, DtlReport,
        },
        vcpudispatch::{self, SettingsGuard, StatsState},
    },
    sys::root::Root,
};

/// `tracer dtl`.
pub fn run(args: &DtlConfig, root: &Root) -> anyhow::Result<i32> {
    if !vcpudispatch::is_pseries(root) {
        // Elsewhere the hypervisor's delays show as steal time: say where to look.
        return Err(anyhow::anyhow!(
            "{}; the Dispatch Trace Log exists only on IBM POWER shared-processor partitions: \
             on this machine `tracer run` shows the time the hypervisor kept vCPUs from running \
             (steal time per CPU, its `hypervisor:` line)",
            TracerError::NotPseries(root.path(vcpudispatch::STATS_PATH))
        ));
    }
    let report = collect_blocking(args, root)?;
    if args.json {
        crate::output::stdout::emit(&crate::output::json::terminal_safe(
            serde_json::to_string_pretty(&report).context("encoding the JSON report")?,
        ))?;
    } else {
        crate::output::stdout::emit_raw(&format_text(&report))?;
    }
    Ok(0)
}

/// What the command was asked to do, as the command line gave it (parsed and checked).
#[derive(Debug, Clone)]
pub struct DtlConfig {
    /// Sample for this long (0: one snapshot); default until Ctrl-C.
    pub duration: Option<Duration>,
    /// Set vcpudispatch_stats_freq (1..HZ) for the run; restored afterwards.
    pub dtl_freq: Option<u32>,
    /// Set debugfs dtl_event_mask (0x1 cede, 0x2 preempt, 0x4 faults); restored afterwards.
    pub dtl_mask: Option<u32>,
    /// Read the raw Dispatch Trace Log (debugfs) instead of only vcpudispatch_stats.
    pub raw: bool,
    /// One JSON document.
    pub json: bool,
}

/// Poll period of the raw log: the ring holds 85 entries, so 10 ms keeps up with
/// 8500 dispatches per second per vCPU.
const POLL: Duration = Duration::from_millis(10);

/// Waits until `deadline` (None: forever) or a signal; true if a signal ended it.
async fn wait_or_signal(
    deadline: Option<Instant>,
    step: Option<Duration>,
    sig: &mut Signals,
) -> bool {
    let now = Instant::now();
    let mut d = match deadline {
        Some(t) => t.saturating_duration_since(now),
        None => Duration::from_secs(3600),
    };
    if let Some(s) = step {
        d = d.min(s);
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = sig.next() => true,
    }
}

/// [`collect`] on a runtime of its own, for callers without one.
pub fn collect_blocking(args: &DtlConfig, root: &Root) -> anyhow::Result<DtlReport> {
    signals::runtime()?.block_on(collect(args, root))
}

/// Samples per `args`, changing settings only through a [`SettingsGuard`] that puts them
/// back on every way out (return, error, signal, unwinding; the next run after a crash).
pub async fn collect(args: &DtlConfig, root: &Root) -> anyhow::Result<DtlReport> {
    // Handlers first: from here on a signal only ends the window.
    let mut sig = Signals::install()?;
    let (mut guard, recovered) = SettingsGuard::acquire(root)?;
    if let Some(r) = recovered {
        eprintln!("tracer: {}", r.describe());
    }
    let window = args.duration.filter(|d| !d.is_zero());
    let snapshot_only = args.duration.is_some_and(|d| d.is_zero());
    let mut notes = Vec::new();
    let report = if args.raw {
        if args.dtl_freq.is_some() {
            notes.push(
                "--dtl-freq applies to vcpudispatch_stats and was ignored with --raw".to_string(),
            );
        }
        let tb = read_timebase(root)?;
        ensure_debugfs(root);
        if let Some(mask) = args.dtl_mask {
            guard.set_dtl_mask(mask)?;
        }
        let stats = vcpudispatch::read_stats(root)?;
        let mut files = open_all(root)?;
        // The logs are open and the settings changed: restoring them writes root's own
        // files (DAC), which needs no capability.
        lock_down(root, &mut notes);
        let mut an = DtlAnalyzer::new(tb);
        let live = root.is_live();
        let start = Instant::now();
        let deadline = window.map(|w| start + w);
        if !snapshot_only {
            eprintln!(
                "tracer: reading the Dispatch Trace Log{} (Ctrl-C to stop)",
                until(window)
            );
        }
        let mut interrupted = false;
        loop {
            read_available(&mut files, &mut an, live)?;
            if snapshot_only || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if wait_or_signal(deadline, Some(POLL), &mut sig).await {
                interrupted = true;
                read_available(&mut files, &mut an, live)?;
                break;
            }
        }
        check_complete(&files)?;
        // Close the log before the mask goes back.
        drop(files);
        if snapshot_only && live {
            notes.push(
                "the kernel logs only while the cpu-N files are open, so a snapshot shows little; \
                 sample a window (e.g. --duration 5s)"
                    .to_string(),
            );
        }
        let elapsed = (!snapshot_only).then(|| elapsed_ns(start));
        let mut r = base_report(true, &stats, None, &stats);
        r.window_ns = elapsed;
        r.interrupted = interrupted;
        attach_dtl(&mut r, &an);
        r
    } else {
        if args.dtl_mask.is_some() {
            notes.push(
                "--dtl-mask applies to --raw and was ignored (vcpudispatch_stats logs all events)"
                    .to_string(),
            );
        }
        if snapshot_only {
            if args.dtl_freq.is_some() {
                notes.push("--dtl-freq has no effect on a snapshot and was ignored".to_string());
            }
            let state = vcpudispatch::read_stats(root)?;
            lock_down(root, &mut notes);
            base_report(false, &state, None, &state)
        } else {
            if guard.enable_stats()? {
                notes.push(
                    "vcpudispatch_stats was off: enabled for the window, disabled again"
                        .to_string(),
                );
            }
            if let Some(f) = args.dtl_freq {
                guard.set_freq(f)?;
            }
            let before = vcpudispatch::read_stats(root)?;
            lock_down(root, &mut notes);
            if before == StatsState::Off {
                anyhow::bail!(
                    "{} still reads `off` after enabling it",
                    root.path(vcpudispatch::STATS_PATH).display()
                );
            }
            let start = Instant::now();
            eprintln!(
                "tracer: sampling vcpudispatch_stats{} (Ctrl-C to stop)",
                until(window)
            );
            let deadline = window.map(|w| start + w);
            let mut interrupted = false;
            while deadline.is_none_or(|d| Instant::now() < d) {
                if wait_or_signal(deadline, None, &mut sig).await {
                    interrupted = true;
                    break;
                }
            }
            let after = vcpudispatch::read_stats(root)?;
            let mut r = base_report(false, &before, Some(elapsed_ns(start)), &after);
            r.interrupted = interrupted;
            r
        }
    };
    guard.restore()?;
    let mut report = report;
    report.notes.extend(notes);
    Ok(report)
}

/// The privilege policy of every command, once what needs privileges is open. Not for a
/// `--root` tree (fixtures, a copied system): nothing privileged is open then, and the
/// fixture tests run this in their own process.
fn lock_down(root: &Root, notes: &mut Vec<String>) {
    if !root.is_live() {
        return;
    }
    if let Err(e) = crate::sys::privileges::after_attach(crate::sys::privileges::Keep::Nothing) {
        notes.push(format!("could not lock privileges: {e}"));
    }
}

fn until(window: Option<Duration>) -> String {
    window.map_or_else(String::new, |w| {
        format!(
            " for {}",
            hist::human_ns(u64::try_from(w.as_nanos()).unwrap_or(u64::MAX))
        )
    })
}

fn elapsed_ns(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
