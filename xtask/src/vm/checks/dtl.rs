//! The pseries DTL command: settings enabled, read and restored (or refused elsewhere).

use super::{common::*, threads::*};

/// `cat` of a DTL setting as the step saved it.
fn setting<'a>(step: &'a Step, tag: &str, what: &str) -> &'a str {
    step.part(&format!("{tag}-{what}")).trim()
}

fn stats_off(step: &Step, tag: &str) -> bool {
    setting(step, tag, "stats") == "off"
}

fn stats_on(step: &Step, tag: &str) -> bool {
    setting(step, tag, "stats").starts_with("cpu")
}

pub(super) fn check_dtl(g: &GuestOutput, o: &Offers, cpus: usize) -> Vec<Verdict> {
    if !o.pseries {
        let mut c = Check::new("dtl reports a missing pseries interface");
        if let Some(step) = need_step(g, "dtl-absent", &mut c) {
            expect_refusal(step, "pseries", &mut c);
            return vec![c.done(Some(step))];
        }
        return vec![c.done(None)];
    }
    vec![dtl_basic(g, cpus), dtl_freq(g), dtl_kill9(g)]
}

/// Enable, read, restore to off.
fn dtl_basic(g: &GuestOutput, cpus: usize) -> Verdict {
    let mut c = Check::new("dtl: enable, read, restore to off");
    if let Some(step) = need_step(g, "dtl-basic", &mut c) {
        if let Some(crash) = crashed(step) {
            c.fail(crash);
        }
        c.expect(step.rc == Some(0), || format!("exit status {:?}", step.rc));
        c.expect(stats_off(step, "before"), || {
            format!(
                "vcpudispatch_stats read {:?} before",
                setting(step, "before", "stats")
            )
        });
        match json::parse(step.stdout()) {
            Ok(doc) => {
                let vcpus = doc["vcpus"].items();
                c.expect(doc["stats_enabled"].as_bool() == Some(true), || {
                    "stats_enabled is not true".into()
                });
                c.expect(vcpus.len() == cpus, || {
                    format!("{} vCPUs reported, the guest has {cpus}", vcpus.len())
                });
                c.expect(
                    vcpus
                        .iter()
                        .all(|v| v["delta"]["total_disp"].as_u64().is_some()),
                    || "a vCPU has no window delta".into(),
                );
                let w = doc["window_ns"].as_f64().unwrap_or(0.0);
                c.expect((0.9e9..3e9).contains(&w), || {
                    format!("window_ns {w}, asked for 1 s")
                });
                let total: f64 = vcpus
                    .iter()
                    .filter_map(|v| v["delta"]["total_disp"].as_f64())
                    .sum();
                c.note(format!(
                    "{} vCPUs, {total} dispatches counted in the window (emulation reports zeros)",
                    vcpus.len()
                ));
            }
            Err(e) => c.fail(format!("stdout is not one JSON document: {e}")),
        }
        c.expect(stats_off(step, "after"), || {
            format!(
                "vcpudispatch_stats reads {:?} after the run",
                setting(step, "after", "stats")
            )
        });
        c.expect(
            setting(step, "after", "freq") == setting(step, "before", "freq"),
            || {
                format!(
                    "freq {} after, {} before",
                    setting(step, "after", "freq"),
                    setting(step, "before", "freq")
                )
            },
        );
        c.expect(setting(step, "after", "statefile") == "absent", || {
            "the state file is left behind".into()
        });
        return c.done(Some(step));
    }
    c.done(None)
}

/// The tracer's threads as `grep -H` of their status files shows them (`locked` in
/// tests/vm/steps.sh): `dtl` keeps no capability once the DTL is open, with an empty
/// bounding set and no_new_privs, as every command (tests/tests/neighbours.rs). The
/// number of threads, or what is wrong.
fn locked_down(lines: &str) -> Result<usize, String> {
    let mut threads = std::collections::BTreeSet::new();
    for l in lines.lines() {
        // /proc/PID/task/TID/status:CapEff:\t0000000000000000
        let (path, rest) = l
            .split_once(":")
            .ok_or_else(|| format!("unreadable: {l}"))?;
        let (field, value) = rest
            .split_once(':')
            .ok_or_else(|| format!("unreadable: {l}"))?;
        let want = if field == "NoNewPrivs" {
            "1"
        } else {
            "0000000000000000"
        };
        if value.trim() != want {
            return Err(format!("{path}: {field} {}, not {want}", value.trim()));
        }
        threads.insert(path.to_string());
    }
    if threads.is_empty() {
        return Err(format!("no thread's status read: {lines:?}"));
    }
    Ok(threads.len())
}

