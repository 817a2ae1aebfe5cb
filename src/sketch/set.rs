//! A sketch set: one of each family over the same slice of the stream (a bucket, whole stream or
//! one tag value), as the store keeps them.

use super::countmin::DEFAULT_TOP_K;
use super::hll::DEFAULT_PRECISION;
use super::reservoir::DEFAULT_RESERVOIR;
use super::theta::DEFAULT_NOMINAL_ENTRIES;
use super::{
    BloomFilter, CountMin, Estimate, HyperLogLog, Reservoir, Sketch, SketchError, SketchKind, Theta,
};
use crate::hash::Item;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Sizing of every family in a set. The defaults are SPEC.md's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SketchConfig {
    /// Distinct items per set the Bloom filter is sized for.
    pub bloom_capacity: u64,
    /// The Bloom filter's false-positive rate at that capacity.
    pub bloom_fpr: f64,
    /// HyperLogLog precision p (2^p registers).
    pub hll_precision: u8,
    /// Theta nominal entries k (a power of two).
    pub theta_nominal_entries: u32,
    /// Count-Min additive error, as a fraction of the set's total.
    pub cms_epsilon: f64,
    /// Count-Min failure probability per query.
    pub cms_delta: f64,
    /// Count-Min update rule: conservative (default) or standard.
    pub cms_conservative: bool,
    /// Heavy-hitter candidates kept per set.
    pub top_k: usize,
    /// Events sampled per set.
    pub reservoir_size: usize,
}

impl Default for SketchConfig {
    fn default() -> Self {
        SketchConfig {
            bloom_capacity: 1_000_000,
            bloom_fpr: 0.01,
            hll_precision: DEFAULT_PRECISION,
            theta_nominal_entries: DEFAULT_NOMINAL_ENTRIES,
            cms_epsilon: 0.001,
            cms_delta: 0.01,
            cms_conservative: true,
            top_k: DEFAULT_TOP_K,
            reservoir_size: DEFAULT_RESERVOIR,
        }
    }
}

impl SketchConfig {
    /// Checks every parameter by building one of each sketch (cheap except for the Bloom bit
    /// array, which is what a store would allocate anyway).
    pub fn validate(&self) -> Result<(), SketchError> {
        BloomFilter::optimal_size(self.bloom_capacity, self.bloom_fpr)?;
        HyperLogLog::new(self.hll_precision)?;
        Theta::new(self.theta_nominal_entries)?;
        CountMin::dimensions(self.cms_epsilon, self.cms_delta)?;
        Ok(())
    }
}

/// One sketch of each family plus the exact event count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(bound = "E: Serialize + DeserializeOwned")]
pub struct SketchSet<E> {
    pub bloom: BloomFilter,
    pub hll: HyperLogLog,
    pub theta: Theta,
    pub cms: CountMin,
    pub reservoir: Reservoir<E>,
    /// Events routed to this set (exact).
    pub events: u64,
}

impl<E> SketchSet<E> {
    /// An empty set sized by `config`, sampling with OS randomness.
    pub fn new(config: &SketchConfig) -> Result<Self, SketchError> {
        Self::build(config, Reservoir::new(config.reservoir_size))
    }

    /// An empty set whose reservoir draws are reproducible from `seed`.
    pub fn with_seed(config: &SketchConfig, seed: u64) -> Result<Self, SketchError> {
        Self::build(config, Reservoir::with_seed(config.reservoir_size, seed))
    }

    fn build(config: &SketchConfig, reservoir: Reservoir<E>) -> Result<Self, SketchError> {
        Ok(SketchSet {
            bloom: BloomFilter::new(config.bloom_capacity, config.bloom_fpr)?,
            hll: HyperLogLog::new(config.hll_precision)?,
            theta: Theta::new(config.theta_nominal_entries)?,
            cms: CountMin::new(config.cms_epsilon, config.cms_delta, config.top_k)?
                .with_conservative_update(config.cms_conservative),
            reservoir,
            events: 0,
        })
    }

