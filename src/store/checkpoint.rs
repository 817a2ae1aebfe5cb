//! Checkpoints, eviction and retention: writing every changed set back with the log position
//! it includes, in one atomic batch with the pending log, the all-time filter and the
//! checkpoint record; evicting the least recently used clean sets while memory is over budget;
//! and dropping log blocks older than the retention window.
//!
//! Owns: when sets reach the disk outside an import, and the checkpoint record (with, at an
//! import's commit, the staging marker: see `stage`).

use super::engine::WriteBatch;
use super::error::{Result, StoreError};
use super::keys::{self, Part};
use super::model::Sample;
use super::sets::{encode_header, AllTime, SetHeader, Stored, INLINE_MAX, INLINE_PARTS};
use super::stage::{StagedMarker, MARKER};
use super::state::{State, TagDict};
use super::{codec, kinds, log, Store};
use crate::sketch::{ScalableBloom, Sketch, SketchError, SketchSet};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A set as it is written: its header value and, when split, its five part values.
struct EncodedSet {
    header: Vec<u8>,
    parts: Option<[Vec<u8>; 5]>,
}

/// The checkpoint record.
#[derive(Serialize, Deserialize)]
pub(super) struct Checkpoint {
    /// Every stored set includes all of its events below this sequence number, and no set
    /// absent from the store has any.
    pub(super) log_pos: u64,
}

impl Store {
    /// Writes every changed sketch set back with the log position it includes, in one atomic
    /// batch with the pending log, syncs, and evicts the least recently used sets while memory
    /// is over budget.
    pub fn checkpoint(&self) -> Result<()> {
        let mut st = self.lock()?;
        self.checkpoint_locked(&mut st)
    }

    pub(super) fn checkpoint_locked(&self, st: &mut State) -> Result<()> {
        self.checkpoint_with(st, Vec::new())
    }

