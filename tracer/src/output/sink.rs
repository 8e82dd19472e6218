//! Where reports go. The run loop feeds a [`Sink`]: once the header when the programs are
//! attached, a report per interval (`--interval`), and the totals when the window
//! closes. Every output is one implementation over the typed [`Report`]: text and JSON
//! Lines here; the next ones (an OpenMetrics endpoint, a Perfetto summary, a TUI) plug
//! in the same way without touching the run loop or the report's arithmetic.
use std::io::Write;

use crate::error::TracerError;
use crate::model::report::RunHeader;
use crate::output::{json, report::Report, text};

/// A consumer of a run's reports.
///
/// Calls come in order: [`Sink::start`] once, [`Sink::interval`] zero or more times (each
/// report holds that interval's deltas), then [`Sink::total`] once (the whole window;
/// intervals add up to it). An error ends the run: [`TracerError::OutputClosed`] quietly
/// (a reader that went away), anything else as a failure.
pub trait Sink {
    /// The run is attached and its window open. Text and JSON print nothing here (the
    /// banner goes to the terminal, not to the report's stream).
    fn start(&mut self, _header: &RunHeader) -> Result<(), TracerError> {
        Ok(())
    }

    /// One interval's report.
    fn interval(&mut self, r: &Report) -> Result<(), TracerError>;

    /// The totals of the whole window: the last call.
    fn total(&mut self, r: &Report) -> Result<(), TracerError>;
}

/// Writes `text` and flushes: a reader that went away is [`TracerError::OutputClosed`],
/// any other failure (a full disk, /dev/full) is [`TracerError::Output`].
pub(crate) fn write_flush(out: &mut impl Write, text: &str) -> Result<(), TracerError> {
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => TracerError::OutputClosed,
            _ => TracerError::Output(e),
        })
}

/// The human-readable report, each followed by a blank line.
pub struct TextSink<W: Write> {
    out: W,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        TextSink { out }
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn interval(&mut self, r: &Report) -> Result<(), TracerError> {
        write_flush(&mut self.out, &format!("{}\n", text::format_text(r)))
    }

    fn total(&mut self, r: &Report) -> Result<(), TracerError> {
        self.interval(r)
    }
}

/// One JSON document per report, one per line (JSON Lines); the `kind` field tells an
/// interval from the totals.
pub struct JsonLinesSink<W: Write> {
    out: W,
}

impl<W: Write> JsonLinesSink<W> {
    pub fn new(out: W) -> Self {
        JsonLinesSink { out }
    }
}

impl<W: Write> Sink for JsonLinesSink<W> {
    fn interval(&mut self, r: &Report) -> Result<(), TracerError> {
        // Cannot fail for the report's types (every map key is a string); said, not hidden.
        let line = json::to_line(r).map_err(|e| TracerError::Output(std::io::Error::other(e)))?;
        write_flush(&mut self.out, &format!("{line}\n"))
    }

    fn total(&mut self, r: &Report) -> Result<(), TracerError> {
        self.interval(r)
    }
}

/// The sink `tracer run` writes standard output with: JSON Lines or text.
pub fn stdout_sink(json: bool) -> Box<dyn Sink> {
    if json {
        Box::new(JsonLinesSink::new(std::io::stdout()))
    } else {
        Box::new(TextSink::new(std::io::stdout()))
    }
}

/// The same on standard error: `tracer record -o -` keeps standard output for the trace.
pub fn stderr_sink(json: bool) -> Box<dyn Sink> {
    if json {
        Box::new(JsonLinesSink::new(std::io::stderr()))
    } else {
        Box::new(TextSink::new(std::io::stderr()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader went away.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_reader_is_output_closed_and_a_full_disk_an_error() {
        assert!(matches!(
            write_flush(&mut Closed, "x"),
            Err(TracerError::OutputClosed)
        ));
        let mut full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        assert!(matches!(
            write_flush(&mut full, "x"),
            Err(TracerError::Output(_))
        ));
    }
}
