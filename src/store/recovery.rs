//! Opening a store: sled with the store's settings, the metadata (format, configuration,
//! checkpoint), the tag dictionary, the all-time filter, the log's end, orphan blocks removed,
//! an import's staged sets finished or discarded (see `stage`), and replay of the log past the
//! checkpoint.
//!
//! Owns: the path from files on disk to a usable in-memory [`State`] after a clean close or a
//! crash.

use super::ack::Ack;
use super::checkpoint::Checkpoint;
use super::error::{Result, StoreError};
use super::model::{self, Config, Event};
use super::seam::Seam;
use super::sets::AllTime;
use super::state::{State, TagDict};
use super::{codec, keys, kinds, log, Store, FORMAT_VERSION, OLDEST_FORMAT};
use crate::hash::Item;
use crate::sketch::{ScalableBloom, Sketch};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

impl Store {
    pub(super) fn blob<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>> {
        codec::encode(kinds::META.blob, value).map_err(|e| StoreError::DamagedLog {
            name: format!("{} metadata", path.display()),
            detail: e.to_string(),
        })
    }

    pub(super) fn read_meta<T: serde::de::DeserializeOwned>(
        engine: &Seam,
        name: &str,
    ) -> Result<Option<T>> {
        match engine.get(&keys::meta(name))? {
            None => Ok(None),
            Some(bytes) => codec::decode(kinds::META.blob, &bytes)
                .map(Some)
                .map_err(|e| StoreError::DamagedLog {
                    name: format!("store metadata '{name}'"),
                    detail: e.to_string(),
                }),
        }
    }

    /// The stored configuration, in its current layout or the one before `lowercase_items`
    /// (see [`model::ConfigV1`]).
    pub(super) fn read_config(engine: &Seam) -> Result<Config> {
        let config = match Self::read_meta::<Config>(engine, "config") {
            Ok(c) => c,
            Err(current) => match Self::read_meta::<model::ConfigV2>(engine, "config") {
                Ok(old) => old.map(Config::from),
                Err(_) => match Self::read_meta::<model::ConfigV1>(engine, "config") {
                    Ok(old) => old.map(Config::from),
                    Err(_) => return Err(current),
                },
            },
        };
        config.ok_or_else(|| StoreError::NotAStore {
            path: engine.path().to_path_buf(),
        })
    }

