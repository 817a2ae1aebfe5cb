//! Count-Min sketch with a Top-K heap: "how often does X occur? who are the loudest?"
//!
//! **Guarantee (one-sided error).** An estimate is never below the true count. With width
//! `w = nextPrime(ceil(e / ε))` and depth `d = ceil(ln(1 / δ))`, a single query overestimates by
//! more than `ε · N` (N = total count) with probability at most `δ` under the textbook
//! independence assumptions; positions here come from one SHA-256 digest by double hashing, as in
//! the reference, which is a practical construction rather than a proof of those assumptions, so
//! the tests measure the bound on the reference's workload. The interval reported for an item is
//! `[estimate - ε·N, estimate]` at confidence `1 - δ` (99% by default), not 95%.
//!
//! **Conservative update** (the default) raises only the counters that are at the row minimum, to
//! `min + count`. Every counter stays at or above the true count of every item mapped to it, so
//! estimates remain upper bounds, and each counter is at most what the standard update would give,
//! so it is never worse, and much better for the quiet items (measured in the tests and
//! `docs/SKETCHES.md`).
//!
//! The Top-K heap keeps the `capacity` items with the largest estimates seen so far; they are the
//! candidates the store re-estimates after merging buckets.

use super::{Estimate, ItemSketch, Sketch, SketchError, SketchKind};
use crate::hash::{next_prime, Item, ShaWords, TableSize, MAX_DOUBLE_HASH_SIZE};
use serde::{Deserialize, Serialize};

/// Default heavy-hitter heap size.
pub const DEFAULT_TOP_K: usize = 100;
/// Rows beyond this (delta below e^-32) buy nothing measurable and would not fit the update's
/// fixed cell buffer.
const MAX_DEPTH: u32 = 32;

/// A Count-Min sketch of 64-bit counters with a Top-K heap of heavy-hitter candidates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountMin {
    width: TableSize,
    depth: u32,
    epsilon: f64,
    delta: f64,
    conservative: bool,
    total: u64,
    /// `depth` rows of `width` counters, row-major.
    table: Vec<u64>,
    top: TopK,
}

impl CountMin {
    /// A sketch with error `epsilon` (fraction of the total) at probability `delta`, conservative
    /// update on, and a heap of `top_k` candidates (0 disables it).
    pub fn new(epsilon: f64, delta: f64, top_k: usize) -> Result<Self, SketchError> {
        let (columns, depth) = Self::dimensions(epsilon, delta)?;
        let width = TableSize::new(columns).ok_or_else(|| {
            SketchError::invalid("count-min epsilon", epsilon, "width exceeds 2^32 counters")
        })?;
        let cells = usize::try_from(columns * u64::from(depth)).map_err(|_| {
            SketchError::invalid("count-min epsilon", epsilon, "table exceeds memory")
        })?;
        Ok(CountMin {
            width,
            depth,
            epsilon,
            delta,
            conservative: true,
            total: 0,
            table: vec![0; cells],
            top: TopK::new(top_k),
        })
    }

    /// `(width, depth)` for an `(epsilon, delta)`: `nextPrime(ceil(e/ε))` and `ceil(ln(1/δ))`.
    pub fn dimensions(epsilon: f64, delta: f64) -> Result<(u64, u32), SketchError> {
        if !(epsilon > 0.0 && epsilon < 1.0) {
            return Err(SketchError::invalid(
                "count-min epsilon",
                epsilon,
                "must lie strictly between 0 and 1",
            ));
        }
        if !(delta > 0.0 && delta < 1.0) {
            return Err(SketchError::invalid(
                "count-min delta",
                delta,
                "must lie strictly between 0 and 1",
            ));
        }
        let raw = (std::f64::consts::E / epsilon).ceil();
        if raw >= MAX_DOUBLE_HASH_SIZE as f64 {
            return Err(SketchError::invalid(
                "count-min epsilon",
                epsilon,
                "width exceeds 2^32 counters",
            ));
        }
        let width = next_prime((raw as u64).max(2));
        if width > MAX_DOUBLE_HASH_SIZE {
            return Err(SketchError::invalid(
                "count-min epsilon",
                epsilon,
                "width exceeds 2^32 counters",
            ));
        }
        let depth = (1.0 / delta).ln().ceil().max(1.0);
        if depth > MAX_DEPTH as f64 {
            return Err(SketchError::invalid(
                "count-min delta",
                delta,
                format!("needs more than {MAX_DEPTH} rows"),
            ));
        }
        Ok((width, depth as u32))
    }