    /// A checkpoint whose batch also puts `extra` (key, value) pairs, committed with it or
    /// not at all (what `import_sketch` writes beside the set it changed).
    pub(super) fn checkpoint_with(
        &self,
        st: &mut State,
        extra: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        if st.importing {
            // An unfinished import (or one that panicked) must not reach the disk.
            return Ok(());
        }
        let unchanged = st.since_checkpoint == 0
            && st.sealed.is_empty()
            && st.unindexed.is_empty()
            && st.open_block.is_empty()
            && st.checkpoint_pos == st.next_seq
            && st.sets.values().all(|a| !a.dirty)
            && extra.is_empty();
        if unchanged {
            self.evict_over_budget(st);
            // Evicted sets leave memory once no snapshot shares them.
            self.publish(st);
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        let unsynced = self.append_pending(st)?;
        self.index_into(st, &mut batch)?;
        let pos = st.next_seq;
        let dirty: Vec<((u32, i64), &SketchSet<Sample>, bool)> = st
            .sets
            .iter()
            .filter(|(_, a)| a.dirty)
            .map(|(&key, a)| (key, &*a.set, a.split))
            .collect();
        // The log files are synced (waiting on the disk) while the sets are encoded (on the
        // cores); the batch with the blocks' index entries is applied only after both.
        let (synced, encoded) = std::thread::scope(|scope| {
            let syncing = unsynced.then(|| {
                std::thread::Builder::new()
                    .name("sketchdb-sync".into())
                    .spawn_scoped(scope, || self.engine.sync_files())
            });
            let encoded = self.encode_sets(&st.tags, &dirty, pos);
            let synced = match syncing {
                None => Ok(()),
                Some(Ok(handle)) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: synced here, after the encoding.
                Some(Err(_)) => self.engine.sync_files(),
            };
            (synced, encoded)
        });
        synced?;
        let mut written: Vec<((u32, i64), bool)> = Vec::with_capacity(dirty.len());
        for ((set, _, _), encoded) in dirty.iter().zip(encoded) {
            let split = self.put_encoded(Stored::Committed, &mut batch, *set, encoded?)?;
            written.push((*set, split));
        }
        for &(set, split) in &written {
            if let Some(active) = st.sets.get_mut(&set) {
                active.split = split;
            }
        }
        let written = written.into_iter().map(|(set, _)| set);
        let all_time = AllTime {
            bloom: ScalableBloom::clone(&st.all_time),
            log_pos: pos,
        };
        let all_time_blob =
            codec::encode(kinds::ALL_TIME.blob, &all_time).map_err(|e| StoreError::DamagedLog {
                name: "all-time bloom filter".into(),
                detail: e.to_string(),
            })?;
        self.engine
            .put(&mut batch, keys::ALL_TIME.to_vec(), all_time_blob)?;
        self.engine.put(
            &mut batch,
            keys::meta("checkpoint"),
            Self::blob(&self.path, &Checkpoint { log_pos: pos })?,
        )?;
        // An import's commit with staged sets: the marker commits them with everything else
        // (see `stage`); they move to their `S` keys once this batch is durable.
        let staged = !st.staged.is_empty();
        if staged {
            self.engine.put(
                &mut batch,
                keys::meta(MARKER),
                Self::blob(&self.path, &StagedMarker { log_pos: pos })?,
            )?;
        }
        for (key, value) in extra {
            self.engine.put(&mut batch, key, value)?;
        }
        let expired = self.expire_into(st, pos, &mut batch)?;
        if let (None, true, Some(from)) = (expired, st.retained_from_unsaved, st.log_retained_from)
        {
            self.engine.put(
                &mut batch,
                keys::meta("retained_from"),
                Self::blob(&self.path, &from)?,
            )?;
        }
        self.engine.apply(batch)?;
        // Its sets' headers are in the engine now (a staged set's once rolled forward below,
        // which finishes or leaves the store to be reopened).
        let stored = Arc::make_mut(&mut st.stored);
        stored.extend(written);
        stored.extend(st.staged.iter().copied());
        self.engine.sync()?;
        Self::after_log_written(st);
        if let Some(t) = expired {
            // Best effort (see `remove_unused_files`): the checkpoint itself is committed.
            let _ = Self::remove_unused_files(&self.engine);
            st.log_retained_from = Some(st.log_retained_from.map_or(t, |old| old.max(t)));
        }
        for active in st.sets.values_mut() {
            active.dirty = false;
            active.log_pos = pos;
        }
        st.checkpoint_pos = pos;
        st.since_checkpoint = 0;
        st.retained_from_unsaved = false;
        if staged {
            st.staged.clear();
            st.stale_staged.clear();
            if let Err(e) = Self::roll_forward(&self.engine, pos) {
                // Committed, but sets are half moved: only an open (which finishes the move
                // first) may read them now.
                let reason = format!(
                    "the import was committed, but moving its staged sketch sets into place failed ({e}); reopening the store finishes it"
                );
                self.mark_broken(st, reason.clone());
                return Err(StoreError::MustReopen {
                    path: self.path.clone(),
                    reason,
                });
            }
        }
        self.evict_over_budget(st);
        self.acknowledge(st)?;
        // What it wrote and evicted: readers of older views may find sets rewritten since.
        self.publish(st);
        Ok(())
    }

    /// Adds a set's five parts and its header (`events`, and `pos`, the log position it
    /// includes) to `batch`: what a checkpoint writes for a changed set and `repair` for a
    /// rebuilt one. Returns whether it wrote the set split (see [`Store::put_set_in`]).
    pub(super) fn put_set(
        &self,
        batch: &mut WriteBatch,
        tags: &TagDict,
        (tag, bucket): (u32, i64),
        s: &SketchSet<Sample>,
        pos: u64,
        split: bool,
    ) -> Result<bool> {
        self.put_set_in(Stored::Committed, batch, tags, (tag, bucket), s, pos, split)
    }

    /// [`Store::put_set`] under the set's committed (`S`) or staged (`G`) keys. The set goes
    /// inline in its header while its parts take at most [`INLINE_MAX`] bytes and it was not
    /// `split` already; otherwise as six values, and the return says so. Never from split to
    /// inline: the old part keys would stay behind.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn put_set_in(
        &self,
        stored: Stored,
        batch: &mut WriteBatch,
        tags: &TagDict,
        set: (u32, i64),
        s: &SketchSet<Sample>,
        pos: u64,
        split: bool,
    ) -> Result<bool> {
        let encoded = self.encode_set(stored, tags, set, s, pos, split)?;
        self.put_encoded(stored, batch, set, encoded)
    }

