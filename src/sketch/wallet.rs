//! Wallet addresses in 20 bytes instead of 42.
//!
//! Items are mostly wallets, `0x` followed by 40 lower-case hex digits, which stored as text
//! take twice the bytes they carry. [`pack`] turns exactly that shape into its 20 bytes and
//! refuses every other item, and [`unpack`] writes the same 42 bytes back, so an item that goes
//! through them comes back byte for byte. Upper-case or mixed-case hex is refused on purpose:
//! its 20 bytes would come back lower-case, a different item.
//!
//! Shared by every stored form that holds items (the event log's blocks, Count-Min's exact
//! counts and heavy hitters), so they all agree on what a packed wallet is.

/// Bytes of a packed wallet.
pub const PACKED_LEN: usize = 20;
/// Bytes of a wallet's text: `0x` and two hex digits a byte.
pub const TEXT_LEN: usize = 2 + 2 * PACKED_LEN;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The value of a lower-case hex digit, `0xff` for any other byte.
static HEX_VALUE: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Packs `0x` + 40 lower-case hex digits into `out`; `false` (and `out` unspecified) for any
/// other item.
#[inline]
pub fn pack(item: &str, out: &mut [u8; PACKED_LEN]) -> bool {
    pack_bytes(item.as_bytes(), out)
}

/// [`pack`] of an item given as bytes.
#[inline]
pub fn pack_bytes(item: &[u8], out: &mut [u8; PACKED_LEN]) -> bool {
    if item.len() != TEXT_LEN || &item[..2] != b"0x" {
        return false;
    }
    pack_digits(&item[2..], out)
}

/// Packs lower-case hex digits, two a byte, into `out` (`digits` is twice its length); `false`
/// (and `out` unspecified) if any is not one. [`unpack_digits`] writes them back.
#[inline]
pub fn pack_digits(digits: &[u8], out: &mut [u8]) -> bool {
    if digits.len() != 2 * out.len() {
        return false;
    }
    // A table lookup per digit and one check at the end, instead of a branch per digit: this
    // runs for every ingested event.
    let mut invalid = 0u8;
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (h, l) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        invalid |= h | l;
        *o = h << 4 | l;
    }
    invalid & 0xf0 == 0
}

/// Appends two lower-case hex digits a byte of `packed` to `out`, what [`pack_digits`] read.
#[inline]
pub fn unpack_digits(packed: &[u8], out: &mut Vec<u8>) {
    out.reserve(2 * packed.len());
    for byte in packed {
        out.push(HEX[usize::from(byte >> 4)]);
        out.push(HEX[usize::from(byte & 15)]);
    }
}

/// Appends the text of a packed wallet to `out`: `0x` and two lower-case hex digits a byte,
/// exactly what [`pack`] accepted.
#[inline]
pub fn unpack(packed: &[u8], out: &mut Vec<u8>) {
    out.reserve(2 + 2 * packed.len());
    out.extend_from_slice(b"0x");
    unpack_digits(packed, out);
}

/// [`unpack`] into a string.
pub fn unpack_string(packed: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * packed.len());
    s.push_str("0x");
    for byte in packed {
        s.push(char::from(HEX[usize::from(byte >> 4)]));
        s.push(char::from(HEX[usize::from(byte & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sketch::test_support::wallet;
    use proptest::prelude::*;

    #[test]
    fn lower_case_wallets_pack_and_come_back_byte_for_byte() {
        let mut buf = [0u8; PACKED_LEN];
        for i in 0..1_000 {
            let w = wallet(7, i);
            assert!(pack(&w, &mut buf), "{w}");
            let mut back = Vec::new();
            unpack(&buf, &mut back);
            assert_eq!(back, w.as_bytes());
            assert_eq!(unpack_string(&buf), w);
        }
        assert!(pack("0x0123456789abcdef0123456789abcdef01234567", &mut buf));
        assert_eq!(
            buf,
            [
                0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                0xcd, 0xef, 0x01, 0x23, 0x45, 0x67
            ]
        );
    }

    #[test]
    fn almost_wallets_are_refused() {
        let mut buf = [0u8; PACKED_LEN];
        let good = wallet(3, 1);
        assert!(pack(&good, &mut buf));
        let refused = [
            "0xABCDEF0123456789abcdef0123456789abcdef01".to_string(),
            good.replacen("0x", "0X", 1),
            good[..41].to_string(),
            format!("{good}0"),
            format!("{}g", &good[..41]),
            format!("{} ", &good[..41]),
            "1x".to_string() + &good[2..],
            "0x123".to_string(),
            String::new(),
            // 42 bytes, but not ASCII after the prefix.
            format!("0x{}é", &good[2..40]),
        ];
        for item in &refused {
            assert!(!pack(item, &mut buf), "{item:?} was packed");
            assert!(
                !pack_bytes(item.as_bytes(), &mut buf),
                "{item:?} was packed"
            );
        }
    }

    proptest! {
        /// Whatever the string, packing succeeds exactly when unpacking gives it back.
        #[test]
        fn pack_accepts_exactly_what_unpack_restores(
            s in prop_oneof!["0x[0-9a-f]{40}", "0[xX][0-9a-fA-F]{39,41}", ".{0,44}"]
        ) {
            let mut buf = [0u8; PACKED_LEN];
            let packed = pack(&s, &mut buf);
            let shaped = s.len() == TEXT_LEN
                && s.starts_with("0x")
                && s[2..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            prop_assert_eq!(packed, shaped);
            if packed {
                prop_assert_eq!(unpack_string(&buf), s);
            }
        }
    }
}
