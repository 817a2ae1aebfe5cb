//! Reservoir sampling: "give me n random events".
//!
//! **Guarantee.** After `n` offers, the reservoir holds a uniform random sample of
//! `min(k, n)` of them, without replacement: every offered event is in it with probability
//! `k / n`, whenever it arrived (Algorithm R's semantics). It uses O(k) memory and one pass.
//!
//! Speed comes from Li's Algorithm L: instead of drawing a random number per event, it draws how
//! many events to skip before the next replacement, so at `n ≫ k` an offer is a counter increment
//! and a comparison. Its state is the sample, `n`, the running threshold `W` and the position of
//! the next accepted event; all of it is encoded, so a decoded reservoir continues exactly as
//! Algorithm L would (with fresh randomness).
//!
//! **Merging needs stream lengths.** Concatenating two reservoirs is not a sample of the union when
//! one saw 10M events and the other 100k. [`Sketch::merge`] draws the number of events taken from
//! each side hypergeometrically from the two stream lengths (exactly how many of a uniform
//! `k`-subset of the union fall on each side), then takes that many uniformly from each reservoir.
//!
//! Randomness is `rand`'s `StdRng` (a CSPRNG), seeded from the OS unless a seed is given: a sample
//! that feeds an audit must not be predictable from the stream's timing.

use super::{Estimate, Sketch, SketchError, SketchKind};
use rand::rngs::StdRng;
use rand::seq::{index, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_distr::{Beta, Distribution};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Default sample size per sketch set.
pub const DEFAULT_RESERVOIR: usize = 1_000;

/// Heap bytes a value owns beyond its own `size_of` (a `String`'s buffer, say), so that
/// [`Reservoir::size_bytes`](Sketch::size_bytes) counts what a sample really holds. Types with
/// nothing on the heap (sequence numbers) return 0.
pub trait HeapSize {
    fn heap_bytes(&self) -> usize;
}

macro_rules! no_heap {
    ($($t:ty),*) => {$(
        impl HeapSize for $t {
            fn heap_bytes(&self) -> usize {
                0
            }
        }
    )*};
}
no_heap!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, bool, char, f32, f64);

impl HeapSize for String {
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

impl<T: HeapSize> HeapSize for Vec<T> {
    fn heap_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
            + self.iter().map(HeapSize::heap_bytes).sum::<usize>()
    }
}

impl<T: HeapSize> HeapSize for Box<[T]> {
    fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[T]>(self) + self.iter().map(HeapSize::heap_bytes).sum::<usize>()
    }
}

impl<A: HeapSize, B: HeapSize> HeapSize for (A, B) {
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes()
    }
}

impl HeapSize for &'static str {
    fn heap_bytes(&self) -> usize {
        0
    }
}

fn os_rng() -> StdRng {
    StdRng::from_os_rng()
}

/// A uniform sample of up to `capacity` events of type `T`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reservoir<T> {
    capacity: usize,
    /// Events offered so far (n).
    seen: u64,
    items: Vec<T>,
    /// Algorithm L's W: the largest of the k smallest uniform keys drawn so far.
    w: f64,
    /// The 1-based stream position of the next event to accept once the reservoir is full.
    next: u64,
    #[serde(skip, default = "os_rng")]
    rng: StdRng,
    /// The items' [`HeapSize::heap_bytes`] summed, kept as they change: the store asks a set's
    /// size after every piece of an import, and walking a thousand samples each time cost 4% of
    /// the ingest. [`UNKNOWN_HEAP`] where nothing kept it (a reservoir serde decoded, or
    /// [`Reservoir::map`]ped): the size then walks the items, as before.
    #[serde(skip, default = "unknown_heap")]
    item_heap: usize,
}

const UNKNOWN_HEAP: usize = usize::MAX;

fn unknown_heap() -> usize {
    UNKNOWN_HEAP
}

