//! `tracer dtl`: pseries Dispatch Trace Log (being written).
use crate::{cli::DtlArgs, root::Root};

pub fn run(_args: &DtlArgs, _root: &Root) -> anyhow::Result<i32> {
    anyhow::bail!("`tracer dtl` is not implemented yet")
}
