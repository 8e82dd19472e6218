//! The Perfetto trace writer: typed events in, `TracePacket`s out (a Perfetto trace
//! file is a sequence of `Trace.packet`, field 1, each length-delimited).
//!
//! Why hand-written `prost` messages: the trace proto is hundreds of files, and
//! generating it needs `protoc` (not on every build machine) or `protox` plus a vendored
//! copy of Perfetto's protos; the `perfetto_protos` crate does that at build time and is
//! heavy. We write about ten messages, so they are declared here with `#[derive(
//! prost::Message)]` and field numbers from Perfetto's `.proto` files; the end-to-end
//! test (`tests/tests/record.rs`) decodes every trace with Perfetto's official
//! generated protos (the `perfetto` Python package), which is what catches a wrong
//! number, type or packing.
//!
//! What the trace holds: a `SystemInfo` packet (utsname: the trace processor decodes
//! `prev_state` by kernel version), an `FtraceStats` at the start and at the end (per-CPU
//! `overrun`: events the ring buffer lost), and per flush one `ProcessTree` packet (threads
//! and processes first seen or renamed since the last one) and, per CPU, one
//! `FtraceEventBundle` with `compact_sched` arrays (switches and wakings) and, in
//! timestamp order, the task events as regular ftrace events (`task_newtask`,
//! `sched_process_exec`, `sched_process_exit`, `task_rename`, `sched_migrate_task`).
//!
//! Times: the events carry the accounting's CLOCK_MONOTONIC timestamps; they are written
//! in CLOCK_BOOTTIME, Perfetto's default trace clock (the offset between the two, taken
//! once by the caller, changes only across a suspend). A switch is written at the
//! scheduler's boundary between the two slices (`model::boundaries`), so the slices are
//! the runtimes the summary counts; a waking that the boundary would precede (the task
//! was charged from its enqueue, before the wakeup's tracepoint) is moved to just before
//! it. At the window's close each CPU's last task is switched out to the idle task
//! ([`TraceWriter::finish`]), as the summary cuts that slice there.
use std::{collections::BTreeMap, collections::HashMap, io::Write};

use crate::model::{
    boundaries::{place, Point},
    events::{ftrace_prev_state, Switch, TaskChange, TaskEv, Wakeup},
};

mod bundle;
pub mod pb;
mod task_events;

use task_events::ftrace_event;

/// The one packet sequence we write.
const SEQUENCE_ID: u32 = 1;

/// Events held per CPU before a flush writes them: bounds memory however long the run.
pub const MAX_PENDING: usize = 8192;

/// A waking in the stream: its sequence number, timestamp, and where it waits to be
/// written (its CPU and index there; stale once that CPU's bundle is written, which the
/// sequence number tells).
#[derive(Clone, Copy)]
struct WakeRef {
    seq: u64,
    ts: u64,
    cpu: u32,
    idx: usize,
}

/// A switch waiting to be written, with the waking of its next task, if one is in the
/// stream since that task last left a CPU.
struct PendingSwitch {
    s: Switch,
    woken: Option<WakeRef>,
}

#[derive(Default)]
struct CpuPending {
    switches: Vec<PendingSwitch>,
    /// With their sequence numbers (see `PendingSwitch::woken`).
    wakings: Vec<(u64, Wakeup)>,
    tasks: Vec<TaskEv>,
    /// The timestamp of the last switch written on this CPU: the floor of the next
    /// boundary (see `model::boundaries::place`).
    before: Option<u64>,
    /// The task the last switch on this CPU put there, and its TGID.
    running: Option<(u32, u32)>,
    /// The last timestamp written (switches, wakings, task events), so bundles never go
    /// back.
    last_switch: u64,
    last_waking: u64,
    last_task: u64,
    /// Overruns counted when this CPU's last bundle was written.
    overrun_seen: u64,
    /// A switch was missing from the stream since the last bundle.
    gap: bool,
}

