//! `tracer dtl`: the pseries hypervisor's view of the virtual CPUs.
//!
//! Two sources, which the kernel lets only one of at a time use the Dispatch Trace Log:
//! - `/proc/powerpc/vcpudispatch_stats` (default): per-vCPU dispatch locality counters,
//!   enabled for the window when off (see [`crate::pseries::vcpudispatch`] for the crash-safe
//!   handling of the settings);
//! - `--raw`: the log itself, from debugfs `powerpc/dtl/cpu-N`: 48-byte big-endian
//!   `struct dtl_entry` records, turned into dispatch-latency histograms (timebase ticks
//!   converted to ns with the `timebase` of /proc/cpuinfo), reason counts and gaps.
//!
//! # Lost entries (gaps)
//! The hypervisor writes each vCPU's log into a ring of [`RING_ENTRIES`] entries; a reader
//! that falls behind silently loses the oldest ones. Nothing says how many, so `lost`
//! counts *gaps*, places where at least one entry evidently went missing (a lower bound):
//! - an entry whose timebase is lower than its predecessor's on the same vCPU (the ring
//!   was overwritten while being copied out), and
//! - on the live system, one read returning a whole ring or more: the reader was at
//!   least a ring behind, so the kernel skipped what had been overwritten.
//!
//! Fixture and copied trees (`--root`) are plain files, so only the first rule applies.
use std::{
    borrow::Cow,
    collections::BTreeMap,
    fs::{self, File},
    io::{self, Read as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde::Serialize;

use crate::{
    error::TracerError,
    model::hist::{self, HistSummary, Histogram},
    pseries::vcpudispatch::{self, SettingsGuard, StatsState, VcpuCounters, VcpuReport},
    sys::root::Root,
};

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

/// Size of one `struct dtl_entry`; reads must be a multiple of it.
pub const ENTRY_SIZE: usize = 48;
/// Entries in the kernel's per-CPU ring (4096 bytes / 48).
pub const RING_ENTRIES: usize = 4096 / ENTRY_SIZE;
/// Where the timebase frequency is found.
pub const CPUINFO_PATH: &str = "/proc/cpuinfo";
/// Entries asked for per read(): more than a ring, so a full ring is recognisable.
const READ_ENTRIES: usize = 4 * RING_ENTRIES;
/// Poll period of the raw log: the ring holds 85 entries, so 10 ms keeps up with
/// 8500 dispatches per second per vCPU.
const POLL: Duration = Duration::from_millis(10);

/// One Dispatch Trace Log entry, fields as in the kernel's `struct dtl_entry`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DtlEntry {
    pub dispatch_reason: u8,
    pub preempt_reason: u8,
    /// Physical processor the vCPU was dispatched on.
    pub processor_id: u16,
    /// Ticks from becoming ready (enqueued) to being dispatched.
    pub enqueue_to_dispatch_time: u32,
    pub ready_to_enqueue_time: u32,
    pub waiting_to_ready_time: u32,
    /// Timebase at dispatch.
    pub timebase: u64,
    pub fault_addr: u64,
    pub srr0: u64,
    pub srr1: u64,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl DtlEntry {
    /// Decodes one big-endian entry.
    pub fn decode(b: &[u8; ENTRY_SIZE]) -> Self {
        DtlEntry {
            dispatch_reason: b[0],
            preempt_reason: b[1],
            processor_id: be16(b, 2),
            enqueue_to_dispatch_time: be32(b, 4),
            ready_to_enqueue_time: be32(b, 8),
            waiting_to_ready_time: be32(b, 12),
            timebase: be64(b, 16),
            fault_addr: be64(b, 24),
            srr0: be64(b, 32),
            srr1: be64(b, 40),
        }
    }

    /// Encodes as the hypervisor writes it (for fixtures and round trips).
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0] = self.dispatch_reason;
        b[1] = self.preempt_reason;
        b[2..4].copy_from_slice(&self.processor_id.to_be_bytes());
        b[4..8].copy_from_slice(&self.enqueue_to_dispatch_time.to_be_bytes());
        b[8..12].copy_from_slice(&self.ready_to_enqueue_time.to_be_bytes());
        b[12..16].copy_from_slice(&self.waiting_to_ready_time.to_be_bytes());
        b[16..24].copy_from_slice(&self.timebase.to_be_bytes());
        b[24..32].copy_from_slice(&self.fault_addr.to_be_bytes());
        b[32..40].copy_from_slice(&self.srr0.to_be_bytes());
        b[40..48].copy_from_slice(&self.srr1.to_be_bytes());
        b
    }
}

