//! Shipping the tracer: `cargo xtask install`/`uninstall`, `cargo xtask deb` and the
//! static binary (`cargo xtask build --release --static`).
//!
//! Install and the package lay out the same files (one list, [`files`]): the binary,
//! the man pages and the bash, zsh and fish completions, the last two rendered by the
//! binary itself (`tracer __generate`, from its clap definitions), so they describe
//! exactly the binary they ship with and the eBPF object is built once.
//!
//! The package is laid out by hand for `dpkg-deb` rather than by cargo-deb: dpkg-deb is
//! on every Debian machine, works offline, and the layout is the one `install` already
//! writes; cargo-deb would be one more tool to build from crates.io. Its dependencies
//! come from Debian's own `dpkg-shlibdeps` (dpkg-dev, installed when missing).
//!
//! A systemd unit (disabled by default) joins the files once `tracer serve` exists.

use std::{
    collections::BTreeSet,
    env,
    io::Write as _,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context, Result};

use crate::{apt::Apt, cmd};

/// The package's Debian version: the crate's, Debian revision 1.
fn deb_version() -> String {
    format!("{}-1", env!("CARGO_PKG_VERSION"))
}

/// Where install keeps the list of what it wrote, under the prefix.
const MANIFEST: &str = "share/tracer/install-manifest";

/// One file to install: its absolute path on the target system, contents and mode.
struct File {
    path: PathBuf,
    data: Vec<u8>,
    mode: u32,
}

/// Which layout: `install` into a prefix, or the Debian package (/usr, pages gzipped,
/// zsh's Debian directory, the docs Debian wants).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    Install,
    Debian,
}

/// The files for `prefix`: binary, man pages, completions where each shell looks.
fn files(bin: &Path, prefix: &Path, flavour: Flavour) -> Result<Vec<File>> {
    let share = prefix.join("share");
    let mut files = vec![File {
        path: prefix.join("bin/tracer"),
        data: std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?,
        mode: 0o755,
    }];

    let pages = crate::target_dir()?.join("man");
    if pages.exists() {
        std::fs::remove_dir_all(&pages)
            .with_context(|| format!("cannot empty {}", pages.display()))?;
    }
    let listed = cmd::output(Command::new(bin).args(["__generate", "man"]).arg(&pages))?;
    for page in listed.lines() {
        let page = Path::new(page);
        let name = page.file_name().context("a man page without a name")?;
        let text =
            std::fs::read(page).with_context(|| format!("cannot read {}", page.display()))?;
        let (name, data) = match flavour {
            Flavour::Install => (name.to_string_lossy().into_owned(), text),
            Flavour::Debian => (format!("{}.gz", name.to_string_lossy()), gzip(&text)?),
        };
        files.push(File {
            path: share.join("man/man1").join(name),
            data,
            mode: 0o644,
        });
    }

    // bash-completion and fish read these directories under every XDG_DATA_DIRS entry
    // (/usr/local/share and /usr/share by default). zsh's fpath has
    // /usr/local/share/zsh/site-functions, and on Debian /usr/share/zsh/vendor-completions
    // for packages.
    let zsh = match flavour {
        Flavour::Debian => "zsh/vendor-completions/_tracer",
        Flavour::Install => "zsh/site-functions/_tracer",
    };
    for (shell, path) in [
        ("bash", "bash-completion/completions/tracer"),
        ("zsh", zsh),
        ("fish", "fish/vendor_completions.d/tracer.fish"),
    ] {
        let script = cmd::output(Command::new(bin).args(["__generate", "completion", shell]))?;
        files.push(File {
            path: share.join(path),
            data: script.into_bytes(),
            mode: 0o644,
        });
    }
    Ok(files)
}

/// gzip -9n: what Debian wants for man pages and docs (no name or time stamp inside,
/// so the package is reproducible).
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .args(["-9n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start gzip: is it installed?")?;
    let mut stdin = child.stdin.take().context("gzip has no stdin")?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().context("gzip failed")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))?
        .context("cannot feed gzip")?;
    ensure!(out.status.success(), "gzip failed ({})", out.status);
    Ok(out.stdout)
}

