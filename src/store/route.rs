//! Routing a checked batch into the store: tags interned, every set the batch touches loaded
//! first (so damage rejects the batch whole), each set fed its events family by family, the
//! all-time filter, and each event encoded into the open log block.
//!
//! A batch's set keys (each event's bucket and tag ids) are resolved once, before any piece:
//! from the tag strings, or from the ids a reader thread numbered its tags with ([`Ahead`]),
//! which keeps hashing and comparing tag strings off the store's thread.
//!
//! Inside an import, a batch is applied in pieces with staging between them (see `stage`), so
//! the sets held stay within the memory budget; a piece that fails then fails the import.
//!
//! Owns: applying a batch to the in-memory state. Must not: decide durability (flushes,
//! checkpoints and imports do).

use super::error::{Result, StoreError};
use super::keys;
use super::model::Event;
use super::state::{LogTail, State, TagDict};
use super::Store;
use crate::hash::{Item, ItemHashes};
use crate::sketch::Sketch;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Pieces of at least this many events append to the log on a thread of their own while their
/// sets are updated, given a core for it (see [`log_beside`]): starting a thread costs tens of
/// microseconds, a 1,000-event piece's log appends about a quarter of a millisecond (a tenth of
/// the store thread's time per event on the contract day).
const PARALLEL_PIECE: usize = 512;

/// Whether a piece of `events` appends to the log on a second thread: only when it is large
/// enough and a core is left beside the threads the import already keeps busy, the store's and,
/// when the items came hashed, the reader's that hashed them. On this 2-core machine the file
/// ingest (reader and store busy) ran faster with the appends in place: the contract day's 490
/// pieces each started a thread that could only take time from the two busy ones (whole
/// processes in turn, per round 0.89 to 0.97 of the time, 16 rounds thrice). With the store's
/// thread alone busy (`Store::ingest_batch` from a service) the second core takes them: the
/// same 500k events in 10,000-event batches took 0.545 s with them beside and 0.608 s in place
/// (medians of 5 runs each).
fn log_beside(events: usize, reader_busy: bool) -> bool {
    events >= PARALLEL_PIECE && super::cores() > 1 + usize::from(reader_busy)
}

/// What a reader thread worked out for a batch ahead of the store (the file ingest).
pub(crate) struct Ahead<'a> {
    /// `hashes[i]` is the `ItemHashes` of `events[i].item`, normalised as the store keeps it.
    pub hashes: &'a [ItemHashes],
    /// The events' tags as the reader numbered them, if it did.
    pub tags: Option<ReaderTags<'a>>,
}

/// Tags numbered by the reader: its ids count from 1 in the order it first met each
/// `(field, value)`, over the whole import.
pub(crate) struct ReaderTags<'a> {
    /// Every event's tags in `Event::tags` order, flattened.
    pub ids: &'a [u32],
    /// The tags first met in this batch, in id order: they follow the ids of earlier batches.
    pub new: &'a [(String, String)],
}

/// A batch's set keys, resolved once: event `i` is in bucket `buckets[i]` and has the tags
/// `ids[offsets[i]..offsets[i + 1]]` (store ids).
pub(super) struct BatchKeys {
    buckets: Vec<i64>,
    offsets: Vec<usize>,
    ids: Vec<u32>,
}

/// Part of a [`BatchKeys`]: a piece of its batch.
#[derive(Clone, Copy)]
pub(super) struct KeysView<'a> {
    buckets: &'a [i64],
    /// One more than `buckets`; indexes the whole batch's `ids`.
    offsets: &'a [usize],
    ids: &'a [u32],
}

impl BatchKeys {
    fn with_capacity(events: usize, tags: usize) -> Self {
        let mut offsets = Vec::with_capacity(events + 1);
        offsets.push(0);
        BatchKeys {
            buckets: Vec::with_capacity(events),
            offsets,
            ids: Vec::with_capacity(tags),
        }
    }

    fn push_event(&mut self, bucket: i64) {
        self.buckets.push(bucket);
        self.offsets.push(self.ids.len());
    }

