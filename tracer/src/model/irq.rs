//! `--irq`: interrupt time over a window, from two reads of the kernel's sums (see
//! `tracer_common::irq`), as the report's `irq` section and each thread's and CPU's
//! share. Pure functions of the reads.
use std::collections::BTreeMap;

use serde::Serialize;
use tracer_common::irq::{IrqCpu, IrqThread, VECS, VEC_NAMES};

/// One read of the interrupt maps: cumulative since load.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IrqRead {
    /// By CPU number (every possible CPU).
    pub cpus: Vec<IrqCpu>,
    pub threads: BTreeMap<u32, IrqThread>,
}

/// A thread's or a CPU's interrupt time (flattened into its row).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IrqShare {
    /// Hardirq handlers that ran while it was on the CPU.
    pub irq_ns: u64,
    /// Softirqs that ran while it was on the CPU, less the hardirqs inside them.
    pub softirq_ns: u64,
}

/// One softirq vector over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SoftirqRow {
    pub vec: u32,
    pub name: String,
    pub ns: u64,
    pub count: u64,
}

/// The report's `irq` section: the window's totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IrqReport {
    pub irq_ns: u64,
    pub irq_count: u64,
    pub softirq_ns: u64,
    /// Of the above, what interrupted the idle task (no thread's).
    pub idle_irq_ns: u64,
    pub idle_softirq_ns: u64,
    /// Every vector that ran, by number.
    pub softirqs: Vec<SoftirqRow>,
    /// Whether a thread's `on_cpu_ns` includes the interrupt time charged to it: false
    /// where the kernel accounts interrupt time apart (`CONFIG_IRQ_TIME_ACCOUNTING`);
    /// None when unknown (no BTF).
    pub on_cpu_includes_irq: Option<bool>,
    /// Interrupts whose thread found the per-thread map full (their time is in the
    /// totals, not in a thread's row).
    pub thread_map_full: u64,
    #[serde(skip)]
    pub per_cpu: Vec<IrqShare>,
    #[serde(skip)]
    pub threads: BTreeMap<u32, IrqShare>,
}

fn sub(a: u64, b: u64) -> u64 {
    a.saturating_sub(b)
}

/// The window `from`..`to` (from None: since load). `includes`: see
/// [`IrqReport::on_cpu_includes_irq`].
pub fn delta(from: Option<&IrqRead>, to: &IrqRead, includes: Option<bool>) -> IrqReport {
    let zero = IrqCpu::ZERO;
    let mut r = IrqReport {
        on_cpu_includes_irq: includes,
        ..Default::default()
    };
    let mut vec_ns = [0u64; VECS];
    let mut vec_count = [0u64; VECS];
    for (i, b) in to.cpus.iter().enumerate() {
        let a = from.and_then(|f| f.cpus.get(i)).unwrap_or(&zero);
        let hard = sub(b.hard_ns, a.hard_ns);
        let mut soft = 0;
        for v in 0..VECS {
            let ns = sub(b.soft_ns[v], a.soft_ns[v]);
            soft += ns;
            vec_ns[v] += ns;
            vec_count[v] += sub(b.soft_count[v], a.soft_count[v]);
        }
        r.irq_ns += hard;
        r.irq_count += sub(b.hard_count, a.hard_count);
        r.softirq_ns += soft;
        r.idle_irq_ns += sub(b.idle_hard_ns, a.idle_hard_ns);
        r.idle_softirq_ns += sub(b.idle_soft_ns, a.idle_soft_ns);
        r.thread_map_full += sub(b.thread_map_full, a.thread_map_full);
        r.per_cpu.push(IrqShare {
            irq_ns: hard,
            softirq_ns: soft,
        });
    }
    r.softirqs = (0..VECS)
        .filter(|&v| vec_count[v] > 0 || vec_ns[v] > 0)
        .map(|v| SoftirqRow {
            vec: v as u32,
            name: VEC_NAMES
                .get(v)
                .map_or_else(|| format!("vec{v}"), |n| n.to_string()),
            ns: vec_ns[v],
            count: vec_count[v],
        })
        .collect();
    for (tid, b) in &to.threads {
        let a = from
            .and_then(|f| f.threads.get(tid))
            .copied()
            .unwrap_or_default();
        let s = IrqShare {
            irq_ns: sub(b.hard_ns, a.hard_ns),
            softirq_ns: sub(b.soft_ns, a.soft_ns),
        };
        if s != IrqShare::default() {
            r.threads.insert(*tid, s);
        }
    }
    r
}