/// Decodes whole entries; a trailing partial entry is an error naming `path`.
pub fn decode_entries(bytes: &[u8], path: &Path) -> Result<Vec<DtlEntry>, TracerError> {
    let rest = bytes.len() % ENTRY_SIZE;
    if rest != 0 {
        return Err(TracerError::Malformed {
            path: path.to_path_buf(),
            why: format!(
                "{} bytes is not a whole number of {ENTRY_SIZE}-byte entries (short entry of {rest} bytes at offset {})",
                bytes.len(),
                bytes.len() - rest
            ),
        });
    }
    Ok(decode_whole(bytes))
}

/// Decodes the whole entries of `bytes`, ignoring a trailing partial one.
fn decode_whole(bytes: &[u8]) -> Vec<DtlEntry> {
    bytes
        .chunks_exact(ENTRY_SIZE)
        .filter_map(|c| <&[u8; ENTRY_SIZE]>::try_from(c).ok())
        .map(DtlEntry::decode)
        .collect()
}

const DISPATCH_REASONS: [&str; 11] = [
    "external_interrupt",
    "firmware_internal_event",
    "H_PROD",
    "decrementer_interrupt",
    "system_reset",
    "firmware_internal_event",
    "conferred_cycles",
    "time_slice",
    "virtual_memory_page_fault",
    "expropriated_adjunct",
    "priv_doorbell",
];

const PREEMPT_REASONS: [&str; 10] = [
    "unused",
    "firmware_internal_event",
    "H_CEDE",
    "H_CONFER",
    "time_slice",
    "migration_hibernation_page_fault",
    "virtual_memory_page_fault",
    "H_CONFER_ADJUNCT",
    "hcall_adjunct",
    "HDEC_adjunct",
];

/// Name of a dispatch reason as perf decodes it; `unknown_N` past the table. Codes 1 and
/// 5 share a name, so their counts merge.
pub fn dispatch_reason_name(code: u8) -> Cow<'static, str> {
    DISPATCH_REASONS.get(usize::from(code)).map_or_else(
        || Cow::Owned(format!("unknown_{code}")),
        |s| Cow::Borrowed(*s),
    )
}

/// Name of a preempt reason as perf decodes it; `unknown_N` past the table.
pub fn preempt_reason_name(code: u8) -> Cow<'static, str> {
    PREEMPT_REASONS.get(usize::from(code)).map_or_else(
        || Cow::Owned(format!("unknown_{code}")),
        |s| Cow::Borrowed(*s),
    )
}

/// The `timebase : N` line of /proc/cpuinfo (Hz).
pub fn parse_timebase(cpuinfo: &str, path: &Path) -> Result<u64, TracerError> {
    let bad = |why: String| TracerError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    for line in cpuinfo.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        if key.trim() != "timebase" {
            continue;
        }
        return match val.trim().parse::<u64>() {
            Ok(hz) if hz > 0 => Ok(hz),
            _ => Err(bad(format!(
                "timebase {:?} is not a positive number",
                vcpudispatch::excerpt(val.trim())
            ))),
        };
    }
    Err(bad(
        "no `timebase` line (the DTL needs the POWER timebase frequency)".into(),
    ))
}

/// Reads the timebase frequency from /proc/cpuinfo.
pub fn read_timebase(root: &Root) -> Result<u64, TracerError> {
    let path = root.path(CPUINFO_PATH);
    let text = vcpudispatch::read_text(&path)?;
    parse_timebase(&text, &path)
}

