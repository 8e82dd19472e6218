//! `tracer diff A.json B.json`: reads two total reports of `tracer run --json`, refuses
//! what is not one or what cannot be compared (one line, exit 2), and prints the
//! comparison ([`crate::model::diff::diff`]).
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::{
    model::{
        diff::{comparable, diff, doc},
        words::escape,
    },
    output::{
        diff::{format_diff_json, format_diff_text},
        stdout,
    },
    sys::bounded::read_bounded,
};

/// The largest report read (a system-wide run with per-thread histograms of a busy host
/// is a few MiB).
const MAX_REPORT: u64 = 256 << 20;

#[derive(Debug, Clone)]
pub struct DiffConfig {
    pub a: PathBuf,
    pub b: PathBuf,
    pub json: bool,
}

fn load(path: &Path) -> Result<doc::RunDoc> {
    let name = escape(path.as_os_str().as_encoded_bytes());
    let bytes = match read_bounded(path, MAX_REPORT) {
        Ok(b) => b,
        Err(e) => bail!("{name}: {e}"),
    };
    match doc::parse(&bytes) {
        Ok((d, _)) => Ok(d),
        Err(e) => bail!("{name}: {e}"),
    }
}

pub fn run(c: &DiffConfig) -> Result<i32> {
    let (a, b) = (load(&c.a)?, load(&c.b)?);
    if let Err(why) = comparable(&a, &b) {
        bail!("{why}");
    }
    let (na, nb) = (c.a.to_string_lossy(), c.b.to_string_lossy());
    let d = diff(&na, &a, &nb, &b);
    if c.json {
        stdout::emit(&format_diff_json(&d)?)?;
    } else {
        stdout::emit_raw(&format_diff_text(&d))?;
    }
    Ok(0)
}
