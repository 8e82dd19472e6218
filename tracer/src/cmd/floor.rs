//! `tracer floor`: the benchmark's cost floor, an empty sched_switch program.
use anyhow::{anyhow, Context as _, Result};
use aya::{programs::BtfTracePoint, Btf};

use crate::bpf::loader::{new_loader, object};

/// Attaches only the empty `floor_switch` program for `duration` (or until SIGINT or
/// SIGTERM), then prints how many switches it counted: the benchmark's cost floor.
pub fn run_floor(duration: std::time::Duration) -> Result<i32> {
    crate::sys::privileges::check()?;
    let btf = Btf::from_sys_fs().context("parsing kernel BTF")?;
    let mut ebpf = new_loader()
        .load(object()?)
        .context("loading the eBPF object")?;
    let p: &mut BtfTracePoint = ebpf
        .program_mut("floor_switch")
        .ok_or_else(|| anyhow!("floor_switch missing"))?
        .try_into()?;
    p.load("sched_switch", &btf)?;
    p.attach()?;
    eprintln!("floor: attached");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        signal_flag(sig, &stop);
    }
    let end = std::time::Instant::now() + duration;
    while std::time::Instant::now() < end && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let arr: aya::maps::PerCpuArray<_, u64> =
        aya::maps::PerCpuArray::try_from(ebpf.map("FLOOR").context("FLOOR missing")?)?;
    let n: u64 = arr.get(&0, 0)?.iter().sum();
    println!("{{\"switches\": {n}}}");
    Ok(0)
}

/// Sets `flag` when `sig` arrives (the floor command has no async runtime).
fn signal_flag(sig: i32, flag: &std::sync::Arc<std::sync::atomic::AtomicBool>) {
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
        std::sync::OnceLock::new();
    let _ = FLAG.set(flag.clone());
    extern "C" fn handler(_: i32) {
        if let Some(f) = FLAG.get() {
            f.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    // SAFETY: the handler only does an atomic store.
    unsafe { libc::signal(sig, handler as *const () as usize) };
}