/// Timebase ticks to ns (exact integer arithmetic, saturating).
pub fn ticks_to_ns(ticks: u64, tb_hz: u64) -> u64 {
    if tb_hz == 0 {
        return 0;
    }
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(tb_hz);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The three latencies of one stream, in ns.
#[derive(Clone, Debug, Default)]
pub struct DtlHists {
    /// enqueue_to_dispatch_time: ready on the hypervisor's queue until running.
    pub dispatch: Histogram,
    pub ready_to_enqueue: Histogram,
    pub waiting_to_ready: Histogram,
}

impl DtlHists {
    fn merge(&mut self, o: &DtlHists) {
        self.dispatch.merge(&o.dispatch);
        self.ready_to_enqueue.merge(&o.ready_to_enqueue);
        self.waiting_to_ready.merge(&o.waiting_to_ready);
    }
}

#[derive(Clone, Debug, Default)]
struct Stream {
    last_tb: Option<u64>,
    entries: u64,
    lost: u64,
    steal_ns: u64,
    hists: DtlHists,
}

/// Accumulates decoded entries per vCPU.
#[derive(Clone, Debug)]
pub struct DtlAnalyzer {
    tb_hz: u64,
    streams: BTreeMap<u32, Stream>,
    dispatch_reasons: BTreeMap<String, u64>,
    preempt_reasons: BTreeMap<String, u64>,
}

impl DtlAnalyzer {
    pub fn new(tb_hz: u64) -> Self {
        DtlAnalyzer {
            tb_hz,
            streams: BTreeMap::new(),
            dispatch_reasons: BTreeMap::new(),
            preempt_reasons: BTreeMap::new(),
        }
    }

    /// Adds the entries of one read of `cpu-N`, in log order. `ring_full`: the read
    /// returned a whole ring or more on the live system (see the module docs on gaps).
    pub fn feed(&mut self, cpu: u32, entries: &[DtlEntry], ring_full: bool) {
        let tb = self.tb_hz;
        let s = self.streams.entry(cpu).or_default();
        if ring_full {
            s.lost = s.lost.saturating_add(1);
        }
        for e in entries {
            if s.last_tb.is_some_and(|last| e.timebase < last) {
                s.lost = s.lost.saturating_add(1);
            }
            s.last_tb = Some(e.timebase);
            s.entries = s.entries.saturating_add(1);
            let e2d = ticks_to_ns(u64::from(e.enqueue_to_dispatch_time), tb);
            let r2e = ticks_to_ns(u64::from(e.ready_to_enqueue_time), tb);
            s.hists.dispatch.record(e2d);
            s.hists.ready_to_enqueue.record(r2e);
            s.hists
                .waiting_to_ready
                .record(ticks_to_ns(u64::from(e.waiting_to_ready_time), tb));
            // The kernel's steal time on pseries.
            s.steal_ns = s.steal_ns.saturating_add(e2d.saturating_add(r2e));
            *self
                .dispatch_reasons
                .entry(dispatch_reason_name(e.dispatch_reason).into_owned())
                .or_default() += 1;
            *self
                .preempt_reasons
                .entry(preempt_reason_name(e.preempt_reason).into_owned())
                .or_default() += 1;
        }
    }

    /// All vCPUs' histograms merged.
    pub fn overall(&self) -> DtlHists {
        let mut all = DtlHists::default();
        for s in self.streams.values() {
            all.merge(&s.hists);
        }
        all
    }

    /// One vCPU's histograms.
    pub fn vcpu(&self, cpu: u32) -> Option<&DtlHists> {
        self.streams.get(&cpu).map(|s| &s.hists)
    }

    /// The JSON digest.
    pub fn summary(&self) -> DtlSummary {
        let all = self.overall();
        DtlSummary {
            timebase_hz: self.tb_hz,
            entries: self.streams.values().map(|s| s.entries).sum(),
            lost: self.streams.values().map(|s| s.lost).sum(),
            steal_ns: self
                .streams
                .values()
                .fold(0u64, |a, s| a.saturating_add(s.steal_ns)),
            dispatch_latency: all.dispatch.summary(),
            ready_to_enqueue: all.ready_to_enqueue.summary(),
            waiting_to_ready: all.waiting_to_ready.summary(),
            dispatch_reasons: self.dispatch_reasons.clone(),
            preempt_reasons: self.preempt_reasons.clone(),
            per_vcpu: self
                .streams
                .iter()
                .map(|(&cpu, s)| VcpuDtl {
                    cpu,
                    entries: s.entries,
                    lost: s.lost,
                    steal_ns: s.steal_ns,
                    dispatch_latency: s.hists.dispatch.summary(),
                    ready_to_enqueue: s.hists.ready_to_enqueue.summary(),
                    waiting_to_ready: s.hists.waiting_to_ready.summary(),
                })
                .collect(),
        }
    }
}

/// What the raw log showed, overall and per vCPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DtlSummary {
    pub timebase_hz: u64,
    pub entries: u64,
    /// Gaps where at least one entry was lost (a lower bound on lost entries).
    pub lost: u64,
    /// enqueue_to_dispatch + ready_to_enqueue summed: the kernel's pseries steal time.
    pub steal_ns: u64,
    /// enqueue_to_dispatch_time, ns.
    pub dispatch_latency: HistSummary,
    pub ready_to_enqueue: HistSummary,
    pub waiting_to_ready: HistSummary,
    pub dispatch_reasons: BTreeMap<String, u64>,
    pub preempt_reasons: BTreeMap<String, u64>,
    pub per_vcpu: Vec<VcpuDtl>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VcpuDtl {
    pub cpu: u32,
    pub entries: u64,
    pub lost: u64,
    pub steal_ns: u64,
    pub dispatch_latency: HistSummary,
    pub ready_to_enqueue: HistSummary,
    pub waiting_to_ready: HistSummary,
}

/// One open `cpu-N` file and its undecoded tail.
#[derive(Debug)]
pub struct DtlFile {
    pub cpu: u32,
    pub path: PathBuf,
    file: File,
    pending: Vec<u8>,
}

/// The `cpu-N` files of the debugfs DTL directory, sorted by CPU.
pub fn list_cpu_files(root: &Root) -> Result<Vec<(u32, PathBuf)>, TracerError> {
    let dir = root.path(vcpudispatch::DTL_DIR);
    let rd = fs::read_dir(&dir).map_err(|source| TracerError::Read {
        path: dir.clone(),
        source: if source.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no debugfs DTL here: is debugfs mounted (mount -t debugfs none /sys/kernel/debug) \
                 and the kernel built with CONFIG_DTL?",
            )
        } else {
            source
        },
    })?;
    let mut out: Vec<(u32, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let cpu = name.to_str()?.strip_prefix("cpu-")?.parse().ok()?;
            Some((cpu, e.path()))
        })
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(TracerError::Malformed {
            path: dir,
            why: "no cpu-N files".into(),
        });
    }
    Ok(out)
}

