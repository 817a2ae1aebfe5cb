//! Building blocks of the packed stored forms: LEB128 varints, zig-zag for signed deltas, a
//! bounds-checked reader, and [`Bytes`], a byte string the codec writes as its length and the
//! bytes themselves.
//!
//! The codec writes integers at fixed width, so that a sketch's table has a predictable size;
//! the packed forms (Count-Min's exact counts, a store's sampled sequence numbers) hold mostly
//! small numbers and write them here as varints inside one [`Bytes`] instead.
//!
//! **Guarantee.** [`Reader`] never reads past its slice and never panics: a truncated or damaged
//! packed form is an `Err` naming the byte where reading stopped.

use serde::de::{Deserializer, Error, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Appends `v` as a LEB128 varint (7 bits a byte, low bits first).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Maps a signed value to an unsigned one with small magnitudes small: 0, -1, 1, -2, ...
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Reads a packed form front to back.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.pos == self.bytes.len()
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        match self.pos.checked_add(n).filter(|&e| e <= self.bytes.len()) {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(format!(
                "{n} bytes wanted at byte {} of {}",
                self.pos,
                self.bytes.len()
            )),
        }
    }

    /// The next varint; one longer than 64 bits or cut short is an error.
    pub fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .bytes
                .get(self.pos)
                .ok_or_else(|| format!("varint cut short at byte {}", self.pos))?;
            self.pos += 1;
            // The tenth byte holds bit 63 alone: anything more does not fit 64 bits.
            if shift == 63 && b > 1 {
                return Err(format!("varint over 64 bits at byte {}", self.pos - 1));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("varint over 64 bits at byte {}", self.pos))
    }

    /// The next varint as a length or count, which must fit `usize`.
    pub fn len(&mut self) -> Result<usize, String> {
        let at = self.pos;
        let v = self.varint()?;
        usize::try_from(v).map_err(|_| format!("length {v} at byte {at} does not fit"))
    }
}

/// A byte string written as its length (fixed 8 bytes, as the codec writes every length) and
/// the bytes, read back in one piece rather than byte by byte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bytes;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }

            fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }

            fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varints_take_a_byte_per_seven_bits() {
        for (v, len) in [
            (0u64, 1),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX, 10),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), len, "{v}");
            let mut r = Reader::new(&out);
            assert_eq!(r.varint(), Ok(v));
            assert!(r.is_empty());
        }
    }

    #[test]
    fn zigzag_keeps_small_magnitudes_small() {
        assert_eq!(
            [0, -1, 1, -2, 2].map(zigzag),
            [0, 1, 2, 3, 4],
            "the first five"
        );
        for v in [i64::MIN, i64::MIN + 1, -1_000_000, 0, 999, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn bad_varints_are_errors_not_panics() {
        // Cut short, eleven bytes, and a tenth byte with bits past 64.
        let cases: [&[u8]; 4] = [
            &[],
            &[0x80],
            &[0xff; 11],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
        ];
        for bytes in cases {
            assert!(Reader::new(bytes).varint().is_err(), "{bytes:02x?}");
        }
        let mut r = Reader::new(&[1, 2, 3]);
        assert!(r.take(4).is_err());
        assert!(r.take(usize::MAX).is_err(), "an overflowing length");
        assert_eq!(r.take(3), Ok(&[1u8, 2, 3][..]));
    }

    #[test]
    fn bytes_are_written_as_a_length_and_the_bytes() {
        let b = Bytes(vec![9, 8, 7]);
        let blob = crate::codec::encode(1, &b).expect("encode");
        let plain = crate::codec::encode(1, &vec![9u8, 8, 7]).expect("encode");
        assert_eq!(blob, plain, "the same bytes as a Vec<u8>");
        assert_eq!(crate::codec::decode::<Bytes>(1, &blob), Ok(b));
    }

    proptest! {
        #[test]
        fn any_varint_sequence_reads_back(values in proptest::collection::vec(any::<u64>(), 0..50)) {
            let mut out = Vec::new();
            for &v in &values {
                put_varint(&mut out, v);
            }
            let mut r = Reader::new(&out);
            for &v in &values {
                prop_assert_eq!(r.varint(), Ok(v));
            }
            prop_assert!(r.is_empty());
        }
    }
}
