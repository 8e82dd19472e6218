//! Shipping the tracer, checked by the real consumers: `cargo xtask install --destdir`
//! and `uninstall`, the Debian package through dpkg, its man pages through man, its
//! bash completion through bash.
//!
//! `cargo xtask test` builds the package once before the end-to-end tests and passes
//! its path in `TRACER_DEB`, and its own binary in `TRACER_XTASK`; run alone, the tests
//! build both through `cargo run -p xtask`. It also installs what they run (dpkg-dev,
//! man-db). Root: dpkg installs into the live system.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use tracer_tests::require_root;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The xtask: `TRACER_XTASK`, else `cargo run -p xtask`.
fn xtask() -> Command {
    match std::env::var_os("TRACER_XTASK") {
        Some(x) => {
            let mut c = Command::new(x);
            c.current_dir(workspace());
            c
        }
        None => {
            let mut c = Command::new("cargo");
            c.args(["run", "--quiet", "--package", "xtask", "--"])
                .current_dir(workspace());
            c
        }
    }
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

/// A fresh directory under the system's temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tracer-{name}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    dir
}

/// Every path under `dir` (itself included).
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
        out.insert(p);
    }
    out
}

/// The man page rendered by man-db as a reader sees it (plain text: stdout is a pipe).
fn render_man(page: &Path) -> String {
    stdout(
        Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat"),
    )
}

/// What bash's `complete -p tracer` prints after sourcing `script`.
fn bash_completion(script: &Path) -> String {
    stdout(Command::new("bash").arg("-c").arg(format!(
        "source '{}' && complete -p tracer",
        script.display()
    )))
}

/// The completion bash offers for `words` (the last one being completed).
fn bash_complete(script: &Path, words: &str) -> String {
    let cmd = format!(
        "source '{}'; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
         COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; \
         $(complete -p tracer | sed 's/.*-F \\([^ ]*\\).*/\\1/') tracer \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    stdout(Command::new("bash").arg("-c").arg(cmd))
}

/// `tracer.1` and `tracer-SUB.1` for each visible subcommand.
fn man_pages() -> Vec<String> {
    use clap::CommandFactory as _;
    let mut pages = vec!["tracer.1".to_string()];
    pages.extend(
        tracer::cli::Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| format!("tracer-{}.1", s.get_name())),
    );
    assert!(pages.len() >= 4, "{pages:?}");
    pages
}

#[test]
#[ignore = "needs root"]
fn install_into_destdir_then_uninstall_removes_exactly_what_it_wrote() {
    let dest = temp_dir("install");
    let out = stdout(
        xtask()
            .args(["install", "--prefix", "/opt/tracer-e2e", "--destdir"])
            .arg(&dest),
    );
    let prefix = dest.join("opt/tracer-e2e");
    let man1 = prefix.join("share/man/man1");
    // One page per visible subcommand, as the tracer defines them.
    let pages = man_pages();
    let mut expected: Vec<String> = ["bin/tracer"].iter().map(|s| s.to_string()).collect();
    expected.extend(pages.iter().map(|p| format!("share/man/man1/{p}")));
    expected.extend(
        [
            "share/bash-completion/completions/tracer",
            "share/zsh/site-functions/_tracer",
            "share/fish/vendor_completions.d/tracer.fish",
            "share/tracer/install-manifest",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let files: BTreeSet<PathBuf> = tree(&dest).into_iter().filter(|p| p.is_file()).collect();
    let want: BTreeSet<PathBuf> = expected.iter().map(|f| prefix.join(f)).collect();
    assert_eq!(files, want, "install output:\n{out}");

    // The installed binary runs and names its build.
    let version = stdout(Command::new(prefix.join("bin/tracer")).arg("--version"));
    assert!(
        version.starts_with(&format!("tracer {} (commit ", env!("CARGO_PKG_VERSION")))
            && version.contains("bpf object sha256:"),
        "{version}"
    );
    assert!(
        !version.contains("sha256:none"),
        "the installed tracer has no eBPF object: {version}"
    );
    // The manifest names the paths as installed, without DESTDIR.
    let manifest = std::fs::read_to_string(prefix.join("share/tracer/install-manifest")).unwrap();
    assert!(
        manifest.contains("file /opt/tracer-e2e/bin/tracer\n")
            && !manifest.contains(&dest.display().to_string()),
        "{manifest}"
    );

    // man renders every page; the run page documents its options.
    for page in &pages {
        let text = render_man(&man1.join(page));
        let name = page.trim_end_matches(".1");
        assert!(text.contains(name), "{page} does not name {name}:\n{text}");
    }
    let run_page = render_man(&man1.join("tracer-run.1"));
    for option in ["--json", "--duration", "--probe", "--runq-from"] {
        assert!(run_page.contains(option), "tracer-run(1) lacks {option}");
    }
    let main_page = render_man(&man1.join("tracer.1"));
    assert!(
        main_page.contains("tracer-run(1)") && !main_page.contains("generate"),
        "tracer(1) should list the visible subcommands only:\n{main_page}"
    );

    // bash takes the completion and completes subcommands and options from it; the
    // hidden subcommands are not offered.
    let bash = prefix.join("share/bash-completion/completions/tracer");
    let registered = bash_completion(&bash);
    assert!(
        registered.starts_with("complete ") && registered.trim_end().ends_with(" tracer"),
        "{registered}"
    );
    let subcommands = bash_complete(&bash, "tracer ''");
    for sub in ["run", "check", "dtl"] {
        assert!(
            subcommands.lines().any(|l| l == sub),
            "no {sub} in {subcommands:?}"
        );
    }
    assert!(
        !subcommands.contains("floor") && !subcommands.contains("generate"),
        "hidden subcommands offered: {subcommands:?}"
    );
    let probes = bash_complete(&bash, "tracer run --probe ''");
    assert!(
        probes.lines().any(|l| l == "tp-btf"),
        "no tp-btf in {probes:?}"
    );
    let zsh = std::fs::read_to_string(prefix.join("share/zsh/site-functions/_tracer")).unwrap();
    assert!(zsh.starts_with("#compdef tracer"), "{zsh}");
    let fish = std::fs::read_to_string(prefix.join("share/fish/vendor_completions.d/tracer.fish"))
        .unwrap();
    assert!(fish.contains("complete -c tracer"), "{fish}");

    // Uninstall removes what install wrote and keeps a file someone else put in one of
    // install's directories.
    let foreign = man1.join("someone-else.1");
    std::fs::write(&foreign, "not ours").unwrap();
    stdout(
        xtask()
            .args(["uninstall", "--prefix", "/opt/tracer-e2e", "--destdir"])
            .arg(&dest),
    );
    let left = tree(&dest);
    let mut kept: BTreeSet<PathBuf> = foreign.ancestors().map(Path::to_path_buf).collect();
    kept.retain(|p| p.starts_with(&dest));
    assert_eq!(
        left, kept,
        "uninstall left more (or less) than the foreign file"
    );
    std::fs::remove_dir_all(&dest).unwrap();
}

/// The package built by `cargo xtask test` (`TRACER_DEB`), else built here.
fn deb() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_DEB") {
        return PathBuf::from(p);
    }
    let out = stdout(xtask().arg("deb"));
    let line = out
        .lines()
        .filter_map(|l| l.strip_prefix("xtask: built "))
        .find(|l| l.ends_with(".deb"))
        .unwrap_or_else(|| panic!("`cargo xtask deb` named no .deb:\n{out}"));
    PathBuf::from(line)
}

