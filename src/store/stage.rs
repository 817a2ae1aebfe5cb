//! Staging: how an import stays within the memory budget and still commits all or nothing.
//!
//! During [`Store::import`] nothing may reach the sets' `S` keys before the commit, so sets
//! cannot be checkpointed and evicted as ordinary ingest does. Instead:
//!
//! - **Pieces.** An import's batch is applied in pieces touching at most
//!   [`Store::piece_sets`] distinct sets, so that even if every set a piece touches grew to the
//!   largest size the configuration allows, the sets held stay within the budget.
//! - **Staging.** After a piece, if the sets held take more than half the budget, the least
//!   recently used are let go until they take at most a quarter: clean ones (as committed) are
//!   dropped, changed ones are written to *staged* keys (`G` + the suffix of their `S` key, see
//!   [`super::kinds::STAGED`]) in engine batches of at most [`STAGE_BATCH_BYTES`] and
//!   [`STAGE_BATCH_OPS`] writes, without a sync, and remembered in `State::staged`. A later
//!   event for a staged set reads it back from its `G` keys (`ensure_loaded`); those keys are
//!   then stale (`State::stale_staged`) and are deleted before the commit unless the set is
//!   staged again.
//! - **Commit.** If anything is staged, or the changed sets take over a
//!   quarter of the budget ([`COMMIT_DIRECT_SHARE`]), every changed set is staged first (kept in memory, now clean), so
//!   the one atomic commit batch holds only the log, the all-time filter, the checkpoint record
//!   and the marker `M staged` (the commit's log position). Once that batch is synced, the
//!   staged keys are rolled forward: each `G` value is copied to its `S` key (a header with its
//!   log position set to the commit's), and the `G` key deleted, in batches as bounded as the
//!   staging ones; then the marker is deleted and the engine synced.
//! - **Recovery.** On open (and in a rollback) [`Store::finish_staging`] runs before anything
//!   reads a set: with the marker, the commit is on disk and the roll-forward is finished (it
//!   is idempotent: each copy rewrites the same value); without it, any `G` key belongs to an
//!   import that never committed and is deleted.
//!
//! Owns: pieces, staging, the marker and the roll-forward. Must not: decide when an import
//! commits or rolls back (that is `import`).

use super::engine::WriteBatch;
use super::error::{Result, StoreError};
use super::keys::{self, Part};
use super::model::Event;
use super::route::KeysView;
use super::seam::Seam;
use super::sets::{decode_header, encode_header, SetHeader, Stored};
use super::state::State;
use super::Store;
use crate::sketch::{Sketch, SketchSet};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// The most value bytes one staging or roll-forward batch holds, so no single engine batch
/// grows with the import (sled keeps a batch in memory until it is applied).
pub(crate) const STAGE_BATCH_BYTES: usize = 8 << 20;

/// The most writes one staging, roll-forward or discard batch holds. sled applies a batch
/// under one epoch guard, so the node versions every write replaces are freed only after the
/// whole batch: measured on the contracts day (`tests/bounded_import.rs`), one roll-forward
/// batch of 65,938 small writes took the process from 170 to 419 MB.
pub(crate) const STAGE_BATCH_OPS: usize = 256;

/// A commit with nothing staged writes its changed sets in its own atomic batch, as before
/// staging, unless they take more than this share of the memory budget; then they are staged
/// first. Staging writes each set twice, and in many small batches that sled 0.34 turns into
/// far more file than data (measured on 2026-12-04, compressed log: the contracts day in hour
/// buckets grew from 3.6× its JSONL to 14× when every commit of over 256 sets staged). A direct
/// commit costs sled about three times its sets' bytes while the batch is applied (the
/// contracts day: 6,600 sets of 47 MB, 417 MiB in one batch), so a quarter of the budget keeps
/// that within the budget, and only an import that already had to stage pays for staging.
const COMMIT_DIRECT_SHARE: usize = 4;
/// And unless they are more than this many: sled's cost while it applies a batch grows with its
/// writes (about 4 KB each, six or more a set) as well as their bytes; 8,192 sets keep it near
/// 200 MB, which the stated margin covers (`tests/bounded_import.rs`: the contracts day's 6,600
/// hour sets in one commit peak at 256 MB under a 64 MiB budget).
const COMMIT_DIRECT_SETS: usize = 8_192;

