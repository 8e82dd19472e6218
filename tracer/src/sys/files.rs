//! Files the tracer writes as root on machines that other users share.
//!
//! Outputs the user names (`record -o`, `offcpu --svg`, `run --heatmap`, `top`'s `e`
//! key) follow the kernel's `protected_symlinks` and `protected_regular` rules whether
//! or not those sysctls are on (many machines have them off): a symlink in a sticky,
//! world-writable directory (/tmp) is followed only when it belongs to us or to the
//! directory's owner, and an existing file or FIFO there is written only when it
//! belongs to one of them. The path is walked one component at a time from directory
//! descriptors, so no component can be swapped between the check and the open.
//!
//! Private files (`top -- COMMAND`'s output log) are made mkstemp-style: a random
//! name, O_EXCL, mode 0600, in a directory only this user can write.
use std::{
    ffi::{OsStr, OsString},
    fs::File,
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStringExt as _,
    },
    path::{Component, Path, PathBuf},
};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::error::TracerError;

/// Symlinks followed at most in one path, as the kernel's MAXSYMLINKS.
const MAX_LINKS: usize = 40;
/// procfs's statfs magic: its links (`/proc/self/fd/1`) are the kernel's to follow.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

fn refused(path: &Path, why: String) -> TracerError {
    TracerError::Unsafe {
        path: path.to_path_buf(),
        why,
    }
}

