//! Imports: a whole input fed through one [`Import`], committed in one atomic, synced write or
//! rolled back (on an error, a rejected batch, a failed commit or a panic in the caller's code),
//! leaving the store as it was on disk and in memory.
//!
//! Owns: [`Import`], the commit, the rollback and its panic safety, and recognising a call from
//! inside an import (which would wait for itself). Staging within the budget is `stage`'s.

use super::error::{Result, StoreError};
use super::model::Event;
use super::route::Ahead;
use super::state::State;
use super::Store;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// A small number unique to the calling thread (never 0), to recognise the thread running an
/// import. 0 during thread teardown, when thread-locals are gone (no import runs then).
pub(super) fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TOKEN.try_with(|t| *t).unwrap_or(0)
}

/// An import in progress (see [`Store::import`]).
pub struct Import<'s> {
    pub(super) store: &'s Store,
    pub(super) st: &'s mut State,
    pub(super) events: u64,
    /// Records the commit writes beside the sets, in its one batch (a merge's `X` records).
    pub(super) extra: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Import<'_> {
    /// Adds a batch to the import; a rejected batch fails the whole import.
    pub fn ingest_batch(&mut self, events: &[Event]) -> Result<()> {
        self.store.ingest_locked(self.st, events, None)?;
        self.events += events.len() as u64;
        Ok(())
    }

    /// [`Import::ingest_batch`] with each event's item hashes, and perhaps its tag ids, worked
    /// out ahead, so a reader thread can take that work off the store's thread (see
    /// [`Ahead`]; crate-private: a wrong hash would corrupt sketches).
    pub(crate) fn ingest_ahead(&mut self, events: &[Event], ahead: Ahead<'_>) -> Result<()> {
        self.store.ingest_locked(self.st, events, Some(ahead))?;
        self.events += events.len() as u64;
        Ok(())
    }

    /// Events fed so far.
    pub fn events(&self) -> u64 {
        self.events
    }
}

