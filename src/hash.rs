//! Item hashing, done once per item.
//!
//! This module owns every hash the sketches use, so that an item's bytes are hashed exactly once
//! however many sketch sets it feeds (the store updates the whole-stream set and one set per tag
//! value from the same [`Item`]). It must not know about any sketch's layout: it hands out raw hash
//! words and the reference's double-hashing rule, and each sketch reduces them to its own size.
//!
//! Two hash families are used, each for a reason:
//! - **SHA-256** drives the Bloom filter and the Count-Min sketch, exactly as the reference text
//!   does: `h1 = first 4 bytes big-endian mod size`, `h2 = 1 + next 4 bytes big-endian mod
//!   (size - 1)`, position `i = (h1 + i * h2) mod size`, with the size a prime so every step is
//!   coprime to it and an item's positions are distinct.
//! - **MurmurHash3_x64_128 with seed 9001** drives HyperLogLog and Theta, read the way Apache
//!   DataSketches reads it, so registers and retained hashes line up with DataSketches-based
//!   engines (Druid, Spark, Pinot).

use sha2::{Digest, Sha256};

/// The seed Apache DataSketches uses by default (`DEFAULT_UPDATE_SEED`).
pub const MURMUR_SEED: u32 = 9001;

/// The largest table the reference's 32-bit double hashing can address.
pub const MAX_DOUBLE_HASH_SIZE: u64 = 1 << 32;

/// The two 32-bit words of SHA-256(item) that the reference's double hashing starts from: bytes
/// 0..4 and 4..8 of the digest, big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ShaWords {
    pub a: u32,
    pub b: u32,
}

impl ShaWords {
    /// SHA-256 of the item, reduced to the two words double hashing needs.
    pub fn of(bytes: &[u8]) -> Self {
        let digest = Sha256::digest(bytes);
        ShaWords {
            a: u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]),
            b: u32::from_be_bytes([digest[4], digest[5], digest[6], digest[7]]),
        }
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
        let h1 = fastmod(sha.a, self.size_magic, self.size);
        let h2 = 1 + fastmod(sha.b, self.step_magic, self.size - 1);
        DoubleHash {
            next: h1,
            step: h2,
            size: self.size,
        }
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
    fn sha_words_are_the_first_eight_digest_bytes_big_endian() {
        // SHA-256("abc") = ba7816bf 8f01cfea ...
        let h = ItemHashes::of(b"abc");
        assert_eq!(
            h.sha,
            ShaWords {
                a: 0xba78_16bf,
                b: 0x8f01_cfea
            }
        );
        assert_eq!(h.murmur, murmur(b"abc"));
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
        let h1 = u64::from(h.a) % size;
        let h2 = 1 + u64::from(h.b) % (size - 1);
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
            for a in edge {
                assert_eq!(fastmod(a, m, d), u64::from(a) % d, "{a} mod {d}");
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
            a: u32::MAX,
            b: u32::MAX,
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
