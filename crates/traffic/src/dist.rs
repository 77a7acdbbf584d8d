//! Which flow each packet belongs to (uniform or Zipf over the flows) and how big it is.

use rand::Rng;

/// Picks flow indexes `0..n`.
#[derive(Clone, Debug)]
pub enum FlowDist {
    /// Every flow equally likely.
    Uniform {
        /// Number of flows.
        n: usize,
    },
    /// Flow `k` (0-based, file order = popularity rank) with probability ∝ 1/(k+1)^alpha.
    /// Sampled by binary search in the cumulative distribution (8 bytes per flow).
    Zipf {
        /// Cumulative probabilities, last = 1.
        cdf: Vec<f64>,
    },
}

impl FlowDist {
    /// Uniform over `n` flows (`n >= 1`).
    pub fn uniform(n: usize) -> FlowDist {
        FlowDist::Uniform { n: n.max(1) }
    }

    /// Zipf with exponent `alpha >= 0` over `n` flows (`alpha = 0` is uniform).
    pub fn zipf(n: usize, alpha: f64) -> FlowDist {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 0..n {
            acc += 1.0 / ((k + 1) as f64).powf(alpha);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        FlowDist::Zipf { cdf }
    }

    /// Draws one flow index.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> usize {
        match self {
            FlowDist::Uniform { n } => rng.gen_range(0..*n),
            FlowDist::Zipf { cdf } => {
                let u: f64 = rng.gen();
                cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
            }
        }
    }
}

/// Smallest frame a generator sends with UDP: Ethernet 14 + IPv4 20 + UDP 8 + stamp 32.
pub const MIN_UDP_FRAME: usize = 74;
/// Smallest frame with TCP (20-byte TCP header).
pub const MIN_TCP_FRAME: usize = 86;
/// Largest frame (1500-byte MTU plus the Ethernet header).
pub const MAX_FRAME: usize = 1514;

/// Frame sizes (bytes handed to the port, no FCS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeSpec {
    /// Every frame this size.
    Fixed(usize),
    /// Simple IMIX: 7 smallest : 4 × 590 : 1 × 1514 (the classic 64/594/1518 with FCS, with
    /// the smallest raised to what the stamp needs).
    Imix,
}

impl std::str::FromStr for SizeSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "imix" {
            return Ok(SizeSpec::Imix);
        }
        s.parse()
            .map(SizeSpec::Fixed)
            .map_err(|_| format!("bad size {s:?}: a byte count or `imix`"))
    }
}

impl SizeSpec {
    /// The size of packet number `i` given the smallest legal frame `min`, clamped to
    /// `min..=MAX_FRAME`.
    pub fn size(&self, i: u64, min: usize) -> usize {
        let s = match self {
            SizeSpec::Fixed(s) => *s,
            SizeSpec::Imix => match i % 12 {
                0..=6 => min,
                7..=10 => 590,
                _ => MAX_FRAME,
            },
        };
        s.clamp(min, MAX_FRAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let d = FlowDist::zipf(1000, 0.99);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[d.sample(&mut rng)] += 1;
        }
        // Rank 0 should get about 1/H(1000, 0.99) ≈ 13% of the draws; rank 999 almost nothing.
        assert!(counts[0] > 10_000 && counts[0] < 16_000, "{}", counts[0]);
        assert!(counts[0] > 5 * counts[10]);
        assert!(counts[999] < 100);
    }

    #[test]
    fn uniform_covers_everything() {
        let d = FlowDist::uniform(10);
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[d.sample(&mut rng)] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let z = FlowDist::zipf(1, 1.0);
        assert_eq!(z.sample(&mut rng), 0);
    }

    #[test]
    fn sizes() {
        assert_eq!(SizeSpec::Fixed(10).size(0, 74), 74);
        assert_eq!(SizeSpec::Fixed(9000).size(0, 74), 1514);
        let v: Vec<usize> = (0..12).map(|i| SizeSpec::Imix.size(i, 74)).collect();
        assert_eq!(v.iter().filter(|&&s| s == 74).count(), 7);
        assert_eq!(v.iter().filter(|&&s| s == 590).count(), 4);
        assert_eq!("imix".parse::<SizeSpec>(), Ok(SizeSpec::Imix));
        assert!("x".parse::<SizeSpec>().is_err());
    }
}
