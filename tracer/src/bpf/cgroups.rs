//! `tracer serve`'s cgroup names from the kernel: the `cgroup_mkdir` program (the eBPF
//! side's `cgroups.rs`) and its ring of new cgroups. Loaded with
//! `LoadOptions::thread_cgroups`, which also has every switch-out write the thread's
//! cgroup id into its entry; attached by serve alone (`tracer run` loads neither).
use anyhow::{anyhow, Context as _, Result};
use aya::{
    maps::{MapData, PerCpuArray, RingBuf},
    Ebpf,
};
use tracer_common::cgroup::{MkdirEvent, MkdirFields, PATH_LEN};

use crate::{
    bpf::table::CGROUP_MKDIR,
    sys::{root::Root, tracefs},
};

/// The ring's size: 256 KiB hold ~480 events between two drains (serve drains it as it
/// fills); one page when unused.
pub(crate) fn ring_bytes(used: bool) -> u32 {
    if used {
        256 * 1024
    } else {
        4096
    }
}

/// The record's layout, from tracefs.
pub(crate) fn mkdir_fields(root: &Root) -> Result<MkdirFields> {
    let dir = tracefs::tracefs_dir(root)?;
    let f = tracefs::event_format(&dir, "cgroup", "cgroup_mkdir")
        .context("the cgroup_mkdir tracepoint (names cgroups made between two reads)")?;
    let path = f.field("path")?;
    if path.size != 4 {
        return Err(anyhow!(
            "cgroup_mkdir: `path` is {} bytes, not a __data_loc",
            path.size
        ));
    }
    Ok(MkdirFields {
        root: f.field("root")?.offset,
        level: f.field("level")?.offset,
        id: f.field("id")?.offset,
        path: path.offset,
    })
}

/// A new cgroup v2 directory, as the kernel named it when it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    pub id: u64,
    /// Below the mount, `/a/b`; bytes as the kernel has them.
    pub path: Vec<u8>,
    /// The path was longer than an event holds: `path` is its start only.
    pub cut: bool,
}

/// The attached program's ring.
pub struct MkdirRing {
    ring: RingBuf<MapData>,
}

impl MkdirRing {
    /// Loads and attaches `cgroup_mkdir_tp` and takes its ring. Call before the cgroup
    /// tree is first walked: a cgroup made in between is then in one or the other.
    pub fn attach(ebpf: &mut Ebpf) -> Result<MkdirRing> {
        CGROUP_MKDIR
            .load(ebpf, None)
            .context("loading cgroup_mkdir_tp")?;
        CGROUP_MKDIR
            .attach(ebpf)
            .context("attaching to cgroup:cgroup_mkdir")?;
        let ring = RingBuf::try_from(
            ebpf.take_map("CGROUP_EVENTS")
                .context("CGROUP_EVENTS map missing")?,
        )?;
        Ok(MkdirRing { ring })
    }

    /// A descriptor that polls readable when events wait (inside the tokio runtime).
    pub fn watch(&self) -> Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
        use std::os::fd::AsFd as _;
        let fd = self.ring.as_fd().try_clone_to_owned()?;
        // SAFETY: the AsyncFd owns `fd`, a duplicate open until it is dropped.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(|e| anyhow!("watching the cgroup events: {e}"))
    }

    /// The cgroup v2 directories made since the last call.
    pub fn drain(&mut self) -> Vec<Made> {
        let mut out = Vec::new();
        while let Some(item) = self.ring.next() {
            if item.len() < std::mem::size_of::<MkdirEvent>() {
                continue;
            }
            // SAFETY: the program wrote a MkdirEvent; read unaligned from the ring.
            let e: MkdirEvent =
                unsafe { std::ptr::read_unaligned(item.as_ptr() as *const MkdirEvent) };
            if let Some(m) = decode(&e) {
                out.push(m);
            }
        }
        out
    }
}

/// An event of the v2 hierarchy as a [`Made`]; None for the v1 hierarchies' (their ids
/// are not what the switch programs record) and for an unreadable path.
pub fn decode(e: &MkdirEvent) -> Option<Made> {
    if e.root != 0 || e.id == 0 {
        return None;
    }
    let n = e.path.iter().position(|&b| b == 0).unwrap_or(PATH_LEN);
    if n == 0 {
        return None;
    }
    Some(Made {
        id: e.id,
        path: e.path[..n].to_vec(),
        cut: e.len as usize > PATH_LEN,
    })
}

/// Events the ring had no room for, since the start.
pub fn lost(ebpf: &Ebpf) -> u64 {
    let Some(m) = ebpf.map("CGROUP_EVENTS_LOST") else {
        return 0;
    };
    let Ok(a) = PerCpuArray::<_, u64>::try_from(m) else {
        return 0;
    };
    a.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(root: i32, id: u64, path: &[u8], len: u32) -> MkdirEvent {
        let mut e = MkdirEvent {
            id,
            root,
            level: 1,
            len,
            _pad: 0,
            path: [0; PATH_LEN],
        };
        e.path[..path.len()].copy_from_slice(path);
        e
    }

    #[test]
    fn only_the_v2_hierarchy_and_cut_paths_say_so() {
        let m = decode(&event(0, 82162, b"/tx-probe", 10)).unwrap();
        assert_eq!(
            (m.id, m.path.as_slice(), m.cut),
            (82162, &b"/tx-probe"[..], false)
        );
        assert_eq!(
            decode(&event(1, 17, b"/tx-probe", 10)),
            None,
            "a v1 hierarchy"
        );
        assert_eq!(decode(&event(0, 5, b"", 1)), None);
        let long = vec![b'a'; PATH_LEN - 1];
        let m = decode(&event(0, 9, &long, 900)).unwrap();
        assert!(m.cut && m.path.len() == PATH_LEN - 1);
        // Bytes that are not UTF-8 stay bytes.
        assert_eq!(decode(&event(0, 3, b"/x\xff", 4)).unwrap().path, b"/x\xff");
    }
}
