//! A small seeded random source and a Zipf sampler, for workloads like the paper's (flow sizes
//! Zipf-distributed with α = 0.90, 0.95, 0.99 over 1M 5-tuples) without a `rand` dependency.

/// SplitMix64: a seeded 64-bit generator, good enough for workloads (not for secrets).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::hash::fmix64(self.0)
    }

    /// A uniform float in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf over ranks `0..n`: rank `i` has probability proportional to `1 / (i + 1)^alpha`.
/// Sampling is a binary search over the `n`-entry CDF (8 bytes per rank).
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n >= 1` ranks with exponent `alpha >= 0` (0 is uniform).
    pub fn new(n: usize, alpha: f64) -> Zipf {
        assert!(n >= 1 && alpha >= 0.0, "Zipf needs n >= 1 and alpha >= 0");
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += (k as f64).powf(-alpha);
                acc
            })
            .collect();
        let total = acc;
        cdf.iter_mut().for_each(|c| *c /= total);
        Zipf { cdf }
    }

    /// Ranks in the distribution.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    /// Whether there are no ranks (never: `n >= 1`).
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Probability mass of the `k` most likely ranks.
    pub fn top_share(&self, k: usize) -> f64 {
        if k == 0 {
            0.0
        } else {
            self.cdf[k.min(self.cdf.len()) - 1]
        }
    }

    /// A rank drawn with `rng`.
    pub fn sample(&self, rng: &mut SplitMix64) -> usize {
        let u = rng.next_f64();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_frequencies_follow_the_law() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = SplitMix64::new(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..200_000 {
            counts[z.sample(&mut rng)] += 1;
        }
        // rank 0 vs rank 9: ratio about 10^0.99 = 9.8
        let ratio = counts[0] as f64 / counts[9] as f64;
        assert!((8.5..11.5).contains(&ratio), "ratio {ratio}");
        let top = counts[..10].iter().sum::<u32>() as f64 / 200_000.0;
        assert!(
            (top - z.top_share(10)).abs() < 0.01,
            "{top} vs {}",
            z.top_share(10)
        );
        let u = Zipf::new(4, 0.0);
        assert!((u.top_share(2) - 0.5).abs() < 1e-12);
    }
}
