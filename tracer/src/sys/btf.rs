//! A small reader of kernel BTF (`/sys/kernel/btf/vmlinux`).
//!
//! The eBPF programs must not hard-code kernel struct layouts, so user space looks up
//! member offsets here and hands them over in the program config. Only what the tracer
//! needs is implemented: struct/union members (through anonymous members), sizes, and
//! the parameter count of tracepoint prototypes. The format is described in the kernel's
//! Documentation/bpf/btf.rst.
//!
//! Construction makes one pass over the type section: it validates every record's
//! extent, remembers where each type starts and indexes struct, union and typedef
//! names. Members are decoded only when asked for, so building the index of a ~6 MB
//! vmlinux BTF stays at a few milliseconds.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::TracerError;

const BTF_MAGIC: u16 = 0xeb9f;
/// Size of the original (version 1) header; later kernels may append fields.
const MIN_HDR_LEN: usize = 24;
/// Bounds recursion through typedef chains and nested anonymous members, so a
/// malicious or corrupt blob with a type cycle cannot loop or overflow the stack.
const MAX_DEPTH: u32 = 64;
/// Bounds the members visited in one lookup: a crafted blob whose anonymous members
/// refer back to their own struct would otherwise branch exponentially.
const MAX_VISITS: u32 = 1 << 16;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Type ids sharing one name (C allows e.g. two `struct foo` in different units).
#[derive(Debug, Clone)]
enum Ids {
    One(u32),
    Many(Vec<u32>),
}

impl Ids {
    fn push(&mut self, id: u32) {
        match self {
            Ids::One(first) => *self = Ids::Many(vec![*first, id]),
            Ids::Many(v) => v.push(id),
        }
    }

    fn as_slice(&self) -> &[u32] {
        match self {
            Ids::One(id) => std::slice::from_ref(id),
            Ids::Many(v) => v,
        }
    }
}

/// The common part of every type record.
#[derive(Debug, Clone, Copy)]
struct TypeHdr {
    name_off: u32,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    /// `size` or `type`, depending on the kind.
    size_type: u32,
    /// Byte position of the record in the blob (start of the common part).
    pos: usize,
}

/// A member found by name, with its position relative to the outermost struct.
#[derive(Debug, Clone, Copy)]
struct FoundMember {
    bit_offset: u64,
    type_id: u32,
    bitfield: bool,
}

/// Parsed kernel BTF with an index of struct, union and typedef names.
#[derive(Debug)]
pub struct KernelBtf {
    /// Where the blob came from, for error messages.
    path: PathBuf,
    data: Vec<u8>,
    big_endian: bool,
    str_start: usize,
    str_end: usize,
    /// Byte position of each type record, indexed by type id (id 0 is `void`).
    type_pos: Vec<u32>,
    /// Struct and union tags (one C namespace).
    tags: HashMap<Box<str>, Ids>,
    typedefs: HashMap<Box<str>, Ids>,
    /// BTF has no pointer size; taken from `long`, as libbpf does.
    ptr_size: u32,
}

