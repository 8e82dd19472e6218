//! `tracer slow`: each run-queue wait (or, with `--off-cpu`, each blocked period) at or
//! above `--min`, printed as it ends, with the task that ran just before on that CPU.
//! The threshold is applied in the kernel, at the switch-in that ends the wait, with
//! the wait the accounting has just timed; only those events cross to user space.
use std::{
    io::Write as _,
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{anyhow, Context as _, Result};
use aya::{maps::RingBuf, Ebpf};
use clap::{Args, FromArgMatches as _};

use crate::{
    cli::{parse_duration, ProbeMode, RunArgs},
    error::TracerError,
    loader::RecordLoad,
    record::{
        decode::{decode, Event, SlowKind},
        rec_stats, slow, Extension, Hook,
    },
    report::Section,
    root::Root,
};

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "The previous task is the one that ran on that CPU just before the waiting thread: \
                  not necessarily the cause of the wait (runqslower -P shows the same)."
)]
pub struct SlowArgs {
    /// Shortest wait shown (runqslower's default is 10ms too).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration)]
    pub min: Duration,
    /// Blocked (sleeping) periods instead of run-queue waits.
    #[arg(long)]
    pub off_cpu: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Trace this process and its threads (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace this thread only (repeatable).
    #[arg(short = 't', long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// Trace only tasks in this cgroup v2 directory.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Stop after this long; default: until Ctrl-C or COMMAND exits.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Attach mode (tp-btf or raw-tp: the events need task pointers).
    #[arg(long, value_enum, default_value_t = ProbeMode::Auto)]
    pub probe: ProbeMode,
    /// Size of the kernel ring buffer the events pass through.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = crate::record::parse_buffer_size)]
    pub buffer_size: u32,
    /// Run COMMAND as root even when started through sudo.
    #[arg(long)]
    pub as_root: bool,
    /// Command to start and trace with everything it spawns.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `tracer run`'s options at their defaults (the session `tracer slow` runs inside).
fn default_run_args() -> Result<RunArgs> {
    let cmd = <RunArgs as Args>::augment_args(clap::Command::new("slow"));
    let m = cmd.try_get_matches_from(["slow"])?;
    Ok(RunArgs::from_arg_matches(&m)?)
}

struct SlowLines {
    args: SlowArgs,
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
    shown: Arc<AtomicU64>,
    reader: Mutex<Option<JoinHandle<Result<(), TracerError>>>>,
}

pub fn run(args: SlowArgs, root: Root) -> Result<i32> {
    let mut run = default_run_args()?;
    run.pids = args.pids.clone();
    run.tids = args.tids.clone();
    run.cgroup = args.cgroup.clone();
    run.duration = args.duration;
    run.probe = args.probe;
    run.as_root = args.as_root;
    run.command = args.command.clone();
    let ext = Arc::new(SlowLines {
        args,
        stop: Arc::new(AtomicBool::new(false)),
        failed: Arc::new(AtomicBool::new(false)),
        shown: Arc::new(AtomicU64::new(0)),
        reader: Mutex::new(None),
    });
    run.hook = Hook(Some(ext));
    crate::run::run(run, root)
}

/// CLOCK_REALTIME less CLOCK_MONOTONIC: event times on the wall clock.
fn wall_offset_ns() -> i128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i128;
    now - crate::loader::monotonic_ns() as i128
}

impl Extension for SlowLines {
    fn load(&self) -> RecordLoad {
        use tracer_common::record::on;
        RecordLoad {
            on: if self.args.off_cpu {
                on::SLOW_OFF_CPU
            } else {
                on::SLOW_RUNQ
            },
            slow_min_ns: self.args.min.as_nanos().min(u64::MAX as u128) as u64,
            buffer_bytes: self.args.buffer_size,
        }
    }

    fn attached(&self, ebpf: &mut Ebpf) -> Result<()> {
        let mut rb = RingBuf::try_from(ebpf.take_map("EVENTS").context("EVENTS map missing")?)?;
        let json = self.args.json;
        let kind = if self.args.off_cpu {
            SlowKind::OffCpu
        } else {
            SlowKind::Runq
        };
        if !json {
            crate::cli::emit(&slow::header(kind))?;
        }
        let (stop, failed, shown) = (self.stop.clone(), self.failed.clone(), self.shown.clone());
        let offset = wall_offset_ns();
        let h = std::thread::Builder::new().name("slow".into()).spawn(
            move || -> Result<(), TracerError> {
                let fd = rb.as_raw_fd();
                loop {
                    let stopping = stop.load(Ordering::Relaxed);
                    if !stopping {
                        let mut p = libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one valid pollfd.
                        unsafe { libc::poll(&mut p, 1, 100) };
                    }
                    let mut out = String::new();
                    while let Some(item) = rb.next() {
                        if let Ok(Event::Slow(s)) = decode(&item) {
                            let unix = (s.ts_mono as i128 + offset).max(0) as u64;
                            if json {
                                out.push_str(&slow::json_line(&s, unix).to_string());
                            } else {
                                out.push_str(&slow::text_line(&s, unix));
                            }
                            out.push('\n');
                            shown.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if !out.is_empty() {
                        if let Err(e) = crate::cli::emit_raw(&out) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                    if stopping {
                        return Ok(());
                    }
                }
            },
        )?;
        // The stats map stays with the session: read at the end.
        *self.reader.lock().map_err(|_| anyhow!("poisoned"))? = Some(h);
        Ok(())
    }

    fn should_stop(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn finish(&self, ebpf: &mut Ebpf) -> Result<(Vec<Section>, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.reader.lock().map_err(|_| anyhow!("poisoned"))?.take() {
            h.join().map_err(|_| anyhow!("the reader panicked"))??;
        }
        let (_, lost) = rec_stats(ebpf.map("REC_STATS").context("REC_STATS missing")?)?;
        let total: u64 = lost.iter().sum();
        let shown = self.shown.load(Ordering::Relaxed);
        let mut err = std::io::stderr().lock();
        let what = if self.args.off_cpu {
            "blocked periods"
        } else {
            "run-queue waits"
        };
        let _ = writeln!(
            err,
            "tracer slow: {shown} {what} >= {:?} shown; {total} lost (ring buffer full){}",
            self.args.min,
            if total > 0 {
                format!(", per CPU {lost:?}: try a larger --buffer-size")
            } else {
                String::new()
            }
        );
        Ok((Vec::new(), Vec::new()))
    }

    fn report(&self) -> bool {
        false
    }
}
