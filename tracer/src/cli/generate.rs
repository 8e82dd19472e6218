//! `tracer __generate` (hidden): man pages and shell completions rendered from the clap
//! definitions in `cli.rs`, so they always describe the binary that prints them.
//!
//! A subcommand of the binary rather than a library function called by xtask: xtask
//! linking the `tracer` crate would build it (and run its build script) a second time
//! in xtask's own profile and environment, without `TRACER_EBPF_DIR`, so the two
//! builds would keep invalidating each other. `cargo xtask install` already has the
//! binary it installs; it asks that binary.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use clap::{CommandFactory, Subcommand, ValueEnum};
use clap_complete::Shell;

#[derive(Subcommand, Debug)]
pub enum What {
    /// Write `tracer.1` and one page per subcommand (`tracer-run.1`, ...) into DIR.
    Man {
        /// The directory (created when missing).
        dir: PathBuf,
    },
    /// Print the completion script for SHELL on standard output.
    Completion {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

/// The shells we install completions for.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

pub fn run(what: What) -> Result<i32> {
    match what {
        What::Man { dir } => {
            for page in man_pages(&dir)? {
                crate::output::stdout::emit(&page.display().to_string())?;
            }
        }
        What::Completion { shell } => {
            let shell = match shell {
                CompletionShell::Bash => Shell::Bash,
                CompletionShell::Zsh => Shell::Zsh,
                CompletionShell::Fish => Shell::Fish,
            };
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut visible(), "tracer", &mut script);
            crate::output::stdout::emit_raw(&String::from_utf8_lossy(&script))?;
        }
    }
    Ok(0)
}

/// The command line without its hidden subcommands, which clap_complete would offer
/// (clap has no way to remove a subcommand: a new command gets the visible ones).
fn visible() -> clap::Command {
    let cli = crate::cli::Cli::command();
    let mut cmd = clap::Command::new("tracer")
        .about(cli.get_about().cloned().unwrap_or_default())
        .version(env!("CARGO_PKG_VERSION"))
        .long_version(crate::cli::LONG_VERSION)
        .subcommand_required(true)
        .args(cli.get_arguments().cloned());
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        cmd = cmd.subcommand(sub.clone());
    }
    cmd
}

/// Renders the pages into `dir`; returns their paths. Hidden subcommands get none.
pub fn man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // No `help` subcommand page: `tracer help run` is `tracer run --help`.
    let mut cmd = visible().disable_help_subcommand(true);
    // Sets each subcommand's bin_name (`tracer run`), which its page's synopsis shows.
    cmd.build();
    let mut pages = vec![("tracer".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // clap keeps names as &'static str (without its `string` feature); a page per
        // subcommand, once per process, is worth a few leaked bytes.
        let name: &'static str = format!("tracer-{}", sub.get_name()).leak();
        pages.push((
            name.to_string(),
            sub.clone().name(name).version(env!("CARGO_PKG_VERSION")),
        ));
    }
    let mut written = Vec::new();
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let text = render(&name, page).with_context(|| format!("cannot render {name}.1"))?;
        fs::File::create(&path)
            .and_then(|mut f| f.write_all(&text))
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// One page: clap_mangen's sections from the definitions, then the written ones
/// (`cli/man`), then the version. clap's `after_help` (the DURATION syntax) goes under
/// NOTES rather than clap_mangen's "EXTRA".
fn render(name: &str, cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let short = name.strip_prefix("tracer-").unwrap_or(name);
    let notes = cmd.get_after_help().map(|h| h.to_string());
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    let mut extra = clap_mangen::roff::Roff::new();
    if let Some(notes) = notes {
        extra.control("SH", ["NOTES"]);
        for para in notes.split("\n\n") {
            extra
                .control("PP", [])
                .text([clap_mangen::roff::roman(para)]);
        }
    }
    extra.extend([crate::cli::man::sections(short)]);
    extra.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_per_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("tracer-man-{}", std::process::id()));
        let pages = man_pages(&dir).unwrap();
        let names: Vec<_> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        use clap::CommandFactory as _;
        let mut want = vec!["tracer.1".to_string()];
        want.extend(
            crate::cli::Cli::command()
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| format!("tracer-{}.1", s.get_name())),
        );
        assert_eq!(names, want);
        for sub in ["run", "dtl", "check"] {
            assert!(names.contains(&format!("tracer-{sub}.1")), "{names:?}");
        }
        let run = fs::read_to_string(dir.join("tracer-run.1")).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert!(run.contains("tracer\\-run"), "{run}");
        assert!(run.contains("\\-\\-json"), "{run}");
    }
}
