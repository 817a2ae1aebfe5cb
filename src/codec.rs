//! The one place that turns values into bytes and back.
//!
//! Every stored blob (a sketch today; log blocks and checkpoints later) goes through [`encode`] and
//! [`decode`], so the serialization library (bincode 1.3.3, which is unmaintained) can be swapped
//! by editing this file alone. A blob is framed so that damage is always detected rather than read
//! as a wrong answer:
//!
//! ```text
//! magic "SKDB" | format version u16 LE | kind u8 | payload length u32 LE | payload | CRC-32 u32 LE
//! ```
//!
//! The CRC covers everything before it. The format version is the layout version of that kind's
//! payload: [`FORMAT_VERSION`] unless the kind's owner bumped it ([`encode_versioned`]), so a
//! blob written under an older layout is refused by name instead of decoded into wrong numbers.
//! This module knows nothing of what it encodes beyond the one-byte kind tag and the version the
//! caller supplies; checking that a decoded value is internally consistent is the caller's job
//! (see `Sketch::validate`).

use bincode::Options;
use serde::{de::DeserializeOwned, Serialize};

/// Identifies a sketchdb blob.
pub const MAGIC: [u8; 4] = *b"SKDB";
/// The payload version of every kind whose owner has not bumped it.
pub const FORMAT_VERSION: u16 = 1;

const HEADER_LEN: usize = 4 + 2 + 1 + 4;
const TRAILER_LEN: usize = 4;

/// What can go wrong turning bytes back into a value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("blob is {len} bytes, shorter than the {min}-byte frame")]
    Truncated { len: usize, min: usize },
    #[error("blob does not start with the sketchdb magic (found {found:02x?})")]
    BadMagic { found: [u8; 4] },
    #[error("blob format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("blob holds kind {found}, expected kind {expected}")]
    KindMismatch { expected: u8, found: u8 },
    #[error("blob length field says {declared} payload bytes but {actual} are present")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("blob checksum mismatch (stored {stored:08x}, computed {computed:08x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("blob payload is malformed: {0}")]
    Malformed(String),
    #[error("value could not be serialized: {0}")]
    Serialize(String),
}

fn options() -> impl Options {
    // Fixed-width integers keep encoded sizes predictable (a sketch's bytes on disk are reported to
    // users); rejecting trailing bytes catches a payload that decodes "successfully" by accident.
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
}

/// Frames `value` as a blob of the given kind, at [`FORMAT_VERSION`].
pub fn encode<T: Serialize>(kind: u8, value: &T) -> Result<Vec<u8>, CodecError> {
    encode_versioned(kind, FORMAT_VERSION, value)
}

/// Frames `value` as a blob of the given kind whose payload layout is at `version`.
///
/// The payload is serialized once, straight into the frame, and its length filled in after:
/// bincode's `serialize` first runs the whole serializer to size its buffer, and a sketch's
/// serializer sorts and packs what it holds (an exact Count-Min's items, a Bloom filter's
/// fingerprints), so that sizing pass was half of encoding a large import's sets.
pub fn encode_versioned<T: Serialize>(
    kind: u8,
    version: u16,
    value: &T,
) -> Result<Vec<u8>, CodecError> {
    frame_with(kind, version, 256, |out| {
        options()
            .serialize_into(out, value)
            .map_err(|e| CodecError::Serialize(e.to_string()))
    })
}

/// Frames bytes the caller encoded itself (the event log's columnar blocks), with the same
/// header and checksum as [`encode`].
pub fn frame(kind: u8, payload: &[u8]) -> Result<Vec<u8>, CodecError> {
    frame_parts(kind, &[payload])
}

/// [`frame`] of the concatenation of `parts`, without building the concatenation first.
pub fn frame_parts(kind: u8, parts: &[&[u8]]) -> Result<Vec<u8>, CodecError> {
    frame_versioned(kind, FORMAT_VERSION, parts)
}

