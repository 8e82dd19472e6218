//! The kernel's type ids of a few named types, as a small aya `Btf` of the same ids.
//!
//! Loading a tp_btf, fentry or iterator program needs only the kernel's type id of its
//! attach point (`btf_trace_sched_switch`, a function, `bpf_iter_task`). aya finds it in a
//! full parse of vmlinux BTF (~17 ms and ~20 MB of types here). This index has the ids
//! already: the stub keeps the wanted types at their kernel ids and a placeholder at
//! every other id, so aya's lookup by name finds the kernel's id. A wrong id cannot pass
//! silently: the kernel checks the id against the attach point's prototype.
//!
//! aya's types cannot all be made outside it (a typedef only by parsing), so the ids up
//! to the last wanted typedef come from a blob aya parses, and the rest (functions sit
//! far beyond the tracepoint typedefs: `bpf_iter_task` is id ~64k of ~127k here) are
//! appended as types, which costs about two thirds of parsing them.
use aya_obj::btf::{Btf, BtfType, Func, FuncLinkage, Ptr};

use super::{KernelBtf, KIND_FUNC, KIND_PTR, KIND_TYPEDEF};

/// What kind of type an attach point is named by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// `btf_trace_<tracepoint>` (tp_btf).
    Typedef,
    /// A kernel function (fentry) or `bpf_iter_<target>` (iterators).
    Func,
}

impl Named {
    fn kind(self) -> u32 {
        match self {
            Named::Typedef => KIND_TYPEDEF,
            Named::Func => KIND_FUNC,
        }
    }
}

impl KernelBtf {
    /// An aya `Btf` in which each of `names` found in the kernel's BTF has its kernel
    /// type id, kind and name; names the kernel lacks are left out (the loader then says
    /// which one is missing).
    pub fn id_stub(&self, names: &[(Named, &str)]) -> Result<Btf, aya::BtfError> {
        // Typedefs from the index (aya's lookup takes the first of a name, as the index
        // lists them); functions, which the index leaves out, from one pass that
        // compares names in place.
        let mut found: Vec<(u32, u32, &str)> = names
            .iter()
            .filter(|(n, _)| *n == Named::Typedef)
            .filter_map(|&(_, name)| {
                let id = *self.typedefs.get(name)?.as_slice().first()?;
                Some((id, KIND_TYPEDEF, name))
            })
            .collect();
        let funcs: Vec<&str> = names
            .iter()
            .filter(|(n, _)| *n == Named::Func)
            .map(|&(_, name)| name)
            .collect();
        if !funcs.is_empty() {
            for (id, &pos) in self.type_pos.iter().enumerate().skip(1) {
                let Some(t) = self.hdr_at(pos as usize) else {
                    continue;
                };
                if t.kind != Named::Func.kind() {
                    continue;
                }
                for &name in &funcs {
                    if self.name_is(t.name_off, name)
                        && !found.iter().any(|&(_, k, f)| k == KIND_FUNC && f == name)
                    {
                        found.push((id as u32, KIND_FUNC, name));
                    }
                }
            }
        }
        found.sort_unstable_by_key(|f| f.0);
        found.dedup_by_key(|f| f.0);
        let parsed_to = found
            .iter()
            .filter(|f| f.1 == KIND_TYPEDEF)
            .map(|f| f.0)
            .max()
            .unwrap_or(0);
        let (head, tail) = found.split_at(found.partition_point(|f| f.0 <= parsed_to));
        let mut btf = Btf::parse(&stub_blob(head), aya::Endianness::default())?;
        let mut next = parsed_to + 1;
        for &(id, _, name) in tail {
            for _ in next..id {
                btf.add_type(BtfType::Ptr(Ptr::new(0, 0)));
            }
            let name_off = btf.add_string(name);
            btf.add_type(BtfType::Func(Func::new(name_off, 0, FuncLinkage::Global)));
            next = id + 1;
        }
        Ok(btf)
    }

    /// Whether the string at `off` is `name`.
    fn name_is(&self, off: u32, name: &str) -> bool {
        let start = self.str_start + off as usize;
        let end = start + name.len();
        end < self.str_end && &self.data[start..end] == name.as_bytes() && self.data[end] == 0
    }
}

/// The blob: ids 1 to the largest wanted one, each 12 bytes (a nameless pointer to void
/// where no type is wanted), and the wanted names.
fn stub_blob(found: &[(u32, u32, &str)]) -> Vec<u8> {
    let last = found.iter().map(|f| f.0).max().unwrap_or(0);
    let mut strs = vec![0u8];
    let mut types = Vec::with_capacity(last as usize * 12);
    let word = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_ne_bytes());
    for id in 1..=last {
        match found.iter().find(|f| f.0 == id) {
            Some(&(_, kind, name)) => {
                word(&mut types, strs.len() as u32);
                strs.extend_from_slice(name.as_bytes());
                strs.push(0);
                word(&mut types, kind << 24);
                word(&mut types, 0);
            }
            None => {
                word(&mut types, 0);
                word(&mut types, KIND_PTR << 24);
                word(&mut types, 0);
            }
        }
    }
    let mut blob = Vec::with_capacity(24 + types.len() + strs.len());
    blob.extend_from_slice(&0xeb9f_u16.to_ne_bytes());
    blob.extend_from_slice(&[1, 0]); // version 1, no flags
    word(&mut blob, 24); // header length
    word(&mut blob, 0); // types at 0
    word(&mut blob, types.len() as u32);
    word(&mut blob, types.len() as u32); // strings after them
    word(&mut blob, strs.len() as u32);
    blob.extend_from_slice(&types);
    blob.extend_from_slice(&strs);
    blob
}