/// `--dtl-freq` set during the run and restored after.
fn dtl_freq(g: &GuestOutput) -> Verdict {
    let mut c = Check::new("dtl: --dtl-freq set and restored");
    if let Some(step) = need_step(g, "dtl-freq", &mut c) {
        if let Some(crash) = crashed(step) {
            c.fail(crash);
        }
        c.expect(step.rc == Some(0), || format!("exit status {:?}", step.rc));
        let before = setting(step, "before", "freq").to_string();
        c.expect(setting(step, "during", "freq") == "10", || {
            format!(
                "freq read {:?} during the run, asked for 10",
                setting(step, "during", "freq")
            )
        });
        c.expect(stats_on(step, "during"), || {
            "vcpudispatch_stats was not on during the run".into()
        });
        c.expect(setting(step, "after", "freq") == before, || {
            format!(
                "freq {:?} after, {before:?} before",
                setting(step, "after", "freq")
            )
        });
        c.expect(stats_off(step, "after"), || {
            "vcpudispatch_stats not off after the run".into()
        });
        let locked = step.part("during-locked");
        match locked_down(locked) {
            Ok(threads) => c.note(format!(
                "{threads} thread(s) locked down while the DTL was read"
            )),
            Err(e) => c.fail(format!("privileges during the run: {e}")),
        }
        c.note(format!(
            "freq {before} -> 10 -> {}",
            setting(step, "after", "freq")
        ));
        return c.done(Some(step));
    }
    c.done(None)
}

/// A run killed with SIGKILL leaves its settings; the next start restores them.
fn dtl_kill9(g: &GuestOutput) -> Verdict {
    let mut c = Check::new("dtl: restored after kill -9 on the next start");
    if let Some(step) = need_step(g, "dtl-kill9", &mut c) {
        let before = setting(step, "before", "freq").to_string();
        c.expect(step.part("victim-rc").trim() == "137", || {
            format!(
                "the killed run's status is {:?}, not 137 (SIGKILL)",
                step.part("victim-rc").trim()
            )
        });
        // The kill must really leave the settings changed, or the check proves nothing.
        c.expect(
            stats_on(step, "left") && setting(step, "left", "freq") == "7",
            || {
                format!(
                    "after kill -9: stats {:?}, freq {:?}: the killed run had not changed them",
                    setting(step, "left", "stats").lines().next().unwrap_or(""),
                    setting(step, "left", "freq")
                )
            },
        );
        c.expect(setting(step, "left", "statefile") != "absent", || {
            "no state file after kill -9".into()
        });
        if let Some(crash) = crashed(step) {
            c.fail(crash);
        }
        c.expect(step.rc == Some(0), || {
            format!("the next start exited {:?}", step.rc)
        });
        c.expect(step.stderr().contains("restored"), || {
            "the next start does not say it restored anything".into()
        });
        c.expect(stats_off(step, "after"), || {
            format!(
                "vcpudispatch_stats reads {:?} after the next start",
                setting(step, "after", "stats")
            )
        });
        c.expect(setting(step, "after", "freq") == before, || {
            format!(
                "freq {:?} after the next start, {before:?} before",
                setting(step, "after", "freq")
            )
        });
        c.expect(setting(step, "after", "statefile") == "absent", || {
            "the state file is left behind".into()
        });
        c.note(
            step.stderr()
                .lines()
                .find(|l| l.contains("restored"))
                .unwrap_or("")
                .trim()
                .to_string(),
        );
        return c.done(Some(step));
    }
    c.done(None)
}

#[cfg(test)]
mod tests {
    use super::locked_down;

    #[test]
    fn a_thread_that_kept_a_capability_or_privs_fails() {
        let ok = "/proc/9/task/9/status:CapEff:\t0000000000000000\n\
                  /proc/9/task/9/status:CapBnd:\t0000000000000000\n\
                  /proc/9/task/9/status:NoNewPrivs:\t1\n\
                  /proc/9/task/10/status:NoNewPrivs:\t1";
        assert_eq!(locked_down(ok), Ok(2));
        assert!(
            locked_down(&ok.replace("Bnd:\t0000000000000000", "Bnd:\t000001ffffffffff")).is_err()
        );
        assert!(locked_down(&ok.replace("NoNewPrivs:\t1\n", "NoNewPrivs:\t0\n")).is_err());
        assert!(locked_down("").is_err());
    }
}
