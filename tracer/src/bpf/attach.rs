//! Loading, attaching and unloading any program of the table ([`Prog`]), whatever its
//! attach kind: one generic path for every family.
use std::os::fd::{AsFd as _, AsRawFd as _, RawFd};

use anyhow::{anyhow, Context as _, Result};
use aya::{
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        BtfTracePoint, FEntry, Iter, KProbe, PerfEvent, Program, RawTracePoint, TracePoint,
    },
    Btf, Ebpf,
};

use super::table::{Attach, Prog};
use crate::sys::btf::{KernelBtf, Named};
use crate::sys::startup;

impl Prog {
    fn program_mut<'e>(&self, ebpf: &'e mut Ebpf) -> Result<&'e mut Program> {
        ebpf.program_mut(self.name)
            .ok_or_else(|| anyhow!("program {} missing from the eBPF object", self.name))
    }

    /// Loads (the kernel verifies) the program; `btf` is the kernel's, needed by the
    /// BTF-attached kinds ([`Attach::needs_btf`]).
    pub fn load(&self, ebpf: &mut Ebpf, btf: Option<&Btf>) -> Result<()> {
        let btf = || btf.ok_or_else(|| anyhow!("kernel BTF needed for {}", self.name));
        let prog = self.program_mut(ebpf)?;
        match self.attach {
            Attach::TpBtf => {
                let p: &mut BtfTracePoint = prog.try_into()?;
                p.load(self.target, btf()?)?;
            }
            Attach::RawTp => {
                let p: &mut RawTracePoint = prog.try_into()?;
                p.load()?;
            }
            Attach::Tracepoint => {
                let p: &mut TracePoint = prog.try_into()?;
                p.load()?;
            }
            Attach::Fentry => {
                let p: &mut FEntry = prog.try_into()?;
                p.load(self.target, btf()?)?;
            }
            Attach::Kprobe => {
                let p: &mut KProbe = prog.try_into()?;
                p.load()?;
            }
            Attach::Iter => {
                let p: &mut Iter = prog.try_into()?;
                p.load(self.target, btf()?)?;
            }
            Attach::PerfTimer => {
                let p: &mut PerfEvent = prog.try_into()?;
                p.load()?;
            }
        }
        Ok(())
    }

    /// Attaches the loaded program where the table says. An iterator is attached per
    /// read instead (`bpf::collect`): nothing to do here.
    pub fn attach(&self, ebpf: &mut Ebpf) -> Result<()> {
        let prog = self.program_mut(ebpf)?;
        match (self.attach, prog) {
            (Attach::TpBtf, Program::BtfTracePoint(p)) => {
                p.attach()?;
            }
            (Attach::RawTp, Program::RawTracePoint(p)) => {
                p.attach(self.target)?;
            }
            (Attach::Tracepoint, Program::TracePoint(p)) => {
                let (category, name) = self
                    .target
                    .split_once('/')
                    .ok_or_else(|| anyhow!("tracepoint {} is not category/name", self.target))?;
                p.attach(category, name)?;
            }
            (Attach::Fentry, Program::FEntry(p)) => {
                p.attach()?;
            }
            (Attach::Kprobe, Program::KProbe(p)) => {
                p.attach(self.target, 0)?;
            }
            (Attach::Iter, Program::Iter(_)) => {}
            (Attach::PerfTimer, Program::PerfEvent(p)) => {
                let cpus =
                    aya::util::online_cpus().map_err(|(what, e)| anyhow!("reading {what}: {e}"))?;
                for cpu in cpus {
                    p.attach(
                        PerfEventConfig::Software(SoftwareEvent::CpuClock),
                        PerfEventScope::AllProcessesOneCpu { cpu },
                        SamplePolicy::Frequency(tracer_common::runqlen::FREQ_HZ),
                        false,
                    )
                    .with_context(|| format!("a {} timer on CPU {cpu}", self.target))?;
                }
            }
            (kind, _) => return Err(anyhow!("{} is not a {} program", self.name, kind.name())),
        }
        Ok(())
    }

    /// Detaches and unloads the program; its maps stay.
    pub fn unload(&self, ebpf: &mut Ebpf) -> Result<()> {
        unload(self.program_mut(ebpf)?)
    }

    /// The loaded program's fd (for its fdinfo), if it is loaded.
    pub fn fd(&self, ebpf: &Ebpf) -> Option<RawFd> {
        let fd = match ebpf.program(self.name)? {
            Program::BtfTracePoint(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            Program::RawTracePoint(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            Program::TracePoint(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            Program::FEntry(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            Program::KProbe(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            Program::Iter(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            Program::PerfEvent(p) => p.fd().ok()?.as_fd().as_raw_fd(),
            _ => return None,
        };
        Some(fd)
    }
}

/// Loads then attaches each of `progs`, naming the one that fails.
pub fn load_all(ebpf: &mut Ebpf, progs: &[Prog], btf: Option<&Btf>) -> Result<()> {
    for p in progs {
        let t = std::time::Instant::now();
        p.load(ebpf, btf)
            .with_context(|| format!("loading {}", p.name))?;
        if log::log_enabled!(target: startup::TARGET, log::Level::Info) {
            // The verifier's count (veristat's "insns processed"), from the kernel.
            let insns = ebpf
                .program(p.name)
                .and_then(|p| p.info().ok())
                .and_then(|i| i.verified_instruction_count());
            startup::stage(format_args!(
                "{} verified in {:.1} ms, {} instructions processed",
                p.name,
                t.elapsed().as_secs_f64() * 1e3,
                insns.map_or("?".to_string(), |n| n.to_string())
            ));
        }
    }
    Ok(())
}

/// Attaches each of `progs`, naming the one that fails (and its tracepoint or function,
/// without a classic tracepoint's category).
pub fn attach_all<'a>(ebpf: &mut Ebpf, progs: impl IntoIterator<Item = &'a Prog>) -> Result<()> {
    for p in progs {
        p.attach(ebpf).with_context(|| {
            let target = p.target.rsplit('/').next().unwrap_or(p.target);
            format!("attaching {} to {target}", p.name)
        })?;
    }
    Ok(())
}

/// Detaches and unloads `progs` side by side: each detach waits out an RCU grace period
/// (classic tracepoints: ~0.2 s each under load); together they wait for about one.
pub fn unload_all(ebpf: &mut Ebpf, progs: &[Prog]) {
    std::thread::scope(|scope| {
        for (name, p) in ebpf.programs_mut() {
            if !progs.iter().any(|q| q.name == name) {
                continue;
            }
            scope.spawn(move || {
                if let Err(e) = unload(p) {
                    log::warn!("unloading {name}: {e}");
                }
            });
        }
    });
}

fn unload(p: &mut Program) -> Result<()> {
    match p {
        Program::BtfTracePoint(p) => p.unload()?,
        Program::RawTracePoint(p) => p.unload()?,
        Program::TracePoint(p) => p.unload()?,
        Program::FEntry(p) => p.unload()?,
        Program::KProbe(p) => p.unload()?,
        Program::Iter(p) => p.unload()?,
        Program::PerfEvent(p) => p.unload()?,
        _ => {}
    }
    Ok(())
}

/// The kernel's BTF as far as loading `progs` needs it: the type ids of their attach
/// points, from the index the loader made (see [`KernelBtf::id_stub`]).
pub fn attach_btf(kbtf: &KernelBtf, progs: &[Prog]) -> Result<Btf> {
    let names: Vec<(Named, String)> = progs
        .iter()
        .filter_map(|p| match p.attach {
            Attach::TpBtf => Some((Named::Typedef, format!("btf_trace_{}", p.target))),
            Attach::Fentry => Some((Named::Func, p.target.to_string())),
            Attach::Iter => Some((Named::Func, format!("bpf_iter_{}", p.target))),
            Attach::RawTp | Attach::Tracepoint | Attach::Kprobe | Attach::PerfTimer => None,
        })
        .collect();
    let names: Vec<(Named, &str)> = names.iter().map(|(k, n)| (*k, n.as_str())).collect();
    kbtf.id_stub(&names)
        .context("the kernel's BTF ids of the attach points")
}
