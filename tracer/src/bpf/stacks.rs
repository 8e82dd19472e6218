//! `tracer offcpu`'s kernel side from user space: load and attach the off-CPU program
//! (only it and the traced set's fork/exec followers), then read its sums, stacks and
//! drops. Nothing here interprets them; `model::stacks` does.
use crate::model::targets::Filter;
use std::collections::{BTreeSet, HashMap};

use anyhow::{anyhow, Context as _, Result};
use aya::{
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, StackTraceMap},
    Ebpf,
};
use tracer_common::{
    offcpu::{offdrop, OffKey, OffStart, OffVal, OffcpuConfig, WakeKey, WakeVal, SPILL_ID},
    Config,
};

use crate::model::options::{ProbeMode, Unwind};
use crate::sys::unwind::RegsLayout;
use crate::{
    bpf::{
        attach, loader, object,
        table::{self, Prog, Role},
    },
    sys::{btf::KernelBtf, root::Root},
};

/// What `tracer offcpu` decides before load.
#[derive(Clone, Debug)]
pub struct OffcpuLoad {
    /// One of `tracer_common::filter`.
    pub filter: Filter,
    /// With `Filter::Cgroup`.
    pub cgroup: Option<loader::CgroupTarget>,
    /// Capacity of the traced set.
    pub max_threads: u32,
    pub cfg: OffcpuConfig,
    /// Stack map slots (distinct stacks, user and kernel together).
    pub stack_entries: u32,
    /// Distinct (thread, stacks, state) sums.
    pub sum_entries: u32,
    pub probe: ProbeMode,
    /// How user stacks are walked (`cfg.dwarf` is set here, by mode and machine).
    pub unwind: Unwind,
    /// `--unwind dwarf`: bytes of the ring the stack copies travel through.
    pub copy_ring_bytes: u32,
}

/// One sum the kernel kept: a period's key and value and, with `--wakers`, its waker
/// (tgid 0 and no stacks when none was seen).
#[derive(Clone, Copy, Debug)]
pub struct Sum {
    pub key: OffKey,
    pub total_ns: u64,
    pub count: u64,
    pub comm: [u8; 16],
    pub waker: Option<WakerSum>,
}

/// The waker half of an `OFFWAKE` key and value.
#[derive(Clone, Copy, Debug)]
pub struct WakerSum {
    pub tgid: u32,
    pub tid: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
    pub comm: [u8; 16],
}

/// The off-CPU program loaded and attached, with its maps.
pub struct OffcpuTracer {
    pub ebpf: Ebpf,
    /// The mode in use, and the better ones refused with their reasons.
    pub mode: ProbeMode,
    pub refused: Vec<(ProbeMode, String)>,
    /// `--wakers`: the sums are `OFFWAKE`'s, joined with their wakers.
    wakers: bool,
    /// `--unwind dwarf` in use: where the copied registers lie.
    pub dwarf: Option<RegsLayout>,
    /// Why `--unwind auto` walks frame pointers here, when it does.
    pub fp_because: Option<String>,
    attached: Vec<Prog>,
}

impl OffcpuTracer {
    /// Loads the switch program of the first mode that works (`auto`: tp-btf, raw-tp,
    /// tracepoint), attaches the programs that keep the traced set, lets `seed` fill it,
    /// attaches the rest (as [`loader::Tracer::start`] does).
    pub fn start(
        opts: &OffcpuLoad,
        root: &Root,
        seed: &mut dyn FnMut(&mut Ebpf) -> Result<()>,
    ) -> Result<OffcpuTracer> {
        let modes = match opts.probe {
            ProbeMode::Auto => vec![ProbeMode::TpBtf, ProbeMode::RawTp, ProbeMode::Tracepoint],
            ProbeMode::PerfSched => {
                return Err(anyhow!(
                    "--probe perf-sched: perf's switch hooks carry no stack to take; \
                     tracer offcpu attaches in tp-btf, raw-tp or tracepoint mode"
                ))
            }
            m => vec![m],
        };
        let (mut t, refused) = loader::first_working(&modes, " for tracer offcpu", |m| {
            Self::try_mode(m, opts, root, seed)
        })?;
        t.refused = refused;
        Ok(t)
    }

