//! User stacks from copies (`tracer offcpu --unwind dwarf`): the kernel sends a thread's
//! user registers and the top of its user stack; this walks them with framehop, which
//! reads each mapped object's `.eh_frame` (the call-frame information every x86_64 and
//! arm64 object carries for C++ exceptions and Rust panics), so functions without frame
//! pointers (Debian's libc) do not hide their callers as the kernel's frame-pointer walk
//! does. perf's `--call-graph dwarf` works the same way, with libunwind or libdw.
use std::{collections::HashMap, fs::File, ops::Range, os::unix::fs::FileExt as _, sync::Arc};

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use object::{Object as _, ObjectSection as _, ObjectSegment as _};

use crate::sys::{btf::KernelBtf, symbolize::Symbolizer};

/// Frames kept of one stack at most (the kernel's `perf_event_max_stack` default).
pub const MAX_FRAMES: usize = 127;

/// Where the registers unwinding starts from lie in the kernel's `struct pt_regs` (the
/// user registers saved at kernel entry), read from the kernel's BTF: the eBPF program
/// copies the first `len` bytes; `sp` is also where it finds the stack to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegsLayout {
    pub len: u32,
    pub ip: u32,
    pub sp: u32,
    pub fp: u32,
    /// arm64's link register (x30); x86_64 has none.
    pub lr: Option<u32>,
}

impl RegsLayout {
    /// This machine's layout, or why `--unwind dwarf` cannot work here.
    pub fn from_btf(btf: &KernelBtf) -> Result<RegsLayout, String> {
        let off = |m: &str| {
            btf.member_offset("pt_regs", m)
                .map_err(|e| format!("struct pt_regs: {e}"))
        };
        let l = if cfg!(target_arch = "x86_64") {
            RegsLayout {
                len: 0,
                ip: off("ip")?,
                sp: off("sp")?,
                fp: off("bp")?,
                lr: None,
            }
        } else if cfg!(target_arch = "aarch64") {
            let regs = off("regs")?;
            RegsLayout {
                len: 0,
                ip: off("pc")?,
                sp: off("sp")?,
                fp: regs + 29 * 8,
                lr: Some(regs + 30 * 8),
            }
        } else {
            return Err(format!(
                "--unwind dwarf unwinds x86_64 and arm64 stacks (framehop); this is {}",
                std::env::consts::ARCH
            ));
        };
        let end = [l.ip, l.sp, l.fp, l.lr.unwrap_or(0)]
            .into_iter()
            .max()
            .unwrap_or(0)
            + 8;
        let l = RegsLayout { len: end, ..l };
        if l.len as usize > tracer_common::offcpu::COPY_REGS
            || l.sp > 0xf8
            || !l.sp.is_multiple_of(8)
        {
            return Err(format!("struct pt_regs has an unexpected layout: {l:?}"));
        }
        Ok(l)
    }

    fn word(&self, regs: &[u8], off: u32) -> u64 {
        regs.get(off as usize..off as usize + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
            .unwrap_or(0)
    }
}

/// The unwind sections of one object, read once per file.
#[derive(Clone)]
struct Sections {
    text: Option<(Range<u64>, Arc<[u8]>)>,
    eh_frame: Option<(Range<u64>, Arc<[u8]>)>,
    eh_frame_hdr: Option<(Range<u64>, Arc<[u8]>)>,
    got: Option<Range<u64>>,
    /// Loadable segments: (virtual address, file offset, size in the file).
    segments: Vec<(u64, u64, u64)>,
}

fn read_sections(f: &File) -> Option<Sections> {
    let len = f.metadata().ok()?.len();
    // An object's unwind tables are read whole; a file past 1 GiB is not an object.
    if len > 1 << 30 {
        return None;
    }
    let mut data = vec![0u8; len as usize];
    f.read_exact_at(&mut data, 0).ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let sec = |name: &str| {
        let s = elf.section_by_name(name)?;
        let d = s.data().ok()?;
        Some((s.address()..s.address() + s.size(), Arc::<[u8]>::from(d)))
    };
    Some(Sections {
        text: sec(".text"),
        eh_frame: sec(".eh_frame"),
        eh_frame_hdr: sec(".eh_frame_hdr"),
        got: elf
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size()),
        segments: elf
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (s.address(), off, size)
            })
            .collect(),
    })
}

/// The address the object's address 0 has in a process that maps its file `offset`
/// at `start`: the segment mapped there is the one whose page-aligned file offset is
/// `offset` (lld leaves the first, read-only segment covering the text's first page, so
/// "the segment containing the offset" can be the wrong one).
fn load_bias(segments: &[(u64, u64, u64)], start: u64, offset: u64) -> Option<u64> {
    let page = 4096u64;
    let (va, off) = segments
        .iter()
        .find(|(_, o, _)| o & !(page - 1) == offset)
        .or_else(|| {
            segments
                .iter()
                .find(|(_, o, sz)| *o <= offset && offset < o + sz)
        })
        .map(|&(va, off, _)| (va, off))?;
    // The mapping starts at file `offset`, which the object places at `va - (off - offset)`.
    Some(start.wrapping_sub(va.wrapping_sub(off.wrapping_sub(offset))))
}

#[cfg(target_arch = "aarch64")]
type Arch = framehop::aarch64::UnwinderAarch64<Arc<[u8]>>;
#[cfg(target_arch = "aarch64")]
type Cache = framehop::aarch64::CacheAarch64;
#[cfg(not(target_arch = "aarch64"))]
type Arch = framehop::x86_64::UnwinderX86_64<Arc<[u8]>>;
#[cfg(not(target_arch = "aarch64"))]
type Cache = framehop::x86_64::CacheX86_64;