    pub(super) fn view(&self) -> KeysView<'_> {
        KeysView {
            buckets: &self.buckets,
            offsets: &self.offsets,
            ids: &self.ids,
        }
    }
}

impl<'a> KeysView<'a> {
    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Events `start..end` of this view.
    pub(super) fn slice(&self, start: usize, end: usize) -> KeysView<'a> {
        KeysView {
            buckets: &self.buckets[start..end],
            offsets: &self.offsets[start..=end],
            ids: self.ids,
        }
    }

    /// The sets event `i` goes to: its bucket's whole set, then one per tag.
    pub(super) fn sets_of(&self, i: usize) -> impl Iterator<Item = (u32, i64)> + 'a {
        let bucket = self.buckets[i];
        std::iter::once((keys::WHOLE, bucket))
            .chain(self.tags_of(i).iter().map(move |&t| (t, bucket)))
    }

    fn tags_of(&self, i: usize) -> &'a [u32] {
        &self.ids[self.offsets[i]..self.offsets[i + 1]]
    }
}

impl Store {
    /// Applies a batch: checked, its keys resolved, then applied whole or, inside an import,
    /// in pieces. `ahead`, when given, holds what a reader thread computed for it.
    pub(super) fn ingest_locked(
        &self,
        st: &mut State,
        events: &[Event],
        ahead: Option<Ahead<'_>>,
    ) -> Result<()> {
        let (hashed, reader_tags) = match ahead {
            Some(a) => (Some(a.hashes), a.tags),
            None => (None, None),
        };
        // Items as the store keeps them. A caller that hashed ahead (the file ingest) has
        // normalised them before hashing.
        let normalised: Vec<Event>;
        let events = match hashed {
            None if self.config.lowercase_items
                && events
                    .iter()
                    .any(|e| self.config.normalise_item(&e.item) != e.item) =>
            {
                normalised = events
                    .iter()
                    .map(|e| Event {
                        item: self.config.normalise_item(&e.item).into_owned(),
                        ..e.clone()
                    })
                    .collect();
                &normalised[..]
            }
            _ => events,
        };
        debug_assert!(
            !self.config.lowercase_items
                || events
                    .iter()
                    .all(|e| self.config.normalise_item(&e.item) == e.item)
        );
        // Ids that do not account for every tag of every event, or that the reader never
        // named, are not trusted: the strings are used instead.
        let reader_tags = reader_tags.filter(|t| {
            let named = st.reader_tags.len() + t.new.len();
            t.ids.len() == events.iter().map(|e| e.tags.len()).sum::<usize>()
                && t.ids.iter().all(|&id| id >= 1 && id as usize <= named)
        });
        // Without the tags checked, the first error found may not be the first event's:
        // the full check names that one (with them checked, it already has).
        let trusted = reader_tags.is_some();
        self.check_batch(events, !trusted)
            .or_else(|e| match trusted {
                true => self.check_batch(events, true),
                false => Err(e),
            })?;
        if !st.importing {
            let tags_before = st.tags.names.len();
            let applied = self
                .batch_keys(st, events, reader_tags)
                .and_then(|keys| self.apply_piece(st, events, hashed, keys.view()));
            if let Err(e) = applied {
                // A rejected batch leaves no trace, not even the tags it named.
                Arc::make_mut(&mut st.tags).truncate(tags_before);
                return Err(e);
            }
            let over_budget = Self::sets_bytes(st) > self.config.memory_budget;
            if st.since_checkpoint >= self.config.checkpoint_every || over_budget {
                // The batch is applied whatever happens here; failing the call would invite a
                // retry that counts it twice. A failed checkpoint is retried, and reported, by
                // the next flush.
                if let Err(e) = self.checkpoint_locked(st) {
                    st.deferred_error = Some(e.to_string());
                }
            }
            return Ok(());
        }
        // An import: in pieces, staging sets after each, so that the sets held stay within the
        // memory budget whatever the batch touches (see `stage`). A failure fails the import,
        // whose rollback re-reads the state (tags included) from the engine.
        if let Some(why) = &st.import_failed {
            return Err(StoreError::ImportFailed {
                path: self.path.clone(),
                reason: why.clone(),
            });
        }
        let keys = match self.batch_keys(st, events, reader_tags) {
            Ok(keys) => keys,
            Err(e) => {
                st.import_failed = Some(e.to_string());
                return Err(e);
            }
        };
        let keys = keys.view();
        let max_sets = self.piece_sets()?;
        let hashed = hashed.filter(|h| h.len() == events.len());
        // The bytes of the sets held, carried from piece to piece and batch to batch by what
        // each piece added (summing every set after each piece took 5% of a contract-tag
        // import's time), and taken exactly whenever it crosses the staging threshold.
        let mut held = match st.import_held.take() {
            Some(held) => held,
            None => Self::sets_bytes(st),
        };
        let mut start = 0;
        while start < events.len() {
            let end = Self::piece_end(keys, start, max_sets);
            let applied = self
                .apply_piece(
                    st,
                    &events[start..end],
                    hashed.map(|h| &h[start..end]),
                    keys.slice(start, end),
                )
                .and_then(|grew| {
                    held += grew;
                    if held > self.config.memory_budget / 2 {
                        held = self.stage_over_budget(st)?;
                    }
                    Ok(())
                });
            if let Err(e) = applied {
                // Earlier pieces (and staging) changed the import: it cannot commit now.
                st.import_failed = Some(e.to_string());
                return Err(e);
            }
            start = end;
        }
        st.import_held = Some(held);
        Ok(())
    }