    /// Switches between conservative (default) and standard update. Only meaningful before the
    /// first update; sketches of different modes do not merge.
    pub fn with_conservative_update(mut self, on: bool) -> Self {
        self.conservative = on;
        self
    }

    pub fn width(&self) -> u64 {
        self.width.get()
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    pub fn delta(&self) -> f64 {
        self.delta
    }

    pub fn is_conservative(&self) -> bool {
        self.conservative
    }

    /// Total weight added (N).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The additive error bound `ε · N`.
    pub fn error_bound(&self) -> f64 {
        self.epsilon * self.total as f64
    }

    /// Bytes of the counter table (`w · d · 8`).
    pub fn table_bytes(&self) -> usize {
        self.table.len() * 8
    }

    #[inline]
    fn cells(&self, sha: &ShaWords) -> impl Iterator<Item = usize> + '_ {
        let width = self.width.get() as usize;
        self.width
            .positions(sha)
            .take(self.depth as usize)
            .enumerate()
            .map(move |(row, col)| row * width + col as usize)
    }

    /// Adds `count` occurrences; returns the item's estimate afterwards. Does not touch the heap.
    #[inline]
    pub fn add(&mut self, sha: &ShaWords, count: u64) -> u64 {
        self.total = self.total.saturating_add(count);
        let mut cells = [0usize; MAX_DEPTH as usize];
        let d = self.depth.min(MAX_DEPTH) as usize;
        for (slot, cell) in cells.iter_mut().zip(self.cells(sha)) {
            *slot = cell;
        }
        let cells = &cells[..d];
        // Branch-free on purpose: whether a counter sits at the row minimum is a coin flip per
        // row, and mispredicting it cost more than the memory accesses (measured in the bench).
        if self.conservative {
            let current = cells.iter().fold(u64::MAX, |m, &c| m.min(self.table[c]));
            let target = current.saturating_add(count);
            for &c in cells {
                let v = &mut self.table[c];
                *v = (*v).max(target);
            }
            target
        } else {
            let mut min = u64::MAX;
            for &c in cells {
                let v = &mut self.table[c];
                *v = v.saturating_add(count);
                min = min.min(*v);
            }
            min
        }
    }

    /// The estimated count of an item: never below the truth.
    #[inline]
    pub fn count(&self, sha: &ShaWords) -> u64 {
        self.cells(sha).fold(u64::MAX, |m, c| m.min(self.table[c]))
    }

    /// The estimate with its one-sided interval `[estimate - ε·N, estimate]` (confidence 1 - δ).
    pub fn count_estimate(&self, sha: &ShaWords) -> Estimate {
        let est = self.count(sha) as f64;
        Estimate::approximate(est, (est - self.error_bound()).max(0.0), est)
    }

    /// Adds `count` occurrences of `item` and offers it to the heavy-hitter heap.
    pub fn add_item(&mut self, item: &Item<'_>, count: u64) {
        let est = self.add(&item.hashes.sha, count);
        self.top.offer(item.bytes, &item.hashes.sha, est);
    }

    /// Adds one occurrence of an item given as bytes, hashing only what Count-Min needs (SHA-256);
    /// for callers that feed Count-Min alone rather than a whole sketch set.
    pub fn add_bytes(&mut self, bytes: &[u8], count: u64) {
        let sha = ShaWords::of(bytes);
        let est = self.add(&sha, count);
        self.top.offer(bytes, &sha, est);
    }

    /// The `n` heaviest candidates by estimate, heaviest first (ties by item bytes).
    pub fn top(&self, n: usize) -> Vec<TopEntry> {
        self.top.sorted(n)
    }