/// One process's unwinder, and the mappings it was built from.
struct Process {
    unwinder: Arch,
    mappings: Vec<(u64, u64, u64, usize)>,
}

/// Unwinds stack copies of the traced processes: an unwinder per process built from the
/// symbolizer's mappings (rebuilt when they change), object sections read once per file.
pub struct Unwinders {
    layout: RegsLayout,
    files: HashMap<usize, Option<Sections>>,
    procs: HashMap<u32, Process>,
    cache: Cache,
}

impl Unwinders {
    pub fn new(layout: RegsLayout) -> Self {
        Unwinders {
            layout,
            files: HashMap::new(),
            procs: HashMap::new(),
            cache: Cache::new(),
        }
    }

    fn process(&mut self, sym: &Symbolizer, tgid: u32) -> &Process {
        let maps = sym.code_mappings(tgid);
        let key: Vec<(u64, u64, u64, usize)> = maps.iter().map(|m| (m.0, m.1, m.2, m.3)).collect();
        let stale = self.procs.get(&tgid).is_none_or(|p| p.mappings != key);
        if stale {
            let mut unwinder = Arch::new();
            for (start, end, offset, fi, file) in maps {
                let Some(s) = self.files.entry(fi).or_insert_with(|| read_sections(file)) else {
                    continue;
                };
                let Some(base) = load_bias(&s.segments, start, offset) else {
                    continue;
                };
                let info = ExplicitModuleSectionInfo {
                    base_svma: 0,
                    text_svma: s.text.as_ref().map(|t| t.0.clone()),
                    text: s.text.as_ref().map(|t| t.1.clone()),
                    got_svma: s.got.clone(),
                    eh_frame_svma: s.eh_frame.as_ref().map(|t| t.0.clone()),
                    eh_frame: s.eh_frame.as_ref().map(|t| t.1.clone()),
                    eh_frame_hdr_svma: s.eh_frame_hdr.as_ref().map(|t| t.0.clone()),
                    eh_frame_hdr: s.eh_frame_hdr.as_ref().map(|t| t.1.clone()),
                    ..Default::default()
                };
                unwinder.add_module(Module::new(format!("{fi}"), start..end, base, info));
            }
            self.procs.insert(
                tgid,
                Process {
                    unwinder,
                    mappings: key,
                },
            );
        }
        &self.procs[&tgid]
    }

    /// The stack of `tgid` in a copy: `regs` (the start of its `pt_regs`) and `stack`
    /// (the bytes from its stack pointer up). Leaf first: where it was, then return
    /// addresses, as the kernel's stack map gives them. Stops where the copy or the
    /// unwind information ends; the flag says whether the walk reached a thread's first
    /// function (its CFI marks the return address undefined), as framehop tells.
    pub fn unwind(
        &mut self,
        sym: &Symbolizer,
        tgid: u32,
        regs: &[u8],
        stack: &[u8],
    ) -> (Vec<u64>, bool) {
        let l = self.layout;
        let (ip, sp, fp) = (l.word(regs, l.ip), l.word(regs, l.sp), l.word(regs, l.fp));
        if ip == 0 {
            return (Vec::new(), false);
        }
        let mut read = |addr: u64| -> Result<u64, ()> {
            let i = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(i..i.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_ne_bytes(b.try_into().map_err(|_| ())?))
        };
        #[cfg(target_arch = "aarch64")]
        let start = framehop::aarch64::UnwindRegsAarch64::new(
            l.lr.map(|o| l.word(regs, o)).unwrap_or(0),
            sp,
            fp,
        );
        #[cfg(not(target_arch = "aarch64"))]
        let start = framehop::x86_64::UnwindRegsX86_64::new(ip, sp, fp);
        // The cache is taken out while the process's unwinder is borrowed.
        let mut cache = std::mem::replace(&mut self.cache, Cache::new());
        let mut out = Vec::new();
        let mut whole = false;
        {
            let p = self.process(sym, tgid);
            let mut it = p.unwinder.iter_frames(ip, start, &mut cache, &mut read);
            while out.len() < MAX_FRAMES {
                match it.next() {
                    Ok(Some(f)) => out.push(f.address()),
                    Ok(None) => {
                        whole = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        self.cache = cache;
        (out, whole)
    }
}

#[cfg(test)]
mod tests {
    use super::load_bias;

    /// lld's layout (rustc 1.95's binaries): the read-only first segment covers the page
    /// the text starts in; the text's segment is the one mapped at that page.
    #[test]
    fn the_load_bias_comes_from_the_segment_mapped_there() {
        let segs = [
            (0x0, 0x0, 0x1675c),
            (0x17760, 0x16760, 0x43c00),
            (0x5c360, 0x5a360, 0x2e20),
        ];
        let base = 0x5568_7a2b_0000;
        // The text's page is mapped at base + 0x17000, from file offset 0x16000.
        assert_eq!(load_bias(&segs, base + 0x17000, 0x16000), Some(base));
        // GNU ld's layout (Debian's libc): offsets equal addresses.
        let libc = [(0x0, 0x0, 0x25388), (0x26000, 0x26000, 0x1550fc)];
        assert_eq!(
            load_bias(&libc, 0x7f00_0002_6000, 0x26000),
            Some(0x7f00_0000_0000)
        );
    }
}