/// The text section: totals, each vector, each CPU.
pub fn text(r: &IrqReport) -> String {
    use std::fmt::Write as _;
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "interrupts: hardirq {:.3} ms ({} handlers), softirq {:.3} ms; of which while idle {:.3} + {:.3} ms",
        ms(r.irq_ns),
        r.irq_count,
        ms(r.softirq_ns),
        ms(r.idle_irq_ns),
        ms(r.idle_softirq_ns)
    );
    match r.on_cpu_includes_irq {
        Some(true) => {
            out.push_str("  threads' on-CPU time includes the interrupt time charged to them\n")
        }
        Some(false) => out.push_str(
            "  threads' on-CPU time leaves interrupt time out (the kernel accounts it apart)\n",
        ),
        None => {}
    }
    if !r.softirqs.is_empty() {
        let _ = writeln!(
            out,
            "  {:<10} {:>12} {:>10}",
            "SOFTIRQ", "TOTAL_ms", "COUNT"
        );
        for v in &r.softirqs {
            let _ = writeln!(out, "  {:<10} {:>12.3} {:>10}", v.name, ms(v.ns), v.count);
        }
    }
    let cpus: Vec<String> = r
        .per_cpu
        .iter()
        .enumerate()
        .filter(|(_, s)| s.irq_ns + s.softirq_ns > 0)
        .map(|(c, s)| format!("cpu{c} {:.3}+{:.3}", ms(s.irq_ns), ms(s.softirq_ns)))
        .collect();
    if !cpus.is_empty() {
        let _ = writeln!(out, "  per CPU (hardirq+softirq ms): {}", cpus.join(", "));
    }
    if r.thread_map_full > 0 {
        let _ = writeln!(
            out,
            "  {} interrupt(s) found the per-thread map full: in the totals, not in a thread's row",
            r.thread_map_full
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(hard: u64, soft: &[(usize, u64, u64)], idle: (u64, u64)) -> IrqCpu {
        let mut c = IrqCpu::ZERO;
        c.hard_ns = hard;
        c.hard_count = hard / 1000;
        for &(v, ns, n) in soft {
            c.soft_ns[v] = ns;
            c.soft_count[v] = n;
        }
        c.idle_hard_ns = idle.0;
        c.idle_soft_ns = idle.1;
        c
    }

    fn read(cpus: Vec<IrqCpu>, threads: &[(u32, u64, u64)]) -> IrqRead {
        IrqRead {
            cpus,
            threads: threads
                .iter()
                .map(|&(t, h, s)| {
                    (
                        t,
                        IrqThread {
                            hard_ns: h,
                            soft_ns: s,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn an_interval_is_the_difference_of_two_reads() {
        let a = read(
            vec![cpu(1_000, &[(3, 5_000, 5)], (0, 0)), cpu(0, &[], (0, 0))],
            &[(10, 1_000, 5_000)],
        );
        let b = read(
            vec![
                cpu(3_000, &[(3, 9_000, 9), (1, 500, 1)], (0, 500)),
                cpu(2_000, &[(3, 1_000, 1)], (2_000, 0)),
            ],
            &[(10, 3_000, 9_000), (11, 0, 1_000)],
        );
        let r = delta(Some(&a), &b, Some(true));
        assert_eq!((r.irq_ns, r.irq_count, r.softirq_ns), (4_000, 4, 5_500));
        assert_eq!((r.idle_irq_ns, r.idle_softirq_ns), (2_000, 500));
        let names: Vec<(&str, u64, u64)> = r
            .softirqs
            .iter()
            .map(|v| (v.name.as_str(), v.ns, v.count))
            .collect();
        assert_eq!(names, [("TIMER", 500, 1), ("NET_RX", 5_000, 5)]);
        assert_eq!(
            r.per_cpu,
            [
                IrqShare {
                    irq_ns: 2_000,
                    softirq_ns: 4_500
                },
                IrqShare {
                    irq_ns: 2_000,
                    softirq_ns: 1_000
                }
            ]
        );
        // Thread 10's interval share; 11 is new since the first read.
        assert_eq!(r.threads[&10].softirq_ns, 4_000);
        assert_eq!(r.threads[&11].softirq_ns, 1_000);
        // Every nanosecond is a thread's or the idle task's.
        let threads: u64 = r.threads.values().map(|s| s.irq_ns + s.softirq_ns).sum();
        assert_eq!(
            threads + r.idle_irq_ns + r.idle_softirq_ns,
            r.irq_ns + r.softirq_ns
        );
    }

    #[test]
    fn the_totals_start_from_nothing_and_unknown_vectors_are_numbered() {
        let b = read(vec![cpu(0, &[(15, 100, 1)], (0, 0))], &[]);
        let r = delta(None, &b, None);
        assert_eq!(r.softirqs[0].name, "vec15");
        assert!(text(&r).contains("vec15"));
        assert!(!text(&r).contains("on-CPU time"));
    }

    #[test]
    fn text_golden() {
        let b = read(
            vec![cpu(2_000_000, &[(3, 5_000_000, 50)], (1_000_000, 0))],
            &[(10, 1_000_000, 5_000_000)],
        );
        let t = text(&delta(None, &b, Some(false)));
        assert_eq!(
            t,
            "interrupts: hardirq 2.000 ms (2000 handlers), softirq 5.000 ms; of which while idle 1.000 + 0.000 ms\n\
             \x20 threads' on-CPU time leaves interrupt time out (the kernel accounts it apart)\n\
             \x20 SOFTIRQ        TOTAL_ms      COUNT\n\
             \x20 NET_RX            5.000         50\n\
             \x20 per CPU (hardirq+softirq ms): cpu0 2.000+5.000\n"
        );
    }
}
