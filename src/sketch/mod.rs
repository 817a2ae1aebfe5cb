//! The five sketch families and the one shape they share.
//!
//! Each family lives in its own file and answers one question:
//!
//! | question | family | file |
//! |---|---|---|
//! | have we seen X? | Bloom filter (and the all-time scalable variant) | [`bloom`] |
//! | how many distinct? | HyperLogLog | [`hll`] |
//! | how many in A and B / A not B? | Theta (KMV) | [`theta`] |
//! | how often does X occur, who is loudest? | Count-Min with Top-K | [`countmin`] |
//! | give me n random events | reservoir (Algorithm R semantics, Algorithm L speed) | [`reservoir`] |
//!
//! [`SketchSet`] bundles one of each, as the store keeps per bucket and tag value.
//!
//! This module owns the in-memory structures, their guarantees and their encoded form. It must not
//! know about buckets, tags, storage keys or queries: those belong to the store and query layers,
//! which depend on this one and never the other way round.

pub mod bloom;
pub mod bounds;
pub mod countmin;
pub mod datasketches;
pub mod hll;
pub mod packed;
pub mod reservoir;
pub mod set;
pub mod theta;
pub mod wallet;

pub use bloom::{BloomFilter, Presence, ScalableBloom};
pub use countmin::{CountMin, TopEntry};
pub use hll::HyperLogLog;
pub use reservoir::{HeapSize, Reservoir, ReservoirState};
pub use set::{SketchConfig, SketchSet};
pub use theta::Theta;

use crate::codec::{self, CodecError};
use crate::hash::Item;
use serde::{de::DeserializeOwned, Serialize};

/// The confidence level of the intervals the distinct-count families (Bloom estimate, HLL,
/// Theta) report. Count-Min's per-item interval is one-sided at `1 - delta` instead (99% by
/// default), as its own docs say.
pub const CONFIDENCE: f64 = 0.95;

/// Which family a blob holds; written into every encoded sketch so one can never be decoded as
/// another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SketchKind {
    Bloom = 1,
    ScalableBloom = 2,
    HyperLogLog = 3,
    Theta = 4,
    CountMin = 5,
    Reservoir = 6,
    SketchSet = 7,
}

impl SketchKind {
    /// The lower-case name used in answers (`method`) and error messages.
    pub fn name(self) -> &'static str {
        match self {
            SketchKind::Bloom => "bloom",
            SketchKind::ScalableBloom => "scalable-bloom",
            SketchKind::HyperLogLog => "hll",
            SketchKind::Theta => "theta",
            SketchKind::CountMin => "countmin",
            SketchKind::Reservoir => "reservoir",
            SketchKind::SketchSet => "sketch-set",
        }
    }
}

impl std::fmt::Display for SketchKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A sketch's answer to "how many?", with a 95% interval. For exact quantities (a Count-Min's
/// total, a reservoir's stream length) `lower == value == upper` and `exact` is set.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub lower: f64,
    pub upper: f64,
    pub exact: bool,
}

impl Estimate {
    /// An exactly known count.
    pub fn exact(value: f64) -> Self {
        Estimate {
            value,
            lower: value,
            upper: value,
            exact: true,
        }
    }

    /// An approximate value with its 95% interval; the interval is widened if needed so that it
    /// always contains the value.
    pub fn approximate(value: f64, lower: f64, upper: f64) -> Self {
        Estimate {
            value,
            lower: lower.min(value),
            upper: upper.max(value),
            exact: false,
        }
    }

    /// Whether `truth` lies inside the interval.
    pub fn covers(&self, truth: f64) -> bool {
        self.lower <= truth && truth <= self.upper
    }
}

/// Errors of the sketch layer: bad sizing, incompatible merges and unreadable blobs.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SketchError {
    #[error("invalid {parameter} = {value}: {reason}")]
    InvalidParameter {
        parameter: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot merge {kind} sketches of different shapes: {detail}")]
    Incompatible { kind: SketchKind, detail: String },
    #[error("{kind} blob could not be decoded: {source}")]
    Codec {
        kind: SketchKind,
        #[source]
        source: CodecError,
    },
    #[error("{kind} blob decoded to an inconsistent sketch: {detail}")]
    Corrupt { kind: SketchKind, detail: String },
}