    /// [`Store::encode_set`] of each of `sets` (key, set, already split) as committed sets at
    /// `pos`, in order. A checkpoint after a long import encodes thousands of sets while
    /// nothing else runs (the parser has finished): spread over the cores, that part of the
    /// commit takes half the time on two.
    fn encode_sets(
        &self,
        tags: &TagDict,
        sets: &[((u32, i64), &SketchSet<Sample>, bool)],
        pos: u64,
    ) -> Vec<Result<EncodedSet>> {
        let encode = |chunk: &[((u32, i64), &SketchSet<Sample>, bool)]| {
            chunk
                .iter()
                .map(|&(key, s, split)| {
                    self.encode_set(Stored::Committed, tags, key, s, pos, split)
                })
                .collect::<Vec<_>>()
        };
        let threads = super::cores().min(4);
        // A thread costs tens of microseconds; a few sets are encoded sooner in place.
        if threads < 2 || sets.len() < 64 {
            return encode(sets);
        }
        let chunk = sets.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let mut chunks = sets.chunks(chunk);
            let first = chunks.next().unwrap_or_default();
            let others: Vec<_> = chunks.map(|c| scope.spawn(move || encode(c))).collect();
            let mut all = encode(first);
            for other in others {
                match other.join() {
                    Ok(done) => all.extend(done),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            all
        })
    }

    /// A set's parts and header, encoded: the pure half of [`Store::put_set_in`].
    fn encode_set(
        &self,
        stored: Stored,
        tags: &TagDict,
        (tag, bucket): (u32, i64),
        s: &SketchSet<Sample>,
        pos: u64,
        split: bool,
    ) -> Result<EncodedSet> {
        let name = |part: Part| self.blob_name_in(stored, tags, part, tag, bucket);
        let encoded = [
            (Part::Bloom, s.bloom.encode()),
            (Part::Hll, s.hll.encode()),
            (Part::Theta, s.theta.encode()),
            (Part::CountMin, s.cms.encode()),
            (Part::Reservoir, super::sets::encode_reservoir(&s.reservoir)),
        ];
        let mut blobs: [Vec<u8>; 5] = Default::default();
        for ((part, blob), slot) in encoded.into_iter().zip(blobs.iter_mut()) {
            *slot = blob.map_err(|source: SketchError| StoreError::Damaged {
                name: name(part),
                source,
            })?;
        }
        let header = SetHeader {
            events: s.events,
            log_pos: pos,
        };
        let split = split || blobs.iter().map(Vec::len).sum::<usize>() > INLINE_MAX;
        let inline = (!split).then_some(&blobs);
        let header = encode_header(header, inline).map_err(|e| StoreError::DamagedLog {
            name: name(Part::Header),
            detail: e.to_string(),
        })?;
        Ok(EncodedSet {
            header,
            parts: split.then_some(blobs),
        })
    }

    /// Puts an encoded set under its committed or staged keys; returns whether it is split.
    fn put_encoded(
        &self,
        stored: Stored,
        batch: &mut WriteBatch,
        (tag, bucket): (u32, i64),
        encoded: EncodedSet,
    ) -> Result<bool> {
        let split = encoded.parts.is_some();
        for (part, blob) in INLINE_PARTS
            .into_iter()
            .zip(encoded.parts.into_iter().flatten())
        {
            self.engine
                .put(batch, stored.key(part, tag, bucket), blob)?;
        }
        self.engine
            .put(batch, stored.key(Part::Header, tag, bucket), encoded.header)?;
        Ok(split)
    }

