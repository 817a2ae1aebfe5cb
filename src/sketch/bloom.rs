//! Bloom filters: "have we seen X?"
//!
//! **Two forms.** A filter starts in its **exact form**: the set of its items' 64-bit
//! fingerprints (SHA-256 words 0 and 1, the two words the filter's double hashing starts from).
//! It turns, once and for good, into the **filter form** (the bit array) when the fingerprints
//! would take more memory than the bit array: their open-addressed table is kept at most 3/4
//! full in a power-of-two number of slots, so it holds at most 3/4 of the largest power of two
//! of u64 slots that fits in `⌈m/8⌉` bytes ([`BloomFilter::exact_limit`]: 98,304 fingerprints
//! for 1M items at 1%, 1 MiB against the filter's 1.17 MB). A filter too small for even 16 slots
//! starts in filter form. Converting inserts every fingerprint, in ascending order, exactly as
//! its item would have been inserted (the positions depend on those two words alone), so a
//! converted filter has the same bits as one built directly, and a filter decoded from disk
//! converts exactly as the live one would.
//!
//! **Guarantee (one-sided error).** `contains` never returns `false` for an inserted item, in
//! either form. In the filter form it returns `true` for an absent item with probability about
//! the configured false-positive rate while the filter holds at most its capacity; past that,
//! the rate grows, and [`BloomFilter::predicted_fpr`] (`fill^k`) says by how much so an
//! overfull filter is visible. In the exact form `true` is wrong only if an absent item's
//! fingerprint equals one of the `n` held: probability at most `n / 2^64` (the exact form's
//! `predicted_fpr`), and the count of distinct items is exact up to two held items sharing a
//! fingerprint (probability below `n² / 2^65`).
//!
//! Construction as in the reference: `m = nextPrime(ceil(-n ln p / ln² 2))` bits,
//! `k = round(m/n · ln 2)` probes, positions from one SHA-256 digest by double hashing.
//!
//! [`ScalableBloom`] grows without a capacity guess: when a layer is full it adds one of twice the
//! capacity and half the error, so the combined rate stays below the configured one
//! (`Σ p/2 · 2^-i < p`). Its first layer starts exact like any filter; later layers are only
//! added once the stream is past the first layer's capacity, so they start as bit arrays. The
//! store's all-time `SEEN` uses it.

use super::bounds::Z95;
use super::prefetch_line;
use super::{Estimate, ItemSketch, Sketch, SketchError, SketchKind};
use crate::hash::{next_prime, Item, ShaWords, TableSize, MAX_DOUBLE_HASH_SIZE};
use serde::{Deserialize, Serialize};

/// How far above its target rate a filter may drift before it counts as overfull.
const OVERFULL_SLACK: f64 = 1.1;
/// The number of distinct 64-bit fingerprints, 2^64.
const FINGERPRINT_SPACE: f64 = 18_446_744_073_709_551_616.0;
/// The smallest fingerprint table. A filter whose bit array is smaller than this many u64s
/// (128 bytes: fewer than about 100 items at 1%) has no exact form.
const MIN_SLOTS: usize = 16;

/// What a filter says about one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Certainly never inserted (either form).
    Absent,
    /// An exact form holds the item's fingerprint: inserted, unless an absent item's 64-bit
    /// fingerprint equals one held (probability at most `n / 2^64`).
    Present,
    /// The filter form's "maybe": all `k` probed bits are set.
    Maybe,
}

/// A fixed-size Bloom filter, exact while small (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BloomFilter {
    /// Number of bits (a prime), with its fast-remainder constants.
    m: TableSize,
    /// Number of probes per item.
    k: u32,
    /// Items the filter was sized for.
    capacity: u64,
    /// The false-positive rate it was sized for, as the bit pattern of an f64 (keeps `Eq`).
    target_fpr_bits: u64,
    form: Form,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Form {
    Exact(Fingerprints),
    Bits(Bits),
}

/// The filter form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Bits {
    /// Bits that are set; kept so fill ratio and estimates cost nothing.
    ones: u64,
    /// Insertions that set at least one new bit. For one filter this is at most the number of
    /// distinct items inserted (a repeat, or an unlucky new item, sets nothing); after a merge it
    /// is the sum of both sides, so shared items count twice.
    inserted: u64,
    bits: Vec<u8>,
}

/// An item's fingerprint: the two digest words double hashing starts from, word 0 high.
#[inline]
fn fingerprint(sha: &ShaWords) -> u64 {
    u64::from(sha.a()) << 32 | u64::from(sha.b())
}

/// Digest words that give a fingerprint's item its filter positions: only words 0 and 1 are
/// read by [`TableSize::positions`].
#[inline]
fn words_of(fp: u64) -> ShaWords {
    let mut words = [0u32; ShaWords::WORDS];
    words[0] = (fp >> 32) as u32;
    words[1] = fp as u32;
    ShaWords { words }
}

/// The exact form: an open-addressed (linear probing) set of non-zero fingerprints, plus a flag
/// for the fingerprint 0 (which marks a free slot). The number of slots is a function of the
/// number held ([`Fingerprints::slots_for`]), so a decoded set has the same table, and the same
/// memory, as the live one. Stored as the sorted fingerprints.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "Vec<u64>")]
struct Fingerprints {
    slots: Vec<u64>,
    /// Non-zero fingerprints held.
    len: usize,
    zero: bool,
}

enum Probe {
    Found,
    Free(usize),
}

impl Fingerprints {
    fn new() -> Self {
        Fingerprints {
            slots: vec![0; MIN_SLOTS],
            len: 0,
            zero: false,
        }
    }

    /// Slots for `len` fingerprints: the smallest power of two (at least [`MIN_SLOTS`]) that
    /// keeps the table at most 3/4 full, where linear probing's expected probes for a miss are
    /// about 8.5.
    fn slots_for(len: usize) -> usize {
        (len.saturating_mul(4).div_ceil(3))
            .next_power_of_two()
            .max(MIN_SLOTS)
    }

    /// Fingerprints held.
    fn count(&self) -> u64 {
        self.len as u64 + u64::from(self.zero)
    }

    #[inline]
    fn probe(&self, fp: u64) -> Probe {
        let mask = self.slots.len() - 1;
        // The fingerprint is uniform, so its low bits spread the slots as well as any.
        let mut i = fp as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == fp {
                return Probe::Found;
            }
            if slot == 0 {
                return Probe::Free(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn contains(&self, fp: u64) -> bool {
        if fp == 0 {
            return self.zero;
        }
        matches!(self.probe(fp), Probe::Found)
    }

    /// Adds `fp`, known to be absent and non-zero, growing the table first if it needs to.
    fn add_new(&mut self, fp: u64, free: usize) {
        let want = Self::slots_for(self.len + 1);
        let at = if want > self.slots.len() {
            self.resize(want);
            match self.probe(fp) {
                Probe::Free(i) => i,
                Probe::Found => return,
            }
        } else {
            free
        };
        self.slots[at] = fp;
        self.len += 1;
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![0; slots]);
        for fp in old.into_iter().filter(|&fp| fp != 0) {
            if let Probe::Free(i) = self.probe(fp) {
                self.slots[i] = fp;
            }
        }
    }

    /// Every fingerprint held, ascending.
    fn sorted(&self) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.count() as usize);
        if self.zero {
            v.push(0);
        }
        v.extend(self.slots.iter().copied().filter(|&fp| fp != 0));
        v.sort_unstable();
        v
    }

    /// Builds the set of `sorted` (ascending, distinct), with the table it would have grown to.
    fn from_sorted(sorted: &[u64]) -> Self {
        let zero = sorted.first() == Some(&0);
        let len = sorted.len() - usize::from(zero);
        let mut out = Fingerprints {
            slots: vec![0; Self::slots_for(len)],
            len,
            zero,
        };
        for &fp in sorted.iter().filter(|&&fp| fp != 0) {
            if let Probe::Free(i) = out.probe(fp) {
                out.slots[i] = fp;
            }
        }
        out
    }

    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }

    fn prefetch(&self, fp: u64) {
        let i = fp as usize & (self.slots.len() - 1);
        prefetch_line(&self.slots[i]);
    }
}

impl PartialEq for Fingerprints {
    /// The same fingerprints, whatever the slot layout.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self.zero == other.zero
            && self.slots.iter().all(|&fp| fp == 0 || other.contains(fp))
    }
}

