//! The window: when counting starts and stops, in the `WINDOW` map the programs read
//! (see `tracer_common::Window`).
use anyhow::{Context as _, Result};
use aya::Ebpf;
use tracer_common::Window;

use crate::{bpf::loader::Tracer, sys::clock::monotonic_ns};

impl Tracer {
    /// When the window opened (CLOCK_MONOTONIC ns): just before the programs attached.
    pub fn opened_at(&self) -> u64 {
        self.t0
    }

    /// The window's opening and the moment every program was attached (CLOCK_MONOTONIC
    /// ns).
    pub fn opening(&self) -> (u64, u64) {
        (self.t0, self.attached_at)
    }

    /// From the window's opening until every program was attached (ns): a thread that
    /// ended in it, and a slice or wait that ended in it, no program saw.
    pub fn attach_lag_ns(&self) -> u64 {
        self.attached_at.saturating_sub(self.t0)
    }

    /// Writes the window's close ahead of time, when it is known from the start (`-d`):
    /// the programs then stop counting at it whenever user space gets to run. A close
    /// written only when the run ends can be late: a tracer waiting for a CPU behind
    /// busy threads wrote it up to 77 us after the moment it named, and the switches
    /// in between were counted and recorded past it (`record_agreement`'s
    /// `with_p_the_trace_is_cut_at_the_window`, 3 runs in 100, and torture seed
    /// 992386: the trace's last switch 0.577 ms after the close).
    pub fn plan_close(&mut self, close: u64) -> Result<()> {
        if self.t1 == 0 && close > self.t0 {
            self.planned = write(&mut self.ebpf, self.t0, close)?;
        }
        Ok(())
    }

    /// The close written ahead of time ([`Tracer::plan_close`]), 0 if none.
    pub fn planned_close(&self) -> u64 {
        self.planned
    }

    /// Closes the window now (or at the planned close, if that comes first): the
    /// programs stay attached, so threads that die before the final read still hand
    /// over their totals, but they cut running slices at the close and count nothing
    /// after. Returns the close (CLOCK_MONOTONIC ns) once it has passed; idempotent.
    ///
    /// A close not planned is written a moment ahead ([`CLOSE_AHEAD_NS`]): a close
    /// taken as "now" and then written let the switches in between (the write's
    /// system call) see the window open after its close (torture 917296: the trace's
    /// last switch 23 us after the close).
    pub fn close_window(&mut self) -> Result<u64> {
        if self.t1 == 0 {
            let ahead = monotonic_ns() + CLOSE_AHEAD_NS;
            let close = if self.planned != 0 && self.planned <= ahead {
                self.planned
            } else {
                let close = write(&mut self.ebpf, self.t0, ahead)?;
                let late = monotonic_ns().saturating_sub(close);
                if late > 0 {
                    log::debug!("the window's close was written {late} ns after it");
                }
                close
            };
            self.t1 = close;
            while let Some(left) = close.checked_sub(monotonic_ns()).filter(|&l| l > 0) {
                std::thread::sleep(std::time::Duration::from_nanos(left));
            }
        }
        Ok(self.t1)
    }

    /// When the window closed, 0 while it is open.
    pub fn closed_at(&self) -> u64 {
        self.t1
    }
}

/// How far ahead of the moment it is written the close lies: well above a map
/// update's few microseconds.
const CLOSE_AHEAD_NS: u64 = 200_000;

/// Writes the `WINDOW` map; returns `close` or, when 0, `open`.
pub(super) fn write(ebpf: &mut Ebpf, open: u64, close: u64) -> Result<u64> {
    let mut w: aya::maps::Array<_, Window> =
        aya::maps::Array::try_from(ebpf.map_mut("WINDOW").context("WINDOW map missing")?)?;
    w.set(
        0,
        Window {
            open_ns: open,
            close_ns: close,
        },
        0,
    )
    .context("writing the window")?;
    Ok(if close != 0 { close } else { open })
}
