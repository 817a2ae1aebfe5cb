//! Apache DataSketches binary images of our HyperLogLog and Theta sketches: the format Druid,
//! Spark, Pinot, ClickHouse (`uniqTheta`) and DuckDB's datasketches extension read.
//!
//! Both families hash as DataSketches does (MurmurHash3_x64_128 with seed 9001), so the same
//! items give the same registers and the same retained hashes; only the bytes around them are
//! written here.
//!
//! - **HLL** ([`hll_image`]): the HLL-mode image (serial version 1, family 7, a 40-byte
//!   preamble) with 8-, 6- or 4-bit registers. Our registers are DataSketches' registers for the
//!   same items: slot from the low `p` bits of the first hash word, value one more than the
//!   leading zeros of the second, capped at 63. The image is flagged out of order, so a reader
//!   answers with the composite estimator of those registers (what DataSketches itself does
//!   after a union, and an export is a merge over a range); the HIP accumulator a sketch built
//!   by updates keeps is not written. `kxq0`, `kxq1` and the count of zero registers, which
//!   that estimator reads, are computed from the registers.
//! - **Theta** ([`theta_image`]): the compact, ordered, uncompressed image (serial version 3,
//!   family 3): θ and the retained hashes in ascending order, with the seed hash of 9001.
//!
//!   A sparse sketch is written in the list or set mode DataSketches would hold its coupons in
//!   (the same 26-bit address and 6-bit value), so a small sketch is counted there exactly as
//!   DataSketches counts its own.
//!
//!   `HLL_4` stores each register less the smallest in a nibble, and the registers 15 or more
//!   above it in an exception list (the compact form of DataSketches' auxiliary map).
//!
//! Not here yet: reading images back.
//!
//! Must not: know stores, buckets or files; the caller picks the sketch (merged over a range,
//! say) and where the bytes go.

use super::{HyperLogLog, Theta};

/// The seed both families hash with, DataSketches' default update seed.
pub const SEED: u64 = 9001;

const HLL_FAMILY: u8 = 7;
const HLL_SERIAL_VERSION: u8 = 1;
const HLL_PREINTS: u8 = 10;
const LIST_MODE: u8 = 0;
const SET_MODE: u8 = 1;
const HLL_MODE: u8 = 2;
const OUT_OF_ORDER: u8 = 16;

const THETA_FAMILY: u8 = 3;
const THETA_SERIAL_VERSION: u8 = 3;
const READ_ONLY: u8 = 2;
const EMPTY: u8 = 4;
const COMPACT: u8 = 8;
const ORDERED: u8 = 16;

/// Register width of an HLL image (DataSketches' `HllType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HllWidth {
    /// `HLL_4`: 4 bits a register above the smallest value, with an exception list for the
    /// registers 15 or more above it.
    Hll4,
    /// `HLL_6`: 6 bits a register, packed little-endian.
    Hll6,
    /// `HLL_8`: a byte a register.
    Hll8,
}

impl HllWidth {
    /// The target-type bits of the image's mode byte.
    fn code(self) -> u8 {
        match self {
            HllWidth::Hll4 => 0,
            HllWidth::Hll6 => 1,
            HllWidth::Hll8 => 2,
        }
    }
}

/// The 16-bit hash of a seed DataSketches writes into Theta images and checks on reading.
pub fn seed_hash(seed: u64) -> u16 {
    let (h0, _) = mur3::murmurhash3_x64_128(&seed.to_le_bytes(), 0);
    (h0 & 0xffff) as u16
}

/// How DataSketches holds `coupons` distinct coupons at `lg_k`: a list (up to 7), a hash set of
/// `2^lg_arr` slots kept at most 3/4 full (from 32 slots up to `2^(lg_k - 3)`), or registers.
/// Below `lg_k` 8 a full list becomes registers at once.
fn coupon_mode(lg_k: u8, coupons: usize) -> Option<(u8, u8)> {
    if coupons < 8 {
        return Some((LIST_MODE, 3));
    }
    if lg_k < 8 {
        return None;
    }
    let mut lg_arr = 5u8;
    while 4 * coupons > 3 << lg_arr {
        lg_arr += 1;
    }
    (lg_arr <= lg_k - 3).then_some((SET_MODE, lg_arr))
}