impl Eq for Fingerprints {}

/// As the sorted fingerprints, taken from the table in place: serde's `into` would clone the
/// whole table (free slots too) first, for every exact filter of every checkpoint.
impl Serialize for Fingerprints {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.sorted().serialize(s)
    }
}

impl TryFrom<Vec<u64>> for Fingerprints {
    type Error = String;

    fn try_from(sorted: Vec<u64>) -> Result<Self, String> {
        if sorted.windows(2).any(|w| w[0] >= w[1]) {
            return Err("fingerprints unsorted or repeated".into());
        }
        Ok(Fingerprints::from_sorted(&sorted))
    }
}

impl Bits {
    fn new(m: &TableSize) -> Result<Self, SketchError> {
        let bytes = usize::try_from(m.get().div_ceil(8))
            .map_err(|_| SketchError::invalid("bloom bits", m.get(), "bit array exceeds memory"))?;
        Ok(Bits {
            ones: 0,
            inserted: 0,
            bits: vec![0; bytes],
        })
    }

    #[inline]
    fn insert(&mut self, m: &TableSize, k: u32, sha: &ShaWords) -> bool {
        // Branch-free: at half fill each probed bit is a coin flip, and a branch on it would be
        // mispredicted half the time, serialising the k cache misses instead of overlapping them
        // (it was 90% of a sketch-set update in the profile).
        let mut newly_set = 0u64;
        for p in m.positions(sha).take(k as usize) {
            let byte = &mut self.bits[(p >> 3) as usize];
            let mask = 1u8 << (p & 7);
            newly_set += u64::from(*byte & mask == 0);
            *byte |= mask;
        }
        self.ones += newly_set;
        let changed = newly_set > 0;
        self.inserted += u64::from(changed);
        changed
    }

    #[inline]
    fn contains(&self, m: &TableSize, k: u32, sha: &ShaWords) -> bool {
        // All k probes, branch-free, for the same reason as `insert`: overlapping the misses
        // beats stopping early at the first zero bit.
        m.positions(sha).take(k as usize).fold(true, |all, p| {
            all & (self.bits[(p >> 3) as usize] & (1u8 << (p & 7)) != 0)
        })
    }

    #[inline]
    fn contains_early_exit(&self, m: &TableSize, k: u32, sha: &ShaWords) -> bool {
        m.positions(sha)
            .take(k as usize)
            .all(|p| self.bits[(p >> 3) as usize] & (1u8 << (p & 7)) != 0)
    }
}

impl BloomFilter {
    /// A filter for `capacity` items at false-positive rate `fpr`, starting in its exact form
    /// (unless it is too small to have one).
    pub fn new(capacity: u64, fpr: f64) -> Result<Self, SketchError> {
        // The bit array is not allocated for a filter that starts exact: a store makes one
        // for every new set, and zeroing a megabyte each time only to drop it was 5% of the
        // ingest's writer.
        Self::with_form(capacity, fpr, true)
    }

    /// A filter for `capacity` items at rate `fpr` that starts in its filter form (the bit
    /// array, allocated whole).
    pub fn new_filter(capacity: u64, fpr: f64) -> Result<Self, SketchError> {
        Self::with_form(capacity, fpr, false)
    }

    /// The filter for `capacity` and `fpr`, in its exact form if `exact` asks for it and the
    /// size has one, else in its filter form.
    fn with_form(capacity: u64, fpr: f64, exact: bool) -> Result<Self, SketchError> {
        let (bits, k) = Self::optimal_size(capacity, fpr)?;
        let m = TableSize::new(bits).ok_or_else(|| {
            SketchError::invalid("capacity", capacity, "bit array exceeds 2^32 bits")
        })?;
        let form = if exact && Self::exact_limit_for_bits(m.get()) > 0 {
            Form::Exact(Fingerprints::new())
        } else {
            Form::Bits(Bits::new(&m).map_err(|_| {
                SketchError::invalid("capacity", capacity, "bit array exceeds memory")
            })?)
        };
        Ok(BloomFilter {
            m,
            k,
            capacity,
            target_fpr_bits: fpr.to_bits(),
            form,
        })
    }

    /// `(m, k)` for a capacity and rate: the reference's sizing, checked against what 32-bit
    /// double hashing can address.
    pub fn optimal_size(capacity: u64, fpr: f64) -> Result<(u64, u32), SketchError> {
        /// Capacity, the rate's bits, and their `(m, k)`.
        type Sizing = Option<(u64, u64, (u64, u32))>;
        thread_local! {
            /// The last sizing found: every new set of a store asks for the same one, and the
            /// prime search behind it was 0.7% of an import that made a set for each of 2,000
            /// tag values.
            static LAST: std::cell::Cell<Sizing> = const { std::cell::Cell::new(None) };
        }
        let asked = (capacity, fpr.to_bits());
        if let Some((c, f, size)) = LAST.with(std::cell::Cell::get) {
            if (c, f) == asked {
                return Ok(size);
            }
        }
        let size = Self::find_size(capacity, fpr)?;
        LAST.with(|last| last.set(Some((asked.0, asked.1, size))));
        Ok(size)
    }

    fn find_size(capacity: u64, fpr: f64) -> Result<(u64, u32), SketchError> {
        if capacity == 0 {
            return Err(SketchError::invalid(
                "capacity",
                capacity,
                "must be at least 1",
            ));
        }
        if !(fpr > 0.0 && fpr < 1.0) {
            return Err(SketchError::invalid(
                "false-positive rate",
                fpr,
                "must lie strictly between 0 and 1",
            ));
        }
        let ln2 = std::f64::consts::LN_2;
        let optimal = (-(capacity as f64) * fpr.ln() / (ln2 * ln2)).ceil();
        if optimal >= MAX_DOUBLE_HASH_SIZE as f64 {
            return Err(SketchError::invalid(
                "capacity",
                capacity,
                format!("needs {optimal} bits at this rate; double hashing addresses at most 2^32"),
            ));
        }
        let m = next_prime((optimal as u64).max(2));
        if m > MAX_DOUBLE_HASH_SIZE {
            return Err(SketchError::invalid(
                "capacity",
                capacity,
                "bit array exceeds 2^32 bits",
            ));
        }
        let k = ((m as f64 / capacity as f64) * ln2).round().max(1.0) as u32;
        Ok((m, k))
    }

    /// The most fingerprints the exact form of a filter of `m` bits holds: 3/4 of the largest
    /// power of two of u64 slots within the bit array's `⌈m/8⌉` bytes, or 0 (no exact form) if
    /// that is under [`MIN_SLOTS`].
    pub fn exact_limit_for_bits(m: u64) -> u64 {
        let slots = m.div_ceil(8) / 8;
        if slots < MIN_SLOTS as u64 {
            return 0;
        }
        let pow2 = 1u64 << (63 - slots.leading_zeros());
        pow2 / 4 * 3
    }

    /// The most fingerprints this filter's exact form holds (see
    /// [`BloomFilter::exact_limit_for_bits`]); one more distinct item converts it.
    pub fn exact_limit(&self) -> u64 {
        Self::exact_limit_for_bits(self.m.get())
    }

    /// Whether the filter is still in its exact form.
    pub fn is_exact(&self) -> bool {
        matches!(self.form, Form::Exact(_))
    }

    /// Bits in the array (of the filter form; the exact form converts to this size).
    pub fn bit_count(&self) -> u64 {
        self.m.get()
    }

    /// Probes per item.
    pub fn hash_count(&self) -> u32 {
        self.k
    }

    /// Items the filter was sized for.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The false-positive rate it was sized for.
    pub fn target_fpr(&self) -> f64 {
        f64::from_bits(self.target_fpr_bits)
    }

    /// Bytes of the filter form's bit array (`ceil(m / 8)`), whichever form the filter is in:
    /// the most its memory grows to.
    pub fn bit_array_bytes(&self) -> usize {
        self.m.get().div_ceil(8) as usize
    }

    /// Bits set so far (0 in the exact form, which has no bits).
    pub fn ones(&self) -> u64 {
        match &self.form {
            Form::Bits(b) => b.ones,
            Form::Exact(_) => 0,
        }
    }