/// `path` (absolute, on the target system) under `destdir`.
fn under(destdir: &Path, path: &Path) -> PathBuf {
    destdir.join(path.strip_prefix("/").unwrap_or(path))
}

/// Writes `files` under `destdir`, creating parents; returns the directories it created.
fn write_files(destdir: &Path, files: &[File]) -> Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    for f in files {
        let to = under(destdir, &f.path);
        let parent = to.parent().context("a file without a directory")?;
        let mut missing = Vec::new();
        let mut d = parent;
        while !d.exists() {
            missing.push(d.to_path_buf());
            d = d.parent().context("no existing ancestor")?;
        }
        std::fs::create_dir_all(parent).with_context(|| {
            format!(
                "cannot create {} (installing into a system prefix needs root: \
                 `sudo -E cargo xtask install`)",
                parent.display()
            )
        })?;
        for d in missing.iter().rev() {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
            created.push(d.clone());
        }
        // Write beside, then rename: a running tracer keeps its old file.
        let tmp = to.with_extension("xtask-new");
        std::fs::write(&tmp, &f.data).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode))?;
        std::fs::rename(&tmp, &to).with_context(|| format!("cannot replace {}", to.display()))?;
    }
    Ok(created)
}

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Installation prefix: the binary goes to PREFIX/bin, pages and completions to
    /// PREFIX/share.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Stage everything under DIR (as packagers do); the manifest lists the paths
    /// without DIR.
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
    /// Install the static (musl) binary instead of the glibc one.
    #[arg(long = "static")]
    pub static_bin: bool,
}

fn check_prefix(prefix: &Path) -> Result<()> {
    ensure!(
        prefix.is_absolute(),
        "--prefix {} must be an absolute path",
        prefix.display()
    );
    Ok(())
}

/// `cargo xtask install`: builds the release binary and writes the files, then a
/// manifest of every file and directory it created, for `uninstall`.
pub fn install(args: &InstallArgs) -> Result<()> {
    check_prefix(&args.prefix)?;
    let bin = if args.static_bin {
        build_static(true)?
    } else {
        crate::build(true)?.bin
    };
    let destdir = args.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let mut files = files(&bin, &args.prefix, Flavour::Install)?;
    let manifest = args.prefix.join(MANIFEST);
    // Directories an earlier install created stay ours to remove.
    let mut dirs: BTreeSet<PathBuf> = read_manifest(&under(&destdir, &manifest))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(kind, p)| (kind == "dir").then_some(p))
        .collect();
    // The manifest's own directory is created with the other files.
    files.push(File {
        path: manifest.clone(),
        data: Vec::new(),
        mode: 0o644,
    });
    let created = write_files(&destdir, &files)?;
    let strip =
        |d: &Path| -> PathBuf { Path::new("/").join(d.strip_prefix(&destdir).unwrap_or(d)) };
    dirs.extend(created.iter().map(|d| strip(d)));
    let mut text = String::from(
        "# Written by `cargo xtask install`; `cargo xtask uninstall` removes these.\n",
    );
    for f in &files {
        text.push_str(&format!("file {}\n", f.path.display()));
    }
    for d in &dirs {
        text.push_str(&format!("dir {}\n", d.display()));
    }
    let at = under(&destdir, &manifest);
    std::fs::write(&at, text).with_context(|| format!("cannot write {}", at.display()))?;
    for f in &files {
        println!("xtask: installed {}", under(&destdir, &f.path).display());
    }
    Ok(())
}

/// The manifest's entries: ("file" | "dir", path).
fn read_manifest(path: &Path) -> Result<Vec<(String, PathBuf)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (kind, p) = line
            .split_once(' ')
            .filter(|(k, p)| (*k == "file" || *k == "dir") && p.starts_with('/'))
            .with_context(|| {
                format!(
                    "{}:{}: expected `file PATH` or `dir PATH`",
                    path.display(),
                    n + 1
                )
            })?;
        out.push((kind.to_string(), PathBuf::from(p)));
    }
    Ok(out)
}

#[derive(clap::Args, Debug)]
pub struct UninstallArgs {
    /// The prefix given to install.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// The DESTDIR given to install.
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
}

