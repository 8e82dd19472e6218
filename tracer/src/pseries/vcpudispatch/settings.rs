//! Crash-safe changes of the DTL settings: the guard that restores them, and the state
//! file that lets the next run restore them after a crash (see the module docs above).
use std::{
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use crate::{
    error::TracerError,
    pseries::vcpudispatch::{
        busy::busy_hint,
        stats::{
            excerpt, read_dtl_mask, read_freq, read_stats, StatsState, DTL_MASK_PATH, FREQ_PATH,
            STATE_PATH, STATS_PATH,
        },
    },
    sys::root::Root,
};

/// Writes one setting; EBUSY becomes an explanation of who holds the DTL, EINVAL a
/// rejection with the valid range.
pub fn write_setting(root: &Root, abs: &str, value: &str) -> Result<(), TracerError> {
    let path = root.path(abs);
    let res = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{value}\n").as_bytes()));
    res.map_err(|source| match source.raw_os_error() {
        Some(libc::EBUSY) => TracerError::DtlBusy {
            path: path.clone(),
            hint: busy_hint(root),
        },
        Some(libc::EINVAL) => TracerError::Rejected {
            path: path.clone(),
            value: value.to_string(),
            why: if abs == FREQ_PATH {
                "the valid range is 1..HZ (the kernel's CONFIG_HZ, usually 100, 250 or 1000)".into()
            } else if abs == STATS_PATH {
                "only 0 and 1 are accepted".into()
            } else {
                "invalid value".into()
            },
        },
        _ => TracerError::Write {
            path: path.clone(),
            source,
        },
    })
}

/// The original values of everything `tracer dtl` changed, and who changed them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedSettings {
    pub pid: u32,
    /// Start time of `pid` (clock ticks after boot), to tell a reused PID apart.
    pub starttime: Option<u64>,
    /// Whether vcpudispatch_stats was enabled before.
    pub stats_enabled: Option<bool>,
    pub freq: Option<u32>,
    pub dtl_mask: Option<u32>,
}

impl SavedSettings {
    pub fn is_empty(&self) -> bool {
        self.stats_enabled.is_none() && self.freq.is_none() && self.dtl_mask.is_none()
    }