impl SketchError {
    pub(crate) fn invalid(
        parameter: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        SketchError::InvalidParameter {
            parameter,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn incompatible(kind: SketchKind, detail: impl Into<String>) -> Self {
        SketchError::Incompatible {
            kind,
            detail: detail.into(),
        }
    }

    pub(crate) fn corrupt(kind: SketchKind, detail: impl Into<String>) -> Self {
        SketchError::Corrupt {
            kind,
            detail: detail.into(),
        }
    }
}

/// The shape every family shares: merge, estimate with bounds, size, and a checked encoded form.
pub trait Sketch: Serialize + DeserializeOwned + Sized {
    /// The family tag written into encoded blobs.
    const KIND: SketchKind;

    /// The layout version of this family's blobs, written into each and required on reading.
    /// A family bumps it when its payload or its hashing changes meaning, so an older blob is
    /// refused by name rather than read as wrong numbers.
    const VERSION: u16 = codec::FORMAT_VERSION;

    /// The oldest layout [`Sketch::decode`] still reads: a family whose newer layout only adds
    /// to the older one (a new variant, say) lowers it, and the same type reads both.
    const OLDEST_VERSION: u16 = Self::VERSION;

    /// Folds `other` into `self`, as if `self` had also seen everything `other` saw. Fails, leaving
    /// `self` unchanged, when the two were sized differently.
    fn merge(&mut self, other: &Self) -> Result<(), SketchError>;

    /// The family's headline count with its 95% interval: distinct items for Bloom, HLL and
    /// Theta; total weight for Count-Min; stream length for a reservoir.
    fn estimate(&self) -> Estimate;

    /// Bytes the sketch occupies in memory (its tables plus a fixed header), as reported to users.
    fn size_bytes(&self) -> usize;

    /// Checks the invariants a decoded value must satisfy before it may answer anything.
    fn validate(&self) -> Result<(), SketchError>;

    /// The sketch as a versioned, checksummed blob.
    fn encode(&self) -> Result<Vec<u8>, SketchError> {
        codec::encode_versioned(Self::KIND as u8, Self::VERSION, self).map_err(|source| {
            SketchError::Codec {
                kind: Self::KIND,
                source,
            }
        })
    }

    /// Reads a blob written by [`Sketch::encode`]; damaged, truncated or foreign bytes are an
    /// error, never a panic or a wrong sketch.
    fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        let (_, sketch): (u16, Self) =
            codec::decode_range(Self::KIND as u8, Self::OLDEST_VERSION, Self::VERSION, bytes)
                .map_err(|source| SketchError::Codec {
                    kind: Self::KIND,
                    source,
                })?;
        sketch.validate()?;
        Ok(sketch)
    }
}

/// A sketch fed with items (as opposed to a reservoir, which is fed with whole events).
pub trait ItemSketch: Sketch {
    /// Adds one occurrence of `item`, using the hashes computed once in [`Item::new`].
    fn update(&mut self, item: &Item<'_>);
}

/// A hint to start loading `at`'s cache line; changes nothing and may do nothing.
#[inline]
pub(crate) fn prefetch_line<T>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` never dereferences its argument (it is a hint that cannot fault),
    // and the pointer comes from a live reference anyway; SSE is part of the x86_64 baseline, so
    // the instruction always exists.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (at as *const T).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the families' tests.
    use super::Sketch;

    use super::bounds::{chi_square_quantile, Z95};
    use super::Estimate;
    pub use crate::gen::{splitmix64 as splitmix, wallet_address as wallet};

    /// How a batch of 95% intervals did against the truths they were built for.
    #[derive(Debug)]
    pub struct Calibration {
        pub trials: usize,
        /// Intervals that missed their truth.
        pub misses: usize,
        /// The mean of z², z being the error in the standard errors the interval states on the
        /// side where the truth lies: `(value − truth) / (half-width / 1.96)`. It is about 1 when
        /// the interval's width matches the estimator's real spread, 1/4 when the interval is
        /// twice too wide and 4 when it is twice too narrow, whatever the miss count says.
        pub mean_z2: f64,
        /// Mean relative error `(value − truth) / truth`, and its root mean square.
        pub mean_error: f64,
        pub rms_error: f64,
    }

    impl Calibration {
        pub fn of(results: &[(Estimate, f64)]) -> Self {
            let trials = results.len();
            let n = trials as f64;
            let mut misses = 0;
            let (mut z2, mut err, mut sq) = (0.0, 0.0, 0.0);
            for &(e, truth) in results {
                misses += usize::from(!e.covers(truth));
                let half = if truth > e.value {
                    e.upper - e.value
                } else {
                    e.value - e.lower
                };
                let miss = e.value - truth;
                z2 += if miss == 0.0 {
                    0.0
                } else {
                    (miss / (half / Z95)).powi(2)
                };
                err += miss / truth;
                sq += (miss / truth).powi(2);
            }
            Calibration {
                trials,
                misses,
                mean_z2: z2 / n,
                mean_error: err / n,
                rms_error: (sq / n).sqrt(),
            }
        }
    }

    /// `P(X ≤ x)` for `X ~ Binomial(n, p)`, summed term by term.
    pub fn binomial_cdf(n: u64, p: f64, x: u64) -> f64 {
        let mut ln_pmf = n as f64 * (1.0 - p).ln();
        let mut cdf = ln_pmf.exp();
        for i in 0..x.min(n) {
            ln_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + p.ln() - (1.0 - p).ln();
            cdf += ln_pmf.exp();
        }
        cdf.min(1.0)
    }

    /// The band `[lo, hi]` a `Binomial(n, p)` count leaves with probability at most `tail` on
    /// each side: `P(X < lo) ≤ tail` and `P(X > hi) ≤ tail`, each as tight as that allows.
    pub fn binomial_band(n: u64, p: f64, tail: f64) -> (u64, u64) {
        let mut lo = 0;
        while lo < n && binomial_cdf(n, p, lo) <= tail {
            lo += 1;
        }
        let mut hi = n;
        while hi > 0 && 1.0 - binomial_cdf(n, p, hi - 1) <= tail {
            hi -= 1;
        }
        (lo, hi)
    }

    /// Each side's tail probability in [`assert_calibrated`].
    pub const CALIBRATION_TAIL: f64 = 0.001;

    /// Asserts that a batch of independent 95% intervals is right on both sides:
    /// - the misses, `Binomial(trials, 0.05)` for a correct interval, lie in that binomial's band
    ///   with [`CALIBRATION_TAIL`] on each side (for 200 trials: 2 to 21 misses);
    /// - the mean z² (see [`Calibration`]), about `χ²(trials)/trials` for a correct interval on
    ///   a near-normal estimator, lies between that distribution's 0.1% and 99.9% quantiles
    ///   (0.72 to 1.34 for 200 trials, 0.38 to 1.99 for 30).
    ///
    /// A correct interval fails with probability at most about 4 × 0.001. One ten times too
    /// wide (mean z² 0.01, no misses), twice too wide (0.25, about none) or twice too narrow
    /// (4, a third missed) fails the z² check at every trial count used here (30 and up), and
    /// the miss band as well from 200 trials on (below about 140 trials no miss count is
    /// improbable enough to fail a wide interval on misses alone).
    pub fn assert_calibrated(what: &str, c: &Calibration) {
        match check_calibrated(what, c) {
            Ok(summary) => eprintln!("{summary}"),
            Err(why) => panic!("{why}"),
        }
    }

    /// [`assert_calibrated`]'s test as a value (the measured line, or why it failed), so that a
    /// test can show it failing an interval made wrong on purpose (see [`scaled`]).
    pub fn check_calibrated(what: &str, c: &Calibration) -> Result<String, String> {
        let trials = c.trials as u64;
        let (lo, hi) = binomial_band(trials, 0.05, CALIBRATION_TAIL);
        let dof = c.trials as f64;
        let z2_lo = chi_square_quantile(CALIBRATION_TAIL, dof) / dof;
        let z2_hi = chi_square_quantile(1.0 - CALIBRATION_TAIL, dof) / dof;
        let summary = format!(
            "{what}: {} of {trials} intervals missed (band {lo}..={hi}), mean z² {:.3} \
             (band {z2_lo:.2}..{z2_hi:.2}), mean error {:+.4}%, RMS {:.4}%",
            c.misses,
            c.mean_z2,
            c.mean_error * 100.0,
            c.rms_error * 100.0
        );
        if !(lo..=hi).contains(&(c.misses as u64)) {
            return Err(format!(
                "{what}: {} of {trials} 95% intervals missed the truth, outside {lo}..={hi}: {c:?}",
                c.misses
            ));
        }
        if !(z2_lo..=z2_hi).contains(&c.mean_z2) {
            return Err(format!(
                "{what}: mean z² {:.3} outside {z2_lo:.2}..{z2_hi:.2}: the interval is {} for \
                 the estimator's spread: {c:?}",
                c.mean_z2,
                if c.mean_z2 < z2_lo {
                    "too wide"
                } else {
                    "too narrow"
                }
            ));
        }
        Ok(summary)
    }

    /// The same estimates with every interval's distances from the value times `factor`: an
    /// interval made `factor` times too wide (or, below 1, too narrow) on purpose.
    pub fn scaled(results: &[(Estimate, f64)], factor: f64) -> Vec<(Estimate, f64)> {
        results
            .iter()
            .map(|&(e, truth)| {
                let lower = e.value - (e.value - e.lower) * factor;
                let upper = e.value + (e.upper - e.value) * factor;
                (Estimate::approximate(e.value, lower, upper), truth)
            })
            .collect()
    }

    /// Every single-byte corruption and every truncation of an encoded sketch must be rejected.
    pub fn assert_damage_detected<S: Sketch>(sketch: &S) {
        let blob = sketch.encode().expect("encode");
        S::decode(&blob).expect("clean blob decodes");
        // Flipping every bit of a large blob is slow; a stride still touches header, payload and
        // trailer, and the CRC detects any burst shorter than 32 bits wherever it lands.
        let stride = (blob.len() / 509).max(1);
        for i in (0..blob.len()).step_by(stride).chain([blob.len() - 1]) {
            let mut bad = blob.clone();
            bad[i] ^= 0x5a;
            assert!(
                S::decode(&bad).is_err(),
                "corruption at byte {i} went unnoticed"
            );
        }
        for len in (0..blob.len()).step_by(stride) {
            assert!(
                S::decode(&blob[..len]).is_err(),
                "truncation to {len} went unnoticed"
            );
        }
    }
}
