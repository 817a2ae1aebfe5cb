//! Item hashing, done once per item.
//!
//! This module owns every hash the sketches use, so that an item's bytes are hashed exactly once
//! however many sketch sets it feeds (the store updates the whole-stream set and one set per tag
//! value from the same [`Item`]). It must not know about any sketch's layout: it hands out raw hash
//! words, the reference's double-hashing rule and a plain reduction, and each sketch reduces them
//! to its own size.
//!
//! Two hash families are used, each for a reason:
//! - **SHA-256** drives the Bloom filter and the Count-Min sketch. [`ShaWords`] keeps the whole
//!   digest as eight big-endian 32-bit words.
//!   - The Bloom filter uses the reference's double hashing: `h1 = word 0 mod size`,
//!     `h2 = 1 + word 1 mod (size - 1)`, position `i = (h1 + i * h2) mod size`, with the size a
//!     prime so every step is coprime to it and an item's positions are distinct.
//!   - Count-Min row `i` uses word `i` on its own ([`TableSize::reduce`]); rows past the eighth
//!     take their words from SHA-256 of the previous eight ([`ShaWords::rehash`]). Double hashing
//!     would tie the rows together: two items with the same `(h1, h2)` meet in every row.
//! - **MurmurHash3_x64_128 with seed 9001** drives HyperLogLog and Theta, read the way Apache
//!   DataSketches reads it, so registers and retained hashes line up with DataSketches-based
//!   engines (Druid, Spark, Pinot).

use sha2::{Digest, Sha256};

/// The seed Apache DataSketches uses by default (`DEFAULT_UPDATE_SEED`).
pub const MURMUR_SEED: u32 = 9001;

/// The largest table the reference's 32-bit double hashing can address.
pub const MAX_DOUBLE_HASH_SIZE: u64 = 1 << 32;

/// SHA-256(item) as its eight 32-bit words, each read big-endian (word `i` is digest bytes
/// `4i..4i+4`). Words 0 and 1 are the two the reference's double hashing starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ShaWords {
    pub words: [u32; ShaWords::WORDS],
}

impl ShaWords {
    /// Words in one SHA-256 digest.
    pub const WORDS: usize = 8;

    /// SHA-256 of the item.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_digest(&Sha256::digest(bytes).into())
    }

    fn from_digest(digest: &[u8; 32]) -> Self {
        let mut words = [0u32; Self::WORDS];
        for (w, chunk) in words.iter_mut().zip(digest.chunks_exact(4)) {
            *w = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        ShaWords { words }
    }

    /// Double hashing's first word (digest bytes 0..4).
    #[inline]
    pub fn a(&self) -> u32 {
        self.words[0]
    }

    /// Double hashing's second word (digest bytes 4..8).
    #[inline]
    pub fn b(&self) -> u32 {
        self.words[1]
    }

    /// The next eight words, for a sketch that needs more than one digest's worth: SHA-256 of this
    /// digest's 32 bytes. SHA-256 of distinct inputs behaves as independent uniform outputs (the
    /// random-oracle model the first digest already relies on), and distinct items have distinct
    /// first digests short of a SHA-256 collision, so the chained words are as independent of each
    /// other and of the first eight as those are of each other.
    pub fn rehash(&self) -> Self {
        let mut bytes = [0u8; 32];
        for (chunk, w) in bytes.chunks_exact_mut(4).zip(&self.words) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
        Self::from_digest(&Sha256::digest(bytes).into())
    }
}

/// MurmurHash3_x64_128(item, 9001) as the two little-endian 64-bit words DataSketches calls
/// `hash[0]` and `hash[1]`.
#[inline]
pub fn murmur(bytes: &[u8]) -> [u64; 2] {
    let (h0, h1) = mur3::murmurhash3_x64_128(bytes, MURMUR_SEED);
    [h0, h1]
}

/// Every hash any sketch needs for one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ItemHashes {
    /// Drives Bloom filters and Count-Min.
    pub sha: ShaWords,
    /// Drives HyperLogLog and Theta.
    pub murmur: [u64; 2],
}

impl ItemHashes {
    /// Hashes an item's bytes with both families.
    pub fn of(bytes: &[u8]) -> Self {
        ItemHashes {
            sha: ShaWords::of(bytes),
            murmur: murmur(bytes),
        }
    }
}