/// What the machine is, for the `SystemInfo` packet.
#[derive(Clone, Debug, Default)]
pub struct SystemFacts {
    pub sysname: String,
    pub release: String,
    pub version: String,
    pub machine: String,
    pub num_cpus: u32,
    pub page_size: u32,
}

/// Counts of what was written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub switches: u64,
    pub wakings: u64,
    /// Task events: new tasks, execs, exits, renames, migrations.
    pub tasks: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Switches the programs did not see (the kernel skipped them, see
    /// `switch_in_unseen`), put back with an estimated time: their bundles have
    /// `lost_events` set; the tasks around them are in [`TraceWriter::gap_tids`].
    pub gaps: u64,
    /// Of `switches`, those written at the window's close (not from the kernel).
    pub window_cuts: u64,
}

/// Streams events into a Perfetto trace. Memory: at most [`MAX_PENDING`] events per CPU
/// and one entry per thread seen (its name, to emit renames only).
pub struct TraceWriter<W: Write> {
    out: W,
    cpus: BTreeMap<u32, CpuPending>,
    pending: usize,
    /// Thread -> (TGID, name) as last written.
    threads: HashMap<u32, (u32, String)>,
    processes: HashMap<u32, String>,
    tree: pb::ProcessTree,
    tree_ts: Option<u64>,
    written: Written,
    buf: Vec<u8>,
    /// What `buf` holds, added to `written` once it is written.
    in_buf: Written,
    /// Each flush's packets deflated into one packet ([`Self::compressed`]).
    compress: bool,
    gap_tids: std::collections::BTreeSet<u32>,
    /// Per thread, how far the trace moved its switches and wakings from the
    /// accounting's timestamps to the scheduler's boundaries, in all (see `place`).
    moved: BTreeMap<u32, u64>,
    /// CLOCK_BOOTTIME less CLOCK_MONOTONIC, added to every timestamp written.
    boot_offset: u64,
    /// Thread -> its last waking in the stream (sequence number, timestamp), until it
    /// switches in or out.
    woken: HashMap<u32, WakeRef>,
    wake_seq: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace: the `SystemInfo` packet and the start-of-trace stats. Event
    /// timestamps are CLOCK_MONOTONIC; `boot_offset` (CLOCK_BOOTTIME less
    /// CLOCK_MONOTONIC) is added to each as it is written.
    pub fn new(out: W, facts: &SystemFacts, cpus: u32, boot_offset: u64) -> std::io::Result<Self> {
        let mut w = TraceWriter {
            out,
            cpus: BTreeMap::new(),
            pending: 0,
            threads: HashMap::new(),
            processes: HashMap::new(),
            tree: pb::ProcessTree::default(),
            tree_ts: None,
            written: Written::default(),
            buf: Vec::new(),
            in_buf: Written::default(),
            gap_tids: Default::default(),
            moved: BTreeMap::new(),
            boot_offset,
            woken: HashMap::new(),
            wake_seq: 0,
            compress: false,
        };
        w.packet(pb::TracePacket {
            system_info: Some(pb::SystemInfo {
                utsname: Some(pb::Utsname {
                    sysname: Some(facts.sysname.clone()),
                    version: Some(facts.version.clone()),
                    release: Some(facts.release.clone()),
                    machine: Some(facts.machine.clone()),
                }),
                page_size: Some(facts.page_size),
                num_cpus: Some(facts.num_cpus),
            }),
            ..Default::default()
        });
        w.stats(1, &vec![0; cpus as usize], None);
        w.write_buf()?;
        Ok(w)
    }

    /// From the next flush on, each flush's packets go out deflated (zlib) in one packet's
    /// `compressed_packets`, which ui.perfetto.dev and trace_processor expand: the pipe
    /// storm's switches repeat, and the file shrinks several times for little CPU.
    pub fn compressed(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }

    /// What has been written so far.
    pub fn written(&self) -> Written {
        self.written
    }