/// A reservoir's Algorithm L state besides its sample: what an owner that stores the sample its
/// own way (the store packs sampled sequence numbers) stores with it, so that
/// [`Reservoir::from_state`] rebuilds the reservoir exactly.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReservoirState {
    pub capacity: usize,
    /// Events offered so far (n).
    pub seen: u64,
    /// Algorithm L's W.
    pub w: f64,
    /// The stream position of the next event to accept once full.
    pub next: u64,
}

impl<T> Reservoir<T> {
    /// An empty reservoir seeded from the operating system.
    pub fn new(capacity: usize) -> Self {
        Self::with_rng(capacity, os_rng())
    }

    /// An empty reservoir whose draws are reproducible from `seed`.
    pub fn with_seed(capacity: usize, seed: u64) -> Self {
        Self::with_rng(capacity, StdRng::seed_from_u64(seed))
    }

    fn with_rng(capacity: usize, rng: StdRng) -> Self {
        Reservoir {
            capacity,
            seen: 0,
            // Grown as events arrive (see `offer_with`), so a set that saw few costs little.
            items: Vec::new(),
            w: 1.0,
            next: 0,
            rng,
            item_heap: 0,
        }
    }

    /// The state besides the sample (see [`ReservoirState`]).
    pub fn state(&self) -> ReservoirState {
        ReservoirState {
            capacity: self.capacity,
            seen: self.seen,
            w: self.w,
            next: self.next,
        }
    }

    /// The reservoir with `state` holding `items` in slot order (the order [`Reservoir::items`]
    /// gave them: a replacement picks a slot by index, so the order is part of the state),
    /// seeded from the operating system as a decoded one is. Refused as [`Sketch::validate`]
    /// refuses an inconsistent decoded reservoir.
    pub fn from_state(state: ReservoirState, items: Vec<T>) -> Result<Self, SketchError> {
        let r = Reservoir {
            capacity: state.capacity,
            seen: state.seen,
            items,
            w: state.w,
            next: state.next,
            rng: os_rng(),
            item_heap: UNKNOWN_HEAP,
        };
        r.check()?;
        Ok(r)
    }

    /// The invariants of [`Sketch::validate`].
    fn check(&self) -> Result<(), SketchError> {
        let kind = SketchKind::Reservoir;
        let expected = (self.capacity as u64).min(self.seen);
        if self.items.len() as u64 != expected {
            return Err(SketchError::corrupt(
                kind,
                format!(
                    "{} items for capacity {} after {} events",
                    self.items.len(),
                    self.capacity,
                    self.seen
                ),
            ));
        }
        let full = self.capacity > 0 && self.items.len() == self.capacity;
        if full && (self.next <= self.seen || !(self.w > 0.0 && self.w <= 1.0)) {
            return Err(SketchError::corrupt(
                kind,
                format!("W={} next={} n={}", self.w, self.next, self.seen),
            ));
        }
        Ok(())
    }

    /// Replaces the random source with one seeded from `seed` (for reproducible runs after a
    /// decode, which reseeds from the OS).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Stream length n: events offered so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The sample (in no particular order).
    pub fn items(&self) -> &[T] {
        &self.items
    }

    /// A uniform draw from (0, 1).
    fn open01(&mut self) -> f64 {
        loop {
            let u: f64 = self.rng.random();
            if u > 0.0 {
                return u;
            }
        }
    }

    /// Algorithm L: the gap to the next accepted event is geometric with success probability W.
    fn schedule(&mut self) {
        let skip = (self.open01().ln() / (-self.w).ln_1p()).floor();
        let skip = if skip.is_finite() && skip >= 0.0 {
            skip as u64
        } else {
            u64::MAX
        };
        self.next = self.seen.saturating_add(skip).saturating_add(1);
    }

    /// The same reservoir state holding `f` of each sampled event (a change of what stands for
    /// an event, not of which events are sampled).
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Reservoir<U> {
        Reservoir {
            capacity: self.capacity,
            seen: self.seen,
            items: self.items.into_iter().map(f).collect(),
            w: self.w,
            next: self.next,
            rng: self.rng,
            item_heap: UNKNOWN_HEAP,
        }
    }

