//! The one way every command waits for a signal: SIGINT and SIGTERM end the run with
//! its final report, as does SIGHUP (a closed terminal) unless it was ignored when the
//! tracer started (under `nohup`, it stays ignored). SIGINT and SIGTERM are caught even
//! when ignored at the start (a script's `tracer ... &` starts with SIGINT ignored and is
//! still stopped with `kill -INT`).
use anyhow::{Context as _, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::sys::launch;

/// The handlers, installed at once (a signal from then on is not lost).
pub(crate) struct Signals {
    int: Signal,
    term: Signal,
    hup: Option<Signal>,
}

impl Signals {
    /// Inside the tokio runtime.
    pub(crate) fn install() -> Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            hup: if launch::ignored_at_start(libc::SIGHUP) {
                None
            } else {
                Some(signal(SignalKind::hangup()).context("installing the SIGHUP handler")?)
            },
        })
    }

    /// The next signal that ends the run, by name.
    pub(crate) async fn next(&mut self) -> &'static str {
        let hup = async {
            match self.hup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = hup => "SIGHUP",
        }
    }
}

/// A runtime for a command that only waits (floor, offcpu), with the handlers in it.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the event loop")
}