    /// Evicts clean sets, least recently used first, while memory is over budget: down to half
    /// the budget, so the next batches do not checkpoint again at once. Dirty sets stay (only
    /// a checkpoint may drop them).
    pub(super) fn evict_over_budget(&self, st: &mut State) {
        let mut in_use = Self::sets_bytes(st);
        if in_use <= self.config.memory_budget {
            return;
        }
        let target = self.config.memory_budget / 2;
        let mut by_age: Vec<((u32, i64), u64)> = st
            .sets
            .iter()
            .filter(|(_, a)| !a.dirty)
            .map(|(k, a)| (*k, a.last_used))
            .collect();
        by_age.sort_by_key(|&(_, used)| used);
        for (key, _) in by_age {
            if in_use <= target {
                break;
            }
            if let Some(a) = st.sets.remove(&key) {
                in_use -= a.set.size_bytes();
            }
        }
    }

    /// Drops log blocks older than the retention window. Only blocks wholly below the
    /// checkpoint position go: the ones after it are still needed for recovery. Sketches are
    /// never touched. Returns the new oldest retained time if anything was dropped.
    pub(super) fn expire_into(
        &self,
        st: &State,
        checkpoint: u64,
        batch: &mut WriteBatch,
    ) -> Result<Option<i64>> {
        let (Some(retention), Some(newest)) = (self.config.retention_ms, st.newest) else {
            return Ok(None);
        };
        // Saturating: a store created before retention was bounded may hold any value.
        let cutoff = newest.saturating_sub(retention);
        let mut dropped_any = false;
        for entry in self.engine.prefix(&[keys::INDEX]) {
            let (k, v) = entry?;
            let Ok(info) = log::BlockInfo::decode(&v) else {
                continue;
            };
            if info.max_time < cutoff && info.end_seq() <= checkpoint {
                self.engine.delete(batch, k.clone())?;
                // A block in a log file goes with its file, once every block there expired.
                if info.place.is_none() {
                    self.engine
                        .delete(batch, keys::log(info.first_seq).to_vec())?;
                }
                dropped_any = true;
            }
        }
        if dropped_any {
            // Never move backwards: `newest` is only known for events seen since open.
            let from = st.log_retained_from.map_or(cutoff, |old| old.max(cutoff));
            self.engine.put(
                batch,
                keys::meta("retained_from"),
                Self::blob(&self.path, &from)?,
            )?;
            return Ok(Some(from));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::*;
    use crate::store::*;

    /// Enough changed sets that the checkpoint encodes them on several threads: every one must
    /// read back as it was written, under its own key, however the chunks fell.
    #[test]
    fn sets_encoded_on_several_threads_read_back_each_under_its_own_key() {
        let dir = tempdir("parallel-encode");
        let store = Store::create(&dir, config()).expect("create");
        let chains = 150u64;
        let batch: Vec<Event> = (0..30_000u64)
            .map(|i| {
                let chain = format!("c{}", i % chains);
                // Chain c_k gets k + 1 distinct wallets, so no two sets are alike.
                let wallet = crate::gen::wallet_address(4, (i / chains) % (i % chains + 1));
                Event::new(1_764_547_200_000 + i as i64, wallet, &[("chain", &chain)])
            })
            .collect();
        store.ingest_batch(&batch).expect("ingest");
        let answers = |store: &Store| -> Vec<(u64, Vec<u8>)> {
            (0..chains)
                .map(|k| {
                    let slice = Slice::tag("chain", &format!("c{k}"));
                    let count = store.count(&slice, &TimeRange::all()).expect("count").0;
                    let hll = store.merged_hll(&slice, &TimeRange::all()).expect("hll");
                    (count, hll.sketch.expect("some").register_values())
                })
                .collect()
        };
        let before = answers(&store);
        assert_eq!(before[7].0, 200);
        store.checkpoint().expect("checkpoint");
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(answers(&store), before);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