    /// Heap capacity.
    pub fn top_capacity(&self) -> usize {
        self.top.capacity
    }

    fn same_shape(&self, other: &Self) -> Result<(), SketchError> {
        if self.width != other.width
            || self.depth != other.depth
            || self.conservative != other.conservative
            || self.epsilon.to_bits() != other.epsilon.to_bits()
            || self.delta.to_bits() != other.delta.to_bits()
        {
            return Err(SketchError::incompatible(
                SketchKind::CountMin,
                format!(
                    "{}x{} (conservative {}) vs {}x{} (conservative {})",
                    self.depth,
                    self.width.get(),
                    self.conservative,
                    other.depth,
                    other.width.get(),
                    other.conservative
                ),
            ));
        }
        Ok(())
    }
}

impl Sketch for CountMin {
    const KIND: SketchKind = SketchKind::CountMin;

    /// Adds the tables (each counter stays an upper bound of its items' combined counts), then
    /// re-estimates both heaps' candidates on the merged table and keeps the heaviest.
    fn merge(&mut self, other: &Self) -> Result<(), SketchError> {
        self.same_shape(other)?;
        for (a, b) in self.table.iter_mut().zip(&other.table) {
            *a = a.saturating_add(*b);
        }
        self.total = self.total.saturating_add(other.total);
        let mut candidates = self.top.entries();
        for e in other.top.entries() {
            if !candidates
                .iter()
                .any(|c| c.sha == e.sha && c.item == e.item)
            {
                candidates.push(e);
            }
        }
        for c in &mut candidates {
            c.estimate = self.count(&c.sha);
        }
        self.top.refill(candidates);
        Ok(())
    }

    fn estimate(&self) -> Estimate {
        Estimate::exact(self.total as f64)
    }

    fn size_bytes(&self) -> usize {
        self.table_bytes()
            + self
                .top
                .items
                .iter()
                .map(|item| item.len() + std::mem::size_of::<TopEntry>())
                .sum::<usize>()
            + std::mem::size_of::<Self>()
    }

    fn validate(&self) -> Result<(), SketchError> {
        let kind = SketchKind::CountMin;
        let width = self.width.get();
        if TableSize::new(width) != Some(self.width) || self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(SketchError::corrupt(
                kind,
                format!("{}x{width}", self.depth),
            ));
        }
        if self.table.len() as u64 != width * u64::from(self.depth) {
            return Err(SketchError::corrupt(
                kind,
                format!("{} counters for {}x{}", self.table.len(), self.depth, width),
            ));
        }
        for (row, counters) in self.table.chunks(width as usize).enumerate() {
            let sum = counters.iter().fold(0u64, |a, &b| a.saturating_add(b));
            // Standard update: each row sums to N exactly. Conservative: at most N.
            let ok = if self.conservative {
                sum <= self.total
            } else {
                sum == self.total
            };
            if !ok {
                return Err(SketchError::corrupt(
                    kind,
                    format!("row {row} sums to {sum}, total is {}", self.total),
                ));
            }
        }
        if self.top.len() > self.top.capacity {
            return Err(SketchError::corrupt(
                kind,
                "more heavy hitters than the heap holds",
            ));
        }
        Ok(())
    }
}

impl ItemSketch for CountMin {
    #[inline]
    fn update(&mut self, item: &Item<'_>) {
        self.add_item(item, 1);
    }
}

/// One heavy-hitter candidate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopEntry {
    pub item: Vec<u8>,
    /// The Count-Min estimate when last seen (re-estimated on merge).
    pub estimate: u64,
    sha: ShaWords,
}

impl TopEntry {
    /// The item's hash words, so callers can re-estimate it on another (merged) sketch.
    pub fn sha(&self) -> &ShaWords {
        &self.sha
    }
}