fn dpkg_status() -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "tracer"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root"]
fn deb_installs_with_dpkg_runs_from_path_and_removes_cleanly() {
    require_root();
    let deb = deb();
    assert!(deb.is_file(), "{} is missing", deb.display());
    if dpkg_status().contains(" installed") {
        // Left by an earlier run that failed half-way.
        run(Command::new("dpkg").args(["--purge", "tracer"]));
    }
    // The package's paths, and which of them exist before (/usr, /usr/share/man...).
    let listing = stdout(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    let paths: Vec<PathBuf> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| Path::new("/").join(p.trim_start_matches("./")))
        .filter(|p| p != Path::new("/"))
        .collect();
    assert!(
        paths.contains(&PathBuf::from("/usr/bin/tracer")),
        "{listing}"
    );
    let existed: BTreeSet<PathBuf> = paths.iter().filter(|p| p.exists()).cloned().collect();
    assert!(
        !existed.contains(Path::new("/usr/bin/tracer")),
        "/usr/bin/tracer exists before the package is installed"
    );

    run(Command::new("dpkg").arg("-i").arg(&deb));
    let result = std::panic::catch_unwind(|| {
        assert!(dpkg_status().ends_with(" installed"), "{}", dpkg_status());
        // From PATH, as the README says to run it.
        let path = "/usr/sbin:/usr/bin:/sbin:/bin";
        let which = stdout(
            Command::new("sh")
                .args(["-c", "command -v tracer"])
                .env("PATH", path),
        );
        assert_eq!(which.trim(), "/usr/bin/tracer");
        let report = stdout(
            Command::new("tracer")
                .args(["run", "-d", "1s", "--json"])
                .env("PATH", path),
        );
        let json: serde_json::Value =
            serde_json::from_str(&report).unwrap_or_else(|e| panic!("not JSON ({e}):\n{report}"));
        let threads = json["threads"].as_array().expect("a threads array");
        assert!(!threads.is_empty(), "a 1 s system-wide run saw no thread");
        assert!(json["probe"].is_string(), "{json}");

        // man finds the page by name in the system's manpath, and renders it.
        let located = stdout(Command::new("man").args(["-w", "tracer-run"]));
        assert_eq!(located.trim(), "/usr/share/man/man1/tracer-run.1.gz");
        let page = render_man(Path::new("/usr/share/man/man1/tracer-run.1.gz"));
        assert!(
            page.contains("tracer-run") && page.contains("--json"),
            "{page}"
        );

        let registered =
            bash_completion(Path::new("/usr/share/bash-completion/completions/tracer"));
        assert!(registered.trim_end().ends_with(" tracer"), "{registered}");
        // The copyright file names the licences.
        let copyright = std::fs::read_to_string("/usr/share/doc/tracer/copyright").unwrap();
        assert!(
            copyright.contains("License: MIT or Apache-2.0"),
            "{copyright}"
        );
    });
    run(Command::new("dpkg").args(["-r", "tracer"]));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(!dpkg_status().contains(" installed"), "{}", dpkg_status());
    let left: Vec<&PathBuf> = paths
        .iter()
        .filter(|p| p.symlink_metadata().is_ok() && !existed.contains(*p))
        .collect();
    assert!(left.is_empty(), "dpkg -r left {left:?}");
    run(Command::new("dpkg").args(["--purge", "tracer"]));
}
