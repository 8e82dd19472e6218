//! Run-queue length per CPU over a window (`--runqlen`), from the sampler's cumulative
//! counts read at the window's two ends. Pure.
use serde::Serialize;

/// One CPU's samples since load, as read from the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSamples {
    pub cpu: u32,
    pub samples: u64,
    /// Sum over the samples of the tasks waiting.
    pub waiting: u64,
    /// Samples by tasks waiting; the last slot holds that many or more.
    pub slots: Vec<u64>,
}

/// One CPU's run-queue length over the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunqlenCpu {
    pub cpu: u32,
    pub samples: u64,
    pub mean_waiting: f64,
    /// Samples by tasks waiting, the empty slots left out; the last slot of the
    /// kernel's histogram counts that many tasks or more (`at_least`).
    pub histogram: Vec<RunqlenSlot>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunqlenSlot {
    pub waiting: u32,
    pub samples: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub at_least: bool,
}

/// The window's samples: `to` less `from` (None at the first read: since load), CPU by
/// CPU; CPUs without a sample in the window (offline) are left out.
pub fn delta(from: Option<&[CpuSamples]>, to: &[CpuSamples]) -> Vec<RunqlenCpu> {
    to.iter()
        .map(|b| {
            let a = from.and_then(|f| f.iter().find(|a| a.cpu == b.cpu));
            let sub = |x: u64, y: Option<u64>| x.saturating_sub(y.unwrap_or(0));
            let samples = sub(b.samples, a.map(|a| a.samples));
            let waiting = sub(b.waiting, a.map(|a| a.waiting));
            let last = b.slots.len().saturating_sub(1);
            let histogram = b
                .slots
                .iter()
                .enumerate()
                .map(|(i, &n)| RunqlenSlot {
                    waiting: i as u32,
                    samples: sub(n, a.and_then(|a| a.slots.get(i).copied())),
                    at_least: i == last,
                })
                .filter(|s| s.samples > 0)
                .collect();
            RunqlenCpu {
                cpu: b.cpu,
                samples,
                mean_waiting: if samples == 0 {
                    0.0
                } else {
                    waiting as f64 / samples as f64
                },
                histogram,
            }
        })
        .filter(|c| c.samples > 0)
        .collect()
}

impl RunqlenCpu {
    /// The smallest number of tasks waiting at or above fraction `q` of the samples.
    pub fn quantile(&self, q: f64) -> u32 {
        let want = (q * self.samples as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for s in &self.histogram {
            seen += s.samples;
            if seen >= want {
                return s.waiting;
            }
        }
        self.histogram.last().map_or(0, |s| s.waiting)
    }
}

/// The text section: a row per CPU.
pub fn text(cpus: &[RunqlenCpu]) -> String {
    let mut out = format!(
        "Run-queue length, tasks waiting for each CPU (sampled at {} Hz):\n{:>5} {:>8} {:>7} {:>5} {:>5} {:>5}\n",
        tracer_common::runqlen::FREQ_HZ,
        "CPU",
        "SAMPLES",
        "MEAN",
        "P50",
        "P99",
        "MAX"
    );
    for c in cpus {
        let max = c.histogram.last().map_or(String::from("0"), |s| {
            format!("{}{}", s.waiting, if s.at_least { "+" } else { "" })
        });
        out += &format!(
            "{:>5} {:>8} {:>7.2} {:>5} {:>5} {:>5}\n",
            c.cpu,
            c.samples,
            c.mean_waiting,
            c.quantile(0.5),
            c.quantile(0.99),
            max
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(cpu: u32, slots: &[u64]) -> CpuSamples {
        let mut v = slots.to_vec();
        v.resize(tracer_common::runqlen::SLOTS, 0);
        CpuSamples {
            cpu,
            samples: slots.iter().sum(),
            waiting: slots.iter().enumerate().map(|(i, n)| i as u64 * n).sum(),
            slots: v,
        }
    }

    #[test]
    fn the_window_is_the_difference_of_its_two_reads() {
        let a = [samples(0, &[10]), samples(1, &[0, 0, 5])];
        let b = [samples(0, &[20, 5]), samples(1, &[0, 1, 104])];
        let d = delta(Some(&a), &b);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].samples, d[0].mean_waiting), (15, 5.0 / 15.0));
        assert_eq!(d[1].samples, 100);
        assert!((d[1].mean_waiting - 1.99).abs() < 1e-9);
        assert_eq!(
            d[1].histogram,
            [
                RunqlenSlot {
                    waiting: 1,
                    samples: 1,
                    at_least: false
                },
                RunqlenSlot {
                    waiting: 2,
                    samples: 99,
                    at_least: false
                }
            ]
        );
        assert_eq!((d[1].quantile(0.5), d[1].quantile(0.99)), (2, 2));
        assert_eq!(d[1].quantile(0.01), 1);
    }

    #[test]
    fn a_cpu_without_samples_is_left_out_and_the_last_slot_is_open() {
        let mut long = samples(1, &[]);
        long.samples = 3;
        long.waiting = 300;
        long.slots[tracer_common::runqlen::SLOTS - 1] = 3;
        let d = delta(None, &[samples(0, &[]), long]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].cpu, 1);
        assert!(d[0].histogram[0].at_least);
        assert!(text(&d).contains("  63+"), "{}", text(&d));
    }

    #[test]
    fn text_is_a_row_per_cpu() {
        let d = delta(None, &[samples(0, &[99]), samples(1, &[0, 2, 95, 2])]);
        assert_eq!(
            text(&d),
            "Run-queue length, tasks waiting for each CPU (sampled at 99 Hz):\n  \
             CPU  SAMPLES    MEAN   P50   P99   MAX\n    \
             0       99    0.00     0     0     0\n    \
             1       99    2.00     2     3     3\n"
        );
    }
}