impl Store {
    /// Ingests a whole input as one unit: `fill` feeds batches through the [`Import`] it is
    /// given; if it returns `Ok`, everything it fed is committed in one atomic, synced write; if
    /// it returns an error or panics (or a batch is rejected, or the commit fails), the store is
    /// left exactly as it was before the call, on disk and in memory, and a panic then goes on
    /// to the caller.
    ///
    /// Rolling back re-reads the store's state from disk. If that fails, or a failed commit
    /// turns out to have reached the storage engine, the in-memory state cannot be trusted: the
    /// call returns [`StoreError::MustReopen`], and so does every later call on this `Store`
    /// (nothing more is written) until the store is opened again.
    ///
    /// The import holds the store for its whole duration: calls from other threads wait, and
    /// calls on this `Store` from inside `fill` fail with [`StoreError::InsideImport`]. Its log
    /// blocks are written as they fill but stay outside the log (no `I` entry) until the commit
    /// indexes them; a rollback, or the next open after a crash, removes them. Memory holds the
    /// sketch sets it touches within the memory budget, and one open block: batches are applied
    /// in pieces, and sets over the budget are staged under keys no reader sees until the
    /// commit moves them into place (see `docs/STORAGE.md`, Staging). A batch that fails after
    /// part of it was applied fails the import ([`StoreError::ImportFailed`] at the commit if
    /// `fill` goes on). A crash before the commit loses the import and nothing else.
    pub fn import<T, E: From<StoreError>>(
        &self,
        fill: impl FnOnce(&mut Import<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let mut st = self.lock()?;
        // Start from a state that is entirely on disk, so rolling back is re-reading it.
        let prepared = self
            .flush_locked(&mut st)
            .and_then(|()| self.checkpoint_locked(&mut st));
        if let Err(e) = prepared {
            // Converted without the lock held: `From` is the caller's code and may panic.
            drop(st);
            return Err(E::from(e));
        }
        let durable = st.next_seq;
        st.importing = true;
        st.import_failed = None;
        st.import_held = None;
        st.reader_tags.clear();
        self.importer.store(thread_token(), Ordering::Release);
        let (outcome, extra) = {
            let mut import = Import {
                store: self,
                st: &mut st,
                events: 0,
                extra: Vec::new(),
            };
            // Caught so that the rollback runs with the lock held and the mutex is not
            // poisoned; the panic is resumed below, after the lock is released.
            let outcome = catch_unwind(AssertUnwindSafe(|| fill(&mut import)));
            (outcome, std::mem::take(&mut import.extra))
        };
        self.importer.store(0, Ordering::Release);
        match outcome {
            Ok(Ok(value)) => {
                st.importing = false;
                st.import_held = None;
                st.reader_tags = Vec::new();
                let committed = match st.import_failed.take() {
                    Some(reason) => Err(StoreError::ImportFailed {
                        path: self.path.clone(),
                        reason,
                    }),
                    None => self
                        .prepare_commit(&mut st)
                        .and_then(|()| self.checkpoint_with(&mut st, extra)),
                };
                let committed = match committed {
                    Ok(()) => Ok(value),
                    // Committed, but its staged sets could not all be moved into place: the
                    // state is marked broken, and an open finishes the move.
                    Err(e) if st.broken.is_some() => Err(e),
                    Err(e) => {
                        let why = format!("the import's commit failed ({e})");
                        Err(self.roll_back(&mut st, durable, &why).err().unwrap_or(e))
                    }
                };
                drop(st);
                committed.map_err(E::from)
            }
            Ok(Err(e)) => {
                let rolled = self.roll_back(&mut st, durable, "the import failed");
                drop(st);
                match rolled {
                    Ok(()) => Err(e),
                    Err(broken) => Err(E::from(broken)),
                }
            }
            Err(panic) => {
                // On failure the state is marked broken, which is what the caller sees next.
                let _ = self.roll_back(&mut st, durable, "the import panicked");
                drop(st);
                resume_unwind(panic)
            }
        }
    }

    /// Forgets everything in memory that is not on disk (see [`Store::import`]): re-reads the
    /// state as of `durable` (the log position on disk when the import began). If that fails,
    /// or the disk holds more than that (a commit written but not confirmed), marks the state
    /// broken and returns the [`StoreError::MustReopen`] every later call will get.
    pub(super) fn roll_back(&self, st: &mut State, durable: u64, why: &str) -> Result<()> {
        let reread = Self::read_state(&self.engine).and_then(|(_, mut fresh)| {
            Self::remove_orphan_blocks(&self.engine, fresh.next_seq)?;
            // Deletes what the import staged; finishes a commit whose marker is on disk.
            Self::finish_staging(&self.engine)?;
            fresh.stored = std::sync::Arc::new(Self::stored_sets(&self.engine)?);
            Ok(fresh)
        });
        let reason = match reread {
            Ok(mut fresh) if fresh.next_seq == durable => {
                // The clock goes on (cached merges are dated by it), and merges the import's
                // changes made are dropped with them.
                fresh.clock = st.clock + 1;
                *st = fresh;
                self.clear_cache();
                return Ok(());
            }
            Ok(fresh) => format!(
                "{why}, yet the log on disk runs to event {} instead of {durable}: the commit was written but not confirmed durable; reopen the store to see what it kept",
                fresh.next_seq
            ),
            Err(e) => format!("{why}, and rolling it back failed: {e}"),
        };
        self.mark_broken(st, reason.clone());
        Err(StoreError::MustReopen {
            path: self.path.clone(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::*;
    use crate::store::*;

    #[test]
    fn a_rolled_back_import_leaves_no_log_blocks_behind() {
        let dir = tempdir("rollback");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.flush().expect("flush");
        let before = block_keys(&store);
        let failed: std::result::Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(&events(100, 3 * log::BLOCK_EVENTS as u64))?;
            // Blocks were written early by now; the import still fails.
            Err(StoreError::Query("a bad line".into()))
        });
        assert!(failed.is_err());
        assert_eq!(block_keys(&store), before);
        assert_eq!(logged_events(&store), 100);
        // The positions are reused by the next ingest, which reads back exactly.
        store.ingest_batch(&events(100, 5_000)).expect("ingest");
        store.flush().expect("flush");
        assert_eq!(logged_events(&store), 5_100);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 11, item 8: a rollback that fails (here the store's metadata cannot be re-read)
    /// leaves a state nobody may trust: the import and every later call report an error saying
    /// the store must be reopened, never `Ok`, and nothing of the import reaches the disk.
    #[test]
    fn a_failed_rollback_makes_every_later_call_an_error() {
        let dir = tempdir("failed-rollback");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.flush().expect("flush");
        let format = store
            .engine
            .get(&keys::meta("format"))
            .expect("get")
            .expect("format");
        let failed: std::result::Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(&events(100, 1_000))?;
            // The fault: the metadata the rollback re-reads is unreadable.
            poke(imp.store, &keys::meta("format"), Some(b"damaged".to_vec()));
            Err(StoreError::Query("a bad line".into()))
        });
        let err = failed.expect_err("the import fails");
        assert!(matches!(err, StoreError::MustReopen { .. }), "{err}");
        assert!(err.to_string().contains("reopen"), "{err}");
        let must_reopen = |r: Result<()>, what: &str| match r {
            Err(StoreError::MustReopen { .. }) => {}
            other => panic!("{what}: {other:?}"),
        };
        must_reopen(store.flush(), "flush");
        must_reopen(store.ingest(&events(2_000, 1)[0]), "ingest");
        must_reopen(store.checkpoint(), "checkpoint");
        must_reopen(
            store.import(|imp| imp.ingest_batch(&events(3_000, 1))),
            "import",
        );
        must_reopen(
            store.count(&Slice::Whole, &TimeRange::all()).map(drop),
            "count",
        );
        must_reopen(store.tags().map(drop), "tags");
        // Repair the fault; the drop's checkpoint must still write nothing.
        poke(&store, &keys::meta("format"), Some(format));
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(logged_events(&store), 100);
        let (count, _) = store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count");
        assert_eq!(count, 100);
        store.ingest_batch(&events(100, 10)).expect("ingest");
        store.flush().expect("flush");
        assert_eq!(logged_events(&store), 110);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A call on the store from inside its own import (same thread) would wait for itself
    /// forever; it is refused instead, and the import goes on.
    #[test]
    fn a_call_from_inside_an_import_is_refused_not_deadlocked() {
        let dir = tempdir("reentry");
        let store = std::sync::Arc::new(Store::create(&dir, config()).expect("create"));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = std::sync::Arc::clone(&store);
        std::thread::spawn(move || {
            let outcome = s.import(|imp| {
                imp.ingest_batch(&events(0, 10))?;
                Ok::<_, StoreError>(s.flush().map_err(|e| e.to_string()))
            });
            let _ = tx.send(outcome.map_err(|e| e.to_string()));
        });
        let outcome = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the import ends instead of waiting for itself");
        let inner = outcome.expect("the import commits");
        let msg = inner.expect_err("flush from inside the import is refused");
        assert!(msg.contains("inside an import"), "{msg}");
        assert_eq!(logged_events(&store), 10);
        // From other threads the store waits for the import, then works.
        store.flush().expect("flush after the import");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
