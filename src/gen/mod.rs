//! Deterministic synthetic data: wallet addresses for tests and benchmarks, the three
//! streams of the reference text (`stream-a`, `stream-b`, `two-chains`) that the `gen` command
//! writes as JSONL and the demo ingests, and the `chains` stream shaped like users' data
//! (about 380-byte lines, several chains and days, a high-cardinality `contract` field) that
//! the footprint bench measures the store with.
//!
//! This module owns synthetic, reproducible data and nothing else: the same inputs (stream,
//! seed, date, scale) give byte-identical output on every machine, because every random choice
//! comes from the SplitMix64 generator defined here (its output is fixed by this code, not by a
//! dependency's version). It must not touch a store: it only produces events (and the ground
//! truth of each stream, known by construction); ingesting them is the caller's business.
//!
//! - [`streams`]: the stream kinds, options, the event iterator and the ground truth.
//! - [`jsonl`]: the JSONL writer and the conversion to [`crate::store::Event`].
//! - [`chains`]: the `chains` stream, its options and its JSONL writer.

pub mod chains;
pub mod jsonl;
pub mod streams;

pub use chains::{
    chain_events, chain_name, write_chains_jsonl, ChainEvent, ChainEvents, ChainsOptions, Sender,
    TimeFormat,
};
pub use jsonl::{to_store_event, write_jsonl};
pub use streams::{
    events, truth, ChainTruth, Events, GenEvent, GenOptions, StreamKind, Truth, Wallet,
};

/// What can go wrong producing a synthetic stream.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// `--scale` outside (0, 1] (or not a number).
    #[error("scale must be a number in (0, 1], got {0}")]
    BadScale(f64),
    /// A date whose year RFC 3339 cannot write (it needs four digits).
    #[error("date {0} is outside the years 0000-9999 that RFC 3339 times can express")]
    BadDate(chrono::NaiveDate),
    /// A stream name that is not one of the three.
    #[error("unknown stream '{0}': expected one of stream-a, stream-b, two-chains")]
    UnknownStream(String),
    /// An option of the `chains` stream out of range (or a time format not known).
    #[error("{name} must be {expected}, got {value}")]
    BadOption {
        name: &'static str,
        expected: &'static str,
        value: String,
    },
    /// Writing the output failed; `what` says which step.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// SplitMix64: a fast, well-mixed bijection on u64, used to derive reproducible values.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A sequential SplitMix64 generator (Steele, Lea and Flood, 2014): the state advances by the
/// golden-ratio increment and each output is [`splitmix64`] of it. Its stream is fixed by this
/// code, so shuffles are reproducible across machines and dependency upgrades (unlike
/// `rand::rngs::StdRng`, which is documented as not portable across `rand` versions).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.state);
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        out
    }

    /// A uniform value in `0..n` (`n > 0`), without modulo bias: Lemire's multiply-shift with
    /// rejection ("Fast random integer generation in an interval", 2019).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// Fisher–Yates (Durstenfeld) shuffle: every permutation equally likely.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn put_hex(out: &mut [u8], v: u64) {
    let n = out.len();
    for (k, b) in out.iter_mut().enumerate() {
        *b = HEX[((v >> (4 * (n - 1 - k))) & 0xf) as usize];
    }
}

/// [`wallet_address`] as ASCII bytes, without allocating (the JSONL writer's fast path).
pub fn wallet_address_bytes(stream: u64, i: u64) -> [u8; 42] {
    let a = splitmix64(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i);
    let b = splitmix64(a ^ 0x5555);
    let c = splitmix64(b);
    let mut out = [0u8; 42];
    out[0] = b'0';
    out[1] = b'x';
    put_hex(&mut out[2..18], a);
    put_hex(&mut out[18..34], b);
    put_hex(&mut out[34..42], u64::from(c as u32));
    out
}

/// A realistic wallet address, `0x` and 40 lower-case hex digits, unique for each `(stream, i)`
/// (the first 16 digits are a bijection of the pair's mix, so two pairs never collide unless
/// their 64-bit mixes do).
pub fn wallet_address(stream: u64, i: u64) -> String {
    wallet_address_bytes(stream, i)
        .iter()
        .map(|&b| char::from(b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_look_like_wallets_and_are_distinct() {
        let w = wallet_address(1, 2);
        assert_eq!(w.len(), 42);
        assert!(w.starts_with("0x"));
        assert!(w[2..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let mut all: Vec<String> = (0..10_000).map(|i| wallet_address(3, i)).collect();
        all.extend((0..10_000).map(|i| wallet_address(4, i)));
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 20_000);
        assert_eq!(wallet_address(1, 2), w, "deterministic");
    }

    /// The byte formatter must reproduce the original `format!` definition exactly: tests,
    /// benches and stores built before it existed depend on these addresses.
    #[test]
    fn byte_addresses_match_the_original_format() {
        fn original(stream: u64, i: u64) -> String {
            let a = splitmix64(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i);
            let b = splitmix64(a ^ 0x5555);
            let c = splitmix64(b);
            format!("0x{a:016x}{b:016x}{:08x}", c as u32)
        }
        let mut rng = SplitMix64::new(7);
        for _ in 0..10_000 {
            let (s, i) = (rng.next_u64() % 16, rng.next_u64());
            assert_eq!(wallet_address(s, i), original(s, i));
            assert_eq!(&wallet_address_bytes(s, i)[..], original(s, i).as_bytes());
        }
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut rng = SplitMix64::new(1);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            let v = rng.below(7);
            counts[v as usize] += 1;
        }
        // Each count is Binomial(70,000, 1/7): mean 10,000, sd ≈ 92.6; 6 sd ≈ 556.
        for c in counts {
            assert!((c as i64 - 10_000).abs() < 556, "{counts:?}");
        }
        assert_eq!(rng.below(1), 0);
    }

    #[test]
    fn shuffle_is_a_permutation_and_depends_on_the_seed() {
        let base: Vec<u32> = (0..1000).collect();
        let mut a = base.clone();
        SplitMix64::new(1).shuffle(&mut a);
        let mut b = base.clone();
        SplitMix64::new(2).shuffle(&mut b);
        let mut c = base.clone();
        SplitMix64::new(1).shuffle(&mut c);
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_ne!(a, base);
        a.sort_unstable();
        assert_eq!(a, base);
    }
}
