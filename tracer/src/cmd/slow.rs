//! `tracer slow`: each run-queue wait (or, with `--off-cpu`, each blocked period) at or
//! above `--min`, printed as it ends, with the task that ran just before on that CPU.
//! The threshold is applied in the kernel, at the switch-in that ends the wait, with
//! the wait the accounting has just timed; only those events cross to user space.
use std::{
    io::Write as _,
    os::fd::AsRawFd as _,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::{
    bpf::record::{rec_stats, RecordLoad},
    cmd::run::{
        hook::{Extension, Hook},
        RunConfig,
    },
    error::TracerError,
    model::events::{decode, Event, SlowKind},
    output::{report::RecordSummary, slow},
    sys::root::Root,
};
use anyhow::{anyhow, Context as _, Result};
use aya::{maps::RingBuf, Ebpf};

/// What `tracer slow` was asked to do.
#[derive(Debug, Clone)]
pub struct SlowConfig {
    /// Shortest wait shown.
    pub min: Duration,
    /// Blocked (sleeping) periods instead of run-queue waits.
    pub off_cpu: bool,
    /// One JSON object per line.
    pub json: bool,
    /// Kernel ring buffer bytes (a power of two).
    pub buffer_size: u32,
    /// The `tracer run` session it streams from (targets, duration, probe).
    pub run: RunConfig,
}

struct SlowLines {
    args: SlowConfig,
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
    shown: Arc<AtomicU64>,
    reader: Mutex<Option<JoinHandle<Result<(), TracerError>>>>,
}

pub fn run(args: SlowConfig, root: Root) -> Result<i32> {
    let mut run = args.run.clone();
    let ext = Arc::new(SlowLines {
        args,
        stop: Arc::new(AtomicBool::new(false)),
        failed: Arc::new(AtomicBool::new(false)),
        shown: Arc::new(AtomicU64::new(0)),
        reader: Mutex::new(None),
    });
    run.hook = Hook(Some(ext));
    crate::cmd::run::run(run, root)
}

/// CLOCK_REALTIME less CLOCK_MONOTONIC: event times on the wall clock.
fn wall_offset_ns() -> i128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i128;
    now - crate::sys::clock::monotonic_ns() as i128
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
            crate::output::stdout::emit(&slow::header(kind))?;
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
                                out.push_str(&slow::json_text(&s, unix));
                            } else {
                                out.push_str(&slow::text_line(&s, unix));
                            }
                            out.push('\n');
                            shown.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if !out.is_empty() {
                        if let Err(e) = crate::output::stdout::emit_raw(&out) {
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

    fn finish(
        &self,
        ebpf: &mut Ebpf,
        _threads: &[(u32, u32, String)],
    ) -> Result<(Option<RecordSummary>, Vec<String>)> {
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
        Ok((None, Vec::new()))
    }

    fn report(&self) -> bool {
        false
    }
}