    /// Routes one event: every family sees its item's precomputed hashes; the event itself is only
    /// built (cloned) if the reservoir keeps it.
    #[inline]
    pub fn update(&mut self, item: &Item<'_>, event: impl FnOnce() -> E) {
        self.bloom.insert(&item.hashes.sha);
        self.hll.update_murmur(item.hashes.murmur);
        self.theta.update_murmur(item.hashes.murmur);
        self.cms.add_item(item, 1);
        self.reservoir.offer_with(event);
        self.events += 1;
    }

    /// Routes many events at once, family by family: `items[i]` for each `i` in `which`, in
    /// order, with `event(i)` building event `i` if the reservoir keeps it. The result is exactly
    /// that of calling [`SketchSet::update`] for each in turn (every family sees the same
    /// sequence), but a tight loop per family lets the CPU overlap the cache misses of many
    /// events' Bloom and Count-Min probes instead of waiting on each event's in turn.
    pub fn update_batch(
        &mut self,
        items: &[Item<'_>],
        which: &[usize],
        event: impl Fn(usize) -> E,
    ) {
        // Prefetch a few items ahead: each insert is seven independent misses into a filter
        // larger than L2, and the loop body is too big for the CPU to look that far ahead alone.
        const AHEAD: usize = 8;
        for (n, &i) in which.iter().enumerate() {
            if let Some(&ahead) = which.get(n + AHEAD) {
                self.bloom.prefetch(&items[ahead].hashes.sha);
            }
            self.bloom.insert(&items[i].hashes.sha);
        }
        for &i in which {
            self.hll.update_murmur(items[i].hashes.murmur);
            self.theta.update_murmur(items[i].hashes.murmur);
        }
        for &i in which {
            self.cms.add_item(&items[i], 1);
        }
        for &i in which {
            self.reservoir.offer_with(|| event(i));
        }
        self.events += which.len() as u64;
    }
}

impl<E: Serialize + DeserializeOwned + Clone> Sketch for SketchSet<E> {
    const KIND: SketchKind = SketchKind::SketchSet;
    /// 2: the Count-Min inside changed layout and hashing (see `CountMin::VERSION`).
    const VERSION: u16 = 2;

    /// Merges family by family; checks every shape first so a failure leaves `self` unchanged.
    fn merge(&mut self, other: &Self) -> Result<(), SketchError> {
        let mut merged = self.clone();
        merged.bloom.merge(&other.bloom)?;
        merged.hll.merge(&other.hll)?;
        merged.theta.merge(&other.theta)?;
        merged.cms.merge(&other.cms)?;
        merged.reservoir.merge(&other.reservoir)?;
        merged.events += other.events;
        *self = merged;
        Ok(())
    }

    /// The exact number of events in the set.
    fn estimate(&self) -> Estimate {
        Estimate::exact(self.events as f64)
    }

    fn size_bytes(&self) -> usize {
        self.bloom.size_bytes()
            + self.hll.size_bytes()
            + self.theta.size_bytes()
            + self.cms.size_bytes()
            + self.reservoir.size_bytes()
    }

