//! An interactive flame graph SVG of the folded stacks, drawn by `inferno` (CDDL-1.0),
//! in its off-CPU ("io", blue) palette.
use std::{io::Write, path::Path};

use inferno::flamegraph::{
    color::{BasicPalette, Palette},
    from_lines, Options,
};

use crate::{error::TracerError, model::stacks::OffcpuReport, output::folded, sys::files};

/// The window as a title shows it: "10.0 s".
fn seconds(ns: u64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

/// Draws the report's stacks into `out`.
pub fn write_svg(r: &OffcpuReport, out: &mut dyn Write) -> std::io::Result<()> {
    let lines = folded::lines(r);
    let mut opts = Options::default();
    opts.colors = Palette::Basic(BasicPalette::Io);
    opts.title = format!(
        "Off-CPU time ({}), {}, {}",
        r.states,
        r.target,
        seconds(r.window_ns)
    );
    opts.count_name = "us".to_string();
    opts.name_type = "Function:".to_string();
    if lines.is_empty() {
        // inferno refuses an empty input; an empty graph still says what was traced.
        return from_lines(&mut opts, ["[no off-CPU time] 1"].iter().copied(), out);
    }
    from_lines(&mut opts, lines.iter().map(|s| s.as_str()), out)
}

/// Opens `path` for writing: done before tracing, so a bad path fails at once; a link
/// or file another user planted in /tmp is refused ([`files::create_output`]).
pub fn create(path: &Path) -> Result<std::fs::File, TracerError> {
    files::create_output(path)
}