/// A bounded set of the heaviest candidates, kept as parallel flat arrays with the minimum's
/// index cached. At K = 100 a scan of 100 contiguous u64s is cheaper than heap bookkeeping, the
/// common case (an estimate at or below the minimum) is one comparison, and an evicted slot's
/// item buffer is reused rather than reallocated.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "StoredTopK", into = "StoredTopK")]
struct TopK {
    capacity: usize,
    items: Vec<Vec<u8>>,
    shas: Vec<ShaWords>,
    /// `shas` packed into one u64 each, scanned to find an item without touching its bytes.
    keys: Vec<u64>,
    estimates: Vec<u64>,
    min_idx: usize,
}

#[derive(Serialize, Deserialize)]
struct StoredTopK {
    capacity: usize,
    entries: Vec<TopEntry>,
}

impl From<StoredTopK> for TopK {
    fn from(s: StoredTopK) -> Self {
        let mut top = TopK::new(s.capacity);
        top.refill(s.entries);
        top
    }
}

impl From<TopK> for StoredTopK {
    fn from(t: TopK) -> Self {
        StoredTopK {
            capacity: t.capacity,
            entries: t.entries(),
        }
    }
}

impl PartialEq for TopK {
    /// The same candidates with the same estimates, whatever their slots.
    fn eq(&self, other: &Self) -> bool {
        self.capacity == other.capacity
            && self.sorted(self.capacity) == other.sorted(other.capacity)
    }
}

fn key_of(sha: &ShaWords) -> u64 {
    u64::from(sha.a) << 32 | u64::from(sha.b)
}

impl TopK {
    fn new(capacity: usize) -> Self {
        let reserve = capacity.min(1024);
        TopK {
            capacity,
            items: Vec::with_capacity(reserve),
            shas: Vec::with_capacity(reserve),
            keys: Vec::with_capacity(reserve),
            estimates: Vec::with_capacity(reserve),
            min_idx: 0,
        }
    }

    fn len(&self) -> usize {
        self.estimates.len()
    }

    /// The slot to evict next: the lowest estimate, ties broken by the largest item bytes. A
    /// total order makes the choice independent of slot layout, so a heap decoded from disk (or
    /// rebuilt by replaying the log) evolves exactly as the live one would.
    fn recompute_min(&mut self) {
        let mut best = 0;
        for i in 1..self.len() {
            let (e, b) = (self.estimates[i], self.estimates[best]);
            if e < b || (e == b && self.items[i] > self.items[best]) {
                best = i;
            }
        }
        self.min_idx = best;
    }

    /// Estimates only grow, so an item at or below the minimum cannot be in the set with a larger
    /// stored estimate; that makes the early return safe.
    #[inline]
    fn offer(&mut self, item: &[u8], sha: &ShaWords, estimate: u64) {
        if self.capacity == 0 {
            return;
        }
        let full = self.len() == self.capacity;
        if full && estimate <= self.estimates[self.min_idx] {
            return;
        }
        let key = key_of(sha);
        let found = self
            .keys
            .iter()
            .enumerate()
            .find(|&(i, &k)| k == key && self.items[i] == item)
            .map(|(i, _)| i);
        if let Some(i) = found {
            self.estimates[i] = estimate;
            if i == self.min_idx {
                self.recompute_min();
            }
            return;
        }
        if full {
            let i = self.min_idx;
            self.items[i].clear();
            self.items[i].extend_from_slice(item);
            self.shas[i] = *sha;
            self.keys[i] = key;
            self.estimates[i] = estimate;
        } else {
            self.items.push(item.to_vec());
            self.shas.push(*sha);
            self.keys.push(key);
            self.estimates.push(estimate);
        }
        self.recompute_min();
    }

    /// The candidates as entries, in storage order.
    fn entries(&self) -> Vec<TopEntry> {
        (0..self.len())
            .map(|i| TopEntry {
                item: self.items[i].clone(),
                estimate: self.estimates[i],
                sha: self.shas[i],
            })
            .collect()
    }

    /// Keeps the `capacity` heaviest of `candidates`.
    fn refill(&mut self, mut candidates: Vec<TopEntry>) {
        candidates.sort_by(|a, b| {
            b.estimate
                .cmp(&a.estimate)
                .then_with(|| a.item.cmp(&b.item))
        });
        candidates.truncate(self.capacity);
        let capacity = self.capacity;
        *self = TopK::new(capacity);
        for e in candidates {
            self.keys.push(key_of(&e.sha));
            self.shas.push(e.sha);
            self.estimates.push(e.estimate);
            self.items.push(e.item);
        }
        self.recompute_min();
    }

