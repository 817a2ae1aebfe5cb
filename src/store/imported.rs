//! Sketches imported from Apache DataSketches images ([`Store::import_sketch`]): an HLL or
//! compact Theta image, built by another worker or engine, merged into one set and bucket.
//!
//! The image's sketch goes into the set's HLL or Theta part, so every query that merges those
//! parts (DISTINCT, and Theta's AND / EXCEPT / NOT) counts its items with the set's own. The
//! union of everything imported into a set is also kept beside it, under its `X` key, for
//! three readers: `repair`, which rebuilds a set from the raw log (where imported items never
//! were) and adds it back; the planner, which must not answer DISTINCT from the raw log for a
//! range holding imported items ([`Store::imported_sets`]); and `check`, which names a damaged
//! one. The other families (Bloom, Count-Min, exact counts, reservoirs) and the raw log know
//! nothing of imported items.
//!
//! An import is all or nothing and durable on return: the set, the `X` record and the tag (if
//! new) are written by one checkpoint, one atomic batch, synced. An image that cannot be read
//! changes nothing.
//!
//! Owns: the `X` record and the import of one image. Must not: parse images (that is
//! `sketch::datasketches`).

use super::error::{Result, StoreError};
use super::keys;
use super::model::{self, Slice, TimeRange};
use super::state::{State, TagDict};
use super::{codec, kinds, Store};
use crate::sketch::datasketches::{self, HllMode, HllWidth, Image};
use crate::sketch::{Estimate, HyperLogLog, Sketch, SketchError, SketchKind, Theta};
use serde::{Deserialize, Serialize};

/// The union of the sketches imported into one set, as its `X` record stores it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct ImportedRecord {
    pub(super) hll: Option<HyperLogLog>,
    pub(super) theta: Option<Theta>,
    /// Images imported into the set.
    pub(super) images: u64,
}

/// One sketch read from an image, at the store's precision or nominal entries.
enum Incoming {
    Hll(HyperLogLog),
    Theta(Theta),
}

impl ImportedRecord {
    fn add(&mut self, s: &Incoming) -> std::result::Result<(), SketchError> {
        match s {
            Incoming::Hll(h) => match &mut self.hll {
                Some(mine) => mine.merge(h)?,
                None => self.hll = Some(h.clone()),
            },
            Incoming::Theta(t) => match &mut self.theta {
                Some(mine) => mine.merge(t)?,
                None => self.theta = Some(t.clone()),
            },
        }
        self.images += 1;
        Ok(())
    }

    fn validate(&self) -> std::result::Result<(), SketchError> {
        if let Some(h) = &self.hll {
            h.validate()?;
        }
        if let Some(t) = &self.theta {
            t.validate()?;
        }
        Ok(())
    }
}

/// What [`Store::import_sketch`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct SketchImport {
    /// `hll` or `theta`.
    pub family: SketchKind,
    /// The image, in words: `HLL_6 registers, lg_k 16 folded to p = 14`, `compact Theta,
    /// 5,000 hashes trimmed to k = 4096`.
    pub image: String,
    /// The set it went into, as [`Slice::name`] says it.
    pub set: String,
    /// The bucket's start and label.
    pub bucket: i64,
    pub bucket_label: String,
    /// The imported sketch's own estimate, at the store's precision.
    pub estimate: Estimate,
    /// The estimate of the set's sketch of that family in that bucket afterwards.
    pub set_estimate: Estimate,
}