/// Whether a staging or roll-forward batch is full.
fn full(batch: &WriteBatch) -> bool {
    batch.bytes() >= STAGE_BATCH_BYTES || batch.len() >= STAGE_BATCH_OPS
}

/// The marker `M staged`: a commit at `log_pos` is on disk and its staged sets may still be
/// under their `G` keys.
#[derive(Serialize, Deserialize)]
pub(super) struct StagedMarker {
    pub(super) log_pos: u64,
}

/// The metadata name of the marker.
pub(super) const MARKER: &str = "staged";

impl Store {
    /// The most distinct sets one piece of an import's batch may touch: half the budget over
    /// the largest size a set can reach, at least one.
    pub(super) fn piece_sets(&self) -> Result<usize> {
        let largest = SketchSet::<Event>::largest_size_bytes(&self.config.sketches)
            .map_err(StoreError::Config)?
            .max(1);
        let half = (self.config.memory_budget / 2) as u64;
        Ok(usize::try_from(half / largest).unwrap_or(usize::MAX).max(1))
    }

    /// The end of the piece of a batch starting at `start`: the longest run touching at most
    /// `max_sets` distinct sets, and at least one event.
    pub(super) fn piece_end(keys: KeysView<'_>, start: usize, max_sets: usize) -> usize {
        let mut seen: FxHashSet<(u32, i64)> = FxHashSet::default();
        for i in start..keys.len() {
            // Inserted before the test, each key hashed once: an event that overflows the
            // piece ends it, and what it added to `seen` is dropped with it.
            seen.extend(keys.sets_of(i));
            if i > start && seen.len() > max_sets {
                return i;
            }
        }
        keys.len()
    }

    /// After a piece of an import: if the sets held take more than half the budget, lets the
    /// least recently used go until they take at most a quarter, staging the changed ones.
    /// Returns the bytes the sets still held take.
    pub(super) fn stage_over_budget(&self, st: &mut State) -> Result<usize> {
        let mut in_use = Self::sets_bytes(st);
        if in_use <= self.config.memory_budget / 2 {
            return Ok(in_use);
        }
        let target = self.config.memory_budget / 4;
        let mut by_age: Vec<((u32, i64), u64, usize)> = st
            .sets
            .iter()
            .map(|(k, a)| (*k, a.last_used, a.set.size_bytes()))
            .collect();
        by_age.sort_by_key(|&(_, used, _)| used);
        let mut victims = Vec::new();
        for (key, _, size) in by_age {
            if in_use <= target {
                break;
            }
            in_use -= size;
            victims.push(key);
        }
        self.stage_sets(st, &victims, false)?;
        Ok(in_use)
    }

    /// Writes the changed sets among `which` to their staged keys, in batches of at most
    /// [`STAGE_BATCH_OPS`] writes or [`STAGE_BATCH_BYTES`], and records them as staged. With
    /// `keep`, they stay in memory as clean sets (the commit's case); without, they and the
    /// clean ones among `which` leave memory.
    pub(super) fn stage_sets(
        &self,
        st: &mut State,
        which: &[(u32, i64)],
        keep: bool,
    ) -> Result<()> {
        let mut batch = WriteBatch::default();
        let mut in_batch: Vec<(u32, i64)> = Vec::new();
        for &key in which {
            let Some(active) = st.sets.get_mut(&key) else {
                continue;
            };
            if !active.dirty {
                if !keep {
                    st.sets.remove(&key);
                }
                continue;
            }
            active.split = self.put_set_in(
                Stored::Staged,
                &mut batch,
                &st.tags,
                key,
                &active.set,
                active.log_pos,
                active.split,
            )?;
            in_batch.push(key);
            if full(&batch) {
                self.engine.apply(std::mem::take(&mut batch))?;
                Self::staged_now(st, &mut in_batch, keep);
            }
        }
        self.engine.apply(batch)?;
        Self::staged_now(st, &mut in_batch, keep);
        Ok(())
    }