    fn sorted(&self, n: usize) -> Vec<TopEntry> {
        let mut v = self.entries();
        v.sort_by(|a, b| {
            b.estimate
                .cmp(&a.estimate)
                .then_with(|| a.item.cmp(&b.item))
        });
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sketch::test_support::{assert_damage_detected, wallet};
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    #[test]
    fn sizing_matches_the_reference() {
        let c = CountMin::new(0.001, 0.01, 100).expect("size");
        assert_eq!((c.depth(), c.width()), (5, 2_719));
        assert_eq!(c.table_bytes(), 5 * 2_719 * 8);
        for (e, d) in [
            (0.0, 0.1),
            (1.0, 0.1),
            (0.1, 0.0),
            (0.1, 1.5),
            (f64::NAN, 0.1),
            (1e-12, 0.1),
        ] {
            assert!(CountMin::new(e, d, 0).is_err(), "eps {e} delta {d}");
        }
    }

    struct StreamA {
        events: Vec<String>,
        truth: HashMap<String, u64>,
        bots: Vec<String>,
        users: Vec<String>,
    }

    /// The reference's Stream A: 500 bots × 1,800 transactions and 100,000 one-time users,
    /// shuffled (seeded).
    fn stream_a(seed: u64) -> StreamA {
        let bots: Vec<String> = (0..500).map(|i| wallet(10, i)).collect();
        let users: Vec<String> = (0..100_000).map(|i| wallet(11, i)).collect();
        let mut events = Vec::with_capacity(1_000_000);
        for b in &bots {
            events.extend(std::iter::repeat_n(b.clone(), 1_800));
        }
        events.extend(users.iter().cloned());
        events.shuffle(&mut StdRng::seed_from_u64(seed));
        let mut truth = HashMap::new();
        for e in &events {
            *truth.entry(e.clone()).or_insert(0) += 1;
        }
        StreamA {
            events,
            truth,
            bots,
            users,
        }
    }

    fn feed(mut cms: CountMin, events: &[String]) -> CountMin {
        for e in events {
            cms.update(&Item::new(e.as_bytes()));
        }
        cms
    }

    /// The reference's table on Stream A (N = 1M, bound εN = 1,000). Its run had a mean overcount of
    /// 31 and 22 of 100,000 users above the bound with the standard update; conservative update
    /// must do at least as well on every item (it is never worse by construction).
    #[test]
    fn stream_a_matches_the_reference_and_conservative_update_is_never_worse() {
        let a = stream_a(42);
        let cu = feed(CountMin::new(0.001, 0.01, 100).expect("size"), &a.events);
        let std = feed(
            CountMin::new(0.001, 0.01, 100)
                .expect("size")
                .with_conservative_update(false),
            &a.events,
        );
        assert_eq!(cu.total(), 1_000_000);
        assert_eq!(cu.error_bound(), 1_000.0);
        for sketch in [&cu, &std] {
            for b in &a.bots {
                let est = sketch.count(&ShaWords::of(b.as_bytes()));
                assert!((1_800..=2_800).contains(&est), "bot {b}: {est}");
            }
            let mut over = 0u64;
            let mut above = 0;
            for u in &a.users {
                let est = sketch.count(&ShaWords::of(u.as_bytes()));
                assert!(est >= 1, "underestimate for {u}");
                over += est - 1;
                if est - 1 > 1_000 {
                    above += 1;
                }
            }
            let mean = over as f64 / a.users.len() as f64;
            eprintln!(
                "stream A, conservative={}: one-time users mean overcount {mean:.2}, {above} above the bound",
                sketch.is_conservative()
            );
            assert!(
                mean <= 40.0,
                "conservative={}: mean overcount {mean}",
                sketch.is_conservative()
            );
            assert!(
                above <= 1_000,
                "conservative={}: {above} above the bound",
                sketch.is_conservative()
            );
        }
        for (item, &truth) in &a.truth {
            let h = ShaWords::of(item.as_bytes());
            let (c, s) = (cu.count(&h), std.count(&h));
            assert!(
                truth <= c && c <= s,
                "{item}: truth {truth}, conservative {c}, standard {s}"
            );
        }
        // The bots are the 500 heaviest; the heap's top 100 must all be bots with exact-ish counts.
        for e in cu.top(100) {
            assert!(a.bots.iter().any(|b| b.as_bytes() == e.item.as_slice()));
            assert!(e.estimate >= 1_800);
        }
    }

    /// Zipf(1.1) over 100k items, 1M events: the true top 10 must all be in the reported top 100,
    /// each with an estimate no lower than its true count.
    #[test]
    fn top_k_finds_the_heavy_hitters_of_a_zipf_stream() {
        let zipf = rand_distr::Zipf::new(100_000.0, 1.1).expect("zipf");
        let mut rng = StdRng::seed_from_u64(7);
        let mut cms = CountMin::new(0.001, 0.01, 100).expect("size");
        let mut truth: HashMap<u64, u64> = HashMap::new();
        for _ in 0..1_000_000 {
            let rank: f64 = rng.sample(zipf);
            let rank = rank as u64;
            *truth.entry(rank).or_insert(0) += 1;
            let key = wallet(12, rank);
            cms.update(&Item::new(key.as_bytes()));
        }
        let mut true_top: Vec<(u64, u64)> = truth.into_iter().collect();
        true_top.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        let reported = cms.top(100);
        assert_eq!(reported.len(), 100);
        for &(rank, count) in true_top.iter().take(10) {
            let key = wallet(12, rank);
            let hit = reported.iter().find(|e| e.item == key.as_bytes());
            let hit =
                hit.unwrap_or_else(|| panic!("true heavy hitter rank {rank} ({count}) missing"));
            assert!(hit.estimate >= count);
        }
    }

    #[test]
    fn merge_adds_tables_and_re_estimates_candidates() {
        let a = stream_a(1);
        let (left, right) = a.events.split_at(500_000);
        let mut l = feed(CountMin::new(0.001, 0.01, 50).expect("size"), left);
        let r = feed(CountMin::new(0.001, 0.01, 50).expect("size"), right);
        l.merge(&r).expect("merge");
        assert_eq!(l.total(), 1_000_000);
        for e in l.top(50) {
            let truth = a.truth[std::str::from_utf8(&e.item).expect("utf8")];
            assert!(e.estimate >= truth && e.estimate <= truth + 1_000);
            assert_eq!(e.estimate, l.count(e.sha()));
        }
        let other = CountMin::new(0.01, 0.01, 50).expect("size");
        assert!(l.merge(&other).is_err());
        let std = CountMin::new(0.001, 0.01, 50)
            .expect("size")
            .with_conservative_update(false);
        assert!(l.merge(&std).is_err());
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let mut c = CountMin::new(0.01, 0.01, 10).expect("size");
        for i in 0..5_000u64 {
            c.update(&Item::new(wallet(13, i % 300).as_bytes()));
        }
        let back = CountMin::decode(&c.encode().expect("encode")).expect("decode");
        assert_eq!(back, c);
        let mut more = back.clone();
        more.update(&Item::new(wallet(13, 1).as_bytes()));
        assert_eq!(more.total(), 5_001);
        assert_damage_detected(&c);
    }

    proptest! {
        #[test]
        fn never_underestimates(
            items in proptest::collection::vec((0u64..200, 1u64..5), 1..600),
            conservative in any::<bool>(),
        ) {
            let mut c = CountMin::new(0.05, 0.1, 5).expect("size").with_conservative_update(conservative);
            let mut truth: HashMap<u64, u64> = HashMap::new();
            for &(k, n) in &items {
                c.add_item(&Item::new(&k.to_le_bytes()), n);
                *truth.entry(k).or_insert(0) += n;
            }
            for (k, n) in truth {
                prop_assert!(c.count(&ShaWords::of(&k.to_le_bytes())) >= n);
            }
        }
    }
}