    /// Whether enough is pending that the caller should [`Self::flush`] now.
    pub fn full(&self) -> bool {
        self.pending >= MAX_PENDING
    }

    fn packet(&mut self, mut p: pb::TracePacket) {
        use prost::Message as _;
        p.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        let len = p.encoded_len();
        prost::encoding::encode_key(
            pb::TRACE_PACKET_TAG,
            prost::encoding::WireType::LengthDelimited,
            &mut self.buf,
        );
        prost::encoding::encode_varint(len as u64, &mut self.buf);
        p.encode_raw(&mut self.buf);
        self.in_buf.packets += 1;
    }

    /// Writes the packets built so far in one `write_all`: a trace cut by a kill or a
    /// full disk then ends between packets, or at worst inside the last one.
    fn write_buf(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let deflated;
        let bytes = if self.compress {
            deflated = deflate_packets(&self.buf)?;
            &deflated
        } else {
            &self.buf
        };
        self.out.write_all(bytes)?;
        self.out.flush()?;
        // Counted as written only now: after a failed write, what the report counts is
        // what the file holds.
        let b = std::mem::take(&mut self.in_buf);
        self.written.bytes += bytes.len() as u64;
        self.written.packets += b.packets;
        self.written.switches += b.switches;
        self.written.wakings += b.wakings;
        self.written.tasks += b.tasks;
        self.buf.clear();
        Ok(())
    }

    fn stats(&mut self, phase: i32, overrun: &[u64], read: Option<&[u64]>) {
        let cpu_stats = overrun
            .iter()
            .enumerate()
            .map(|(cpu, &o)| pb::FtraceCpuStats {
                cpu: Some(cpu as u64),
                entries: Some(0),
                overrun: Some(o),
                read_events: read.and_then(|r| r.get(cpu).copied()),
            })
            .collect();
        self.packet(pb::TracePacket {
            ftrace_stats: Some(pb::FtraceStats {
                phase: Some(phase),
                cpu_stats,
            }),
            ..Default::default()
        });
    }

    /// Names a process with its real command line (from /proc), when the caller has it.
    pub fn process_cmdline(&mut self, pid: u32, cmdline: Vec<String>, ppid: Option<u32>) {
        if pid == 0 || cmdline.is_empty() {
            return;
        }
        let key = cmdline.join(" ");
        if self.processes.get(&pid) == Some(&key) {
            return;
        }
        self.processes.insert(pid, key);
        self.tree.processes.push(pb::Process {
            pid: Some(pid as i32),
            ppid: ppid.map(|p| p as i32),
            cmdline,
            cmdline_is_comm: None,
        });
    }

    fn saw_thread(&mut self, ts: u64, tid: u32, tgid: u32, name: &str) {
        if tid == 0 || tgid == 0 {
            return; // the idle tasks; or a thread the kernel gave no TGID for
        }
        match self.threads.get(&tid) {
            Some((g, n)) if *g == tgid && n == name => return,
            _ => {}
        }
        self.threads.insert(tid, (tgid, name.to_string()));
        self.tree.threads.push(pb::Thread {
            tid: Some(tid as i32),
            name: Some(name.to_string()),
            tgid: Some(tgid as i32),
        });
        if tid == tgid && !self.processes.contains_key(&tgid) {
            // Until /proc gives the command line (or if the process is gone): its comm.
            self.processes.insert(tgid, String::new());
            self.tree.processes.push(pb::Process {
                pid: Some(tgid as i32),
                ppid: None,
                cmdline: vec![name.to_string()],
                cmdline_is_comm: Some(true),
            });
        }
        self.tree_ts = Some(self.tree_ts.map_or(ts, |t| t.min(ts)));
    }

    /// Names threads in the next process tree, as of `ts` (CLOCK_MONOTONIC): the ones
    /// no event named (a thread asleep the whole window is in the summary, and so in
    /// the trace, with its process).
    pub fn name_threads(&mut self, ts: u64, threads: &[(u32, u32, String)]) {
        for (tid, tgid, name) in threads {
            if !self.threads.contains_key(tid) {
                self.saw_thread(ts, *tid, *tgid, name);
            }
        }
    }

