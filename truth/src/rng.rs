//! The one random generator of the torture harness: `cargo xtask torture` picks each
//! scenario with it and the `tracer-torture` workload its plan, so the seed a failure
//! prints reproduces both.

/// splitmix64 (Steele, Lea and Flood, 2014): small, deterministic, good enough to pick
/// a plan; no crate needed for twenty lines, and the sequence must never change under a
/// dependency update (the seeds in `report::KNOWN` and the CI seeds name scenarios).
pub struct Rng(u64);

/// splitmix64's increment (2^64 / the golden ratio).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// The workload's generator for `seed` (tracer-torture): the state is the seed xor
    /// the increment.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ GAMMA)
    }

    /// The harness's generator for `seed` (xtask's scenarios): the seed multiplied and
    /// xored first, so a scenario's draws are not the workload's for the same seed.
    pub fn scrambled(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03) ^ 0x2545_f491_4f6c_dd1d)
    }

    /// The next draw (an endless generator, so not an `Iterator`'s `Option`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi] (up to the modulo's bias, which no plan cares about).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_splitmix64() {
        // The reference sequence of splitmix64 from state 0.
        let mut r = Rng(0);
        assert_eq!(
            [r.next(), r.next(), r.next()],
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
    }

    /// The two seedings as the harness and the workload had them before they shared this
    /// code: a seed names the same scenario and plan as it did.
    #[test]
    fn a_seed_draws_what_it_drew() {
        let mut w = Rng::new(42);
        assert_eq!(
            [w.next(), w.next()],
            [0x28ef_e333_b266_f103, 0x4752_6757_130f_9f52]
        );
        let mut s = Rng::scrambled(42);
        assert_eq!(
            [s.next(), s.next()],
            [0xbf9b_161f_3ec6_b7ec, 0xb00d_1d72_8017_a3e0]
        );
    }

    #[test]
    fn ranges_and_chances_stay_in_bounds() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            assert!((3..=9).contains(&r.range(3, 9)));
            assert_eq!(r.range(5, 5), 5);
        }
        assert!((0..1000).all(|_| !r.chance(0)));
        assert!((0..1000).all(|_| r.chance(100)));
    }
}