    pub(super) fn load(engine: Seam) -> Result<Store> {
        let (config, mut state) = match Self::read_state(&engine) {
            Ok(read) => read,
            // An engine that lost even the store's metadata: if anything was acknowledged,
            // that is the loss to report, not a directory that never held a store.
            Err(e @ StoreError::NotAStore { .. }) => {
                Ack::verify(&engine, 0)?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // Before anything is written: a log shorter than acknowledged is refused, not opened.
        state.acked = Ack::verify(&engine, state.next_seq)?;
        // Before anything new is written at these positions.
        Self::remove_orphan_blocks(&engine, state.next_seq)?;
        Self::remove_unused_files(&engine)?;
        // Before anything reads a set: a committed import's staged sets moved into place, an
        // uncommitted one's deleted.
        Self::finish_staging(&engine)?;
        state.stored = Arc::new(Self::stored_sets(&engine)?);
        // Before anything is written in this build's forms, which an older build cannot read.
        if Self::read_meta::<u32>(&engine, "format")? != Some(FORMAT_VERSION) {
            let mut batch = super::WriteBatch::default();
            engine.put(
                &mut batch,
                keys::meta("format"),
                Self::blob(engine.path(), &FORMAT_VERSION)?,
            )?;
            engine.apply(batch)?;
            engine.sync()?;
        }
        let store = Store::assemble(engine, config, state);
        if let Err(e) = store.replay() {
            // A replay that stopped halfway (a damaged set it needed) leaves sets holding only
            // some of their events; the drop's checkpoint would write them as complete, with
            // the current log position, and lose the rest for good.
            if let Ok(mut st) = store.state.lock() {
                store.mark_broken(&mut st, format!("recovery failed: {e}"));
            }
            return Err(e);
        }
        Ok(store)
    }

    /// The store's configuration and in-memory state as stored: no sets loaded, nothing
    /// replayed.
    pub(super) fn read_state(engine: &Seam) -> Result<(Config, State)> {
        let path = engine.path().to_path_buf();
        let version: u32 = match Self::read_meta(engine, "format")? {
            Some(v) => v,
            None => return Err(StoreError::NotAStore { path }),
        };
        if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&version) {
            return Err(StoreError::UnsupportedVersion {
                path,
                found: version,
                oldest: OLDEST_FORMAT,
                supported: FORMAT_VERSION,
            });
        }
        let config = Self::read_config(engine)?;
        let checkpoint: Checkpoint =
            Self::read_meta(engine, "checkpoint")?.unwrap_or(Checkpoint { log_pos: 0 });
        let log_retained_from: Option<i64> = Self::read_meta(engine, "retained_from")?;

        let mut tags = TagDict::default();
        for entry in engine.prefix(&[keys::TAG]) {
            let (k, v) = entry?;
            let id = k
                .get(1..5)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes);
            let name: String =
                codec::decode(kinds::TAG.blob, &v).map_err(|e| StoreError::DamagedLog {
                    name: format!("tag dictionary entry {id:?}"),
                    detail: e.to_string(),
                })?;
            // Ids are dense and in key order; a gap or repeat would silently shift every later
            // tag onto the wrong sketches.
            let expected = tags.names.len() as u32 + 1;
            if id != Some(expected) || tags.id(&name).is_some() {
                return Err(StoreError::DamagedLog {
                    name: format!("tag dictionary entry {id:?} ('{name}')"),
                    detail: format!("expected id {expected}: the dictionary has a gap or a repeat"),
                });
            }
            tags.intern(&name);
        }
        tags.persisted = tags.names.len() as u32;

        let all_time = match engine.get(keys::ALL_TIME)? {
            Some(bytes) => codec::decode::<AllTime>(kinds::ALL_TIME.blob, &bytes)
                .map_err(|e| StoreError::DamagedLog {
                    name: "all-time bloom filter".into(),
                    detail: e.to_string(),
                })
                .and_then(|a| {
                    a.bloom.validate().map_err(|source| StoreError::Damaged {
                        name: "all-time bloom filter".into(),
                        source,
                    })?;
                    Ok(a)
                })?,
            None => AllTime {
                bloom: Self::new_all_time(&config)?,
                log_pos: 0,
            },
        };

        let mut imported = std::collections::BTreeMap::new();
        for entry in engine.prefix(&[keys::IMPORTED]) {
            let (k, v) = entry?;
            if let Some(set) = keys::parse_imported(&k) {
                // A damaged record is check's finding; meanwhile its set counts as holding
                // both families, so nothing answers it from the raw log alone.
                let families = super::imported::decode_imported(&v)
                    .map_or(super::ImportedSets { hll: 1, theta: 1 }, |r| r.families());
                imported.insert(set, families);
            }
        }

        let last_block = engine.last_in(&[keys::INDEX], &[keys::INDEX + 1])?;
        let next_seq = match last_block {
            Some((_, v)) => log::BlockInfo::decode(&v)
                .map_err(|detail| StoreError::DamagedLog {
                    name: "last log block index".into(),
                    detail,
                })?
                .end_seq(),
            None => 0,
        };

        // Retention may have dropped the newest blocks (late events older than the window);
        // sequence numbers must never be reused, so positions recorded elsewhere count too.
        let next_seq = next_seq.max(checkpoint.log_pos).max(all_time.log_pos);
        let state = State {
            tags: Arc::new(tags),
            next_seq,
            sealed: Vec::new(),
            finisher: None,
            unindexed: Vec::new(),
            open_block: log::BlockBuilder::new(next_seq),
            sets: FxHashMap::default(),
            all_time: Arc::new(all_time.bloom),
            all_time_pos: all_time.log_pos,
            checkpoint_pos: checkpoint.log_pos,
            since_checkpoint: 0,
            clock: 0,
            modified: Default::default(),
            newest: None,
            deferred_error: None,
            log_retained_from,
            retained_from_unsaved: false,
            importing: false,
            staged: BTreeSet::new(),
            stale_staged: BTreeSet::new(),
            import_failed: None,
            import_held: None,
            reader_tags: Vec::new(),
            broken: None,
            imported,
            acked: None,
            // Filled in once staging is finished (see `stored_sets`).
            stored: Default::default(),
        };
        Ok((config, state))
    }

