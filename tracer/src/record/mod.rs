//! `tracer record` and `tracer slow`: events streamed from the kernel programs through
//! the `EVENTS` ring buffer, decoded ([`decode`]), written as a Perfetto trace
//! ([`perfetto`]) or as slow-wait lines ([`slow`]). The command loops are
//! `cmd_record.rs` and `cmd_slow.rs`; both run inside `tracer run`'s session through a
//! [`Hook`], so the window, targets, summary and exit paths are the same code.
pub mod decode;
pub mod perfetto;
pub mod slow;

use std::sync::Arc;

use anyhow::{anyhow, Result};
use aya::Ebpf;
use tracer_common::Config;

use crate::{
    cli::ProbeMode,
    loader::{RecordLoad, RunqSource},
    report::Section,
    root::Root,
};

/// What a streaming command adds to a `tracer run` session.
pub trait Extension: Send + Sync {
    /// What the programs stream.
    fn load(&self) -> RecordLoad;
    /// The programs are attached (the target not yet released): start reading.
    fn attached(&self, ebpf: &mut aya::Ebpf) -> Result<()>;
    /// Whether the session should end now (the output failed).
    fn should_stop(&self) -> bool;
    /// The window closed and the programs are detached: read the rest, finish the
    /// output; sections and notices for the final report.
    fn finish(&self, ebpf: &mut Ebpf) -> Result<(Vec<Section>, Vec<String>)>;
    /// Whether `tracer run`'s report is printed at the end.
    fn report(&self) -> bool;
}

/// An optional [`Extension`] carried in `RunArgs` (none for `tracer run` itself).
#[derive(Clone, Default)]
pub struct Hook(pub Option<Arc<dyn Extension>>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Hook(on)"
        } else {
            "Hook(off)"
        })
    }
}

impl Hook {
    pub fn load(&self) -> RecordLoad {
        self.0.as_ref().map(|e| e.load()).unwrap_or_default()
    }
    pub fn attached(&self, ebpf: &mut Ebpf) -> Result<()> {
        match &self.0 {
            Some(e) => e.attached(ebpf),
            None => Ok(()),
        }
    }
    pub fn should_stop(&self) -> bool {
        self.0.as_ref().is_some_and(|e| e.should_stop())
    }
    pub fn finish(&self, ebpf: &mut Ebpf) -> Result<(Vec<Section>, Vec<String>)> {
        match &self.0 {
            Some(e) => e.finish(ebpf),
            None => Ok((Vec::new(), Vec::new())),
        }
    }
    pub fn report(&self) -> bool {
        self.0.as_ref().is_none_or(|e| e.report())
    }
}

/// Sets the record fields of the programs' configuration: what to stream, the threshold,
/// and the task offsets only these events read. Needs task pointers (tp-btf or raw-tp);
/// `tracer slow` needs waits timed from wakeups.
pub fn config(
    cfg: &mut Config,
    rec: &RecordLoad,
    mode: ProbeMode,
    runq: RunqSource,
    root: &Root,
) -> Result<()> {
    if !matches!(mode, ProbeMode::TpBtf | ProbeMode::RawTp) {
        return Err(anyhow!(
            "recording needs task pointers: probe mode tp-btf or raw-tp, not {}",
            mode.name()
        ));
    }
    if rec.on & (tracer_common::record::on::SLOW_RUNQ) != 0 && runq == RunqSource::RunDelay {
        return Err(anyhow!(
            "tracer slow times waits from wakeups: --runq-from schedstat does not apply"
        ));
    }
    let kbtf = crate::btf::KernelBtf::from_file(&root.path(crate::loader::VMLINUX_BTF))?;
    cfg.record = rec.on;
    cfg.slow_min_ns = rec.slow_min_ns;
    cfg.task_prio_off = kbtf.member_offset("task_struct", "prio")?;
    // The CPU moved from task_struct into thread_info with THREAD_INFO_IN_TASK (5.16).
    cfg.task_cpu_off = if kbtf.has_member("task_struct", "cpu") {
        kbtf.member_offset("task_struct", "cpu")?
    } else {
        kbtf.member_offset("task_struct", "thread_info")
            .and_then(|o| Ok(o + kbtf.member_offset("thread_info", "cpu")?))
            .unwrap_or(0)
    };
    Ok(())
}

/// Per-CPU sums of the `REC_STATS` array: (events sent, events lost), indexed by CPU.
pub fn rec_stats(map: &aya::maps::Map) -> Result<(Vec<u64>, Vec<u64>)> {
    use tracer_common::record::stat;
    let arr: aya::maps::PerCpuArray<_, u64> = aya::maps::PerCpuArray::try_from(map)?;
    let sent = arr.get(&stat::SENT, 0)?.iter().copied().collect();
    let lost = arr.get(&stat::DROPPED, 0)?.iter().copied().collect();
    Ok((sent, lost))
}

/// `--buffer-size`: bytes with an optional K/M/G suffix, rounded up to a power of two
/// (the kernel requires it), from one page to 1 GiB.
pub fn parse_buffer_size(s: &str) -> Result<u32, crate::error::TracerError> {
    let bad =
        |why: &str| crate::error::TracerError::BadOption(format!("--buffer-size {s:?}: {why}"));
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => (
            &t[..i],
            match t[i..].to_ascii_uppercase().as_str() {
                "K" | "KB" | "KIB" => 1 << 10,
                "M" | "MB" | "MIB" => 1 << 20,
                "G" | "GB" | "GIB" => 1 << 30,
                _ => return Err(bad("unknown unit (use K, M or G)")),
            },
        ),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| bad("expected a size such as 16M"))?;
    let bytes = n.checked_mul(mult).ok_or_else(|| bad("too large"))?;
    let page = 4096u64;
    if bytes < page {
        return Err(bad("at least one page (4K)"));
    }
    if bytes > 1 << 30 {
        return Err(bad("at most 1G"));
    }
    Ok(bytes.next_power_of_two() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_buffer_size("5000").unwrap(), 8192);
        assert_eq!(parse_buffer_size("1g").unwrap(), 1 << 30);
        for bad in ["", "0", "100", "2G", "12X", "-1M", "M"] {
            assert!(parse_buffer_size(bad).is_err(), "{bad}");
        }
    }
}
