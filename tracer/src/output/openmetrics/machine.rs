//! The families beside the scheduling series: each cgroup series' CFS bandwidth
//! throttling and CPU pressure, the machine's pressure, and pseries' hypervisor
//! dispatch figures.
use prometheus_client::{
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
    registry::Unit,
};

use super::{cgroup_labels, counter, histogram, labels, secs, Labels};
use crate::{
    model::{hist::Histogram, series::Exposition},
    pseries::vcpudispatch::COUNTER_NAMES,
};

/// Per cgroup series, CFS bandwidth throttling and CPU pressure as the kernel counts
/// them (`cpu.stat`: v2, or the v1 `cpu` hierarchy's same path; `cpu.pressure`), and
/// the machine's pressure: beside the run-queue latency, why a workload waited.
pub(super) fn cpu_bandwidth(
    x: &Exposition,
    enc: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let s = Some(&Unit::Seconds);
    let mut periods = Vec::new();
    let mut throttled = Vec::new();
    let mut throttled_s = Vec::new();
    let mut pressure = Vec::new();
    for (name, c) in &x.cgroup_cpu {
        let l = cgroup_labels(x, name);
        if let Some(t) = c.throttling {
            periods.push((l.clone(), t.periods as f64));
            throttled.push((l.clone(), t.throttled_periods as f64));
            throttled_s.push((l.clone(), secs(t.throttled_ns)));
        }
        if let Some(p) = c.pressure {
            let mut some = l.clone();
            some.push(("kind".into(), "some".into()));
            pressure.push((some, secs(p.some_ns)));
            if let Some(f) = p.full_ns {
                let mut full = l;
                full.push(("kind".into(), "full".into()));
                pressure.push((full, secs(f)));
            }
        }
    }
    counter(
        enc,
        "tracer_cgroup_cpu_periods",
        "CFS bandwidth enforcement periods with runnable tasks, per cgroup (cpu.stat \
         nr_periods; cgroups with a CPU quota or the cpu controller only)",
        None,
        &periods,
    )?;
    counter(
        enc,
        "tracer_cgroup_cpu_throttled_periods",
        "Periods in which the cgroup used up its CPU quota (cpu.stat nr_throttled)",
        None,
        &throttled,
    )?;
    counter(
        enc,
        "tracer_cgroup_cpu_throttled",
        "Time the cgroup's tasks were kept off the CPU by its quota (cpu.stat \
         throttled_usec, v1 throttled_time)",
        s,
        &throttled_s,
    )?;
    counter(
        enc,
        "tracer_cgroup_cpu_pressure",
        "CPU pressure per cgroup (cgroup v2 cpu.pressure total): some = at least one \
         task waited for a CPU, full = all non-idle tasks did",
        s,
        &pressure,
    )?;
    let mut host = Vec::new();
    if let Some(p) = x.host_pressure {
        host.push((labels(&[("kind", "some")]), secs(p.some_ns)));
        if let Some(f) = p.full_ns {
            host.push((labels(&[("kind", "full")]), secs(f)));
        }
    }
    counter(
        enc,
        "tracer_cpu_pressure",
        "The machine's CPU pressure (/proc/pressure/cpu total)",
        s,
        &host,
    )
}

