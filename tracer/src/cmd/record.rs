//! `tracer record`: every switch and wakeup of the traced set into a Perfetto trace,
//! inside a `tracer run` session (same targets, window and end-of-run summary).
//!
//! A reader thread drains the ring buffer into [`TraceWriter`], which flushes per-CPU
//! bundles every second or every [`perfetto::MAX_PENDING`] events: memory stays bounded
//! however long the run. Events the kernel could not queue (ring buffer full) are counted
//! per CPU, said on stderr as they happen, and written into the trace's `FtraceStats`
//! and the summary. The trace ends at the window's close, where the summary does.
//!
//! The output (`sys::outfile`): `-o -` or `/dev/stdout` puts the trace on standard
//! output and the report on standard error (as `perf record -o -`); a FIFO without a
//! reader is said and waited for. A write that fails (a full disk) ends the run: the file
//! is cut back to its last whole packet and ends with the stats where they fit, the
//! report is printed, a command is sent SIGTERM (as `perf record` does with its
//! workload), and the run fails with the write's error in one line.
use std::{
    collections::HashSet,
    fs::File,
    io::{Seek as _, SeekFrom},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::{
    bpf::record::{rec_stats, RecordLoad},
    cmd::run::{
        hook::{Extension, Hook},
        RunConfig,
    },
    model::events::{decode, Event, TaskChange},
    output::{
        heatmap::HeatmapSink,
        perfetto::{self, TraceWriter, Written},
        report::RecordSummary,
        sink,
    },
    sys::{outfile, root::Root},
};
use anyhow::{anyhow, Context as _, Result};
use aya::{maps::MapData, maps::RingBuf, Ebpf};

/// What `tracer record` was asked to do.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// Where the Perfetto trace goes.
    pub output: PathBuf,
    /// Kernel ring buffer bytes (a power of two).
    pub buffer_size: u32,
    /// Each flush's packets deflated into one (`--no-compress` turns it off).
    pub compress: bool,
    /// The `tracer run` session it records in.
    pub run: RunConfig,
}

/// How often pending events are written (and losses checked).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What the reader thread hands back.
struct Outcome {
    written: Written,
    sent: Vec<u64>,
    lost: Vec<u64>,
    read: Vec<u64>,
    undecodable: u64,
    gap_tids: Vec<u32>,
    moved: std::collections::BTreeMap<u32, u64>,
    /// The write that failed (the trace is cut back to its last whole packet), and
    /// whether the end-of-trace stats still fit after it.
    failed: Option<(anyhow::Error, bool)>,
}

struct Recorder {
    path: PathBuf,
    buffer_bytes: u32,
    compress: bool,
    file: Mutex<Option<outfile::OutFile>>,
    stop: Arc<AtomicBool>,
    /// The window's close (CLOCK_MONOTONIC), handed to the reader before `stop`.
    close: Arc<AtomicU64>,
    /// The output failed: the session should end.
    failed: Arc<AtomicBool>,
    /// The report's threads, handed to the reader before `stop`, to be named in the
    /// trace (see `TraceWriter::name_threads`).
    names: Arc<Mutex<Vec<(u32, u32, String)>>>,
    reader: Mutex<Option<JoinHandle<Result<Outcome>>>>,
    /// The failure, for the run to end with after its report.
    error: Mutex<Option<anyhow::Error>>,
}

