//! Privileges: check them before doing anything, drop them once the programs are attached.
use caps::{CapSet, Capability};

use crate::error::TracerError;

/// Whether this process may load and attach tracing programs and open perf events:
/// CAP_BPF with CAP_PERFMON (5.8+), or CAP_SYS_ADMIN, which older kernels require.
pub fn check() -> Result<(), TracerError> {
    let has = |c| caps::has_cap(None, CapSet::Effective, c).unwrap_or(false);
    if (has(Capability::CAP_BPF) && has(Capability::CAP_PERFMON)) || has(Capability::CAP_SYS_ADMIN)
    {
        Ok(())
    } else {
        Err(TracerError::NotPrivileged)
    }
}

/// After attaching, nothing the run does needs a capability: the map and perf fds are
/// open, and the files it restores at exit are root-owned (DAC, not capabilities).
/// Capabilities are per thread: call this before any other thread is started.
pub fn drop_all() -> Result<(), caps::errors::CapsError> {
    caps::clear(None, CapSet::Effective)?;
    caps::clear(None, CapSet::Permitted)?;
    caps::clear(None, CapSet::Inheritable)?;
    Ok(())
}

/// The user that started us through sudo (SUDO_UID/SUDO_GID), for running `-- COMMAND`
/// as that user rather than root.
pub fn sudo_user() -> Option<(u32, u32)> {
    let uid = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    (uid != 0).then_some((uid, gid))
}