/// Mounts debugfs on the live system when the DTL directory is missing (as perf does).
fn ensure_debugfs(root: &Root) {
    if !root.is_live() || root.path(vcpudispatch::DTL_DIR).exists() {
        return;
    }
    let (src, target, fstype) = (c"none", c"/sys/kernel/debug", c"debugfs");
    // SAFETY: valid NUL-terminated strings and a null data pointer, as mount(2) allows.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        log::debug!("mounting debugfs: {}", io::Error::last_os_error());
    }
}

/// Opens every `cpu-N` file; EBUSY says which other DTL consumer is active.
pub fn open_all(root: &Root) -> Result<Vec<DtlFile>, TracerError> {
    list_cpu_files(root)?
        .into_iter()
        .map(|(cpu, path)| match File::open(&path) {
            Ok(file) => Ok(DtlFile {
                cpu,
                path,
                file,
                pending: Vec::new(),
            }),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(TracerError::DtlBusy {
                path,
                hint: vcpudispatch::busy_hint(root),
            }),
            Err(source) => Err(TracerError::Read { path, source }),
        })
        .collect()
}

/// Reads what each file has now and feeds it to `an`. Returns the entries read.
pub fn read_available(
    files: &mut [DtlFile],
    an: &mut DtlAnalyzer,
    live: bool,
) -> Result<u64, TracerError> {
    let mut buf = vec![0u8; READ_ENTRIES * ENTRY_SIZE];
    let mut total = 0u64;
    for f in files.iter_mut() {
        // Bounded so a file that never drains (a fast log) cannot starve the others.
        for _ in 0..64 {
            let n = match f.file.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(TracerError::Read {
                        path: f.path.clone(),
                        source,
                    })
                }
            };
            if n == 0 {
                break;
            }
            f.pending.extend_from_slice(&buf[..n]);
            let whole = f.pending.len() / ENTRY_SIZE * ENTRY_SIZE;
            let entries = decode_whole(&f.pending[..whole]);
            f.pending.drain(..whole);
            an.feed(f.cpu, &entries, live && n / ENTRY_SIZE >= RING_ENTRIES);
            total += entries.len() as u64;
            if n < buf.len() {
                break;
            }
        }
    }
    Ok(total)
}

