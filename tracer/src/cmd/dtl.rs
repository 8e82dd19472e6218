//! `tracer dtl`: the pseries hypervisor's dispatch statistics and Dispatch Trace Log.
use anyhow::Context as _;

use crate::{
    error::TracerError,
    pseries::{
        dtl::{collect_blocking, format_text, DtlConfig},
        vcpudispatch,
    },
    sys::root::Root,
};

/// `tracer dtl`.
pub fn run(args: &DtlConfig, root: &Root) -> anyhow::Result<i32> {
    if !vcpudispatch::is_pseries(root) {
        // Elsewhere the hypervisor's delays show as steal time: say where to look.
        return Err(anyhow::anyhow!(
            "{}; the Dispatch Trace Log exists only on IBM POWER shared-processor partitions: \
             on this machine `tracer run` shows the time the hypervisor kept vCPUs from running \
             (steal time per CPU, its `hypervisor:` line)",
            TracerError::NotPseries(root.path(vcpudispatch::STATS_PATH))
        ));
    }
    let report = collect_blocking(args, root)?;
    if args.json {
        crate::output::stdout::emit(
            &serde_json::to_string_pretty(&report).context("encoding the JSON report")?,
        )?;
    } else {
        crate::output::stdout::emit_raw(&format_text(&report))?;
    }
    Ok(0)
}
