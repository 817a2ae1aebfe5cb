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
use crate::sketch::packed::{put_varint, unzigzag, zigzag, Bytes, Reader};
use crate::sketch::{
    BloomFilter, CountMin, HyperLogLog, Reservoir, ReservoirState, ScalableBloom, Sketch,
    SketchError, SketchKind, SketchSet, Theta,
};
use serde::{Deserialize, Serialize};

/// A set's stored header: how many events it holds and the log position it includes (every
/// event of this set with a sequence number below `log_pos` is in it).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(super) struct SetHeader {
    pub(super) events: u64,
    pub(super) log_pos: u64,
}

/// The header layout of a set stored *inline*: the header value holds the set's five parts
/// too, so a small set is one engine value instead of six. sled 0.34 pays per value written,
/// not per byte (it appends a delta to the value's leaf and rewrites the leaf every few
/// deltas): measured on 2026-12-05 with 56k sets of ~700 bytes, six values a set took 164 MB
/// of sled file for 39 MB of values and 3.1 s, one value a set 87 MB and 0.5 s; staged and
/// rolled forward as an import with many sets does, 301 MB and 10 s against 187 MB and 1.7 s.
/// Layout 1 (the frame's version) is a bare [`SetHeader`].
pub(super) const INLINE_LAYOUT: u16 = 2;

/// The most bytes a set's five encoded parts may take to be stored inline, well under one
/// engine value ([`super::engine::VALUE_MAX`]) so an inline set is never chunked. A set that
/// outgrows it is stored as six values from then on (see [`Store::put_set_in`]): most sets of
/// a tag with thousands of values hold a few events and stay inline, while a busy set's
/// megabyte Bloom filter is read without its Count-Min and reservoir.
pub(super) const INLINE_MAX: usize = 8 << 10;

/// The inline parts in the order an inline header stores them.
pub(super) const INLINE_PARTS: [Part; 5] = [
    Part::Bloom,
    Part::Hll,
    Part::Theta,
    Part::CountMin,
    Part::Reservoir,
];

/// A stored set header as read: its counts and, for a set stored inline, its parts' blobs
/// (each the family's own frame, as it would be under its own key) in [`INLINE_PARTS`] order.
pub(super) struct StoredHeader<'a> {
    pub(super) header: SetHeader,
    pub(super) inline: Option<[&'a [u8]; 5]>,
}

impl<'a> StoredHeader<'a> {
    /// The blob of `part` if the set is stored inline.
    pub(super) fn part(&self, part: Part) -> Option<&'a [u8]> {
        let i = INLINE_PARTS.iter().position(|&p| p == part)?;
        self.inline.map(|parts| parts[i])
    }
}

/// Encodes a set header, with the set's five part blobs (in [`INLINE_PARTS`] order) if it is
/// stored inline. Inline layout: events and log position (u64 LE each), then each part as a
/// varint length and its bytes, under one frame whose checksum covers them all.
pub(super) fn encode_header(
    header: SetHeader,
    inline: Option<&[Vec<u8>; 5]>,
) -> std::result::Result<Vec<u8>, codec::CodecError> {
    let Some(parts) = inline else {
        return codec::encode(kinds::META.blob, &header);
    };
    let mut head = Vec::with_capacity(16 + 5 * 3);
    head.extend_from_slice(&header.events.to_le_bytes());
    head.extend_from_slice(&header.log_pos.to_le_bytes());
    let mut lens: Vec<Vec<u8>> = Vec::with_capacity(5);
    for p in parts {
        let mut l = Vec::with_capacity(3);
        put_varint(&mut l, p.len() as u64);
        lens.push(l);
    }
    let mut pieces: Vec<&[u8]> = vec![&head];
    for (l, p) in lens.iter().zip(parts) {
        pieces.push(l);
        pieces.push(p);
    }
    codec::frame_versioned(kinds::META.blob, INLINE_LAYOUT, &pieces)
}

