//! What a streaming command (`tracer record`, `tracer slow`) adds to a `tracer run`
//! session, so the window, targets, summary and exit paths are the same code.
use std::sync::Arc;

use anyhow::Result;
use aya::Ebpf;

use crate::{bpf::record::RecordLoad, output::report::RecordSummary};

/// What a streaming command adds to a `tracer run` session.
pub trait Extension: Send + Sync {
    /// What the programs stream.
    fn load(&self) -> RecordLoad;
    /// The programs are attached (the target not yet released): start reading.
    fn attached(&self, ebpf: &mut aya::Ebpf) -> Result<()>;
    /// Whether the session should end now (the output failed): it then ends as after a
    /// failure, the command stopped (see [`Extension::error`]).
    fn should_stop(&self) -> bool;
    /// The window closed and the programs are detached: read the rest, finish the
    /// output; sections and notices for the final report. `threads`: every thread the
    /// report lists, (TID, TGID, name), those that never ran included.
    fn finish(
        &self,
        ebpf: &mut Ebpf,
        threads: &[(u32, u32, String)],
    ) -> Result<(Option<RecordSummary>, Vec<String>)>;
    /// Whether `tracer run`'s report is printed at the end.
    fn report(&self) -> bool;
    /// After [`Extension::finish`]: the failure that ended the output, if one did. The
    /// run prints its report first, then ends with this error.
    fn error(&self) -> Option<anyhow::Error> {
        None
    }
}

/// An optional [`Extension`] carried in `RunConfig` (none for `tracer run` itself).
#[derive(Clone, Default)]
pub struct Hook(pub Option<Arc<dyn Extension>>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Hook(on)"
        } else {
            "Hook(off)"
        })
    }
}

impl Hook {
    pub fn load(&self) -> RecordLoad {
        self.0.as_ref().map(|e| e.load()).unwrap_or_default()
    }
    pub fn attached(&self, ebpf: &mut Ebpf) -> Result<()> {
        match &self.0 {
            Some(e) => e.attached(ebpf),
            None => Ok(()),
        }
    }
    pub fn should_stop(&self) -> bool {
        self.0.as_ref().is_some_and(|e| e.should_stop())
    }
    pub fn finish(
        &self,
        ebpf: &mut Ebpf,
        threads: &[(u32, u32, String)],
    ) -> Result<(Option<RecordSummary>, Vec<String>)> {
        match &self.0 {
            Some(e) => e.finish(ebpf, threads),
            None => Ok((None, Vec::new())),
        }
    }
    pub fn report(&self) -> bool {
        self.0.as_ref().is_none_or(|e| e.report())
    }
    pub fn error(&self) -> Option<anyhow::Error> {
        self.0.as_ref().and_then(|e| e.error())
    }
}
