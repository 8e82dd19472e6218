//! Addresses to function names with `blazesym`: kernel addresses through kallsyms, user
//! addresses through the process's mappings and the mapped ELF files' symbols and DWARF
//! (demangled, inlined calls as frames of their own).
//!
//! A process's mappings are read while it lives ([`Symbolizer::remember`]) and each
//! mapped file is kept open through `/proc/PID/map_files`, so the stacks of a process
//! that has exited (or a deleted binary) still symbolize at the end of the run.
use std::{
    collections::HashMap,
    fs::File,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::PathBuf,
};

use blazesym::{
    symbolize::{
        source::{Elf, Kernel, Source},
        Input, Symbolized, Symbolizer as Blaze,
    },
    MaybeDefault,
};

/// One frame of a symbolized stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymFrame {
    pub name: String,
    /// A call the compiler inlined into the frame below it (DWARF).
    pub inlined: bool,
    /// Whether the (real, not inlined) function keeps a frame pointer, when known.
    pub keeps_fp: Option<bool>,
}

/// An executable mapping of a process.
#[derive(Clone, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// Index into `Symbolizer::files`; None for anonymous code and the vDSO.
    file: Option<usize>,
    /// The mapped file's name (or `[vdso]`, `[anon]`).
    name: String,
}

/// A mapped file, held open so it can be read after its process exits.
struct OpenFile {
    file: File,
    /// Its path as mapped (for reports).
    path: String,
    /// Its loadable segments (virtual address, file offset, size in the file), read
    /// from its program headers on the first frame-pointer question.
    segments: std::cell::OnceCell<Vec<(u64, u64, u64)>>,
}

/// Symbolizes kernel and user stacks; remembers processes' mappings.
pub struct Symbolizer {
    blaze: Blaze,
    procs: HashMap<u32, Vec<Mapping>>,
    files: Vec<OpenFile>,
    by_inode: HashMap<(u64, u64), usize>,
    fp_cache: std::cell::RefCell<HashMap<(usize, u64), Option<bool>>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

/// Parses one line of `/proc/PID/maps` into (start, end, perms, offset, inode, path).
fn parse_maps_line(line: &str) -> Option<(u64, u64, &str, u64, u64, &str)> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start();
    let (s, e) = range.split_once('-')?;
    Some((
        u64::from_str_radix(s, 16).ok()?,
        u64::from_str_radix(e, 16).ok()?,
        perms,
        offset,
        inode,
        path,
    ))
}

