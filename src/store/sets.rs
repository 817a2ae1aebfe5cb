//! Stored sketch sets: reading a set's header and parts (committed, or staged by the running
//! import), checking them, loading a set into memory for ingest, and the names damage reports
//! give them.
//!
//! Owns: the stored form of a set and of the all-time filter. Must not: decide when sets are
//! written, staged or evicted (that is `checkpoint`, `stage` and `import`).

use super::error::{Result, StoreError};
use super::keys::{self, Part};
use super::model::{Event, Sample};
use super::state::{Active, State, TagDict};
use super::{codec, kinds, Store};
use crate::sketch::{
    BloomFilter, CountMin, HyperLogLog, Reservoir, ScalableBloom, Sketch, SketchError, SketchSet,
    Theta,
};
use serde::{Deserialize, Serialize};

/// A set's stored header: how many events it holds and the log position it includes (every
/// event of this set with a sequence number below `log_pos` is in it).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(super) struct SetHeader {
    pub(super) events: u64,
    pub(super) log_pos: u64,
}

/// Where a set's parts are stored: under their committed `S` keys, or under the `G` keys an
/// import stages them to before it commits (see `store::stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    Committed,
    Staged,
}

impl Stored {
    pub(super) fn key(self, part: Part, tag: u32, bucket: i64) -> [u8; 14] {
        match self {
            Stored::Committed => keys::sketch(part, tag, bucket),
            Stored::Staged => keys::staged(part, tag, bucket),
        }
    }
}

/// The all-time filter as stored, with the log position it includes.
#[derive(Serialize, Deserialize)]
pub(super) struct AllTime {
    pub(super) bloom: ScalableBloom,
    pub(super) log_pos: u64,
}

impl Store {
    /// A human name for a stored sketch, used in damage reports.
    pub(crate) fn blob_name(&self, tags: &TagDict, part: Part, tag: u32, bucket: i64) -> String {
        self.blob_name_in(Stored::Committed, tags, part, tag, bucket)
    }

    /// [`Store::blob_name`], saying "staged" for a part under its `G` key.
    pub(super) fn blob_name_in(
        &self,
        stored: Stored,
        tags: &TagDict,
        part: Part,
        tag: u32,
        bucket: i64,
    ) -> String {
        let staged = match stored {
            Stored::Committed => "",
            Stored::Staged => "staged ",
        };
        let tag_name = if tag == keys::WHOLE {
            "whole stream".to_string()
        } else {
            tags.name(tag).unwrap_or("unknown tag").to_string()
        };
        format!(
            "{staged}{} sketch of bucket {}, {}",
            part.name(),
            self.config.bucket.label(bucket),
            tag_name
        )
    }