/// `cargo xtask uninstall`: removes the files in install's manifest, then the
/// directories install created, when they are empty.
pub fn uninstall(args: &UninstallArgs) -> Result<()> {
    check_prefix(&args.prefix)?;
    let destdir = args.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let manifest = under(&destdir, &args.prefix.join(MANIFEST));
    let entries = read_manifest(&manifest).with_context(|| {
        format!(
            "nothing to uninstall: no manifest of `cargo xtask install --prefix {}`",
            args.prefix.display()
        )
    })?;
    let mut dirs = Vec::new();
    for (kind, p) in entries {
        let at = under(&destdir, &p);
        if kind == "dir" {
            dirs.push(at);
            continue;
        }
        match std::fs::remove_file(&at) {
            Ok(()) => println!("xtask: removed {}", at.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("xtask: {} was already gone", at.display())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", at.display())),
        }
    }
    // Deepest first, so a parent is empty once its children are gone.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        match std::fs::remove_dir(&d) {
            Ok(()) => println!("xtask: removed {}/", d.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Something else lives there now: it stays.
            Err(_) => println!("xtask: kept {}/: not empty", d.display()),
        }
    }
    Ok(())
}

/// The Rust target of the static binary: the host's architecture with musl.
fn static_target() -> String {
    format!("{}-unknown-linux-musl", env::consts::ARCH)
}

/// Builds the tracer for the musl target, statically linked (musl's default for Rust:
/// `crt-static`), with the eBPF object embedded. Adds the rustup target when missing.
pub fn build_static(release: bool) -> Result<PathBuf> {
    let tools = crate::setup::setup()?;
    let target_dir = crate::target_dir()?;
    let ebpf_obj = crate::build_ebpf(&tools, &target_dir)?;
    let target = static_target();
    crate::toolchain::ensure_rust_target(&target)?;
    // `ring` (TLS for `tracer serve`) compiles C: it needs a compiler for musl, which
    // cc-rs looks for as `<arch>-linux-musl-gcc`; Debian's musl-tools names it musl-gcc.
    crate::apt::ensure("a C compiler for musl (ring)", &["musl-tools"])?;
    let mut cargo = crate::cargo(None, "build", &target_dir);
    cargo.env(
        format!("CC_{}", target.replace('-', "_")),
        musl_cc().unwrap_or_else(|| "musl-gcc".into()),
    );
    cargo
        .args([
            "--package",
            "tracer",
            "--bin",
            "tracer",
            "--target",
            &target,
        ])
        .env("TRACER_EBPF_OBJ", &ebpf_obj)
        // The static binary must not pick up `-C target-feature=-crt-static` from a
        // RUSTFLAGS meant for the host.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if release {
        cargo.arg("--release");
    }
    cmd::run(&mut cargo).context("building the static tracer failed: see the errors above")?;
    let bin = target_dir
        .join(&target)
        .join(if release { "release" } else { "debug" })
        .join("tracer");
    let needed = crate::elf::needed_libraries(&bin)?;
    ensure!(
        needed.is_empty(),
        "{} should be static but needs {}",
        bin.display(),
        needed.join(", ")
    );
    println!(
        "xtask: built {} (static, no shared libraries)",
        bin.display()
    );
    if crate::is_root()? {
        run_in_empty_chroot(&bin)?;
    } else {
        println!(
            "xtask: not root: the check that it runs in an empty chroot did not run \
             (`sudo -E cargo xtask build --static` runs it)"
        );
    }
    Ok(bin)
}

/// The C compiler for the musl target the user set, if any (else musl-gcc from musl-tools).
fn musl_cc() -> Option<String> {
    let var = format!("CC_{}", static_target().replace('-', "_"));
    env::var(var).ok()
}

