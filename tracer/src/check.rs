//! `tracer check`: what this machine offers (issue 6 fills this in).
use crate::{cli::CheckArgs, root::Root};

pub fn run(_args: &CheckArgs, _root: &Root) -> anyhow::Result<i32> {
    anyhow::bail!("`tracer check` is not implemented yet")
}
