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

/// Every hash any sketch needs for one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ItemHashes {
    /// Bytes 0..4 of SHA-256(item), big-endian.
    pub sha_a: u32,
    /// Bytes 4..8 of SHA-256(item), big-endian.
    pub sha_b: u32,
    /// MurmurHash3_x64_128(item, 9001) as the two little-endian 64-bit words DataSketches calls
    /// `hash[0]` and `hash[1]`.
    pub murmur: [u64; 2],
}

impl ItemHashes {
    /// Hashes an item's bytes with both families.
    pub fn of(bytes: &[u8]) -> Self {
        let digest = Sha256::digest(bytes);
        let sha_a = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        let sha_b = u32::from_be_bytes([digest[4], digest[5], digest[6], digest[7]]);
        let (m0, m1) = mur3::murmurhash3_x64_128(bytes, MURMUR_SEED);
        ItemHashes {
            sha_a,
            sha_b,
            murmur: [m0, m1],
        }
    }

    /// The reference's double hashing over a table of `size` slots: the first `n` positions
    /// `(h1 + i * h2) mod size`. `size` must lie in `[2, 2^32]`; sketches check that when they
    /// are sized, so here it is only asserted in debug builds.
    #[inline]
    pub fn positions(&self, size: u64) -> DoubleHash {
        debug_assert!((2..=MAX_DOUBLE_HASH_SIZE).contains(&size));
        let h1 = u64::from(self.sha_a) % size;
        let h2 = 1 + u64::from(self.sha_b) % (size - 1);
        DoubleHash {
            next: h1,
            step: h2,
            size,
        }
    }
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
    let mut candidate = if n % 2 == 0 { n + 1 } else { n };
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
        if n % d == 0 {
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
        assert_eq!(h.sha_a, 0xba78_16bf);
        assert_eq!(h.sha_b, 0x8f01_cfea);
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
        let h = ItemHashes::of(b"wallet-7");
        let size = 9_585_061u64;
        let h1 = u64::from(h.sha_a) % size;
        let h2 = 1 + u64::from(h.sha_b) % (size - 1);
        let got: Vec<u64> = h.positions(size).take(7).collect();
        let want: Vec<u64> = (0..7).map(|i| (h1 + i * h2) % size).collect();
        assert_eq!(got, want);
        // Prime size: the first `size` positions are all distinct.
        let small = 13u64;
        let mut seen: Vec<u64> = h.positions(small).take(small as usize).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), small as usize);
    }

    #[test]
    fn positions_work_at_the_largest_addressable_size() {
        let h = ItemHashes {
            sha_a: u32::MAX,
            sha_b: u32::MAX,
            murmur: [0, 0],
        };
        let size = MAX_DOUBLE_HASH_SIZE;
        let got: Vec<u64> = h.positions(size).take(3).collect();
        let h1 = u64::from(u32::MAX);
        let h2 = 1 + u64::from(u32::MAX) % (size - 1);
        assert_eq!(got, vec![h1, (h1 + h2) % size, (h1 + 2 * h2) % size]);
    }
}
