//! Just enough ELF reading to tell which shared libraries a binary needs,
//! so `setup` works without binutils.

use std::{fs::File, io::Read, path::Path};

use anyhow::{Context, Result};

const SHT_DYNAMIC: u32 = 6;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;

/// Whether `path` starts with the ELF magic number.
pub fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"\x7fELF"
}

/// The DT_NEEDED entries (needed shared libraries) of a 64-bit ELF file.
pub fn needed_libraries(path: &Path) -> Result<Vec<String>> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_needed(&data)
        .with_context(|| format!("{} is not a well-formed 64-bit ELF file", path.display()))
}

struct Elf<'a> {
    data: &'a [u8],
    big_endian: bool,
}

impl Elf<'_> {
    fn bytes<const N: usize>(&self, at: u64) -> Option<[u8; N]> {
        let at = usize::try_from(at).ok()?;
        self.data.get(at..at.checked_add(N)?)?.try_into().ok()
    }
    fn u16(&self, at: u64) -> Option<u16> {
        let b = self.bytes(at)?;
        Some(if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }
    fn u32(&self, at: u64) -> Option<u32> {
        let b = self.bytes(at)?;
        Some(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    fn u64(&self, at: u64) -> Option<u64> {
        let b = self.bytes(at)?;
        Some(if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }
    fn c_str(&self, at: u64) -> Option<String> {
        let rest = self.data.get(usize::try_from(at).ok()?..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&rest[..len]).into_owned())
    }
}

fn parse_needed(data: &[u8]) -> Option<Vec<String>> {
    // e_ident: magic, EI_CLASS 2 = 64-bit, EI_DATA 2 = big-endian.
    if data.get(..4)? != b"\x7fELF" || *data.get(4)? != 2 {
        return None;
    }
    let elf = Elf {
        data,
        big_endian: *data.get(5)? == 2,
    };
    let sh_off = elf.u64(0x28)?;
    let sh_entsize = u64::from(elf.u16(0x3a)?);
    let sh_num = u64::from(elf.u16(0x3c)?);
    let section = |i: u64| sh_off.checked_add(i.checked_mul(sh_entsize)?);

    let mut needed = Vec::new();
    for i in 0..sh_num {
        let sh = section(i)?;
        if elf.u32(sh + 4)? != SHT_DYNAMIC {
            continue;
        }
        let (dyn_off, dyn_size) = (elf.u64(sh + 24)?, elf.u64(sh + 32)?);
        let strtab = elf.u64(section(u64::from(elf.u32(sh + 40)?))? + 24)?;
        for entry in (dyn_off..dyn_off.checked_add(dyn_size)?).step_by(16) {
            match elf.u64(entry)? {
                DT_NULL => break,
                DT_NEEDED => needed.push(elf.c_str(strtab.checked_add(elf.u64(entry + 8)?)?)?),
                _ => {}
            }
        }
    }
    Some(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_needed_libraries() {
        let needed = needed_libraries(Path::new("/proc/self/exe")).unwrap();
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
    }

    #[test]
    fn rejects_non_elf() {
        assert!(parse_needed(b"#!/bin/sh\n").is_none());
        assert!(!is_elf(Path::new("/proc/self/status")));
    }
}