    fn validate(&self) -> Result<(), SketchError> {
        self.bloom.validate()?;
        self.hll.validate()?;
        self.theta.validate()?;
        self.cms.validate()?;
        self.reservoir.validate()?;
        if self.cms.total() != self.events || self.reservoir.seen() != self.events {
            return Err(SketchError::corrupt(
                SketchKind::SketchSet,
                format!(
                    "{} events but count-min total {} and reservoir length {}",
                    self.events,
                    self.cms.total(),
                    self.reservoir.seen()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::ShaWords;
    use crate::sketch::test_support::wallet;

    fn small() -> SketchConfig {
        SketchConfig {
            bloom_capacity: 10_000,
            reservoir_size: 20,
            ..SketchConfig::default()
        }
    }

    #[test]
    fn defaults_are_the_specs() {
        let c = SketchConfig::default();
        assert_eq!(
            (c.bloom_capacity, c.bloom_fpr, c.hll_precision),
            (1_000_000, 0.01, 14)
        );
        assert_eq!(
            (c.theta_nominal_entries, c.cms_epsilon, c.cms_delta),
            (4096, 0.001, 0.01)
        );
        assert_eq!((c.top_k, c.reservoir_size), (100, 1_000));
        c.validate().expect("valid");
        let bad = SketchConfig {
            hll_precision: 30,
            ..c
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn one_update_reaches_every_family_and_merges_round_trip() {
        let mut whole: SketchSet<u64> = SketchSet::with_seed(&small(), 1).expect("set");
        let mut a = SketchSet::with_seed(&small(), 2).expect("set");
        let mut b = SketchSet::with_seed(&small(), 3).expect("set");
        for i in 0..3_000u64 {
            let w = wallet(20, i % 1_000);
            let item = Item::new(w.as_bytes());
            whole.update(&item, || i);
            if i % 2 == 0 {
                a.update(&item, || i);
            } else {
                b.update(&item, || i);
            }
        }
        assert_eq!(whole.events, 3_000);
        // 1,000 distinct is past the sparse limit (768 at p = 14): a dense estimate, so within
        // 4 standard errors (1.04/128) rather than exact.
        assert!((whole.hll.estimate().value - 1_000.0).abs() < 4.0 * 1_000.0 * 1.04 / 128.0);
        assert_eq!(whole.theta.estimate(), Estimate::exact(1_000.0));
        assert!(whole
            .bloom
            .contains(&ShaWords::of(wallet(20, 5).as_bytes())));
        assert_eq!(whole.cms.count(&ShaWords::of(wallet(20, 5).as_bytes())), 3);
        assert_eq!(whole.reservoir.items().len(), 20);
        a.merge(&b).expect("merge");
        assert_eq!(a.events, 3_000);
        assert_eq!(a.hll, whole.hll);
        assert_eq!(a.theta, whole.theta);
        // Same bits set (the merged `inserted` counter counts per side, so compare the bits).
        assert_eq!(a.bloom.ones(), whole.bloom.ones());
        assert_eq!(a.cms.count(&ShaWords::of(wallet(20, 5).as_bytes())), 3);
        let back = SketchSet::<u64>::decode(&a.encode().expect("encode")).expect("decode");
        assert_eq!(back, a);
        crate::sketch::test_support::assert_damage_detected(&a);
    }

    #[test]
    fn batch_update_equals_one_by_one() {
        let wallets: Vec<String> = (0..5_000u64).map(|i| wallet(22, i % 1_700)).collect();
        let items: Vec<Item> = wallets.iter().map(|w| Item::new(w.as_bytes())).collect();
        let which: Vec<usize> = (0..items.len()).filter(|i| i % 3 != 0).collect();
        let mut one: SketchSet<usize> = SketchSet::with_seed(&small(), 9).expect("set");
        let mut many: SketchSet<usize> = SketchSet::with_seed(&small(), 9).expect("set");
        for &i in &which {
            one.update(&items[i], || i);
        }
        many.update_batch(&items, &which, |i| i);
        assert_eq!(one, many);
        assert_eq!(
            one.reservoir.items(),
            many.reservoir.items(),
            "same seed, same draws"
        );
    }

    #[test]
    fn a_failed_merge_leaves_the_set_unchanged() {
        let mut a: SketchSet<u64> = SketchSet::with_seed(&small(), 1).expect("set");
        let w = wallet(21, 0);
        a.update(&Item::new(w.as_bytes()), || 0);
        let before = a.clone();
        let other = SketchSet::with_seed(
            &SketchConfig {
                hll_precision: 12,
                ..small()
            },
            2,
        )
        .expect("set");
        assert!(a.merge(&other).is_err());
        assert_eq!(a, before);
    }
}