/// The last path component (the name a report shows for a binary).
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Symbolizer {
    pub fn new() -> Self {
        Symbolizer {
            blaze: Blaze::builder()
                .enable_inlined_fns(true)
                .enable_code_info(true)
                .enable_demangling(true)
                .build(),
            procs: HashMap::new(),
            files: Vec::new(),
            by_inode: HashMap::new(),
            fp_cache: Default::default(),
        }
    }

    /// Reads the executable mappings of process `tgid` now and opens the files they map
    /// (once per file). Mappings read before and not overlapped by the new ones are kept
    /// (a library unmapped since still names the addresses taken while it was mapped).
    /// Returns false when the process is gone (or was never readable).
    pub fn remember(&mut self, tgid: u32) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/maps")) else {
            return false;
        };
        let mut new = Vec::new();
        for line in text.lines() {
            let Some((start, end, perms, offset, inode, path)) = parse_maps_line(line) else {
                continue;
            };
            if !perms.contains('x') {
                continue;
            }
            let mut file = None;
            if inode != 0 && path.starts_with('/') {
                file = self.open_mapped(tgid, start, end, path);
            }
            let name = if path.is_empty() {
                "[anon]".to_string()
            } else {
                path.trim_end_matches(" (deleted)").to_string()
            };
            new.push(Mapping {
                start,
                end,
                offset,
                file,
                name,
            });
        }
        if new.is_empty() {
            // A zombie has no mappings left: keep what was read while it lived.
            return self.procs.contains_key(&tgid);
        }
        let old = self.procs.remove(&tgid).unwrap_or_default();
        for m in old {
            if !new.iter().any(|n| n.start < m.end && m.start < n.end) {
                new.push(m);
            }
        }
        new.sort_by_key(|m| m.start);
        self.procs.insert(tgid, new);
        true
    }

    /// Whether mappings of `tgid` were read.
    pub fn knows(&self, tgid: u32) -> bool {
        self.procs.contains_key(&tgid)
    }

    /// Opens a mapped file through `map_files` (the very file mapped, even if deleted or
    /// in another mount namespace), once per (device, inode).
    fn open_mapped(&mut self, tgid: u32, start: u64, end: u64, path: &str) -> Option<usize> {
        let f = File::open(format!("/proc/{tgid}/map_files/{start:x}-{end:x}"))
            .or_else(|_| File::open(path))
            .ok()?;
        let md = f.metadata().ok()?;
        let key = (md.dev(), md.ino());
        if let Some(&i) = self.by_inode.get(&key) {
            return Some(i);
        }
        self.files.push(OpenFile {
            file: f,
            path: path.trim_end_matches(" (deleted)").to_string(),
            segments: Default::default(),
        });
        let i = self.files.len() - 1;
        self.by_inode.insert(key, i);
        Some(i)
    }

    fn fd_path(&self, i: usize) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.files[i].file.as_raw_fd()))
    }

    /// The file (path as mapped) that holds user address `addr` of `tgid`, if known.
    pub fn file_of(&self, tgid: u32, addr: u64) -> Option<&str> {
        let m = self.mapping(tgid, addr)?;
        Some(
            m.file
                .map(|i| self.files[i].path.as_str())
                .unwrap_or(&m.name),
        )
    }

    /// The executable file mappings of `tgid` as last read: (start, end, file offset,
    /// file index, the open file), for unwinding (`sys::unwind`).
    pub fn code_mappings(&self, tgid: u32) -> Vec<(u64, u64, u64, usize, &File)> {
        self.procs
            .get(&tgid)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let f = m.file?;
                Some((m.start, m.end, m.offset, f, &self.files[f].file))
            })
            .collect()
    }

    fn mapping(&self, tgid: u32, addr: u64) -> Option<&Mapping> {
        self.procs
            .get(&tgid)?
            .iter()
            .find(|m| m.start <= addr && addr < m.end)
    }

    /// Whether the function starting at virtual address `start` of file `f` keeps a
    /// frame pointer (`push %rbp; mov %rsp,%rbp` among its first instructions; LLVM's
    /// shrink-wrapping may put an early exit before them). None when that cannot be
    /// told (not x86_64, unreadable). A function without one hides its caller from the
    /// kernel's frame-pointer walk of the stack. Answers are cached per function.
    fn function_keeps_fp(&self, f: usize, start: u64) -> Option<bool> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        if let Some(&v) = self.fp_cache.borrow().get(&(f, start)) {
            return v;
        }
        let file = &self.files[f];
        let segs = file.segments.get_or_init(|| load_segments(&file.file));
        let v = segs
            .iter()
            .find(|(va, _, sz)| *va <= start && start < va + sz)
            .and_then(|(va, off, _)| {
                use std::os::unix::fs::FileExt as _;
                let mut code = [0u8; 64];
                let n = file.file.read_at(&mut code, off + (start - va)).ok()?;
                Some(code[..n].windows(4).any(|w| w == [0x55, 0x48, 0x89, 0xe5]))
            });
        self.fp_cache.borrow_mut().insert((f, start), v);
        v
    }

    /// Symbolizes a user stack of process `tgid` (leaf first, as the kernel gives it).
    /// The first address is where the thread was; the others are return addresses, looked
    /// up one byte back so the call (and its inlining) is named, not the next line.
    pub fn user(&self, tgid: u32, ips: &[u64]) -> Vec<Vec<SymFrame>> {
        let mut out: Vec<Vec<SymFrame>> = vec![Vec::new(); ips.len()];
        // Per file: (index in ips, file offset).
        let mut per_file: HashMap<usize, Vec<(usize, u64)>> = HashMap::new();
        for (i, &ip) in ips.iter().enumerate() {
            let addr = if i == 0 { ip } else { ip.saturating_sub(1) };
            match self.mapping(tgid, addr) {
                Some(m) => match m.file {
                    Some(f) => per_file
                        .entry(f)
                        .or_default()
                        .push((i, addr - m.start + m.offset)),
                    None => out[i] = vec![unknown(&format!("[{}]", base_name(&m.name)))],
                },
                None => out[i] = vec![unknown("[unknown]")],
            }
        }
        for (f, items) in per_file {
            let offs: Vec<u64> = items.iter().map(|(_, o)| *o).collect();
            let src = Source::Elf(Elf::new(self.fd_path(f)));
            let fallback = format!("[{}]", base_name(&self.files[f].path));
            match self.blaze.symbolize(&src, Input::FileOffset(&offs)) {
                Ok(syms) => {
                    for ((i, _), s) in items.iter().zip(syms) {
                        let fp = match &s {
                            Symbolized::Sym(sym) => self.function_keeps_fp(f, sym.addr),
                            Symbolized::Unknown(_) => None,
                        };
                        out[*i] = frames_of(s, &fallback);
                        if let Some(last) = out[*i].last_mut() {
                            last.keeps_fp = fp;
                        }
                    }
                }
                Err(e) => {
                    log::debug!("symbolizing {}: {e}", self.files[f].path);
                    for (i, _) in &items {
                        out[*i] = vec![unknown(&fallback)];
                    }
                }
            }
        }
        out
    }

    /// Symbolizes a kernel stack (leaf first) through kallsyms. Every address is a
    /// return address (the tracepoint's caller first).
    pub fn kernel(&self, ips: &[u64]) -> Vec<Vec<SymFrame>> {
        let addrs: Vec<u64> = ips.iter().map(|a| a.saturating_sub(1)).collect();
        let src = Source::Kernel(Kernel {
            // kallsyms only: a vmlinux found on disk may not match the running kernel's
            // layout, and its DWARF is slow to read.
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Default::default()
        });
        match self.blaze.symbolize(&src, Input::AbsAddr(&addrs)) {
            Ok(syms) => syms.into_iter().map(|s| frames_of(s, "[kernel]")).collect(),
            Err(e) => {
                log::debug!("symbolizing kernel addresses: {e}");
                addrs.iter().map(|_| vec![unknown("[kernel]")]).collect()
            }
        }
    }
}

