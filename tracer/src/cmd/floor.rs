//! `tracer floor`: the benchmark's cost floor, an empty sched_switch program.
use anyhow::{Context as _, Result};

use crate::bpf::{
    attach,
    object::{new_loader, Family},
    table,
};
use crate::cmd::session::{
    ends::{self, End, Ends, Inbox, Wake, Work},
    signals,
};
use crate::sys::btf::{KernelBtf, VMLINUX_BTF};
use crate::sys::root::Root;

/// Attaches only the empty `floor_switch` program for `duration` (or until a signal), then prints how many switches it counted: the benchmark's cost floor.
pub fn run_floor(duration: std::time::Duration) -> Result<i32> {
    crate::sys::privileges::check()?;
    let kbtf = KernelBtf::from_file(std::path::Path::new(VMLINUX_BTF))?;
    let btf = attach::attach_btf(&kbtf, &[table::FLOOR])?;
    let mut ebpf = new_loader()
        .0
        .load(Family::Floor.object())
        .context("loading the floor's eBPF object")?;
    table::FLOOR.load(&mut ebpf, Some(&btf))?;
    table::FLOOR.attach(&mut ebpf)?;
    eprintln!("floor: attached");
    let rt = signals::runtime()?;
    rt.block_on(async {
        let mut sigs = signals::Signals::install()?;
        let ends = Ends {
            deadline: Some(tokio::time::Instant::now() + duration),
            child: None,
            watch: None,
            stdout: false,
        };
        ends::run(
            &mut sigs,
            &ends,
            &Root::default(),
            &[],
            Inbox::<()>::None,
            &mut Idle,
        )
        .await
    })?;
    let arr: aya::maps::PerCpuArray<_, u64> =
        aya::maps::PerCpuArray::try_from(ebpf.map("FLOOR").context("FLOOR missing")?)?;
    let n: u64 = arr.get(&0, 0)?.iter().sum();
    println!("{{\"switches\": {n}}}");
    Ok(0)
}

/// The floor has nothing to do while it waits.
struct Idle;

impl Work<()> for Idle {
    fn due(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + std::time::Duration::from_secs(3600)
    }

    fn wake(&mut self, _: Wake<()>) -> Result<Option<End>> {
        Ok(None)
    }
}