    /// Each event's bucket and tag ids, interning tags met for the first time.
    fn batch_keys(
        &self,
        st: &mut State,
        events: &[Event],
        reader_tags: Option<ReaderTags<'_>>,
    ) -> Result<BatchKeys> {
        match reader_tags {
            Some(tags) => self.keys_from_reader(st, events, tags),
            None => Ok(self.keys_from_names(st, events)),
        }
    }

    pub(super) fn keys_from_names(&self, st: &mut State, events: &[Event]) -> BatchKeys {
        let mut keys = BatchKeys::with_capacity(events.len(), 2 * events.len());
        for e in events {
            for (f, v) in &e.tags {
                keys.ids.push(TagDict::intern_pair(&mut st.tags, f, v));
            }
            keys.push_event(self.config.bucket.bucket_of(e.time));
        }
        keys
    }

    /// Keys from the reader's ids (range-checked by the caller): its new names are checked as
    /// `check_batch` checks tag strings and interned, then every id is mapped to the store's.
    /// A bad tag is reported by `check_batch` itself, so the error is the one the strings give.
    fn keys_from_reader(
        &self,
        st: &mut State,
        events: &[Event],
        tags: ReaderTags<'_>,
    ) -> Result<BatchKeys> {
        let bad_name = tags
            .new
            .iter()
            .any(|(field, value)| self.tag_problem(field, value).is_some());
        if bad_name {
            self.check_batch(events, true)?;
            return Ok(self.keys_from_names(st, events));
        }
        for (field, value) in tags.new {
            let id = TagDict::intern_pair(&mut st.tags, field, value);
            st.reader_tags.push(id);
        }
        let mut keys = BatchKeys::with_capacity(events.len(), tags.ids.len());
        let mut at = 0;
        for e in events {
            let theirs = &tags.ids[at..at + e.tags.len()];
            at += e.tags.len();
            for (k, &id) in theirs.iter().enumerate() {
                if theirs[..k].contains(&id) {
                    // A tag twice in one event: let the strings name it.
                    self.check_batch(events, true)?;
                    return Ok(self.keys_from_names(st, events));
                }
                // In range: the caller checked every id against the names the reader sent.
                keys.ids.push(st.reader_tags[id as usize - 1]);
            }
            debug_assert!(e
                .tags
                .iter()
                .zip(&keys.ids[keys.ids.len() - e.tags.len()..])
                .all(|((f, v), &id)| st.tags.name(id) == Some(format!("{f}:{v}").as_str())));
            keys.push_event(self.config.bucket.bucket_of(e.time));
        }
        Ok(keys)
    }