/// The loadable segments of an ELF file, from its program headers (read from the
/// file's start: the whole file may be hundreds of MB).
fn load_segments(file: &File) -> Vec<(u64, u64, u64)> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    use std::os::unix::fs::FileExt as _;
    let mut head = vec![0u8; 64 * 1024];
    let Ok(n) = file.read_at(&mut head, 0) else {
        return Vec::new();
    };
    head.truncate(n);
    let Ok(h) = object::elf::FileHeader64::<object::Endianness>::parse(&*head) else {
        return Vec::new();
    };
    let Ok(endian) = h.endian() else {
        return Vec::new();
    };
    let Ok(phs) = h.program_headers(endian, &*head) else {
        return Vec::new();
    };
    phs.iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| (p.p_vaddr(endian), p.p_offset(endian), p.p_filesz(endian)))
        .collect()
}

fn unknown(name: &str) -> SymFrame {
    SymFrame {
        name: name.to_string(),
        inlined: false,
        keeps_fp: None,
    }
}

/// One address's frames, innermost first: the inlined calls (deepest first), then the
/// function they were inlined into.
fn frames_of(s: Symbolized<'_>, fallback: &str) -> Vec<SymFrame> {
    match s {
        Symbolized::Sym(sym) => {
            let mut v: Vec<SymFrame> = sym
                .inlined
                .iter()
                .rev()
                .map(|f| SymFrame {
                    name: f.name.to_string(),
                    inlined: true,
                    keeps_fp: None,
                })
                .collect();
            v.push(SymFrame {
                name: sym.name.to_string(),
                inlined: false,
                keeps_fp: None,
            });
            v
        }
        Symbolized::Unknown(_) => vec![unknown(fallback)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let l = "7f1c2a000000-7f1c2a1b5000 r-xp 00028000 08:01 1835032                    /usr/lib/x86_64-linux-gnu/libc.so.6";
        let (s, e, p, o, ino, path) = parse_maps_line(l).unwrap();
        assert_eq!(
            (s, e, p, o, ino),
            (0x7f1c2a000000, 0x7f1c2a1b5000, "r-xp", 0x28000, 1835032)
        );
        assert_eq!(path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let v = parse_maps_line(
            "7ffd1b5f0000-7ffd1b5f2000 r-xp 00000000 00:00 0                          [vdso]",
        )
        .unwrap();
        assert_eq!(v.5, "[vdso]");
        assert!(parse_maps_line("garbage").is_none());
    }

    /// This test process's own stack symbolizes to this function's name.
    #[test]
    fn own_functions_symbolize() {
        #[inline(never)]
        fn marker_function_for_symbolize() -> u64 {
            marker_function_for_symbolize as *const () as usize as u64
        }
        let addr = marker_function_for_symbolize();
        let mut s = Symbolizer::new();
        assert!(s.remember(std::process::id()));
        let frames = s.user(std::process::id(), &[addr + 1]);
        assert!(
            frames[0]
                .iter()
                .any(|f| f.name.contains("marker_function_for_symbolize")),
            "{frames:?}"
        );
        // Known either way on x86_64 (the tests' own build decides which).
        if cfg!(target_arch = "x86_64") {
            assert!(frames[0].last().unwrap().keeps_fp.is_some(), "{frames:?}");
        }
    }
}
