//! Deterministic synthetic data: wallet addresses for tests, benchmarks and (later) the `gen`
//! command's streams. Nothing here is random at run time; the same inputs give the same output.

/// SplitMix64: a fast, well-mixed bijection on u64, used to derive reproducible values.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A realistic wallet address, `0x` and 40 lower-case hex digits, unique for each `(stream, i)`
/// (the first 16 digits are a bijection of the pair's mix, so two pairs never collide unless
/// their 64-bit mixes do).
pub fn wallet_address(stream: u64, i: u64) -> String {
    let a = splitmix64(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i);
    let b = splitmix64(a ^ 0x5555);
    let c = splitmix64(b);
    format!("0x{a:016x}{b:016x}{:08x}", c as u32)
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
}
