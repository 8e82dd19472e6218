//! The Dispatch Trace Log's binary format: 48-byte big-endian `struct dtl_entry` records,
//! the reason codes as perf names them, and timebase ticks to ns.
use std::{borrow::Cow, path::Path};

use serde::Serialize;

use crate::{error::TracerError, pseries::vcpudispatch};

/// Size of one `struct dtl_entry`; reads must be a multiple of it.
pub const ENTRY_SIZE: usize = 48;
/// Entries in the kernel's per-CPU ring (4096 bytes / 48).
pub const RING_ENTRIES: usize = 4096 / ENTRY_SIZE;

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
pub(crate) fn decode_whole(bytes: &[u8]) -> Vec<DtlEntry> {
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

/// Timebase ticks to ns (exact integer arithmetic, saturating).
pub fn ticks_to_ns(ticks: u64, tb_hz: u64) -> u64 {
    if tb_hz == 0 {
        return 0;
    }
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(tb_hz);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An entry with these reasons, delay and timebase (tests here and in `analyze`).
    pub(crate) fn entry(d: u8, p: u8, e2d: u32, tb: u64) -> DtlEntry {
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
}