/// Runs `bin --version` and `bin check` inside a chroot holding nothing but the binary
/// (and /proc, /sys for `check`): no loader, no libc, no host file.
pub fn run_in_empty_chroot(bin: &Path) -> Result<()> {
    let root = crate::target_dir()?.join("static-chroot");
    if root.exists() {
        // Unmounted by the last run; an empty tree otherwise.
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("cannot empty {}", root.display()))?;
    }
    for d in ["proc", "sys"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::copy(bin, root.join("tracer"))
        .with_context(|| format!("cannot copy {}", bin.display()))?;
    // A private mount namespace: /proc and /sys go away with it, whatever happens.
    let script = format!(
        "set -e; mount -t proc proc {r}/proc; mount -t sysfs sysfs {r}/sys; \
         chroot {r} /tracer --version; chroot {r} /tracer check",
        r = root.display()
    );
    let out = cmd::output(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]))
    .context("the static binary does not run in an empty chroot")?;
    let version = out.lines().next().unwrap_or_default();
    ensure!(
        version.starts_with("tracer "),
        "`tracer --version` in the chroot printed {version:?}"
    );
    println!("xtask: the static binary runs in an empty chroot: {version}");
    std::fs::remove_dir_all(&root).ok();
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct DebArgs {
    /// Also run lintian on the package (installed when missing) and fail on its errors
    /// and warnings.
    #[arg(long)]
    pub lintian: bool,
}

/// `cargo xtask deb`: builds the release binary and lays out the package for
/// `dpkg-deb`; returns the .deb's path.
pub fn deb(args: &DebArgs) -> Result<PathBuf> {
    let mut apt = Apt::new();
    let built = crate::build(true)?;
    let deb = build_deb(&mut apt, &built.bin)?;
    if args.lintian {
        lintian(&mut apt, &deb)?;
    }
    Ok(deb)
}

/// What install_e2e needs, on a fresh machine too: man-db (man) and the package, built
/// and checked by lintian; returns the package's path.
pub fn prepare_e2e() -> Result<PathBuf> {
    let mut apt = Apt::new();
    if !cmd::succeeds(Command::new("man").arg("--version")) {
        apt.install(&["man-db"])?;
    }
    let built = crate::build(true)?;
    let deb = build_deb(&mut apt, &built.bin)?;
    lintian(&mut apt, &deb)?;
    Ok(deb)
}

