//! Routing a checked batch into the store: tags interned, every set the batch touches loaded
//! first (so damage rejects the batch whole), each set fed its events family by family, the
//! all-time filter, and each event encoded into the open log block.
//!
//! Inside an import, a batch is applied in pieces with staging between them (see `stage`), so
//! the sets held stay within the memory budget; a piece that fails then fails the import.
//!
//! Owns: applying a batch to the in-memory state. Must not: decide durability (flushes,
//! checkpoints and imports do).

use super::error::{Result, StoreError};
use super::keys;
use super::model::Event;
use super::state::{State, TagDict};
use super::Store;
use crate::hash::{Item, ItemHashes};
use crate::sketch::Sketch;
use rustc_hash::FxHashMap;
use std::sync::Arc;

impl Store {
    /// `hashed`, when given, holds each event's item hashes computed ahead (on another thread).
    pub(super) fn ingest_locked(
        &self,
        st: &mut State,
        events: &[Event],
        hashed: Option<&[ItemHashes]>,
    ) -> Result<()> {
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
        self.check_batch(events)?;
        if !st.importing {
            let _grew = self.apply_piece(st, events, hashed)?;
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
        // memory budget whatever the batch touches (see `stage`).
        if let Some(why) = &st.import_failed {
            return Err(StoreError::ImportFailed {
                path: self.path.clone(),
                reason: why.clone(),
            });
        }
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
            let end = self.piece_end(events, start, max_sets);
            let applied = self
                .apply_piece(st, &events[start..end], hashed.map(|h| &h[start..end]))
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

    /// Applies checked, normalised events to memory: tags interned, sets loaded, sketches
    /// updated, events into the open log block. A set that fails to load rejects the events
    /// before any set changes. Returns how many bytes the sets held grew by: the sets it
    /// touched after it, less the ones held before it (so a set it loaded counts whole), or 0
    /// if they shrank (as a form converting can).
    fn apply_piece(
        &self,
        st: &mut State,
        events: &[Event],
        hashed: Option<&[ItemHashes]>,
    ) -> Result<usize> {
        let tags_before = st.tags.names.len();
        // Resolve tags and load every set the batch touches before changing any of them, so a
        // damaged blob rejects the whole batch and leaves memory as it was.
        let mut buckets: Vec<i64> = Vec::with_capacity(events.len());
        let mut tag_ids: Vec<u32> = Vec::with_capacity(events.len());
        let mut tag_ends: Vec<usize> = Vec::with_capacity(events.len());
        for e in events {
            for (f, v) in &e.tags {
                let id = TagDict::intern_pair(&mut st.tags, f, v);
                tag_ids.push(id);
            }
            tag_ends.push(tag_ids.len());
            buckets.push(self.config.bucket.bucket_of(e.time));
        }
        let mut needed: Vec<(u32, i64)> = Vec::new();
        let mut start = 0;
        for (&bucket, &end) in buckets.iter().zip(&tag_ends) {
            needed.push((keys::WHOLE, bucket));
            needed.extend(tag_ids[start..end].iter().map(|&t| (t, bucket)));
            start = end;
        }
        needed.sort_unstable();
        needed.dedup();
        let mut loaded_now: Vec<(u32, i64)> = Vec::new();
        for &(tag, bucket) in &needed {
            if st.sets.contains_key(&(tag, bucket)) {
                continue;
            }
            if let Err(e) = self.ensure_loaded(st, tag, bucket) {
                for key in loaded_now {
                    st.sets.remove(&key);
                }
                Arc::make_mut(&mut st.tags).truncate(tags_before);
                return Err(e);
            }
            loaded_now.push((tag, bucket));
        }
        let size_of = |st: &State, key| st.sets.get(key).map_or(0, |a| Sketch::size_bytes(&*a.set));
        // `loaded_now` was filled in `needed`'s sorted order: a search, not a scan, per key
        // (a first piece of a 2,000-value tag loads thousands of sets).
        let before: usize = needed
            .iter()
            .filter(|k| loaded_now.binary_search(k).is_err())
            .map(|k| size_of(st, k))
            .sum();
        st.clock += 1;
        let clock = st.clock;
        let modified = Arc::make_mut(&mut st.modified);
        for &key in &needed {
            modified.insert(key, clock);
            if let Some(active) = st.sets.get_mut(&key) {
                active.dirty = true;
                active.last_used = clock;
            }
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
        let mut routes: FxHashMap<(u32, i64), Vec<usize>> = FxHashMap::default();
        let mut start = 0;
        for (i, (&bucket, &end)) in buckets.iter().zip(&tag_ends).enumerate() {
            routes.entry((keys::WHOLE, bucket)).or_default().push(i);
            for &t in &tag_ids[start..end] {
                routes.entry((t, bucket)).or_default().push(i);
            }
            start = end;
        }
        let first_seq = st.next_seq;
        for (key, which) in &routes {
            if let Some(active) = st.sets.get_mut(key) {
                Arc::make_mut(&mut active.set).update_batch(&items, which, |i| {
                    self.sample_of(first_seq + i as u64, || events[i].clone())
                });
                if let Some(&last) = which.last() {
                    active.log_pos = first_seq + last as u64 + 1;
                }
            }
        }
        let all_time = Arc::make_mut(&mut st.all_time);
        for (n, item) in items.iter().enumerate() {
            if let Some(ahead) = items.get(n + 8) {
                all_time.prefetch(&ahead.hashes.sha);
            }
            all_time.insert(&item.hashes.sha);
        }
        let mut start = 0;
        for ((event, item), &end) in events.iter().zip(&items).zip(&tag_ends) {
            let ids = &tag_ids[start..end];
            start = end;
            self.append_to_log(
                st,
                event.time,
                &event.item,
                item.hashes.murmur[0],
                ids,
                &event.extra,
            );
        }
        st.all_time_pos = st.next_seq;
        st.since_checkpoint += events.len() as u64;
        let after: usize = needed.iter().map(|k| size_of(st, k)).sum();
        Ok(after.saturating_sub(before))
    }
}
