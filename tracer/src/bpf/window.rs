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

    /// From the window's opening until every program was attached (ns): a thread that
    /// ended in it, and a slice or wait that ended in it, no program saw.
    pub fn attach_lag_ns(&self) -> u64 {
        self.attached_at.saturating_sub(self.t0)
    }

    /// Closes the window now: the programs stay attached, so threads that die before
    /// the final read still hand over their totals, but they cut running slices here
    /// and count nothing after. Returns the close (CLOCK_MONOTONIC ns); idempotent.
    pub fn close_window(&mut self) -> Result<u64> {
        if self.t1 == 0 {
            self.t1 = write(&mut self.ebpf, self.t0, monotonic_ns())?;
        }
        Ok(self.t1)
    }

    /// When the window closed, 0 while it is open.
    pub fn closed_at(&self) -> u64 {
        self.t1
    }
}

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
