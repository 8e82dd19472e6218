//! `tracer check` against the kernel's config, and the guest's own facts.

use super::common::*;

pub(super) fn check_facts(g: &GuestOutput, arch: &str, o: &Offers) -> Verdict {
    let mut c = Check::new("guest facts");
    let Some(step) = need_step(g, "facts-boot", &mut c) else {
        return c.done(None);
    };
    let f = facts(step);
    let yes = |k: &str| fact(&f, k) == "yes";
    c.expect(fact(&f, "arch") == arch, || {
        format!("uname -m says {:?}", fact(&f, "arch"))
    });
    c.expect(yes("btf") == o.btf, || {
        format!(
            "/sys/kernel/btf/vmlinux present: {}, the config says {}",
            yes("btf"),
            o.btf
        )
    });
    c.expect(yes("kprobe_pmu") == o.kprobes, || {
        format!(
            "kprobe PMU present: {}, the config says {}",
            yes("kprobe_pmu"),
            o.kprobes
        )
    });
    c.expect(yes("vcpudispatch_stats") == o.pseries, || {
        format!(
            "/proc/powerpc/vcpudispatch_stats present: {}, the config says {}",
            yes("vcpudispatch_stats"),
            o.pseries
        )
    });
    c.expect(yes("arm_pmu") == o.arm_pmu, || {
        format!(
            "armv8_pmu present: {}, the config says {}",
            yes("arm_pmu"),
            o.arm_pmu
        )
    });
    c.expect(fact(&f, "tracefs_mounts") == "0", || {
        "tracefs is already mounted at boot: the on-demand mount goes untested".into()
    });
    c.note(format!(
        "{} {}, {} CPUs, {}{}",
        fact(&f, "arch"),
        fact(&f, "release"),
        fact(&f, "cpus"),
        o.describe(),
        match fact(&f, "timebase") {
            "" => String::new(),
            tb => format!(", timebase {tb}"),
        }
    ));
    c.done(Some(step))
}

pub(super) fn check_check(g: &GuestOutput, o: &Offers) -> Vec<Verdict> {
    let mut c = Check::new("tracer check");
    let Some(step) = need_step(g, "check", &mut c) else {
        return vec![c.done(None)];
    };
    if let Some(crash) = crashed(step) {
        c.fail(crash);
    }
    let doc = match json::parse(step.stdout()) {
        Ok(d) => d,
        Err(e) => {
            c.fail(format!("stdout is not one JSON document: {e}"));
            return vec![c.done(Some(step))];
        }
    };
    let item = |list: &str, name: &str| item(&doc, list, name);
    let btf = item("items", "kernel BTF");
    c.expect(ok_of(&btf) == Some(o.btf), || {
        format!(
            "says kernel BTF ok={:?} ({}); the kernel has BTF: {}",
            ok_of(&btf),
            detail_of(&btf),
            o.btf
        )
    });
    let dtl = item("items", "pseries DTL");
    c.expect(ok_of(&dtl) == Some(o.pseries), || {
        format!(
            "says pseries DTL ok={:?} ({}); the kernel is pseries: {}",
            ok_of(&dtl),
            detail_of(&dtl),
            o.pseries
        )
    });
    let tracefs = item("items", "tracefs");
    c.expect(ok_of(&tracefs) == Some(true), || {
        format!("tracefs not ok: {}", detail_of(&tracefs))
    });
    let works = offered_modes(&doc, o, &mut c);
    let unsupported = events(&doc, &mut c);
    let run_ok = doc["run_ok"].as_bool();
    c.expect(run_ok == Some(true), || format!("run_ok is {run_ok:?}"));
    c.expect(
        step.rc == Some(if run_ok == Some(true) { 0 } else { 1 }),
        || format!("exit status {:?} does not match run_ok {run_ok:?}", step.rc),
    );
    c.note(format!(
        "modes that work: {}; events not supported: {}",
        works.join(", "),
        if unsupported.is_empty() {
            "none".to_string()
        } else {
            unsupported.join(", ")
        }
    ));
    vec![c.done(Some(step)), tracefs_mounted(g, &tracefs)]
}