/// A prime table size for double hashing, with the reciprocals that turn the two `mod`s per item
/// into multiplications (Lemire, Kaser & Kurz, "Faster remainder by direct computation", 2019:
/// exact for 32-bit numerators and divisors below 2^32, and for 2^32 itself as checked below).
/// A hardware 64-bit division costs tens of cycles, a large share of a Bloom probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableSize {
    size: u64,
    size_magic: u64,
    step_magic: u64,
}

impl TableSize {
    /// `None` unless `2 <= size <= 2^32`.
    pub fn new(size: u64) -> Option<Self> {
        if !(2..=MAX_DOUBLE_HASH_SIZE).contains(&size) {
            return None;
        }
        Some(TableSize {
            size,
            size_magic: magic(size),
            step_magic: magic(size - 1),
        })
    }

    /// The number of slots.
    #[inline]
    pub fn get(&self) -> u64 {
        self.size
    }

    /// The reference's double hashing: the positions `(h1 + i * h2) mod size` with
    /// `h1 = a mod size` and `h2 = 1 + b mod (size - 1)`; take as many as needed.
    #[inline]
    pub fn positions(&self, sha: &ShaWords) -> DoubleHash {
        let h1 = fastmod(sha.a(), self.size_magic, self.size);
        let h2 = 1 + fastmod(sha.b(), self.step_magic, self.size - 1);
        DoubleHash {
            next: h1,
            step: h2,
            size: self.size,
        }
    }

    /// `word mod size`: one hash word reduced to a slot on its own, as each Count-Min row does.
    /// When `size` does not divide 2^32, the first `2^32 mod size` slots have one preimage more
    /// than the others, so a slot's probability lies within `[1/size - 2^-32, 1/size + 2^-32]`
    /// (a relative bias of at most `size / 2^32`).
    #[inline]
    pub fn reduce(&self, word: u32) -> u64 {
        fastmod(word, self.size_magic, self.size)
    }
}

/// `ceil(2^64 / d)`, wrapping to 0 for d = 1 (where every remainder is 0, which 0 yields).
fn magic(d: u64) -> u64 {
    (u64::MAX / d).wrapping_add(1)
}

#[inline]
fn fastmod(a: u32, magic: u64, d: u64) -> u64 {
    let low = magic.wrapping_mul(u64::from(a));
    ((u128::from(low) * u128::from(d)) >> 64) as u64
}

/// An endless iterator over an item's double-hashing positions; take as many as needed.
#[derive(Clone, Debug)]
pub struct DoubleHash {
    next: u64,
    step: u64,
    size: u64,
}

impl Iterator for DoubleHash {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        let current = self.next;
        // Both terms are below `size`, so one conditional subtraction is `mod size`; this walks
        // (h1 + i*h2) mod size without a multiplication or a division per position.
        let advanced = current + self.step;
        self.next = if advanced >= self.size {
            advanced - self.size
        } else {
            advanced
        };
        Some(current)
    }
}

/// An item value together with its hashes, computed once and borrowed by every sketch it feeds.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    pub bytes: &'a [u8],
    pub hashes: ItemHashes,
}

impl<'a> Item<'a> {
    /// Hashes `bytes` once.
    pub fn new(bytes: &'a [u8]) -> Self {
        Item {
            bytes,
            hashes: ItemHashes::of(bytes),
        }
    }
}

/// The smallest prime `>= n` (2 for `n <= 2`). Trial division by odd numbers: it runs once when a
/// sketch is sized, and the sizes involved (up to 2^32) need at most 2^16 divisions per candidate.
pub fn next_prime(n: u64) -> u64 {
    if n <= 2 {
        return 2;
    }
    let mut candidate = if n.is_multiple_of(2) { n + 1 } else { n };
    loop {
        if is_odd_prime(candidate) {
            return candidate;
        }
        candidate += 2;
    }
}

