//! `window-open`: when the tracer opened its window, read from its `WINDOW` map.

use crate::num;

/// Prints when the tracer with PID `--pid` opened its window (its `WINDOW` map holds
/// the CLOCK_MONOTONIC ns; 0 while closed), found through the map ids in its fdinfo, so
/// the driver knows the window's bounds exactly.
pub(crate) fn window_open(args: &[String]) {
    let pid = num(args, "--pid", 0);
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap_or_else(|e| {
        eprintln!("tracer-torture: no fdinfo for PID {pid}: {e}");
        std::process::exit(1)
    });
    for e in dir.flatten() {
        let info = std::fs::read_to_string(e.path()).unwrap_or_default();
        let Some(id) = info
            .lines()
            .find_map(|l| l.strip_prefix("map_id:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let named =
            aya::maps::MapInfo::from_id(id).is_ok_and(|i| i.name_as_str() == Some("WINDOW"));
        if !named {
            continue;
        }
        let value = aya::maps::MapData::from_id(id)
            .and_then(aya::maps::Map::from_map_data)
            .and_then(|m| {
                // `tracer_common::Window`: {open_ns, close_ns}.
                let a: aya::maps::Array<_, [u64; 2]> = aya::maps::Array::try_from(&m)?;
                a.get(&0, 0).map(|w| w[0])
            });
        match value {
            Ok(v) => {
                println!("{v}");
                return;
            }
            Err(e) => {
                eprintln!("tracer-torture: cannot read map {id}: {e}");
                std::process::exit(1);
            }
        }
    }
    eprintln!("tracer-torture: PID {pid} holds no WINDOW map");
    std::process::exit(1);
}

/// Prints CLOCK_BOOTTIME - CLOCK_MONOTONIC (ns): BOOTTIME read between two MONOTONIC
/// reads, against their midpoint; the closest of a few tries.
pub(crate) fn clocks() {
    use tracer_tests::clock_ns;
    let mut best = (u64::MAX, 0i64);
    for _ in 0..20 {
        let a = clock_ns(libc::CLOCK_MONOTONIC);
        let b = clock_ns(libc::CLOCK_BOOTTIME);
        let c = clock_ns(libc::CLOCK_MONOTONIC);
        if c - a < best.0 {
            best = (c - a, b as i64 - (a + (c - a) / 2) as i64);
        }
    }
    println!("{}", best.1);
}