    /// Fingerprints held in the exact form; `None` in the filter form.
    pub fn fingerprints(&self) -> Option<u64> {
        match &self.form {
            Form::Exact(f) => Some(f.count()),
            Form::Bits(_) => None,
        }
    }

    /// Insertions that changed the filter: in the exact form, the distinct items held; in the
    /// filter form, insertions that set a bit (a distinct item can, rarely, set none).
    pub fn inserted(&self) -> u64 {
        match &self.form {
            Form::Bits(b) => b.inserted,
            Form::Exact(f) => f.count(),
        }
    }

    /// Fraction of bits set (0 in the exact form).
    pub fn fill_ratio(&self) -> f64 {
        self.ones() as f64 / self.m.get() as f64
    }

    /// The chance that an absent item is reported present. Filter form: all `k` probes hit set
    /// bits, `fill^k`. Exact form: its fingerprint equals one of the `n` held, at most
    /// `n / 2^64`.
    pub fn predicted_fpr(&self) -> f64 {
        match &self.form {
            Form::Bits(_) => self.fill_ratio().powi(self.k as i32),
            Form::Exact(f) => f.count() as f64 / FINGERPRINT_SPACE,
        }
    }

    /// Whether the filter now answers "maybe" markedly more often than it was sized for: more
    /// than 10% above the target rate. The slack is needed because rounding `k` to an integer
    /// puts the rate at exactly capacity slightly above target (1.004% for 1M at 1%); 10% above
    /// is reached about 2% past capacity. Never in the exact form.
    pub fn is_overfull(&self) -> bool {
        !self.is_exact() && self.predicted_fpr() > OVERFULL_SLACK * self.target_fpr()
    }

    /// Adds an item; returns whether the filter changed (false means "maybe already present",
    /// and in the exact form "already present").
    #[inline]
    pub fn insert(&mut self, sha: &ShaWords) -> bool {
        let limit = self.exact_limit();
        match &mut self.form {
            Form::Bits(b) => b.insert(&self.m, self.k, sha),
            Form::Exact(f) => {
                let fp = fingerprint(sha);
                if fp == 0 {
                    if f.zero {
                        return false;
                    }
                    if f.count() < limit {
                        f.zero = true;
                        return true;
                    }
                } else {
                    match f.probe(fp) {
                        Probe::Found => return false,
                        Probe::Free(i) if f.count() < limit => {
                            f.add_new(fp, i);
                            return true;
                        }
                        Probe::Free(_) => {}
                    }
                }
                // One more than the exact form holds: the bit array is now the smaller.
                self.convert();
                match &mut self.form {
                    Form::Bits(b) => b.insert(&self.m, self.k, sha),
                    Form::Exact(_) => false,
                }
            }
        }
    }

    /// Turns the exact form into the filter form, inserting the fingerprints in ascending order
    /// (so the result, `inserted` included, depends only on which fingerprints were held).
    fn convert(&mut self) {
        if let Form::Exact(f) = &self.form {
            let mut bits = match Bits::new(&self.m) {
                Ok(b) => b,
                // `new` sized this array already; it cannot fail now.
                Err(_) => return,
            };
            for fp in f.sorted() {
                bits.insert(&self.m, self.k, &words_of(fp));
            }
            self.form = Form::Bits(bits);
        }
    }

    /// Asks the CPU to start loading the cache lines an item's probes will touch, so a caller
    /// working through many items can overlap their misses (see `SketchSet::update_batch`).
    /// A hint only: it changes nothing and may do nothing.
    #[inline]
    pub fn prefetch(&self, sha: &ShaWords) {
        self.prefetch_probes(sha, self.k as usize);
    }

    /// [`BloomFilter::prefetch`] for the first `n` probes only (the exact form has one line).
    #[inline]
    pub fn prefetch_probes(&self, sha: &ShaWords, n: usize) {
        match &self.form {
            Form::Bits(b) => {
                for p in self.m.positions(sha).take(n.min(self.k as usize)) {
                    prefetch_line(&b.bits[(p >> 3) as usize]);
                }
            }
            Form::Exact(f) => f.prefetch(fingerprint(sha)),
        }
    }

    /// [`BloomFilter::contains`], stopping at the first clear bit: for a filter that is mostly
    /// asked about items it does not hold, the expected number of probes is about 1/(1 - fill)
    /// instead of k, which wins once the probes' cache lines are not all prefetched.
    #[inline]
    pub fn contains_early_exit(&self, sha: &ShaWords) -> bool {
        match &self.form {
            Form::Bits(b) => b.contains_early_exit(&self.m, self.k, sha),
            Form::Exact(f) => f.contains(fingerprint(sha)),
        }
    }

    /// `false`: certainly never inserted. `true`: present (exact form, up to a fingerprint
    /// collision) or maybe (filter form; see [`BloomFilter::predicted_fpr`]).
    #[inline]
    pub fn contains(&self, sha: &ShaWords) -> bool {
        match &self.form {
            Form::Bits(b) => b.contains(&self.m, self.k, sha),
            Form::Exact(f) => f.contains(fingerprint(sha)),
        }
    }

    /// What the filter says about an item, naming which form said it.
    pub fn lookup(&self, sha: &ShaWords) -> Presence {
        match (self.contains(sha), self.is_exact()) {
            (false, _) => Presence::Absent,
            (true, true) => Presence::Present,
            (true, false) => Presence::Maybe,
        }
    }

    /// The distinct-item count. Exact form: the fingerprints held. Filter form: the estimate
    /// from the set-bit count, `n ≈ -(m/k) ln(1 - X/m)`, with a 95% interval from the variance
    /// of the set-bit count (Swamidass & Baldi); meaningless once the filter is saturated (every
    /// bit set): the upper bound is then infinite.
    pub fn estimate_count(&self) -> Estimate {
        let ones = match &self.form {
            Form::Exact(f) => return Estimate::exact(f.count() as f64),
            Form::Bits(b) => b.ones,
        };
        let m = self.m.get() as f64;
        let k = f64::from(self.k);
        let x = ones as f64;
        if ones == 0 {
            return Estimate::exact(0.0);
        }
        let n_of = |x: f64| -(m / k) * (1.0 - x / m).ln();
        if ones >= self.m.get() {
            return Estimate::approximate(n_of(m - 1.0), n_of(m - 1.0), f64::INFINITY);
        }
        let n = n_of(x);
        // Var(X) = m·q·(1 - (1 + kn/m)·q) with q = e^{-kn/m}, the unset probability per bit.
        let q = (-k * n / m).exp();
        let var = (m * q * (1.0 - (1.0 + k * n / m) * q)).max(0.0);
        let sd = var.sqrt();
        let lo_x = (x - Z95 * sd).max(0.0);
        let hi_x = x + Z95 * sd;
        let upper = if hi_x >= m { f64::INFINITY } else { n_of(hi_x) };
        Estimate::approximate(n, n_of(lo_x), upper)
    }

    fn same_shape(&self, other: &Self) -> Result<(), SketchError> {
        if self.m != other.m || self.k != other.k {
            return Err(SketchError::incompatible(
                SketchKind::Bloom,
                format!(
                    "m={} k={} vs m={} k={}",
                    self.m.get(),
                    self.k,
                    other.m.get(),
                    other.k
                ),
            ));
        }
        Ok(())
    }
}

impl Sketch for BloomFilter {
    const KIND: SketchKind = SketchKind::Bloom;
    /// 2: a filter is either its exact form (sorted fingerprints) or its bit array.
    const VERSION: u16 = 2;

    /// The filter of the union. Two exact forms give the exact form of the union while it fits
    /// ([`BloomFilter::exact_limit`]), else the filter form built from it; with a filter form on
    /// either side the result is the bitwise OR, the exact side's fingerprints inserted as its
    /// items would have been. Membership stays one-sided; the rate follows the fill.
    fn merge(&mut self, other: &Self) -> Result<(), SketchError> {
        self.same_shape(other)?;
        let limit = self.exact_limit();
        match (&mut self.form, &other.form) {
            (Form::Exact(mine), Form::Exact(theirs)) => {
                let mut union = mine.sorted();
                union.extend(theirs.sorted());
                union.sort_unstable();
                union.dedup();
                *mine = Fingerprints::from_sorted(&union);
                if union.len() as u64 > limit {
                    self.convert();
                }
            }
            (Form::Bits(mine), Form::Exact(theirs)) => {
                for fp in theirs.sorted() {
                    mine.insert(&self.m, self.k, &words_of(fp));
                }
            }
            (Form::Exact(_), Form::Bits(theirs)) => {
                self.convert();
                if let Form::Bits(mine) = &mut self.form {
                    or_into(mine, theirs);
                }
            }
            (Form::Bits(mine), Form::Bits(theirs)) => or_into(mine, theirs),
        }
        Ok(())
    }