pub fn run(args: RecordConfig, root: Root) -> Result<i32> {
    let out = outfile::open(&args.output, outfile::say_stderr)?;
    let (on_stdout, regular) = (out.on_stdout, out.regular);
    let rec = Arc::new(Recorder {
        path: args.output.clone(),
        buffer_bytes: args.buffer_size,
        compress: args.compress,
        file: Mutex::new(Some(out)),
        stop: Arc::new(AtomicBool::new(false)),
        close: Arc::new(AtomicU64::new(0)),
        failed: Arc::new(AtomicBool::new(false)),
        names: Arc::new(Mutex::new(Vec::new())),
        reader: Mutex::new(None),
        error: Mutex::new(None),
    });
    let mut run = args.run;
    run.hook = Hook(Some(rec.clone()));
    let r = if on_stdout {
        // The trace has standard output: the report goes to standard error.
        let mut sink = sink::stderr_sink(run.json);
        if let Some(path) = &run.heatmap {
            sink = Box::new(
                HeatmapSink::create(sink, path)
                    .with_context(|| format!("creating the heatmap file {}", path.display()))?,
            );
        }
        let front = crate::cmd::run::Frontend {
            sink,
            quit: None,
            banner: true,
            command_output: None,
        };
        crate::cmd::run::run_with(run, root, front)
    } else {
        crate::cmd::run::run(run, root)
    };
    let never_started = rec.file.lock().map(|f| f.is_some()).unwrap_or(false);
    if r.is_err() && never_started && regular {
        // Leave no empty file behind (never a FIFO's or a device's name).
        let _ = std::fs::remove_file(&args.output);
    }
    r
}

impl Extension for Recorder {
    fn load(&self) -> RecordLoad {
        RecordLoad {
            on: tracer_common::record::on::SCHED,
            slow_min_ns: 0,
            buffer_bytes: self.buffer_bytes,
        }
    }

    fn attached(&self, ebpf: &mut Ebpf) -> Result<()> {
        let out = self
            .file
            .lock()
            .map_err(|_| anyhow!("recorder state poisoned"))?
            .take()
            .ok_or_else(|| anyhow!("the trace file was already taken"))?;
        let regular = out.regular;
        let rb = RingBuf::try_from(ebpf.take_map("EVENTS").context("EVENTS map missing")?)?;
        let stats = ebpf
            .take_map("REC_STATS")
            .context("REC_STATS map missing")?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)? as u32;
        let facts = perfetto::system_facts(cpus);
        let offset = crate::sys::clock::boot_offset_ns();
        let writer = TraceWriter::new(out.file, &facts, cpus, offset)
            .with_context(|| format!("writing the trace {}", self.path.display()))?
            .compressed(self.compress);
        let (stop, close, failed, names, path) = (
            self.stop.clone(),
            self.close.clone(),
            self.failed.clone(),
            self.names.clone(),
            self.path.clone(),
        );
        let h = std::thread::Builder::new()
            .name("record".into())
            .spawn(move || {
                let ends = Ends {
                    stop: &stop,
                    close: &close,
                    failed: &failed,
                    names: &names,
                    regular,
                };
                read_loop(rb, stats, writer, &ends, cpus as usize).map(|mut o| {
                    if let Some((e, stats)) = o.failed.take() {
                        let e = e.context(format!("writing the trace {}", path.display()));
                        o.failed = Some((e, stats));
                    }
                    o
                })
            })?;
        *self.reader.lock().map_err(|_| anyhow!("poisoned"))? = Some(h);
        Ok(())
    }

    fn should_stop(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn finish(
        &self,
        ebpf: &mut Ebpf,
        threads: &[(u32, u32, String)],
    ) -> Result<(Option<RecordSummary>, Vec<String>)> {
        // The trace ends where the summary does; 0 (no close) writes no cut.
        let close = crate::bpf::record::window_close(ebpf).unwrap_or(0);
        self.close.store(close, Ordering::Relaxed);
        *self.names.lock().map_err(|_| anyhow!("poisoned"))? = threads.to_vec();
        self.stop.store(true, Ordering::Release);
        let h = self
            .reader
            .lock()
            .map_err(|_| anyhow!("poisoned"))?
            .take()
            .ok_or_else(|| anyhow!("the trace reader never started"))?;
        let mut o = h
            .join()
            .map_err(|_| anyhow!("the trace reader panicked"))??;
        let (summary, mut notices) = summary(&self.path, &o);
        if let Some((e, stats)) = o.failed.take() {
            notices.push(format!(
                "record: the trace could not be written on: it is cut back to its last whole packet ({} bytes), {}",
                o.written.bytes,
                if stats {
                    "with the end-of-trace stats after it"
                } else {
                    "without the end-of-trace stats (no room for them)"
                }
            ));
            *self.error.lock().map_err(|_| anyhow!("poisoned"))? = Some(e);
        }
        Ok((summary, notices))
    }

    fn report(&self) -> bool {
        true
    }

    fn error(&self) -> Option<anyhow::Error> {
        self.error.lock().ok()?.take()
    }
}