/// After the last read: a partial entry left over is a short entry.
pub fn check_complete(files: &[DtlFile]) -> Result<(), TracerError> {
    for f in files {
        if !f.pending.is_empty() {
            return Err(TracerError::Malformed {
                path: f.path.clone(),
                why: format!(
                    "ends with a short entry of {} bytes ({ENTRY_SIZE} expected)",
                    f.pending.len()
                ),
            });
        }
    }
    Ok(())
}

/// Everything `tracer dtl` prints.
#[derive(Clone, Debug, Serialize)]
pub struct DtlReport {
    /// `vcpudispatch_stats` or `raw`.
    pub mode: &'static str,
    /// Whether vcpudispatch_stats had counters to show.
    pub stats_enabled: bool,
    /// Length of the sampled window; None for a snapshot.
    pub window_ns: Option<u64>,
    /// Ended early by SIGINT/SIGTERM.
    pub interrupted: bool,
    pub vcpus: Vec<VcpuReport>,
    pub dtl: Option<DtlSummary>,
    pub notes: Vec<String>,
    /// Overall and per-vCPU histograms for the text report.
    #[serde(skip)]
    pub hists: Option<(DtlHists, BTreeMap<u32, DtlHists>)>,
}

fn stats_vcpus(state: &StatsState) -> &[VcpuCounters] {
    match state {
        StatsState::On(v) => v,
        StatsState::Off => &[],
    }
}

/// A read-only snapshot: the counters as they are and, with `raw`, what the log files
/// hold now. Changes no setting; what `--duration 0` does without --dtl-freq/--dtl-mask.
pub fn snapshot(root: &Root, raw: bool) -> Result<DtlReport, TracerError> {
    let state = vcpudispatch::read_stats(root)?;
    let mut report = base_report(raw, &state, None, &state);
    if raw {
        let tb = read_timebase(root)?;
        let mut files = open_all(root)?;
        let mut an = DtlAnalyzer::new(tb);
        read_available(&mut files, &mut an, root.is_live())?;
        check_complete(&files)?;
        attach_dtl(&mut report, &an);
    }
    Ok(report)
}

fn base_report(
    raw: bool,
    before: &StatsState,
    window_ns: Option<u64>,
    after: &StatsState,
) -> DtlReport {
    let enabled = matches!(after, StatsState::On(_));
    let mut notes = Vec::new();
    if !enabled && !raw {
        notes.push(
            "vcpudispatch_stats is off; sample a window (e.g. --duration 5s) to enable it for that time"
                .to_string(),
        );
    }
    let before = window_ns.map(|_| stats_vcpus(before));
    DtlReport {
        mode: if raw { "raw" } else { "vcpudispatch_stats" },
        stats_enabled: enabled,
        window_ns,
        interrupted: false,
        vcpus: vcpudispatch::vcpu_reports(before, stats_vcpus(after), window_ns.unwrap_or(0)),
        dtl: None,
        notes,
        hists: None,
    }
}

/// A raw-mode report of what `an` has seen (no vcpudispatch counters).
pub fn raw_report(an: &DtlAnalyzer, window_ns: Option<u64>) -> DtlReport {
    let mut r = base_report(true, &StatsState::Off, None, &StatsState::Off);
    r.window_ns = window_ns;
    attach_dtl(&mut r, an);
    r
}

fn attach_dtl(report: &mut DtlReport, an: &DtlAnalyzer) {
    report.dtl = Some(an.summary());
    let per = an
        .streams
        .iter()
        .map(|(&c, s)| (c, s.hists.clone()))
        .collect();
    report.hists = Some((an.overall(), per));
}

fn pctl(s: &HistSummary, which: fn(&HistSummary) -> Option<u64>) -> String {
    which(s).map_or_else(|| "-".into(), hist::human_ns)
}