fn is_odd_prime(n: u64) -> bool {
    if n < 3 {
        return false;
    }
    let mut d = 3;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_prime_matches_the_reference_sizes() {
        // The reference: optimal Bloom size 9,585,059 rounds up to the prime 9,585,061, and
        // Count-Min width ceil(e / 0.001) = 2,719 is itself prime.
        assert_eq!(next_prime(9_585_059), 9_585_061);
        assert_eq!(next_prime(2_719), 2_719);
        assert_eq!(next_prime(0), 2);
        assert_eq!(next_prime(3), 3);
        assert_eq!(next_prime(4), 5);
        assert_eq!(next_prime(24), 29);
        assert!(!is_odd_prime(9));
        assert!(!is_odd_prime(1));
    }

    #[test]
    fn sha_words_are_the_digest_big_endian_and_rehash_chains_sha256() {
        // SHA-256("abc") (FIPS 180-2, appendix B.1).
        let h = ItemHashes::of(b"abc");
        assert_eq!(
            h.sha.words,
            [
                0xba78_16bf,
                0x8f01_cfea,
                0x4141_40de,
                0x5dae_2223,
                0xb003_61a3,
                0x9617_7a9c,
                0xb410_ff61,
                0xf200_15ad
            ]
        );
        assert_eq!((h.sha.a(), h.sha.b()), (0xba78_16bf, 0x8f01_cfea));
        assert_eq!(h.murmur, murmur(b"abc"));
        // SHA-256 of those 32 bytes, computed independently (Python hashlib).
        assert_eq!(
            h.sha.rehash().words,
            [
                0x4f8b_42c2,
                0x2dd3_729b,
                0x519b_a6f6,
                0x8d2d_a7cc,
                0x5b2d_606d,
                0x05da_ed5a,
                0xd512_8cc0,
                0x3e6c_6358
            ]
        );
    }

    #[test]
    fn murmur_words_match_published_vectors() {
        // MurmurHash3_x64_128("hello", seed 0) = cbd8a7b341bd9b02 5b1e906a48ae1d19 (the
        // canonical C++ output, printed as h1 then h2); DataSketches reads the same two words.
        let (h1, h2) = mur3::murmurhash3_x64_128(b"hello", 0);
        assert_eq!(h1, 0xcbd8_a7b3_41bd_9b02);
        assert_eq!(h2, 0x5b1e_906a_48ae_1d19);
    }

    #[test]
    fn positions_follow_h1_plus_i_h2_mod_size() {
        let h = ShaWords::of(b"wallet-7");
        let size = 9_585_061u64;
        let h1 = u64::from(h.a()) % size;
        let h2 = 1 + u64::from(h.b()) % (size - 1);
        let table = TableSize::new(size).expect("size");
        let got: Vec<u64> = table.positions(&h).take(7).collect();
        let want: Vec<u64> = (0..7).map(|i| (h1 + i * h2) % size).collect();
        assert_eq!(got, want);
        // Prime size: the first `size` positions are all distinct.
        let small = TableSize::new(13).expect("size");
        let mut seen: Vec<u64> = small.positions(&h).take(13).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 13);
        assert!(TableSize::new(1).is_none());
        assert!(TableSize::new(MAX_DOUBLE_HASH_SIZE + 1).is_none());
    }

    #[test]
    fn fast_remainder_is_exact() {
        let sizes = [
            2u64,
            3,
            5,
            7,
            2_719,
            9_585_061,
            (1 << 31) - 1,
            (1 << 32) - 5,
            1 << 32,
        ];
        let mut x = 12_345u64;
        for &d in &sizes {
            let m = magic(d);
            let edge = [
                0u32,
                1,
                u32::MAX,
                u32::MAX - 1,
                (d.min(u64::from(u32::MAX))) as u32,
            ];
            let table = TableSize::new(d).expect("size");
            for a in edge {
                assert_eq!(fastmod(a, m, d), u64::from(a) % d, "{a} mod {d}");
                assert_eq!(table.reduce(a), u64::from(a) % d, "reduce {a} mod {d}");
            }
            for _ in 0..100_000 {
                x = crate::gen::splitmix64(x);
                let a = x as u32;
                assert_eq!(fastmod(a, m, d), u64::from(a) % d, "{a} mod {d}");
            }
        }
        assert_eq!(fastmod(u32::MAX, magic(1), 1), 0);
    }

    #[test]
    fn positions_work_at_the_largest_addressable_size() {
        let h = ShaWords {
            words: [u32::MAX; ShaWords::WORDS],
        };
        let size = MAX_DOUBLE_HASH_SIZE;
        let got: Vec<u64> = TableSize::new(size)
            .expect("size")
            .positions(&h)
            .take(3)
            .collect();
        let h1 = u64::from(u32::MAX);
        let h2 = 1 + u64::from(u32::MAX) % (size - 1);
        assert_eq!(got, vec![h1, (h1 + h2) % size, (h1 + 2 * h2) % size]);
    }
}
