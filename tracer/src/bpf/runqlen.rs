//! `--runqlen`: the sampler's fields from the kernel's BTF, and each CPU's samples read
//! from `RUNQLEN` (see `tracer_common::runqlen`).
use anyhow::{anyhow, Context as _, Result};
use aya::{maps::PerCpuArray, Ebpf};
use tracer_common::runqlen::{Fields, Hist};

use crate::bpf::compat;
use crate::model::runqlen::CpuSamples;
use crate::sys::btf::KernelBtf;

/// The fields the sampler reads, and whether delayed-dequeue tasks are told apart from
/// waiting ones; `kbtf` is the kernel's BTF where the mode read it.
pub fn fields(kbtf: Option<&KernelBtf>, root: &crate::sys::root::Root) -> Result<(Fields, bool)> {
    let own;
    let kbtf = match kbtf {
        Some(k) => k,
        None => {
            own = KernelBtf::from_file(&root.path(crate::sys::btf::VMLINUX_BTF))
                .map_err(|e| anyhow!("--runqlen needs the kernel's BTF: {e}"))?;
            &own
        }
    };
    compat::runqlen_fields(kbtf).map_err(|e| {
        anyhow!("--runqlen: the run queue is not reachable from a task on this kernel ({e}; it needs CONFIG_FAIR_GROUP_SCHED)")
    })
}

/// Every possible CPU's samples so far (cumulative since load).
pub fn read(ebpf: &Ebpf) -> Result<Vec<CpuSamples>> {
    let map: PerCpuArray<_, Hist> = PerCpuArray::try_from(
        ebpf.map("RUNQLEN")
            .context("RUNQLEN map missing from the eBPF object")?,
    )?;
    let per_cpu = map.get(&0, 0).context("reading RUNQLEN")?;
    Ok(per_cpu
        .iter()
        .enumerate()
        .map(|(cpu, h)| CpuSamples {
            cpu: cpu as u32,
            samples: h.samples,
            waiting: h.waiting,
            slots: h.slots.to_vec(),
        })
        .collect())
}