    pub fn switch(&mut self, s: Switch) {
        self.saw_thread(s.ts, s.next_tid, s.next_tgid, &s.next_comm);
        // A waking before it belongs to this switch-in; one of the task leaving is stale.
        self.woken.remove(&s.prev_tid);
        let woken = if s.next_tid != 0 {
            self.woken.remove(&s.next_tid)
        } else {
            None
        };
        let p = self.cpus.entry(s.cpu).or_default();
        if s.repaired {
            // The CPU track around it is an estimate: say so in the bundle.
            p.gap = true;
            self.written.gaps += 1;
            self.gap_tids.insert(s.prev_tid);
            self.gap_tids.insert(s.next_tid);
        }
        p.running = Some((s.next_tid, s.next_tgid));
        p.switches.push(PendingSwitch { s, woken });
        self.pending += 1;
    }

    /// Tasks next to a switch missing from the stream: their times in the trace are off.
    pub fn gap_tids(&self) -> &std::collections::BTreeSet<u32> {
        &self.gap_tids
    }

    /// Per thread, the ns its switches and wakings were moved to the scheduler's
    /// boundaries: a run-queue wait in the trace differs from the summary's (timed at
    /// the tracepoints) by at most its thread's figure.
    pub fn moved(&self) -> &BTreeMap<u32, u64> {
        &self.moved
    }

    pub fn wakeup(&mut self, w: Wakeup) {
        self.saw_thread(w.ts, w.tid, w.tgid, &w.comm);
        self.wake_seq += 1;
        let tid = w.tid;
        let wakings = &mut self.cpus.entry(w.cpu).or_default().wakings;
        let r = WakeRef {
            seq: self.wake_seq,
            ts: w.ts,
            cpu: w.cpu,
            idx: wakings.len(),
        };
        wakings.push((self.wake_seq, w));
        self.woken.insert(tid, r);
        self.pending += 1;
    }

    /// A task event: an ftrace event in its CPU's bundle; a new, renamed or exec'd
    /// thread is (re)named in the next process tree, an exec'd process too.
    pub fn task(&mut self, t: TaskEv) {
        match &t.change {
            TaskChange::Exec { .. } => {
                // The process is a new program: named again (by its comm, then by its
                // command line if the caller still finds it in /proc).
                self.processes.remove(&t.tgid);
                self.threads.remove(&t.tid);
                self.saw_thread(t.ts, t.tid, t.tgid, &t.comm);
            }
            TaskChange::New { .. } | TaskChange::Rename { .. } => {
                self.saw_thread(t.ts, t.tid, t.tgid, &t.comm)
            }
            TaskChange::Exit | TaskChange::Migrate { .. } => {}
        }
        self.cpus.entry(t.cpu).or_default().tasks.push(t);
        self.pending += 1;
    }

    /// Writes what is pending: the names first, then one bundle per CPU. `overrun`: the
    /// per-CPU count of events lost so far; a CPU that lost events since its last
    /// bundle has `lost_events` set in the next.
    pub fn flush(&mut self, overrun: &[u64]) -> std::io::Result<()> {
        if !self.tree.threads.is_empty() || !self.tree.processes.is_empty() {
            let tree = std::mem::take(&mut self.tree);
            let ts = self.tree_ts.take().map(|t| t + self.boot_offset);
            self.packet(pb::TracePacket {
                timestamp: ts,
                process_tree: Some(tree),
                ..Default::default()
            });
        }
        let placed = self.place();
        for (cpu, switches) in placed {
            let lost_now = overrun.get(cpu as usize).copied().unwrap_or(0);
            let Some(bundle) = self.bundle(cpu, switches, lost_now) else {
                continue;
            };
            self.packet(pb::TracePacket {
                ftrace_events: Some(bundle),
                ..Default::default()
            });
        }
        self.pending = 0;
        self.write_buf()
    }

