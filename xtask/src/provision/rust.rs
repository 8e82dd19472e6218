//! The Rust side, checked before installed: the nightly toolchain's `rust-src` and a
//! `bpf-linker` built against the nightly's own libLLVM (the eBPF build), rustup
//! components (rustfmt, clippy) and rustup targets (musl, the cross targets).

use std::{
    env,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context, Result};

use crate::{cmd, elf};

const BPF_LINKER_VERSION: &str = "0.13.0";

/// What the eBPF build needs.
pub struct Tools {
    /// A working `bpf-linker` built against the nightly's LLVM.
    pub bpf_linker: PathBuf,
}

/// Facts about the installed nightly toolchain.
struct Nightly {
    version: String,
    commit: String,
    llvm_major: String,
    /// The toolchain's lib directory, which holds its libLLVM.
    lib_dir: PathBuf,
    /// File name of that libLLVM (also its soname), e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`.
    libllvm: String,
}

/// The nightly with rust-src and a bpf-linker that matches it.
pub fn ebpf_tools() -> Result<Tools> {
    let nightly = find_nightly()?;
    println!(
        "setup: found nightly toolchain: {} (LLVM {}, {})",
        nightly.version, nightly.llvm_major, nightly.libllvm
    );
    ensure_rust_src()?;
    let bpf_linker = ensure_bpf_linker(&nightly)?;
    Ok(Tools { bpf_linker })
}

fn rustup() -> Command {
    Command::new("rustup")
}

fn find_nightly() -> Result<Nightly> {
    let toolchains = cmd::output(rustup().args(["toolchain", "list"]))?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        bail!(
            "no nightly Rust toolchain is installed, and the eBPF programs need one: \
             install it with `rustup toolchain install nightly --component rust-src`, then re-run"
        );
    }
    let info = cmd::output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .with_context(|| format!("`rustc +nightly -vV` printed no `{name}` line: reinstall the nightly with rustup"))
    };
    let llvm = field("LLVM version:")?;
    let sysroot = cmd::output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let lib_dir = PathBuf::from(sysroot.trim()).join("lib");
    Ok(Nightly {
        version: info.lines().next().unwrap_or_default().to_string(),
        commit: field("commit-hash:")?,
        llvm_major: llvm.split('.').next().unwrap_or_default().to_string(),
        libllvm: find_libllvm(&lib_dir)?,
        lib_dir,
    })
}

/// The one real libLLVM shared object in the toolchain's lib directory (the toolchain
/// also ships a `libLLVM-*.so` linker script, which is not ELF).
fn find_libllvm(lib_dir: &Path) -> Result<String> {
    let entries = lib_dir.read_dir().with_context(|| {
        format!(
            "cannot list {}: reinstall the nightly with rustup",
            lib_dir.display()
        )
    })?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("libLLVM") && elf::is_elf(&entry.path()) {
            found.push(name);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "the nightly toolchain has no libLLVM in {}: reinstall it with \
             `rustup toolchain install nightly --force`",
            lib_dir.display()
        ),
        many => bail!(
            "several libLLVM files in {}: {many:?}; cannot tell which one rustc uses",
            lib_dir.display()
        ),
    }
}

fn ensure_rust_src() -> Result<()> {
    let installed =
        cmd::output(rustup().args(["component", "list", "--installed", "--toolchain", "nightly"]))?;
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        println!("setup: found rust-src for nightly");
        return Ok(());
    }
    println!("setup: rust-src for nightly is missing: installing it");
    cmd::run(rustup().args(["component", "add", "rust-src", "--toolchain", "nightly"])).context(
        "could not add rust-src to the nightly toolchain: check network access to rustup's server",
    )?;
    println!("setup: installed rust-src for nightly");
    Ok(())
}

/// Adds rustup component `name` (rustfmt, clippy) to the toolchain that builds the
/// workspace when it lacks it, so the lint gates of `cargo xtask test` run on a machine
/// with only rustup's toolchains.
pub fn component(name: &str) -> Result<()> {
    component_of(None, name)
}

/// The same for the nightly toolchain (clippy over the eBPF crate).
pub fn nightly_component(name: &str) -> Result<()> {
    component_of(Some("nightly"), name)
}