/// The text report.
pub fn format_text(r: &DtlReport) -> String {
    let mut out = String::new();
    let window = r.window_ns.map_or_else(
        || "snapshot".to_string(),
        |w| format!("over {}", hist::human_ns(w)),
    );
    if !r.vcpus.is_empty() {
        out += &format!(
            "vCPU dispatch statistics ({}), {window}{}:\n",
            vcpudispatch::STATS_PATH,
            if r.window_ns.is_some() {
                ", counts in the window"
            } else {
                ", counts since enabling"
            }
        );
        out += &vcpudispatch::format_table(&r.vcpus, r.window_ns);
    }
    if let Some(d) = &r.dtl {
        if !out.is_empty() {
            out.push('\n');
        }
        out += &format!(
            "Dispatch Trace Log, {window}: {} entries from {} vCPUs, {} gaps (lost entries), timebase {} Hz, steal {}\n",
            d.entries,
            d.per_vcpu.len(),
            d.lost,
            d.timebase_hz,
            hist::human_ns(d.steal_ns)
        );
        if let Some((all, _)) = &r.hists {
            out.push('\n');
            out += &hist::format_bcc(
                "dispatch latency (enqueue_to_dispatch_time)",
                &all.dispatch,
                hist::Unit::Usecs,
            );
            out.push('\n');
            out += &hist::format_bcc(
                "ready_to_enqueue_time",
                &all.ready_to_enqueue,
                hist::Unit::Usecs,
            );
            out.push('\n');
            out += &hist::format_bcc(
                "waiting_to_ready_time",
                &all.waiting_to_ready,
                hist::Unit::Usecs,
            );
        }
        if !d.per_vcpu.is_empty() {
            out += &format!(
                "\n{:>6} {:>9} {:>5} {:>10} {:>10} {:>10} {:>10}\n",
                "CPU", "entries", "gaps", "disp p50", "disp p99", "disp max", "steal"
            );
            for v in &d.per_vcpu {
                out += &format!(
                    "{:>6} {:>9} {:>5} {:>10} {:>10} {:>10} {:>10}\n",
                    format!("cpu{}", v.cpu),
                    v.entries,
                    v.lost,
                    pctl(&v.dispatch_latency, |s| s.p50_ns),
                    pctl(&v.dispatch_latency, |s| s.p99_ns),
                    pctl(&v.dispatch_latency, |s| s.max_ns),
                    hist::human_ns(v.steal_ns)
                );
            }
        }
        for (title, m) in [
            ("dispatch reasons", &d.dispatch_reasons),
            ("preempt reasons", &d.preempt_reasons),
        ] {
            if m.is_empty() {
                continue;
            }
            out += &format!("\n{title}:\n");
            let mut v: Vec<_> = m.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (name, n) in v {
                out += &format!("  {name:<34} {n:>10}\n");
            }
        }
    }
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    if r.interrupted {
        out += "note: interrupted before the end of the window\n";
    }
    out
}

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
        _ = sig.int.recv() => true,
        _ = sig.term.recv() => true,
    }
}

struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

/// [`collect`] on a runtime of its own, for callers without one.
pub fn collect_blocking(args: &DtlConfig, root: &Root) -> anyhow::Result<DtlReport> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(collect(args, root))
}

