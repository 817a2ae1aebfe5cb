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

/// The most events a set's reservoir may hold. A reservoir is kept whole in memory and written
/// whole at every checkpoint; 10,000 wallet events of about 100 encoded bytes make a 1 MB blob,
/// which leaves room for extra fields below the largest value the store syncs safely. A `SAMPLE`
/// larger than this is better answered from the raw events.
pub const MAX_RESERVOIR: usize = 10_000;
/// The most heavy-hitter candidates a set may keep. Every candidate is re-estimated on every
/// merge and stored with its item in the Count-Min blob (about 100 bytes each for a wallet), so
/// 10,000 keep both under a megabyte per set; a `TOP` longer than that is not a heavy-hitter
/// question.
pub const MAX_TOP_K: usize = 10_000;
/// The Bloom false-positive rates accepted. Below 1e-9 a filter needs more than 30 probes per
/// item, and each scalable layer tightens the rate further, towards the 64 probes a stored
/// filter may have; above 1/2, "maybe" says less than a coin.
pub const BLOOM_FPR_RANGE: std::ops::RangeInclusive<f64> = 1e-9..=0.5;

impl SketchConfig {
    /// Checks every parameter: each family's own bounds (by sizing one of each, without
    /// allocating the large tables), and [`MAX_RESERVOIR`], [`MAX_TOP_K`] and
    /// [`BLOOM_FPR_RANGE`].
    pub fn validate(&self) -> Result<(), SketchError> {
        if !BLOOM_FPR_RANGE.contains(&self.bloom_fpr) {
            return Err(SketchError::invalid(
                "bloom false-positive rate",
                self.bloom_fpr,
                format!(
                    "must lie in {}..={}",
                    BLOOM_FPR_RANGE.start(),
                    BLOOM_FPR_RANGE.end()
                ),
            ));
        }
        BloomFilter::optimal_size(self.bloom_capacity, self.bloom_fpr)?;
        HyperLogLog::new(self.hll_precision)?;
        Theta::new(self.theta_nominal_entries)?;
        CountMin::dimensions(self.cms_epsilon, self.cms_delta)?;
        if self.top_k > MAX_TOP_K {
            return Err(SketchError::invalid(
                "top-k",
                self.top_k,
                format!("must be at most {MAX_TOP_K}"),
            ));
        }
        if self.reservoir_size > MAX_RESERVOIR {
            return Err(SketchError::invalid(
                "reservoir size",
                self.reservoir_size,
                format!("must be at most {MAX_RESERVOIR}"),
            ));
        }
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
    /// What [`Sketch::size_bytes`] reports for a set sized by `config` once every family is at
    /// its largest: the Bloom and Count-Min tables (allocated whole from the start), dense HLL
    /// registers, Theta's table at its 2k slots, every heavy-hitter and reservoir slot taken.
    /// It leaves out the heavy hitters' item bytes, which `size_bytes` adds (42 per wallet, so
    /// 4,200 bytes at the default top-100). An invalid `config` is an error.
    pub fn largest_size_bytes(config: &SketchConfig) -> Result<u64, SketchError> {
        use std::mem::size_of;
        config.validate()?;
        let (bits, _) = BloomFilter::optimal_size(config.bloom_capacity, config.bloom_fpr)?;
        let (width, depth) = CountMin::dimensions(config.cms_epsilon, config.cms_delta)?;
        let as_u64 = |n: usize| n as u64;
        let bloom = bits.div_ceil(8) + as_u64(size_of::<BloomFilter>());
        let hll = (1u64 << config.hll_precision) * 6 / 8 + as_u64(size_of::<HyperLogLog>());
        let theta = u64::from(config.theta_nominal_entries) * 2 * 8 + as_u64(size_of::<Theta>());
        let cms = width * u64::from(depth) * 8
            + as_u64(config.top_k).saturating_mul(as_u64(size_of::<super::TopEntry>()))
            + as_u64(size_of::<CountMin>());
        let reservoir = as_u64(config.reservoir_size).saturating_mul(as_u64(size_of::<E>()))
            + as_u64(size_of::<Reservoir<E>>());
        Ok(bloom + hll + theta + cms + reservoir)
    }

    /// An empty set sized by `config`, sampling with OS randomness.
    pub fn new(config: &SketchConfig) -> Result<Self, SketchError> {
        Self::build(config, Reservoir::new(config.reservoir_size))
    }

    /// An empty set whose reservoir draws are reproducible from `seed`.
    pub fn with_seed(config: &SketchConfig, seed: u64) -> Result<Self, SketchError> {
        Self::build(config, Reservoir::with_seed(config.reservoir_size, seed))
    }

    fn build(config: &SketchConfig, reservoir: Reservoir<E>) -> Result<Self, SketchError> {
        config.validate()?;
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

    /// Each bound refuses the first value past it, naming the parameter, and accepts the bound.
    #[test]
    fn bounds_are_refused_by_name() {
        let base = SketchConfig::default();
        let refused = |c: SketchConfig, name: &str| {
            let err = c.validate().expect_err(name).to_string();
            assert!(err.contains(name), "{err}");
        };
        refused(
            SketchConfig {
                reservoir_size: MAX_RESERVOIR + 1,
                ..base.clone()
            },
            "reservoir size",
        );
        refused(
            SketchConfig {
                top_k: MAX_TOP_K + 1,
                ..base.clone()
            },
            "top-k",
        );
        for fpr in [1e-10, 0.51, f64::NAN, 0.0] {
            refused(
                SketchConfig {
                    bloom_fpr: fpr,
                    ..base.clone()
                },
                "false-positive rate",
            );
        }
        SketchConfig {
            reservoir_size: MAX_RESERVOIR,
            top_k: MAX_TOP_K,
            bloom_fpr: 1e-9,
            bloom_capacity: 1_000,
            ..base.clone()
        }
        .validate()
        .expect("the bounds themselves");
        let bad_p = SketchConfig {
            hll_precision: 200,
            ..base
        };
        assert!(SketchSet::<u64>::largest_size_bytes(&bad_p).is_err());
    }

    /// `largest_size_bytes` is exactly what a full set reports, less the heavy hitters' item
    /// bytes: the store checks its memory budget against it.
    #[test]
    fn largest_size_is_what_a_full_set_reports() {
        let config = SketchConfig {
            bloom_capacity: 1_000,
            hll_precision: 8,
            theta_nominal_entries: 64,
            top_k: 10,
            reservoir_size: 10,
            ..SketchConfig::default()
        };
        let largest = SketchSet::<u64>::largest_size_bytes(&config).expect("size") as usize;
        let mut set: SketchSet<u64> = SketchSet::with_seed(&config, 1).expect("set");
        assert!(set.size_bytes() < largest, "an empty set is smaller");
        // 20,000 distinct wallets: HLL dense, Theta's table grown to 2k slots, every heavy-hitter
        // and reservoir slot taken.
        for i in 0..20_000u64 {
            let w = wallet(21, i);
            set.update(&Item::new(w.as_bytes()), || i);
        }
        assert_eq!(set.size_bytes(), largest + 10 * 42);
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