fn component_of(toolchain: Option<&str>, name: &str) -> Result<()> {
    let with_toolchain = |c: &mut Command| {
        if let Some(t) = toolchain {
            c.args(["--toolchain", t]);
        }
    };
    let mut list = rustup();
    list.current_dir(crate::workspace_root())
        .args(["component", "list", "--installed"]);
    with_toolchain(&mut list);
    let installed = cmd::output(&mut list)?;
    if installed.lines().any(|l| l.starts_with(name)) {
        return Ok(());
    }
    let which = toolchain.unwrap_or("the workspace's toolchain");
    println!("setup: {name} is missing from {which}: installing it");
    let mut add = rustup();
    add.current_dir(crate::workspace_root())
        .args(["component", "add", name]);
    with_toolchain(&mut add);
    cmd::run(&mut add)
        .with_context(|| format!("could not add {name}: check network access to rustup's server"))
}

fn cargo_home() -> Result<PathBuf> {
    if let Some(home) = env::var_os("CARGO_HOME") {
        return std::path::absolute(home).context("cannot resolve CARGO_HOME");
    }
    let home = env::var_os("HOME").context("neither CARGO_HOME nor HOME is set: set CARGO_HOME")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

fn ensure_bpf_linker(nightly: &Nightly) -> Result<PathBuf> {
    let cargo_home = cargo_home()?;
    let linker = cargo_home.join("bin").join("bpf-linker");
    match check_linker(&linker, &nightly.libllvm) {
        Ok(version) => println!(
            "setup: found {version} at {}, linked with {}",
            linker.display(),
            nightly.libllvm
        ),
        Err(why) => {
            println!("setup: {why:#}: building bpf-linker {BPF_LINKER_VERSION} against the nightly's LLVM (about a minute)");
            build_linker(nightly, &cargo_home)?;
            let version = check_linker(&linker, &nightly.libllvm).context(
                "the freshly built bpf-linker does not work: see the build output above",
            )?;
            println!("setup: installed {version} at {}", linker.display());
        }
    }
    Ok(linker)
}

/// Checks that `linker` exists, needs exactly the nightly's libLLVM and runs; returns its version.
fn check_linker(linker: &Path, libllvm: &str) -> Result<String> {
    ensure!(linker.exists(), "no bpf-linker at {}", linker.display());
    let needed = elf::needed_libraries(linker)?;
    let linked = needed.iter().find(|lib| lib.starts_with("libLLVM"));
    ensure!(
        linked.map(String::as_str) == Some(libllvm),
        "{} links {} but the nightly ships {libllvm}",
        linker.display(),
        linked.map_or("no shared libLLVM", String::as_str),
    );
    let version = cmd::output(Command::new(linker).arg("--version"))?;
    Ok(version.trim().to_string())
}

/// Builds bpf-linker with `cargo install` against the nightly's libLLVM. LLVM_PREFIX
/// must hold `lib/libLLVM.so` and the versioned soname; the binary keeps an rpath to
/// that directory, so it lives in CARGO_HOME (per nightly commit), not in /tmp.
fn build_linker(nightly: &Nightly, cargo_home: &Path) -> Result<()> {
    let prefix = cargo_home.join("tracer-llvm").join(&nightly.commit);
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("cannot create {}", lib.display()))?;
    let target = nightly.lib_dir.join(&nightly.libllvm);
    for name in ["libLLVM.so", nightly.libllvm.as_str()] {
        let link = lib.join(name);
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link)
                .with_context(|| format!("cannot replace {}", link.display()))?;
        }
        symlink(&target, &link)
            .with_context(|| format!("cannot create symlink {}", link.display()))?;
    }
    cmd::run(
        Command::new("cargo")
            .args([
                "+nightly",
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
            ])
            .args(["--locked", "--force", "--no-default-features", "--features"])
            .arg(format!("llvm-{}", nightly.llvm_major))
            .arg("--root")
            .arg(cargo_home)
            .env("LLVM_PREFIX", &prefix),
    )
    .context("building bpf-linker failed: check network access to crates.io and the errors above")
}

/// Adds rustup target `target` to the toolchain that builds the workspace when missing.
pub fn target(target: &str) -> Result<()> {
    let installed = cmd::output(
        rustup()
            .args(["target", "list", "--installed"])
            .current_dir(crate::workspace_root()),
    )?;
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    cmd::run(
        rustup()
            .args(["target", "add", target])
            .current_dir(crate::workspace_root()),
    )
}