    fn estimate(&self) -> Estimate {
        self.estimate_count()
    }

    /// Heap bytes held (the fingerprint table, or the bit array) plus the fixed header.
    fn size_bytes(&self) -> usize {
        let heap = match &self.form {
            Form::Exact(f) => f.heap_bytes(),
            Form::Bits(b) => b.bits.capacity(),
        };
        heap + std::mem::size_of::<Self>()
    }

    fn validate(&self) -> Result<(), SketchError> {
        let kind = SketchKind::Bloom;
        let bits = self.m.get();
        if TableSize::new(bits) != Some(self.m) || self.k == 0 || self.k > 64 {
            return Err(SketchError::corrupt(kind, format!("m={bits} k={}", self.k)));
        }
        let fpr = self.target_fpr();
        if !(fpr > 0.0 && fpr < 1.0) {
            return Err(SketchError::corrupt(kind, format!("target rate {fpr}")));
        }
        match &self.form {
            Form::Bits(b) => {
                if b.bits.len() as u64 != bits.div_ceil(8) {
                    return Err(SketchError::corrupt(
                        kind,
                        format!("{} bytes for m={bits}", b.bits.len()),
                    ));
                }
                let ones: u64 = b.bits.iter().map(|x| u64::from(x.count_ones())).sum();
                if ones != b.ones {
                    return Err(SketchError::corrupt(
                        kind,
                        format!("{ones} bits set, header says {}", b.ones),
                    ));
                }
            }
            Form::Exact(f) => {
                // A live filter converts past its limit, so more fingerprints than that is not a
                // filter this build wrote.
                if f.count() > self.exact_limit() {
                    return Err(SketchError::corrupt(
                        kind,
                        format!(
                            "{} fingerprints, more than the {} the exact form of m={bits} holds",
                            f.count(),
                            self.exact_limit()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Bitwise OR of `theirs` into `mine`, recounting the set bits.
fn or_into(mine: &mut Bits, theirs: &Bits) {
    let mut ones = 0u64;
    for (a, b) in mine.bits.iter_mut().zip(&theirs.bits) {
        *a |= *b;
        ones += u64::from(a.count_ones());
    }
    mine.ones = ones;
    mine.inserted += theirs.inserted;
}

impl ItemSketch for BloomFilter {
    fn update(&mut self, item: &Item<'_>) {
        self.insert(&item.hashes.sha);
    }
}

/// How much each new layer tightens the error (the reference's "half the error ratio").
const TIGHTENING: f64 = 0.5;
/// How much each new layer grows the capacity.
const GROWTH: u64 = 2;

/// A Bloom filter that grows: a chain of layers, each twice the capacity of the last at half its
/// rate. The first layer gets `p · (1 - 1/2)`, so the rates sum to less than `p` however many
/// layers are added. If a layer would exceed the 2^32-bit addressing limit, the last layer keeps
/// filling and [`ScalableBloom::predicted_fpr`] reports the degradation. The first layer starts
/// in its exact form; the layers added later start as bit arrays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalableBloom {
    initial_capacity: u64,
    target_fpr_bits: u64,
    layers: Vec<BloomFilter>,
}

impl ScalableBloom {
    /// A scalable filter starting at `initial_capacity` items whose combined rate stays at or
    /// below `fpr`.
    pub fn new(initial_capacity: u64, fpr: f64) -> Result<Self, SketchError> {
        let first = BloomFilter::new(initial_capacity, fpr * (1.0 - TIGHTENING))?;
        Ok(ScalableBloom {
            initial_capacity,
            target_fpr_bits: fpr.to_bits(),
            layers: vec![first],
        })
    }

    /// The combined rate it was configured for.
    pub fn target_fpr(&self) -> f64 {
        f64::from_bits(self.target_fpr_bits)
    }

    /// The layers, oldest first.
    pub fn layers(&self) -> &[BloomFilter] {
        &self.layers
    }

    /// Whether every layer is in its exact form (then there is one layer).
    pub fn is_exact(&self) -> bool {
        self.layers.iter().all(BloomFilter::is_exact)
    }

    /// Adds an item unless it (maybe) is present already; returns whether it was added. Skipping
    /// present items keeps each layer's count of distinct items honest, which decides when a new
    /// layer is needed.
    pub fn insert(&mut self, sha: &ShaWords) -> bool {
        let (last, older) = match self.layers.split_last_mut() {
            Some(split) => split,
            None => return false,
        };
        // Older layers are full, so a new item usually fails on the first probe or two: stop
        // there (see `prefetch`).
        if older.iter().any(|l| l.contains_early_exit(sha)) {
            return false;
        }
        // While the last layer has room, inserting into it directly is "contains, else add" in
        // one pass: it changes nothing exactly when every probed bit is already set (or the
        // exact form holds the fingerprint). The exact form converts long before its capacity.
        if last.inserted() < last.capacity() {
            return last.insert(sha);
        }
        if last.contains(sha) {
            return false;
        }
        self.add_layer();
        match self.layers.last_mut() {
            Some(layer) => layer.insert(sha),
            None => false,
        }
    }

    fn add_layer(&mut self) {
        let i = self.layers.len() as i32;
        let capacity = self
            .initial_capacity
            .saturating_mul(GROWTH.saturating_pow(i as u32));
        let fpr = self.target_fpr() * (1.0 - TIGHTENING) * TIGHTENING.powi(i);
        // A layer too big to address is not added; the last one keeps filling and reports it.
        if let Ok(layer) = BloomFilter::new_filter(capacity, fpr) {
            self.layers.push(layer);
        }
    }

    /// Starts loading the cache lines an insert will touch (a hint; see
    /// [`BloomFilter::prefetch`]): every probe of the newest layer, and the first two of each
    /// older one, where an item not yet held usually finds a clear bit. Prefetching all probes
    /// of all layers (about 35 lines an item with four layers) kept the memory system busy with
    /// lines the early exit never reads: 10M distinct inserts from a 1M first layer took a
    /// median 198 ns each that way and 174 ns this way (six interleaved runs on the 2-core VM).
    pub fn prefetch(&self, sha: &ShaWords) {
        if let Some((newest, older)) = self.layers.split_last() {
            for layer in older {
                layer.prefetch_probes(sha, 2);
            }
            newest.prefetch(sha);
        }
    }

    /// `false`: certainly never inserted. `true`: present or maybe (see
    /// [`ScalableBloom::lookup`]).
    pub fn contains(&self, sha: &ShaWords) -> bool {
        self.layers.iter().any(|l| l.contains(sha))
    }

    /// What the filter says about an item: present if an exact layer holds its fingerprint,
    /// maybe if only a bit-array layer says so, else absent.
    pub fn lookup(&self, sha: &ShaWords) -> Presence {
        let mut maybe = false;
        for layer in &self.layers {
            match layer.lookup(sha) {
                Presence::Present => return Presence::Present,
                Presence::Maybe => maybe = true,
                Presence::Absent => {}
            }
        }
        if maybe {
            Presence::Maybe
        } else {
            Presence::Absent
        }
    }

    /// The combined rate now: an absent item is a false positive if any layer says maybe,
    /// `1 - Π(1 - fpr_i)`.
    pub fn predicted_fpr(&self) -> f64 {
        // 1 − Π(1 − p_i) through logarithms: an exact layer's p (n / 2^64) is far below f64's
        // step at 1, and the plain product would round it to 0.
        -self
            .layers
            .iter()
            .map(|l| (-l.predicted_fpr()).ln_1p())
            .sum::<f64>()
            .exp_m1()
    }
}

impl Sketch for ScalableBloom {
    const KIND: SketchKind = SketchKind::ScalableBloom;
    /// 2: its layers are `BloomFilter` version 2 (exact or filter form).
    const VERSION: u16 = 2;

    /// Layer-wise merge (see [`BloomFilter`]'s); layers only the other has are copied. The
    /// result answers membership for the union with no false negatives; its rate is whatever
    /// the layers' fill now gives.
    fn merge(&mut self, other: &Self) -> Result<(), SketchError> {
        if self.initial_capacity != other.initial_capacity
            || self.target_fpr_bits != other.target_fpr_bits
        {
            return Err(SketchError::incompatible(
                SketchKind::ScalableBloom,
                "different initial capacity or rate",
            ));
        }
        for (mine, theirs) in self.layers.iter().zip(&other.layers) {
            mine.same_shape(theirs)?;
        }
        for (i, theirs) in other.layers.iter().enumerate() {
            match self.layers.get_mut(i) {
                Some(mine) => mine.merge(theirs)?,
                None => self.layers.push(theirs.clone()),
            }
        }
        Ok(())
    }

    /// The sum of the layers' estimates. Each item went into one layer only, and the layers'
    /// set-bit counts vary independently, so the half-widths add in quadrature: adding the ends
    /// (as this did before) made the interval up to √layers times too wide (twice, with four
    /// similar layers).
    fn estimate(&self) -> Estimate {
        let (mut value, mut below, mut above, mut exact) = (0.0, 0.0, 0.0, true);
        for l in &self.layers {
            let e = l.estimate_count();
            value += e.value;
            below += (e.value - e.lower).powi(2);
            above += (e.upper - e.value).powi(2);
            exact &= e.exact;
        }
        if exact {
            return Estimate::exact(value);
        }
        Estimate::approximate(value, value - below.sqrt(), value + above.sqrt())
    }

    fn size_bytes(&self) -> usize {
        self.layers.iter().map(Sketch::size_bytes).sum::<usize>() + std::mem::size_of::<Self>()
    }

    fn validate(&self) -> Result<(), SketchError> {
        if self.layers.is_empty() || self.initial_capacity == 0 {
            return Err(SketchError::corrupt(SketchKind::ScalableBloom, "no layers"));
        }
        for layer in &self.layers {
            layer.validate()?;
        }
        Ok(())
    }
}

impl ItemSketch for ScalableBloom {
    fn update(&mut self, item: &Item<'_>) {
        self.insert(&item.hashes.sha);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sketch::test_support::{
        assert_calibrated, assert_damage_detected, wallet, Calibration,
    };
    use proptest::prelude::*;

    fn h(s: &str) -> ShaWords {
        ShaWords::of(s.as_bytes())
    }

    fn bits_of(f: &BloomFilter) -> &[u8] {
        match &f.form {
            Form::Bits(b) => &b.bits,
            Form::Exact(_) => panic!("expected the filter form"),
        }
    }

    /// 10,000 items at 1%: m = 95,851 bits, 11,982 bytes, so 1,497 u64s fit and the largest
    /// power of two is 1,024 slots: the exact form holds 768 fingerprints.
    const SMALL: u64 = 10_000;
    const SMALL_LIMIT: u64 = 768;

    #[test]
    fn a_remembered_sizing_is_only_ever_its_own() {
        let asks = [
            (1_000u64, 0.01),
            (1_000, 0.02),
            (2_000, 0.01),
            (1_000, 0.01),
            (7, 0.5),
        ];
        for _ in 0..2 {
            for (capacity, fpr) in asks {
                assert_eq!(
                    BloomFilter::optimal_size(capacity, fpr).expect("valid"),
                    BloomFilter::find_size(capacity, fpr).expect("valid"),
                    "{capacity} at {fpr}"
                );
            }
        }
        assert!(BloomFilter::optimal_size(0, 0.01).is_err());
        assert!(BloomFilter::optimal_size(1_000, 1.0).is_err());
    }

    #[test]
    fn sizing_matches_the_reference() {
        let f = BloomFilter::new(1_000_000, 0.01).expect("size");
        assert_eq!(f.bit_count(), 9_585_061);
        assert_eq!(f.hash_count(), 7);
        assert_eq!(f.bit_array_bytes(), 1_198_133);
    }

    #[test]
    fn rejects_bad_sizing_with_the_offending_value() {
        assert!(matches!(
            BloomFilter::new(0, 0.01),
            Err(SketchError::InvalidParameter {
                parameter: "capacity",
                ..
            })
        ));
        for fpr in [0.0, 1.0, -0.5, f64::NAN] {
            assert!(BloomFilter::new(10, fpr).is_err(), "fpr {fpr}");
        }
        let err = BloomFilter::new(10_000_000_000, 0.0001).expect_err("too big");
        assert!(err.to_string().contains("2^32"), "{err}");
    }

    /// The expected fraction of bits set after `n` distinct items, each setting `k` distinct
    /// uniform bits of `m` (a prime `m` makes an item's probes distinct): `1 − (1 − k/m)^n`; and
    /// the standard deviation of that fraction, `sqrt(Var X)/m` with Swamidass and Baldi's
    /// `Var X = m·q·(1 − (1 + kn/m)·q)`, `q = e^(−kn/m)` (the formula the estimate uses).
    fn expected_fill(f: &BloomFilter, n: f64) -> (f64, f64) {
        let (m, k) = (f.bit_count() as f64, f64::from(f.hash_count()));
        let fill = 1.0 - (n * (1.0 - k / m).ln()).exp();
        let q = (-k * n / m).exp();
        let var = m * q * (1.0 - (1.0 + k * n / m) * q);
        (fill, var.sqrt() / m)
    }

    /// The reference's experiment: 1M wallets in, 5 disjoint probe sets of 1M absent wallets.
    ///
    /// - Each probe set's false-positive rate is a proportion over 1M independent absent items,
    ///   each a false positive with the filter's own probability `fill^k` (`predicted_fpr`):
    ///   sd sqrt(p(1 − p)/1e6) ≈ 0.01 points. The band is ±5 sd around `predicted_fpr`
    ///   (P(|Z| > 5) = 6e-7 per set): a hashing defect that raised the rate by 10% (0.1 points)
    ///   fails, as would the old fixed band [0.9%, 1.1%] only at twice that.
    /// - The fill and the predicted rate against their expectations at n = 1M: within 5 sd of
    ///   the fill (sd ≈ 9e-5, the variance formula above), and of `fill^k` (sd k·fill^(k−1)
    ///   times that). The reference's 51.8% and 1% are these expectations, rounded.
    /// - The count estimate (reference: 999,691) within 5 of its own standard errors
    ///   (≈ 260 items) of 1M, and its interval covering 1M.
    #[test]
    fn one_million_wallets_fpr_and_count_match_the_reference() {
        let mut f = BloomFilter::new(1_000_000, 0.01).expect("size");
        for i in 0..1_000_000 {
            f.insert(&h(&wallet(1, i)));
        }
        for i in 0..1_000_000 {
            assert!(f.contains(&h(&wallet(1, i))), "false negative for item {i}");
        }
        let p = f.predicted_fpr();
        let sd = (p * (1.0 - p) / 1e6).sqrt();
        for probe in 0..5u64 {
            let hits = (0..1_000_000)
                .filter(|&i| f.contains(&h(&wallet(100 + probe, i))))
                .count();
            let rate = hits as f64 / 1e6;
            eprintln!(
                "bloom 1M/1%: probe set {probe} false-positive rate {:.3}% (predicted {:.4}%)",
                rate * 100.0,
                p * 100.0
            );
            assert!(
                (rate - p).abs() <= 5.0 * sd,
                "probe set {probe}: rate {rate}, predicted {p} ± {}",
                5.0 * sd
            );
        }
        let (fill, fill_sd) = expected_fill(&f, 1e6);
        assert!(
            (f.fill_ratio() - fill).abs() <= 5.0 * fill_sd,
            "fill {} against {fill} ± {}",
            f.fill_ratio(),
            5.0 * fill_sd
        );
        let k = f.hash_count() as i32;
        let rate_sd = f64::from(k) * fill.powi(k - 1) * fill_sd;
        assert!(
            (p - fill.powi(k)).abs() <= 5.0 * rate_sd,
            "predicted rate {p} against {} ± {}",
            fill.powi(k),
            5.0 * rate_sd
        );
        // Sized for 1%: the expectation at capacity is 1.0034% (k rounded to 7), and 5 sd of
        // the predicted rate (6e-5) on top stays within 0.01 points of 1%.
        assert!((p - 0.01).abs() < 0.0001, "sized for 1%: {p}");
        let est = f.estimate_count();
        let est_sd = (est.upper - est.lower) / (2.0 * Z95);
        eprintln!(
            "bloom 1M/1%: {} bits set ({:.2}%), estimate {:.0} (sd {est_sd:.0})",
            f.ones(),
            f.fill_ratio() * 100.0,
            est.value
        );
        assert!(
            (est.value - 1e6).abs() <= 5.0 * est_sd,
            "estimate {} (sd {est_sd})",
            est.value
        );
        assert!(est.covers(1e6), "{est:?}");
        assert!(!f.is_overfull());
        for i in 1_000_000..1_050_000 {
            f.insert(&h(&wallet(1, i)));
        }
        assert!(
            f.is_overfull(),
            "5% past capacity: predicted {}",
            f.predicted_fpr()
        );
    }

    /// The count estimate's interval is a 95% interval, neither more nor less: 200 filters of
    /// capacity 10,000 at 1% (m = 95,857, k = 7), each holding n distinct wallets, at half
    /// capacity and at capacity. Measured: misses in 2..=21 (Binomial(200, 0.05)) and mean z²
    /// in 0.72..1.34 (χ²(200)/200) by `assert_calibrated`, each side failing a correct filter
    /// with probability about 1e-3; and the mean relative error within 4 standard errors of
    /// a 200-filter mean (RMS/√200 ≈ 0.02%) of 0, so a 0.1% bias fails. An interval ten times
    /// or twice too wide, or twice too narrow, fails.
    #[test]
    fn count_interval_covers_95_percent_neither_more_nor_less() {
        for n in [5_000u64, 10_000] {
            let results: Vec<(Estimate, f64)> = (0..200u64)
                .map(|s| {
                    let mut f = BloomFilter::new(10_000, 0.01).expect("size");
                    for i in 0..n {
                        f.insert(&h(&wallet(1_000 + s, i)));
                    }
                    (f.estimate(), n as f64)
                })
                .collect();
            let c = Calibration::of(&results);
            assert_calibrated(&format!("bloom 10,000/1%, n={n}, 200 filters"), &c);
            assert!(
                c.mean_error.abs() <= 4.0 * c.rms_error / 200f64.sqrt(),
                "n={n}: mean relative error {:+.4}%",
                c.mean_error * 100.0
            );
        }
    }

    #[test]
    fn an_overfull_filter_says_so() {
        let mut f = BloomFilter::new(1_000, 0.01).expect("size");
        for i in 0..5_000 {
            f.insert(&h(&wallet(2, i)));
        }
        assert!(f.is_overfull());
        assert!(f.predicted_fpr() > 0.2, "{}", f.predicted_fpr());
        assert!(f.fill_ratio() > 0.9);
    }

    #[test]
    fn empty_filter_contains_nothing_and_counts_zero() {
        let f = BloomFilter::new(100, 0.01).expect("size");
        assert!(!f.contains(&h("0xabc")));
        assert_eq!(f.estimate_count(), Estimate::exact(0.0));
    }

    #[test]
    fn merge_is_the_filter_of_the_union() {
        let mut a = BloomFilter::new(10_000, 0.01).expect("size");
        let mut b = a.clone();
        let mut both = a.clone();
        for i in 0..3_000 {
            let x = h(&wallet(3, i));
            if i % 2 == 0 {
                a.insert(&x)
            } else {
                b.insert(&x)
            };
            both.insert(&x);
        }
        a.merge(&b).expect("same shape");
        assert_eq!(bits_of(&a), bits_of(&both));
        assert_eq!(a.ones(), both.ones());
        let other = BloomFilter::new(20_000, 0.01).expect("size");
        assert!(matches!(
            a.merge(&other),
            Err(SketchError::Incompatible { .. })
        ));
    }

    /// Combined rate at 10 times the initial capacity (four doubling layers), probed with 1M
    /// absent wallets. The design promise is a combined rate at or below 1%; the measured rate
    /// is a proportion over 1M absent items, each a false positive with the filter's own
    /// probability `predicted_fpr` (1 − Π(1 − fill_i^k_i)), so it must lie within 5 sd
    /// (sqrt(p(1 − p)/1e6) ≈ 0.01 points; P(|Z| > 5) = 6e-7) of that prediction, and the
    /// prediction at or below 1%.
    ///
    /// The count estimate: every item goes to one layer unless an older layer already says
    /// "maybe", which skips a fraction of at most the combined rate, so the estimate lies
    /// between 1M·(1 − rate) and 1M, give or take 5 of its standard errors (about 500).
    #[test]
    fn scalable_filter_keeps_its_rate_at_ten_times_capacity() {
        let mut f = ScalableBloom::new(100_000, 0.01).expect("size");
        for i in 0..1_000_000 {
            f.insert(&h(&wallet(4, i)));
        }
        assert!(f.layers().len() >= 4, "layers {}", f.layers().len());
        for i in 0..1_000_000 {
            assert!(f.contains(&h(&wallet(4, i))), "false negative at {i}");
        }
        let hits = (0..1_000_000)
            .filter(|&i| f.contains(&h(&wallet(5, i))))
            .count();
        let rate = hits as f64 / 1e6;
        let p = f.predicted_fpr();
        eprintln!(
            "scalable bloom at 10x capacity: {} layers, measured rate {:.3}%, predicted {:.3}%",
            f.layers().len(),
            rate * 100.0,
            p * 100.0
        );
        assert!(p <= 0.01, "predicted combined rate {p}");
        let sd = (p * (1.0 - p) / 1e6).sqrt();
        assert!(
            (rate - p).abs() <= 5.0 * sd,
            "combined rate {rate} against predicted {p} ± {}",
            5.0 * sd
        );
        let est = f.estimate();
        let est_sd = (est.upper - est.lower) / (2.0 * Z95);
        assert!(
            est.value >= 1e6 * (1.0 - p) - 5.0 * est_sd && est.value <= 1e6 + 5.0 * est_sd,
            "{est:?} (sd {est_sd})"
        );
    }

    /// The scalable filter's count interval (the layers' intervals combined) is a 95% interval,
    /// neither more nor less: 200 filters starting at 1,000 items, each given 12,000 distinct
    /// wallets, so four layers of 1,000, 2,000, 4,000 and up to 8,000 items hold them. Measured
    /// and bands as in `count_interval_covers_95_percent_neither_more_nor_less` (misses
    /// 2..=21, mean z² 0.72..1.34). The truth is the number of items the layers were given:
    /// 12,000 less those a full or older layer already said "maybe" to, which the filter takes
    /// as seen and never inserts. (An item the filling layer gives all its bits to anyway was
    /// inserted, as far as that layer's estimate knows, though it changed nothing.) Adding the
    /// layers' interval ends instead of their half-widths in quadrature made the interval about
    /// twice too wide, and this fails.
    #[test]
    fn scalable_count_interval_covers_95_percent_neither_more_nor_less() {
        let results: Vec<(Estimate, f64)> = (0..200u64)
            .map(|s| {
                let mut f = ScalableBloom::new(1_000, 0.01).expect("size");
                let mut given = 0u64;
                for i in 0..12_000 {
                    let x = h(&wallet(5_000 + s, i));
                    let (last, older) = f.layers().split_last().expect("a layer");
                    let refused = older.iter().any(|l| l.contains(&x))
                        || (last.inserted() >= last.capacity() && last.contains(&x));
                    given += u64::from(!refused);
                    f.insert(&x);
                }
                assert_eq!(f.layers().len(), 4);
                (f.estimate(), given as f64)
            })
            .collect();
        let c = Calibration::of(&results);
        assert_calibrated("scalable bloom 1,000/1% holding 12,000, 200 filters", &c);
        assert!(
            c.mean_error.abs() <= 4.0 * c.rms_error / 200f64.sqrt(),
            "mean relative error {:+.4}%",
            c.mean_error * 100.0
        );
    }

    #[test]
    fn scalable_filter_round_trips_and_merges() {
        let mut a = ScalableBloom::new(100, 0.01).expect("size");
        let mut b = a.clone();
        for i in 0..1_000 {
            a.insert(&h(&wallet(6, i)));
            b.insert(&h(&wallet(7, i)));
        }
        let decoded = ScalableBloom::decode(&a.encode().expect("encode")).expect("decode");
        assert_eq!(decoded, a);
        a.merge(&b).expect("merge");
        for i in 0..1_000 {
            assert!(a.contains(&h(&wallet(6, i))) && a.contains(&h(&wallet(7, i))));
        }
        assert_damage_detected(&a);
    }

    #[test]
    fn damage_is_detected() {
        let mut f = BloomFilter::new(1_000, 0.01).expect("size");
        for i in 0..500 {
            f.insert(&h(&wallet(8, i)));
        }
        assert_damage_detected(&f);
    }

    #[test]
    fn exact_limit_is_three_quarters_of_the_largest_table_within_the_bit_array() {
        let f = BloomFilter::new(SMALL, 0.01).expect("size");
        // ⌈10,000 · ln 100 / (ln 2)²⌉ = 95,851 = 7 × 13,693; the next prime is 95,857.
        assert_eq!((f.bit_count(), f.bit_array_bytes()), (95_857, 11_983));
        assert_eq!(f.exact_limit(), SMALL_LIMIT);
        // SPEC defaults: 1,198,133 bytes hold 149,766 u64s; 131,072 slots (1 MiB) at 3/4.
        let big = BloomFilter::new(1_000_000, 0.01).expect("size");
        assert_eq!(big.exact_limit(), 98_304);
        assert!(big.is_exact());
        // Under 16 slots' worth of bits there is no exact form: 100 items at 1% is 120 bytes.
        let tiny = BloomFilter::new(100, 0.01).expect("size");
        assert_eq!(tiny.exact_limit(), 0);
        assert!(!tiny.is_exact());
        // 16 slots need 128 bytes of bit array: 1,017 bits round up to them, 1,016 do not.
        assert_eq!(BloomFilter::exact_limit_for_bits(16 * 64), 12);
        assert_eq!(BloomFilter::exact_limit_for_bits(16 * 64 - 7), 12);
        assert_eq!(BloomFilter::exact_limit_for_bits(16 * 64 - 8), 0);
    }

    /// The exact form holds `exact_limit` fingerprints and answers exactly; one more distinct
    /// item converts it, and its memory never passes the bit array's.
    #[test]
    fn starts_exact_and_converts_one_past_the_limit() {
        let mut f = BloomFilter::new(SMALL, 0.01).expect("size");
        let header = std::mem::size_of::<BloomFilter>();
        assert_eq!(f.size_bytes(), header + MIN_SLOTS * 8);
        for i in 0..SMALL_LIMIT {
            assert!(f.insert(&h(&wallet(30, i))), "item {i} is new");
            assert!(
                !f.insert(&h(&wallet(30, i))),
                "item {i} again changes nothing"
            );
            assert!(f.size_bytes() <= header + f.bit_array_bytes());
        }
        assert!(f.is_exact());
        assert_eq!(f.fingerprints(), Some(SMALL_LIMIT));
        assert_eq!(f.inserted(), SMALL_LIMIT);
        assert_eq!(f.estimate_count(), Estimate::exact(SMALL_LIMIT as f64));
        assert_eq!(f.predicted_fpr(), SMALL_LIMIT as f64 / 2f64.powi(64));
        assert!(!f.is_overfull());
        assert_eq!(f.size_bytes(), header + 1_024 * 8);
        for i in 0..SMALL_LIMIT {
            assert_eq!(f.lookup(&h(&wallet(30, i))), Presence::Present);
        }
        // 10,000 absent items: a wrong "present" has probability 768/2^64 each.
        for i in 0..10_000 {
            assert_eq!(f.lookup(&h(&wallet(31, i))), Presence::Absent);
        }
        assert!(f.insert(&h(&wallet(30, SMALL_LIMIT))));
        assert!(!f.is_exact());
        assert_eq!(f.fingerprints(), None);
        assert_eq!(f.size_bytes(), header + f.bit_array_bytes());
        for i in 0..=SMALL_LIMIT {
            assert_eq!(f.lookup(&h(&wallet(30, i))), Presence::Maybe);
        }
        assert!(!f.estimate_count().exact);
    }

    /// Converting inserts each fingerprint as its item would have been: the bits equal a filter
    /// built directly from the items in any order, and everything (the count of changing
    /// inserts too) equals one built directly in ascending fingerprint order.
    #[test]
    fn a_converted_filter_is_bit_identical_to_one_built_directly() {
        for (capacity, fpr, n) in [
            (SMALL, 0.01, 769u64),
            (SMALL, 0.01, 5_000),
            (50_000, 1e-6, 13_000),
        ] {
            let mut converted = BloomFilter::new(capacity, fpr).expect("size");
            let mut direct = BloomFilter::new_filter(capacity, fpr).expect("size");
            assert!(converted.is_exact() && !direct.is_exact());
            let items: Vec<ShaWords> = (0..n).map(|i| h(&wallet(32, i))).collect();
            for x in &items {
                converted.insert(x);
                direct.insert(x);
            }
            assert!(!converted.is_exact(), "{n} items past the limit");
            assert_eq!(
                bits_of(&converted),
                bits_of(&direct),
                "capacity {capacity}, n {n}"
            );
            assert_eq!(converted.ones(), direct.ones());
            assert_eq!(converted.estimate_count(), direct.estimate_count());
            assert_eq!(converted.predicted_fpr(), direct.predicted_fpr());
            let limit = converted.exact_limit() as usize;
            let mut ordered = BloomFilter::new_filter(capacity, fpr).expect("size");
            let mut first: Vec<&ShaWords> = items[..limit].iter().collect();
            first.sort_by_key(|s| fingerprint(s));
            for x in first.into_iter().chain(&items[limit..]) {
                ordered.insert(x);
            }
            assert_eq!(ordered, converted, "capacity {capacity}, n {n}");
        }
    }

    /// Every form decodes to an equal filter, with the same memory, that then evolves exactly as
    /// the live one (through the conversion and past it).
    #[test]
    fn decoded_filters_equal_the_live_ones_and_evolve_identically() {
        let mut live = BloomFilter::new(SMALL, 0.01).expect("size");
        let mut i = 0u64;
        for stop in [0, 1, 10, 767, 768, 769, 2_000] {
            while i < stop {
                live.insert(&h(&wallet(33, i)));
                i += 1;
            }
            let blob = live.encode().expect("encode");
            let mut back = BloomFilter::decode(&blob).expect("decode");
            assert_eq!(back, live, "after {stop}");
            assert_eq!(back.size_bytes(), live.size_bytes(), "after {stop}");
            let mut ahead = live.clone();
            for j in stop..stop + 1_000 {
                let x = h(&wallet(33, j));
                assert_eq!(back.insert(&x), ahead.insert(&x), "after {stop}, item {j}");
            }
            assert_eq!(back, ahead, "after {stop} + 1,000");
        }
        // The exact form is stored as its sorted fingerprints: 8 bytes each over a fixed frame.
        let mut ten = BloomFilter::new(SMALL, 0.01).expect("size");
        for i in 0..10 {
            ten.insert(&h(&wallet(34, i)));
        }
        let empty = BloomFilter::new(SMALL, 0.01)
            .expect("size")
            .encode()
            .expect("encode");
        assert_eq!(ten.encode().expect("encode").len(), empty.len() + 80);
        assert_damage_detected(&ten);
    }

    #[test]
    fn a_blob_no_live_filter_could_hold_is_refused() {
        let mut f = BloomFilter::new(SMALL, 0.01).expect("size");
        // Past the limit by building the exact form directly (as a corrupt writer might).
        let fps: Vec<u64> = (1..=SMALL_LIMIT + 1).collect();
        f.form = Form::Exact(Fingerprints::from_sorted(&fps));
        let blob = f.encode().expect("encode");
        let err = BloomFilter::decode(&blob).expect_err("too many");
        assert!(err.to_string().contains("fingerprints"), "{err}");
        // Unsorted fingerprints do not decode at all.
        let mut unsorted = f.clone();
        unsorted.form = Form::Exact(Fingerprints::from_sorted(&[1, 2]));
        let mut blob = unsorted.encode().expect("encode");
        // The payload ends with the two fingerprints, just before the CRC.
        let end = blob.len() - 4;
        blob[end - 16..end - 8].copy_from_slice(&3u64.to_le_bytes());
        let body = blob.len() - 4;
        let crc = crc32fast::hash(&blob[..body]);
        blob[body..].copy_from_slice(&crc.to_le_bytes());
        let err = BloomFilter::decode(&blob).expect_err("unsorted");
        assert!(err.to_string().contains("unsorted"), "{err}");
    }

    /// The exact form is stored as its fingerprints in ascending order and nothing else (what
    /// every layout since 2 reads), whatever the table's size and order of slots.
    #[test]
    fn the_exact_form_is_stored_as_its_sorted_fingerprints() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut fps: Vec<u64> = (0..5_000).map(|_| rng.random()).collect();
        fps.push(0);
        fps.sort_unstable();
        fps.dedup();
        let table = Fingerprints::from_sorted(&fps);
        assert!(table.slots.len() > fps.len(), "a table with free slots");
        let stored = crate::codec::encode(0x7f, &table).expect("encode");
        assert_eq!(stored, crate::codec::encode(0x7f, &fps).expect("encode"));
        let back: Fingerprints = crate::codec::decode(0x7f, &stored).expect("decode");
        assert_eq!(back.sorted(), fps);
    }

    /// The fingerprint 0 (a free slot in the table) is held by its own flag.
    #[test]
    fn the_zero_fingerprint_is_held_like_any_other() {
        let mut f = BloomFilter::new(SMALL, 0.01).expect("size");
        let zero = words_of(0);
        assert!(!f.contains(&zero));
        assert!(f.insert(&zero));
        assert!(!f.insert(&zero));
        assert!(f.contains(&zero));
        assert_eq!(f.fingerprints(), Some(1));
        let back = BloomFilter::decode(&f.encode().expect("encode")).expect("decode");
        assert_eq!(back, f);
        assert!(back.contains(&zero));
        for i in 0..SMALL_LIMIT {
            f.insert(&h(&wallet(35, i)));
        }
        assert!(!f.is_exact());
        assert!(f.contains(&zero));
        let mut direct = BloomFilter::new_filter(SMALL, 0.01).expect("size");
        direct.insert(&zero);
        for i in 0..SMALL_LIMIT {
            direct.insert(&h(&wallet(35, i)));
        }
        assert_eq!(bits_of(&f), bits_of(&direct));
    }

    /// Merging mixes forms: exact with exact stays exact while the union fits; any merge with a
    /// filter form is the OR; every result equals (by bits, or exactly) one built at once.
    #[test]
    fn merging_mixes_forms() {
        let fill = |f: &mut BloomFilter, range: std::ops::Range<u64>| {
            for i in range {
                f.insert(&h(&wallet(36, i)));
            }
        };
        let empty = BloomFilter::new(SMALL, 0.01).expect("size");
        let built = |range: std::ops::Range<u64>| {
            let mut f = empty.clone();
            fill(&mut f, range);
            f
        };
        // Exact + exact, overlapping, union 500: exact and equal.
        let mut a = built(0..300);
        a.merge(&built(200..500)).expect("merge");
        assert!(a.is_exact());
        assert_eq!(a, built(0..500));
        // Exact + exact, union 1,000: the filter form, bits as built at once.
        let mut a = built(0..600);
        a.merge(&built(400..1_000)).expect("merge");
        assert!(!a.is_exact());
        assert_eq!(bits_of(&a), bits_of(&built(0..1_000)));
        // Filter + exact and exact + filter.
        let mut a = built(0..2_000);
        a.merge(&built(1_500..1_700)).expect("merge");
        assert_eq!(bits_of(&a), bits_of(&built(0..2_000)));
        let mut a = built(0..100);
        a.merge(&built(50..2_000)).expect("merge");
        assert_eq!(bits_of(&a), bits_of(&built(0..2_000)));
        // Different shapes are refused in every form combination, leaving the filter as it was.
        let other = BloomFilter::new(2 * SMALL, 0.01).expect("size");
        let mut a = built(0..10);
        let before = a.clone();
        assert!(a.merge(&other).is_err());
        assert_eq!(a, before);
    }

    #[test]
    fn the_scalable_filter_starts_exact_and_answers_present() {
        let mut s = ScalableBloom::new(SMALL, 0.01).expect("size");
        assert!(s.is_exact());
        // The first layer is at rate 0.5%: about 13.8 KB of bits, so 1,024 slots again.
        let limit = s.layers()[0].exact_limit();
        assert_eq!(limit, SMALL_LIMIT);
        for i in 0..limit {
            assert!(s.insert(&h(&wallet(37, i))));
        }
        assert!(s.is_exact());
        assert_eq!(s.estimate(), Estimate::exact(limit as f64));
        assert_eq!(s.lookup(&h(&wallet(37, 5))), Presence::Present);
        assert_eq!(s.lookup(&h(&wallet(38, 5))), Presence::Absent);
        // Not rounded away by `1 − Π(1 − p)`: 768 / 2^64 ≈ 4.2e-17 is below f64's step at 1.
        let chance = limit as f64 / 2f64.powi(64);
        assert!(
            (s.predicted_fpr() - chance).abs() < chance * 1e-12,
            "{}",
            s.predicted_fpr()
        );
        let back = ScalableBloom::decode(&s.encode().expect("encode")).expect("decode");
        assert_eq!(back, s);
        s.insert(&h(&wallet(37, limit)));
        assert!(!s.is_exact());
        assert_eq!(s.lookup(&h(&wallet(37, 5))), Presence::Maybe);
        // Past the first layer's capacity a second layer is added, as a bit array.
        for i in 0..3 * SMALL {
            s.insert(&h(&wallet(39, i)));
        }
        assert!(s.layers().len() >= 2);
        assert!(s.layers()[1..].iter().all(|l| !l.is_exact()));
        for i in 0..3 * SMALL {
            assert!(s.contains(&h(&wallet(39, i))));
        }
    }

    proptest! {
        #[test]
        fn never_a_false_negative(items in proptest::collection::vec(".{0,40}", 1..400), cap in 1u64..500) {
            let mut f = BloomFilter::new(cap, 0.01).expect("size");
            let mut s = ScalableBloom::new(cap, 0.01).expect("size");
            for it in &items {
                f.insert(&h(it));
                s.insert(&h(it));
            }
            for it in &items {
                prop_assert!(f.contains(&h(it)));
                prop_assert!(s.contains(&h(it)));
            }
        }

        /// Items in any order, split into any groups and merged in any grouping, give the
        /// filter built at once: equal while the union fits the exact form, the same bits after.
        #[test]
        fn any_split_and_merge_grouping_gives_the_filter_built_at_once(
            n in 0usize..1_600,
            distinct in 1u64..1_200,
            cuts in proptest::collection::vec(0usize..1_600, 0..6),
            seed in any::<u64>(),
        ) {
            use rand::seq::SliceRandom;
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let items: Vec<ShaWords> = (0..n as u64).map(|i| h(&wallet(40, i % distinct))).collect();
            let empty = BloomFilter::new(SMALL, 0.01).expect("size");
            let mut whole = empty.clone();
            for x in &items {
                whole.insert(x);
            }
            let mut shuffled = items.clone();
            shuffled.shuffle(&mut rng);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(n)).collect();
            cuts.push(0);
            cuts.push(n);
            cuts.sort_unstable();
            let mut parts: Vec<BloomFilter> = cuts
                .windows(2)
                .map(|w| {
                    let mut f = empty.clone();
                    for x in &shuffled[w[0]..w[1]] {
                        f.insert(x);
                    }
                    f
                })
                .collect();
            while parts.len() > 1 {
                let i = rng.random_range(0..parts.len());
                let other = parts.swap_remove(i);
                let j = rng.random_range(0..parts.len());
                parts[j].merge(&other).expect("merge");
            }
            let merged = &parts[0];
            prop_assert_eq!(merged.is_exact(), whole.is_exact());
            if whole.is_exact() {
                prop_assert_eq!(merged, &whole);
            } else {
                prop_assert_eq!(bits_of(merged), bits_of(&whole));
                prop_assert_eq!(merged.ones(), whole.ones());
            }
            for x in &items {
                prop_assert!(merged.contains(x));
            }
        }
    }
}