impl KernelBtf {
    /// Reads and indexes a BTF file such as `/sys/kernel/btf/vmlinux`.
    pub fn from_file(path: &Path) -> Result<Self, TracerError> {
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TracerError::NoBtf(path.to_path_buf()))
            }
            Err(source) => {
                return Err(TracerError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let mut btf = Self::parse(data).map_err(|why| TracerError::Malformed {
            path: path.to_path_buf(),
            why,
        })?;
        btf.path = path.to_path_buf();
        Ok(btf)
    }

    /// Parses a BTF blob held in memory.
    pub fn from_bytes(data: &[u8]) -> Result<Self, String> {
        Self::parse(data.to_vec())
    }

    fn parse(data: Vec<u8>) -> Result<Self, String> {
        if data.len() < MIN_HDR_LEN {
            return Err(format!(
                "{} bytes is too short for a BTF header",
                data.len()
            ));
        }
        let big_endian = match [data[0], data[1]] {
            m if u16::from_le_bytes(m) == BTF_MAGIC => false,
            m if u16::from_be_bytes(m) == BTF_MAGIC => true,
            m => return Err(format!("bad magic {:02x}{:02x} (not BTF)", m[0], m[1])),
        };
        let mut btf = KernelBtf {
            path: PathBuf::from("kernel BTF"),
            data,
            big_endian,
            str_start: 0,
            str_end: 0,
            type_pos: vec![0],
            tags: HashMap::new(),
            typedefs: HashMap::new(),
            ptr_size: 8,
        };
        let version = btf.data[2];
        if version != 1 {
            return Err(format!("unsupported BTF version {version}"));
        }
        let hdr_len = btf.u32_at(4).unwrap_or(0) as usize;
        if hdr_len < MIN_HDR_LEN || hdr_len > btf.data.len() {
            return Err(format!("bad header length {hdr_len}"));
        }
        let section = |off: usize, what: &str| -> Result<(usize, usize), String> {
            let start = btf.u32_at(off).unwrap_or(0) as usize;
            let len = btf.u32_at(off + 4).unwrap_or(0) as usize;
            let start = hdr_len
                .checked_add(start)
                .ok_or_else(|| format!("{what} section offset overflows"))?;
            let end = start
                .checked_add(len)
                .filter(|&end| end <= btf.data.len())
                .ok_or_else(|| {
                    format!(
                        "{what} section ({len} bytes at {start}) runs past the end ({} bytes)",
                        btf.data.len()
                    )
                })?;
            Ok((start, end))
        };
        let (type_start, type_end) = section(8, "type")?;
        let (str_start, str_end) = section(16, "string")?;
        btf.str_start = str_start;
        btf.str_end = str_end;
        if str_start < str_end && btf.data[str_start] != 0 {
            return Err("string section does not start with an empty string".into());
        }
        btf.index_types(type_start, type_end)?;
        Ok(btf)
    }

    /// The single pass over the type section.
    fn index_types(&mut self, start: usize, end: usize) -> Result<(), String> {
        // Roughly 20 bytes a record on vmlinux; avoids regrowing a 150k-entry vector.
        let mut type_pos: Vec<u32> = Vec::with_capacity((end - start) / 20 + 1);
        type_pos.push(0);
        let mut tags: HashMap<Box<str>, Ids> = HashMap::new();
        let mut typedefs: HashMap<Box<str>, Ids> = HashMap::new();
        let mut ptr_size = self.ptr_size;
        let mut pos = start;
        while pos < end {
            let id = type_pos.len() as u32;
            let t = self
                .hdr_at(pos)
                .filter(|_| pos + 12 <= end)
                .ok_or_else(|| format!("type {id} truncated at byte {pos}"))?;
            let vlen = t.vlen as usize;
            let extra = match t.kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
                KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
                k => return Err(format!("type {id} has unknown kind {k}")),
            };
            let next = pos + 12 + extra;
            if next > end {
                return Err(format!(
                    "type {id} (kind {}) runs past the type section",
                    t.kind
                ));
            }
            type_pos.push(u32::try_from(pos).map_err(|_| "BTF larger than 4 GiB".to_string())?);
            match t.kind {
                KIND_STRUCT | KIND_UNION | KIND_TYPEDEF if t.name_off != 0 => {
                    let name = self
                        .str_at(t.name_off)
                        .ok_or_else(|| format!("type {id} has a bad name offset {}", t.name_off))?;
                    let map = if t.kind == KIND_TYPEDEF {
                        &mut typedefs
                    } else {
                        &mut tags
                    };
                    if let Some(ids) = map.get_mut(name) {
                        ids.push(id);
                    } else {
                        map.insert(name.into(), Ids::One(id));
                    }
                }
                KIND_INT
                    if matches!(t.size_type, 4 | 8)
                        && matches!(
                            self.str_at(t.name_off),
                            Some("long int" | "long unsigned int" | "long" | "unsigned long")
                        ) =>
                {
                    ptr_size = t.size_type;
                }
                _ => {}
            }
            pos = next;
        }
        self.type_pos = type_pos;
        self.tags = tags;
        self.typedefs = typedefs;
        self.ptr_size = ptr_size;
        Ok(())
    }

    fn u32_at(&self, pos: usize) -> Option<u32> {
        let b: [u8; 4] = self.data.get(pos..pos.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn hdr_at(&self, pos: usize) -> Option<TypeHdr> {
        let info = self.u32_at(pos + 4)?;
        Some(TypeHdr {
            name_off: self.u32_at(pos)?,
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kind_flag: info >> 31 == 1,
            size_type: self.u32_at(pos + 8)?,
            pos,
        })
    }

    /// The record of type `id`; `None` for `void` (0) and ids out of range.
    fn ty(&self, id: u32) -> Option<TypeHdr> {
        if id == 0 {
            return None;
        }
        let pos = *self.type_pos.get(id as usize)?;
        self.hdr_at(pos as usize)
    }

    /// A NUL-terminated name from the string section.
    fn str_at(&self, off: u32) -> Option<&str> {
        let start = self.str_start.checked_add(off as usize)?;
        if start >= self.str_end {
            return None;
        }
        let bytes = &self.data[start..self.str_end];
        let len = bytes.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&bytes[..len]).ok()
    }

    /// Follows typedefs and qualifiers to the type that gives the layout.
    fn resolve(&self, mut id: u32) -> Option<TypeHdr> {
        for _ in 0..MAX_DEPTH {
            let t = self.ty(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_type
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// Size in bytes of a type, through typedefs, qualifiers and arrays.
    fn size_of(&self, id: u32, depth: u32) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        let t = self.resolve(id)?;
        match t.kind {
            KIND_INT | KIND_ENUM | KIND_ENUM64 | KIND_STRUCT | KIND_UNION | KIND_FLOAT
            | KIND_DATASEC => Some(u64::from(t.size_type)),
            KIND_PTR => Some(u64::from(self.ptr_size)),
            KIND_ARRAY => {
                let elem = self.u32_at(t.pos + 12)?;
                let nelems = self.u32_at(t.pos + 20)?;
                self.size_of(elem, depth + 1)?
                    .checked_mul(u64::from(nelems))
            }
            KIND_VAR => self.size_of(t.size_type, depth + 1),
            _ => None,
        }
    }

    /// True when a member without kind_flag is a bitfield encoded in its INT type.
    fn int_is_bitfield(&self, type_id: u32) -> bool {
        match self.resolve(type_id) {
            Some(t) if t.kind == KIND_INT => {
                let enc = self.u32_at(t.pos + 12).unwrap_or(0);
                let bits = enc & 0xff;
                let offset = (enc >> 16) & 0xff;
                offset != 0 || u64::from(bits) != u64::from(t.size_type) * 8
            }
            _ => false,
        }
    }

    /// Searches the members of struct/union `t`, descending into anonymous ones.
    fn find_in(
        &self,
        t: TypeHdr,
        member: &str,
        depth: u32,
        budget: &mut u32,
    ) -> Option<FoundMember> {
        if depth > MAX_DEPTH || !matches!(t.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        for i in 0..t.vlen as usize {
            *budget = budget.checked_sub(1)?;
            let m = t.pos + 12 + 12 * i;
            let name_off = self.u32_at(m)?;
            let type_id = self.u32_at(m + 4)?;
            let raw = self.u32_at(m + 8)?;
            let (bit_offset, bitfield) = if t.kind_flag {
                (u64::from(raw & 0x00ff_ffff), raw >> 24 != 0)
            } else {
                (u64::from(raw), self.int_is_bitfield(type_id))
            };
            let name = self.str_at(name_off).unwrap_or("");
            if name.is_empty() {
                if let Some(inner) = self.resolve(type_id) {
                    if let Some(f) = self.find_in(inner, member, depth + 1, budget) {
                        return Some(FoundMember {
                            bit_offset: bit_offset + f.bit_offset,
                            ..f
                        });
                    }
                }
            } else if name == member {
                return Some(FoundMember {
                    bit_offset,
                    type_id,
                    bitfield,
                });
            }
        }
        None
    }

    /// Looks `member` up in every struct or union called `strukt`.
    fn find_member(&self, strukt: &str, member: &str) -> Result<FoundMember, TracerError> {
        let ids = self
            .tags
            .get(strukt)
            .ok_or_else(|| self.err(format!("no struct {strukt} in the kernel BTF")))?;
        let mut budget = MAX_VISITS;
        ids.as_slice()
            .iter()
            .filter_map(|&id| self.ty(id))
            .find_map(|t| self.find_in(t, member, 0, &mut budget))
            .ok_or_else(|| self.err(format!("struct {strukt} has no member {member}")))
    }

    fn err(&self, why: String) -> TracerError {
        TracerError::Malformed {
            path: self.path.clone(),
            why,
        }
    }

    /// Byte offset of `member` in `struct strukt`, searching anonymous struct/union
    /// members recursively (e.g. task_struct fields inside anonymous unions).
    pub fn member_offset(&self, strukt: &str, member: &str) -> Result<u32, TracerError> {
        let f = self.find_member(strukt, member)?;
        if f.bitfield || f.bit_offset % 8 != 0 {
            return Err(self.err(format!(
                "{strukt}.{member} is a bitfield; it has no byte offset"
            )));
        }
        u32::try_from(f.bit_offset / 8)
            .map_err(|_| self.err(format!("{strukt}.{member} has an absurd offset")))
    }

    /// Size in bytes of `member` in `struct strukt`, through typedefs, qualifiers and arrays.
    pub fn member_size(&self, strukt: &str, member: &str) -> Result<u32, TracerError> {
        let f = self.find_member(strukt, member)?;
        if f.bitfield {
            return Err(self.err(format!(
                "{strukt}.{member} is a bitfield; it has no byte size"
            )));
        }
        self.size_of(f.type_id, 0)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or_else(|| {
                self.err(format!(
                    "cannot size {strukt}.{member} (type {})",
                    f.type_id
                ))
            })
    }

    /// True when `struct strukt` has `member` (bitfields included).
    pub fn has_member(&self, strukt: &str, member: &str) -> bool {
        self.find_member(strukt, member).is_ok()
    }

    /// Number of parameters of the function prototype a typedef points to, e.g.
    /// `btf_trace_sched_switch` (typedef -> pointer -> FUNC_PROTO; the first parameter
    /// is `void *__data`). None when absent or not a function (pointer) typedef.
    pub fn typedef_proto_params(&self, typedef: &str) -> Option<usize> {
        let ids = self.typedefs.get(typedef)?;
        ids.as_slice().iter().find_map(|&id| {
            let mut t = self.resolve(id)?;
            if t.kind == KIND_PTR {
                t = self.resolve(t.size_type)?;
            }
            (t.kind == KIND_FUNC_PROTO).then_some(t.vlen as usize)
        })
    }

    /// Number of types, `void` included; for diagnostics.
    pub fn type_count(&self) -> usize {
        self.type_pos.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds BTF blobs by hand, in either byte order.
    struct Builder {
        be: bool,
        types: Vec<u8>,
        strs: Vec<u8>,
        next_id: u32,
    }

    impl Builder {
        fn new(be: bool) -> Self {
            Builder {
                be,
                types: Vec::new(),
                strs: vec![0],
                next_id: 1,
            }
        }

        fn word(&self, v: u32, out: &mut Vec<u8>) {
            out.extend_from_slice(&if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            });
        }

        fn name(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strs.len() as u32;
            self.strs.extend_from_slice(s.as_bytes());
            self.strs.push(0);
            off
        }

        /// Adds a type record; returns its id.
        fn add(
            &mut self,
            name: &str,
            kind: u32,
            kflag: bool,
            vlen: u32,
            st: u32,
            extra: &[u32],
        ) -> u32 {
            let name_off = self.name(name);
            let info = (kind << 24) | vlen | if kflag { 1 << 31 } else { 0 };
            let mut rec = Vec::new();
            for w in [name_off, info, st].iter().chain(extra) {
                self.word(*w, &mut rec);
            }
            self.types.extend_from_slice(&rec);
            self.next_id += 1;
            self.next_id - 1
        }

        fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
            self.add(name, KIND_INT, false, 0, size, &[bits])
        }

        /// `members`: (name, type id, offset word).
        fn compound(
            &mut self,
            kind: u32,
            name: &str,
            kflag: bool,
            size: u32,
            members: &[(&str, u32, u32)],
        ) -> u32 {
            let mut extra = Vec::new();
            for (n, t, off) in members {
                extra.extend([self.name(n), *t, *off]);
            }
            self.add(name, kind, kflag, members.len() as u32, size, &extra)
        }

        fn finish(&self) -> Vec<u8> {
            let mut out = Vec::new();
            if self.be {
                out.extend_from_slice(&BTF_MAGIC.to_be_bytes());
            } else {
                out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
            }
            out.extend_from_slice(&[1, 0]);
            let tl = self.types.len() as u32;
            for w in [24, 0, tl, tl, self.strs.len() as u32] {
                self.word(w, &mut out);
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strs);
            out
        }
    }

    /// struct task { int pid; union { long state; int __state; };
    ///               struct { int a; int tgid; }; char comm[16]; unsigned flags:3; };
    /// typedef void (*btf_trace_x)(void *, int, struct task *);
    /// struct kf { int lo:4; int hi:4; int whole; } with kind_flag bitfields.
    fn sample(be: bool) -> Vec<u8> {
        let mut b = Builder::new(be);
        let int = b.int("int", 4, 32);
        let long = b.int("long int", 8, 64);
        let chr = b.int("char", 1, 8);
        let uint3 = b.int("unsigned int", 4, 3); // old-style bitfield encoding
        let pid_t = b.add("pid_t", KIND_TYPEDEF, false, 0, int, &[]);
        let cpid = b.add("", KIND_CONST, false, 0, pid_t, &[]);
        let anon_union = b.compound(
            KIND_UNION,
            "",
            false,
            8,
            &[("state", long, 0), ("__state", int, 0)],
        );
        let anon_struct = b.compound(
            KIND_STRUCT,
            "",
            false,
            8,
            &[("a", int, 0), ("tgid", cpid, 32)],
        );
        let arr = b.add("", KIND_ARRAY, false, 0, 0, &[chr, int, 16]);
        let task = b.compound(
            KIND_STRUCT,
            "task",
            false,
            48,
            &[
                ("pid", pid_t, 0),
                ("", anon_union, 64),
                ("", anon_struct, 128),
                ("comm", arr, 192),
                ("flags", uint3, 320),
            ],
        );
        let ptask = b.add("", KIND_PTR, false, 0, task, &[]);
        let void_ptr = b.add("", KIND_PTR, false, 0, 0, &[]);
        let proto = b.add(
            "",
            KIND_FUNC_PROTO,
            false,
            3,
            0,
            &[0, void_ptr, 0, int, 0, ptask],
        );
        let fptr = b.add("", KIND_PTR, false, 0, proto, &[]);
        b.add("btf_trace_x", KIND_TYPEDEF, false, 0, fptr, &[]);
        b.add("not_a_fn", KIND_TYPEDEF, false, 0, int, &[]);
        b.compound(
            KIND_STRUCT,
            "kf",
            true,
            8,
            &[
                ("lo", int, 4 << 24),
                ("hi", int, (4 << 24) | 4),
                ("whole", int, 32),
            ],
        );
        // Kinds the reader must skip over correctly.
        b.add("E", KIND_ENUM, false, 2, 4, &[0, 1, 0, 2]);
        b.add("E64", KIND_ENUM64, false, 1, 8, &[0, 1, 0]);
        b.add("d", KIND_DECL_TAG, false, 0, task, &[0xffff_ffff]);
        b.add("v", KIND_VAR, false, 0, int, &[1]);
        b.add(".data", KIND_DATASEC, false, 1, 4, &[22, 0, 4]);
        b.add("double", KIND_FLOAT, false, 0, 8, &[]);
        b.finish()
    }

    #[test]
    fn members_through_anonymous_unions_and_typedefs() {
        for be in [false, true] {
            let btf = KernelBtf::from_bytes(&sample(be)).expect("parses");
            assert_eq!(btf.member_offset("task", "pid").ok(), Some(0));
            assert_eq!(btf.member_size("task", "pid").ok(), Some(4));
            assert_eq!(btf.member_offset("task", "__state").ok(), Some(8));
            assert_eq!(btf.member_size("task", "state").ok(), Some(8));
            assert_eq!(btf.member_offset("task", "tgid").ok(), Some(20));
            assert_eq!(btf.member_size("task", "tgid").ok(), Some(4));
            assert_eq!(btf.member_offset("task", "comm").ok(), Some(24));
            assert_eq!(btf.member_size("task", "comm").ok(), Some(16));
            assert!(btf.has_member("task", "tgid"));
            assert!(!btf.has_member("task", "nope"));
            assert!(!btf.has_member("nostruct", "pid"));
            assert_eq!(btf.typedef_proto_params("btf_trace_x"), Some(3));
            assert_eq!(btf.typedef_proto_params("not_a_fn"), None);
            assert_eq!(btf.typedef_proto_params("absent"), None);
        }
    }

    #[test]
    fn bitfields_have_no_byte_offset() {
        let btf = KernelBtf::from_bytes(&sample(false)).expect("parses");
        // Old-style: INT with 3 bits.
        assert!(btf.has_member("task", "flags"));
        let e = btf.member_offset("task", "flags").unwrap_err().to_string();
        assert!(e.contains("task.flags") && e.contains("bitfield"), "{e}");
        assert!(btf.member_size("task", "flags").is_err());
        // kind_flag: bitfield size in the offset word.
        assert!(btf.member_offset("kf", "lo").is_err());
        assert!(btf.member_offset("kf", "hi").is_err());
        assert_eq!(btf.member_offset("kf", "whole").ok(), Some(4));
    }

    #[test]
    fn missing_names_are_reported() {
        let btf = KernelBtf::from_bytes(&sample(false)).expect("parses");
        let e = btf.member_offset("task", "nope").unwrap_err().to_string();
        assert!(e.contains("task") && e.contains("nope"), "{e}");
        let e = btf.member_size("ghost", "pid").unwrap_err().to_string();
        assert!(e.contains("ghost"), "{e}");
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        let good = sample(false);
        assert!(KernelBtf::from_bytes(&[]).is_err());
        assert!(KernelBtf::from_bytes(&good[..10]).is_err());
        let mut bad_magic = good.clone();
        bad_magic[0] = 0;
        assert!(KernelBtf::from_bytes(&bad_magic)
            .unwrap_err()
            .contains("magic"));
        // Every truncation and every single-byte corruption must fail or parse, never panic.
        for n in 0..good.len() {
            let _ = KernelBtf::from_bytes(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut d = good.clone();
                d[i] = v;
                if let Ok(btf) = KernelBtf::from_bytes(&d) {
                    let _ = btf.member_offset("task", "comm");
                    let _ = btf.member_size("task", "comm");
                    let _ = btf.typedef_proto_params("btf_trace_x");
                }
            }
        }
    }

    #[test]
    fn type_cycles_terminate() {
        let mut b = Builder::new(false);
        // typedef a -> typedef b -> typedef a; struct s { a x; struct s-anon... }
        b.add("a", KIND_TYPEDEF, false, 0, 2, &[]);
        b.add("b", KIND_TYPEDEF, false, 0, 1, &[]);
        // An anonymous member whose type is the struct itself.
        b.compound(KIND_STRUCT, "s", false, 4, &[("x", 1, 0), ("", 3, 0)]);
        let btf = KernelBtf::from_bytes(&b.finish()).expect("parses");
        assert!(btf.member_size("s", "x").is_err());
        assert!(btf.member_offset("s", "y").is_err());
        assert_eq!(btf.typedef_proto_params("a"), None);
    }

    #[test]
    fn self_referencing_anonymous_members_stay_cheap() {
        let mut b = Builder::new(false);
        // struct s { <anon s>; <anon s>; ... }: 2^64 paths without a visit budget.
        b.compound(
            KIND_STRUCT,
            "s",
            false,
            4,
            &[("", 1, 0), ("", 1, 0), ("", 1, 0)],
        );
        let btf = KernelBtf::from_bytes(&b.finish()).expect("parses");
        let t0 = std::time::Instant::now();
        assert!(!btf.has_member("s", "x"));
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn missing_file_is_no_btf() {
        let e = KernelBtf::from_file(Path::new("/nonexistent/btf/vmlinux")).unwrap_err();
        assert!(matches!(e, TracerError::NoBtf(_)), "{e}");
    }

    #[test]
    #[ignore = "needs the running kernel's BTF (/sys/kernel/btf/vmlinux); cargo xtask test runs it"]
    fn live_vmlinux() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        let data = std::fs::read(path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the tracer needs a kernel built with CONFIG_DEBUG_INFO_BTF)",
                path.display()
            )
        });
        let t0 = std::time::Instant::now();
        let btf = KernelBtf::from_bytes(&data).expect("vmlinux BTF parses");
        let took = t0.elapsed();
        eprintln!(
            "indexed {} bytes, {} types in {:?}",
            data.len(),
            btf.type_count(),
            took
        );
        for m in ["pid", "tgid", "comm", "__state"] {
            assert!(btf.has_member("task_struct", m), "task_struct.{m}");
        }
        let pid = btf.member_offset("task_struct", "pid").expect("pid");
        let tgid = btf.member_offset("task_struct", "tgid").expect("tgid");
        let comm = btf.member_offset("task_struct", "comm").expect("comm");
        assert!(
            pid > 0 && pid < tgid && tgid < 16384,
            "pid {pid} tgid {tgid}"
        );
        assert!(comm > tgid && comm < 16384, "comm {comm}");
        assert_eq!(btf.member_size("task_struct", "comm").ok(), Some(16));
        assert_eq!(btf.member_size("task_struct", "pid").ok(), Some(4));
        assert_eq!(btf.member_size("task_struct", "__state").ok(), Some(4));
        // The context pointer and the tracepoint's arguments: 5.18 added `prev_state`
        // to sched_switch's three, so the count follows from the kernel's version.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
        let version: Vec<u32> = release
            .split(|c: char| !c.is_ascii_digit())
            .take(2)
            .map(|n| n.parse().expect("kernel version"))
            .collect();
        let want = if (version[0], version[1]) >= (5, 18) {
            5
        } else {
            4
        };
        assert_eq!(
            btf.typedef_proto_params("btf_trace_sched_switch"),
            Some(want),
            "kernel {}",
            release.trim()
        );
        assert!(btf.typedef_proto_params("btf_trace_sched_wakeup").is_some());
    }
}
