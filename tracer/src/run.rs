//! `tracer run` (being written).
use crate::{cli::RunArgs, root::Root};

pub fn run(_args: RunArgs, _root: Root) -> anyhow::Result<i32> {
    anyhow::bail!("`tracer run` is not implemented yet")
}
