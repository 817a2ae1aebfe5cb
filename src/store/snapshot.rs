//! Snapshots: the consistent state readers see, published by the writer, read without its lock.
//!
//! Owns: [`View`] (what a publication holds), publishing it, taking a [`Snapshot`] of it, and
//! reading the log as a view saw it. Must not: change the writer's state beyond publishing (the
//! typed reads themselves are `ops`).
//!
//! The writer publishes after every checkpoint (an import's commit is one), every opening, and
//! every flush that follows a snapshot (so a writer nobody reads never copies); a reader that finds
//! unpublished changes publishes them itself if the writer is idle (so a thread reads its own
//! writes), and otherwise reads the last publication instead of waiting for the writer's
//! parsing, hashing, log writing or fsync. A publication costs one pointer per set held for
//! ingest: sets, the tag dictionary and the all-time filter are shared with the writer until it
//! next changes them, when it copies them (`Arc::make_mut`).
//!
//! Sets a view does not hold are read from disk. A checkpoint may since have rewritten one
//! with events the view does not include; its stored log position then lies past the view's
//! end, and the read fails with [`StoreError::Stale`]: the statement is run again on the
//! next publication, which that checkpoint makes as it ends.

use super::error::{Result, StoreError};
use super::log::{self, BlockInfo, LogEvent};
use super::state::{State, TagDict};
use super::{model::Sample, Store};
use crate::sketch::{ScalableBloom, SketchSet};
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, TryLockError};

/// One publication of the writer's state.
pub(crate) struct View {
    /// Counts publications: a later one has a larger number.
    pub(crate) generation: u64,
    /// The writer's clock when published: every change a view includes was made at or before it.
    pub(crate) clock: u64,
    pub(crate) tags: Arc<TagDict>,
    /// The sets held for ingest when published.
    pub(crate) sets: FxHashMap<(u32, i64), Arc<SketchSet<Sample>>>,
    /// Per (tag, bucket), the clock of its last change (for cached merges).
    pub(crate) modified: Arc<FxHashMap<(u32, i64), u64>>,
    pub(crate) all_time: Arc<ScalableBloom>,
    /// Events below this sequence number are visible; none at or past it.
    pub(crate) end_seq: u64,
    /// Blocks written under their `L` keys whose `I` entries were still to come.
    unindexed: Vec<BlockInfo>,
    /// Events not yet on disk when published: sealed blocks and the open one, as raw bodies.
    pending: Vec<(BlockInfo, Arc<log::Pending>)>,
    pub(crate) log_retained_from: Option<i64>,
    /// Sets holding imported sketches, by family (see `imported`).
    pub(crate) imported: std::collections::BTreeMap<(u32, i64), super::ImportedSets>,
    /// The sets committed in the engine when published (see `State::stored`).
    pub(crate) stored: Arc<std::collections::BTreeSet<(u32, i64)>>,
}

/// One consistent state of a store to read: every statement of the query engine reads one.
/// Cheap to take and to hold (it shares what it reads with the writer); holding one never
/// blocks ingest, but keeps the sets it shares in memory until dropped.
pub struct Snapshot<'s> {
    pub(crate) store: &'s Store,
    pub(crate) view: Arc<View>,
}

/// How many times a statement is run again on a fresh view before giving up (each retry
/// follows a checkpoint that rewrote a set the statement read; two in a row are already rare).
pub(crate) const STALE_RETRIES: usize = 4;

/// How long a stale read waits for the next publication before it waits for the writer.
const NEWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

