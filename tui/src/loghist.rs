//! A small log-bucketed latency histogram: 8 buckets per power of two (each at most 12.5%
//! wide), fixed size, no allocation on record. The monitor keeps one per kind (and per call
//! site) for every second of its "last N seconds" window, where an HDR histogram (~36 KiB at
//! two significant digits) would cost too much memory.

/// Sub-buckets per power of two.
const SUB: usize = 8;
const SUB_BITS: u32 = 3;
/// Largest tracked value: 2^42 ns (~73 minutes); larger values land in the last bucket.
const MAX_BIT: u32 = 42;
/// Number of buckets: values 0..8 exactly, then 8 per octave from 2^3 to 2^42.
pub const BUCKETS: usize = SUB + (MAX_BIT as usize - SUB_BITS as usize + 1) * SUB;

/// Half-decade display cells: `< 1 µs`, then [1, 3.16) µs, [3.16, 10) µs, ... up to `>= 3.16 s`.
pub const BAR_CELLS: usize = 15;
/// Lower edges (ns) of display cells 1.. (cell 0 is everything below 1 µs).
const BAR_EDGES: &[u64] = syncspy_read::aggregate::HALF_DECADES_NS
    .split_at(BAR_CELLS - 1)
    .0;

/// Counts per log bucket.
#[derive(Clone, PartialEq, Eq)]
pub struct LogHist {
    counts: [u32; BUCKETS],
    total: u64,
}

impl Default for LogHist {
    fn default() -> Self {
        LogHist {
            counts: [0; BUCKETS],
            total: 0,
        }
    }
}

impl std::fmt::Debug for LogHist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogHist({} values)", self.total)
    }
}

/// The bucket of a value.
pub fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = (63 - v.leading_zeros()).min(MAX_BIT);
    let top = if 63 - v.leading_zeros() > MAX_BIT {
        SUB as u64 - 1
    } else {
        (v >> (msb - SUB_BITS)) & (SUB as u64 - 1)
    };
    SUB + (msb - SUB_BITS) as usize * SUB + top as usize
}

/// Smallest and largest value of a bucket.
pub fn bucket_range(b: usize) -> (u64, u64) {
    if b < SUB {
        return (b as u64, b as u64);
    }
    let octave = ((b - SUB) / SUB) as u32;
    let s = ((b - SUB) % SUB) as u64;
    let shift = octave; // msb - SUB_BITS
    let low = (SUB as u64 + s) << shift;
    (low, low + (1u64 << shift) - 1)
}

impl LogHist {
    pub fn record(&mut self, v: u64) {
        let b = bucket_of(v);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.total += 1;
    }

    pub fn merge(&mut self, other: &LogHist) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
        self.total += other.total;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1): the middle of the bucket holding it, so within
    /// about 6% of the true value. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (b, c) in self.counts.iter().enumerate() {
            seen += u64::from(*c);
            if seen >= rank {
                let (lo, hi) = bucket_range(b);
                return lo + (hi - lo) / 2;
            }
        }
        bucket_range(BUCKETS - 1).1
    }

    /// Counts per half-decade display cell (see `BAR_CELLS`).
    pub fn bars(&self) -> [u64; BAR_CELLS] {
        let mut out = [0u64; BAR_CELLS];
        for (b, c) in self.counts.iter().enumerate() {
            if *c == 0 {
                continue;
            }
            let (lo, _) = bucket_range(b);
            let cell = BAR_EDGES.iter().take_while(|e| lo >= **e).count();
            out[cell] += u64::from(*c);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_in_order_and_are_narrow() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            100,
            1_000,
            123_456,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket_of(v);
            assert!(b >= last, "{v}");
            assert!(b < BUCKETS);
            last = b;
            let (lo, hi) = bucket_range(b);
            if v < 1 << 42 {
                assert!(lo <= v && v <= hi, "{v} in {lo}..={hi}");
                assert!((hi - lo) as f64 <= lo as f64 / 8.0 + 1.0);
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_bucket_precision() {
        let mut h = LogHist::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let close = |got: u64, want: u64| got.abs_diff(want) as f64 <= want as f64 * 0.07;
        assert!(close(h.quantile(0.5), 500_000), "{}", h.quantile(0.5));
        assert!(close(h.quantile(0.99), 990_000), "{}", h.quantile(0.99));
        assert_eq!(LogHist::default().quantile(0.5), 0);
    }

    #[test]
    fn bars_are_half_decades() {
        let mut h = LogHist::default();
        h.record(500); // < 1 µs
        h.record(2_000); // 1..3.16 µs
        h.record(1_500_000); // 1..3.16 ms
        h.record(1_400_000);
        h.record(5_000_000_000); // >= 3.16 s
        let b = h.bars();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 1);
        assert_eq!(b[7], 2);
        assert_eq!(b[14], 1);
        assert_eq!(b.iter().sum::<u64>(), 5);
    }
}
