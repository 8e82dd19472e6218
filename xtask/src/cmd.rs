//! Running child processes with readable errors.

use std::{
    ffi::OsStr,
    process::{Command, ExitStatus, Stdio},
};

use anyhow::{bail, Context, Result};

/// The command line as a shell would show it, with the environment variables we set.
pub fn describe(cmd: &Command) -> String {
    let env = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), show_env(k, v?))));
    let args = cmd.get_args().map(quote);
    env.chain([quote(cmd.get_program())])
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

/// An environment value, with the inherited value abbreviated, e.g. `/x/bin:$PATH`.
fn show_env(key: &OsStr, value: &OsStr) -> String {
    let value = quote(value);
    match std::env::var(key) {
        Ok(old) if !old.is_empty() && value.len() > old.len() && value.ends_with(&old) => {
            format!(
                "{}${}",
                &value[..value.len() - old.len()],
                key.to_string_lossy()
            )
        }
        _ => value,
    }
}

fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    if word.is_empty() || word.contains(char::is_whitespace) {
        format!("'{word}'")
    } else {
        word.into_owned()
    }
}

/// Runs `cmd` with inherited stdio and returns its exit status.
pub fn status(cmd: &mut Command) -> Result<ExitStatus> {
    let shown = describe(cmd);
    println!("xtask: $ {shown}");
    cmd.status().with_context(|| {
        format!("could not start `{shown}`: is the program installed and on PATH?")
    })
}

/// Runs `cmd` and fails unless it succeeds.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = status(cmd)?;
    if !status.success() {
        bail!(
            "`{}` failed ({status}): see its output above",
            describe(cmd)
        );
    }
    Ok(())
}

/// Whether `cmd` runs and exits 0, its output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cmd` quietly and returns its stdout; on failure the error carries its stderr.
pub fn output(cmd: &mut Command) -> Result<String> {
    let shown = describe(cmd);
    let out = cmd.stdin(Stdio::null()).output().with_context(|| {
        format!("could not start `{shown}`: is the program installed and on PATH?")
    })?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{shown}` printed non-UTF-8 output"))
}
