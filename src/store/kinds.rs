//! The registry of everything the store writes: for each stored kind, its key prefix, the blob
//! kind byte its frame carries, and the name a damage report gives it.
//!
//! Owns: every number that identifies a stored kind. Keys ([`super::keys`]), the codec frames
//! the store writes, and the parts of a sketch set all take their numbers from here, so no two
//! kinds can share one by accident (a unit test checks it).
//!
//! Must not: encode keys or values (that is `keys`, `sets` and `log`).

use crate::sketch::SketchKind;

/// One stored kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// The first byte of every key of this kind.
    pub prefix: u8,
    /// The kind byte in the codec frame of its values.
    pub blob: u8,
    /// What a damage report calls it.
    pub name: &'static str,
}

/// Metadata records: format version, configuration, checkpoint, retention cutoff.
pub const META: Kind = Kind {
    prefix: b'M',
    blob: 0x50,
    name: "store metadata",
};
/// Tag dictionary entries (`field:value` by id).
pub const TAG: Kind = Kind {
    prefix: b'T',
    blob: 0x51,
    name: "tag dictionary entry",
};
/// Log blocks.
pub const LOG: Kind = Kind {
    prefix: b'L',
    blob: 0x41,
    name: "log block",
};
/// Log block index entries.
pub const INDEX: Kind = Kind {
    prefix: b'I',
    blob: 0x42,
    name: "log block index",
};
/// One part of a sketch set; the value is the family's own blob, kind [`Part::blob`].
pub const SKETCH: Kind = Kind {
    prefix: b'S',
    blob: 0,
    name: "sketch",
};
/// One part of a sketch set written by an import that has not committed yet (evicted to keep
/// the import within the memory budget): the same suffix and value as its [`SKETCH`] key.
/// Nothing reads these keys but the import that wrote them; its commit moves them to their
/// `S` keys (see `store::stage`), and a failed or crashed import's are deleted.
pub const STAGED: Kind = Kind {
    prefix: b'G',
    blob: 0,
    name: "staged sketch",
};
/// The all-time scalable Bloom filter and the log position it includes.
pub const ALL_TIME: Kind = Kind {
    prefix: b'A',
    blob: 0x52,
    name: "all-time bloom filter",
};

/// The sketches imported into one set from Apache DataSketches images (see `store::imported`):
/// their union, kept beside the set (whose HLL and Theta parts hold them too) so that a set
/// rebuilt from the raw log, which knows nothing of them, gets them back, and so that queries
/// know which sets hold items the raw log lacks. Key: `X` + tag id (u32 BE) + bucket start.
pub const IMPORTED: Kind = Kind {
    prefix: b'X',
    blob: 0x54,
    name: "imported sketches",
};

/// One chunk of a value over the engine's `VALUE_MAX`, under `C` + the value's own key + the
/// chunk's index; the value's own key holds a manifest (see `seam`).
pub const CHUNK: Kind = Kind {
    prefix: b'C',
    blob: 0,
    name: "chunk of a large value",
};

/// The acknowledgement record (see `store::ack`): how far the log was acknowledged. Kept by
/// the engine outside its keys ([`super::Engine::write_ack`]), so its prefix is only reserved:
/// it is not in [`ALL`], whose prefixes are the keys `check` expects to find.
pub const ACK: Kind = Kind {
    prefix: b'K',
    blob: 0x53,
    name: "acknowledgement record",
};

/// Every kind stored under keys, for the uniqueness check and `check`'s walk.
pub const ALL: [Kind; 9] = [
    META, TAG, LOG, INDEX, SKETCH, STAGED, ALL_TIME, CHUNK, IMPORTED,
];

/// The stored parts of a sketch set: its header (event count and log position) and one per
/// family. A family's part byte is its [`SketchKind`], the kind in its blob's frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Part {
    Header = 0,
    Bloom = SketchKind::Bloom as u8,
    Hll = SketchKind::HyperLogLog as u8,
    Theta = SketchKind::Theta as u8,
    CountMin = SketchKind::CountMin as u8,
    Reservoir = SketchKind::Reservoir as u8,
}

impl Part {
    pub const ALL: [Part; 6] = [
        Part::Header,
        Part::Bloom,
        Part::Hll,
        Part::Theta,
        Part::CountMin,
        Part::Reservoir,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::Header => "header",
            Part::Bloom => "bloom",
            Part::Hll => "hll",
            Part::Theta => "theta",
            Part::CountMin => "countmin",
            Part::Reservoir => "reservoir",
        }
    }

    /// The blob kind of the part's value: the family's, or [`META`]'s for the header.
    pub fn blob(self) -> u8 {
        match self {
            Part::Header => META.blob,
            other => other as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_kinds_share_a_prefix_or_a_blob_kind() {
        let every: Vec<Kind> = ALL.iter().copied().chain([ACK]).collect();
        for (i, a) in every.iter().enumerate() {
            for b in &every[i + 1..] {
                assert_ne!(a.prefix, b.prefix, "{} and {}", a.name, b.name);
                if a.blob != 0 && b.blob != 0 {
                    assert_ne!(a.blob, b.blob, "{} and {}", a.name, b.name);
                }
            }
            // The store's own blob kinds stay clear of the sketch families' (1..=7).
            assert!(
                a.blob == 0 || a.blob > SketchKind::SketchSet as u8,
                "{}",
                a.name
            );
        }
    }
}
