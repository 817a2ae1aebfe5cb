//! Typed read operations for the query engine: merged sketches over a time range and a slice
//! (the whole stream or one tag value), membership with its compounded false-positive rate,
//! frequency with its bound, heavy hitters, weighted samples, exact counts and exact log scans.
//!
//! Every read is of a [`Snapshot`]: one consistent state, read without the writer's lock. The
//! [`Store`] methods of the same names read a snapshot taken for the call.
//!
//! Each merged answer says how many buckets it read and how many sketch bytes that took, so the
//! planner can report them. Merged sketches are cached (bounded in bytes) and reused while none
//! of their buckets has changed.

use super::keys::{self, Part};
use super::log::{self, ItemRef, LogEvent};
use super::snapshot::View;
use super::{Event, Result, Sample, Slice, Snapshot, Store, StoreError, TimeRange};
use crate::hash::ShaWords;
use crate::sketch::{
    BloomFilter, CountMin, HyperLogLog, Presence, Sketch, SketchSet, Theta, TopEntry,
};
use rand::Rng;
use std::collections::HashMap;

/// A sketch merged over buckets.
#[derive(Clone, Debug)]
pub struct Merged<S> {
    /// `None` when no bucket of the slice falls in the range.
    pub sketch: Option<S>,
    pub buckets: usize,
    pub bytes: usize,
}

/// The answer to "have we seen X?" over a range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Membership {
    /// `false` is certain; `true` means "maybe", or "yes" when `present` is set.
    pub maybe: bool,
    /// A filter read in its exact form holds the item's 64-bit fingerprint: "yes", wrong only
    /// if an absent item's fingerprint equals one of the `fingerprints` held.
    pub present: bool,
    /// Every filter read was in its exact form (false when none was read).
    pub all_exact: bool,
    /// Fingerprints held by the exact forms read: an absent item is reported present with
    /// probability at most `fingerprints / 2^64`.
    pub fingerprints: u64,
    /// The chance that an absent item is reported "maybe" (or "yes") by at least one filter
    /// read: `1 - Π(1 - fpr_i)`.
    pub false_positive_rate: f64,
    pub buckets: usize,
    pub bytes: usize,
    /// Whether any filter read is loaded past its capacity.
    pub saturated: bool,
}

/// The answer to "how often does X occur?" over a range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frequency {
    /// Never below the truth; the truth itself when `exact`.
    pub estimate: u64,
    /// The merged Count-Min is in its exact form: `estimate` is the count, `bound` 0.
    pub exact: bool,
    /// The estimate exceeds the truth by more than this with probability at most `delta`.
    pub bound: f64,
    pub delta: f64,
    /// Events in the range (N).
    pub total: u64,
    pub buckets: usize,
    pub bytes: usize,
}

/// A family the store merges over buckets and caches: where it lives in a set and in storage.
pub(crate) trait Mergeable: Sketch + Clone {
    const CACHE: CacheKind;
    const PART: Part;
    fn pick(set: &SketchSet<Sample>) -> &Self;
    fn wrap(self) -> Cached;
    fn unwrap(cached: &Cached) -> Option<&Self>;
}

impl Mergeable for HyperLogLog {
    const CACHE: CacheKind = CacheKind::Hll;
    const PART: Part = Part::Hll;
    fn pick(set: &SketchSet<Sample>) -> &Self {
        &set.hll
    }
    fn wrap(self) -> Cached {
        Cached::Hll(self)
    }
    fn unwrap(cached: &Cached) -> Option<&Self> {
        match cached {
            Cached::Hll(s) => Some(s),
            _ => None,
        }
    }
}

impl Mergeable for Theta {
    const CACHE: CacheKind = CacheKind::Theta;
    const PART: Part = Part::Theta;
    fn pick(set: &SketchSet<Sample>) -> &Self {
        &set.theta
    }
    fn wrap(self) -> Cached {
        Cached::Theta(self)
    }
    fn unwrap(cached: &Cached) -> Option<&Self> {
        match cached {
            Cached::Theta(s) => Some(s),
            _ => None,
        }
    }
}

impl Mergeable for CountMin {
    const CACHE: CacheKind = CacheKind::CountMin;
    const PART: Part = Part::CountMin;
    fn pick(set: &SketchSet<Sample>) -> &Self {
        &set.cms
    }
    fn wrap(self) -> Cached {
        Cached::CountMin(self)
    }
    fn unwrap(cached: &Cached) -> Option<&Self> {
        match cached {
            Cached::CountMin(s) => Some(s),
            _ => None,
        }
    }
}

/// Which family a cached merge is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CacheKind {
    Hll,
    Theta,
    CountMin,
}

#[derive(Clone)]
pub(crate) enum Cached {
    Hll(HyperLogLog),
    Theta(Theta),
    CountMin(CountMin),
}

impl Cached {
    fn size(&self) -> usize {
        match self {
            Cached::Hll(s) => s.size_bytes(),
            Cached::Theta(s) => s.size_bytes(),
            Cached::CountMin(s) => s.size_bytes(),
        }
    }
}

/// (family, tag, range start, range end, whether the merge leaves out the newest bucket).
type CacheKey = (CacheKind, u32, Option<i64>, Option<i64>, bool);

struct CacheEntry {
    buckets: Vec<i64>,
    /// The writer's clock in the view it was computed from: valid for a view at least as new
    /// in which none of its buckets changed after it.
    computed_at: u64,
    value: Cached,
    bytes_read: usize,
    last_used: u64,
}

/// Merged sketches keyed by (family, tag, range), bounded in bytes, least recently used out.
pub(crate) struct Cache {
    budget: usize,
    used: usize,
    /// Counts uses, for least-recently-used order.
    tick: u64,
    entries: HashMap<CacheKey, CacheEntry>,
}