/// The "record" section of the final report, and notices of losses.
fn summary(path: &Path, o: &Outcome) -> (Option<RecordSummary>, Vec<String>) {
    let w = o.written;
    let lost: u64 = o.lost.iter().sum();
    let events = w.switches + w.wakings + w.tasks;
    let record = RecordSummary {
        output: path.display().to_string(),
        switches: w.switches,
        wakeups: w.wakings,
        task_events: w.tasks,
        bytes: w.bytes,
        packets: w.packets,
        bytes_per_event: if events > 0 {
            w.bytes as f64 / events as f64
        } else {
            0.0
        },
        lost,
        lost_per_cpu: o.lost.clone(),
        sent_per_cpu: o.sent.clone(),
        read_per_cpu: o.read.clone(),
        undecodable: o.undecodable,
        gaps: w.gaps,
        window_cuts: w.window_cuts,
        // Bounded: enough to tell which threads' times are off.
        gap_tids: o.gap_tids.iter().take(1000).copied().collect(),
        placed_earlier_ns: o.moved.clone(),
    };
    let mut notices = Vec::new();
    if lost > 0 {
        notices.push(format!(
            "record: {lost} events lost because the ring buffer was full (per CPU {:?}); a larger --buffer-size keeps them; the trace marks the bundles after each loss and its ftrace stats hold the counts",
            o.lost
        ));
    }
    if w.gaps > 0 {
        notices.push(format!(
            "record: {} switches the kernel did not run the switch program for (see switch_in_unseen) were put back with estimated times; their bundles are marked as having lost events, and record.gap_tids lists the threads around them",
            w.gaps
        ));
    }
    if o.undecodable > 0 {
        notices.push(format!(
            "record: {} ring-buffer records could not be decoded (a bug: please report)",
            o.undecodable
        ));
    }
    (Some(record), notices)
}

/// How long the reader sleeps between drains: the programs do not wake it (see
/// `NO_WAKEUP` in tracer-ebpf), and a 16 MiB buffer holds about 300 000 events.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// Names a process from /proc when first seen (it may be gone by the end).
fn proc_cmdline(tgid: u32) -> Option<(Vec<String>, Option<u32>)> {
    let raw = std::fs::read(format!("/proc/{tgid}/cmdline")).ok()?;
    let argv: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let stat = std::fs::read_to_string(format!("/proc/{tgid}/stat")).ok();
    // The field after the last ')' and the state is the parent's PID.
    let ppid = stat.and_then(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse().ok())
    });
    (!argv.is_empty()).then_some((argv, ppid))
}

/// How the reader learns that the session ends, and tells that its output failed.
struct Ends<'a> {
    stop: &'a AtomicBool,
    close: &'a AtomicU64,
    failed: &'a AtomicBool,
    names: &'a Mutex<Vec<(u32, u32, String)>>,
    /// The output is a regular file (it can be cut back and space reserved in it).
    regular: bool,
}

/// Room kept past the end of a regular file (`fallocate`, size unchanged) so the
/// end-of-trace stats fit after a write that fails on a full disk: that write is cut
/// back, freeing what it took.
const RESERVE: u64 = 16 * 1024;

/// After a failed write: the file cut back to its last whole packet, then the
/// end-of-trace stats if they fit. Whether they did.
fn end_after_failure(w: &mut TraceWriter<File>, regular: bool, lost: &[u64], read: &[u64]) -> bool {
    let good = w.written().bytes;
    let cut =
        |f: &mut File| regular && f.set_len(good).is_ok() && f.seek(SeekFrom::Start(good)).is_ok();
    if regular && !cut(w.get_mut()) {
        return false;
    }
    if w.end_after_failure(lost, read).is_ok() {
        return true;
    }
    let _ = cut(w.get_mut());
    false
}