    /// Every set with a committed header (one scan of the header keys), read once staging is
    /// finished so that a committed import's sets are among them.
    pub(super) fn stored_sets(engine: &Seam) -> Result<BTreeSet<(u32, i64)>> {
        let mut out = BTreeSet::new();
        for entry in engine.prefix(&[keys::SKETCH, keys::Part::Header as u8]) {
            let (k, _) = entry?;
            if let Some(set) = keys::parse_sketch(&k) {
                out.insert(set);
            }
        }
        Ok(out)
    }

    pub(super) fn new_all_time(config: &Config) -> Result<ScalableBloom> {
        ScalableBloom::new(config.sketches.bloom_capacity, config.sketches.bloom_fpr)
            .map_err(StoreError::Config)
    }

    /// Replays log events past each set's checkpoint (after a crash, or a drop without a
    /// checkpoint). Events below a set's stored position are already in it and are skipped, so
    /// nothing is counted twice.
    pub(super) fn replay(&self) -> Result<()> {
        let mut st = self.lock()?;
        let from = st.checkpoint_pos.min(st.all_time_pos);
        if from >= st.next_seq {
            return Ok(());
        }
        self.replay_into(&mut st, from, None)?;
        // Replay loads every set the replayed events touch; hold no more than the budget after.
        if Self::sets_bytes(&st) > self.config.memory_budget {
            self.checkpoint_locked(&mut st)?;
        }
        self.publish(&st);
        Ok(())
    }

