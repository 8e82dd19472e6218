//! `tracer run --irq` in the guest: a loopback TCP flood's NET_RX softirqs against the
//! guest kernel's own count (`/proc/softirqs` around the run), the CPUs adding up to
//! the totals, and what BTF says of interrupt time inside on-CPU time.

use super::common::*;

/// NET_RX softirqs over the CPUs of a `/proc/softirqs` line (`NET_RX: n0 n1 ...`).
fn net_rx(line: &str) -> u64 {
    line.split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

pub(super) fn check_irq(g: &GuestOutput, o: &Offers) -> Verdict {
    let mut c = Check::new("run --irq: NET_RX softirqs against /proc/softirqs");
    let Some(step) = need_step(g, "irq", &mut c) else {
        return c.done(None);
    };
    if let Some(crash) = crashed(step) {
        c.fail(crash);
        return c.done(Some(step));
    }
    if !c.expect(step.rc == Some(0), || format!("exit status {:?}", step.rc)) {
        return c.done(Some(step));
    }
    let Some(doc) = report(step, &mut c) else {
        return c.done(Some(step));
    };
    let irq = &doc["irq"];
    let kernel = net_rx(step.part("after")).saturating_sub(net_rx(step.part("before")));
    let Some(row) = irq["softirqs"]
        .items()
        .iter()
        .find(|v| v["vec"].as_u64() == Some(3))
        .cloned()
    else {
        c.fail(format!("no NET_RX row: {irq}"));
        return c.done(Some(step));
    };
    let (count, ns) = (
        row["count"].as_u64().unwrap_or(0),
        row["ns"].as_u64().unwrap_or(0),
    );
    c.expect(count >= 100, || {
        format!("the flood raised {count} NET_RX softirqs")
    });
    c.expect(
        count <= kernel && count as f64 >= 0.99 * kernel as f64,
        || format!("NET_RX: ours {count}, the kernel's {kernel} around the run"),
    );
    let num = |v: &Json, k: &str| v[k].as_u64().unwrap_or(0);
    let total = num(irq, "irq_ns") + num(irq, "softirq_ns");
    let per_cpu: u64 = doc["per_cpu"]
        .items()
        .iter()
        .map(|r| num(r, "irq_ns") + num(r, "softirq_ns"))
        .sum();
    c.expect(per_cpu == total, || {
        format!("the CPUs' interrupt time {per_cpu} ns vs the total {total} ns")
    });
    // BTF says whether on-CPU time holds interrupt time; without it, unknown.
    let includes = &irq["on_cpu_includes_irq"];
    c.expect(o.btf != includes.is_null(), || {
        format!("on_cpu_includes_irq {includes} with BTF {}", o.btf)
    });
    c.note(format!(
        "NET_RX {count} (kernel {kernel}), {:.1} ms; on-CPU includes interrupts: {includes}",
        ns as f64 / 1e6
    ));
    c.done(Some(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_rx_sums_the_cpus() {
        assert_eq!(net_rx("    NET_RX:        10         32\n"), 42);
        assert_eq!(net_rx(""), 0);
    }
}