/// pseries: the hypervisor's dispatch counters per vCPU (vcpudispatch_stats) and the
/// Dispatch Trace Log's dispatch latency; nothing where the files are absent. The counters
/// are split so that no family mixes a total with its parts (a `sum()` over one family
/// counts each dispatch once): the total, where on the machine it happened, and where
/// relative to the vCPU's home NUMA node.
pub(super) fn pseries(x: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let counters = |range: std::ops::Range<usize>, label: &str, strip: &str| {
        x.vcpu_dispatch
            .iter()
            .flat_map(|(cpu, c)| {
                range.clone().map(move |i| {
                    let mut l = labels(&[("cpu", &cpu.to_string())]);
                    if !label.is_empty() {
                        let name = COUNTER_NAMES[i].trim_end_matches("_disp");
                        l.push((label.into(), name.trim_start_matches(strip).into()));
                    }
                    (l, c[i] as f64)
                })
            })
            .collect::<Vec<_>>()
    };
    counter(
        enc,
        "tracer_vcpu_dispatches",
        "Times the hypervisor dispatched each vCPU since vcpudispatch_stats was enabled \
         (pseries; a re-enable restarts it)",
        None,
        &counters(0..1, "", ""),
    )?;
    counter(
        enc,
        "tracer_vcpu_dispatch_placement",
        "vCPU dispatches by where the physical CPU was relative to the previous one: \
         same_cpu (or an SMT sibling), same_chip, diff_chip, far_chip (pseries)",
        None,
        &counters(1..5, "placement", ""),
    )?;
    counter(
        enc,
        "tracer_vcpu_dispatch_numa",
        "vCPU dispatches by NUMA distance from the vCPU's home node: home, remote, far \
         (pseries)",
        None,
        &counters(5..8, "node", "numa_"),
    )?;
    let cpu_label = |cpu: u32| labels(&[("cpu", &cpu.to_string())]);
    let hrows: Vec<(Labels, &Histogram)> = x
        .dtl
        .iter()
        .map(|d| (cpu_label(d.cpu), &d.dispatch))
        .collect();
    histogram(
        enc,
        "tracer_dtl_dispatch_latency",
        "Dispatch Trace Log: time each vCPU was ready on the hypervisor's queue until it \
         was dispatched (enqueue_to_dispatch_time, pseries, --dtl)",
        &hrows,
        &x.bounds_ns,
    )?;
    let per = |f: fn(&crate::model::series::DtlVcpu) -> u64| -> Vec<(Labels, f64)> {
        x.dtl
            .iter()
            .map(|d| (cpu_label(d.cpu), f(d) as f64))
            .collect()
    };
    counter(
        enc,
        "tracer_dtl_entries",
        "Dispatch Trace Log entries read per vCPU (pseries, --dtl)",
        None,
        &per(|d| d.entries),
    )?;
    counter(
        enc,
        "tracer_dtl_gaps",
        "Places where Dispatch Trace Log entries were lost (the log wrapped before it was \
         read), per vCPU: a lower bound on lost entries",
        None,
        &per(|d| d.gaps),
    )?;
    Ok(())
}

/// The histogram bounds of `tracer_runqueue_length`, tasks waiting; `+Inf` holds 63 or
/// more (the sampler's last slot).
const RUNQLEN_LE: [u64; 13] = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 62];

/// A CPU's samples by tasks waiting as classic buckets: `(le, count in (previous, le])`.
fn runqlen_buckets(slots: &[u64]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = RUNQLEN_LE.iter().map(|&b| (b as f64, 0)).collect();
    out.push((f64::INFINITY, 0));
    let last = tracer_common::runqlen::SLOTS - 1;
    for (n, &c) in slots.iter().enumerate().filter(|(_, c)| **c > 0) {
        let i = if n >= last {
            RUNQLEN_LE.len()
        } else {
            RUNQLEN_LE.partition_point(|&b| b < n as u64)
        };
        out[i].1 += c;
    }
    out
}

/// `--runqlen`: each CPU's run-queue length, sampled at 99 Hz, as a histogram of the
/// tasks waiting (not the running one); `_sum / _count` over a range is the mean.
pub(super) fn runqlen(x: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let cpus: Vec<_> = x.runqlen.iter().filter(|c| c.samples > 0).collect();
    if cpus.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(
        "tracer_runqueue_length",
        "Tasks waiting for the CPU (its run queue less the running task and delayed-dequeue \
         sleepers), sampled at 99 Hz per CPU: _sum / _count is the mean",
        None,
        MetricType::Histogram,
    )?;
    for c in cpus {
        let cpu = c.cpu.to_string();
        m.encode_family(&labels(&[("cpu", &cpu)]))?
            .encode_histogram::<NoLabelSet>(
                c.waiting as f64,
                c.samples,
                &runqlen_buckets(&c.slots),
                None,
            )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runqlen_buckets_put_each_length_under_its_bound_and_63_at_inf() {
        let mut slots = vec![0u64; tracer_common::runqlen::SLOTS];
        slots[0] = 5;
        slots[2] = 7;
        slots[5] = 1;
        slots[62] = 2;
        slots[63] = 3;
        let b = runqlen_buckets(&slots);
        assert_eq!(b.len(), RUNQLEN_LE.len() + 1);
        let at = |le: f64| b.iter().find(|(l, _)| *l == le).unwrap().1;
        assert_eq!((at(0.0), at(2.0), at(6.0), at(62.0)), (5, 7, 1, 2));
        assert_eq!(at(f64::INFINITY), 3);
        assert_eq!(b.iter().map(|(_, c)| c).sum::<u64>(), 18);
    }
}