    /// Applies checked, normalised events to memory: sets loaded, sketches updated, events
    /// into the open log block. A set that fails to load rejects the events before any set
    /// changes (the caller forgets tags the batch named). Returns how many bytes the sets held
    /// grew by: the sets it touched after it, less the ones held before it (so a set it
    /// loaded counts whole), or 0 if they shrank (as a form converting can).
    fn apply_piece(
        &self,
        st: &mut State,
        events: &[Event],
        hashed: Option<&[ItemHashes]>,
        keys: KeysView<'_>,
    ) -> Result<usize> {
        // The piece's sets in order of first use, and each one's events in log order, in one
        // flat array (a counting sort): a 2,000-value tag puts a piece's events in over a
        // thousand sets, and a vector per set was an allocation per set per piece.
        let mut group_of: FxHashMap<(u32, i64), usize> = FxHashMap::default();
        let mut sets: Vec<(u32, i64)> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        let mut pairs: Vec<(usize, usize)> =
            Vec::with_capacity(keys.offsets[events.len()] - keys.offsets[0] + events.len());
        for i in 0..events.len() {
            for key in keys.sets_of(i) {
                let group = *group_of.entry(key).or_insert_with(|| {
                    sets.push(key);
                    counts.push(0);
                    sets.len() - 1
                });
                counts[group] += 1;
                pairs.push((group, i));
            }
        }
        let mut starts: Vec<usize> = Vec::with_capacity(sets.len() + 1);
        starts.push(0);
        for &n in &counts {
            starts.push(starts[starts.len() - 1] + n);
        }
        let mut next = starts.clone();
        let mut order = vec![0usize; pairs.len()];
        for (group, i) in pairs {
            order[next[group]] = i;
            next[group] += 1;
        }
        // Load every set the piece touches before changing any of them, so a damaged blob
        // rejects the whole piece and leaves memory as it was.
        let mut loaded_now = vec![false; sets.len()];
        for (g, &(tag, bucket)) in sets.iter().enumerate() {
            if st.sets.contains_key(&(tag, bucket)) {
                continue;
            }
            if let Err(e) = self.ensure_loaded(st, tag, bucket) {
                for (key, _) in sets.iter().zip(&loaded_now).filter(|(_, &now)| now) {
                    st.sets.remove(key);
                }
                return Err(e);
            }
            loaded_now[g] = true;
        }
        st.clock += 1;
        let clock = st.clock;
        let modified = Arc::make_mut(&mut st.modified);
        for &key in &sets {
            modified.insert(key, clock);
        }
        // Hash every item once, then feed each set its events family by family (see
        // `SketchSet::update_batch`); each set still sees its events in log order.
        let items: Vec<Item> = match hashed {
            Some(h) if h.len() == events.len() => events
                .iter()
                .zip(h)
                .map(|(e, &hashes)| Item {
                    bytes: e.item.as_bytes(),
                    hashes,
                })
                .collect(),
            _ => events
                .iter()
                .map(|e| Item::new(e.item.as_bytes()))
                .collect(),
        };
        debug_assert!(items
            .first()
            .is_none_or(|i| i.hashes == Item::new(i.bytes).hashes));
        let first_seq = st.next_seq;
        // The sets (and the all-time filter) and the log are apart in the state: a large
        // piece's events go into the log on a second thread while the sets take them here.
        let (mut log, held, all_time) = st.log_and_sets();
        let all_time = Arc::make_mut(all_time);
        let to_log = |log: &mut LogTail<'_>| {
            for (i, (event, item)) in events.iter().zip(&items).enumerate() {
                self.append_to_log(
                    log,
                    event.time,
                    &event.item,
                    item.hashes.murmur[0],
                    keys.tags_of(i),
                    &event.extra,
                );
            }
        };
        let mut to_sets = || {
            let (mut before, mut after) = (0, 0);
            for (g, key) in sets.iter().enumerate() {
                let Some(active) = held.get_mut(key) else {
                    continue;
                };
                if !loaded_now[g] {
                    before += Sketch::size_bytes(&*active.set);
                }
                active.dirty = true;
                active.last_used = clock;
                let which = &order[starts[g]..starts[g + 1]];
                Arc::make_mut(&mut active.set).update_batch(&items, which, |i| {
                    self.sample_of(first_seq + i as u64, || events[i].clone())
                });
                if let Some(&last) = which.last() {
                    active.log_pos = first_seq + last as u64 + 1;
                }
                after += Sketch::size_bytes(&*active.set);
            }
            for (n, item) in items.iter().enumerate() {
                if let Some(ahead) = items.get(n + 8) {
                    all_time.prefetch(&ahead.hashes.sha);
                }
                all_time.insert(&item.hashes.sha);
            }
            (before, after)
        };
        let (before, after) = if log_beside(events.len(), hashed.is_some()) {
            let (sizes, logged) = std::thread::scope(|scope| {
                let logging = std::thread::Builder::new()
                    .name("sketchdb-piece".into())
                    .spawn_scoped(scope, || to_log(&mut log));
                let sizes = to_sets();
                match logging.map(|handle| handle.join()) {
                    Ok(Ok(())) => (sizes, true),
                    Ok(Err(panic)) => std::panic::resume_unwind(panic),
                    // No thread to be had (a process limit): the log is appended here, below.
                    Err(_) => (sizes, false),
                }
            });
            if !logged {
                to_log(&mut log);
            }
            sizes
        } else {
            to_log(&mut log);
            to_sets()
        };
        st.all_time_pos = st.next_seq;
        st.since_checkpoint += events.len() as u64;
        Ok(after.saturating_sub(before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::model::{Slice, TimeRange};
    use crate::store::test_support::assert_same_set;
    use crate::store::{Config, MemEngine};
    use std::collections::HashMap;

    const DAY0: i64 = 1_764_547_200_000;
    const DAY_MS: i64 = 86_400_000;

    fn store() -> Store {
        let config = Config {
            tag_fields: vec!["chain".into(), "contract".into()],
            ..crate::store::test_support::config()
        };
        Store::create_with(Box::new(MemEngine::new()), config).expect("create")
    }

    /// Events over two days, two chains and seven contracts.
    fn spread(first: u64, n: u64) -> Vec<Event> {
        (first..first + n)
            .map(|i| {
                let chain = if i % 2 == 0 { "a" } else { "b" };
                let contract = format!("c{}", i % 7);
                Event::new(
                    DAY0 + (i as i64 % 2) * DAY_MS + i as i64,
                    crate::gen::wallet_address(3, i % 50),
                    &[("chain", chain), ("contract", &contract)],
                )
            })
            .collect()
    }

    /// Numbers tags as the file ingest's reader does: from 1, in the order first met.
    #[derive(Default)]
    struct Reader {
        ids: HashMap<(String, String), u32>,
    }

    impl Reader {
        fn number(&mut self, events: &[Event]) -> (Vec<u32>, Vec<(String, String)>) {
            let (mut ids, mut new) = (Vec::new(), Vec::new());
            for e in events {
                for pair in &e.tags {
                    let next = self.ids.len() as u32 + 1;
                    let id = *self.ids.entry(pair.clone()).or_insert_with(|| {
                        new.push(pair.clone());
                        next
                    });
                    ids.push(id);
                }
            }
            (ids, new)
        }
    }

    fn hashes(events: &[Event]) -> Vec<ItemHashes> {
        events
            .iter()
            .map(|e| Item::new(e.item.as_bytes()).hashes)
            .collect()
    }

    /// Imports `batches`, each with its hashes and the tags as `tags` gives them.
    fn import_ahead(
        store: &Store,
        batches: &[Vec<Event>],
        mut tags: impl FnMut(&[Event]) -> (Vec<u32>, Vec<(String, String)>),
    ) -> Result<()> {
        store.import(|import| {
            for batch in batches {
                let (ids, new) = tags(batch);
                let hashes = hashes(batch);
                let ahead = Ahead {
                    hashes: &hashes,
                    tags: Some(ReaderTags {
                        ids: &ids,
                        new: &new,
                    }),
                };
                import.ingest_ahead(batch, ahead)?;
            }
            Ok(())
        })
    }

    fn import_names(store: &Store, batches: &[Vec<Event>]) -> Result<()> {
        store.import(|import| batches.iter().try_for_each(|b| import.ingest_batch(b)))
    }

    fn assert_same_sets(a: &Store, b: &Store) {
        let all = TimeRange::all();
        let mut slices = vec![
            Slice::Whole,
            Slice::tag("chain", "a"),
            Slice::tag("chain", "b"),
        ];
        slices.extend((0..8).map(|c| Slice::tag("contract", &format!("c{c}"))));
        for slice in &slices {
            let counts = (a.count(slice, &all), b.count(slice, &all));
            assert_eq!(
                counts.0.ok().map(|c| c.0),
                counts.1.ok().map(|c| c.0),
                "{slice:?}"
            );
            for day in 0..2 {
                let x = a.sketch_set(slice, DAY0 + day * DAY_MS).expect("read");
                let y = b.sketch_set(slice, DAY0 + day * DAY_MS).expect("read");
                assert_same_set(&format!("{slice:?} day {day}"), x, y);
            }
        }
    }

    /// The reader's numbers are its own: the store already knows some tags under other ids
    /// (met in another order), and later batches name new ones. Every set must get exactly
    /// the events the tag strings send it.
    #[test]
    fn reader_ids_feed_the_sets_the_tag_strings_name() {
        let known: Vec<Event> = spread(0, 20).into_iter().rev().collect();
        let batches: Vec<Vec<Event>> = (0..4).map(|b| spread(100 + b * 90, 90)).collect();
        let (by_names, by_ids) = (store(), store());
        for s in [&by_names, &by_ids] {
            s.ingest_batch(&known).expect("ingest");
            s.flush().expect("flush");
        }
        import_names(&by_names, &batches).expect("names");
        let mut reader = Reader::default();
        import_ahead(&by_ids, &batches, |b| reader.number(b)).expect("ids");
        // The reader met c0 first; the store met c5 first: the numbers differ.
        assert_ne!(reader.ids[&("contract".into(), "c0".into())], 1);
        assert_same_sets(&by_names, &by_ids);
        // A second import numbers from 1 again; a batch may name no new tag.
        let more: Vec<Vec<Event>> = vec![spread(500, 40), spread(500, 40)];
        import_names(&by_names, &more).expect("names");
        let mut reader = Reader::default();
        import_ahead(&by_ids, &more, |b| reader.number(b)).expect("ids");
        assert_same_sets(&by_names, &by_ids);
    }

    /// A piece large enough to append its log on a second thread (given a second core: the
    /// store's thread is the only busy one here) leaves the store as small pieces appended in
    /// place do: the same sets, and the same events in the log in order.
    #[test]
    fn a_large_piece_logs_beside_its_sets_as_small_ones_log_in_place() {
        // Lines of chain events' size: about ten blocks fill inside the one piece, and the
        // oldest are written early, from the piece's second thread.
        let mut events = spread(0, 6_000);
        for (i, e) in events.iter_mut().enumerate() {
            e.extra = format!(
                "{{\"hash\":\"0x{:064x}\",\"pad\":\"{}\"}}",
                i * 7919,
                "ab".repeat(120)
            );
        }
        let whole = vec![events.clone()];
        let small: Vec<Vec<Event>> = events
            .chunks(PARALLEL_PIECE / 2)
            .map(<[Event]>::to_vec)
            .collect();
        let (large, in_place) = (store(), store());
        import_names(&large, &whole).expect("large pieces");
        import_names(&in_place, &small).expect("small pieces");
        assert_same_sets(&large, &in_place);
        let blocks = crate::store::test_support::indexed_blocks(&large).len();
        assert!(
            blocks > crate::store::log::FRAMED_AHEAD + 1,
            "{blocks} blocks"
        );
        let logged = |s: &Store| {
            let mut out = Vec::new();
            s.scan_events(&Slice::Whole, &TimeRange::all(), |e, event| {
                out.push(event(e))
            })
            .expect("scan");
            out
        };
        let (a, b) = (logged(&large), logged(&in_place));
        assert_eq!(a.len(), events.len());
        assert!(a == b, "the logs differ");
        let mut expected = events.clone();
        expected.sort_by_key(|e| e.time);
        let mut got = a.clone();
        got.sort_by_key(|e| e.time);
        assert!(got == expected, "the log does not hold the events ingested");
    }

    /// A piece's log goes to a second thread only when the piece is large and a core is left
    /// for it beside the store's thread and, when the items came hashed, the reader's.
    #[test]
    fn a_piece_logs_beside_its_sets_only_with_a_core_to_spare() {
        let cores = crate::store::cores();
        assert!(!log_beside(PARALLEL_PIECE - 1, false));
        assert_eq!(log_beside(PARALLEL_PIECE, false), cores >= 2);
        assert_eq!(log_beside(PARALLEL_PIECE, true), cores >= 3);
        assert_eq!(log_beside(1 << 20, true), cores >= 3);
    }

    /// Ids that miss a tag, or that the reader never named, are not used: the strings are.
    #[test]
    fn ids_that_do_not_fit_the_batch_are_not_trusted() {
        let batches = vec![spread(0, 60)];
        let by_names = store();
        import_names(&by_names, &batches).expect("names");
        let short = store();
        let mut reader = Reader::default();
        import_ahead(&short, &batches, |b| {
            let (mut ids, new) = reader.number(b);
            ids.pop();
            (ids, new)
        })
        .expect("one id short");
        assert_same_sets(&by_names, &short);
        let unnamed = store();
        let mut reader = Reader::default();
        import_ahead(&unnamed, &batches, |b| {
            let (mut ids, new) = reader.number(b);
            ids[5] = new.len() as u32 + 1;
            (ids, new)
        })
        .expect("an id never named");
        assert_same_sets(&by_names, &unnamed);
    }

    /// A bad tag met through the reader's ids is rejected with the error the strings give:
    /// the first bad event's, even when a later event fails a check made before the tags.
    #[test]
    fn a_bad_tag_through_the_reader_is_the_error_the_strings_give() {
        let mut cases: Vec<Vec<Event>> = Vec::new();
        let mut unknown_field = spread(0, 8);
        unknown_field[2].tags[1].0 = "chian".into();
        unknown_field[5].time = i64::MAX;
        cases.push(unknown_field);
        let mut empty_value = spread(0, 8);
        empty_value[3].tags[0].1 = String::new();
        cases.push(empty_value);
        let mut twice = spread(0, 8);
        twice[4].tags[1] = twice[4].tags[0].clone();
        twice[6].item = String::new();
        cases.push(twice);
        for batch in cases {
            let batches = vec![batch];
            let by_names = import_names(&store(), &batches).expect_err("names");
            let mut reader = Reader::default();
            let s = store();
            let by_ids = import_ahead(&s, &batches, |b| reader.number(b)).expect_err("ids");
            assert_eq!(by_ids.to_string(), by_names.to_string());
            assert!(
                matches!(by_ids, StoreError::BadEvent { index, .. } if index < 5),
                "{by_ids}"
            );
            // Rejected whole: nothing of it, not even its tags, is in the store.
            assert_eq!(
                s.count(&Slice::Whole, &TimeRange::all()).expect("count").0,
                0
            );
            assert!(s.tags().expect("tags").is_empty());
        }
    }
}