/// `h` as a DataSketches HLL image whose registers, once there are registers, take `width`
/// bits: a sparse sketch is written in the list or set mode DataSketches would hold the same
/// coupons in, so a reader counts them as DataSketches does.
pub fn hll_image(h: &HyperLogLog, width: HllWidth) -> Vec<u8> {
    let lg_k = h.precision();
    if let Some(mut coupons) = h.coupons() {
        if let Some((mode, lg_arr)) = coupon_mode(lg_k, coupons.len()) {
            coupons.sort_unstable();
            let empty = if coupons.is_empty() { EMPTY } else { 0 };
            let list = mode == LIST_MODE;
            let mut out = vec![
                if list { 2 } else { 3 }, // preamble ints
                HLL_SERIAL_VERSION,
                HLL_FAMILY,
                lg_k,
                lg_arr,
                COMPACT | empty,
                if list { coupons.len() as u8 } else { 0 },
                mode | width.code() << 2,
            ];
            if !list {
                out.extend_from_slice(&(coupons.len() as u32).to_le_bytes());
            }
            for c in coupons {
                out.extend_from_slice(&c.to_le_bytes());
            }
            return out;
        }
    }
    let registers = h.register_values();
    // HLL_4 stores each register less the smallest (`cur_min`) in a nibble, 15 meaning "see
    // the exception list", which holds (slot, value) as coupons; the wider registers are
    // absolute (`cur_min` 0, and the count at it is the count of empty registers).
    let cur_min = match width {
        HllWidth::Hll4 => registers.iter().copied().min().unwrap_or(0),
        _ => 0,
    };
    let (mut kxq0, mut kxq1, mut at_cur_min) = (0f64, 0f64, 0u32);
    for &v in &registers {
        // 2^-v, exactly: v ≤ 63.
        let inv = f64::from_bits((1023 - u64::from(v)) << 52);
        if v < 32 {
            kxq0 += inv;
        } else {
            kxq1 += inv;
        }
        at_cur_min += u32::from(v == cur_min);
    }
    let mut exceptions: Vec<u32> = Vec::new();
    let packed = match width {
        HllWidth::Hll8 => registers,
        HllWidth::Hll4 => {
            let mut out = vec![0u8; registers.len() / 2];
            for (slot, &v) in registers.iter().enumerate() {
                let mut nibble = v - cur_min;
                if nibble >= 15 {
                    nibble = 15;
                    exceptions.push(u32::from(v) << 26 | slot as u32);
                }
                out[slot / 2] |= nibble << (4 * (slot & 1));
            }
            out
        }
        HllWidth::Hll6 => {
            // One spare byte, as DataSketches allocates: the last register's 16-bit window.
            let mut out = vec![0u8; registers.len() * 3 / 4 + 1];
            for (slot, &v) in registers.iter().enumerate() {
                let bit = slot * 6;
                let window = u16::from(v & 0x3f) << (bit & 7);
                out[bit >> 3] |= window as u8;
                out[(bit >> 3) + 1] |= (window >> 8) as u8;
            }
            out
        }
    };
    let mut out = Vec::with_capacity(40 + packed.len());
    out.extend_from_slice(&[
        HLL_PREINTS,
        HLL_SERIAL_VERSION,
        HLL_FAMILY,
        lg_k,
        0, // lg_arr: unused in HLL mode
        if width == HllWidth::Hll4 {
            OUT_OF_ORDER | COMPACT
        } else {
            OUT_OF_ORDER
        },
        cur_min,
        HLL_MODE | width.code() << 2,
    ]);
    // The HIP accumulator: unused by a reader of an out-of-order image.
    out.extend_from_slice(&0f64.to_le_bytes());
    out.extend_from_slice(&kxq0.to_le_bytes());
    out.extend_from_slice(&kxq1.to_le_bytes());
    out.extend_from_slice(&at_cur_min.to_le_bytes());
    out.extend_from_slice(&(exceptions.len() as u32).to_le_bytes());
    out.extend_from_slice(&packed);
    for c in exceptions {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

/// `t` as a DataSketches compact, ordered Theta image (uncompressed, serial version 3).
pub fn theta_image(t: &Theta) -> Vec<u8> {
    let hashes = t.retained_hashes();
    let estimating = !t.is_exact();
    if hashes.is_empty() && !estimating {
        // What DataSketches writes for an empty sketch: no seed hash, no entries.
        return vec![
            1,
            THETA_SERIAL_VERSION,
            THETA_FAMILY,
            0,
            0,
            READ_ONLY | EMPTY | COMPACT | ORDERED,
            0,
            0,
        ];
    }
    let pre_longs: u8 = if estimating {
        3
    } else if hashes.len() == 1 {
        1
    } else {
        2
    };
    let mut out = Vec::with_capacity(8 * pre_longs as usize + 8 * hashes.len());
    out.extend_from_slice(&[pre_longs, THETA_SERIAL_VERSION, THETA_FAMILY, 0, 0]);
    out.push(READ_ONLY | COMPACT | ORDERED);
    out.extend_from_slice(&seed_hash(SEED).to_le_bytes());
    if pre_longs > 1 {
        out.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]); // the sampling probability: unused in compact images
    }
    if estimating {
        out.extend_from_slice(&t.theta64().to_le_bytes());
    }
    for h in hashes {
        out.extend_from_slice(&h.to_le_bytes());
    }
    out
}