    /// Writes what is pending and the end-of-trace stats (per-CPU overruns and events
    /// read), and returns what was written. `close`: the window's close (CLOCK_MONOTONIC),
    /// where the trace ends as the summary does: each CPU's last task, if not the idle
    /// task, is switched out there to the idle task (state R, it was still running), a
    /// switch that did not happen (counted in `window_cuts`).
    pub fn finish(
        &mut self,
        overrun: &[u64],
        read: &[u64],
        close: Option<u64>,
    ) -> std::io::Result<Written> {
        if let Some(close) = close {
            self.cut_at(close);
        }
        self.flush(overrun)?;
        self.stats(2, overrun, Some(read));
        self.write_buf()?;
        Ok(self.written)
    }

    /// After a write failed: drops what is pending and not written, then writes only the
    /// end-of-trace stats (the caller has cut the output back to [`Written::bytes`]).
    pub fn end_after_failure(&mut self, overrun: &[u64], read: &[u64]) -> std::io::Result<()> {
        self.buf.clear();
        self.in_buf = Written::default();
        for p in self.cpus.values_mut() {
            p.switches.clear();
            p.wakings.clear();
            p.tasks.clear();
        }
        self.tree = pb::ProcessTree::default();
        self.pending = 0;
        self.stats(2, overrun, Some(read));
        self.write_buf()
    }

    fn cut_at(&mut self, close: u64) {
        let mut cuts = Vec::new();
        for (&cpu, p) in &self.cpus {
            let last = p.switches.last().map(|x| x.s.ts).or(p.before);
            match p.running {
                Some((tid, tgid)) if tid != 0 && last.is_some_and(|t| t <= close) => {
                    cuts.push((cpu, tid, tgid))
                }
                _ => {}
            }
        }
        for (cpu, tid, _tgid) in cuts {
            self.switch(Switch {
                ts: close,
                cpu,
                prev_tid: tid,
                prev_state: 0,
                preempt: false,
                repaired: false,
                edge: true,
                chained: false,
                runtime: None,
                next_tid: 0,
                next_tgid: 0,
                next_prio: 120,
                next_comm: format!("swapper/{cpu}"),
            });
            self.written.window_cuts += 1;
        }
    }

    /// The output, e.g. to cut a file back to [`Written::bytes`] after a failed write.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// `packets` (a run of encoded `Trace.packet`s) as one `Trace.packet` whose
/// `compressed_packets` holds them in a zlib stream. Level 1: on a pipe storm's trace it
/// shrank 5.7 times where level 6 (`traced`'s) shrank 6.2, in less than half the time
/// (docs/performance.md, 2026-12-05).
pub fn deflate_packets(packets: &[u8]) -> std::io::Result<Vec<u8>> {
    use prost::Message as _;
    let mut z = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(packets.len() / 4),
        flate2::Compression::fast(),
    );
    z.write_all(packets)?;
    let p = pb::TracePacket {
        compressed_packets: Some(z.finish()?),
        ..Default::default()
    };
    let mut out = Vec::with_capacity(p.encoded_len() + 8);
    prost::encoding::encode_key(
        pb::TRACE_PACKET_TAG,
        prost::encoding::WireType::LengthDelimited,
        &mut out,
    );
    prost::encoding::encode_varint(p.encoded_len() as u64, &mut out);
    p.encode_raw(&mut out);
    Ok(out)
}

/// This machine's `SystemInfo` facts (uname, CPUs, page size).
pub fn system_facts(num_cpus: u32) -> SystemFacts {
    let u = rustix::system::uname();
    let f = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    SystemFacts {
        sysname: f(u.sysname()),
        release: f(u.release()),
        version: f(u.version()),
        machine: f(u.machine()),
        num_cpus,
        page_size: rustix::param::page_size() as u32,
    }
}

#[cfg(test)]
mod tests;
