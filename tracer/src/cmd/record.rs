//! `tracer record`: every switch and wakeup of the traced set into a Perfetto trace,
//! inside a `tracer run` session (same targets, window and end-of-run summary).
//!
//! A reader thread drains the ring buffer into [`TraceWriter`], which flushes per-CPU
//! bundles every second or every [`perfetto::MAX_PENDING`] events: memory stays bounded
//! however long the run. Events the kernel could not queue (ring buffer full) are counted
//! per CPU, said on stderr as they happen, and written into the trace's `FtraceStats`
//! and the summary.
use std::{
    collections::HashSet,
    fs::File,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
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
        perfetto::{self, TraceWriter, Written},
        report::RecordSummary,
    },
    sys::root::Root,
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
}

struct Recorder {
    path: PathBuf,
    buffer_bytes: u32,
    file: Mutex<Option<File>>,
    stop: Arc<AtomicBool>,
    /// The output failed: the session should end.
    failed: Arc<AtomicBool>,
    reader: Mutex<Option<JoinHandle<Result<Outcome>>>>,
}

pub fn run(args: RecordConfig, root: Root) -> Result<i32> {
    let file = crate::sys::files::create_output(&args.output)
        .map_err(|e| anyhow!("cannot write the trace to {}: {e}", args.output.display()))?;
    let rec = Arc::new(Recorder {
        path: args.output.clone(),
        buffer_bytes: args.buffer_size,
        file: Mutex::new(Some(file)),
        stop: Arc::new(AtomicBool::new(false)),
        failed: Arc::new(AtomicBool::new(false)),
        reader: Mutex::new(None),
    });
    let mut run = args.run;
    run.hook = Hook(Some(rec.clone()));
    let r = crate::cmd::run::run(run, root);
    if r.is_err() && rec.file.lock().map(|f| f.is_some()).unwrap_or(false) {
        // Never started: leave no empty file behind.
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
        let file = self
            .file
            .lock()
            .map_err(|_| anyhow!("recorder state poisoned"))?
            .take()
            .ok_or_else(|| anyhow!("the trace file was already taken"))?;
        let rb = RingBuf::try_from(ebpf.take_map("EVENTS").context("EVENTS map missing")?)?;
        let stats = ebpf
            .take_map("REC_STATS")
            .context("REC_STATS map missing")?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)? as u32;
        let writer = TraceWriter::new(file, &perfetto::system_facts(cpus), cpus)
            .with_context(|| format!("writing {}", self.path.display()))?;
        let (stop, failed, path) = (self.stop.clone(), self.failed.clone(), self.path.clone());
        let h = std::thread::Builder::new()
            .name("record".into())
            .spawn(move || {
                let r = read_loop(rb, stats, writer, &stop, cpus as usize);
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                r.with_context(|| format!("writing the trace {}", path.display()))
            })?;
        *self.reader.lock().map_err(|_| anyhow!("poisoned"))? = Some(h);
        Ok(())
    }

    fn should_stop(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn finish(&self, _ebpf: &mut Ebpf) -> Result<(Option<RecordSummary>, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        let h = self
            .reader
            .lock()
            .map_err(|_| anyhow!("poisoned"))?
            .take()
            .ok_or_else(|| anyhow!("the trace reader never started"))?;
        let o = h
            .join()
            .map_err(|_| anyhow!("the trace reader panicked"))??;
        Ok(summary(&self.path, &o))
    }

    fn report(&self) -> bool {
        true
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
        // Bounded: enough to tell which threads' times are off.
        gap_tids: o.gap_tids.iter().take(1000).copied().collect(),
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

fn read_loop(
    mut rb: RingBuf<MapData>,
    stats: aya::maps::Map,
    mut w: TraceWriter<File>,
    stop: &AtomicBool,
    cpus: usize,
) -> Result<Outcome> {
    let mut read = vec![0u64; cpus];
    let mut undecodable = 0u64;
    let mut last_flush = Instant::now();
    let mut lost_said = 0u64;
    let mut named: HashSet<u32> = HashSet::new();
    let mut lost = vec![0u64; cpus];
    let fail = |w: &mut TraceWriter<File>, e: std::io::Error| -> anyhow::Error {
        // Cut the file back to its last whole packet: it stays a valid trace.
        let good = w.written().bytes;
        let _ = w.get_mut().set_len(good);
        anyhow::Error::new(e)
    };
    loop {
        let stopping = stop.load(Ordering::Relaxed);
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
                    return Err(fail(&mut w, e));
                }
            }
        }
        if stopping {
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
                return Err(fail(&mut w, e));
            }
        }
    }
    let (sent, l) = rec_stats(&stats)?;
    lost = l;
    let written = match w.finish(&lost, &read) {
        Ok(v) => v,
        Err(e) => return Err(fail(&mut w, e)),
    };
    Ok(Outcome {
        gap_tids: w.gap_tids().iter().copied().collect(),
        written,
        sent,
        lost,
        read,
        undecodable,
    })
}