impl Cache {
    pub(crate) fn new(budget: usize) -> Self {
        Cache {
            budget,
            used: 0,
            tick: 0,
            entries: HashMap::new(),
        }
    }

    /// Bytes of merged sketches held.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    fn insert(&mut self, key: CacheKey, entry: CacheEntry) {
        let size = entry.value.size();
        if size > self.budget {
            return;
        }
        if let Some(old) = self.entries.remove(&key) {
            self.used -= old.value.size();
        }
        while self.used + size > self.budget {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.used -= e.value.size();
            }
        }
        self.used += size;
        self.entries.insert(key, entry);
    }
}

impl Snapshot<'_> {
    /// The store this snapshot is of.
    pub fn store(&self) -> &Store {
        self.store
    }

    pub fn config(&self) -> &super::Config {
        &self.store.config
    }

    /// The store's directory.
    pub fn path(&self) -> &std::path::Path {
        &self.store.path
    }

    /// The tag id of a slice, or a clear error naming the unknown tag and the known ones.
    fn tag_id(&self, slice: &Slice) -> Result<u32> {
        let tags = &self.view.tags;
        match slice {
            Slice::Whole => Ok(keys::WHOLE),
            Slice::Tag { field, value } => {
                let config = &self.store.config;
                if !config.tag_fields.iter().any(|f| f == field) {
                    return Err(StoreError::Query(format!(
                        "unknown tag field '{field}' (this store's tag fields: {})",
                        config.tag_fields.join(", ")
                    )));
                }
                tags.id(&format!("{field}:{value}")).ok_or_else(|| {
                    let known: Vec<&str> = tags
                        .all()
                        .map(|(_, n)| n)
                        .filter(|n| n.starts_with(&format!("{field}:")))
                        .collect();
                    StoreError::Query(format!(
                        "no events with {field}:{value} (known values: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ))
                })
            }
        }
    }

    /// The tag id of a slice, `None` for a tag value this snapshot has no events of.
    pub(crate) fn known_tag(&self, slice: &Slice) -> Option<u32> {
        match slice {
            Slice::Whole => Some(keys::WHOLE),
            Slice::Tag { .. } => self.view.tags.id(&slice.name()),
        }
    }

    /// The buckets of a tag that overlap `range`, in time order: those stored when the view
    /// was published and those it holds in memory. From the view, not the engine: sled makes
    /// every reader wait while the writer applies a batch.
    fn buckets_of(&self, tag: u32, range: &TimeRange) -> Result<Vec<i64>> {
        let config = &self.store.config;
        let width = config.bucket.millis();
        let first = range.start.map_or(i64::MIN, |s| config.bucket.bucket_of(s));
        let mut out = Vec::new();
        for &(_, bucket) in self.view.stored.range((tag, first)..=(tag, i64::MAX)) {
            if range.end.is_some_and(|e| bucket >= e) {
                break;
            }
            if range.overlaps_bucket(bucket, width) {
                out.push(bucket);
            }
        }
        for &(t, bucket) in self.view.sets.keys() {
            if t == tag && range.overlaps_bucket(bucket, width) {
                out.push(bucket);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// `read` of a set the view does not hold, checked against the set's stored header read
    /// after it: a log position past the view's end means a checkpoint rewrote the set since
    /// the view was published ([`StoreError::Stale`]).
    fn read_stored<T>(&self, tag: u32, bucket: i64, read: impl FnOnce() -> Result<T>) -> Result<T> {
        let value = read()?;
        let header = self.store.read_header(&self.view.tags, tag, bucket)?;
        if header.is_some_and(|(_, log_pos)| log_pos > self.view.end_seq) {
            return Err(StoreError::Stale);
        }
        Ok(value)
    }

    /// The dictionary id of a slice's tag (0 for the whole stream), as carried by
    /// [`LogEvent::tag_ids`]; an unknown tag is an error naming the known values.
    pub fn tag_id_of(&self, slice: &Slice) -> Result<u32> {
        self.tag_id(slice)
    }

    /// All buckets of the whole stream, with their exact event counts.
    pub fn buckets(&self) -> Result<Vec<(i64, u64)>> {
        let list = self.buckets_of(keys::WHOLE, &TimeRange::all())?;
        list.into_iter()
            .map(|b| Ok((b, self.events_in(keys::WHOLE, b)?)))
            .collect()
    }

    /// Every tag value seen, as `field:value`.
    pub fn tags(&self) -> Vec<String> {
        self.view.tags.all().map(|(_, n)| n.to_string()).collect()
    }

    fn events_in(&self, tag: u32, bucket: i64) -> Result<u64> {
        if let Some(set) = self.view.sets.get(&(tag, bucket)) {
            return Ok(set.events);
        }
        match self.store.read_header(&self.view.tags, tag, bucket)? {
            Some((_, log_pos)) if log_pos > self.view.end_seq => Err(StoreError::Stale),
            Some((events, _)) => Ok(events),
            None => Ok(0),
        }
    }

    /// One family's sketch of one bucket: shared from the view if it holds the set, else read.
    fn part<S: Mergeable>(&self, tag: u32, bucket: i64) -> Result<Option<S>> {
        if let Some(set) = self.view.sets.get(&(tag, bucket)) {
            return Ok(Some(S::pick(set).clone()));
        }
        self.read_stored(tag, bucket, || {
            self.store
                .read_part::<S>(&self.view.tags, S::PART, tag, bucket)
        })
    }

    /// The sketch set (a copy) of the bucket holding `time`, for services that want the
    /// sketches themselves. `None` if the slice has no events in that bucket. A time outside
    /// [`MIN_TIME`](super::MIN_TIME)`..=`[`MAX_TIME`](super::MAX_TIME) is an error.
    ///
    /// A set not held for ingest is read from disk for the copy and not kept, so reads never
    /// grow the memory that [`Config::memory_budget`](super::Config::memory_budget) bounds.
    pub fn sketch_set(&self, slice: &Slice, time: i64) -> Result<Option<SketchSet<Sample>>> {
        super::model::check_time(time).map_err(|reason| StoreError::InvalidArgument {
            what: "bucket time",
            value: format!("{time} ms"),
            reason,
        })?;
        let Some(tag) = self.known_tag(slice) else {
            return Ok(None);
        };
        let bucket = self.store.config.bucket.bucket_of(time);
        if let Some(set) = self.view.sets.get(&(tag, bucket)) {
            return Ok(Some(SketchSet::clone(set)));
        }
        self.read_stored(tag, bucket, || {
            Ok(self
                .store
                .read_set(&self.view.tags, tag, bucket)?
                .map(|(set, _)| set))
        })
    }

    fn merged<S: Mergeable>(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<S>> {
        range.check()?;
        let tag = self.tag_id(slice)?;
        let buckets = self.buckets_of(tag, range)?;
        let key = (S::CACHE, tag, range.start, range.end, false);
        if let Some(hit) = self.store.cached::<S>(&key, &buckets, &self.view) {
            return Ok(hit);
        }
        // Ingest changes the newest bucket: the merge of the others is kept apart, so that
        // each batch costs one merge, not one per bucket of the range.
        let (older, newest) = buckets.split_at(buckets.len().saturating_sub(1));
        let older_key = (S::CACHE, tag, range.start, range.end, true);
        let (mut acc, mut bytes) = match self.store.cached::<S>(&older_key, older, &self.view) {
            Some(hit) => (hit.sketch, hit.bytes),
            None => {
                let (acc, bytes) = self.merge_parts::<S>(tag, older, None, 0)?;
                if let Some(s) = &acc {
                    self.store
                        .cache_merge(older_key, older, &self.view, s, bytes);
                }
                (acc, bytes)
            }
        };
        (acc, bytes) = self.merge_parts(tag, newest, acc, bytes)?;
        if let Some(s) = &acc {
            self.store.cache_merge(key, &buckets, &self.view, s, bytes);
        }
        Ok(Merged {
            sketch: acc,
            buckets: buckets.len(),
            bytes,
        })
    }

    /// `acc` (holding `bytes` bytes read) merged with the parts of `buckets`.
    fn merge_parts<S: Mergeable>(
        &self,
        tag: u32,
        buckets: &[i64],
        mut acc: Option<S>,
        mut bytes: usize,
    ) -> Result<(Option<S>, usize)> {
        for &b in buckets {
            let Some(s) = self.part::<S>(tag, b)? else {
                continue;
            };
            bytes += s.size_bytes();
            match &mut acc {
                None => acc = Some(s),
                Some(a) => a.merge(&s).map_err(|source| StoreError::Damaged {
                    name: self.store.blob_name(&self.view.tags, S::PART, tag, b),
                    source,
                })?,
            }
        }
        Ok((acc, bytes))
    }

    /// The HyperLogLog of a slice merged over the range.
    pub fn merged_hll(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<HyperLogLog>> {
        self.merged(slice, range)
    }

    /// The Theta sketch of a slice merged (union) over the range.
    pub fn merged_theta(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<Theta>> {
        self.merged(slice, range)
    }

    /// The Count-Min sketch (with its heavy-hitter candidates re-estimated) merged over the range.
    pub fn merged_countmin(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<CountMin>> {
        self.merged(slice, range)
    }

    /// "Have we seen `item`?" With no range over the whole stream, the all-time scalable filter
    /// answers; otherwise each bucket's filter, with the compounded false-positive rate.
    pub fn membership(&self, slice: &Slice, range: &TimeRange, item: &str) -> Result<Membership> {
        range.check()?;
        let sha = ShaWords::of(item.as_bytes());
        if range.is_all() && *slice == Slice::Whole {
            let f = &self.view.all_time;
            let presence = f.lookup(&sha);
            return Ok(Membership {
                maybe: presence != Presence::Absent,
                present: presence == Presence::Present,
                all_exact: f.is_exact(),
                fingerprints: f.layers().iter().filter_map(|l| l.fingerprints()).sum(),
                false_positive_rate: f.predicted_fpr(),
                buckets: 0,
                bytes: f.size_bytes(),
                saturated: f.predicted_fpr() > f.target_fpr(),
            });
        }
        let tag = self.tag_id(slice)?;
        let buckets = self.buckets_of(tag, range)?;
        let mut out = Membership {
            maybe: false,
            present: false,
            all_exact: false,
            fingerprints: 0,
            false_positive_rate: 0.0,
            buckets: buckets.len(),
            bytes: 0,
            saturated: false,
        };
        let mut all_clear = 1.0;
        let mut read = 0usize;
        let mut exact = 0usize;
        let mut add = |f: &BloomFilter| {
            let presence = f.lookup(&sha);
            out.maybe |= presence != Presence::Absent;
            out.present |= presence == Presence::Present;
            out.fingerprints += f.fingerprints().unwrap_or(0);
            all_clear *= 1.0 - f.predicted_fpr();
            out.bytes += f.size_bytes();
            out.saturated |= f.is_overfull();
            read += 1;
            exact += usize::from(f.is_exact());
        };
        for &b in &buckets {
            match self.view.sets.get(&(tag, b)) {
                Some(set) => add(&set.bloom),
                None => {
                    let stored = self.read_stored(tag, b, || {
                        self.store
                            .read_part::<BloomFilter>(&self.view.tags, Part::Bloom, tag, b)
                    })?;
                    if let Some(f) = stored {
                        add(&f);
                    }
                }
            }
        }
        out.false_positive_rate = 1.0 - all_clear;
        out.all_exact = read > 0 && exact == read;
        Ok(out)
    }

    /// "How often does `item` occur?" from the buckets' Count-Min sketches, without merging
    /// them: per row of the table, the item's cells (or exact counts) summed over the buckets,
    /// and the smallest sum. The merged table is the sum of the tables, so this is the merged
    /// sketch's answer with its guarantee (never below the truth; over it by more than ε·N
    /// with probability at most δ, where N counts only the events of table-form sketches:
    /// exact forms add no error), at the cost of a few cells per bucket instead of a merge of
    /// whole sketches (which, with exact forms of many items, took tens of milliseconds).
    pub fn frequency(&self, slice: &Slice, range: &TimeRange, item: &str) -> Result<Frequency> {
        range.check()?;
        let tag = self.tag_id(slice)?;
        let buckets = self.buckets_of(tag, range)?;
        let sha = ShaWords::of(item.as_bytes());
        let mut rows: Vec<u64> = Vec::new();
        let mut out = Frequency {
            estimate: 0,
            exact: false,
            bound: 0.0,
            delta: self.store.config.sketches.cms_delta,
            total: 0,
            buckets: buckets.len(),
            bytes: 0,
        };
        let mut read = 0usize;
        let mut exact = 0usize;
        for &b in &buckets {
            // Read in place where the snapshot holds the set: a copy of a Count-Min in its
            // exact form is as costly as the merge this avoids.
            let stored;
            let c: &CountMin = match self.view.sets.get(&(tag, b)) {
                Some(set) => &set.cms,
                None => match self.part::<CountMin>(tag, b)? {
                    Some(c) => {
                        stored = c;
                        &stored
                    }
                    None => continue,
                },
            };
            if rows.is_empty() {
                rows = vec![0; c.depth() as usize];
                out.delta = c.delta();
            }
            if rows.len() != c.depth() as usize {
                return Err(StoreError::Damaged {
                    name: self
                        .store
                        .blob_name(&self.view.tags, Part::CountMin, tag, b),
                    source: crate::sketch::SketchError::Incompatible {
                        kind: crate::sketch::SketchKind::CountMin,
                        detail: format!(
                            "depth {} among sketches of depth {}",
                            c.depth(),
                            rows.len()
                        ),
                    },
                });
            }
            c.add_item_rows(item.as_bytes(), &sha, &mut rows);
            out.total += c.total();
            out.bound += c.error_bound();
            out.bytes += c.size_bytes();
            read += 1;
            exact += usize::from(c.is_exact());
        }
        out.estimate = rows.iter().copied().min().unwrap_or(0);
        out.exact = read > 0 && exact == read;
        Ok(out)
    }

    /// The `n` heaviest items over the range: every bucket's candidates, re-estimated on the
    /// merged Count-Min.
    pub fn top(
        &self,
        slice: &Slice,
        range: &TimeRange,
        n: usize,
    ) -> Result<(Vec<TopEntry>, Merged<CountMin>)> {
        let merged = self.merged_countmin(slice, range)?;
        let top = merged.sketch.as_ref().map(|c| c.top(n)).unwrap_or_default();
        Ok((top, merged))
    }

    /// Exact number of events of a slice in the buckets that overlap the range (whole buckets:
    /// for a range that is not bucket-aligned, scan the log instead).
    pub fn count(&self, slice: &Slice, range: &TimeRange) -> Result<(u64, usize)> {
        range.check()?;
        let tag = self.tag_id(slice)?;
        let buckets = self.buckets_of(tag, range)?;
        let mut total = 0;
        for &b in &buckets {
            total += self.events_in(tag, b)?;
        }
        Ok((total, buckets.len()))
    }

    /// A uniform sample of `n` events of the slice over the range: how many come from each
    /// bucket is drawn hypergeometrically from the buckets' exact event counts (as if drawing
    /// `n` of all the range's events without replacement), then that many are drawn uniformly
    /// from each bucket's reservoir. `n` may not exceed the reservoir size.
    pub fn sample<R: Rng>(
        &self,
        slice: &Slice,
        range: &TimeRange,
        n: usize,
        rng: &mut R,
    ) -> Result<(Vec<Event>, usize)> {
        range.check()?;
        let k = self.store.config.sketches.reservoir_size;
        if n > k {
            return Err(StoreError::InvalidArgument {
                what: "sample size",
                value: n.to_string(),
                reason: format!(
                    "exceeds the reservoir size {k} of this store; ask for at most {k}"
                ),
            });
        }
        let tag = self.tag_id(slice)?;
        let buckets = self.buckets_of(tag, range)?;
        let mut reservoirs = Vec::new();
        for &b in &buckets {
            let r = match self.view.sets.get(&(tag, b)) {
                Some(set) => set.reservoir.clone(),
                None => match self.read_stored(tag, b, || {
                    self.store.read_reservoir(&self.view.tags, tag, b)
                })? {
                    Some(r) => r,
                    None => continue,
                },
            };
            reservoirs.push(r);
        }
        let read = buckets.len();
        let mut left: Vec<u64> = reservoirs.iter().map(|r| r.seen()).collect();
        let total: u64 = left.iter().sum();
        let draws = (n as u64).min(total) as usize;
        let mut per_bucket = vec![0usize; reservoirs.len()];
        let mut remaining = total;
        for _ in 0..draws {
            let mut x = rng.random_range(0..remaining);
            for (i, l) in left.iter_mut().enumerate() {
                if x < *l {
                    *l -= 1;
                    per_bucket[i] += 1;
                    break;
                }
                x -= *l;
            }
            remaining -= 1;
        }
        let mut picked = Vec::with_capacity(draws);
        for (r, &c) in reservoirs.iter().zip(&per_bucket) {
            picked.extend(r.pick(c, rng).into_iter().cloned());
        }
        Ok((self.resolve_samples(picked)?, read))
    }

    /// The events `samples` stand for, in their order: kept ones as they are, logged ones read
    /// back from the log in one pass over the blocks that hold them.
    fn resolve_samples(&self, samples: Vec<Sample>) -> Result<Vec<Event>> {
        let mut wanted: Vec<u64> = samples
            .iter()
            .filter_map(|s| match s {
                Sample::Logged(seq) => Some(*seq),
                Sample::Kept(_) => None,
            })
            .collect();
        let mut found: HashMap<u64, Event> = HashMap::with_capacity(wanted.len());
        if !wanted.is_empty() {
            wanted.sort_unstable();
            wanted.dedup();
            let tags = &self.view.tags;
            let holds = |info: &log::BlockInfo| {
                let at = wanted.partition_point(|&seq| seq < info.first_seq);
                wanted.get(at).is_some_and(|&seq| seq < info.end_seq())
            };
            self.store
                .for_each_block_in(&self.view, holds, &|| false, |ev| {
                    if wanted.binary_search(&ev.seq).is_ok() {
                        found.insert(ev.seq, Store::to_event(ev, tags));
                    }
                })?;
        }
        samples
            .into_iter()
            .map(|s| match s {
                Sample::Kept(event) => Ok(*event),
                Sample::Logged(seq) => found.remove(&seq).ok_or_else(|| StoreError::DamagedLog {
                    name: format!("log event {seq}"),
                    detail: "a reservoir samples it but the log does not hold it".into(),
                }),
            })
            .collect()
    }

    /// Whether every raw event of the range is still in the log (retention may have dropped the
    /// oldest).
    pub fn raw_events_retained(&self, range: &TimeRange) -> Result<bool> {
        range.check()?;
        Ok(match self.view.log_retained_from {
            None => true,
            Some(from) => range.start.is_some_and(|s| s >= from),
        })
    }

    /// The time from which raw events are kept, once retention has dropped older ones (`None`:
    /// every raw event is kept).
    pub fn raw_events_retained_from(&self) -> Option<i64> {
        self.view.log_retained_from
    }

    /// Like [`Snapshot::scan`], also handing `each` a way to make an owned [`Event`] of an
    /// event (its tags resolved in this snapshot's dictionary), for callers that keep a few of
    /// many, such as a reservoir filled by a scan.
    pub fn scan_events(
        &self,
        slice: &Slice,
        range: &TimeRange,
        each: impl FnMut(&LogEvent<'_>, &dyn Fn(&LogEvent<'_>) -> Event),
    ) -> Result<u64> {
        Ok(self
            .scan_events_until(slice, range, &|| false, each)?
            .unwrap_or(0))
    }

    /// [`Snapshot::scan_events`] that can stop early: see [`Snapshot::scan_until`].
    pub fn scan_events_until(
        &self,
        slice: &Slice,
        range: &TimeRange,
        stop: &dyn Fn() -> bool,
        mut each: impl FnMut(&LogEvent<'_>, &dyn Fn(&LogEvent<'_>) -> Event),
    ) -> Result<Option<u64>> {
        let tags = &self.view.tags;
        self.scan_until(slice, range, stop, |ev| {
            each(ev, &|e| Store::to_event(e, tags))
        })
    }

    /// Scans the raw events of the range in log order, calling `each` for the ones of `slice`.
    /// Returns the number of events decoded. The scan sees exactly the events of this snapshot,
    /// flushed or not, and holds no lock: `each` may call the store (even ingest into it).
    pub fn scan(
        &self,
        slice: &Slice,
        range: &TimeRange,
        each: impl FnMut(&LogEvent<'_>),
    ) -> Result<u64> {
        Ok(self.scan_until(slice, range, &|| false, each)?.unwrap_or(0))
    }

    /// [`Snapshot::scan`] that can stop early: `stop` is asked before each log block (at most
    /// [`log::BLOCK_EVENTS`] events), and once it answers true the scan ends there and returns
    /// `Ok(None)` (`each` has then seen only part of the range). This is how a query is
    /// cancelled within a fraction of a second however many events the range holds.
    pub fn scan_until(
        &self,
        slice: &Slice,
        range: &TimeRange,
        stop: &dyn Fn() -> bool,
        mut each: impl FnMut(&LogEvent<'_>),
    ) -> Result<Option<u64>> {
        range.check()?;
        let tag = self.tag_id(slice)?;
        let mut decoded = 0u64;
        let overlaps = |info: &log::BlockInfo| {
            range.start.is_none_or(|s| info.max_time >= s)
                && range.end.is_none_or(|e| info.min_time < e)
        };
        let finished = self
            .store
            .for_each_block_in(&self.view, overlaps, stop, |ev| {
                decoded += 1;
                if range.contains(ev.time) && (tag == keys::WHOLE || ev.tag_ids().contains(&tag)) {
                    each(ev);
                }
            })?;
        Ok(finished.then_some(decoded))
    }

    /// Scans and decodes events into owned [`Event`]s (tags resolved in this snapshot's
    /// dictionary).
    pub fn events(&self, slice: &Slice, range: &TimeRange) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        self.scan_events(slice, range, |ev, to_event| out.push(to_event(ev)))?;
        Ok(out)
    }
}

impl Store {
    /// A cached merge for `key` over `buckets`, if one was computed from the same versions of
    /// those buckets that `view` holds.
    fn cached<S: Mergeable>(
        &self,
        key: &CacheKey,
        buckets: &[i64],
        view: &View,
    ) -> Option<Merged<S>> {
        let mut cache = self.cache.lock().ok()?;
        cache.tick += 1;
        let now = cache.tick;
        let entry = cache.entries.get_mut(key)?;
        // Computed from this view or an older one, and none of its buckets changed since.
        let fresh = entry.computed_at <= view.clock
            && entry.buckets == buckets
            && buckets.iter().all(|b| {
                view.modified
                    .get(&(key.1, *b))
                    .is_none_or(|&m| m <= entry.computed_at)
            });
        if !fresh {
            return None;
        }
        entry.last_used = now;
        S::unwrap(&entry.value).map(|s| Merged {
            sketch: Some(s.clone()),
            buckets: buckets.len(),
            bytes: entry.bytes_read,
        })
    }

    fn cache_merge<S: Mergeable>(
        &self,
        key: CacheKey,
        buckets: &[i64],
        view: &View,
        merged: &S,
        bytes_read: usize,
    ) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        cache.tick += 1;
        let now = cache.tick;
        cache.insert(
            key,
            CacheEntry {
                buckets: buckets.to_vec(),
                computed_at: view.clock,
                value: merged.clone().wrap(),
                bytes_read,
                last_used: now,
            },
        );
    }

    /// The dictionary id of a slice's tag: see [`Snapshot::tag_id_of`].
    pub fn tag_id_of(&self, slice: &Slice) -> Result<u32> {
        self.snapshot()?.tag_id_of(slice)
    }

    /// All buckets of the whole stream, with their exact event counts.
    pub fn buckets(&self) -> Result<Vec<(i64, u64)>> {
        self.read(|s| s.buckets())
    }

    /// Every tag value seen, as `field:value`.
    pub fn tags(&self) -> Result<Vec<String>> {
        Ok(self.snapshot()?.tags())
    }

    /// See [`Snapshot::merged_hll`].
    pub fn merged_hll(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<HyperLogLog>> {
        self.read(|s| s.merged_hll(slice, range))
    }

    /// See [`Snapshot::merged_theta`].
    pub fn merged_theta(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<Theta>> {
        self.read(|s| s.merged_theta(slice, range))
    }

    /// See [`Snapshot::merged_countmin`].
    pub fn merged_countmin(&self, slice: &Slice, range: &TimeRange) -> Result<Merged<CountMin>> {
        self.read(|s| s.merged_countmin(slice, range))
    }

    /// See [`Snapshot::membership`].
    pub fn membership(&self, slice: &Slice, range: &TimeRange, item: &str) -> Result<Membership> {
        self.read(|s| s.membership(slice, range, item))
    }

    /// See [`Snapshot::frequency`].
    pub fn frequency(&self, slice: &Slice, range: &TimeRange, item: &str) -> Result<Frequency> {
        self.read(|s| s.frequency(slice, range, item))
    }

    /// See [`Snapshot::top`].
    pub fn top(
        &self,
        slice: &Slice,
        range: &TimeRange,
        n: usize,
    ) -> Result<(Vec<TopEntry>, Merged<CountMin>)> {
        self.read(|s| s.top(slice, range, n))
    }

    /// See [`Snapshot::count`].
    pub fn count(&self, slice: &Slice, range: &TimeRange) -> Result<(u64, usize)> {
        self.read(|s| s.count(slice, range))
    }

    /// See [`Snapshot::sample`]. Draws from `rng` again if a checkpoint made the first read
    /// stale.
    pub fn sample<R: Rng>(
        &self,
        slice: &Slice,
        range: &TimeRange,
        n: usize,
        rng: &mut R,
    ) -> Result<(Vec<Event>, usize)> {
        self.read(|s| s.sample(slice, range, n, rng))
    }

    /// See [`Snapshot::raw_events_retained`].
    pub fn raw_events_retained(&self, range: &TimeRange) -> Result<bool> {
        self.snapshot()?.raw_events_retained(range)
    }

    /// See [`Snapshot::raw_events_retained_from`].
    pub fn raw_events_retained_from(&self) -> Result<Option<i64>> {
        Ok(self.snapshot()?.raw_events_retained_from())
    }

    /// See [`Snapshot::scan_events`].
    pub fn scan_events(
        &self,
        slice: &Slice,
        range: &TimeRange,
        each: impl FnMut(&LogEvent<'_>, &dyn Fn(&LogEvent<'_>) -> Event),
    ) -> Result<u64> {
        self.snapshot()?.scan_events(slice, range, each)
    }

    /// See [`Snapshot::scan_events_until`].
    pub fn scan_events_until(
        &self,
        slice: &Slice,
        range: &TimeRange,
        stop: &dyn Fn() -> bool,
        each: impl FnMut(&LogEvent<'_>, &dyn Fn(&LogEvent<'_>) -> Event),
    ) -> Result<Option<u64>> {
        self.snapshot()?.scan_events_until(slice, range, stop, each)
    }

    /// See [`Snapshot::scan`]: on a snapshot taken now.
    pub fn scan(
        &self,
        slice: &Slice,
        range: &TimeRange,
        each: impl FnMut(&LogEvent<'_>),
    ) -> Result<u64> {
        self.snapshot()?.scan(slice, range, each)
    }

    /// See [`Snapshot::scan_until`]: on a snapshot taken now.
    pub fn scan_until(
        &self,
        slice: &Slice,
        range: &TimeRange,
        stop: &dyn Fn() -> bool,
        each: impl FnMut(&LogEvent<'_>),
    ) -> Result<Option<u64>> {
        self.snapshot()?.scan_until(slice, range, stop, each)
    }

    /// See [`Snapshot::events`].
    pub fn events(&self, slice: &Slice, range: &TimeRange) -> Result<Vec<Event>> {
        self.snapshot()?.events(slice, range)
    }

    /// The compact form of an item, to compare with [`LogEvent::item`] without decoding.
    pub fn item_key<'a>(item: &'a str, buf: &'a mut [u8; 20]) -> ItemRef<'a> {
        ItemRef::of(item, buf)
    }
}

#[cfg(test)]
mod tests {
    use crate::sketch::{CountMin, Reservoir, Sketch};
    use crate::store::keys::{self, Part};
    use crate::store::test_support::*;
    use crate::store::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::collections::BTreeSet;

    /// `n` events from `first` with extra fields, as users' lines carry them.
    fn with_extra(first: u64, n: u64) -> Vec<Event> {
        events(first, n)
            .into_iter()
            .enumerate()
            .map(|(i, e)| Event {
                extra: format!(
                    "{{\"amount\":{},\"hash\":\"h{}\"}}",
                    i * 7,
                    first + i as u64
                ),
                ..e
            })
            .collect()
    }

    fn key(e: &Event) -> (i64, String, Vec<(String, String)>, String) {
        (e.time, e.item.clone(), e.tags.clone(), e.extra.clone())
    }

    /// A sample must be `n` distinct events, every one of them ingested, whole (tags and extra
    /// fields as they came in).
    fn assert_sample_of(store: &Store, ingested: &[Event], n: usize) {
        let all: BTreeSet<_> = ingested.iter().map(key).collect();
        let mut rng = StdRng::seed_from_u64(3);
        let (got, _) = store
            .sample(&Slice::Whole, &TimeRange::all(), n, &mut rng)
            .expect("sample");
        assert_eq!(got.len(), n);
        let picked: BTreeSet<_> = got.iter().map(key).collect();
        assert_eq!(picked.len(), n, "a sample repeats an event");
        for e in &got {
            assert!(all.contains(&key(e)), "{e:?} was never ingested");
        }
    }

    fn whole_reservoir(store: &Store) -> Reservoir<Sample> {
        let st = store.lock().expect("lock");
        let bucket = store.config.bucket.bucket_of(events(0, 1)[0].time);
        match st.sets.get(&(keys::WHOLE, bucket)) {
            Some(a) => a.set.reservoir.clone(),
            None => store
                .read_reservoir(&st.tags, keys::WHOLE, bucket)
                .expect("read")
                .expect("stored"),
        }
    }

    /// Without retention the log keeps every event, so reservoirs hold sequence numbers and a
    /// sample reads its events back from the log: from the open block before any flush, and
    /// from disk after a reopen. The stored reservoir is then a few bytes per slot.
    /// `COUNT <value>` sums each bucket's cells instead of merging sketches: over buckets in
    /// the table form it is exactly the merged sketch's count; with exact forms among them, it
    /// is never above the merged count nor below the truth, and exact when all are exact. Some
    /// buckets are read from memory, some from disk.
    #[test]
    fn counts_of_an_item_summed_per_row_are_the_merged_sketch_s() {
        let dir = tempdir("freq-rows");
        let store = Store::create(&dir, config()).expect("create");
        let day = 86_400_000i64;
        // Three days: 30k events over 12k wallets (table form), then two small days (exact).
        let mut batch = Vec::new();
        for i in 0..30_000u64 {
            let w = crate::gen::wallet_address(3, crate::gen::splitmix64(i) % 12_000);
            batch.push(Event::new(1_764_547_200_000 + (i as i64 % 3) * day, w, &[]));
        }
        for i in 0..300u64 {
            let w = crate::gen::wallet_address(3, i % 40);
            batch.push(Event::new(
                1_764_547_200_000 + (3 + i as i64 % 2) * day,
                w,
                &[],
            ));
        }
        store.ingest_batch(&batch).expect("ingest");
        drop(store);
        let store = Store::open(&dir).expect("open");
        // One bucket back in memory, the others on disk.
        store
            .ingest(&Event::new(
                1_764_547_200_000 + 4 * day,
                crate::gen::wallet_address(3, 1),
                &[],
            ))
            .expect("ingest");
        let snap = store.snapshot().expect("snapshot");
        let all = TimeRange::all();
        let tables = TimeRange::between(1_764_547_200_000, 1_764_547_200_000 + 3 * day);
        let exacts = TimeRange::between(1_764_547_200_000 + 3 * day, 1_764_547_200_000 + 5 * day);
        for range in [&all, &tables, &exacts] {
            let merged = snap.merged_countmin(&Slice::Whole, range).expect("merge");
            let merged = merged.sketch.expect("a sketch");
            let mut truth: std::collections::HashMap<String, u64> = Default::default();
            for e in snap.events(&Slice::Whole, range).expect("scan") {
                *truth.entry(e.item).or_default() += 1;
            }
            for i in 0..40u64 {
                let w = crate::gen::wallet_address(3, i * 61 % 12_000);
                let true_count = truth.get(&w).copied().unwrap_or(0);
                let f = snap.frequency(&Slice::Whole, range, &w).expect("frequency");
                assert!(
                    f.estimate >= true_count,
                    "{w}: {} < {true_count}",
                    f.estimate
                );
                assert!(f.estimate <= merged.count(w.as_bytes()), "{w}");
                if range == &tables {
                    assert!(!f.exact);
                    assert_eq!(f.estimate, merged.count(w.as_bytes()), "{w}");
                }
                if range == &exacts {
                    assert!(f.exact && f.bound == 0.0);
                    assert_eq!(f.estimate, true_count, "{w}");
                }
            }
        }
        drop(snap);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn samples_of_a_store_keeping_its_log_are_read_back_from_it() {
        let dir = tempdir("sample-refs");
        let store = Store::create(&dir, config()).expect("create");
        let ingested = with_extra(0, 3 * log::BLOCK_EVENTS as u64 + 100);
        store.ingest_batch(&ingested).expect("ingest");
        let r = whole_reservoir(&store);
        assert!(r.items().iter().all(|s| matches!(s, Sample::Logged(_))));
        // Nothing flushed: some sampled events are only in the open block.
        assert_sample_of(&store, &ingested, 50);
        store.checkpoint().expect("checkpoint");
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_sample_of(&store, &ingested, 50);
        let bucket = store.config.bucket.bucket_of(ingested[0].time);
        let stored = store
            .engine
            .get(&keys::sketch(Part::Reservoir, keys::WHOLE, bucket))
            .expect("get")
            .expect("a stored reservoir")
            .len();
        // 50 slots × a delta between seqs of 2,000 events (two varint bytes at most, where
        // layout 1 took 12) plus the frame and state.
        assert!(stored < 50 * 2 + 100, "{stored} bytes");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// With retention the log may lose a sampled event, so the reservoir keeps events whole.
    #[test]
    fn a_store_with_retention_keeps_sampled_events_themselves() {
        let dir = tempdir("sample-kept");
        let c = Config {
            retention_ms: Some(30 * model::DAY_MS),
            ..config()
        };
        let store = Store::create(&dir, c).expect("create");
        let ingested = with_extra(0, 2_000);
        store.ingest_batch(&ingested).expect("ingest");
        let r = whole_reservoir(&store);
        assert_eq!(r.items().len(), 50);
        assert!(r.items().iter().all(|s| matches!(s, Sample::Kept(_))));
        assert_sample_of(&store, &ingested, 50);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A format-4 store holds HyperLogLogs without HIP accumulators (layout 1): they are read,
    /// answering from their registers, the store is recorded as format 5 on open, and it checks
    /// clean. (The format-3 test below covers 3.)
    #[test]
    fn a_format_four_store_is_read_and_recorded_as_format_five() {
        let dir = tempdir("format-4");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&with_extra(0, 5_000)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let whole = |store: &Store| {
            let m = store
                .merged_hll(&Slice::Whole, &TimeRange::all())
                .expect("hll");
            assert_eq!(m.buckets, 1, "one bucket, so nothing merged");
            m.sketch.expect("a sketch")
        };
        let hll = whole(&store);
        assert!(hll.hip_estimate().is_some(), "built by updates");
        let bucket = store.config.bucket.bucket_of(events(0, 1)[0].time);
        poke(
            &store,
            &keys::sketch(Part::Hll, keys::WHOLE, bucket),
            Some(hll.encode_layout_1()),
        );
        let store = reopened_from_format(store, &dir, 4);
        let old = whole(&store);
        assert!(old.hip_estimate().is_none());
        assert_eq!(old.estimate(), hll.register_estimate());
        let report = store.check().expect("check");
        assert!(report.damaged.is_empty(), "{:?}", report.damaged);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A format-8 store holds Count-Min tables at 8 bytes a counter (layout 4): the store is
    /// recorded in the current format on open, the old table is what is read (and answers as
    /// it did), the store checks clean, and the next checkpoint of the set writes it as layout 5.
    #[test]
    fn a_format_eight_store_is_read_and_recorded_as_format_nine() {
        let dir = tempdir("format-8");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&with_extra(0, 5_000)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let whole = |store: &Store| {
            let m = store
                .merged_countmin(&Slice::Whole, &TimeRange::all())
                .expect("count-min");
            assert_eq!(m.buckets, 1, "one bucket, so nothing merged");
            m.sketch.expect("a sketch")
        };
        let cms = whole(&store);
        assert!(!cms.is_exact(), "5,000 wallets take the table form");
        let bucket = store.config.bucket.bucket_of(events(0, 1)[0].time);
        let key = keys::sketch(Part::CountMin, keys::WHOLE, bucket);
        let layout = |store: &Store| {
            let blob = store
                .engine
                .get(&key)
                .expect("get")
                .expect("a set stored apart");
            u16::from_le_bytes([blob[4], blob[5]])
        };
        assert_eq!(layout(&store), CountMin::VERSION);
        poke(&store, &key, Some(cms.encode_table_as(None)));
        let store = reopened_from_format(store, &dir, 8);
        assert_eq!(layout(&store), 4);
        assert_eq!(whole(&store), cms);
        let report = store.check().expect("check");
        assert!(report.damaged.is_empty(), "{:?}", report.damaged);
        store.ingest_batch(&with_extra(5_000, 100)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        assert_eq!(layout(&store), CountMin::VERSION);
        assert_eq!(whole(&store).total(), 5_100);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A format-3 store holds reservoirs of whole events: they are read as kept samples, the
    /// store is recorded in the current format on open, and it checks clean.
    #[test]
    fn a_format_three_store_is_read_and_recorded_in_the_current_format() {
        let dir = tempdir("format-3");
        let store = Store::create(&dir, config()).expect("create");
        let ingested = with_extra(0, 2_000);
        store.ingest_batch(&ingested).expect("ingest");
        store.checkpoint().expect("checkpoint");
        // The reservoir as format 3 wrote it: the same slots holding the events themselves.
        let by_seq = ingested.clone();
        let old: Reservoir<Event> = whole_reservoir(&store).map(|s| match s {
            Sample::Logged(seq) => by_seq[seq as usize].clone(),
            Sample::Kept(e) => *e,
        });
        let bucket = store.config.bucket.bucket_of(ingested[0].time);
        poke(
            &store,
            &keys::sketch(Part::Reservoir, keys::WHOLE, bucket),
            Some(old.encode().expect("encode")),
        );
        let store = reopened_from_format(store, &dir, 3);
        let r = whole_reservoir(&store);
        assert!(r.items().iter().all(|s| matches!(s, Sample::Kept(_))));
        assert_sample_of(&store, &ingested, 50);
        let report = store.check().expect("check");
        assert!(report.damaged.is_empty(), "{:?}", report.damaged);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
