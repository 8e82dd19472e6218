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

/// Where the kernel describes its own types.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

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
    data: blob::Blob,
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
        let data = match blob::Blob::open(path) {
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
        Self::parse(blob::Blob::Copy(data.to_vec()))
    }

    fn parse(data: blob::Blob) -> Result<Self, String> {
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

mod blob;
mod stub;
pub use stub::Named;

#[cfg(test)]
mod tests;
