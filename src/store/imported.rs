//! Sketches imported from Apache DataSketches images ([`Store::import_sketch`]): an HLL or
//! compact Theta image, built by another worker or engine, merged into one set and bucket.
//!
//! The image's sketch goes into the set's HLL or Theta part, so every query that merges those
//! parts (DISTINCT, and Theta's AND / EXCEPT / NOT) counts its items with the set's own. The
//! union of everything imported into a set is also kept beside it, under its `X` key (and
//! carried into a merged store's set by `merge`), for three readers: `repair`, which rebuilds
//! a set from the raw log (where imported items never were) and adds it back; the planner,
//! which must not answer DISTINCT from the raw log for a range holding imported items
//! ([`Store::imported_sets`]); and `check`, which names a damaged one. The other families (Bloom, Count-Min, exact counts, reservoirs) and the raw log know
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
use super::state::{ImportedSets, State, TagDict};
use super::{codec, kinds, Snapshot, Store};
use crate::sketch::datasketches::{self, HllMode, HllWidth, Image};
use crate::sketch::{Estimate, HyperLogLog, Sketch, SketchError, SketchKind, Theta};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
            Incoming::Hll(h) => union_into(&mut self.hll, h)?,
            Incoming::Theta(t) => union_into(&mut self.theta, t)?,
        }
        self.images += 1;
        Ok(())
    }

    /// Adds the sketches of another set's record (a merged store's set holds both).
    pub(super) fn merge(&mut self, other: &ImportedRecord) -> std::result::Result<(), SketchError> {
        if let Some(h) = &other.hll {
            union_into(&mut self.hll, h)?;
        }
        if let Some(t) = &other.theta {
            union_into(&mut self.theta, t)?;
        }
        self.images += other.images;
        Ok(())
    }

    /// The record as its `X` key stores it.
    pub(super) fn encode(&self) -> std::result::Result<Vec<u8>, SketchError> {
        codec::encode(kinds::IMPORTED.blob, self).map_err(|source| SketchError::Codec {
            kind: SketchKind::SketchSet,
            source,
        })
    }

    pub(super) fn families(&self) -> ImportedSets {
        ImportedSets {
            hll: usize::from(self.hll.is_some()),
            theta: usize::from(self.theta.is_some()),
        }
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

/// `theirs` merged into `mine`, or `mine` made a copy of it if there was none.
fn union_into<S: Sketch + Clone>(
    mine: &mut Option<S>,
    theirs: &S,
) -> std::result::Result<(), SketchError> {
    match mine {
        Some(m) => m.merge(theirs),
        None => {
            *mine = Some(theirs.clone());
            Ok(())
        }
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
                        if h.mode == HllMode::List {
                            "list"
                        } else {
                            "set"
                        },
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
                TagDict::intern_pair(&mut st.tags, field, value)
            }
        };
        let bucket = self.config.bucket.bucket_of(time);
        let key = (tag, bucket);
        let undo_tags = |st: &mut State| Arc::make_mut(&mut st.tags).truncate(tags_before);
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
            .and_then(|()| record.encode())
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
            return Err(StoreError::Query(
                "the set to import into was not loaded".into(),
            ));
        };
        let before = (
            active.set.hll.clone(),
            active.set.theta.clone(),
            active.dirty,
        );
        let merged = match &incoming {
            Incoming::Hll(h) => Arc::make_mut(&mut active.set).hll.merge(h),
            Incoming::Theta(t) => Arc::make_mut(&mut active.set).theta.merge(t),
        };
        active.dirty = true;
        active.last_used = clock;
        let set_estimate = match &incoming {
            Incoming::Hll(_) => active.set.hll.estimate(),
            Incoming::Theta(_) => active.set.theta.estimate(),
        };
        let before_modified = Arc::make_mut(&mut st.modified).insert(key, clock);
        // Before the checkpoint, which publishes: a snapshot must never show the imported
        // sketch without the mark that keeps exact answers off its set.
        let before_imported = st.imported.insert(key, record.families());
        let written = merged.map_err(damaged).and_then(|()| {
            self.checkpoint_with(&mut st, vec![(keys::imported(tag, bucket).to_vec(), blob)])
        });
        if let Err(e) = written {
            // Nothing of this import is durable (the batch is atomic): memory goes back to
            // what the disk holds.
            if was_loaded {
                if let Some(active) = st.sets.get_mut(&key) {
                    let set = Arc::make_mut(&mut active.set);
                    (set.hll, set.theta, active.dirty) = before;
                }
            } else {
                st.sets.remove(&key);
            }
            let modified = Arc::make_mut(&mut st.modified);
            match before_modified {
                Some(c) => modified.insert(key, c),
                None => modified.remove(&key),
            };
            match before_imported {
                Some(f) => st.imported.insert(key, f),
                None => st.imported.remove(&key),
            };
            if st.tags.persisted as usize <= tags_before {
                undo_tags(&mut st);
            }
            return Err(e);
        }
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

    /// How many sets of `slice` with buckets overlapping `range` hold imported sketches: see
    /// [`Snapshot::imported_sets`].
    pub fn imported_sets(&self, slice: &Slice, range: &TimeRange) -> Result<ImportedSets> {
        Ok(self.snapshot()?.imported_sets(slice, range))
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

impl Snapshot<'_> {
    /// How many sets of `slice` with buckets overlapping `range` hold imported sketches (items
    /// the raw log does not have), by family.
    pub fn imported_sets(&self, slice: &Slice, range: &TimeRange) -> ImportedSets {
        let Some(tag) = self.known_tag(slice) else {
            return ImportedSets::default();
        };
        let width = self.store.config.bucket.millis();
        let overlaps = |b: i64| {
            range.start.is_none_or(|s| b.saturating_add(width) > s)
                && range.end.is_none_or(|e| b < e)
        };
        let mut out = ImportedSets::default();
        for (_, &f) in self
            .view
            .imported
            .range((tag, i64::MIN)..=(tag, i64::MAX))
            .filter(|&(&(_, b), _)| overlaps(b))
        {
            out += f;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::wallet_address;
    use crate::hash::murmur;
    use crate::sketch::datasketches::{hll_image, theta_image, HllWidth};
    use crate::store::check::Recovery;
    use crate::store::test_support::*;

    const DAY0: i64 = 1_764_547_200_000;

    fn hll_of(p: u8, items: impl IntoIterator<Item = String>) -> HyperLogLog {
        let mut h = HyperLogLog::new(p).expect("p");
        for w in items {
            h.update_murmur(murmur(w.as_bytes()));
        }
        h
    }

    fn theta_of(items: impl IntoIterator<Item = String>) -> Theta {
        let mut t = Theta::new(4096).expect("k");
        for w in items {
            t.update_murmur(murmur(w.as_bytes()));
        }
        t
    }

    fn whole_hll(store: &Store) -> Vec<u8> {
        store
            .merged_hll(&Slice::Whole, &TimeRange::all())
            .expect("hll")
            .sketch
            .expect("events")
            .register_values()
    }

    /// An image imported at lg_k = p makes the set's registers exactly those of one sketch of
    /// the native and the imported items (HLL union is lossless); it is durable without a
    /// flush, is counted by `imported_sets`, and a set rebuilt by repair gets it back.
    #[test]
    fn an_imported_hll_is_merged_durable_and_survives_repair() {
        let mem = crate::store::MemEngine::new();
        let store = Store::create_with(Box::new(mem.clone()), config()).expect("create");
        let native = events(0, 3_000);
        store.ingest_batch(&native).expect("ingest");
        store.flush().expect("flush");
        // A merge read now is cached; the import must invalidate it.
        let native_only = whole_hll(&store);
        let items: Vec<String> = (0..20_000).map(|i| wallet_address(77, i)).collect();
        let image = hll_image(&hll_of(16, items.clone()), HllWidth::Hll6);
        let done = store
            .import_sketch(&Slice::Whole, DAY0 + 5, &image)
            .expect("import");
        assert_eq!(done.family, SketchKind::HyperLogLog);
        assert!(
            done.image.contains("lg_k 16 folded to p = 14"),
            "{}",
            done.image
        );
        let all = native.iter().map(|e| e.item.clone()).chain(items.clone());
        let want = hll_of(14, all).register_values();
        assert_ne!(native_only, want);
        assert_eq!(whole_hll(&store), want);
        let day = TimeRange::between(DAY0, DAY0 + 86_400_000);
        assert_eq!(
            store.imported_sets(&Slice::Whole, &day).expect("sets"),
            ImportedSets { hll: 1, theta: 0 }
        );
        let next = TimeRange::between(DAY0 + 86_400_000, DAY0 + 2 * 86_400_000);
        assert_eq!(
            store.imported_sets(&Slice::Whole, &next).expect("sets"),
            ImportedSets::default()
        );
        assert_eq!(
            store
                .imported_sets(&Slice::tag("chain", "a"), &day)
                .expect("sets"),
            ImportedSets::default()
        );
        // Durable on return: a crash now loses nothing.
        let survived = mem.crash(0);
        drop(store);
        let store = Store::open_with(Box::new(survived)).expect("reopen");
        assert_eq!(whole_hll(&store), want);
        assert_eq!(
            store.imported_sets(&Slice::Whole, &day).expect("sets"),
            ImportedSets { hll: 1, theta: 0 }
        );
        assert!(store.check().expect("check").damaged.is_empty());
        // The set is lost: repair rebuilds it from the log and adds the import back.
        let bucket = store.config.bucket.bucket_of(DAY0);
        poke(
            &store,
            &keys::sketch(keys::Part::Hll, keys::WHOLE, bucket),
            None,
        );
        let report = store.repair().expect("repair");
        assert!(report.remaining.is_empty(), "{:?}", report.remaining);
        assert!(
            report
                .rebuilt
                .iter()
                .any(|r| r.contains("1 imported sketch")),
            "{:?}",
            report.rebuilt
        );
        assert_eq!(whole_hll(&store), want);
        // A damaged record is named, and cannot be rebuilt from the log.
        poke(
            &store,
            &keys::imported(keys::WHOLE, bucket),
            Some(vec![1, 2, 3]),
        );
        let found = store.check().expect("check").damaged;
        assert!(
            found
                .iter()
                .any(|d| d.name.starts_with("imported sketches of bucket")
                    && matches!(d.recovery, Recovery::Unrecoverable { .. })),
            "{found:?}"
        );
    }

    /// A Theta image into a tag that had no events: the tag and set are created, and the
    /// set's Theta retains exactly the imported hashes trimmed to k.
    #[test]
    fn an_imported_theta_creates_its_tag_and_set() {
        let dir = tempdir("import-theta");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        let theirs = theta_of((0..30_000).map(|i| wallet_address(5, i)));
        let slice = Slice::tag("chain", "new");
        let done = store
            .import_sketch(&slice, DAY0, &theta_image(&theirs))
            .expect("import");
        assert!(done.image.contains("trimmed to k = 4096"), "{}", done.image);
        let got = store
            .merged_theta(&slice, &TimeRange::all())
            .expect("theta")
            .sketch
            .expect("the imported set");
        let all = theirs.retained_hashes();
        assert_eq!(got.retained_hashes(), all[..4096]);
        assert_eq!(got.theta64(), all[4096]);
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(
            store.tags().expect("tags"),
            vec!["chain:a", "chain:b", "chain:new"]
        );
        assert!(store.check().expect("check").damaged.is_empty());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Truncated, foreign-seeded, too coarse, or aimed at a field the store does not have:
    /// refused, with every stored byte and the in-memory tags as they were.
    #[test]
    fn a_bad_image_leaves_the_store_unchanged() {
        let dir = tempdir("import-bad");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 500)).expect("ingest");
        store.flush().expect("flush");
        store.checkpoint().expect("checkpoint");
        let before = entries(&store, b"");
        let good = hll_image(
            &hll_of(14, (0..5_000).map(|i| wallet_address(3, i))),
            HllWidth::Hll8,
        );
        let coarse = hll_image(
            &hll_of(12, (0..5_000).map(|i| wallet_address(3, i))),
            HllWidth::Hll8,
        );
        let mut other_seed = theta_image(&theta_of((0..50).map(|i| wallet_address(4, i))));
        other_seed[6] ^= 1;
        let new_tag = Slice::tag("chain", "z");
        let cases: Vec<(&Slice, &[u8], &str)> = vec![
            (&new_tag, &good[..good.len() - 1], "HLL_8 registers"),
            (
                &new_tag,
                &coarse,
                "lg_k 12, below this store's HLL precision p = 14",
            ),
            (&new_tag, &other_seed, "seed hash"),
            (&new_tag, &[], "empty"),
        ];
        let wrong_field = Slice::tag("token", "x");
        for (slice, image, says) in
            cases
                .into_iter()
                .chain([(&wrong_field, &good[..], "not a tag field")])
        {
            let err = store.import_sketch(slice, DAY0, image).expect_err(says);
            assert!(err.to_string().contains(says), "{err}");
            assert_eq!(entries(&store, b""), before, "{says}");
            assert_eq!(store.tags().expect("tags"), vec!["chain:a", "chain:b"]);
        }
        assert!(store.import_sketch(&Slice::Whole, i64::MAX, &good).is_err());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A format-4 store (no `X` keys) opens, is recorded in the current format, and takes
    /// imports.
    #[test]
    fn a_format_four_store_is_read_and_recorded_as_current() {
        // Not "format-4": the HLL layout test in `ops` has that directory, and unit tests run at
        // once in one process.
        let dir = tempdir("format-4-imports");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 1_000)).expect("ingest");
        let want = whole_hll(&store);
        let store = reopened_from_format(store, &dir, 4);
        assert_eq!(whole_hll(&store), want);
        assert!(store.check().expect("check").damaged.is_empty());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