    /// Records the sets of an applied staging batch as staged.
    fn staged_now(st: &mut State, written: &mut Vec<(u32, i64)>, keep: bool) {
        for key in written.drain(..) {
            st.staged.insert(key);
            st.stale_staged.remove(&key);
            if keep {
                if let Some(active) = st.sets.get_mut(&key) {
                    active.dirty = false;
                }
            } else {
                st.sets.remove(&key);
            }
        }
    }

    /// Before an import's commit: deletes staged keys that memory has superseded and, if
    /// anything is staged or the changed sets take over a quarter of the budget (see
    /// [`COMMIT_DIRECT_SHARE`]), stages every changed set, so the commit batch stays small and
    /// the staged sets all move at the commit.
    pub(super) fn prepare_commit(&self, st: &mut State) -> Result<()> {
        let stale: Vec<(u32, i64)> = std::mem::take(&mut st.stale_staged)
            .into_iter()
            .filter(|k| !st.staged.contains(k))
            .collect();
        let mut batch = WriteBatch::default();
        for (tag, bucket) in stale {
            for part in Part::ALL {
                self.engine
                    .delete(&mut batch, keys::staged(part, tag, bucket).to_vec())?;
            }
            if full(&batch) {
                self.engine.apply(std::mem::take(&mut batch))?;
            }
        }
        self.engine.apply(batch)?;
        let dirty: Vec<(u32, i64)> = st
            .sets
            .iter()
            .filter(|(_, a)| a.dirty)
            .map(|(k, _)| *k)
            .collect();
        let dirty_bytes: usize = dirty
            .iter()
            .filter_map(|k| st.sets.get(k))
            .map(|a| a.set.size_bytes())
            .sum();
        if !st.staged.is_empty()
            || dirty_bytes > self.config.memory_budget / COMMIT_DIRECT_SHARE
            || dirty.len() > COMMIT_DIRECT_SETS
        {
            self.stage_sets(st, &dirty, true)?;
        }
        Ok(())
    }

    /// Run on open and by a rollback, before anything reads a set: finishes the roll-forward
    /// of a commit whose marker is on disk, or else deletes the staged keys of an import that
    /// never committed.
    pub(super) fn finish_staging(engine: &Seam) -> Result<()> {
        match Self::read_meta::<StagedMarker>(engine, MARKER)? {
            Some(marker) => Self::roll_forward(engine, marker.log_pos),
            None => Self::discard_staged(engine),
        }
    }

    /// Moves every staged value to its `S` key (a header with `log_pos` set to the commit's),
    /// in batches of at most [`STAGE_BATCH_OPS`] writes or [`STAGE_BATCH_BYTES`]; then deletes
    /// the marker and syncs.
    /// Idempotent: a crash part way leaves the rest for the next open.
    pub(super) fn roll_forward(engine: &Seam, log_pos: u64) -> Result<()> {
        loop {
            let mut batch = WriteBatch::default();
            for entry in engine.prefix(&[keys::STAGED]) {
                let (key, value) = entry?;
                let Some(target) = keys::committed_of_staged(&key) else {
                    return Err(StoreError::DamagedLog {
                        name: format!("staged sketch key {key:02x?}"),
                        detail: "not a key this build writes".into(),
                    });
                };
                let value = if key.get(1) == Some(&(Part::Header as u8)) {
                    Self::header_at(&key, &value, log_pos)?
                } else {
                    value
                };
                engine.put(&mut batch, target.to_vec(), value)?;
                engine.delete(&mut batch, key)?;
                if full(&batch) {
                    break;
                }
            }
            if batch.is_empty() {
                break;
            }
            engine.apply(batch)?;
        }
        let mut batch = WriteBatch::default();
        engine.delete(&mut batch, keys::meta(MARKER))?;
        engine.apply(batch)?;
        engine.sync()
    }

    /// A staged set header rewritten with the commit's log position, inline parts and all.
    fn header_at(key: &[u8], value: &[u8], log_pos: u64) -> Result<Vec<u8>> {
        let damaged = |e: String| StoreError::DamagedLog {
            name: format!("staged set header under key {key:02x?}"),
            detail: format!("{e}; the committed import cannot be finished"),
        };
        let stored = decode_header(value).map_err(damaged)?;
        let header = SetHeader {
            log_pos,
            ..stored.header
        };
        let inline = stored.inline.map(|parts| parts.map(<[u8]>::to_vec));
        encode_header(header, inline.as_ref()).map_err(|e| damaged(e.to_string()))
    }