/// Samples per `args`, changing settings only through a [`SettingsGuard`] that puts them
/// back on every way out (return, error, signal, unwinding; the next run after a crash).
pub async fn collect(args: &DtlConfig, root: &Root) -> anyhow::Result<DtlReport> {
    use tokio::signal::unix::{signal, SignalKind};
    // Handlers first: from here on SIGINT/SIGTERM only end the window.
    let mut sig = Signals {
        int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(d: u8, p: u8, e2d: u32, tb: u64) -> DtlEntry {
        DtlEntry {
            dispatch_reason: d,
            preempt_reason: p,
            processor_id: 0x1234,
            enqueue_to_dispatch_time: e2d,
            ready_to_enqueue_time: 512,
            waiting_to_ready_time: 1024,
            timebase: tb,
            fault_addr: 0xdead_beef,
            srr0: 0xc000_0000_0000_1000,
            srr1: 0x8000_0000_0000_1033,
        }
    }

    #[test]
    fn decodes_big_endian_fields() {
        let mut raw = [0u8; ENTRY_SIZE];
        raw[0] = 3;
        raw[1] = 2;
        raw[2..4].copy_from_slice(&[0x00, 0x2a]);
        raw[4..8].copy_from_slice(&[0, 0, 0x02, 0x00]);
        raw[16..24].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x01, 0x00]);
        raw[40..48].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0x01]);
        let e = DtlEntry::decode(&raw);
        assert_eq!(e.dispatch_reason, 3);
        assert_eq!(e.preempt_reason, 2);
        assert_eq!(e.processor_id, 42);
        assert_eq!(e.enqueue_to_dispatch_time, 512);
        assert_eq!(e.timebase, 256);
        assert_eq!(e.srr1, 0x8000_0000_0000_0001);
        assert_eq!(e.encode(), raw);
        let e = entry(1, 2, 3, 4);
        assert_eq!(DtlEntry::decode(&e.encode()), e);
    }

    #[test]
    fn short_entries_are_errors_naming_the_file() {
        let p = Path::new("/sys/kernel/debug/powerpc/dtl/cpu-3");
        let e = decode_entries(&[0u8; 50], p).unwrap_err().to_string();
        assert!(
            e.contains("cpu-3") && e.contains("short entry of 2 bytes"),
            "{e}"
        );
        assert_eq!(decode_entries(&[0u8; 96], p).unwrap().len(), 2);
        assert!(decode_entries(&[], p).unwrap().is_empty());
    }

    #[test]
    fn reason_names() {
        assert_eq!(dispatch_reason_name(3), "decrementer_interrupt");
        assert_eq!(dispatch_reason_name(10), "priv_doorbell");
        assert_eq!(dispatch_reason_name(11), "unknown_11");
        assert_eq!(preempt_reason_name(2), "H_CEDE");
        assert_eq!(preempt_reason_name(9), "HDEC_adjunct");
        assert_eq!(preempt_reason_name(255), "unknown_255");
    }

    #[test]
    fn timebase_from_cpuinfo() {
        let p = Path::new("/proc/cpuinfo");
        let text =
            "processor\t: 0\ncpu\t\t: POWER9\n\ntimebase\t: 512000000\nplatform\t: pSeries\n";
        assert_eq!(parse_timebase(text, p).unwrap(), 512_000_000);
        assert!(parse_timebase("processor : 0\n", p)
            .unwrap_err()
            .to_string()
            .contains("/proc/cpuinfo"));
        assert!(parse_timebase("timebase : 0\n", p).is_err());
        assert!(parse_timebase("timebase : fast\n", p).is_err());
        assert_eq!(ticks_to_ns(512, 512_000_000), 1000);
        assert_eq!(ticks_to_ns(u64::MAX, 1), u64::MAX);
        assert_eq!(ticks_to_ns(5, 0), 0);
    }

    #[test]
    fn analyzer_counts_reasons_latencies_and_gaps() {
        let mut an = DtlAnalyzer::new(512_000_000);
        // 512 ticks = 1 us; timebase goes back once (a gap)
        let es = [
            entry(3, 2, 512, 100),
            entry(7, 4, 1024, 200),
            entry(3, 2, 512, 150),
            entry(200, 200, 512, 300),
        ];
        an.feed(0, &es, false);
        an.feed(1, &[entry(1, 1, 0, 10)], true);
        an.feed(1, &[entry(5, 1, 0, 20)], false);
        let s = an.summary();
        assert_eq!(s.entries, 6);
        assert_eq!(s.lost, 2);
        assert_eq!(s.per_vcpu[0].lost, 1);
        assert_eq!(s.per_vcpu[1].lost, 1);
        assert_eq!(s.dispatch_reasons["decrementer_interrupt"], 2);
        assert_eq!(s.dispatch_reasons["firmware_internal_event"], 2);
        assert_eq!(s.dispatch_reasons["unknown_200"], 1);
        assert_eq!(s.preempt_reasons["H_CEDE"], 2);
        assert_eq!(s.preempt_reasons["unknown_200"], 1);
        assert_eq!(s.dispatch_latency.count, 6);
        assert_eq!(s.dispatch_latency.sum_ns, 1000 + 2000 + 1000 + 1000);
        // steal = e2d + r2e (512 ticks = 1000 ns each entry)
        assert_eq!(s.steal_ns, 5000 + 6 * 1000);
    }

    #[test]
    fn text_report_mentions_everything() {
        let mut an = DtlAnalyzer::new(512_000_000);
        an.feed(2, &[entry(3, 2, 5120, 1)], false);
        let mut r = base_report(true, &StatsState::Off, None, &StatsState::Off);
        attach_dtl(&mut r, &an);
        let t = format_text(&r);
        for want in [
            "1 entries",
            "decrementer_interrupt",
            "H_CEDE",
            "usecs",
            "cpu2",
        ] {
            assert!(t.contains(want), "{want} missing in\n{t}");
        }
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["dtl"]["entries"], 1);
        assert_eq!(j["dtl"]["dispatch_latency"]["count"], 1);
    }
}
