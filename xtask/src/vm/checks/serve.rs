//! `tracer serve` in auto mode: the mode it picks, where it keeps the per-process
//! histograms, and that they hold every slice of a process whose threads all died.

use super::{auto::best_mode, common::*, threads::kernel_version};
use crate::vm::protocol::GuestOutput;

/// The sum of a metric's samples whose labels contain `labels`.
fn sum(body: &str, name: &str, labels: &str) -> Option<f64> {
    let v: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

pub(super) fn check_serve(g: &GuestOutput, o: &Offers) -> Verdict {
    let mut c = Check::new("serve: mode and per-process histograms");
    let Some(step) = need_step(g, "serve-hists", &mut c) else {
        return c.done(None);
    };
    if let Some(crash) = crashed(step) {
        c.fail(crash);
    }
    c.expect(step.rc == Some(0), || {
        format!(
            "tracer serve did not end cleanly on SIGINT: exit status {:?}",
            step.rc
        )
    });
    let best = best_mode(o);
    c.expect(
        step.stderr().contains(&format!("(probe {})", best.probe())),
        || format!("serve did not say it uses {}", best.probe()),
    );
    let body = step.part("metrics");
    let pid = step.part("pid").trim();
    let sel = format!("pid=\"{pid}\"");
    let switches = sum(body, "tracer_process_context_switches_total", &sel).unwrap_or(0.0);
    let slices = sum(body, "tracer_process_on_cpu_slice_seconds_count", &sel).unwrap_or(0.0);
    c.expect(switches >= 100.0, || {
        format!("the churn's process {pid} has {switches} switches (150 threads ran)")
    });
    c.expect(slices <= switches && slices >= switches * 0.99, || {
        format!("{slices} slices in the histogram against {switches} switches")
    });
    // Each thread's own histograms where tp-btf keeps per-thread entries in task storage
    // (6.4+, see `check_thread_entries`), else the per-process hash.
    let release = g
        .step("facts-boot")
        .map(|s| fact(&facts(s), "release").to_string())
        .unwrap_or_default();
    let storage = best == Mode::TpBtf && kernel_version(&release).is_some_and(|v| v >= (6, 4));
    let map = if storage { "task_hist" } else { "hist_scoped" };
    c.expect(
        body.contains(&format!("tracer_map_entries{{map=\"{map}\"}}")),
        || format!("the histograms are not in {map} on {release}"),
    );
    c.note(format!(
        "probe {}, histograms in {map}; process {pid}: {switches} switches, {slices} slices",
        best.probe()
    ));
    c.done(Some(step))
}