fn read_loop(
    mut rb: RingBuf<MapData>,
    stats: aya::maps::Map,
    mut w: TraceWriter<File>,
    ends: &Ends,
    cpus: usize,
) -> Result<Outcome> {
    let mut read = vec![0u64; cpus];
    let mut undecodable = 0u64;
    let mut last_flush = Instant::now();
    let mut lost_said = 0u64;
    let mut named: HashSet<u32> = HashSet::new();
    let mut lost = vec![0u64; cpus];
    let reserve = |w: &mut TraceWriter<File>| {
        if ends.regular {
            let at = w.written().bytes;
            let _ = rustix::fs::fallocate(
                &*w.get_mut(),
                rustix::fs::FallocateFlags::KEEP_SIZE,
                at,
                RESERVE,
            );
        }
    };
    reserve(&mut w);
    let mut failure: Option<std::io::Error> = None;
    loop {
        let stopping = ends.stop.load(Ordering::Acquire);
        if !stopping {
            std::thread::sleep(DRAIN_EVERY);
        }
        while let Some(item) = rb.next() {
            let ev = decode(&item);
            drop(item);
            log::trace!("{ev:?}");
            match ev {
                Ok(Event::Switch(s)) => {
                    if let Some(n) = read.get_mut(s.cpu as usize) {
                        *n += 1;
                    }
                    if s.next_tid != 0 && named.insert(s.next_tgid) {
                        if let Some((argv, ppid)) = proc_cmdline(s.next_tgid) {
                            w.process_cmdline(s.next_tgid, argv, ppid);
                        }
                    }
                    w.switch(s);
                }
                Ok(Event::Wakeup(e)) => {
                    if let Some(n) = read.get_mut(e.cpu as usize) {
                        *n += 1;
                    }
                    w.wakeup(e);
                }
                Ok(Event::Task(t)) => {
                    if let Some(n) = read.get_mut(t.cpu as usize) {
                        *n += 1;
                    }
                    let exec = matches!(t.change, TaskChange::Exec { .. }).then_some(t.tgid);
                    w.task(t);
                    if let Some((argv, ppid)) = exec.and_then(proc_cmdline) {
                        // A new program: its command line, if it is still there.
                        w.process_cmdline(exec.unwrap_or(0), argv, ppid);
                    }
                }
                Ok(Event::Slow(_)) | Err(_) => undecodable += 1,
            }
            if w.full() {
                if let Err(e) = w.flush(&lost) {
                    failure = Some(e);
                    break;
                }
                reserve(&mut w);
            }
        }
        if stopping || failure.is_some() {
            break;
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            last_flush = Instant::now();
            if let Ok((_, l)) = rec_stats(&stats) {
                lost = l;
            }
            let total: u64 = lost.iter().sum();
            if total > lost_said {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "tracer: record: {} events lost so far, ring buffer full (per CPU {:?}); try a larger --buffer-size",
                    total,
                    lost
                );
                lost_said = total;
            }
            if let Err(e) = w.flush(&lost) {
                failure = Some(e);
                break;
            }
            reserve(&mut w);
        }
    }
    let (sent, l) = rec_stats(&stats)?;
    lost = l;
    if failure.is_none() {
        let close = ends.close.load(Ordering::Relaxed);
        if close != 0 {
            if let Ok(names) = ends.names.lock() {
                w.name_threads(close, &names);
            }
        }
        if let Err(e) = w.finish(&lost, &read, (close != 0).then_some(close)) {
            failure = Some(e);
        }
    }
    let failed = failure.map(|e| {
        // The session ends at its next check (`should_stop`).
        ends.failed.store(true, Ordering::Relaxed);
        let stats = end_after_failure(&mut w, ends.regular, &lost, &read);
        (anyhow::Error::new(e), stats)
    });
    if ends.regular && failed.is_none() {
        // Give back the room kept for the stats.
        let at = w.written().bytes;
        let _ = w.get_mut().set_len(at);
    }
    Ok(Outcome {
        gap_tids: w.gap_tids().iter().copied().collect(),
        moved: w.moved().clone(),
        written: w.written(),
        sent,
        lost,
        read,
        undecodable,
        failed,
    })
}