/// An item of a `tracer check --json` list by name.
fn item(doc: &Json, list: &str, name: &str) -> Option<Json> {
    doc[list]
        .items()
        .iter()
        .find(|i| i["name"].as_str() == Some(name))
        .cloned()
}

fn ok_of(i: &Option<Json>) -> Option<bool> {
    i.as_ref().and_then(|i| i["ok"].as_bool())
}

fn detail_of(i: &Option<Json>) -> String {
    i.as_ref()
        .and_then(|i| i["detail"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Each probe mode ok exactly when the kernel offers what it needs, a refusal naming
/// what is missing; returns the modes that work.
fn offered_modes(doc: &Json, o: &Offers, c: &mut Check) -> Vec<&'static str> {
    let mut works = Vec::new();
    for mode in [Mode::TpBtf, Mode::RawTp, Mode::Tracepoint, Mode::PerfSched] {
        let it = item(doc, "probe_modes", mode.probe());
        let ok = ok_of(&it);
        match mode.needs(o) {
            Ok(()) => {
                c.expect(ok == Some(true), || {
                    format!(
                        "probe mode {} not ok although the kernel offers it: {}",
                        mode.probe(),
                        detail_of(&it)
                    )
                });
            }
            Err(missing) => {
                let d = detail_of(&it);
                c.expect(ok == Some(false), || {
                    format!(
                        "probe mode {} ok although the kernel lacks {missing}",
                        mode.probe()
                    )
                });
                c.expect(d.to_lowercase().contains(&missing.to_lowercase()), || {
                    format!(
                        "probe mode {} refused without naming {missing}: {d:?}",
                        mode.probe()
                    )
                });
            }
        }
        if ok == Some(true) {
            works.push(mode.probe());
        }
    }
    works
}

/// Every event not ok says why; the software events always work. Returns the events
/// not supported.
fn events<'a>(doc: &'a Json, c: &mut Check) -> Vec<&'a str> {
    let events = doc["events"].items();
    let unsupported: Vec<&str> = events
        .iter()
        .filter(|e| e["ok"].as_bool() == Some(false))
        .filter_map(|e| e["name"].as_str())
        .collect();
    for e in events {
        let (name, detail) = (
            e["name"].as_str().unwrap_or("?"),
            e["detail"].as_str().unwrap_or(""),
        );
        if e["ok"].as_bool() == Some(false) {
            c.expect(!detail.trim().is_empty(), || {
                format!("event {name} not ok without a reason")
            });
        }
        if ["task-clock", "context-switches", "cpu-clock"].contains(&name) {
            c.expect(e["ok"].as_bool() == Some(true), || {
                format!("software event {name} not ok: {detail}")
            });
        }
    }
    unsupported
}

/// `tracer check` finds tracefs unmounted at boot and mounts it.
fn tracefs_mounted(g: &GuestOutput, tracefs: &Option<Json>) -> Verdict {
    let mut m = Check::new("tracefs mounted on demand");
    if let (Some(before), Some(after)) = (g.step("facts-boot"), g.step("facts-after-check")) {
        let (b, a) = (facts(before), facts(after));
        m.expect(fact(&b, "tracefs_mounts") == "0", || {
            "tracefs was mounted at boot".into()
        });
        if m.expect(fact(&a, "tracefs_mounts") != "0", || {
            "tracefs is still unmounted after tracer check ran the tracepoint mode".into()
        }) {
            m.note(format!(
                "tracer check found tracefs at {:?}",
                detail_of(tracefs)
            ));
        }
    } else {
        m.fail("the guest did not report its mounts");
    }
    m.done(g.step("facts-after-check"))
}