/// `bytes` in standard base64 with padding (RFC 4648 §4), as Druid ingests sketch columns.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Every image is read by the official Apache DataSketches crate (a dev-dependency) and
    //! compared with a sketch that crate built from the same items.
    use super::*;
    use crate::gen::wallet_address;
    use crate::gen::wallet_address_bytes;
    use crate::hash::murmur;
    use crate::sketch::Sketch;
    use datasketches::hash::value::raw_bytes;
    use datasketches::hll::{HllSketch, HllType, HllUnion};
    use datasketches::theta::{
        CompactThetaSketch, ThetaANotB, ThetaIntersection, ThetaSketch, ThetaSketchBuilder,
        ThetaUnionBuilder,
    };

    fn wallets(stream: u64, n: u64) -> Vec<String> {
        (0..n).map(|i| wallet_address(stream, i)).collect()
    }

    fn ours_hll(p: u8, items: &[String]) -> HyperLogLog {
        let mut h = HyperLogLog::new(p).expect("p");
        for w in items {
            h.update_murmur(murmur(w.as_bytes()));
        }
        h
    }

    /// DataSketches' own sketch of `items`, through a union (so it too is out of order and
    /// answers with the composite estimator), as an image of `width`.
    fn theirs_hll(p: u8, items: &[String], width: HllType) -> HllSketch {
        let mut s = HllSketch::new(p, HllType::Hll8).expect("lg_k");
        for w in items {
            s.update(raw_bytes::from_str(w));
        }
        let mut u = HllUnion::new(p).expect("lg_k");
        u.update(&s);
        u.to_sketch(width)
    }

    /// From sparse to dense, at two precisions: the official reader accepts our image and gets
    /// exactly the composite estimate of DataSketches' own sketch of the same items, and in
    /// HLL_8 and HLL_6 our register bytes are the bytes it writes.
    #[test]
    fn hll_images_read_in_datasketches_as_its_own_sketch_of_the_same_items() {
        // HLL_4 images with an exception list among those compared (else that path is untried).
        let mut exception_lists = 0;
        for p in [10u8, 14] {
            for n in [0u64, 1, 100, 3_000, 200_000] {
                let items = wallets(u64::from(p) * 1_000 + n, n);
                let ours = ours_hll(p, &items);
                for (width, theirs_type) in [
                    (HllWidth::Hll8, HllType::Hll8),
                    (HllWidth::Hll6, HllType::Hll6),
                    (HllWidth::Hll4, HllType::Hll4),
                ] {
                    let image = hll_image(&ours, width);
                    let read = HllSketch::deserialize(&image)
                        .unwrap_or_else(|e| panic!("p={p} n={n} {width:?}: {e}"));
                    let theirs = theirs_hll(p, &items, theirs_type);
                    assert_eq!(read.lg_config_k(), p);
                    let their_image = theirs.serialize();
                    if their_image[0] == HLL_PREINTS {
                        assert_eq!(
                            read.estimate().to_bits(),
                            theirs.composite_estimate().to_bits(),
                            "p={p} n={n} {width:?}: {} against {}",
                            read.estimate(),
                            theirs.composite_estimate()
                        );
                        // cur_min, the count at it, the exception count, the registers; the
                        // exception list as a set (DataSketches writes it in hash order).
                        let body = 40 + (1usize << p) * 4 / 8;
                        let (ours_at, theirs_at) = match width {
                            HllWidth::Hll4 => (body, body),
                            _ => (image.len(), their_image.len()),
                        };
                        assert_eq!(image[6], their_image[6], "p={p} n={n} {width:?}: cur_min");
                        assert_eq!(
                            image[32..ours_at],
                            their_image[32..theirs_at],
                            "p={p} n={n} {width:?}: registers"
                        );
                        if width == HllWidth::Hll4 && image[36..40] != [0; 4] {
                            exception_lists += 1;
                        }
                        let exceptions = |b: &[u8]| {
                            let mut v: Vec<&[u8]> = b.chunks(4).collect();
                            v.sort_unstable();
                            v.concat()
                        };
                        assert_eq!(
                            exceptions(&image[ours_at..]),
                            exceptions(&their_image[theirs_at..]),
                            "p={p} n={n} {width:?}: exceptions"
                        );
                    } else {
                        // DataSketches still holds the coupons (list or set mode) and counts
                        // them; ours is the register image of the same coupons. They agree
                        // within a hundredth of the HLL's standard error.
                        let rse = 1.04 / f64::from(1u32 << p).sqrt();
                        let (got, want) = (read.estimate(), theirs.composite_estimate());
                        assert!(
                            (got - want).abs() <= 0.01 * rse * want.max(1.0),
                            "p={p} n={n} {width:?}: {got} against {want}"
                        );
                    }
                    // It unions there with a sketch built there.
                    let mut u = HllUnion::new(p).expect("lg_k");
                    u.update(&read);
                    u.update(&theirs_hll(p, &wallets(99, 5_000), HllType::Hll8));
                    assert!(u.estimate() >= read.estimate());
                }
            }
        }
        assert!(exception_lists > 0, "no HLL_4 image had exceptions");
    }

    fn ours_theta(items: &[String]) -> Theta {
        let mut t = Theta::new(4096).expect("k");
        for w in items {
            t.update_murmur(murmur(w.as_bytes()));
        }
        t
    }

    /// Exact and estimating, empty and single: the official reader gets our θ and our retained
    /// hashes exactly, with the seed hash checked, and the estimate follows from them.
    #[test]
    fn theta_images_read_in_datasketches_with_our_theta_and_entries() {
        for n in [0u64, 1, 2, 1_000, 4_096, 50_000] {
            let ours = ours_theta(&wallets(500 + n, n));
            let image = theta_image(&ours);
            let read =
                CompactThetaSketch::deserialize(&image).unwrap_or_else(|e| panic!("n={n}: {e}"));
            assert_eq!(read.theta64(), ours.theta64(), "n={n}");
            let mut entries: Vec<u64> = read.iter().map(|e| e.hash()).collect();
            entries.sort_unstable();
            assert_eq!(entries, ours.retained_hashes(), "n={n}");
            assert_eq!(read.num_retained(), ours.retained());
            assert_eq!(read.is_empty(), n == 0);
            let want = ours.retained() as f64 / ours.theta();
            assert!(
                (read.estimate() - want).abs() <= 1e-9 * want.max(1.0),
                "n={n}"
            );
        }
        // Below the smaller θ our entries are DataSketches' own for the same items.
        let items = wallets(7, 20_000);
        let ours = ours_theta(&items);
        let mut theirs = ThetaSketchBuilder::default()
            .lg_k(12)
            .build()
            .expect("lg_k");
        for w in &items {
            theirs.update(raw_bytes::from_str(w));
        }
        let floor = ours.theta64().min(theirs.theta64());
        let below = |v: Vec<u64>| -> Vec<u64> { v.into_iter().filter(|&h| h < floor).collect() };
        let mut their_entries: Vec<u64> = theirs.iter().map(|e| e.hash()).collect();
        their_entries.sort_unstable();
        assert_eq!(below(ours.retained_hashes()), below(their_entries));
    }

    fn theta_pair(lg_k: u8, items: &[[u8; 42]]) -> (Theta, ThetaSketch) {
        let mut ours = Theta::new(1 << lg_k).expect("k");
        // DataSketches' defaults but lg_k: resize factor 8, sampling probability 1.
        let mut theirs = ThetaSketchBuilder::default()
            .lg_k(lg_k)
            .build()
            .expect("lg_k");
        for w in items {
            ours.update_murmur(murmur(w));
            theirs.update(raw_bytes::from_slice(w));
        }
        (ours, theirs)
    }

    fn sorted(entries: impl Iterator<Item = u64>) -> Vec<u64> {
        let mut v: Vec<u64> = entries.collect();
        v.sort_unstable();
        v
    }

    /// The retained-set rule is DataSketches': fed the same wallets, our Theta and the official
    /// crate's update sketch hold the same values and the same θ, exact (100, k) and estimating
    /// (3k, 100k, 1M), at lg_k 5 (DataSketches' smallest), 10, 12 (the store's default) and 14;
    /// and so does its compact form. Before the rule was taken over, ours rebuilt at 1.5k
    /// values: at 3k both estimate but the retained sets differed in size and θ.
    #[test]
    fn theta_holds_what_datasketches_holds_for_the_same_items() {
        for lg_k in [5u8, 10, 12, 14] {
            let k = 1u64 << lg_k;
            for n in [100, k, 3 * k, 100_000, 1_000_000] {
                let items: Vec<[u8; 42]> =
                    (0..n).map(|i| wallet_address_bytes(31 + n, i)).collect();
                let (ours, theirs) = theta_pair(lg_k, &items);
                let what = format!("lg_k={lg_k} n={n}");
                assert_eq!(ours.theta64(), theirs.theta64(), "{what}: theta");
                assert_eq!(ours.retained(), theirs.num_retained(), "{what}: retained");
                assert_eq!(
                    ours.retained_hashes(),
                    sorted(theirs.iter().map(|e| e.hash())),
                    "{what}: entries"
                );
                assert_eq!(ours.is_exact(), !theirs.is_estimation_mode(), "{what}");
                let compact = theirs.compact(true);
                let entries: Vec<u64> = compact.iter().map(|e| e.hash()).collect();
                assert_eq!(entries, ours.retained_hashes(), "{what}: compact entries");
                assert_eq!(compact.theta64(), ours.theta64(), "{what}: compact theta");
                // The same retained count over the same θ: the same estimate to the last bit
                // but for the scaling of θ (DataSketches divides by i64::MAX, we by 2^63).
                let est = ours.estimate().value;
                assert!(
                    (est - theirs.estimate()).abs() <= 1e-12 * est.max(1.0),
                    "{what}: {est} against {}",
                    theirs.estimate()
                );
            }
        }
    }

    /// A union, trimmed to k, is DataSketches' union: the pooled values below the smallest θ,
    /// cut to the k smallest past k; untrimmed it holds those and the next ones up to 15k/8.
    /// Exact inputs whose union is over 15k/8 (two of 5,000 at k = 4096), exact inputs whose
    /// union is between k and 15k/8 (2,000 and 3,000: ours stays exact), estimating inputs of
    /// different θ, and three inputs in any order. Intersections and A-not-B hold what the
    /// official crate's hold.
    #[test]
    fn theta_set_operations_match_datasketches() {
        let lg_k = 12;
        let wallets = |stream: u64, range: std::ops::Range<u64>| -> Vec<[u8; 42]> {
            range.map(|i| wallet_address_bytes(stream, i)).collect()
        };
        let cases = [
            (
                wallets(1, 0..5_000),
                wallets(1, 5_000..10_000),
                wallets(2, 0..10),
            ),
            (
                wallets(3, 0..300_000),
                wallets(3, 200_000..250_000),
                wallets(3, 100_000..1_000_000),
            ),
            (
                wallets(4, 0..2_000),
                wallets(4, 1_000..40_000),
                wallets(4, 0..100),
            ),
            (
                wallets(5, 0..2_000),
                wallets(5, 2_000..5_000),
                wallets(5, 0..10),
            ),
        ];
        for (case, (a, b, c)) in cases.iter().enumerate() {
            let (oa, ta) = theta_pair(lg_k, a);
            let (ob, tb) = theta_pair(lg_k, b);
            let (oc, tc) = theta_pair(lg_k, c);
            let mut u = ThetaUnionBuilder::default().lg_k(lg_k).build().expect("k");
            for t in [&ta, &tb, &tc] {
                u.update(t).expect("union");
            }
            let theirs = u.to_sketch(true);
            for ours in [
                Theta::union([&oa, &ob, &oc]).expect("three"),
                Theta::union([&oc, &oa, &ob]).expect("three"),
                {
                    let mut m = ob.clone();
                    m.merge(&oc).expect("merge");
                    m.merge(&oa).expect("merge");
                    m
                },
            ] {
                let mut trimmed = ours.clone();
                trimmed.trim();
                assert_eq!(
                    trimmed.theta64(),
                    theirs.theta64(),
                    "case {case}: union theta"
                );
                let their_entries: Vec<u64> = theirs.iter().map(|e| e.hash()).collect();
                assert_eq!(
                    trimmed.retained_hashes(),
                    their_entries,
                    "case {case}: union entries"
                );
                // Untrimmed: theirs and the next values below our θ, at most 15k/8 in all.
                let ours_entries = ours.retained_hashes();
                assert_eq!(ours_entries[..their_entries.len()], their_entries[..]);
                assert!(ours.retained() <= 7_680, "case {case}");
                if case == 3 {
                    assert!(ours.is_exact() && ours.retained() == 5_000, "case {case}");
                }
            }
            let mut i = ThetaIntersection::with_seed(SEED).expect("seed");
            i.update(&ta).expect("intersect");
            i.update(&tb).expect("intersect");
            let theirs = i.to_sketch(true).expect("a result");
            let ours = Theta::intersection([&oa, &ob]).expect("two");
            assert_eq!(
                ours.theta64(),
                theirs.theta64(),
                "case {case}: intersection"
            );
            assert_eq!(
                ours.retained_hashes(),
                sorted(theirs.iter().map(|e| e.hash())),
                "case {case}: intersection entries"
            );
            let theirs = ThetaANotB::with_seed(SEED)
                .expect("seed")
                .compute(&ta, &tb, true)
                .expect("a not b");
            let ours = oa.difference(&ob);
            assert_eq!(ours.theta64(), theirs.theta64(), "case {case}: a not b");
            assert_eq!(
                ours.retained_hashes(),
                sorted(theirs.iter().map(|e| e.hash())),
                "case {case}: a-not-b entries"
            );
        }
    }

    #[test]
    fn base64_is_rfc_4648() {
        for (raw, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw), text);
        }
    }

    #[test]
    fn the_seed_hash_of_9001_is_datasketches_one() {
        // 0x93cc: the seed hash every DataSketches implementation writes for its default seed.
        assert_eq!(seed_hash(SEED), 0x93cc);
    }
}