fn build_deb(apt: &mut Apt, bin: &Path) -> Result<PathBuf> {
    let need: Vec<&str> = [("dpkg-shlibdeps", "dpkg-dev"), ("strip", "binutils")]
        .into_iter()
        .filter(|(prog, _)| {
            !cmd::succeeds(Command::new("sh").args(["-c", &format!("command -v {prog}")]))
        })
        .map(|(_, pkg)| pkg)
        .collect();
    apt.install(&need)?;

    let arch = cmd::output(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_string();
    let version = deb_version();
    let work = crate::target_dir()?.join("deb");
    let root = work.join(format!("tracer_{version}_{arch}"));
    if root.exists() {
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("cannot empty {}", root.display()))?;
    }
    std::fs::create_dir_all(&root)?;

    // Debian ships binaries without symbols (lintian: unstripped-binary-or-object).
    let stripped = work.join("tracer.stripped");
    cmd::run(
        Command::new("strip")
            .args([
                "--remove-section=.comment",
                "--remove-section=.note",
                "--strip-unneeded",
                "-o",
            ])
            .arg(&stripped)
            .arg(bin),
    )?;
    let mut files = files(&stripped, Path::new("/usr"), Flavour::Debian)?;
    let doc = Path::new("/usr/share/doc/tracer");
    let readme = crate::workspace_root().join("README.md");
    files.push(File {
        path: doc.join("README.md.gz"),
        data: gzip(
            &std::fs::read(&readme).with_context(|| format!("cannot read {}", readme.display()))?,
        )?,
        mode: 0o644,
    });
    // `tracer serve` as a service, shipped disabled (no maintainer script enables it).
    let unit = crate::workspace_root().join("contrib/tracer.service");
    files.push(File {
        path: PathBuf::from("/usr/lib/systemd/system/tracer.service"),
        data: std::fs::read(&unit).with_context(|| format!("cannot read {}", unit.display()))?,
        mode: 0o644,
    });
    let maintainer = maintainer()?;
    files.push(File {
        path: doc.join("copyright"),
        data: copyright()?.into_bytes(),
        mode: 0o644,
    });
    files.push(File {
        path: doc.join("changelog.Debian.gz"),
        data: gzip(changelog(&version, &maintainer)?.as_bytes())?,
        mode: 0o644,
    });
    // Each override says why (lintian prints the comment with the tag).
    files.push(File {
        path: PathBuf::from("/usr/share/lintian/overrides/tracer"),
        data:
            b"# Built outside Debian's archive: there is no ITP bug for the first entry to close.\n\
                tracer: initial-upload-closes-no-bugs\n\
                # yaml-rust2 (tracer serve's web config) is pure Rust, not libyaml: lintian matches\n\
                # error strings the two parsers share.\n\
                tracer: embedded-library libyaml [usr/bin/tracer]\n"
                .to_vec(),
        mode: 0o644,
    });
    write_files(&root, &files)?;

    let depends = shlib_depends(&work, &under(&root, Path::new("/usr/bin/tracer")))?;
    let installed_kib: u64 = files
        .iter()
        .map(|f| (f.data.len() as u64).div_ceil(1024))
        .sum();
    let control = format!(
        "Package: tracer\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: {maintainer}\n\
         Installed-Size: {installed_kib}\n\
         Depends: {depends}\n\
         Section: utils\n\
         Priority: optional\n\
         Description: Linux scheduling tracer on eBPF\n \
         Per-thread on-CPU time, run-queue latency and off-CPU time, with their\n \
         histograms, computed in the kernel at every context switch by eBPF\n \
         programs, joined with perf counters and, on pseries, the hypervisor's\n \
         dispatch statistics. Run it as root: sudo tracer run.\n"
    );
    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    std::fs::write(debian.join("control"), control)?;
    let mut sums = String::new();
    for f in &files {
        let hex = cmd::output(Command::new("md5sum").arg(under(&root, &f.path)))?;
        let hash = hex.split_whitespace().next().unwrap_or_default();
        let rel = f.path.strip_prefix("/").unwrap_or(&f.path);
        sums.push_str(&format!("{hash}  {}\n", rel.display()));
    }
    std::fs::write(debian.join("md5sums"), sums)?;
    std::fs::set_permissions(&debian, std::fs::Permissions::from_mode(0o755))?;
    for f in ["control", "md5sums"] {
        std::fs::set_permissions(debian.join(f), std::fs::Permissions::from_mode(0o644))?;
    }
    let deb = work.join(format!("tracer_{version}_{arch}.deb"));
    cmd::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&root)
            .arg(&deb),
    )?;
    println!("xtask: built {}", deb.display());
    Ok(deb)
}

/// `Depends:` from Debian's own tool, which reads the binary's needed libraries and the
/// symbol versions it uses (the lowest libc6 that has them all). dpkg-shlibdeps wants a
/// debian/control in its working directory: a minimal one.
fn shlib_depends(work: &Path, bin: &Path) -> Result<String> {
    let dir = work.join("shlibdeps");
    std::fs::create_dir_all(dir.join("debian"))?;
    std::fs::write(
        dir.join("debian/control"),
        "Source: tracer\n\nPackage: tracer\nArchitecture: any\n",
    )?;
    let out = cmd::output(
        Command::new("dpkg-shlibdeps")
            .args(["-O", "-e"])
            .arg(bin)
            .current_dir(&dir),
    )?;
    let depends = out
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .context("dpkg-shlibdeps printed no shlibs:Depends")?;
    Ok(depends.trim().to_string())
}

/// `Name <email>` from DEBFULLNAME/DEBEMAIL (as dch uses them), else git's user.
fn maintainer() -> Result<String> {
    let git = |key: &str| {
        cmd::output(
            Command::new("git")
                .args(["config", key])
                .current_dir(crate::workspace_root()),
        )
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
    };
    let name = env::var("DEBFULLNAME").ok().or_else(|| git("user.name"));
    let email = env::var("DEBEMAIL").ok().or_else(|| git("user.email"));
    match (name, email) {
        (Some(n), Some(e)) => Ok(format!("{n} <{e}>")),
        _ => bail!(
            "the package needs a maintainer: set DEBFULLNAME and DEBEMAIL (or git's user.name and user.email)"
        ),
    }
}