    /// Applies the logged events from `from` on to their sets, each event only to a set that
    /// does not include it yet (`seq ≥ log_pos`). With `only`, just those `(tag, bucket)` sets
    /// (which the caller has put in memory) are fed, from the blocks that can hold their
    /// events, and the all-time filter is left alone: that is how `repair` rebuilds a damaged
    /// set, by the same path as recovery, from an empty set at position 0.
    pub(super) fn replay_into(
        &self,
        st: &mut State,
        from: u64,
        only: Option<&BTreeSet<(u32, i64)>>,
    ) -> Result<()> {
        let buckets: Option<BTreeSet<i64>> = only.map(|o| o.iter().map(|&(_, b)| b).collect());
        let wanted = |info: &log::BlockInfo| {
            info.end_seq() > from
                && buckets.as_ref().is_none_or(|bs| {
                    // Buckets overlapping [min_time, max_time].
                    let lo = self.config.bucket.bucket_of(info.min_time);
                    bs.range(lo..).next().is_some_and(|&b| b <= info.max_time)
                })
        };
        let is_wanted_bucket = |bucket: i64| buckets.as_ref().is_none_or(|bs| bs.contains(&bucket));
        let mut events: Vec<(u64, Event, Vec<u32>)> = Vec::new();
        let tags = &st.tags;
        self.for_each_block(wanted, &|| false, |ev| {
            if ev.seq >= from && is_wanted_bucket(self.config.bucket.bucket_of(ev.time)) {
                events.push((ev.seq, Self::to_event(ev, tags), ev.tag_ids().to_vec()));
            }
        })?;
        for (seq, event, tag_ids) in events {
            let bucket = self.config.bucket.bucket_of(event.time);
            let item = Item::new(event.item.as_bytes());
            for &tag in std::iter::once(&keys::WHOLE).chain(&tag_ids) {
                if only.is_some_and(|o| !o.contains(&(tag, bucket))) {
                    continue;
                }
                self.ensure_loaded(st, tag, bucket)?;
                st.clock += 1;
                let clock = st.clock;
                if let Some(active) = st.sets.get_mut(&(tag, bucket)) {
                    if seq >= active.log_pos {
                        Arc::make_mut(&mut active.set)
                            .update(&item, || self.sample_of(seq, || event.clone()));
                        active.log_pos = seq + 1;
                        active.dirty = true;
                        active.last_used = clock;
                    }
                }
            }
            if only.is_none() {
                if seq >= st.all_time_pos {
                    Arc::make_mut(&mut st.all_time).insert(&item.hashes.sha);
                    st.all_time_pos = seq + 1;
                }
                st.newest = Some(st.newest.map_or(event.time, |n| n.max(event.time)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::*;
    use crate::store::*;

    /// Replay after a crash loads every set the replayed events touch; it ends within the
    /// memory budget.
    #[test]
    fn replay_ends_within_the_memory_budget() {
        let dir = tempdir("replay-budget");
        let budget = 2
            * SketchSet::<Event>::largest_size_bytes(&config().sketches).expect("size") as usize
            * 3;
        let cfg = Config {
            bucket: BucketWidth::Hour,
            memory_budget: budget,
            ..config()
        };
        let store = Store::create(&dir, cfg).expect("create");
        // 60 hours, one batch each: ingest checkpoints and evicts as it goes.
        for h in 0..60i64 {
            let batch: Vec<Event> = events(h as u64 * 50, 50)
                .into_iter()
                .map(|e| Event {
                    time: 1_764_547_200_000 + h * model::HOUR_MS,
                    ..e
                })
                .collect();
            store.ingest_batch(&batch).expect("ingest");
        }
        store.flush().expect("flush");
        // What a crash leaves: the log flushed, the sets never checkpointed since. Rewinding
        // the checkpoint record makes the next open replay every event.
        poke(
            &store,
            &keys::meta("checkpoint"),
            Some(Store::blob(&dir, &Checkpoint { log_pos: 0 }).expect("blob")),
        );
        poke(&store, keys::ALL_TIME, None);
        for (key, _) in entries(&store, &[keys::SKETCH]) {
            poke(&store, &key, None);
        }
        // Keep the drop from checkpointing over what was just rewound.
        store.lock().expect("lock").broken = Some("test: simulated crash".into());
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        let used = store.memory_use().expect("memory").sets;
        assert!(
            used <= budget,
            "{used} bytes of sets over a budget of {budget}"
        );
        assert_eq!(
            store
                .count(&Slice::Whole, &TimeRange::all())
                .expect("count")
                .0,
            3_000
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An open whose replay stops at a damaged set writes nothing: once the damage is mended,
    /// the next open replays everything and no event is lost.
    #[test]
    fn an_open_that_fails_halfway_through_replay_writes_nothing() {
        let dir = tempdir("replay-fails");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        store.ingest_batch(&events(100, 100)).expect("ingest");
        store.flush().expect("flush");
        // A crash: the log past the checkpoint is durable, the sets are not.
        store.lock().expect("lock").broken = Some("test: simulated crash".into());
        // chain:b's set, small enough to be stored inline in its header.
        let hll = keys::sketch(keys::Part::Header, 2, 1_764_547_200_000);
        let good = store.engine.get(&hll).expect("get").expect("stored");
        poke(&store, &hll, Some(b"damaged".to_vec()));
        drop(store);
        let err = Store::open(&dir)
            .err()
            .expect("replay needs chain:b's damaged set");
        assert!(err.to_string().contains("chain:b"), "{err}");
        // Mend the damage behind the store's back, then open for real.
        {
            let engine = SledEngine::open(&dir).expect("engine").expect("a store");
            let mut batch = WriteBatch::default();
            batch.put(hll.to_vec(), good).expect("put");
            engine.apply(batch).expect("apply");
            engine.sync().expect("sync");
        }
        let store = Store::open(&dir).expect("open");
        let whole = store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count");
        assert_eq!(whole.0, 200);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn blocks_left_by_a_crash_are_removed_on_open() {
        let dir = tempdir("orphans");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.flush().expect("flush");
        let kept = log_files(&store);
        assert_eq!(kept.len(), 1, "{kept:?}");
        // What a crash after early block writes, before the flush that indexes them, leaves:
        // bytes after the last indexed block, a later file, and (from a format-5 build) an `L`
        // key past the end.
        let next = store.lock().expect("lock").next_seq;
        store
            .engine
            .file_append(&kept[0].0, b"written early, never indexed")
            .expect("append");
        store
            .engine
            .file_append(&log::file_name(next + 1), b"a later file")
            .expect("append");
        poke(&store, &keys::log(next), Some(b"never indexed".to_vec()));
        // The closing checkpoint indexes only blocks this process wrote, so they stay orphans.
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        let (l, i) = block_keys(&store);
        assert_eq!(l, i, "the orphan key is gone: {l:?}");
        assert_eq!(log_files(&store), kept, "cut back to the indexed blocks");
        assert_eq!(logged_events(&store), 100);
        store.ingest_batch(&events(100, 10)).expect("ingest");
        store.flush().expect("flush");
        assert_eq!(logged_events(&store), 110);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