    /// A uniform subset of `n` of the sampled events (all of them if `n` is larger).
    pub fn pick<R: Rng + ?Sized>(&self, n: usize, rng: &mut R) -> Vec<&T> {
        let n = n.min(self.items.len());
        index::sample(rng, self.items.len(), n)
            .into_iter()
            .map(|i| &self.items[i])
            .collect()
    }
}

impl<T: HeapSize> Reservoir<T> {
    /// Offers one event.
    #[inline]
    pub fn offer(&mut self, item: T) -> bool {
        self.offer_with(|| item)
    }

    /// Offers one event, building it only if it is accepted; at `n ≫ k` almost none are, so the
    /// caller avoids cloning events that would be dropped. Returns whether it was kept.
    #[inline]
    pub fn offer_with(&mut self, make: impl FnOnce() -> T) -> bool {
        self.seen += 1;
        if self.items.len() < self.capacity {
            if self.items.len() == self.items.capacity() {
                // Doubling, but never past `capacity`: a full reservoir holds exactly k slots,
                // which `SketchSet::largest_size_bytes` counts on.
                let grown = (self.items.len() * 2).max(4).min(self.capacity);
                self.items.reserve_exact(grown - self.items.len());
            }
            let item = make();
            let added = item.heap_bytes();
            self.items.push(item);
            self.tally(added, 0);
            if self.items.len() == self.capacity {
                self.w = (self.open01().ln() / self.capacity as f64).exp();
                self.schedule();
            }
            return true;
        }
        if self.seen != self.next {
            return false;
        }
        let slot = self.rng.random_range(0..self.capacity);
        let item = make();
        let added = item.heap_bytes();
        let removed = std::mem::replace(&mut self.items[slot], item).heap_bytes();
        self.tally(added, removed);
        self.w *= (self.open01().ln() / self.capacity as f64).exp();
        self.schedule();
        true
    }

    /// Keeps [`Reservoir::item_heap`] after an item came in (`added` heap bytes) and perhaps
    /// another went (`removed`); one that nothing kept is counted once here.
    fn tally(&mut self, added: usize, removed: usize) {
        self.item_heap = if self.item_heap == UNKNOWN_HEAP {
            self.walk_heap()
        } else {
            self.item_heap + added - removed
        };
    }

    fn walk_heap(&self) -> usize {
        self.items.iter().map(HeapSize::heap_bytes).sum()
    }
}

impl<T: PartialEq> PartialEq for Reservoir<T> {
    /// Equal state, ignoring the random source.
    fn eq(&self, other: &Self) -> bool {
        self.capacity == other.capacity
            && self.seen == other.seen
            && self.items == other.items
            && self.w.to_bits() == other.w.to_bits()
            && self.next == other.next
    }
}

impl<T: Serialize + DeserializeOwned + Clone + HeapSize> Sketch for Reservoir<T> {
    const KIND: SketchKind = SketchKind::Reservoir;

    /// A uniform sample of the union of both streams, weighted by their lengths.
    fn merge(&mut self, other: &Self) -> Result<(), SketchError> {
        if self.capacity != other.capacity {
            return Err(SketchError::incompatible(
                SketchKind::Reservoir,
                format!("capacity {} vs {}", self.capacity, other.capacity),
            ));
        }
        let n = self.seen.saturating_add(other.seen);
        let slots = (self.capacity as u64).min(n) as usize;
        // Sequential draws without replacement from the two stream lengths: the count that lands
        // on our side is hypergeometric, as for a uniform `slots`-subset of the union.
        let (mut mine_left, mut theirs_left) = (self.seen, other.seen);
        let mut from_mine = 0usize;
        for _ in 0..slots {
            if self.rng.random_range(0..mine_left + theirs_left) < mine_left {
                from_mine += 1;
                mine_left -= 1;
            } else {
                theirs_left -= 1;
            }
        }
        let from_theirs = slots - from_mine;
        // Each reservoir holds min(k, its n) events, so these counts always fit (see module docs).
        let from_mine = from_mine.min(self.items.len());
        let from_theirs = from_theirs.min(other.items.len());
        self.items.shuffle(&mut self.rng);
        self.items.truncate(from_mine);
        // Exactly, so the slots never pass k (pushing could double past it).
        self.items.reserve_exact(from_theirs);
        for i in index::sample(&mut self.rng, other.items.len(), from_theirs) {
            self.items.push(other.items[i].clone());
        }
        self.seen = n;
        self.item_heap = self.walk_heap();
        if self.items.len() == self.capacity && self.capacity > 0 {
            // Restarting Algorithm L mid-stream: W is the k-th smallest of n uniform keys, which
            // is Beta(k, n - k + 1) and independent of which events hold those keys.
            let k = self.capacity as f64;
            self.w = Beta::new(k, (n - self.capacity as u64 + 1) as f64)
                .map(|b| b.sample(&mut self.rng))
                .unwrap_or(k / n as f64);
            self.schedule();
        }
        Ok(())
    }