    fn try_mode(
        mode: ProbeMode,
        opts: &OffcpuLoad,
        root: &Root,
        seed: &mut dyn FnMut(&mut Ebpf) -> Result<()>,
    ) -> Result<OffcpuTracer> {
        let mut cfg = Config {
            mode: tracer_common::Accounting {
                filter: crate::bpf::config::filter_abi(opts.filter),
                ..Default::default()
            },
            ..Config::ZERO
        };
        // tp-btf and raw-tp read tasks at BTF offsets; the classic tracepoint's records
        // are read at the offsets of their tracefs formats.
        let kbtf = match mode {
            ProbeMode::Tracepoint => {
                crate::bpf::config::tracefs_config(&mut cfg, root)?;
                None
            }
            _ => {
                let kbtf = KernelBtf::from_file(&root.path(crate::sys::btf::VMLINUX_BTF))
                    .context("kernel BTF")?;
                crate::bpf::config::btf_config(&mut cfg, &kbtf)?;
                Some(kbtf)
            }
        };
        if let Some(cg) = &opts.cgroup {
            cg.configure(&mut cfg);
        }
        let with_fork = opts.filter != Filter::All;
        let wakers = opts.cfg.wakers != 0;
        let (dwarf, fp_because) = dwarf_here(opts, mode, kbtf.as_ref())?;
        let mut ocfg = opts.cfg;
        if let Some(l) = dwarf {
            ocfg.dwarf = 1;
            ocfg.regs_len = l.len;
            ocfg.sp_off = l.sp;
        }
        if wakers && mode == ProbeMode::Tracepoint {
            // sched_waking shares sched_wakeup's record layout (one event class).
            let dir = crate::sys::tracefs::tracefs_dir(root)?;
            let f = crate::sys::tracefs::event_format(&dir, "sched", "sched_waking")?;
            if f.field("pid")?.offset != cfg.tp.wakeup_pid {
                return Err(anyhow!(
                    "sched_waking and sched_wakeup records differ in layout"
                ));
            }
        }
        let mut ebpf = object::new_loader()
            .0
            .override_global("CONFIG", &cfg, true)
            .override_global("OFFCPU_CONFIG", &ocfg, true)
            .map_max_entries("TRACKED", if with_fork { opts.max_threads } else { 1 })
            .map_max_entries("OFFCPU_STACKS", opts.stack_entries)
            .map_max_entries("OFFCPU_SPILL", spill_entries(opts.stack_entries))
            .map_max_entries("OFFCPU_START", opts.max_threads)
            .map_max_entries("OFFCPU", opts.sum_entries)
            .map_max_entries("WAKERS", if wakers { opts.max_threads } else { 1 })
            .map_max_entries("OFFWAKE", if wakers { opts.sum_entries } else { 1 })
            .map_max_entries(
                "USTACK_EVENTS",
                if dwarf.is_some() {
                    opts.copy_ring_bytes
                } else {
                    4096
                },
            )
            .load(object::Family::Offcpu.object())
            .context("loading the eBPF object")?;
        let table_mode = match mode {
            ProbeMode::RawTp => table::Mode::RawTp,
            ProbeMode::Tracepoint => table::Mode::Tracepoint,
            _ => table::Mode::TpBtf,
        };
        let progs = table::offcpu_programs(table_mode, with_fork, wakers);
        let btf = match (mode, &kbtf) {
            (ProbeMode::TpBtf, Some(k)) => Some(attach::attach_btf(k, &progs)?),
            _ => None,
        };
        drop(kbtf);
        attach::load_all(&mut ebpf, &progs, btf.as_ref())?;
        if let Some(cg) = &opts.cgroup {
            cg.store(&mut ebpf)?;
        }
        let (tracking, rest): (Vec<&Prog>, Vec<&Prog>) =
            progs.iter().partition(|p| p.role == Role::KeepsSet);
        attach::attach_all(&mut ebpf, tracking)?;
        seed(&mut ebpf)?;
        attach::attach_all(&mut ebpf, rest)?;
        Ok(OffcpuTracer {
            ebpf,
            mode,
            refused: Vec::new(),
            wakers,
            dwarf,
            fp_because,
            attached: progs,
        })
    }

