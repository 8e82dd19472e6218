//! Fuzz targets for the parsers of `tracer dtl` and of the hypervisor section: inputs come
//! from the kernel, or from a tree copied off another machine (`--root`), so none of them
//! may panic, whatever the bytes.
//!
//! | target               | what it feeds                                                     |
//! |----------------------|-------------------------------------------------------------------|
//! | `dtl_entries`        | debugfs `powerpc/dtl/cpu-N` bytes: decoder, analyzer, reports; also `/proc/cpuinfo` timebase |
//! | `vcpudispatch_stats` | `/proc/powerpc/vcpudispatch_stats` text, the state file, `dtl_event_mask`, `/proc/PID/stat` |
//! | `proc_stat`          | `/proc/stat` steal columns and the hypervisor report             |
//! | `cli_parsers`        | `tracer run`'s durations, numbers and perf event lists            |
//!
//! Their seeds run as ordinary tests (`tests/seeds.rs`, part of `cargo xtask test`: the
//! crate is a workspace member outside the default members, so `--workspace` builds it).
//! Fuzzing needs nightly and cargo-fuzz. Run, from `tracer/fuzz/`:
//!
//! ```text
//! cargo install cargo-fuzz            # once
//! cargo +nightly fuzz run -O -s none dtl_entries        corpus/dtl_entries        seeds/dtl_entries        -- -runs=3000000
//! cargo +nightly fuzz run -O -s none vcpudispatch_stats corpus/vcpudispatch_stats seeds/vcpudispatch_stats -- -runs=3000000
//! cargo +nightly fuzz run -O -s none proc_stat          corpus/proc_stat          seeds/proc_stat          -- -runs=3000000
//! cargo +nightly fuzz run -O -s none cli_parsers        corpus/cli_parsers        seeds/cli_parsers        -- -runs=3000000
//! ```
//!
//! (`-max_total_time=60` bounds by time instead; `-s none` skips AddressSanitizer, which
//! adds nothing to this safe code and triples the speed). The first directory collects the corpus
//! (ignored by git), `seeds/` holds hand-made inputs; a crash leaves its input in
//! `artifacts/<target>/` and `cargo +nightly fuzz run <target> <that file>` replays it.
use std::path::Path;

use tracer::{
    output,
    pseries::{
        dtl::{self, DtlAnalyzer, DtlEntry},
        hypervisor::{self, CpuSteal, Snapshot},
        vcpudispatch::{self, SavedSettings, StatsState},
    },
};

/// Decoder, analyzer and both report formats on one DTL file's bytes. The first byte
/// picks the timebase, the vCPU and the "whole ring" flag, so every path gets explored.
pub fn dtl_entries(data: &[u8]) {
    let path = Path::new("/fuzz/dtl/cpu-0");
    let (head, rest) = data.split_first().map_or((0, data), |(h, r)| (*h, r));
    let tb = match head % 4 {
        0 => 512_000_000,
        1 => 1,
        2 => u64::MAX,
        _ => 1_000_000_000,
    };
    match dtl::decode::decode_entries(rest, path) {
        Ok(entries) => {
            let again: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
            assert_eq!(again, rest, "encode(decode(x)) == x");
            for e in &entries {
                assert_eq!(DtlEntry::decode(&e.encode()), *e);
            }
            let mut an = DtlAnalyzer::new(tb);
            let mid = entries.len() / 2;
            an.feed(u32::from(head), &entries[..mid], head & 0x80 != 0);
            an.feed(u32::from(head) + 1, &entries[mid..], false);
            // The reports walk every histogram bucket: exercised on one input in eight
            // (chosen by the first byte), so the decoder gets millions of runs.
            if head & 0x70 == 0 {
                let s = an.summary();
                assert_eq!(s.entries, entries.len() as u64);
                assert_eq!(s.dispatch_latency.count, entries.len() as u64);
                assert_eq!(
                    s.dispatch_reasons.values().sum::<u64>(),
                    entries.len() as u64
                );
                let r = dtl::raw_report(&an, Some(u64::from(head)));
                let _ = output::dtl::format_text(&r);
                let _ = serde_json::to_string(&r);
            }
        }
        Err(e) => {
            assert!(rest.len() % dtl::ENTRY_SIZE != 0);
            assert!(e.to_string().contains("/fuzz/dtl/cpu-0"));
        }
    }
    let cpuinfo = String::from_utf8_lossy(data);
    match dtl::decode::parse_timebase(&cpuinfo, Path::new("/fuzz/cpuinfo")) {
        Ok(hz) => assert!(hz > 0),
        Err(e) => assert!(e.to_string().contains("/fuzz/cpuinfo")),
    }
}