fn io_err(path: &Path, e: Errno) -> TracerError {
    TracerError::Write {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// A directory's owner and whether it is sticky and writable by others (the kernel's
/// test for `/tmp`-like directories; group-writable counts, as at level 2 of the sysctls).
struct Dir {
    fd: OwnedFd,
    uid: u32,
    shared_sticky: bool,
    on_proc: bool,
    /// Where it is, for messages.
    path: PathBuf,
}

impl Dir {
    fn new(fd: OwnedFd, path: PathBuf) -> rustix::io::Result<Dir> {
        let st = rfs::fstat(&fd)?;
        let mode = st.st_mode;
        // f_type's integer type differs between libc targets.
        #[allow(clippy::unnecessary_cast)]
        let on_proc = rfs::fstatfs(&fd).map(|s| s.f_type as i64 == PROC_SUPER_MAGIC)?;
        Ok(Dir {
            fd,
            uid: st.st_uid,
            shared_sticky: mode & 0o1000 != 0 && mode & 0o022 != 0,
            on_proc,
            path,
        })
    }

    fn open(at: impl AsFd, name: &OsStr, follow: bool, path: PathBuf) -> rustix::io::Result<Dir> {
        let mut flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        Dir::new(rfs::openat(at, name, flags, Mode::empty())?, path)
    }

    /// Whether an entry owned by `owner` in this directory is safe to follow or reuse.
    fn trusts(&self, owner: u32) -> bool {
        !self.shared_sticky || owner == self.uid || owner == rustix::process::geteuid().as_raw()
    }
}

/// Opens (creating or truncating) a file the user named for writing, refusing in one
/// line what the kernel's protected_symlinks / protected_regular / protected_fifos rules
/// would refuse: a symlink, or an existing file or FIFO, that another user owns in a
/// sticky directory others can write.
pub fn create_output(path: &Path) -> Result<File, TracerError> {
    create_output_with(path, OFlags::empty())
}

/// [`create_output`] with O_NONBLOCK: a FIFO without a reader is ENXIO at once instead
/// of blocking the open.
pub fn create_output_nonblock(path: &Path) -> Result<File, TracerError> {
    create_output_with(path, OFlags::NONBLOCK)
}

fn create_output_with(path: &Path, more: OFlags) -> Result<File, TracerError> {
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, path);
    let (dir, start) = if path.is_absolute() {
        (
            rfs::open(
                "/",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ),
            PathBuf::from("/"),
        )
    } else {
        (
            rfs::openat(
                CWD,
                ".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ),
            std::env::current_dir().unwrap_or_default(),
        )
    };
    let mut dir = dir
        .and_then(|fd| Dir::new(fd, start))
        .map_err(|e| io_err(path, e))?;
    let mut links = 0;
    // Components are taken from the end of `todo` (it holds them reversed).
    while let Some(name) = todo.pop() {
        let last = todo.is_empty();
        if name == ".." {
            let up = dir.path.parent().map(Path::to_path_buf).unwrap_or_default();
            dir = Dir::open(&dir.fd, &name, false, up).map_err(|e| io_err(path, e))?;
            continue;
        }
        let here = dir.path.join(&name);
        let st = match rfs::statat(&dir.fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) if last => None,
            Err(e) => return Err(io_err(path, e)),
        };
        let kind = st.as_ref().map(|s| FileType::from_raw_mode(s.st_mode));
        if kind == Some(FileType::Symlink) {
            let owner = st.as_ref().map_or(0, |s| s.st_uid);
            if !dir.trusts(owner) {
                return Err(refused(
                    path,
                    format!(
                        "{} is a symlink that uid {owner} owns in {}, a sticky directory others \
                         can write (the kernel's protected_symlinks rule, applied here even \
                         where fs.protected_symlinks is off)",
                        here.display(),
                        dir.path.display()
                    ),
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(io_err(path, Errno::LOOP));
            }
            if dir.on_proc {
                // A procfs link (/proc/self/fd/1 for /dev/stdout) names an open file,
                // not a path: the kernel follows it.
                if last {
                    return open_at(&dir.fd, &name, OFlags::CREATE | OFlags::TRUNC | more, path);
                }
                dir = Dir::open(&dir.fd, &name, true, here).map_err(|e| io_err(path, e))?;
                continue;
            }
            let target =
                rfs::readlinkat(&dir.fd, &name, Vec::new()).map_err(|e| io_err(path, e))?;
            let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
            push_components(&mut todo, &target);
            if target.is_absolute() {
                dir = Dir::open(CWD, OsStr::new("/"), true, PathBuf::from("/"))
                    .map_err(|e| io_err(path, e))?;
            }
            continue;
        }
        if !last {
            dir = Dir::open(&dir.fd, &name, false, here).map_err(|e| io_err(path, e))?;
            continue;
        }
        return match st {
            // New: created here and now, never through a link (O_EXCL).
            None => match open_at(&dir.fd, &name, OFlags::CREATE | OFlags::EXCL | more, path) {
                // Someone made it in between: look again.
                Err(TracerError::Write { source, .. })
                    if source.raw_os_error() == Some(Errno::EXIST.raw_os_error()) =>
                {
                    todo.push(name);
                    continue;
                }
                r => r,
            },
            Some(st) => {
                if matches!(kind, Some(FileType::RegularFile | FileType::Fifo))
                    && !dir.trusts(st.st_uid)
                {
                    return Err(refused(
                        path,
                        format!(
                            "it already exists, owned by uid {}, in {}, a sticky directory \
                             others can write (the kernel's protected_regular rule, applied \
                             here even where fs.protected_regular is off): remove it or \
                             choose another name",
                            st.st_uid,
                            dir.path.display()
                        ),
                    ));
                }
                open_at(
                    &dir.fd,
                    &name,
                    OFlags::TRUNC | OFlags::NOFOLLOW | more,
                    path,
                )
            }
        };
    }
    Err(io_err(path, Errno::ISDIR))
}

fn open_at(dir: impl AsFd, name: &OsStr, extra: OFlags, path: &Path) -> Result<File, TracerError> {
    let flags = OFlags::WRONLY | OFlags::CLOEXEC | extra;
    rfs::openat(dir, name, flags, Mode::from_raw_mode(0o666))
        .map(File::from)
        .map_err(|e| io_err(path, e))
}

/// The components of `p`, reversed onto `todo` (so the first is popped first).
fn push_components(todo: &mut Vec<OsString>, p: &Path) {
    let mut names: Vec<OsString> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => names.push(n.to_os_string()),
            Component::ParentDir => names.push(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    todo.extend(names.into_iter().rev());
}

/// A private file made by [`create_private`]: its path, and the directory made for it
/// (when the temporary directory was shared), both removed by [`PrivateFile::remove`].
pub struct PrivateFile {
    pub path: PathBuf,
    made_dir: Option<PathBuf>,
}

impl PrivateFile {
    /// Removes the file (and the directory made for it).
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(d) = &self.made_dir {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Whether only we can write `dir`: a real directory (not a link) that we own and that
/// neither group nor others can write.
fn only_ours(dir: &Path) -> bool {
    rfs::lstat(dir).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && st.st_uid == rustix::process::geteuid().as_raw()
            && st.st_mode & 0o022 == 0
    })
}

/// Eight random letters and digits for a file name.
fn random_name() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut b = [0u8; 8];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        // No getrandom (older than 3.17): the time's nanoseconds and the PID still make
        // a name nobody predicts exactly, and O_EXCL makes a guess harmless anyway.
        let t = crate::sys::clock::monotonic_ns() ^ u64::from(std::process::id()) << 40;
        b = t.to_le_bytes();
    }
    b.iter()
        .map(|x| ALPHABET[*x as usize % ALPHABET.len()] as char)
        .collect()
}

/// Creates `tracer-PREFIX-RANDOM SUFFIX`, mode 0600, O_EXCL|O_NOFOLLOW, in a directory
/// only we can write: `$XDG_RUNTIME_DIR` or `$TMPDIR` (else /tmp) when they are so, else
/// `PREFIX-RANDOM SUFFIX` in a directory of our own, `tracer-RANDOM`, made inside the
/// latter (mkdtemp-style, 0700). Short names: a message naming the file fits a line.
pub fn create_private(prefix: &str, suffix: &str) -> Result<(PrivateFile, File), TracerError> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && only_ours(d));
    let tmp = std::env::temp_dir();
    let (dir, made_dir) = match runtime {
        Some(d) => (d, None),
        None if only_ours(&tmp) => (tmp, None),
        None => {
            let mut tries = 0;
            loop {
                let d = tmp.join(format!("tracer-{}", random_name()));
                match rfs::mkdir(&d, Mode::from_raw_mode(0o700)) {
                    Ok(()) => break (d.clone(), Some(d)),
                    Err(Errno::EXIST) if tries < 16 => tries += 1,
                    Err(e) => return Err(io_err(&d, e)),
                }
            }
        }
    };
    let mut tries = 0;
    loop {
        let path = match made_dir {
            Some(_) => dir.join(format!("{prefix}-{}{suffix}", random_name())),
            None => dir.join(format!("tracer-{prefix}-{}{suffix}", random_name())),
        };
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::open(&path, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => {
                let file = File::from(fd);
                return Ok((PrivateFile { path, made_dir }, file));
            }
            Err(Errno::EXIST) if tries < 16 => tries += 1,
            Err(e) => {
                if let Some(d) = &made_dir {
                    let _ = std::fs::remove_dir(d);
                }
                return Err(io_err(&path, e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    /// A sticky, world-writable directory like /tmp, of this test's own.
    fn sticky(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tracer-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        d
    }

    /// Issue 25 item 2: `record -o`, `offcpu --svg`, `run --heatmap` and top's `e` key
    /// wrote through a symlink another user owned in /tmp.
    #[test]
    #[ignore = "needs root (plants files owned by another user): cargo xtask test runs it as root"]
    fn links_and_files_other_users_plant_in_sticky_directories_are_refused() {
        assert!(rustix::process::geteuid().is_root(), "needs root");
        let d = sticky("links");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let nobody = Some(65534);
        // Nobody's link: refused, the victim untouched, whatever fs.protected_symlinks.
        let link = d.join("out.svg");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        std::os::unix::fs::lchown(&link, nobody, nobody).unwrap();
        let e = create_output(&link).unwrap_err().to_string();
        assert!(
            e.contains("protected_symlinks") && e.contains("uid 65534"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        // Also when reached through a path component, or a link to the link.
        let mine = d.join("mine");
        std::os::unix::fs::symlink(&link, &mine).unwrap();
        assert!(create_output(&mine).is_err());
        let dir_link = d.join("dirlink");
        std::os::unix::fs::symlink(&d, &dir_link).unwrap();
        std::os::unix::fs::lchown(&dir_link, nobody, nobody).unwrap();
        assert!(create_output(&dir_link.join("x")).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // Nobody's file, planted 0666 to read what root writes: refused too.
        let planted = d.join("trace.pftrace");
        std::fs::write(&planted, "").unwrap();
        std::os::unix::fs::chown(&planted, nobody, nobody).unwrap();
        let e = create_output(&planted).unwrap_err().to_string();
        assert!(e.contains("protected_regular"), "{e}");
        // Our own link, a new name, our own file: written (and truncated).
        let own = d.join("own");
        std::os::unix::fs::symlink(&victim, &own).unwrap();
        use std::io::Write as _;
        create_output(&own).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "new");
        create_output(&d.join("fresh.svg")).unwrap();
        create_output(&d.join("fresh.svg")).unwrap();
        // Outside sticky directories links are followed as always; /dev/stdout's
        // procfs link too.
        create_output(Path::new("/dev/null")).unwrap();
        create_output(Path::new("/dev/stdout")).unwrap();
        let plain = d.join("plain");
        std::fs::create_dir(&plain).unwrap();
        let far = plain.join("link");
        std::os::unix::fs::symlink("../victim", &far).unwrap();
        std::os::unix::fs::lchown(&far, nobody, nobody).unwrap();
        create_output(&far).unwrap();
        create_output(&plain.join("../plain/./x")).unwrap();
        assert!(create_output(&plain).is_err(), "a directory");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Issue 25 item 2: `top -- CMD`'s log was /tmp/tracer-top-PID.log, 0644, opened
    /// without O_EXCL: links planted for the PID range made root truncate its own files.
    #[test]
    fn private_files_are_fresh_0600_in_a_directory_only_we_can_write() {
        let (p, mut f) = create_private("test", ".log").unwrap();
        use std::io::Write as _;
        f.write_all(b"x").unwrap();
        let md = std::fs::symlink_metadata(&p.path).unwrap();
        assert!(md.is_file());
        assert_eq!(md.mode() & 0o777, 0o600);
        let dir = p.path.parent().unwrap();
        assert!(only_ours(dir), "{}", dir.display());
        let (q, _) = create_private("test", ".log").unwrap();
        assert_ne!(p.path, q.path, "random names");
        p.remove();
        q.remove();
        assert!(!p.path.exists());
    }
}