    /// `--unwind dwarf`: the ring the stack copies arrive through (taken once).
    pub fn take_copies(&mut self) -> Option<aya::maps::RingBuf<aya::maps::MapData>> {
        self.dwarf?;
        aya::maps::RingBuf::try_from(self.ebpf.take_map("USTACK_EVENTS")?).ok()
    }

    /// Detaches: the sums stop growing; the maps stay readable.
    pub fn detach(&mut self) {
        let progs = std::mem::take(&mut self.attached);
        attach::unload_all(&mut self.ebpf, &progs);
    }

    /// Every sum the kernel aggregated (`OFFWAKE`'s with `--wakers`, else `OFFCPU`'s).
    pub fn sums(&self) -> Result<Vec<Sum>> {
        let mut v = Vec::new();
        if self.wakers {
            let m: BpfHashMap<_, WakeKey, WakeVal> =
                BpfHashMap::try_from(self.ebpf.map("OFFWAKE").context("OFFWAKE missing")?)?;
            // Entries are never removed: every key the walk finds can be read.
            for r in m.iter() {
                let (k, x) = r.context("reading OFFWAKE")?;
                v.push(Sum {
                    key: k.off,
                    total_ns: x.total_ns,
                    count: x.count,
                    comm: x.comm,
                    waker: (k.waker_tid != tracer_common::offcpu::NO_WAKER).then_some(WakerSum {
                        tgid: k.waker_tgid,
                        tid: k.waker_tid,
                        user_stack: k.waker_user_stack,
                        kernel_stack: k.waker_kernel_stack,
                        comm: x.waker_comm,
                    }),
                });
            }
            return Ok(v);
        }
        let m: BpfHashMap<_, OffKey, OffVal> =
            BpfHashMap::try_from(self.ebpf.map("OFFCPU").context("OFFCPU missing")?)?;
        for r in m.iter() {
            let (k, x) = r.context("reading OFFCPU")?;
            v.push(Sum {
                key: k,
                total_ns: x.total_ns,
                count: x.count,
                comm: x.comm,
                waker: None,
            });
        }
        Ok(v)
    }

    /// The processes seen so far: in the sums and among the threads off-CPU now. Their
    /// mappings are read while they live, so stacks of those that exit still symbolize.
    pub fn tgids_seen(&self) -> BTreeSet<u32> {
        let mut s = BTreeSet::new();
        if let Some(Ok(m)) = self
            .ebpf
            .map("OFFCPU")
            .map(BpfHashMap::<_, OffKey, OffVal>::try_from)
        {
            s.extend(m.keys().filter_map(|k| k.ok()).map(|k| k.tgid));
        }
        // The wakers' processes too: their user stacks symbolize through their mappings.
        if let Some(Ok(m)) = self
            .ebpf
            .map("OFFWAKE")
            .map(BpfHashMap::<_, WakeKey, WakeVal>::try_from)
        {
            s.extend(
                m.keys()
                    .filter_map(|k| k.ok())
                    .flat_map(|k| [k.off.tgid, k.waker_tgid]),
            );
        }
        if let Some(Ok(m)) = self
            .ebpf
            .map("WAKERS")
            .map(BpfHashMap::<_, u32, tracer_common::offcpu::Waker>::try_from)
        {
            s.extend(m.iter().filter_map(|kv| kv.ok()).map(|(_, w)| w.tgid));
        }
        if let Some(Ok(m)) = self
            .ebpf
            .map("OFFCPU_START")
            .map(BpfHashMap::<_, u32, OffStart>::try_from)
        {
            s.extend(m.iter().filter_map(|kv| kv.ok()).map(|(_, v)| v.tgid));
        }
        s.remove(&0);
        s.remove(&tracer_common::offcpu::NO_WAKER);
        s
    }