    /// The state file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# tracer dtl: original DTL settings, restored at exit or by the next run if this one died\n",
        );
        s += &format!("pid {}\n", self.pid);
        if let Some(t) = self.starttime {
            s += &format!("starttime {t}\n");
        }
        if let Some(e) = self.stats_enabled {
            s += &format!("vcpudispatch_stats {}\n", u8::from(e));
        }
        if let Some(f) = self.freq {
            s += &format!("vcpudispatch_stats_freq {f}\n");
        }
        if let Some(m) = self.dtl_mask {
            s += &format!("dtl_event_mask {m:#x}\n");
        }
        s
    }

    /// Parses a state file; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, TracerError> {
        let bad = |why: String| TracerError::Malformed {
            path: path.to_path_buf(),
            why: format!("{why} (check the DTL settings by hand, then remove the file)"),
        };
        let mut s = SavedSettings::default();
        let mut have_pid = false;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, val) = line
                .split_once(' ')
                .map(|(k, v)| (k, v.trim()))
                .ok_or_else(|| bad(format!("line {}: expected `key value`", i + 1)))?;
            let num = || {
                crate::sys::parse::parse_u32_any_base(val)
                    .map_err(|_| bad(format!("line {}: bad value {:?}", i + 1, excerpt(val))))
            };
            match key {
                "pid" => {
                    s.pid = num()?;
                    have_pid = true;
                }
                "starttime" => {
                    s.starttime = Some(val.parse().map_err(|_| {
                        bad(format!("line {}: bad starttime {:?}", i + 1, excerpt(val)))
                    })?)
                }
                "vcpudispatch_stats" => {
                    s.stats_enabled = Some(match val {
                        "0" => false,
                        "1" => true,
                        _ => return Err(bad(format!("line {}: expected 0 or 1", i + 1))),
                    })
                }
                "vcpudispatch_stats_freq" => s.freq = Some(num()?),
                "dtl_event_mask" => s.dtl_mask = Some(num()?),
                _ => {
                    return Err(bad(format!(
                        "line {}: unknown key {:?}",
                        i + 1,
                        excerpt(key)
                    )))
                }
            }
        }
        if !have_pid {
            return Err(bad("no `pid` line".into()));
        }
        Ok(s)
    }
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` text.
pub fn parse_starttime(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn starttime_of(root: &Root, pid: u32) -> Option<u64> {
    fs::read_to_string(root.path(format!("/proc/{pid}/stat")))
        .ok()
        .and_then(|s| parse_starttime(&s))
}

/// Whether the process that wrote a state file still runs (same PID, same start time).
fn writer_alive(root: &Root, saved: &SavedSettings) -> bool {
    match fs::read_to_string(root.path(format!("/proc/{}/stat", saved.pid))) {
        Ok(stat) => match (saved.starttime, parse_starttime(&stat)) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        },
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

/// Writes the saved values back (what is not recorded is left alone); tries them all and
/// returns the first error.
fn restore_values(root: &Root, s: &SavedSettings) -> Result<(), TracerError> {
    let mut first: Option<TracerError> = None;
    let mut keep = |r: Result<(), TracerError>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    if let Some(m) = s.dtl_mask {
        keep(write_setting(root, DTL_MASK_PATH, &format!("{m:#x}")));
    }
    if let Some(f) = s.freq {
        keep(write_setting(root, FREQ_PATH, &f.to_string()));
    }
    if let Some(e) = s.stats_enabled {
        keep(write_setting(root, STATS_PATH, if e { "1" } else { "0" }));
    }
    first.map_or(Ok(()), Err)
}

/// What was restored on behalf of a run that died.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub path: PathBuf,
    pub settings: SavedSettings,
}

impl Recovered {
    pub fn describe(&self) -> String {
        let s = &self.settings;
        let mut what = Vec::new();
        if let Some(e) = s.stats_enabled {
            what.push(format!("vcpudispatch_stats={}", u8::from(e)));
        }
        if let Some(f) = s.freq {
            what.push(format!("vcpudispatch_stats_freq={f}"));
        }
        if let Some(m) = s.dtl_mask {
            what.push(format!("dtl_event_mask={m:#x}"));
        }
        format!(
            "restored DTL settings left changed by a run that died (PID {}, {}): {}",
            s.pid,
            self.path.display(),
            if what.is_empty() {
                "nothing".into()
            } else {
                what.join(", ")
            }
        )
    }
}

/// Owns the DTL settings while they are changed; restores them on [`restore`] or drop.
///
/// [`restore`]: SettingsGuard::restore
#[derive(Debug)]
pub struct SettingsGuard {
    root: Root,
    path: PathBuf,
    saved: SavedSettings,
    /// True once our state file exists.
    written: bool,
}

impl SettingsGuard {
    /// Restores what a dead run left behind, then takes over. Fails while another live
    /// process holds the state file.
    pub fn acquire(root: &Root) -> Result<(Self, Option<Recovered>), TracerError> {
        let path = root.path(STATE_PATH);
        let recovered = recover_stale(root)?;
        let pid = std::process::id();
        let guard = SettingsGuard {
            root: root.clone(),
            path,
            saved: SavedSettings {
                pid,
                starttime: starttime_of(root, pid),
                ..Default::default()
            },
            written: false,
        };
        Ok((guard, recovered))
    }

    /// The state file this guard writes.
    pub fn state_path(&self) -> &Path {
        &self.path
    }

    /// Enables vcpudispatch_stats if it is off. Returns whether it was off.
    pub fn enable_stats(&mut self) -> Result<bool, TracerError> {
        if read_stats(&self.root)? != StatsState::Off {
            return Ok(false);
        }
        self.change(
            |s| s.stats_enabled.is_none(),
            |s| s.stats_enabled = Some(false),
            |s| s.stats_enabled = None,
            STATS_PATH,
            "1",
        )?;
        Ok(true)
    }

    /// Sets vcpudispatch_stats_freq (1..HZ; the kernel checks the upper bound).
    pub fn set_freq(&mut self, n: u32) -> Result<(), TracerError> {
        if n == 0 {
            return Err(TracerError::Rejected {
                path: self.root.path(FREQ_PATH),
                value: "0".into(),
                why: "the valid range is 1..HZ".into(),
            });
        }
        let old = read_freq(&self.root)?;
        if old == n {
            return Ok(());
        }
        self.change(
            |s| s.freq.is_none(),
            |s| s.freq = Some(old),
            |s| s.freq = None,
            FREQ_PATH,
            &n.to_string(),
        )
    }

    /// Sets debugfs dtl_event_mask (bits 0x1, 0x2, 0x4).
    pub fn set_dtl_mask(&mut self, mask: u32) -> Result<(), TracerError> {
        if mask == 0 || mask > 0x7 {
            return Err(TracerError::Rejected {
                path: self.root.path(DTL_MASK_PATH),
                value: format!("{mask:#x}"),
                why: "use a combination of 0x1 (cede), 0x2 (preempt) and 0x4 (faults)".into(),
            });
        }
        let old = read_dtl_mask(&self.root)?;
        if old == mask {
            return Ok(());
        }
        self.change(
            |s| s.dtl_mask.is_none(),
            |s| s.dtl_mask = Some(old),
            |s| s.dtl_mask = None,
            DTL_MASK_PATH,
            &format!("{mask:#x}"),
        )
    }

    /// Records the original (first change only), persists it, then writes the new value;
    /// a failed write forgets the record again so restoring cannot undo someone else's change.
    fn change(
        &mut self,
        unrecorded: impl Fn(&SavedSettings) -> bool,
        record: impl Fn(&mut SavedSettings),
        forget: impl Fn(&mut SavedSettings),
        abs: &str,
        value: &str,
    ) -> Result<(), TracerError> {
        let fresh = unrecorded(&self.saved);
        if fresh {
            record(&mut self.saved);
            if let Err(e) = self.persist() {
                forget(&mut self.saved);
                return Err(e);
            }
        }
        if let Err(e) = write_setting(&self.root, abs, value) {
            if fresh {
                forget(&mut self.saved);
                let _ = self.persist();
            }
            return Err(e);
        }
        Ok(())
    }

    /// Writes the state file: the first time by linking a complete temporary file into
    /// place (atomic and exclusive), later by renaming over it.
    fn persist(&mut self) -> Result<(), TracerError> {
        if self.saved.is_empty() && self.written {
            return self.remove_file();
        }
        let werr = |path: &Path, source| TracerError::Write {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
        }
        let tmp = self.path.with_extension(format!("tmp.{}", self.saved.pid));
        fs::write(&tmp, self.saved.to_text()).map_err(|e| werr(&tmp, e))?;
        let res = if self.written {
            fs::rename(&tmp, &self.path)
        } else {
            let r = fs::hard_link(&tmp, &self.path);
            let _ = fs::remove_file(&tmp);
            r
        };
        match res {
            Ok(()) => {
                self.written = true;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = fs::remove_file(&tmp);
                let pid = fs::read_to_string(&self.path)
                    .ok()
                    .and_then(|t| SavedSettings::parse(&t, &self.path).ok())
                    .map_or(0, |s| s.pid);
                Err(TracerError::SettingsHeld {
                    path: self.path.clone(),
                    pid,
                })
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(werr(&self.path, e))
            }
        }
    }

    fn remove_file(&mut self) -> Result<(), TracerError> {
        match fs::remove_file(&self.path) {
            Ok(()) => {
                self.written = false;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.written = false;
                Ok(())
            }
            Err(source) => Err(TracerError::Write {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Puts every changed setting back and removes the state file (kept if a value could
    /// not be restored, so the next run retries).
    pub fn restore(&mut self) -> Result<(), TracerError> {
        if !self.written {
            return Ok(());
        }
        restore_values(&self.root, &self.saved)?;
        self.saved = SavedSettings {
            pid: self.saved.pid,
            starttime: self.saved.starttime,
            ..Default::default()
        };
        self.remove_file()
    }
}

impl Drop for SettingsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            log::warn!("could not restore the DTL settings: {e}");
        }
    }
}

/// Restores and removes a state file whose writer is gone. Fails if the writer still runs.
pub fn recover_stale(root: &Root) -> Result<Option<Recovered>, TracerError> {
    let path = root.path(STATE_PATH);
    let text = match fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(TracerError::Read { path, source }),
    };
    let saved = SavedSettings::parse(&text, &path)?;
    if saved.pid != std::process::id() && writer_alive(root, &saved) {
        return Err(TracerError::SettingsHeld {
            path,
            pid: saved.pid,
        });
    }
    restore_values(root, &saved)?;
    fs::remove_file(&path).map_err(|source| TracerError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(Some(Recovered {
        path,
        settings: saved,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_round_trips() {
        let s = SavedSettings {
            pid: 42,
            starttime: Some(7),
            stats_enabled: Some(false),
            freq: Some(50),
            dtl_mask: Some(7),
        };
        let p = Path::new("/run/tracer/dtl-state");
        assert_eq!(SavedSettings::parse(&s.to_text(), p).unwrap(), s);
        assert!(SavedSettings::parse("vcpudispatch_stats 0\n", p).is_err());
        assert!(SavedSettings::parse("pid 1\nbogus 2\n", p).is_err());
        assert!(SavedSettings::parse("pid 1\nvcpudispatch_stats 2\n", p).is_err());
    }

    #[test]
    fn starttime_is_field_22() {
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_starttime(stat), Some(98765));
        assert_eq!(parse_starttime("42 (x"), None);
    }
}
