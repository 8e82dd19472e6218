//! Folded stacks (`comm;user frames;kernel frames value`, root first, microseconds), the
//! input format of `flamegraph.pl` and `inferno-flamegraph`, as offcputime `-f` prints.
use std::io::Write;

use crate::model::stacks::OffcpuReport;

/// The folded lines of the report.
pub fn lines(r: &OffcpuReport) -> Vec<String> {
    r.folded()
        .into_iter()
        .map(|(stack, us)| format!("{stack} {us}"))
        .collect()
}

/// Writes the folded lines.
pub fn write(r: &OffcpuReport, out: &mut dyn Write) -> std::io::Result<()> {
    for l in lines(r) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}