/// The statistics parser and its table, plus the other small text parsers of the module.
pub fn vcpudispatch_stats(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/fuzz/vcpudispatch_stats");
    match vcpudispatch::parse_stats(&text, path) {
        Ok(StatsState::On(v)) => {
            assert!(!v.is_empty());
            assert!(v.windows(2).all(|w| w[0].cpu < w[1].cpu), "sorted, unique");
            let r = vcpudispatch::vcpu_reports(Some(&v), &v, 1);
            assert!(r.iter().all(|x| x.delta.unwrap().total_disp == 0));
            let _ = output::dtl::format_table(&r, Some(1));
            let snap = vcpudispatch::vcpu_reports(None, &v, 0);
            let _ = output::dtl::format_table(&snap, None);
            for x in &snap {
                if let Some(h) = x.home_ratio {
                    assert!(h.is_finite() && h >= 0.0);
                }
            }
            let _ = serde_json::to_string(&snap);
        }
        Ok(StatsState::Off) => {}
        Err(e) => assert!(e.to_string().contains("/fuzz/vcpudispatch_stats")),
    }
    if let Ok(s) = SavedSettings::parse(&text, path) {
        assert_eq!(SavedSettings::parse(&s.to_text(), path).ok(), Some(s));
    }
    let _ = vcpudispatch::parse_dtl_mask(&text, path);
    let _ = vcpudispatch::parse_starttime(&text);
}

/// /proc/stat parsing and the steal report over a window with extreme values.
pub fn proc_stat(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/fuzz/proc/stat");
    match hypervisor::parse_proc_stat(&text, path) {
        Ok(steal) => {
            assert!(!steal.is_empty());
            assert!(
                steal.windows(2).all(|w| w[0].cpu < w[1].cpu),
                "sorted, unique"
            );
            let before = Snapshot {
                steal: steal.clone(),
                dispatch: None,
                user_hz: 100,
                notes: vec![],
            };
            let r = hypervisor::report(&before, &before, None, 1_000_000_000);
            assert_eq!(r.total_steal_ns, 0);
            let _ = output::hypervisor::format_text(&r);
            let after = Snapshot {
                steal: steal
                    .iter()
                    .map(|c| CpuSteal {
                        cpu: c.cpu,
                        steal_ticks: u64::MAX,
                    })
                    .collect(),
                dispatch: None,
                user_hz: 1,
                notes: vec![],
            };
            let cpus: Vec<u32> = steal.iter().map(|c| c.cpu).take(3).collect();
            for elapsed in [0, 1, u64::MAX] {
                let r = hypervisor::report(&before, &after, Some(&cpus), elapsed);
                for c in &r.cpus {
                    if let Some(p) = c.steal_percent {
                        assert!((0.0..=100.0).contains(&p));
                    }
                }
                let _ = output::hypervisor::format_text(&r);
                let _ = serde_json::to_string(&r);
            }
        }
        Err(e) => assert!(e.to_string().contains("/fuzz/proc/stat")),
    }
}

/// The CLI's own parsers (durations, numbers, perf event lists) on arbitrary text: a
/// user's typo must be an error, never a panic.
pub fn cli_parsers(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    if let Ok(d) = tracer::sys::parse::parse_duration(&s) {
        assert!(d.as_secs() <= 366 * 86400);
    }
    let _ = tracer::sys::parse::parse_u32_any_base(&s);
    match tracer::perf::parse_event(&s) {
        Ok(e) => assert_eq!(e.name, s.trim()),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let list: Vec<String> = s.split(',').map(str::to_string).collect();
    let _ = tracer::perf::parse_events(&list);
}