/// [`frame_parts`] at payload layout `version` (a kind whose owner bumped its layout).
pub fn frame_versioned(kind: u8, version: u16, parts: &[&[u8]]) -> Result<Vec<u8>, CodecError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    frame_with(kind, version, len, |out| {
        for p in parts {
            out.extend_from_slice(p);
        }
        Ok(())
    })
}

/// The frame around what `fill` appends: the header with the payload's length filled in after,
/// then the checksum. `capacity` is the payload's expected size.
fn frame_with(
    kind: u8,
    version: u16,
    capacity: usize,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), CodecError>,
) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(HEADER_LEN + capacity + TRAILER_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&[0; 4]);
    fill(&mut out)?;
    let payload_len = u32::try_from(out.len() - HEADER_LEN)
        .map_err(|_| CodecError::Serialize("payload over 4 GiB".into()))?;
    out[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&payload_len.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Reads a blob of the given kind at [`FORMAT_VERSION`]; any damage, truncation or foreign data
/// is an error.
pub fn decode<T: DeserializeOwned>(kind: u8, bytes: &[u8]) -> Result<T, CodecError> {
    decode_versioned(kind, FORMAT_VERSION, bytes)
}

/// Reads a blob of the given kind written by [`encode_versioned`] at `version`; a blob of another
/// version is [`CodecError::UnsupportedVersion`], never decoded under the wrong layout.
pub fn decode_versioned<T: DeserializeOwned>(
    kind: u8,
    version: u16,
    bytes: &[u8],
) -> Result<T, CodecError> {
    let payload = unframe_versioned(kind, version, bytes)?;
    deserialize(payload)
}

/// Reads a blob of the given kind written at any payload layout from `oldest` to `newest`, for
/// a kind whose newer layouts only add to the older ones (so one type reads them all); returns
/// the layout with the value.
pub fn decode_range<T: DeserializeOwned>(
    kind: u8,
    oldest: u16,
    newest: u16,
    bytes: &[u8],
) -> Result<(u16, T), CodecError> {
    let (version, payload) = unframe_range(kind, oldest, newest, bytes)?;
    Ok((version, deserialize(payload)?))
}

fn deserialize<T: DeserializeOwned>(payload: &[u8]) -> Result<T, CodecError> {
    // The limit stops a corrupt length prefix inside the payload from asking for a huge allocation.
    options()
        .with_limit(payload.len() as u64)
        .deserialize(payload)
        .map_err(|e| CodecError::Malformed(e.to_string()))
}

/// Checks a frame written by [`frame`] or [`encode`] and returns its payload.
pub fn unframe(kind: u8, bytes: &[u8]) -> Result<&[u8], CodecError> {
    unframe_versioned(kind, FORMAT_VERSION, bytes)
}

/// Checks a frame of `kind` at any payload layout from [`FORMAT_VERSION`] to `newest` and returns
/// the layout with the payload, for a kind whose owner still reads its older layouts.
pub fn unframe_any(kind: u8, newest: u16, bytes: &[u8]) -> Result<(u16, &[u8]), CodecError> {
    unframe_range(kind, FORMAT_VERSION, newest, bytes)
}

fn unframe_range(
    kind: u8,
    oldest: u16,
    newest: u16,
    bytes: &[u8],
) -> Result<(u16, &[u8]), CodecError> {
    match unframe_versioned(kind, newest, bytes) {
        Ok(payload) => Ok((newest, payload)),
        Err(CodecError::UnsupportedVersion { found, .. }) if (oldest..newest).contains(&found) => {
            Ok((found, unframe_versioned(kind, found, bytes)?))
        }
        Err(e) => Err(e),
    }
}

/// Compresses `data` with zstd at level 1: the fastest level, which already takes the
/// log's repeated field names and hex digits (a third of a block's bytes or less on chain events)
/// and costs a few nanoseconds a byte, less than the write it saves.
///
/// Each thread keeps one compressor: a new zstd context per call allocated and cleared its
/// tables for every stream of every log block (three a block).
pub fn compress(data: &[u8]) -> Result<Vec<u8>, CodecError> {
    thread_local! {
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let zstd = |e: std::io::Error| CodecError::Serialize(format!("zstd: {e}"));
    COMPRESSOR.with(|cell| {
        let mut held = cell.borrow_mut();
        let compressor = match held.as_mut() {
            Some(c) => c,
            None => held.insert(zstd::bulk::Compressor::new(1).map_err(zstd)?),
        };
        compressor.compress(data).map_err(zstd)
    })
}

/// Decompresses what [`compress`] wrote. The size recorded in the zstd frame is checked against
/// `limit` before anything is allocated, so a damaged size cannot ask for gigabytes.
pub fn decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let size = zstd::bulk::Decompressor::upper_bound(data)
        .ok_or_else(|| CodecError::Malformed("zstd frame without a content size".into()))?;
    if size > limit {
        return Err(CodecError::Malformed(format!(
            "zstd frame says {size} bytes, over the {limit}-byte limit"
        )));
    }
    let out = zstd::bulk::decompress(data, size)
        .map_err(|e| CodecError::Malformed(format!("zstd: {e}")))?;
    if out.len() != size {
        return Err(CodecError::Malformed(format!(
            "zstd frame says {size} bytes but holds {}",
            out.len()
        )));
    }
    Ok(out)
}

fn unframe_versioned(kind: u8, supported: u16, bytes: &[u8]) -> Result<&[u8], CodecError> {
    let min = HEADER_LEN + TRAILER_LEN;
    if bytes.len() < min {
        return Err(CodecError::Truncated {
            len: bytes.len(),
            min,
        });
    }
    let found = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if found != MAGIC {
        return Err(CodecError::BadMagic { found });
    }
    let (body, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(CodecError::Checksum { stored, computed });
    }
    // Kind before version: each kind has its own version, so a blob of another kind is named as
    // such rather than as an unsupported version of this one.
    if bytes[6] != kind {
        return Err(CodecError::KindMismatch {
            expected: kind,
            found: bytes[6],
        });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != supported {
        return Err(CodecError::UnsupportedVersion {
            found: version,
            supported,
        });
    }
    let declared = u32::from_le_bytes([bytes[7], bytes[8], bytes[9], bytes[10]]) as usize;
    let payload = &body[HEADER_LEN..];
    if declared != payload.len() {
        return Err(CodecError::LengthMismatch {
            declared,
            actual: payload.len(),
        });
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serializes as a few fields and counts how often it was serialized.
    struct Counted<'a>(&'a std::cell::Cell<u32>, Vec<u64>);

    impl serde::Serialize for Counted<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.set(self.0.get() + 1);
            (7u8, &self.1, "text").serialize(s)
        }
    }

    /// The thread's one compressor gives every input the bytes a fresh context gives it, after
    /// any other input (a context carrying state from the previous block would differ or fail
    /// to decompress on its own).
    #[test]
    fn a_reused_compressor_writes_what_a_fresh_one_writes() {
        let text: Vec<u8> = (0..40_000u32)
            .flat_map(|i| {
                format!("{{\"gas\":{},\"nonce\":{}}}", i * 7919 % 100_003, i).into_bytes()
            })
            .collect();
        let random: Vec<u8> = (0..50_000u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
            .collect();
        let inputs: [&[u8]; 5] = [&text, &random, b"", &text[..1_000], &text];
        for input in inputs {
            let ours = compress(input).expect("compress");
            let fresh = zstd::bulk::compress(input, 1).expect("fresh context");
            assert_eq!(ours, fresh, "{} bytes", input.len());
            assert_eq!(decompress(&ours, input.len()).expect("decompress"), input);
        }
    }

    /// Serialized once into the frame, to the bytes framing the serialized payload gives.
    #[test]
    fn a_value_is_serialized_once_into_the_same_frame() {
        let calls = std::cell::Cell::new(0);
        for n in [0u64, 1, 1_000, 100_000] {
            let value = Counted(&calls, (0..n).collect());
            calls.set(0);
            let blob = encode_versioned(9, 3, &value).expect("encode");
            assert_eq!(calls.get(), 1, "{n} values");
            let payload = options().serialize(&value).expect("serialize");
            assert_eq!(blob, frame_versioned(9, 3, &[&payload]).expect("frame"));
            let back: (u8, Vec<u64>, String) = decode_versioned(9, 3, &blob).expect("decode");
            assert_eq!(back, (7, (0..n).collect(), "text".to_string()));
        }
    }

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Sample {
        name: String,
        values: Vec<u64>,
    }

    fn sample() -> Sample {
        Sample {
            name: "bucket 2026-12-01".into(),
            values: (0..100).collect(),
        }
    }

    #[test]
    fn round_trips() {
        let blob = encode(3, &sample()).expect("encode");
        assert_eq!(decode::<Sample>(3, &blob).expect("decode"), sample());
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let blob = encode(3, &sample()).expect("encode");
        for i in 0..blob.len() {
            for bit in 0..8 {
                let mut bad = blob.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    decode::<Sample>(3, &bad).is_err(),
                    "flip at byte {i} bit {bit}"
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let blob = encode(3, &sample()).expect("encode");
        for len in 0..blob.len() {
            assert!(
                decode::<Sample>(3, &blob[..len]).is_err(),
                "truncated to {len}"
            );
        }
    }

    #[test]
    fn wrong_kind_and_version_are_named() {
        let blob = encode(3, &sample()).expect("encode");
        assert_eq!(
            decode::<Sample>(4, &blob),
            Err(CodecError::KindMismatch {
                expected: 4,
                found: 3
            })
        );
        let mut future = blob.clone();
        future[4] = 9;
        let body_len = future.len() - TRAILER_LEN;
        let crc = crc32fast::hash(&future[..body_len]);
        future[body_len..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode::<Sample>(3, &future),
            Err(CodecError::UnsupportedVersion {
                found: 9,
                supported: 1
            })
        );
    }

    #[test]
    fn a_kind_is_read_only_at_its_own_version() {
        let v2 = encode_versioned(3, 2, &sample()).expect("encode");
        assert_eq!(
            decode_versioned::<Sample>(3, 2, &v2).expect("decode"),
            sample()
        );
        let v1 = encode(3, &sample()).expect("encode");
        assert_eq!(
            decode_versioned::<Sample>(3, 2, &v1),
            Err(CodecError::UnsupportedVersion {
                found: 1,
                supported: 2
            })
        );
        assert_eq!(
            decode::<Sample>(3, &v2),
            Err(CodecError::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        );
        // Another kind is named as such, whatever its version.
        assert_eq!(
            decode_versioned::<Sample>(4, 2, &v1),
            Err(CodecError::KindMismatch {
                expected: 4,
                found: 3
            })
        );
    }

    #[test]
    fn a_valid_frame_around_a_lying_payload_is_malformed_not_a_panic() {
        // A payload whose inner length prefix claims 2^60 elements: framed with a correct CRC, so
        // only the decoder's limit stands between it and a huge allocation.
        let mut payload = Vec::new();
        payload.extend_from_slice(&5u64.to_le_bytes());
        payload.extend_from_slice(b"hello");
        payload.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let mut blob = Vec::new();
        blob.extend_from_slice(&MAGIC);
        blob.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        blob.push(3);
        blob.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        blob.extend_from_slice(&payload);
        let crc = crc32fast::hash(&blob);
        blob.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode::<Sample>(3, &blob),
            Err(CodecError::Malformed(_))
        ));
    }
}