    /// Reads one stored part of a set, checking it.
    pub(crate) fn read_part<S: Sketch>(
        &self,
        tags: &TagDict,
        part: Part,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<S>> {
        self.read_part_in(Stored::Committed, tags, part, tag, bucket)
    }

    fn read_part_in<S: Sketch>(
        &self,
        stored: Stored,
        tags: &TagDict,
        part: Part,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<S>> {
        self.read_decoded_in(stored, tags, part, tag, bucket, S::decode)
    }

    /// Reads one stored part with `decode`, naming the part if it is damaged.
    fn read_decoded_in<T>(
        &self,
        stored: Stored,
        tags: &TagDict,
        part: Part,
        tag: u32,
        bucket: i64,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, SketchError>,
    ) -> Result<Option<T>> {
        let Some(bytes) = self.engine.get(&stored.key(part, tag, bucket))? else {
            return Ok(None);
        };
        decode(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Damaged {
                name: self.blob_name_in(stored, tags, part, tag, bucket),
                source,
            })
    }

    /// Reads a set's stored reservoir, checking it (see [`decode_reservoir`]).
    pub(crate) fn read_reservoir(
        &self,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<Reservoir<Sample>>> {
        self.read_reservoir_in(Stored::Committed, tags, tag, bucket)
    }

    fn read_reservoir_in(
        &self,
        stored: Stored,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<Reservoir<Sample>>> {
        self.read_decoded_in(stored, tags, Part::Reservoir, tag, bucket, decode_reservoir)
    }

    /// What a set's reservoir holds for the event at `seq`: its sequence number where the log
    /// keeps it for good, else the event, built by `event` (only if the reservoir keeps it).
    #[inline]
    pub(super) fn sample_of(&self, seq: u64, event: impl FnOnce() -> Event) -> Sample {
        if self.config.keeps_whole_log() {
            Sample::Logged(seq)
        } else {
            Sample::Kept(Box::new(event()))
        }
    }

    pub(crate) fn read_header(
        &self,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(u64, u64)>> {
        self.read_header_in(Stored::Committed, tags, tag, bucket)
    }

    fn read_header_in(
        &self,
        stored: Stored,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(u64, u64)>> {
        let Some(bytes) = self.engine.get(&stored.key(Part::Header, tag, bucket))? else {
            return Ok(None);
        };
        let h: SetHeader =
            codec::decode(kinds::META.blob, &bytes).map_err(|e| StoreError::DamagedLog {
                name: self.blob_name_in(stored, tags, Part::Header, tag, bucket),
                detail: e.to_string(),
            })?;
        Ok(Some((h.events, h.log_pos)))
    }

    /// Makes samples reproducible from `seed` for this handle: from now on each reservoir this
    /// `Store` creates or loads draws from a generator seeded from `seed`, its tag, its bucket
    /// and its log position, instead of the operating system's randomness. The same events
    /// ingested in the same order into a new store then keep the same samples, which is what a
    /// demo or a test that prints samples needs. Not kept in the store: a store opened again
    /// samples from the operating system unless seeded again. Only the first call counts.
    pub fn seed_samples(&self, seed: u64) -> Result<()> {
        if self.sample_seed.set(seed).is_err() {
            return Ok(());
        }
        let mut st = self.lock()?;
        for (&(tag, bucket), active) in st.sets.iter_mut() {
            if let Some(s) = self.set_seed(tag, bucket, active.log_pos) {
                std::sync::Arc::make_mut(&mut active.set)
                    .reservoir
                    .reseed(s);
            }
        }
        Ok(())
    }

    /// The seed of a set's reservoir under [`Store::seed_samples`].
    fn set_seed(&self, tag: u32, bucket: i64, log_pos: u64) -> Option<u64> {
        // SplitMix64's finaliser over each part, so nearby tags and buckets get unrelated seeds.
        let mix = |mut z: u64| {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut x = *self.sample_seed.get()?;
        for part in [u64::from(tag), bucket as u64, log_pos] {
            x = mix(x ^ part);
        }
        Some(x)
    }

    /// Every set the store holds, as `(tag, bucket)` in key order: the stored ones (one scan of
    /// the set headers) and those so far only in memory.
    pub(super) fn all_sets(&self, st: &State) -> Result<Vec<(u32, i64)>> {
        let mut out = Vec::new();
        for entry in self.engine.prefix(&[keys::SKETCH, Part::Header as u8]) {
            let (k, _) = entry?;
            if let Some(set) = keys::parse_sketch(&k) {
                out.push(set);
            }
        }
        out.extend(st.sets.keys().copied());
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Makes sure the set for (tag, bucket) is in memory, loading it or creating it empty. A
    /// set the running import staged (see `store::stage`) is read back from its `G` keys, and
    /// is dirty: that version is not committed.
    pub(super) fn ensure_loaded(&self, st: &mut State, tag: u32, bucket: i64) -> Result<()> {
        if st.sets.contains_key(&(tag, bucket)) {
            return Ok(());
        }
        let stored = if st.staged.contains(&(tag, bucket)) {
            Stored::Staged
        } else {
            Stored::Committed
        };
        let read = self.read_set_in(stored, &st.tags, tag, bucket)?;
        if stored == Stored::Staged && read.is_none() {
            return Err(StoreError::DamagedLog {
                name: self.blob_name_in(stored, &st.tags, Part::Header, tag, bucket),
                detail: "missing: the import staged this set and it is not there".into(),
            });
        }
        let (set, log_pos) = match read {
            Some((mut set, log_pos)) => {
                if let Some(seed) = self.set_seed(tag, bucket, log_pos) {
                    set.reservoir.reseed(seed);
                }
                (set, log_pos)
            }
            None => (self.empty_set(tag, bucket)?, 0),
        };
        let active = Active {
            set: std::sync::Arc::new(set),
            log_pos,
            dirty: stored == Stored::Staged,
            last_used: st.clock,
        };
        st.sets.insert((tag, bucket), active);
        if stored == Stored::Staged {
            // Memory holds the newest version now; its staged keys are stale until staged
            // again, and are deleted before the commit (see `store::stage`).
            st.staged.remove(&(tag, bucket));
            st.stale_staged.insert((tag, bucket));
        }
        Ok(())
    }

    /// A new, empty set for (tag, bucket), its reservoir seeded as [`Store::seed_samples`] asks.
    pub(super) fn empty_set(&self, tag: u32, bucket: i64) -> Result<SketchSet<Sample>> {
        match self.set_seed(tag, bucket, 0) {
            Some(seed) => SketchSet::with_seed(&self.config.sketches, seed),
            None => SketchSet::new(&self.config.sketches),
        }
        .map_err(StoreError::Config)
    }

    /// Reads and checks a stored set with the log position it includes; `None` if none is
    /// stored.
    pub(super) fn read_set(
        &self,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(SketchSet<Sample>, u64)>> {
        self.read_set_in(Stored::Committed, tags, tag, bucket)
    }

    fn read_set_in(
        &self,
        stored: Stored,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(SketchSet<Sample>, u64)>> {
        let Some((events, log_pos)) = self.read_header_in(stored, tags, tag, bucket)? else {
            return Ok(None);
        };
        let missing = |part: Part| StoreError::DamagedLog {
            name: self.blob_name_in(stored, tags, part, tag, bucket),
            detail: "missing".into(),
        };
        let set = SketchSet {
            bloom: self
                .read_part_in::<BloomFilter>(stored, tags, Part::Bloom, tag, bucket)?
                .ok_or_else(|| missing(Part::Bloom))?,
            hll: self
                .read_part_in::<HyperLogLog>(stored, tags, Part::Hll, tag, bucket)?
                .ok_or_else(|| missing(Part::Hll))?,
            theta: self
                .read_part_in::<Theta>(stored, tags, Part::Theta, tag, bucket)?
                .ok_or_else(|| missing(Part::Theta))?,
            cms: self
                .read_part_in::<CountMin>(stored, tags, Part::CountMin, tag, bucket)?
                .ok_or_else(|| missing(Part::CountMin))?,
            reservoir: self
                .read_reservoir_in(stored, tags, tag, bucket)?
                .ok_or_else(|| missing(Part::Reservoir))?,
            events,
        };
        set.validate().map_err(|source| StoreError::Damaged {
            name: self.blob_name_in(stored, tags, Part::Header, tag, bucket),
            source,
        })?;
        Ok(Some((set, log_pos)))
    }
}

/// Decodes a stored reservoir: of [`Sample`]s, or of whole events as format-3 stores wrote them
/// (read as [`Sample::Kept`]). A reservoir with no events has the same bytes in both; any other
/// blob of one layout fails to decode in the other (bincode rejects trailing bytes, and the two
/// differ by a variant tag per event), so the fallback cannot misread one as the other.
pub(crate) fn decode_reservoir(
    bytes: &[u8],
) -> std::result::Result<Reservoir<Sample>, SketchError> {
    match Reservoir::<Sample>::decode(bytes) {
        Ok(r) => Ok(r),
        Err(current) => match Reservoir::<Event>::decode(bytes) {
            Ok(old) => Ok(old.map(|e| Sample::Kept(Box::new(e)))),
            Err(_) => Err(current),
        },
    }
}
