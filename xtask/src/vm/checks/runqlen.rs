//! `tracer run --runqlen` in the guest: three spinners on one CPU against the guest
//! kernel's schedstat (the run_delay they gained, over the wall time it grew in, is the
//! mean number of them waiting); refused in one line where the kernel has no BTF.

use super::common::*;

/// The sum of schedstat's second field (run_delay, ns) over the lines of `text`.
fn run_delay_sum(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

pub(super) fn check_runqlen(g: &GuestOutput, o: &Offers) -> Verdict {
    let mut c = Check::new("run --runqlen: run-queue length against schedstat");
    let Some(step) = need_step(g, "runqlen", &mut c) else {
        return c.done(None);
    };
    if let Some(crash) = crashed(step) {
        c.fail(crash);
        return c.done(Some(step));
    }
    if !o.btf {
        // Refused by name, in one line.
        let err = step.stderr().trim();
        c.expect(
            step.rc != Some(0) && err.contains("--runqlen needs the kernel's BTF"),
            || {
                format!(
                    "without BTF --runqlen must be refused by name: rc {:?}, {err}",
                    step.rc
                )
            },
        );
        c.expect(err.lines().count() == 1, || format!("not one line: {err}"));
        c.note("refused without BTF, in one line");
        return c.done(Some(step));
    }
    if !c.expect(step.rc == Some(0), || format!("exit status {:?}", step.rc)) {
        return c.done(Some(step));
    }
    let Some(doc) = report(step, &mut c) else {
        return c.done(Some(step));
    };
    let cpu: u64 = step.part("cpu").trim().parse().unwrap_or(0);
    let secs = |p: &str| step.part(p).trim().parse::<f64>().unwrap_or(0.0);
    let wall_ns = (secs("t1") - secs("t0")) * 1e9;
    let waited =
        run_delay_sum(step.part("after")).saturating_sub(run_delay_sum(step.part("before")));
    let want = if wall_ns > 0.0 {
        waited as f64 / wall_ns
    } else {
        0.0
    };
    let row = doc["runqlen"]
        .items()
        .iter()
        .find(|r| r["cpu"].as_u64() == Some(cpu))
        .cloned();
    let Some(row) = row else {
        c.fail(format!("no runqlen row for CPU {cpu}: {}", doc["runqlen"]));
        return c.done(Some(step));
    };
    let mean = row["mean_waiting"].as_f64().unwrap_or(-1.0);
    let samples = row["samples"].as_u64().unwrap_or(0);
    c.expect(want >= 1.5, || {
        format!("the spinners waited only {want:.3} on average: three were not sharing CPU {cpu}")
    });
    // uptime has 10 ms resolution: the bound allows for it beside other tasks' waits.
    c.expect((mean - want).abs() <= 0.2 + 0.05 * want, || {
        format!("CPU {cpu} read a mean of {mean:.3} waiting, schedstat says {want:.3}")
    });
    c.expect(samples >= 50, || {
        format!("only {samples} samples on CPU {cpu} in 2 s")
    });
    c.note(format!(
        "CPU {cpu}: mean {mean:.3} over {samples} samples, schedstat {want:.3}"
    ));
    c.done(Some(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_delay_is_the_second_field_summed() {
        assert_eq!(run_delay_sum("10 20 3\n5 7 1\n\n"), 27);
    }
}