    /// Deletes every staged key (and its chunks): what an import that did not commit left.
    /// Not synced: if the deletion is lost, the next open deletes them again.
    pub(super) fn discard_staged(engine: &Seam) -> Result<()> {
        loop {
            let mut batch = WriteBatch::default();
            for entry in engine.raw_prefix(&[keys::STAGED]) {
                let (key, _) = entry?;
                engine.delete(&mut batch, key)?;
                if full(&batch) {
                    break;
                }
            }
            if batch.is_empty() {
                return Ok(());
            }
            engine.apply(batch)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::gen::wallet_address;
    use crate::sketch::SketchSet;
    use crate::store::model::HOUR_MS;
    use crate::store::test_support::*;
    use crate::store::*;

    const DAY0: i64 = 1_764_547_200_000;
    const HOURS: u64 = 48;
    const CONTRACTS: u64 = 40;

    /// Hour buckets, two tag fields; a budget of `sets` of the largest size a set may reach
    /// (`None`: the default 1 GiB, so nothing is staged).
    fn cfg(sets: Option<usize>) -> Config {
        let base = Config {
            bucket: BucketWidth::Hour,
            tag_fields: vec!["chain".into(), "contract".into()],
            ..config()
        };
        let largest = SketchSet::<Event>::largest_size_bytes(&base.sketches).expect("size");
        Config {
            memory_budget: sets.map_or(1 << 30, |n| n * largest as usize),
            ..base
        }
    }

    /// `n` events from `first` spread over 48 hours out of time order (so staged sets are read
    /// back), three chains and 40 contracts: about 2,000 sets.
    fn spread(first: u64, n: u64) -> Vec<Event> {
        (first..first + n)
            .map(|i| {
                let hour = (i * 7) % HOURS;
                let contract = format!("c{}", i % CONTRACTS);
                let chain = ["a", "b", "c"][(i % 3) as usize];
                Event::new(
                    DAY0 + hour as i64 * HOUR_MS + (i % 1000) as i64,
                    wallet_address(9, i % 700),
                    &[("chain", chain), ("contract", &contract)],
                )
            })
            .collect()
    }

    fn slices() -> Vec<Slice> {
        let mut s = vec![Slice::Whole];
        s.extend(["a", "b", "c"].map(|c| Slice::tag("chain", c)));
        s.extend((0..CONTRACTS).map(|c| Slice::tag("contract", &format!("c{c}"))));
        s
    }

    /// Imports `events` in batches of 500; returns the most sets staged at once.
    fn import(store: &Store, events: &[Event]) -> std::result::Result<usize, StoreError> {
        store.import(|imp| {
            let mut most = 0;
            for batch in events.chunks(500) {
                imp.ingest_batch(batch)?;
                most = most.max(imp.st.staged.len());
                let held = Store::sets_bytes(imp.st);
                assert!(
                    held <= imp.store.config.memory_budget,
                    "{held} bytes of sets held over a budget of {}",
                    imp.store.config.memory_budget
                );
            }
            Ok(most)
        })
    }

    /// Every set, the counts and a few SEEN answers of `a` equal `b`'s.
    fn same_answers(a: &Store, b: &Store, at: &str) {
        let all = TimeRange::all();
        for slice in slices() {
            assert_eq!(
                a.count(&slice, &all).expect("count").0,
                b.count(&slice, &all).expect("count").0,
                "{at}: count of {slice:?}"
            );
            assert!(
                a.merged_hll(&slice, &all).expect("hll").sketch
                    == b.merged_hll(&slice, &all).expect("hll").sketch,
                "{at}: merged hll of {slice:?}"
            );
            for hour in 0..HOURS as i64 {
                let bucket = DAY0 + hour * HOUR_MS;
                let x = a.sketch_set(&slice, bucket).expect("read");
                let y = b.sketch_set(&slice, bucket).expect("read");
                assert_same_set(&format!("{at}: {slice:?} hour {hour}"), x, y);
            }
        }
        for i in [0u64, 1, 350, 699, 700, 5_000] {
            let item = wallet_address(9, i);
            assert_eq!(
                a.membership(&Slice::Whole, &all, &item).expect("seen"),
                b.membership(&Slice::Whole, &all, &item).expect("seen"),
                "{at}: SEEN {item}"
            );
        }
    }

    fn no_staged_keys(store: &Store, at: &str) {
        assert!(
            entries(store, &[keys::STAGED]).is_empty(),
            "{at}: staged keys left"
        );
        assert!(
            store
                .engine
                .get(&keys::meta(super::MARKER))
                .expect("get")
                .is_none(),
            "{at}: the staging marker left"
        );
    }

    #[test]
    fn a_tiny_budget_import_answers_like_a_large_one_and_leaves_no_staged_keys() {
        let engine = MemEngine::new();
        let small = Store::create_with(Box::new(engine.clone()), cfg(Some(8))).expect("small");
        let large = Store::create_with(Box::new(MemEngine::new()), cfg(None)).expect("large");
        let first = spread(0, 3_000);
        let staged = import(&small, &first).expect("import");
        assert!(staged > 100, "only {staged} sets were ever staged");
        assert_eq!(import(&large, &first).expect("import"), 0);
        no_staged_keys(&small, "first import");
        same_answers(&small, &large, "first import");
        // A second import reads committed sets back, stages them again, and adds buckets.
        let second = spread(3_000, 2_000);
        assert!(import(&small, &second).expect("import") > 0);
        import(&large, &second).expect("import");
        no_staged_keys(&small, "second import");
        same_answers(&small, &large, "second import");
        drop(small);
        let small = Store::open_with(Box::new(engine.clone())).expect("reopen");
        same_answers(&small, &large, "reopened");
        let report = small.check().expect("check");
        assert!(report.is_clean(), "{:?}", report.damaged);
    }

    #[test]
    fn an_import_that_fails_after_staging_leaves_the_store_as_it_was() {
        let engine = MemEngine::new();
        let store = Store::create_with(Box::new(engine.clone()), cfg(Some(8))).expect("create");
        let twin = Store::create_with(Box::new(MemEngine::new()), cfg(None)).expect("twin");
        let first = spread(0, 1_000);
        import(&store, &first).expect("import");
        import(&twin, &first).expect("import");
        let failed: std::result::Result<(), StoreError> = store.import(|imp| {
            for batch in spread(1_000, 3_000).chunks(500) {
                imp.ingest_batch(batch)?;
            }
            assert!(!imp.st.staged.is_empty(), "the import staged nothing");
            assert!(!entries(imp.store, &[keys::STAGED]).is_empty());
            Err(StoreError::Query("a bad line".into()))
        });
        assert!(failed.is_err());
        no_staged_keys(&store, "rolled back");
        same_answers(&store, &twin, "rolled back");
        drop(store);
        let store = Store::open_with(Box::new(engine.clone())).expect("reopen");
        same_answers(&store, &twin, "reopened");
        assert!(store.check().expect("check").is_clean());
    }

    /// A crash after the commit's batch is durable and before its staged sets are all moved:
    /// the next open finishes the move, whatever prefix of the move's batches survived.
    #[test]
    fn a_crash_after_the_commit_batch_is_finished_on_open() {
        let twin = Store::create_with(Box::new(MemEngine::new()), cfg(None)).expect("twin");
        let events = spread(0, 3_000);
        import(&twin, &events).expect("import");
        // Which of the move's unsynced batches survive: none, one, half, all but the last
        // (the marker's deletion).
        for which in 0..4 {
            let engine = MemEngine::new();
            let store = Store::create_with(Box::new(engine.clone()), cfg(Some(8))).expect("create");
            let outcome: std::result::Result<(), StoreError> = store.import(|imp| {
                for batch in events.chunks(500) {
                    imp.ingest_batch(batch)?;
                }
                // Syncs from here: the commit's log files (1) and batch (2), then the
                // roll-forward's (3) fails.
                engine.fail_nth_sync(3);
                Ok(())
            });
            let err = outcome.expect_err("the roll-forward's sync fails");
            assert!(
                matches!(err, StoreError::MustReopen { .. }),
                "case {which}: {err}"
            );
            let unsynced = engine.unsynced_batches();
            assert!(unsynced >= 4, "case {which}: {unsynced} batches to move");
            let keep = [0, 1, unsynced / 2, unsynced - 1][which];
            let survivor = engine.crash(keep);
            let durable = survivor.durable();
            assert!(
                durable.contains_key(&keys::meta(super::MARKER)),
                "keep {keep}: the marker is not on disk"
            );
            assert_eq!(
                durable.keys().any(|k| k[0] == keys::STAGED),
                keep < unsynced - 1,
                "keep {keep} of {unsynced}: staged values left"
            );
            drop(store);
            let store = Store::open_with(Box::new(survivor)).expect("open");
            no_staged_keys(&store, "opened");
            same_answers(&store, &twin, &format!("keep {keep} of {unsynced}"));
            let report = store.check().expect("check");
            assert!(report.is_clean(), "keep {keep}: {:?}", report.damaged);
        }
    }

    /// A crash during an import that staged sets, with every write it made surviving: the
    /// open deletes the staged keys, and the import is gone whole.
    #[test]
    fn a_crash_before_the_commit_loses_the_import_and_leaves_no_staged_keys() {
        let engine = MemEngine::new();
        let store = Store::create_with(Box::new(engine.clone()), cfg(Some(8))).expect("create");
        let twin = Store::create_with(Box::new(MemEngine::new()), cfg(None)).expect("twin");
        let first = spread(0, 1_000);
        import(&store, &first).expect("import");
        import(&twin, &first).expect("import");
        let mut survivor = None;
        let crashed: std::result::Result<(), StoreError> = store.import(|imp| {
            for batch in spread(1_000, 3_000).chunks(500) {
                imp.ingest_batch(batch)?;
            }
            survivor = Some(engine.crash(usize::MAX));
            Err(StoreError::Query("the process died here".into()))
        });
        assert!(crashed.is_err());
        let survivor = survivor.expect("crashed");
        assert!(
            survivor.durable().keys().any(|k| k[0] == keys::STAGED),
            "nothing staged reached the engine"
        );
        drop(store);
        let store = Store::open_with(Box::new(survivor)).expect("open");
        no_staged_keys(&store, "opened");
        same_answers(&store, &twin, "opened");
        assert!(store.check().expect("check").is_clean());
    }

    /// A damaged staged value (left where the store does not open it) is named "staged ..."
    /// by check, and repair removes it.
    #[test]
    fn check_names_a_damaged_staged_value_and_repair_removes_it() {
        let store = Store::create_with(Box::new(MemEngine::new()), cfg(None)).expect("create");
        import(&store, &spread(0, 100)).expect("import");
        let key = keys::staged(keys::Part::Hll, 1, DAY0);
        poke(&store, &key, Some(b"damaged".to_vec()));
        let report = store.check().expect("check");
        assert_eq!(report.damaged.len(), 1, "{:?}", report.damaged);
        let d = &report.damaged[0];
        assert!(d.name.starts_with("staged hll sketch of bucket"), "{d}");
        assert_eq!(d.kind, kinds::STAGED.name);
        assert_eq!(d.recovery, Recovery::Remove);
        let repaired = store.repair().expect("repair");
        assert!(repaired.remaining.is_empty(), "{:?}", repaired.remaining);
        no_staged_keys(&store, "repaired");
    }

    #[test]
    fn pieces_touch_at_most_the_sets_half_the_budget_holds() {
        let store = Store::create_with(Box::new(MemEngine::new()), cfg(Some(20))).expect("s");
        let max = store.piece_sets().expect("piece");
        assert_eq!(max, 10);
        let events = spread(0, 500);
        let keys = store.keys_from_names(&mut store.lock().expect("lock"), &events);
        let mut start = 0;
        while start < events.len() {
            let end = Store::piece_end(keys.view(), start, max);
            assert!(end > start);
            let mut sets = std::collections::BTreeSet::new();
            for e in &events[start..end] {
                let b = store.config.bucket.bucket_of(e.time);
                sets.insert((b, String::new()));
                for (f, v) in &e.tags {
                    sets.insert((b, format!("{f}:{v}")));
                }
            }
            assert!(sets.len() <= max || end == start + 1, "{}", sets.len());
            start = end;
        }
    }
}
