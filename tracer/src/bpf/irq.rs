//! `--irq`: the interrupt maps read (see `tracer_common::irq`), and whether the kernel
//! leaves interrupt time out of tasks' runtime.
use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, PerCpuArray},
    Ebpf,
};
use tracer_common::irq::{IrqCpu, IrqThread};

use crate::model::irq::IrqRead;

/// Every possible CPU's sums and every thread's, cumulative since load.
pub fn read(ebpf: &Ebpf) -> Result<IrqRead> {
    let cpus: PerCpuArray<_, IrqCpu> = PerCpuArray::try_from(
        ebpf.map("IRQ_CPU")
            .context("IRQ_CPU map missing from the eBPF object")?,
    )?;
    let per_cpu = cpus.get(&0, 0).context("reading IRQ_CPU")?;
    let threads: HashMap<_, u32, IrqThread> = HashMap::try_from(
        ebpf.map("IRQ_THREADS")
            .context("IRQ_THREADS map missing from the eBPF object")?,
    )?;
    let mut out = IrqRead {
        cpus: per_cpu.iter().copied().collect(),
        ..Default::default()
    };
    // Entries are never removed, so every key the walk finds can be read.
    for kv in threads.iter() {
        let (tid, t) = kv.context("reading IRQ_THREADS")?;
        out.threads.insert(tid, t);
    }
    Ok(out)
}