/// The changelog Debian wants: one entry naming the commit it was built from.
fn changelog(version: &str, maintainer: &str) -> Result<String> {
    let commit = cmd::output(
        Command::new("git")
            .args(["log", "-1", "--format=%h%n%aD", "--abbrev=12"])
            .current_dir(crate::workspace_root()),
    )
    .unwrap_or_default();
    let mut lines = commit.lines();
    let hash = lines.next().unwrap_or("an unknown commit").to_string();
    // The commit's date, not now: the same commit gives the same package.
    let date = lines
        .next()
        .map(str::to_string)
        .unwrap_or_else(|| "Thu, 01 Jan 1970 00:00:00 +0000".into());
    Ok(format!(
        "tracer ({version}) unstable; urgency=medium\n\n  \
         * Built by `cargo xtask deb` from commit {hash}.\n\n \
         -- {maintainer}  {date}\n"
    ))
}

/// debian/copyright in the machine-readable format: the workspace's licence (MIT OR
/// Apache-2.0), MIT in full, Apache-2.0 by reference to Debian's common licences.
fn copyright() -> Result<String> {
    let mit_path = crate::workspace_root().join("LICENSE-MIT");
    let mit = std::fs::read_to_string(&mit_path)
        .with_context(|| format!("cannot read {}", mit_path.display()))?;
    // The holder line of the MIT text, also the package's Copyright field.
    let holder = mit
        .lines()
        .find_map(|l| l.strip_prefix("Copyright (c) "))
        .with_context(|| format!("{} has no `Copyright (c)` line", mit_path.display()))?;
    let body: String = mit
        .lines()
        .map(|l| {
            if l.trim().is_empty() {
                " .\n".to_string()
            } else {
                format!(" {l}\n")
            }
        })
        .collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: tracer\n\n\
         Files: *\n\
         Copyright: {holder}\n\
         License: MIT or Apache-2.0\n\n\
         License: MIT\n{body}\n\
         License: Apache-2.0\n \
         On Debian systems, the full text of the Apache License, Version 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n"
    ))
}

/// Runs lintian (installed when missing) on `deb`; errors and warnings fail, except
/// the ones the package's overrides explain.
fn lintian(apt: &mut Apt, deb: &Path) -> Result<()> {
    if !cmd::succeeds(Command::new("lintian").arg("--version")) {
        apt.install(&["lintian"])?;
    }
    let status = cmd::status(
        Command::new("lintian")
            .args(["--info", "--display-info", "--fail-on", "error,warning"])
            .arg(deb),
    )?;
    ensure!(
        status.success(),
        "lintian found problems in {}: see above",
        deb.display()
    );
    println!("xtask: lintian: no errors or warnings in {}", deb.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_lines_are_checked() {
        let dir = std::env::temp_dir().join(format!("xtask-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m");
        std::fs::write(
            &path,
            "# comment\nfile /usr/bin/tracer\ndir /usr/share/tracer\n",
        )
        .unwrap();
        let entries = read_manifest(&path).unwrap();
        assert_eq!(
            entries,
            [
                ("file".to_string(), PathBuf::from("/usr/bin/tracer")),
                ("dir".to_string(), PathBuf::from("/usr/share/tracer")),
            ]
        );
        // A relative path would be removed relative to wherever uninstall runs.
        for bad in ["file usr/bin/tracer\n", "rm /usr/bin/tracer\n", "file\n"] {
            std::fs::write(&path, bad).unwrap();
            let e = read_manifest(&path).unwrap_err().to_string();
            assert!(e.contains(":1: expected"), "{bad:?}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_files_reports_the_directories_it_created() {
        let dest = std::env::temp_dir().join(format!("xtask-write-{}", std::process::id()));
        std::fs::create_dir_all(dest.join("usr")).unwrap();
        let files = [File {
            path: PathBuf::from("/usr/share/x/y"),
            data: b"y".to_vec(),
            mode: 0o644,
        }];
        let created = write_files(&dest, &files).unwrap();
        assert_eq!(created, [dest.join("usr/share"), dest.join("usr/share/x")]);
        assert_eq!(std::fs::read(dest.join("usr/share/x/y")).unwrap(), b"y");
        std::fs::remove_dir_all(&dest).unwrap();
    }
}
