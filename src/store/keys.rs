//! The byte layout of keys, in terms of the prefixes of [`super::kinds`]. Everything lives in
//! one ordered key space so that a log write, the sketches it checkpoints and the metadata that
//! goes with them commit in one atomic batch.
//!
//! | prefix | key | value |
//! |---|---|---|
//! | `M` | `M` + name | metadata blob (format version, config, checkpoint) |
//! | `T` | `T` + tag id (u32 BE) | tag dictionary entry `field:value` |
//! | `L` | `L` + first event sequence number (u64 BE) | event log block |
//! | `I` | `I` + first event sequence number (u64 BE) | block index: count, min and max time |
//! | `S` | `S` + kind (u8) + tag id (u32 BE) + bucket start (i64, sign-flipped BE) | sketch blob |
//! | `G` | `G` + the suffix of an `S` key | a sketch blob staged by an uncommitted import |
//! | `A` | `A` | all-time scalable Bloom filter |
//! | `C` | `C` + the key of a value over `VALUE_MAX` + chunk index (u32 BE) | one chunk of it |
//! | `X` | `X` + tag id (u32 BE) + bucket start (i64, sign-flipped BE) | sketches imported into the set |
//!
//! Big-endian integers (with the sign bit flipped for times) sort the way the numbers do, so the
//! buckets of one kind and one tag in a time range are one contiguous, ordered scan.

use super::kinds;
pub use super::kinds::Part;

/// Tag id 0 is the whole stream.
pub const WHOLE: u32 = 0;

pub const META: u8 = kinds::META.prefix;
pub const TAG: u8 = kinds::TAG.prefix;
pub const LOG: u8 = kinds::LOG.prefix;
pub const INDEX: u8 = kinds::INDEX.prefix;
pub const SKETCH: u8 = kinds::SKETCH.prefix;
pub const STAGED: u8 = kinds::STAGED.prefix;
pub const ALL_TIME: &[u8] = &[kinds::ALL_TIME.prefix];
pub const CHUNK: u8 = kinds::CHUNK.prefix;
pub const IMPORTED: u8 = kinds::IMPORTED.prefix;

/// `C` + `key`: the prefix of every chunk of the value under `key`.
pub fn chunk_prefix(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 5);
    k.push(CHUNK);
    k.extend_from_slice(key);
    k
}

/// The key of chunk `index` of the value under `key`. Chunk keys of one value sort by index,
/// and none of them starts with another kind's prefix.
pub fn chunk(key: &[u8], index: u32) -> Vec<u8> {
    let mut k = chunk_prefix(key);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

pub fn meta(name: &str) -> Vec<u8> {
    let mut k = vec![META];
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn tag(id: u32) -> [u8; 5] {
    let mut k = [TAG; 5];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

pub fn log(seq: u64) -> [u8; 9] {
    let mut k = [LOG; 9];
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub fn index(seq: u64) -> [u8; 9] {
    let mut k = [INDEX; 9];
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub fn seq_of(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.get(1..9)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

fn time_bytes(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_of(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// `S` + part + tag: the prefix of all buckets of one part and tag.
pub fn sketch_prefix(part: Part, tag: u32) -> [u8; 6] {
    let mut k = [0u8; 6];
    k[0] = SKETCH;
    k[1] = part as u8;
    k[2..6].copy_from_slice(&tag.to_be_bytes());
    k
}

pub fn sketch(part: Part, tag: u32, bucket: i64) -> [u8; 14] {
    let mut k = [0u8; 14];
    k[..6].copy_from_slice(&sketch_prefix(part, tag));
    k[6..].copy_from_slice(&time_bytes(bucket));
    k
}

/// The staged (`G`) key of one part of a set: [`sketch`]'s key with the `G` prefix.
pub fn staged(part: Part, tag: u32, bucket: i64) -> [u8; 14] {
    let mut k = sketch(part, tag, bucket);
    k[0] = STAGED;
    k
}

/// The `S` key a staged (`G`) key becomes at the commit; `None` if `key` is not a staged key.
pub fn committed_of_staged(key: &[u8]) -> Option<[u8; 14]> {
    let mut k: [u8; 14] = key.try_into().ok()?;
    if k[0] != STAGED {
        return None;
    }
    k[0] = SKETCH;
    Some(k)
}

/// `(tag, bucket)` of a sketch key.
pub fn parse_sketch(key: &[u8]) -> Option<(u32, i64)> {
    if key.len() != 14 || key[0] != SKETCH {
        return None;
    }
    let tag = u32::from_be_bytes(key[2..6].try_into().ok()?);
    let bucket = time_of(key[6..14].try_into().ok()?);
    Some((tag, bucket))
}

/// The key of the sketches imported into set (tag, bucket).
pub fn imported(tag: u32, bucket: i64) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[0] = IMPORTED;
    k[1..5].copy_from_slice(&tag.to_be_bytes());
    k[5..].copy_from_slice(&time_bytes(bucket));
    k
}

/// `(tag, bucket)` of an imported-sketches key.
pub fn parse_imported(key: &[u8]) -> Option<(u32, i64)> {
    if key.len() != 13 || key[0] != IMPORTED {
        return None;
    }
    let tag = u32::from_be_bytes(key[1..5].try_into().ok()?);
    Some((tag, time_of(key[5..13].try_into().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketch_keys_sort_by_time_including_negative() {
        let times = [-5_000_000_000i64, -1, 0, 1, 86_400_000, i64::MAX - 1];
        let keys: Vec<[u8; 14]> = times.iter().map(|&t| sketch(Part::Hll, 7, t)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for (&t, k) in times.iter().zip(&keys) {
            assert_eq!(parse_sketch(k), Some((7, t)));
            assert!(k.starts_with(&sketch_prefix(Part::Hll, 7)));
        }
        assert!(log(1) < log(256));
        let g = staged(Part::Theta, 7, -1);
        assert_eq!(g[0], STAGED);
        assert_eq!(committed_of_staged(&g), Some(sketch(Part::Theta, 7, -1)));
        assert_eq!(committed_of_staged(&sketch(Part::Theta, 7, -1)), None);
        assert_eq!(seq_of(&log(77)), Some(77));
        assert_eq!(parse_imported(&imported(7, -1)), Some((7, -1)));
        assert!(imported(7, -1) < imported(7, 0));
    }
}