    /// The instruction pointers of every stack id in use (leaf first).
    pub fn stacks(&self, ids: &BTreeSet<u32>) -> Result<HashMap<u32, Vec<u64>>> {
        let map = |name: &str| -> Result<StackTraceMap<&MapData>> {
            let m = self
                .ebpf
                .map(name)
                .with_context(|| format!("{name} missing"))?;
            Ok(StackTraceMap::try_from(m)?)
        };
        let (main, spill) = (map("OFFCPU_STACKS")?, map("OFFCPU_SPILL")?);
        let mut out = HashMap::new();
        for &id in ids {
            let got = if id & SPILL_ID != 0 {
                spill.get(&(id & !SPILL_ID), 0)
            } else {
                main.get(&id, 0)
            };
            match got {
                Ok(st) => {
                    out.insert(id, st.frames().iter().map(|f| f.ip).collect());
                }
                Err(e) => log::debug!("stack {id}: {e}"),
            }
        }
        Ok(out)
    }

    /// The drop counters summed over CPUs, indexed by `offdrop`.
    pub fn drops(&self) -> Result<[u64; offdrop::COUNT as usize]> {
        let m: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.ebpf
                .map("OFFCPU_DROPS")
                .context("OFFCPU_DROPS missing")?,
        )?;
        let mut out = [0u64; offdrop::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = m.get(&(i as u32), 0)?.iter().sum();
        }
        Ok(out)
    }

    /// The off-CPU program's kernel run-time statistics (`run_time_ns`, `run_cnt` in its
    /// fdinfo; counted only while `kernel.bpf_stats_enabled` is 1).
    pub fn run_stats(&self) -> Option<(u64, u64)> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        let Some(aya::programs::Program::BtfTracePoint(p)) = self.ebpf.program("offcpu_switch")
        else {
            return None;
        };
        let fd = p.fd().ok()?.as_fd().as_raw_fd();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some((field("run_time_ns:")?, field("run_cnt:")?))
    }
}

/// Whether user stacks are copied for unwinding in mode `mode` (with where the
/// registers lie), and why not when `--unwind auto` falls back to frame pointers.
/// `--unwind dwarf` where it cannot work is an error.
fn dwarf_here(
    opts: &OffcpuLoad,
    mode: ProbeMode,
    kbtf: Option<&KernelBtf>,
) -> Result<(Option<RegsLayout>, Option<String>)> {
    if opts.unwind == Unwind::Fp || opts.cfg.user_stacks == 0 {
        return Ok((None, None));
    }
    let layout = match (mode, kbtf) {
        // Task storage of `next` at the switch-in needs tp_btf's trusted pointers.
        (ProbeMode::TpBtf, Some(k)) => RegsLayout::from_btf(k),
        _ => Err(format!(
            "--unwind dwarf needs the tp-btf probe mode (this run attaches in {})",
            mode.name()
        )),
    };
    match (layout, opts.unwind) {
        (Ok(l), _) => Ok((Some(l), None)),
        (Err(e), Unwind::Dwarf) => Err(anyhow!(e)),
        (Err(e), _) => Ok((None, Some(e))),
    }
}

/// Slots of the spill map: a quarter of the stack map's (n stacks in m buckets collide
/// about n^2/2m times: a quarter holds them up to ~70% full), at least 1024 (1 MiB), so
/// a small `--stack-entries` still keeps a few hundred stacks.
fn spill_entries(stack_entries: u32) -> u32 {
    (stack_entries / 4).max(1024)
}