thread_local! {
    /// Per thread, the store (by [`Store`]'s `id`) it last ingested into and how far: a
    /// snapshot taken by that thread waits for the writer rather than miss its own events.
    static LAST_WRITE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A number unique to each [`Store`] handle of this process.
pub(crate) fn next_store_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Store {
    /// What the writer's state holds now, as a view; the sets, dictionary and filter are
    /// shared, the unwritten log blocks copied.
    pub(super) fn view_of(st: &State) -> View {
        let mut pending = Vec::with_capacity(st.sealed.len() + 1);
        let sealed = st.sealed.iter().map(log::SealedBlock::block);
        for block in sealed.chain(Some(&st.open_block)) {
            if !block.is_empty() {
                let (info, body) = block.pending();
                pending.push((info, Arc::new(body)));
            }
        }
        View {
            generation: 0,
            clock: st.clock,
            tags: Arc::clone(&st.tags),
            sets: st
                .sets
                .iter()
                .map(|(&k, a)| (k, Arc::clone(&a.set)))
                .collect(),
            modified: Arc::clone(&st.modified),
            all_time: Arc::clone(&st.all_time),
            end_seq: st.next_seq,
            unindexed: st.unindexed.clone(),
            pending,
            log_retained_from: st.log_retained_from,
            imported: st.imported.clone(),
            stored: Arc::clone(&st.stored),
        }
    }

    /// Publishes the writer's state. Nothing of an import before its commit is published: a
    /// reader sees the store as it was.
    pub(super) fn publish(&self, st: &State) {
        if st.importing || st.broken.is_some() {
            return;
        }
        let mut view = Self::view_of(st);
        view.generation = self.published().generation + 1;
        let view = Arc::new(view);
        // Cleared before the swap: a change made after it sets the flag again.
        self.unpublished.store(false, Ordering::Release);
        self.readers.store(false, Ordering::Release);
        match self.view.write() {
            Ok(mut v) => *v = view,
            Err(poisoned) => *poisoned.into_inner() = view,
        }
    }

    /// Forgets every cached merge (after the writer's state was replaced).
    pub(super) fn clear_cache(&self) {
        let budget = self.config.cache_bytes;
        match self.cache.lock() {
            Ok(mut c) => *c = super::ops::Cache::new(budget),
            Err(poisoned) => *poisoned.into_inner() = super::ops::Cache::new(budget),
        }
    }

    /// Notes that the writer's state changed after the last publication, and how far this
    /// thread wrote (see [`LAST_WRITE`]).
    pub(super) fn changed(&self, st: &State) {
        self.unpublished.store(true, Ordering::Release);
        let _ = LAST_WRITE.try_with(|w| w.set((self.id, st.next_seq)));
    }

    fn published(&self) -> Arc<View> {
        match self.view.read() {
            Ok(v) => Arc::clone(&v),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// A snapshot of the latest published state, for reads. If the writer has changes it has
    /// not published and is idle, they are published first; if it is busy, the last
    /// publication is read instead of waiting, unless this thread wrote some of those changes
    /// itself (it then waits for the writer, to read its own writes).
    pub fn snapshot(&self) -> Result<Snapshot<'_>> {
        self.check_usable()?;
        self.readers.store(true, Ordering::Release);
        if self.unpublished.load(Ordering::Acquire) {
            // How far this thread wrote, if it wrote here and that is not published yet.
            let mine = LAST_WRITE
                .try_with(|w| w.get())
                .ok()
                .filter(|&(id, _)| id == self.id)
                .map(|(_, end)| end);
            loop {
                match self.state.try_lock() {
                    Ok(st) => {
                        self.publish(&st);
                        break;
                    }
                    Err(TryLockError::Poisoned(_)) => return Err(self.poisoned()),
                    Err(TryLockError::WouldBlock) => {}
                }
                // The writer is busy. Others read the last publication; a thread whose own
                // writes it lacks waits for the next one, which the writer makes at its next
                // flush or checkpoint (an import makes one as it starts), not for the writer
                // to finish.
                if mine.is_none_or(|end| end <= self.published().end_seq) {
                    break;
                }
                self.check_usable()?;
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        Ok(Snapshot {
            store: self,
            view: self.published(),
        })
    }

    /// A snapshot published after `than`, for a read that found `than` stale: the checkpoint
    /// that made it stale publishes as it ends, so this waits for that, not for whatever the
    /// writer does next (an import can hold the writer for minutes). Publishes itself if the
    /// writer is idle. Past [`NEWER_WAIT`], takes the writer's lock.
    pub(crate) fn newer_snapshot(&self, than: &Snapshot<'_>) -> Result<Snapshot<'_>> {
        let start = std::time::Instant::now();
        loop {
            // So that the writer's next flush publishes, too.
            self.readers.store(true, Ordering::Release);
            let view = self.published();
            if view.generation > than.view.generation {
                return Ok(Snapshot { store: self, view });
            }
            match self.state.try_lock() {
                Ok(st) => {
                    self.publish(&st);
                    drop(st);
                    // Not while importing (nothing of an import is published): wait then.
                    if self.published().generation > than.view.generation {
                        continue;
                    }
                }
                Err(TryLockError::Poisoned(_)) => return Err(self.poisoned()),
                Err(TryLockError::WouldBlock) => {}
            }
            if start.elapsed() > NEWER_WAIT {
                let st = self.lock()?;
                self.publish(&st);
                drop(st);
                return Ok(Snapshot {
                    store: self,
                    view: self.published(),
                });
            }
            self.check_usable()?;
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// The last publication without the usability checks, for a session made before any
    /// statement runs (each statement takes a checked [`Store::snapshot`]).
    pub(crate) fn last_snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            store: self,
            view: self.published(),
        }
    }

    /// Runs `read` on a snapshot; if it read a set rewritten since (see the module docs), runs
    /// it again on a fresh one. `read` may run more than once: it must only read.
    pub fn read<T>(&self, mut read: impl FnMut(&Snapshot<'_>) -> Result<T>) -> Result<T> {
        let mut snap = self.snapshot()?;
        for _ in 0..STALE_RETRIES {
            match read(&snap) {
                Err(StoreError::Stale) => snap = self.newer_snapshot(&snap)?,
                other => return other,
            }
        }
        read(&snap).map_err(|e| match e {
            StoreError::Stale => StoreError::stale_too_often(),
            e => e,
        })
    }

    /// Every block of the log a view includes, in order, calling `each` for every event of the
    /// blocks `wanted` accepts (events past the view's end are not passed). `stop` is asked
    /// before each block; `Ok(false)` when it ended the walk.
    pub(super) fn for_each_block_in(
        &self,
        view: &View,
        wanted: impl Fn(&BlockInfo) -> bool,
        stop: &dyn Fn() -> bool,
        mut each: impl FnMut(&LogEvent<'_>),
    ) -> Result<bool> {
        let disk_end = view
            .pending
            .first()
            .map_or(view.end_seq, |(i, _)| i.first_seq);
        let mut on_disk = |ev: &LogEvent<'_>| {
            if ev.seq < disk_end {
                each(ev);
            }
        };
        // The blocks the view had unindexed are read by their places, in order, after the
        // indexed ones: the writer may index them during the walk, and the walk must neither
        // miss them nor meet them twice.
        let walk_end = view
            .unindexed
            .first()
            .map_or(disk_end, |i| i.first_seq.min(disk_end));
        let finished = self.for_each_block(
            |info| info.first_seq < walk_end && wanted(info),
            stop,
            &mut on_disk,
        )?;
        if !finished {
            return Ok(false);
        }
        for info in &view.unindexed {
            if !wanted(info) {
                continue;
            }
            if stop() {
                return Ok(false);
            }
            // Gone, or other events at its place: an import that wrote it rolled back (and
            // the writer may have appended since); the next view does not have it.
            let block = self.block_bytes(info)?.ok_or(StoreError::Stale)?;
            if let Err(detail) = log::decode_block_expecting(&block, info, &mut on_disk) {
                let replaced = log::block_header(&block)
                    .is_ok_and(|h| (h.first_seq, h.count) != (info.first_seq, info.count));
                return Err(match replaced {
                    true => StoreError::Stale,
                    false => StoreError::DamagedLog {
                        name: info.label(),
                        detail,
                    },
                });
            }
        }
        for (info, body) in &view.pending {
            if !wanted(info) {
                continue;
            }
            if stop() {
                return Ok(false);
            }
            log::decode_pending(*info, body, &mut each).map_err(|detail| {
                StoreError::DamagedLog {
                    name: format!("unwritten log block at event {}", info.first_seq),
                    detail,
                }
            })?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::*;
    use crate::store::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn whole_count(s: &Snapshot<'_>) -> u64 {
        s.count(&Slice::Whole, &TimeRange::all()).expect("count").0
    }

    /// sled holds every reader while the writer applies a batch (a checkpoint's took 0.3 s in
    /// the concurrency bench, and every query waited it out), so a statement over sets the
    /// view holds must not call the engine at all: not to list a tag's buckets either. Here
    /// three days are stored and held, a fourth only held; each family's answer over all of
    /// them, and over a range, makes no engine call and counts what was ingested.
    #[test]
    fn statements_over_sets_in_memory_make_no_engine_call() {
        let mem = MemEngine::new();
        let store = Store::create_with(Box::new(mem.clone()), config()).expect("create");
        let day = |d: u64| -> Vec<Event> {
            events(0, 200)
                .into_iter()
                .map(|mut e| {
                    e.time += d as i64 * model::DAY_MS;
                    e
                })
                .collect()
        };
        for d in 0..3 {
            store.ingest_batch(&day(d)).expect("ingest");
        }
        store.checkpoint().expect("checkpoint");
        store.ingest_batch(&day(3)).expect("ingest");
        store.flush().expect("flush");
        let snap = store.snapshot().expect("snapshot");
        let a = Slice::tag("chain", "a");
        let wallet = wallet_address_of(4);
        const DAY0: i64 = 1_764_547_200_000;
        let from_day_1 = TimeRange::between(DAY0 + model::DAY_MS, DAY0 + 4 * model::DAY_MS);
        let before = mem.calls();
        assert_eq!(
            snap.count(&Slice::Whole, &TimeRange::all())
                .expect("count")
                .0,
            800
        );
        assert_eq!(snap.count(&a, &from_day_1).expect("count"), (300, 3));
        let hll = snap.merged_hll(&a, &TimeRange::all()).expect("hll");
        assert_eq!(hll.buckets, 4);
        assert_eq!(
            snap.merged_theta(&Slice::Whole, &from_day_1)
                .expect("theta")
                .buckets,
            3
        );
        let (top, cms) = snap.top(&a, &TimeRange::all(), 3).expect("top");
        assert_eq!((top.len(), cms.buckets), (3, 4));
        assert!(
            snap.frequency(&a, &TimeRange::all(), &wallet)
                .expect("freq")
                .estimate
                >= 4
        );
        assert!(
            snap.membership(&a, &TimeRange::all(), &wallet)
                .expect("seen")
                .present
        );
        assert_eq!(snap.buckets().expect("buckets").len(), 4);
        assert_eq!(mem.calls(), before, "a statement called the engine");
        drop(snap);
        // A set the writer let go is read from the engine, and still listed.
        store.lock().expect("lock").sets.clear();
        assert_eq!(whole_count(&store.snapshot().expect("snapshot")), 800);
    }

    /// A snapshot keeps reading the state it was taken of, sets, log and filter alike, while
    /// the writer goes on; a new one sees the writes.
    #[test]
    fn a_snapshot_reads_one_state_while_the_writer_goes_on() {
        let dir = tempdir("snap-state");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 1_000)).expect("ingest");
        store.flush().expect("flush");
        let before = store.snapshot().expect("snapshot");
        store.ingest_batch(&events(1_000, 500)).expect("ingest");
        store.flush().expect("flush");
        store.checkpoint().expect("checkpoint");
        let late = wallet_address_of(1_200);
        assert_eq!(whole_count(&before), 1_000);
        assert_eq!(
            before
                .events(&Slice::Whole, &TimeRange::all())
                .expect("scan")
                .len(),
            1_000,
            "the scan stops where the snapshot ends"
        );
        let seen = before
            .membership(&Slice::Whole, &TimeRange::all(), &late)
            .expect("seen");
        assert!(
            !seen.maybe,
            "an item ingested after the snapshot is not in it"
        );
        let after = store.snapshot().expect("snapshot");
        assert_eq!(whole_count(&after), 1_500);
        assert_eq!(
            after
                .events(&Slice::Whole, &TimeRange::all())
                .expect("scan")
                .len(),
            1_500
        );
        assert!(
            after
                .membership(&Slice::Whole, &TimeRange::all(), &late)
                .expect("seen")
                .maybe
        );
        drop((before, after));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn wallet_address_of(i: u64) -> String {
        events(i, 1)[0].item.clone()
    }

    /// Events still in the open block (ingested, not flushed) are read from the snapshot's own
    /// copy, exactly once, however the log is written afterwards.
    #[test]
    fn unwritten_events_are_scanned_once_whatever_is_written_after() {
        let dir = tempdir("snap-pending");
        let store = Store::create(&dir, config()).expect("create");
        // Three full blocks written early but not indexed, and a part-filled open block.
        let n = 3 * log::BLOCK_EVENTS as u64 + 123;
        store.ingest_batch(&events(0, n)).expect("ingest");
        let snap = store.snapshot().expect("snapshot");
        let count = |s: &Snapshot<'_>| {
            s.scan(&Slice::Whole, &TimeRange::all(), |_| {})
                .expect("scan")
        };
        assert_eq!(count(&snap), n);
        // The writer indexes the early blocks and writes the open one, then goes on.
        store.flush().expect("flush");
        assert_eq!(count(&snap), n, "after the flush");
        store.ingest_batch(&events(n, 5_000)).expect("ingest");
        store.flush().expect("flush");
        assert_eq!(count(&snap), n, "after more was written");
        let mut seqs = Vec::new();
        snap.scan(&Slice::Whole, &TimeRange::all(), |ev| seqs.push(ev.seq))
            .expect("scan");
        assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64));
        assert_eq!(count(&store.snapshot().expect("snapshot")), n + 5_000);
        drop(snap);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The open block's events, read from the snapshot's copy of its three streams, come back
    /// exactly: wallets seen again (back-references), wallets seen once (their bytes in the
    /// unique stream) and extras with packed hashes and addresses (in the unique and addresses
    /// streams); and the same once the block is written.
    #[test]
    fn unwritten_events_read_back_exactly_from_their_streams() {
        let dir = tempdir("snap-streams");
        let store = Store::create(&dir, config()).expect("create");
        let ingested: Vec<Event> = events(0, 700)
            .into_iter()
            .enumerate()
            .map(|(i, e)| Event {
                item: wallet_address_of(i as u64 % 300),
                extra: format!(
                    r#"{{"hash":"0x{:064x}","to":"{}","n":{i}}}"#,
                    (i as u128) << 90 | 7,
                    wallet_address_of(i as u64 % 13)
                ),
                ..e
            })
            .collect();
        store.ingest_batch(&ingested).expect("ingest");
        let read = |s: &Snapshot<'_>| {
            let mut back = Vec::new();
            s.scan(&Slice::Whole, &TimeRange::all(), |e| {
                back.push((
                    e.item.to_text(),
                    String::from_utf8(e.extra.to_vec()).expect("text"),
                ))
            })
            .expect("scan");
            back
        };
        let expected: Vec<(String, String)> = ingested
            .iter()
            .map(|e| (e.item.clone(), e.extra.clone()))
            .collect();
        assert_eq!(read(&store.snapshot().expect("snapshot")), expected);
        store.flush().expect("flush");
        assert_eq!(read(&store.snapshot().expect("snapshot")), expected);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A set the snapshot did not hold, rewritten by a checkpoint since, is not read as if it
    /// were the snapshot's: the read is stale, and the store's own read retries on a fresh one.
    #[test]
    fn a_set_rewritten_after_the_snapshot_is_stale_and_the_store_retries() {
        let dir = tempdir("snap-stale");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        drop(store);
        // Opened again, the store holds no set in memory: the snapshot reads them from disk.
        let store = Store::open(&dir).expect("open");
        let snap = store.snapshot().expect("snapshot");
        assert!(snap.view.sets.is_empty());
        assert_eq!(whole_count(&snap), 100);
        store.ingest_batch(&events(100, 50)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let r = snap.count(&Slice::Whole, &TimeRange::all());
        assert!(matches!(r, Err(StoreError::Stale)), "{r:?}");
        let r = snap.merged_hll(&Slice::Whole, &TimeRange::all());
        assert!(matches!(r, Err(StoreError::Stale)), "{r:?}");
        assert_eq!(
            store
                .count(&Slice::Whole, &TimeRange::all())
                .expect("count")
                .0,
            150
        );
        drop(snap);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Readers do not wait for the writer: while an import holds the writer's lock (here,
    /// parked inside its closure), other threads query the last published state.
    #[test]
    fn readers_answer_while_the_writer_holds_the_store() {
        let dir = tempdir("snap-nowait");
        let store = Arc::new(Store::create(&dir, config()).expect("create"));
        store.ingest_batch(&events(0, 300)).expect("ingest");
        store.flush().expect("flush");
        let (parked_tx, parked_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let writer = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                store.import(|imp| {
                    imp.ingest_batch(&events(300, 200))?;
                    let _ = parked_tx.send(());
                    let _ = go_rx.recv_timeout(Duration::from_secs(60));
                    Ok::<_, StoreError>(())
                })
            })
        };
        parked_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the import started");
        let start = Instant::now();
        let (n, _) = store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count");
        let hll = store
            .merged_hll(&Slice::Whole, &TimeRange::all())
            .expect("distinct")
            .sketch
            .expect("an hll");
        let scanned = store
            .scan(&Slice::Whole, &TimeRange::all(), |_| {})
            .expect("scan");
        // Generous for a loaded machine: a waiting reader would wait the full 60 s.
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            (n, scanned),
            (300, 300),
            "the import is not visible before its commit"
        );
        // 300 distinct wallets: the sparse HLL is within a few of them, far from 500.
        let distinct = crate::sketch::Sketch::estimate(&hll).value;
        assert!((distinct - 300.0).abs() < 10.0, "{distinct}");
        go_tx.send(()).expect("release the import");
        writer.join().expect("writer").expect("import");
        assert_eq!(
            store
                .count(&Slice::Whole, &TimeRange::all())
                .expect("count")
                .0,
            500
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Re-entrant use: a scan holds no lock, so its callback may query and even ingest; a
    /// query from inside an import reads the state before the import; an ingest from inside an
    /// import on the same thread is refused rather than waiting for itself.
    #[test]
    fn calls_from_a_scan_callback_and_from_inside_an_import() {
        let dir = tempdir("snap-reentry");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 10)).expect("ingest");
        let mut inner_counts = Vec::new();
        let mut ingested = 0;
        store
            .scan(&Slice::Whole, &TimeRange::all(), |ev| {
                inner_counts.push(
                    store
                        .count(&Slice::Whole, &TimeRange::all())
                        .expect("count inside a scan")
                        .0,
                );
                store
                    .ingest(&events(100 + ev.seq, 1)[0])
                    .expect("ingest inside a scan");
                ingested += 1;
            })
            .expect("scan");
        assert_eq!(ingested, 10, "the scan saw its own snapshot only");
        assert_eq!(inner_counts.first(), Some(&10));
        assert_eq!(
            inner_counts.last(),
            Some(&19),
            "each query sees the writes before it"
        );
        let inside = store
            .import(|imp| {
                imp.ingest_batch(&events(500, 7))?;
                let seen = store.count(&Slice::Whole, &TimeRange::all())?.0;
                let refused = store.ingest(&events(600, 1)[0]);
                Ok::<_, StoreError>((seen, refused))
            })
            .expect("import");
        assert_eq!(
            inside.0, 20,
            "the import's own events are not visible before its commit"
        );
        assert!(
            matches!(inside.1, Err(StoreError::InsideImport { .. })),
            "{:?}",
            inside.1
        );
        assert_eq!(
            store
                .count(&Slice::Whole, &TimeRange::all())
                .expect("count")
                .0,
            27
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