impl Store {
    /// Imports an Apache DataSketches image (raw bytes; see
    /// [`datasketches::decode_input`] for base64) into the set `slice` of the bucket holding
    /// `time`: an HLL image (any mode and register width, `lg_k` at least the store's
    /// precision, folded to it) into the set's HLL, a compact Theta image (seed hash of the
    /// default seed 9001, trimmed to the store's k) into its Theta. All or nothing: on return
    /// it is durable; on an error nothing changed.
    pub fn import_sketch(&self, slice: &Slice, time: i64, image: &[u8]) -> Result<SketchImport> {
        model::check_time(time).map_err(|reason| StoreError::InvalidArgument {
            what: "bucket time",
            value: format!("{time} ms"),
            reason,
        })?;
        let sketches = &self.config.sketches;
        let (incoming, words) = match datasketches::read_image(image)? {
            Image::Hll(h) => {
                let p = sketches.hll_precision;
                let width = match h.width {
                    HllWidth::Hll4 => "HLL_4",
                    HllWidth::Hll6 => "HLL_6",
                    HllWidth::Hll8 => "HLL_8",
                };
                let words = match h.mode {
                    HllMode::List | HllMode::Set => format!(
                        "{width} image in {} mode, {} coupons (lg_k {})",
                        if h.mode == HllMode::List { "list" } else { "set" },
                        h.coupons.len(),
                        h.lg_k
                    ),
                    HllMode::Hll if h.lg_k > p => {
                        format!("{width} registers, lg_k {} folded to p = {p}", h.lg_k)
                    }
                    HllMode::Hll => format!("{width} registers, lg_k {}", h.lg_k),
                };
                (Incoming::Hll(h.to_sketch(p)?), words)
            }
            Image::Theta(t) => {
                let k = sketches.theta_nominal_entries;
                let lg_k = k.trailing_zeros() as u8;
                let sketch = t.to_sketch(lg_k)?;
                let form = if t.serial_version == 4 {
                    "compressed compact"
                } else if t.ordered {
                    "compact ordered"
                } else {
                    "compact unordered"
                };
                let trimmed = if sketch.retained() < t.hashes.len() {
                    format!(", trimmed to k = {k}")
                } else {
                    String::new()
                };
                let words = format!("{form} Theta image, {} hashes{trimmed}", t.hashes.len());
                (Incoming::Theta(sketch), words)
            }
        };
        let mut st = self.lock()?;
        if st.importing {
            return Err(StoreError::InsideImport {
                path: self.path.clone(),
            });
        }
        let tags_before = st.tags.names.len();
        let tag = match slice {
            Slice::Whole => keys::WHOLE,
            Slice::Tag { field, value } => {
                if !self.config.tag_fields.iter().any(|f| f == field) {
                    return Err(StoreError::InvalidArgument {
                        what: "tag",
                        value: slice.name(),
                        reason: format!(
                            "'{field}' is not a tag field of this store (tag fields: {})",
                            self.config.tag_fields.join(", ")
                        ),
                    });
                }
                if value.is_empty() || field.contains(':') {
                    return Err(StoreError::InvalidArgument {
                        what: "tag",
                        value: slice.name(),
                        reason: "expected FIELD:VALUE with a non-empty value".into(),
                    });
                }
                st.tags.intern_pair(field, value)
            }
        };
        let bucket = self.config.bucket.bucket_of(time);
        let key = (tag, bucket);
        let undo_tags = |st: &mut State| st.tags.truncate(tags_before);
        let mut record = match self.read_imported(&st.tags, tag, bucket) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                undo_tags(&mut st);
                return Err(e);
            }
        };
        let was_loaded = st.sets.contains_key(&key);
        if let Err(e) = self.ensure_loaded(&mut st, tag, bucket) {
            undo_tags(&mut st);
            return Err(e);
        }
        let set_name = self.blob_name(&st.tags, keys::Part::Header, tag, bucket);
        let damaged = |source| StoreError::Damaged {
            name: set_name.clone(),
            source,
        };
        let blob = record
            .add(&incoming)
            .and_then(|()| {
                codec::encode(kinds::IMPORTED.blob, &record).map_err(|source| SketchError::Codec {
                    kind: SketchKind::SketchSet,
                    source,
                })
            })
            .map_err(damaged);
        let blob = match blob {
            Ok(b) => b,
            Err(e) => {
                if !was_loaded {
                    st.sets.remove(&key);
                }
                undo_tags(&mut st);
                return Err(e);
            }
        };
        st.clock += 1;
        let clock = st.clock;
        let Some(active) = st.sets.get_mut(&key) else {
            undo_tags(&mut st);
            return Err(StoreError::Query("the set to import into was not loaded".into()));
        };
        let before = (active.set.hll.clone(), active.set.theta.clone(), active.dirty);
        let merged = match &incoming {
            Incoming::Hll(h) => active.set.hll.merge(h),
            Incoming::Theta(t) => active.set.theta.merge(t),
        };
        active.dirty = true;
        active.last_used = clock;
        let set_estimate = match &incoming {
            Incoming::Hll(_) => active.set.hll.estimate(),
            Incoming::Theta(_) => active.set.theta.estimate(),
        };
        let before_modified = st.modified.insert(key, clock);
        let written = merged.map_err(damaged).and_then(|()| {
            self.checkpoint_with(&mut st, vec![(keys::imported(tag, bucket).to_vec(), blob)])
        });
        if let Err(e) = written {
            // Nothing of this import is durable (the batch is atomic): memory goes back to
            // what the disk holds.
            if was_loaded {
                if let Some(active) = st.sets.get_mut(&key) {
                    (active.set.hll, active.set.theta, active.dirty) = before;
                }
            } else {
                st.sets.remove(&key);
            }
            match before_modified {
                Some(c) => st.modified.insert(key, c),
                None => st.modified.remove(&key),
            };
            if st.tags.persisted as usize <= tags_before {
                undo_tags(&mut st);
            }
            return Err(e);
        }
        st.imported.insert(key);
        let (family, estimate) = match &incoming {
            Incoming::Hll(h) => (SketchKind::HyperLogLog, h.estimate()),
            Incoming::Theta(t) => (SketchKind::Theta, t.estimate()),
        };
        Ok(SketchImport {
            family,
            image: words,
            set: slice.name(),
            bucket,
            bucket_label: self.config.bucket.label(bucket),
            estimate,
            set_estimate,
        })
    }

    /// How many sets of `slice` with buckets overlapping `range` hold imported sketches (items
    /// the raw log does not have).
    pub fn imported_sets(&self, slice: &Slice, range: &TimeRange) -> Result<usize> {
        let st = self.lock()?;
        let tag = match slice {
            Slice::Whole => keys::WHOLE,
            Slice::Tag { .. } => match st.tags.id(&slice.name()) {
                Some(id) => id,
                None => return Ok(0),
            },
        };
        let width = self.config.bucket.millis();
        let overlaps = |b: i64| {
            range.start.is_none_or(|s| b.saturating_add(width) > s)
                && range.end.is_none_or(|e| b < e)
        };
        Ok(st
            .imported
            .range((tag, i64::MIN)..=(tag, i64::MAX))
            .filter(|&&(_, b)| overlaps(b))
            .count())
    }

    /// The sketches imported into set (tag, bucket), checked; `None` if none were.
    pub(super) fn read_imported(
        &self,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<ImportedRecord>> {
        let Some(bytes) = self.engine.get(&keys::imported(tag, bucket))? else {
            return Ok(None);
        };
        decode_imported(&bytes)
            .map(Some)
            .map_err(|detail| StoreError::DamagedLog {
                name: self.imported_name(tags, tag, bucket),
                detail,
            })
    }

    /// A damage report's name for set (tag, bucket)'s imported sketches.
    pub(super) fn imported_name(&self, tags: &TagDict, tag: u32, bucket: i64) -> String {
        self.blob_name(tags, keys::Part::Header, tag, bucket)
            .replacen("header sketch", "imported sketches", 1)
    }
}

/// Decodes and checks an `X` record.
pub(super) fn decode_imported(bytes: &[u8]) -> std::result::Result<ImportedRecord, String> {
    let r: ImportedRecord =
        codec::decode(kinds::IMPORTED.blob, bytes).map_err(|e| e.to_string())?;
    r.validate().map_err(|e| e.to_string())?;
    Ok(r)
}