    fn estimate(&self) -> Estimate {
        Estimate::exact(self.seen as f64)
    }

    /// The slots allocated so far (at most k) and the heap data the sampled events own.
    fn size_bytes(&self) -> usize {
        let items = match self.item_heap {
            UNKNOWN_HEAP => self.walk_heap(),
            kept => kept,
        };
        self.items.capacity() * std::mem::size_of::<T>() + items + std::mem::size_of::<Self>()
    }

    fn validate(&self) -> Result<(), SketchError> {
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sketch::bounds::chi_square_quantile;
    use crate::sketch::test_support::assert_damage_detected;

    /// The reference's check: 3 of 10, 100,000 repetitions. Each count is Binomial(100,000, 0.3):
    /// mean 30,000, sd 145; the band [29,400, 30,600] is ±4.1 sd, so all ten fall inside with
    /// probability > 99.9% for a uniform sampler and a bias of a few percent cannot.
    fn assert_three_of_ten_uniform(counts: &[u64]) {
        for (item, &c) in counts.iter().enumerate() {
            assert!(
                (29_400..=30_600).contains(&c),
                "item {item}: {c} ({counts:?})"
            );
        }
    }

    #[test]
    fn three_of_ten_is_uniform() {
        let mut counts = [0u64; 10];
        for rep in 0..100_000u64 {
            let mut r = Reservoir::with_seed(3, rep);
            for i in 0..10usize {
                r.offer(i);
            }
            for &i in r.items() {
                counts[i] += 1;
            }
        }
        assert_three_of_ten_uniform(&counts);
    }

    /// A long stream: N = 1M, k = 1,000, 40 runs; sampled positions in 100 equal bins. Under
    /// uniformity the Pearson statistic is χ²(99); we fail above its 99.9% quantile (~148).
    #[test]
    fn long_stream_chi_square() {
        let (n, k, runs, bins) = (1_000_000u64, 1_000usize, 40u64, 100usize);
        let mut counts = vec![0u64; bins];
        for run in 0..runs {
            let mut r = Reservoir::with_seed(k, 1_000 + run);
            for i in 0..n {
                r.offer(i);
            }
            assert_eq!(r.items().len(), k);
            assert_eq!(r.seen(), n);
            for &i in r.items() {
                counts[(i * bins as u64 / n) as usize] += 1;
            }
        }
        let expected = (runs as usize * k) as f64 / bins as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        let critical = chi_square_quantile(0.999, (bins - 1) as f64);
        assert!(
            chi2 < critical,
            "chi-square {chi2:.1} ≥ {critical:.1}: {counts:?}"
        );
        // The sample is without replacement.
        let mut r = Reservoir::with_seed(k, 5);
        (0..n).for_each(|i| {
            r.offer(i);
        });
        let mut v = r.items().to_vec();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), k);
    }

    #[test]
    fn offer_with_builds_only_accepted_events() {
        let mut r = Reservoir::with_seed(10, 1);
        let mut built = 0;
        for i in 0..100_000u64 {
            r.offer_with(|| {
                built += 1;
                i
            });
        }
        // Acceptances are independent Bernoulli(k/i) for offer i > k: mean
        // k + Σ_{i=11}^{100,000} 10/i = 101.6 and variance Σ (10/i)(1 − 10/i) = 82.1 (sd 9.1).
        // ±5 sd (P(|Z| > 5) = 6e-7): building an event for every offer (100,000), or for twice
        // the draws it keeps, fails.
        let (mean, sd) = (101.6f64, 82.1f64.sqrt());
        assert!(
            (built as f64 - mean).abs() <= 5.0 * sd,
            "{built} events built, expected {mean} ± {:.0}",
            5.0 * sd
        );
    }

    /// Exact binomial quantile: smallest x with P(X ≤ x) ≥ q.
    fn binomial_quantile(n: u64, p: f64, q: f64) -> u64 {
        let mut ln_pmf = n as f64 * (1.0 - p).ln();
        let mut cdf = ln_pmf.exp();
        let mut x = 0;
        while cdf < q && x < n {
            ln_pmf += ((n - x) as f64).ln() - ((x + 1) as f64).ln() + p.ln() - (1.0 - p).ln();
            x += 1;
            cdf += ln_pmf.exp();
        }
        x
    }

    /// The reference's case: one worker saw 10M events, one 100k, each keeps 1,000. The small
    /// worker's share of a merged sample is hypergeometric (≈ Binomial(1000, 100k/10.1M), mean
    /// 9.9): one merge must fall in that binomial's 99% interval, and the total over 2,000
    /// independent merges (≈ Binomial(2M, p), sd ≈ 140) in its 99% interval too, which a merge that
    /// ignored stream lengths (share 50%) or one biased by even 3% would miss.
    #[test]
    fn merge_weights_by_stream_length() {
        let k = 1_000;
        let mut big = Reservoir::with_seed(k, 11);
        for i in 0..10_000_000u64 {
            big.offer(i);
        }
        let mut small = Reservoir::with_seed(k, 12);
        for i in 0..100_000u64 {
            small.offer(20_000_000 + i);
        }
        let p = 100_000.0 / 10_100_000.0;
        let from_small =
            |r: &Reservoir<u64>| r.items().iter().filter(|&&x| x >= 20_000_000).count() as u64;

        let mut one = big.clone();
        one.reseed(99);
        one.merge(&small).expect("merge");
        assert_eq!(one.seen(), 10_100_000);
        assert_eq!(one.items().len(), k);
        let share = from_small(&one);
        let (lo, hi) = (
            binomial_quantile(k as u64, p, 0.005),
            binomial_quantile(k as u64, p, 0.995),
        );
        assert!(
            (lo..=hi).contains(&share),
            "small share {share} outside [{lo}, {hi}]"
        );

        let merges = 2_000u64;
        let mut total = 0;
        for m in 0..merges {
            let mut r = big.clone();
            r.reseed(1_000 + m);
            r.merge(&small).expect("merge");
            total += from_small(&r);
        }
        let trials = merges * k as u64;
        let mean = trials as f64 * p;
        let sd = (trials as f64 * p * (1.0 - p)).sqrt();
        let z = crate::sketch::bounds::normal_quantile(0.995);
        assert!(
            (total as f64 - mean).abs() <= z * sd,
            "total {total}, expected {mean:.0} ± {:.0}",
            z * sd
        );
        let mismatched = Reservoir::<u64>::with_seed(10, 1);
        assert!(one.merge(&mismatched).is_err());
    }

    /// Merging two halves of a stream and then feeding more must still give every event a k/N
    /// chance: the restarted Algorithm L state (W ~ Beta) is what this checks. 3 of 20, 100,000
    /// repetitions: each count ~ Binomial(100,000, 0.15), sd 113; the band is ±4.1 sd.
    #[test]
    fn merged_reservoir_keeps_sampling_uniformly() {
        let mut counts = [0u64; 20];
        for rep in 0..100_000u64 {
            let mut a = Reservoir::with_seed(3, rep * 2);
            let mut b = Reservoir::with_seed(3, rep * 2 + 1);
            (0..4usize).for_each(|i| {
                a.offer(i);
            });
            (4..9usize).for_each(|i| {
                b.offer(i);
            });
            a.merge(&b).expect("merge");
            for i in 9..20usize {
                a.offer(i);
            }
            for &i in a.items() {
                counts[i] += 1;
            }
        }
        for (i, &c) in counts.iter().enumerate() {
            assert!((14_540..=15_460).contains(&c), "item {i}: {c} ({counts:?})");
        }
    }

    /// The size a reservoir reports from its kept heap figure is the one a walk of its items
    /// gives, through filling, replacing, merging, decoding and `from_state` (which start
    /// without a figure and count once at their next offer).
    #[test]
    fn kept_heap_figure_equals_a_walk_of_the_items() {
        fn walked(r: &Reservoir<String>) -> usize {
            r.items.heap_bytes() + std::mem::size_of::<Reservoir<String>>()
        }
        // Strings of 0 to 96 bytes, so a replacement changes the heap either way.
        let item = |i: u64| "x".repeat((crate::gen::splitmix64(i) % 97) as usize);
        let mut a = Reservoir::with_seed(50, 1);
        let mut b = Reservoir::with_seed(50, 2);
        for i in 0..5_000u64 {
            a.offer(item(i));
            b.offer(item(i + 1_000_000));
            if i % 7 == 0 || i < 60 {
                assert_eq!(a.size_bytes(), walked(&a), "after {i}");
            }
        }
        assert!(a.item_heap != UNKNOWN_HEAP);
        a.merge(&b).expect("merge");
        assert_eq!(a.size_bytes(), walked(&a), "merged");
        let mut decoded =
            Reservoir::<String>::decode(&a.encode().expect("encode")).expect("decode");
        let mut rebuilt = Reservoir::from_state(a.state(), a.items.clone()).expect("state");
        for r in [&mut decoded, &mut rebuilt] {
            assert_eq!(r.item_heap, UNKNOWN_HEAP);
            assert_eq!(r.size_bytes(), walked(r));
            for i in 0..2_000u64 {
                r.offer(item(i + 2_000_000));
            }
            assert!(r.item_heap != UNKNOWN_HEAP);
            assert_eq!(r.size_bytes(), walked(r));
        }
    }

    /// Encode/decode mid-stream (while filling, and once full with Algorithm L's state in use),
    /// reseed, then keep feeding: still 3 of 10 uniform.
    #[test]
    fn decoded_reservoir_stays_uniform() {
        for cut in [2usize, 6] {
            let mut counts = [0u64; 10];
            for rep in 0..100_000u64 {
                let mut r = Reservoir::with_seed(3, rep);
                for i in 0..cut {
                    r.offer(i);
                }
                let mut back =
                    Reservoir::<usize>::decode(&r.encode().expect("encode")).expect("decode");
                assert_eq!(back, r);
                back.reseed(rep ^ 0xdead_beef);
                for i in cut..10 {
                    back.offer(i);
                }
                for &i in back.items() {
                    counts[i] += 1;
                }
            }
            assert_three_of_ten_uniform(&counts);
        }
    }

    #[test]
    fn damage_and_inconsistent_state_are_detected() {
        let mut r = Reservoir::with_seed(50, 3);
        for i in 0..10_000u64 {
            r.offer(format!("tx-{i}"));
        }
        assert_damage_detected(&r);
        let mut lying = r.clone();
        lying.items.pop();
        let blob = lying.encode().expect("encode");
        assert!(matches!(
            Reservoir::<String>::decode(&blob),
            Err(SketchError::Corrupt { .. })
        ));
    }

    #[test]
    fn zero_capacity_counts_but_keeps_nothing() {
        let mut r = Reservoir::with_seed(0, 1);
        for i in 0..100u32 {
            assert!(!r.offer(i));
        }
        assert_eq!(r.seen(), 100);
        assert!(r.items().is_empty());
        assert_eq!(r.estimate(), Estimate::exact(100.0));
    }
}