/// Reads a set header of either layout; an inline one's parts are returned unread (each is
/// checked by its own frame when decoded).
pub(super) fn decode_header(bytes: &[u8]) -> std::result::Result<StoredHeader<'_>, String> {
    let (layout, payload) =
        codec::unframe_any(kinds::META.blob, INLINE_LAYOUT, bytes).map_err(|e| e.to_string())?;
    if layout != INLINE_LAYOUT {
        let header: SetHeader =
            codec::decode(kinds::META.blob, bytes).map_err(|e| e.to_string())?;
        return Ok(StoredHeader {
            header,
            inline: None,
        });
    }
    let mut r = Reader::new(payload);
    let mut u64_at = || -> std::result::Result<u64, String> {
        let b: [u8; 8] = r.take(8)?.try_into().map_err(|_| "cut short".to_string())?;
        Ok(u64::from_le_bytes(b))
    };
    let header = SetHeader {
        events: u64_at()?,
        log_pos: u64_at()?,
    };
    let mut parts: [&[u8]; 5] = [&[]; 5];
    for (slot, part) in parts.iter_mut().zip(INLINE_PARTS) {
        let len = r.len()?;
        *slot = r
            .take(len)
            .map_err(|e| format!("inline {} part: {e}", part.name()))?;
    }
    if !r.is_empty() {
        return Err(format!("{} bytes after the inline parts", r.remaining()));
    }
    Ok(StoredHeader {
        header,
        inline: Some(parts),
    })
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

    /// Reads one stored part with `decode`, naming the part if it is damaged: from the set's
    /// header if the set is stored inline, else from the part's own key.
    fn read_decoded_in<T>(
        &self,
        stored: Stored,
        tags: &TagDict,
        part: Part,
        tag: u32,
        bucket: i64,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, SketchError>,
    ) -> Result<Option<T>> {
        let Some(bytes) = self.engine.get(&stored.key(Part::Header, tag, bucket))? else {
            return self.decode_part_in(stored, tags, (tag, bucket), None, part, decode);
        };
        let h = self.decode_header_in(stored, tags, tag, bucket, &bytes)?;
        self.decode_part_in(stored, tags, (tag, bucket), Some(&h), part, decode)
    }

    /// Decodes `part` of a set whose header `h` was read: from inside it if the set is
    /// inline, else from the part's own key (`None` if that is absent), naming the part if
    /// it is damaged.
    fn decode_part_in<T>(
        &self,
        stored: Stored,
        tags: &TagDict,
        (tag, bucket): (u32, i64),
        h: Option<&StoredHeader<'_>>,
        part: Part,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, SketchError>,
    ) -> Result<Option<T>> {
        let owned;
        let bytes = match h.and_then(|h| h.part(part)) {
            Some(inline) => inline,
            None => match self.engine.get(&stored.key(part, tag, bucket))? {
                Some(value) => {
                    owned = value;
                    &owned[..]
                }
                None => return Ok(None),
            },
        };
        decode(bytes)
            .map(Some)
            .map_err(|source| StoreError::Damaged {
                name: self.blob_name_in(stored, tags, part, tag, bucket),
                source,
            })
    }

    /// [`decode_header`], naming the set's header if it is damaged.
    fn decode_header_in<'a>(
        &self,
        stored: Stored,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
        bytes: &'a [u8],
    ) -> Result<StoredHeader<'a>> {
        decode_header(bytes).map_err(|detail| StoreError::DamagedLog {
            name: self.blob_name_in(stored, tags, Part::Header, tag, bucket),
            detail,
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
        let h = self
            .decode_header_in(stored, tags, tag, bucket, &bytes)?
            .header;
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
        let mut out: Vec<(u32, i64)> = Self::stored_sets(&self.engine)?.into_iter().collect();
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
        let (set, log_pos, split) = match read {
            Some((mut set, log_pos, split)) => {
                if let Some(seed) = self.set_seed(tag, bucket, log_pos) {
                    set.reservoir.reseed(seed);
                }
                (set, log_pos, split)
            }
            None => (self.empty_set(tag, bucket)?, 0, false),
        };
        let active = Active {
            set: std::sync::Arc::new(set),
            log_pos,
            split,
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
        let read = self.read_set_in(Stored::Committed, tags, tag, bucket)?;
        Ok(read.map(|(set, log_pos, _)| (set, log_pos)))
    }

    /// [`Store::read_set`] from committed or staged keys, also saying whether the set is
    /// stored as six values (`true`) rather than inline in its header.
    fn read_set_in(
        &self,
        stored: Stored,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(SketchSet<Sample>, u64, bool)>> {
        let Some(bytes) = self.engine.get(&stored.key(Part::Header, tag, bucket))? else {
            return Ok(None);
        };
        let h = self.decode_header_in(stored, tags, tag, bucket, &bytes)?;
        let split = h.inline.is_none();
        // Every part from the one header read, or from its own key.
        let missing = |part: Part| StoreError::DamagedLog {
            name: self.blob_name_in(stored, tags, part, tag, bucket),
            detail: "missing".into(),
        };
        let (at, from) = ((tag, bucket), Some(&h));
        let set = SketchSet {
            bloom: self
                .decode_part_in(stored, tags, at, from, Part::Bloom, BloomFilter::decode)?
                .ok_or_else(|| missing(Part::Bloom))?,
            hll: self
                .decode_part_in(stored, tags, at, from, Part::Hll, HyperLogLog::decode)?
                .ok_or_else(|| missing(Part::Hll))?,
            theta: self
                .decode_part_in(stored, tags, at, from, Part::Theta, Theta::decode)?
                .ok_or_else(|| missing(Part::Theta))?,
            cms: self
                .decode_part_in(stored, tags, at, from, Part::CountMin, CountMin::decode)?
                .ok_or_else(|| missing(Part::CountMin))?,
            reservoir: self
                .decode_part_in(stored, tags, at, from, Part::Reservoir, decode_reservoir)?
                .ok_or_else(|| missing(Part::Reservoir))?,
            events: h.header.events,
        };
        set.validate().map_err(|source| StoreError::Damaged {
            name: self.blob_name_in(stored, tags, Part::Header, tag, bucket),
            source,
        })?;
        Ok(Some((set, h.header.log_pos, split)))
    }
}

/// The layout of a stored reservoir of [`Sample`]s. 2: the samples in slot order as runs of
/// consecutive logged sequence numbers, each a zig-zag varint delta from the previous one (the
/// first from 0), and runs of kept events; most deltas take one to three bytes where layout 1
/// (the reservoir's own, [`Sketch::encode`]) took 12 a sample (a variant tag and 8 bytes). 1 is
/// still read, and so are format 3's reservoirs of whole events (see [`decode_reservoir`]).
pub(crate) const SAMPLES_VERSION: u16 = 2;

/// A stored reservoir of samples (layout 2), as read.
#[derive(Deserialize)]
struct StoredSamples {
    state: ReservoirState,
    runs: Vec<SampleRun>,
}

/// Consecutive samples of one kind. Never empty.
#[derive(Deserialize)]
enum SampleRun {
    /// Sequence numbers as zig-zag varint deltas, each from the previous logged sample's
    /// (across kept runs), the reservoir's first from 0.
    Logged(Bytes),
    Kept(Vec<Event>),
}

/// [`StoredSamples`] as written, borrowing the events: the same fields and variants in the
/// same order, which the round-trip tests hold it to.
#[derive(Serialize)]
#[serde(rename = "StoredSamples")]
struct StoredSamplesOut<'a> {
    state: ReservoirState,
    runs: Vec<SampleRunOut<'a>>,
}

#[derive(Serialize)]
#[serde(rename = "SampleRun")]
enum SampleRunOut<'a> {
    Logged(Bytes),
    Kept(Vec<&'a Event>),
}

/// Encodes a set's reservoir in layout [`SAMPLES_VERSION`]. Slot order is kept as it is:
/// Algorithm R replaces a sample by its slot index, so sorting the seqs to shrink the deltas
/// would change which sample a later event replaces.
pub(crate) fn encode_reservoir(r: &Reservoir<Sample>) -> std::result::Result<Vec<u8>, SketchError> {
    let mut runs: Vec<SampleRunOut<'_>> = Vec::new();
    let mut prev = 0u64;
    for sample in r.items() {
        match sample {
            Sample::Logged(seq) => {
                if !matches!(runs.last(), Some(SampleRunOut::Logged(_))) {
                    runs.push(SampleRunOut::Logged(Bytes(Vec::new())));
                }
                if let Some(SampleRunOut::Logged(b)) = runs.last_mut() {
                    // Wrapping, so that every pair of seqs has a delta and reads back.
                    put_varint(&mut b.0, zigzag(seq.wrapping_sub(prev) as i64));
                }
                prev = *seq;
            }
            Sample::Kept(event) => {
                if !matches!(runs.last(), Some(SampleRunOut::Kept(_))) {
                    runs.push(SampleRunOut::Kept(Vec::new()));
                }
                if let Some(SampleRunOut::Kept(events)) = runs.last_mut() {
                    events.push(event);
                }
            }
        }
    }
    let stored = StoredSamplesOut {
        state: r.state(),
        runs,
    };
    codec::encode_versioned(SketchKind::Reservoir as u8, SAMPLES_VERSION, &stored).map_err(
        |source| SketchError::Codec {
            kind: SketchKind::Reservoir,
            source,
        },
    )
}

/// Decodes a stored reservoir: layout 2 ([`encode_reservoir`]), layout 1 (the reservoir's own
/// encoding of [`Sample`]s), or whole events as format-3 stores wrote them (read as
/// [`Sample::Kept`]). A layout-1 reservoir with no events has the same bytes in both of the
/// last two; any other blob of one fails to decode in the other (bincode rejects trailing
/// bytes, and the two differ by a variant tag per event), so the fallback cannot misread one as
/// the other.
pub(crate) fn decode_reservoir(
    bytes: &[u8],
) -> std::result::Result<Reservoir<Sample>, SketchError> {
    let kind = SketchKind::Reservoir;
    let codec_error = |source| SketchError::Codec { kind, source };
    let layout_1 = <Reservoir<Sample> as Sketch>::VERSION;
    match codec::decode_versioned::<StoredSamples>(kind as u8, SAMPLES_VERSION, bytes) {
        Ok(stored) => samples_of(stored)
            .map_err(|detail| codec_error(codec::CodecError::Malformed(detail)))
            .and_then(|(state, items)| Reservoir::from_state(state, items)),
        Err(codec::CodecError::UnsupportedVersion { found, .. }) if found == layout_1 => {
            match Reservoir::<Sample>::decode(bytes) {
                Ok(r) => Ok(r),
                Err(current) => match Reservoir::<Event>::decode(bytes) {
                    Ok(old) => Ok(old.map(|e| Sample::Kept(Box::new(e)))),
                    Err(_) => Err(current),
                },
            }
        }
        Err(source) => Err(codec_error(source)),
    }
}

/// The samples of a layout-2 reservoir, in slot order.
fn samples_of(stored: StoredSamples) -> std::result::Result<(ReservoirState, Vec<Sample>), String> {
    // Exactly the slots held, as a decoded layout-1 reservoir had: a varint ends at each byte
    // below 0x80.
    let n = stored
        .runs
        .iter()
        .map(|run| match run {
            SampleRun::Logged(b) => b.0.iter().filter(|&&x| x < 0x80).count(),
            SampleRun::Kept(events) => events.len(),
        })
        .sum();
    let mut items = Vec::with_capacity(n);
    let mut prev = 0u64;
    for run in stored.runs {
        match run {
            SampleRun::Logged(b) => {
                if b.0.is_empty() {
                    return Err("an empty run of logged samples".into());
                }
                let mut r = Reader::new(&b.0);
                while !r.is_empty() {
                    prev = prev.wrapping_add(unzigzag(r.varint()?) as u64);
                    items.push(Sample::Logged(prev));
                }
            }
            SampleRun::Kept(events) => {
                if events.is_empty() {
                    return Err("an empty run of kept samples".into());
                }
                items.extend(events.into_iter().map(|e| Sample::Kept(Box::new(e))));
            }
        }
    }
    Ok((stored.state, items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::CodecError;

    fn event(i: u64) -> Event {
        let mut e = Event::new(
            1_700_000_000_000 + i as i64,
            format!("0x{i:040x}"),
            &[("chain", "a")],
        );
        e.extra = format!("{{\"n\":{i}}}");
        e
    }

    /// A reservoir of `capacity` offered `events` samples, the `i`th `sample(i)`.
    fn offered(
        capacity: usize,
        events: u64,
        seed: u64,
        sample: impl Fn(u64) -> Sample,
    ) -> Reservoir<Sample> {
        let mut r = Reservoir::with_seed(capacity, seed);
        for i in 0..events {
            r.offer_with(|| sample(i));
        }
        r
    }

    fn reservoirs() -> Vec<Reservoir<Sample>> {
        let logged = |i| Sample::Logged(3 * i + 7);
        let kept = |i| Sample::Kept(Box::new(event(i)));
        // Runs of each kind, and seqs far apart in both directions.
        let mixed = |i: u64| match i % 7 {
            0 | 1 => kept(i),
            2 => Sample::Logged(u64::MAX - i),
            _ => logged(i),
        };
        vec![
            offered(0, 0, 1, logged),
            offered(0, 5, 1, logged),
            offered(50, 0, 1, logged),
            offered(50, 30, 1, logged),
            offered(50, 5_000, 2, logged),
            offered(50, 5_000, 3, kept),
            offered(50, 5_000, 4, mixed),
            offered(50, 30, 5, mixed),
            offered(3, 3, 6, |i| {
                Sample::Logged([u64::MAX, 0, u64::MAX][i as usize])
            }),
        ]
    }

    #[test]
    fn reservoirs_of_samples_round_trip_in_slot_order() {
        for r in reservoirs() {
            let blob = encode_reservoir(&r).expect("encode");
            assert_eq!(u16::from_le_bytes([blob[4], blob[5]]), SAMPLES_VERSION);
            let back = decode_reservoir(&blob).expect("decode");
            assert_eq!(back, r, "{:?}", r.state());
            // Memory as a reservoir decoded from layout 1 held: each slot taken, no spare.
            let old = decode_reservoir(&r.encode().expect("encode")).expect("decode");
            assert_eq!(back.size_bytes(), old.size_bytes());
        }
    }

    /// A decoded reservoir goes on sampling exactly as the live one, given the same seed:
    /// the order of its slots is the live one's.
    #[test]
    fn a_decoded_reservoir_replaces_the_same_slots() {
        let mut live = offered(50, 5_000, 7, Sample::Logged);
        let mut back = decode_reservoir(&encode_reservoir(&live).expect("encode")).expect("decode");
        live.reseed(8);
        back.reseed(8);
        for i in 5_000..20_000 {
            live.offer(Sample::Logged(i));
            back.offer(Sample::Logged(i));
        }
        assert_eq!(back, live);
    }

    #[test]
    fn layout_one_reservoirs_still_read() {
        for r in reservoirs() {
            let old = r.encode().expect("the reservoir's own encoding");
            assert_eq!(u16::from_le_bytes([old[4], old[5]]), 1);
            assert_eq!(decode_reservoir(&old).expect("decode"), r);
        }
    }

    /// A full reservoir of 1,000 over a day of 20,000 events: its seqs, in slot order, lie
    /// within the bucket's span, so each delta takes at most three bytes (zig-zag below
    /// 2^21), against 12 a sample in layout 1. One filling up keeps arrival order: one byte a
    /// sample while events of the set are less than 64 seqs apart.
    #[test]
    fn logged_samples_take_a_few_bytes_each() {
        let n = 1_000u64;
        let base = 1_000_000u64;
        let full = offered(n as usize, 20_000, 9, |i| Sample::Logged(base + i));
        let filling = offered(n as usize, n, 9, |i| Sample::Logged(base + 3 * i));
        let overhead = encode_reservoir(&offered(n as usize, 0, 9, Sample::Logged))
            .expect("encode")
            .len() as u64
            // One run: its variant tag and the byte string's length.
            + 4
            + 8;
        for (r, per_sample) in [(&full, 3), (&filling, 1)] {
            let new = encode_reservoir(r).expect("encode").len() as u64;
            // The first delta is from 0: up to 10 bytes instead of `per_sample`.
            assert!(
                new <= overhead + per_sample * n + 10,
                "{new} bytes for {n} samples"
            );
            let old = r.encode().expect("encode").len() as u64;
            assert!(old >= 12 * n, "layout 1: {old} bytes");
        }
    }

    #[test]
    fn damaged_reservoirs_are_errors_never_panics() {
        for r in reservoirs() {
            let blob = encode_reservoir(&r).expect("encode");
            for i in 0..blob.len() {
                let mut bad = blob.clone();
                bad[i] ^= 0x5a;
                assert!(
                    decode_reservoir(&bad).is_err(),
                    "byte {i} of {:?}",
                    r.state()
                );
            }
            for len in 0..blob.len() {
                assert!(decode_reservoir(&blob[..len]).is_err(), "cut to {len}");
            }
        }
        // Valid frames around lying payloads.
        let frame = |state: ReservoirState, runs: Vec<SampleRunOut<'_>>| {
            codec::encode_versioned(
                SketchKind::Reservoir as u8,
                SAMPLES_VERSION,
                &StoredSamplesOut { state, runs },
            )
            .expect("encode")
        };
        let state = |capacity, seen| ReservoirState {
            capacity,
            seen,
            w: 1.0,
            next: 0,
        };
        let kept = event(1);
        let bad = [
            // A varint cut short.
            frame(state(5, 1), vec![SampleRunOut::Logged(Bytes(vec![0x80]))]),
            // Empty runs are never written.
            frame(state(5, 0), vec![SampleRunOut::Logged(Bytes(Vec::new()))]),
            frame(state(5, 0), vec![SampleRunOut::Kept(Vec::new())]),
            // More samples than the state allows.
            frame(state(5, 1), vec![SampleRunOut::Logged(Bytes(vec![2, 2]))]),
            frame(state(1, 1), vec![SampleRunOut::Kept(vec![&kept, &kept])]),
        ];
        for blob in &bad {
            let err = decode_reservoir(blob).expect_err("refused");
            assert!(
                matches!(
                    err,
                    SketchError::Corrupt { .. }
                        | SketchError::Codec {
                            source: CodecError::Malformed(_),
                            ..
                        }
                ),
                "{err}"
            );
        }
        // Any byte of a valid frame's payload changed: an error or a reservoir, never a panic.
        let r = &reservoirs()[6];
        let blob = encode_reservoir(r).expect("encode");
        let payload = codec::unframe_any(SketchKind::Reservoir as u8, SAMPLES_VERSION, &blob)
            .expect("unframe")
            .1
            .to_vec();
        for at in 0..payload.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut p = payload.clone();
                p[at] = value;
                let framed =
                    codec::frame_versioned(SketchKind::Reservoir as u8, SAMPLES_VERSION, &[&p])
                        .expect("frame");
                let _ = decode_reservoir(&framed);
            }
        }
    }
    fn blobs() -> [Vec<u8>; 5] {
        [vec![1; 300], vec![], vec![2; 5], vec![3; 200], vec![4; 130]]
    }

    #[test]
    fn set_headers_of_both_layouts_read_back_and_damage_is_refused() {
        let header = SetHeader {
            events: 1_234,
            log_pos: 98_765,
        };
        let plain = encode_header(header, None).expect("encode");
        let back = decode_header(&plain).expect("decode");
        assert_eq!((back.header.events, back.header.log_pos), (1_234, 98_765));
        assert!(back.inline.is_none());
        let parts = blobs();
        let inline = encode_header(header, Some(&parts)).expect("encode");
        let back = decode_header(&inline).expect("decode");
        assert_eq!((back.header.events, back.header.log_pos), (1_234, 98_765));
        for (part, blob) in INLINE_PARTS.into_iter().zip(&parts) {
            assert_eq!(back.part(part), Some(&blob[..]), "{}", part.name());
        }
        assert_eq!(back.part(Part::Header), None);
        // The plain header's frame and u64s, and five varint lengths (300, 200 and 130 take
        // two bytes, 0 and 5 one).
        let framing = inline.len() - parts.iter().map(Vec::len).sum::<usize>();
        assert_eq!(framing, plain.len() + 8, "{framing}");
        for i in 0..inline.len() {
            let mut bad = inline.clone();
            bad[i] ^= 0x21;
            assert!(decode_header(&bad).is_err(), "byte {i}");
        }
        for cut in 0..inline.len() {
            assert!(decode_header(&inline[..cut]).is_err(), "cut at {cut}");
        }
    }

    use crate::store::test_support::{config, entries, events, reopened_from_format, tempdir};
    use crate::store::{Slice, TimeRange, WriteBatch};

    const DAY0: i64 = 1_764_547_200_000;

    /// The parts of (tag, DAY0) stored under their own keys, by part byte.
    fn own_keys(store: &Store, tag: u32) -> Vec<u8> {
        entries(store, &[keys::SKETCH])
            .into_iter()
            .filter(|(k, _)| keys::parse_sketch(k) == Some((tag, DAY0)))
            .map(|(k, _)| k[1])
            .collect()
    }

    fn counts(store: &Store) -> Vec<u64> {
        [
            Slice::Whole,
            Slice::tag("chain", "a"),
            Slice::tag("chain", "b"),
        ]
        .iter()
        .map(|s| store.count(s, &TimeRange::all()).expect("count").0)
        .collect()
    }

    #[test]
    fn small_sets_are_one_value_and_outgrown_ones_six() {
        let dir = tempdir("inline-sets");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 40)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        for tag in [keys::WHOLE, 1, 2] {
            assert_eq!(own_keys(&store, tag), vec![Part::Header as u8], "tag {tag}");
        }
        let report = store.check().expect("check");
        assert!(report.is_clean(), "{:?}", report.damaged);
        // Three keys, six parts each checked.
        assert_eq!((report.checked.sets, report.checked.parts), (3, 18));
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(counts(&store), vec![40, 20, 20]);
        // 3,000 more wallets: exact Count-Min counts alone outgrow INLINE_MAX.
        store.ingest_batch(&events(40, 3_000)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        for tag in [keys::WHOLE, 1, 2] {
            let mut own = own_keys(&store, tag);
            own.sort_unstable();
            let mut all: Vec<u8> = Part::ALL.iter().map(|&p| p as u8).collect();
            all.sort_unstable();
            assert_eq!(own, all, "tag {tag}");
            let header = store
                .engine
                .get(&keys::sketch(Part::Header, tag, DAY0))
                .expect("get")
                .expect("stored");
            assert!(decode_header(&header).expect("decode").inline.is_none());
        }
        assert!(store.check().expect("check").is_clean());
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(counts(&store), vec![3_040, 1_520, 1_520]);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A format-6 store keeps every set as six values. It is read as it is, checks clean, and
    /// a set of it that changes stays six values, rewritten whole (its Count-Min total follows
    /// its header), while a new small set is stored inline.
    #[test]
    fn a_format_six_stores_split_sets_are_read_and_stay_split() {
        let dir = tempdir("format-6-sets");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 40)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        {
            // Every set rewritten as format 6 wrote it.
            let st = store.lock().expect("lock");
            let mut batch = WriteBatch::default();
            for (&set, active) in &st.sets {
                let split = store
                    .put_set(&mut batch, &st.tags, set, &active.set, active.log_pos, true)
                    .expect("put");
                assert!(split);
            }
            store.engine.apply(batch).expect("apply");
            store.engine.sync().expect("sync");
        }
        assert_eq!(own_keys(&store, 1).len(), 6);
        let store = reopened_from_format(store, &dir, 6);
        assert_eq!(counts(&store), vec![40, 20, 20]);
        assert!(store.check().expect("check").is_clean());
        let mut more = events(40, 2);
        more[1] = Event::new(more[1].time, "0xnew", &[("chain", "c")]);
        store.ingest_batch(&more).expect("ingest");
        store.checkpoint().expect("checkpoint");
        assert_eq!(own_keys(&store, 1).len(), 6, "chain:a stays split");
        let cms = store
            .engine
            .get(&keys::sketch(Part::CountMin, 1, DAY0))
            .expect("get")
            .expect("stored");
        assert_eq!(CountMin::decode(&cms).expect("decode").total(), 21);
        assert_eq!(
            own_keys(&store, 3),
            vec![Part::Header as u8],
            "chain:c is new"
        );
        assert!(store.check().expect("check").is_clean());
        assert_eq!(counts(&store), vec![42, 21, 20]);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
