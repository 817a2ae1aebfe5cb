//! The durable, time-bucketed sketch store.
//!
//! This layer owns persistence: what is stored under which key, the event log, checkpoints,
//! recovery after a crash, memory budgeting of active sketch sets, and the typed read operations
//! the query engine calls. It knows nothing of query syntax or answer formatting; it depends
//! only on the sketch layer below it.
//!
//! Write path: every ingested event is hashed once and routed to its bucket's whole-stream set,
//! to one set per tag value, and to the all-time scalable Bloom filter, then appended to the
//! pending log. [`Store::flush`] writes the pending log blocks in one atomic batch and syncs;
//! sketch sets are written back only at checkpoints (periodically, when memory runs over budget,
//! and on drop), each with the log position it includes. Opening replays the log past those
//! positions, so nothing flushed is lost and nothing is counted twice (see `docs/STORAGE.md`).
//!
//! | module | owns |
//! |---|---|
//! | this one | the [`Store`] facade: create, open, ingest, flush, the lock, input checks |
//! | [`engine`] | the storage seam: [`Engine`], [`WriteBatch`], [`SledEngine`], [`MemEngine`] |
//! | `seam` | the store's guarded handle on its engine: panics caught, a failed engine refused |
//! | [`kinds`] | the registry of stored kinds: key prefixes, blob kinds, names |
//! | [`keys`] | the byte layout of keys |
//! | [`log`] | encoding and decoding log blocks |
//! | `logio` | writing blocks and index entries, reading them back in order |
//! | `sets` | stored sketch sets: reading, checking, loading, naming |
//! | `state` | the writer's in-memory state and what it costs |
//! | `route` | applying a checked batch to the state |
//! | `checkpoint` | checkpoints, eviction, retention |
//! | `import` | all-or-nothing imports |
//! | `imported` | sketches imported from Apache DataSketches images, and the record kept of them |
//! | `stage` | an import within the memory budget: pieces, staged (`G`) sets, the commit's roll-forward |
//! | `merge` | [`Store::merge_from`]: other stores of the same configuration folded in, as an import |
//! | `recovery` | opening: metadata, dictionary, replay |
//! | `ack` | the acknowledgement record: how far the log was acknowledged, checked at open |
//! | `check` | `check` (every stored value and the log, damage named) and `repair` (sets rebuilt from the log) |
//! | `snapshot` | the state readers see: publishing it, taking a [`Snapshot`], the log as it saw it |
//! | [`ops`] | typed reads for the query engine, on a [`Snapshot`] |
//! | [`model`], [`error`] | configuration, events, ranges; errors |

mod ack;
mod check;
mod checkpoint;
pub mod engine;
pub mod error;
pub mod holder;
mod import;
mod imported;
pub mod keys;
pub mod kinds;
pub mod log;
mod logio;
mod merge;
pub mod model;
pub mod ops;
mod recovery;
mod route;
mod seam;
mod sets;
mod snapshot;
mod stage;
mod state;
#[cfg(test)]
mod test_support;

pub use check::{CheckReport, Checked, Damage, Recovery, RepairReport};
#[doc(hidden)]
pub use engine::mem::MemEngine;
pub use engine::sled::{SledEngine, SEGMENT_BYTES};
pub use engine::{Engine, EngineError, WriteBatch, VALUE_MAX};
pub use error::{Result, StoreError};
pub use holder::{HeldBy, Holder};
pub use import::Import;
pub use imported::SketchImport;
pub use merge::{MergePhase, MergeProgress, MergeSummary};
pub use model::{
    lowercase_item, BucketWidth, Config, Event, Sample, Slice, TimeRange, MAX_TIME, MIN_TIME,
    RANGE_LIMIT,
};
pub(crate) use route::{Ahead, ReaderTags};
pub use snapshot::Snapshot;
pub(crate) use snapshot::STALE_RETRIES;
pub use state::{ImportedSets, MemoryUse};

use crate::codec;
use crate::sketch::SketchSet;
use checkpoint::Checkpoint;
use holder::HolderFile;
use import::thread_token;
use seam::Seam;
use snapshot::View;
use state::State;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

/// The on-disk format this build writes. 9: Count-Min tables with varint counters
/// (`CountMin::VERSION` 5) and log blocks whose wallets, addresses and hashes are compressed apart
/// from the events (block layout 4); a build that reads only 8 would take both for damage. 8: log
/// blocks whose extras' 40- and 64-digit hex strings are packed (block layout 3); a build that
/// reads only 7 would take those blocks for damage. 7: a set whose parts take at most
/// `sets::INLINE_MAX` bytes is stored inline, all five parts in its header value (header layout 2),
/// one engine value instead of six; a build that reads only 6 would take those headers for damage.
/// 6: log blocks in append-only files beside sled's (`log/`), their index entries holding each
/// block's place; Count-Min sketches with wallets packed to 20 bytes (`CountMin::VERSION` 4) and
/// reservoirs of samples as varint deltas (`SAMPLES_VERSION` 2); a build that reads only 5 would
/// take all three for damage. 5: records of sketches imported from DataSketches images (`X` keys,
/// see `imported`), which a build that reads only 4 would leave out of a set it rebuilds from the
/// log; HyperLogLogs built by updates store their HIP accumulator (`HyperLogLog::VERSION` 2); Theta
/// sketches hold up to 15/16 of their 2k slots (DataSketches' rebuild point, where 4 stopped at
/// 3/4), which a format-4 build would take for damage. 4: log blocks compressed (block layout 2)
/// and reservoirs holding log sequence numbers ([`Sample`]); a build that reads only 3 would take
/// those for damage, so the version tells it instead. 3: Bloom filters (the all-time one too) and
/// Count-Min sketches start in exact forms, a changed layout. 2: Count-Min rows hashed by
/// independent SHA-256 words instead of double hashing (a version-1 store's Count-Min tables would
/// be read under the wrong columns, so it is refused with its version named).
pub const FORMAT_VERSION: u32 = 9;
/// The oldest format this build reads: a format-3 to -8 store differs only in what 4 to 9
/// added (a format-4 store has no `X` keys, a format-5 one keeps its blocks under `L` keys,
/// still read where they are, a format-6 one has no inline sets, a format-7 one no packed
/// extras, a format-8 one no varint tables or blocks of layout 4), and every form of blocks,
/// reservoirs, HyperLogLogs, Count-Min sketches and set headers is read. Opening one records it
/// as format 9 before anything is written in the new forms.
pub const OLDEST_FORMAT: u32 = 3;
/// The blob kind of the store's metadata records (format version, config, checkpoint).
pub const META_KIND: u8 = kinds::META.blob;

/// An open store. `Send + Sync`: ingest and queries may run from many threads. Writers (ingest,
/// flush, checkpoint, import) take turns on a mutex; readers never take it: each query reads a
/// [`Snapshot`], one consistent state the writer published (see `docs/LIBRARY.md`, Threads).
pub struct Store {
    /// Unique to this handle in the process (see `snapshot`).
    id: u64,
    /// The engine's location, for messages.
    path: PathBuf,
    /// This process's holder record in the store directory (stores on sled opened by
    /// [`Store::open`] or [`Store::create`]), removed in `drop` before the engine releases the
    /// lock. A mutex only so that [`Store::set_socket`] can take `&self`.
    holder: Mutex<Option<HolderFile>>,
    engine: Seam,
    config: Config,
    state: Mutex<State>,
    /// The latest publication of `state` (see `snapshot`): readers clone the `Arc` and let go.
    view: RwLock<Arc<View>>,
    /// `state` changed since `view` was published.
    unpublished: AtomicBool,
    /// A snapshot was taken since `view` was published: the next flush publishes (without
    /// readers, flushes do not, so the writer never copies a set nobody reads).
    readers: AtomicBool,
    /// Merged results kept for reuse, shared by readers (never held across a read of the disk).
    cache: Mutex<ops::Cache>,
    /// Why the state can no longer be trusted, once it cannot (mirrors `State::broken` for
    /// readers, who do not take the state's lock).
    broken: OnceLock<String>,
    /// The [`thread_token`] of the thread inside [`Store::import`], 0 if none: a call from that
    /// thread would wait for itself forever, so it is refused instead.
    importer: AtomicU64,
    /// Set by [`Store::seed_samples`]: reservoirs then draw from generators seeded from it.
    sample_seed: std::sync::OnceLock<u64>,
}

/// A store's error for an engine that could not be opened at `path`.
/// The cores this process may use, read once: the checkpoint's encoding and an import
/// piece's log thread are sized by it, and `available_parallelism` reads the cgroup's quota
/// from files on every call.
pub(super) fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn open_error(path: &Path, source: EngineError) -> StoreError {
    match source {
        EngineError::Locked => StoreError::Locked {
            path: path.to_path_buf(),
            held_by: holder::read(path),
        },
        source => StoreError::Engine {
            path: path.to_path_buf(),
            source,
        },
    }
}

impl Store {
    /// A handle on `engine` holding `state` (as read or recovered), with its first publication.
    pub(super) fn assemble(engine: Seam, config: Config, state: State) -> Store {
        let view = Arc::new(Self::view_of(&state));
        Store {
            id: snapshot::next_store_id(),
            holder: Mutex::new(None),
            path: engine.path().to_path_buf(),
            engine,
            cache: Mutex::new(ops::Cache::new(config.cache_bytes)),
            config,
            state: Mutex::new(state),
            view: RwLock::new(view),
            unpublished: AtomicBool::new(false),
            readers: AtomicBool::new(false),
            broken: OnceLock::new(),
            importer: AtomicU64::new(0),
            sample_seed: std::sync::OnceLock::new(),
        }
    }

    /// Marks the state as no longer to be trusted: every later call fails with
    /// [`StoreError::MustReopen`] giving `reason`, and nothing more is written.
    pub(super) fn mark_broken(&self, st: &mut State, reason: String) {
        let _ = self.broken.set(reason.clone());
        st.broken = Some(reason);
    }

    /// Whether reads may go on: not after a panic interrupted a change to the state, nor once
    /// it was marked broken.
    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.state.is_poisoned() {
            return Err(self.poisoned());
        }
        match self.broken.get() {
            Some(reason) => Err(StoreError::MustReopen {
                path: self.path.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn poisoned(&self) -> StoreError {
        StoreError::MustReopen {
            path: self.path.clone(),
            reason: "a panic interrupted a change to its in-memory state".into(),
        }
    }

    /// Creates a store at `dir` (which must not hold one already) with `config`, on sled.
    pub fn create(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        let path = dir.as_ref();
        config.validate()?;
        let engine =
            SledEngine::create(path, config.engine_cache_bytes).map_err(|e| open_error(path, e))?;
        // Written as soon as the lock is ours, so that a process finding it held can name us.
        let holder = HolderFile::write(path);
        let store = Self::create_with(Box::new(engine), config)?;
        Ok(store.held(holder))
    }

    /// Opens an existing store on sled, replaying its log past the last checkpoint. A store
    /// held by another process is [`StoreError::Locked`], naming the holder.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Self::open_with_wait(dir, Duration::ZERO)
    }

    /// [`Store::open`], but a store held by another process is waited for, up to `wait`,
    /// before it is [`StoreError::Locked`].
    pub fn open_with_wait(dir: impl AsRef<Path>, wait: Duration) -> Result<Store> {
        let path = dir.as_ref();
        match SledEngine::open_waiting(path, wait) {
            Ok(Some(engine)) => {
                // Before the replay, which can take a while: the holder is named meanwhile.
                let holder = HolderFile::write(path);
                let store = Self::open_with(Box::new(engine))?;
                Ok(store.held(holder))
            }
            Ok(None) => Err(StoreError::NotAStore {
                path: path.to_path_buf(),
            }),
            Err(e) => Err(open_error(path, e)),
        }
    }

    fn held(self, holder: Option<HolderFile>) -> Store {
        if let Ok(mut h) = self.holder.lock() {
            *h = holder;
        }
        self
    }

    /// Records in the store's holder record that this process answers queries on `socket`
    /// (`None`: no longer), so a process that finds the store held can ask through it. The
    /// store does not serve anything itself; the caller does (the CLI does, over a Unix
    /// socket). Without a holder record (a store not opened by [`Store::open`] or
    /// [`Store::create`]) it does nothing.
    pub fn set_socket(&self, socket: Option<&Path>) -> Result<()> {
        let mut holder = self.holder.lock().map_err(|_| StoreError::MustReopen {
            path: self.path.clone(),
            reason: "a panic interrupted a change to its holder record".into(),
        })?;
        if let Some(h) = holder.as_mut() {
            h.set_socket(socket.map(Path::to_path_buf))
                .map_err(|source| StoreError::Engine {
                    path: self.path.clone(),
                    source: EngineError::Io {
                        op: "write the holder record",
                        source,
                    },
                })?;
        }
        Ok(())
    }

    /// Creates a store with `config` on `engine`, which must not hold one already.
    pub fn create_with(engine: Box<dyn Engine>, config: Config) -> Result<Store> {
        config.validate()?;
        let engine = Seam::new(engine);
        let path = engine.path().to_path_buf();
        if engine.get(&keys::meta("format"))?.is_some() {
            return Err(StoreError::AlreadyExists { path });
        }
        let mut batch = WriteBatch::default();
        let mut put = |name: &str, value: Vec<u8>| {
            batch
                .put(keys::meta(name), value)
                .map_err(|source| StoreError::Engine {
                    path: path.clone(),
                    source,
                })
        };
        put("format", Self::blob(&path, &FORMAT_VERSION)?)?;
        put("config", Self::blob(&path, &config)?)?;
        put("checkpoint", Self::blob(&path, &Checkpoint { log_pos: 0 })?)?;
        engine.apply(batch)?;
        engine.sync()?;
        Self::load(engine)
    }

    /// Opens the store held by `engine`, replaying its log past the last checkpoint.
    pub fn open_with(engine: Box<dyn Engine>) -> Result<Store> {
        Self::load(Seam::new(engine))
    }

    /// Typed access to the sketch set (a copy) of the bucket holding `time`: see
    /// [`Snapshot::sketch_set`].
    pub fn sketch_set(&self, slice: &Slice, time: i64) -> Result<Option<SketchSet<Sample>>> {
        self.read(|s| s.sketch_set(slice, time))
    }

    /// Bytes the store holds in memory: sketch sets and cached merges.
    pub fn memory_use(&self) -> Result<MemoryUse> {
        let sets = Self::sets_bytes(&*self.lock()?);
        let cache = match self.cache.lock() {
            Ok(c) => c.used(),
            Err(poisoned) => poisoned.into_inner().used(),
        };
        Ok(MemoryUse { sets, cache })
    }

    /// Bytes the store occupies on disk (allocated blocks of its files, for sled).
    pub fn disk_bytes(&self) -> Result<u64> {
        self.engine.disk_bytes()
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The in-memory state, or why it cannot be used: a panic while it was held (the mutex is
    /// poisoned: whatever change was under way may be half done), a failed rollback, or a call
    /// from the thread inside [`Store::import`] (it would wait for itself).
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, State>> {
        let me = thread_token();
        if me != 0 && self.importer.load(Ordering::Acquire) == me {
            return Err(StoreError::InsideImport {
                path: self.path.clone(),
            });
        }
        let st = self.state.lock().map_err(|_| self.poisoned())?;
        if let Some(reason) = &st.broken {
            return Err(StoreError::MustReopen {
                path: self.path.clone(),
                reason: reason.clone(),
            });
        }
        Ok(st)
    }

    /// What is wrong with an event's tag `field:value`, if anything: the field must be one of
    /// the store's tag fields, and the value not empty.
    fn tag_problem(&self, field: &str, value: &str) -> Option<String> {
        if !self.config.tag_fields.iter().any(|f| f == field) {
            return Some(format!(
                "'{field}' is not a tag field of this store (tag fields: {})",
                self.config.tag_fields.join(", ")
            ));
        }
        if value.is_empty() {
            return Some(format!("tag '{field}' has an empty value"));
        }
        None
    }

    /// Checks a batch without changing anything: every event must have a time in the supported
    /// span, an item and only the configured tag fields, each once, with a value. `tags`:
    /// check the tags too (a reader that numbered them has its new names checked once, and
    /// repeats found by id, in `route`).
    fn check_batch(&self, events: &[Event], tags: bool) -> Result<()> {
        for (index, e) in events.iter().enumerate() {
            let bad = |reason: String| StoreError::BadEvent { index, reason };
            model::check_time(e.time).map_err(bad)?;
            if e.item.is_empty() {
                return Err(bad(format!(
                    "the item field '{}' is empty",
                    self.config.item_field
                )));
            }
            if e.tags.len() > log::MAX_TAGS {
                return Err(bad(format!(
                    "{} tags; at most {} per event",
                    e.tags.len(),
                    log::MAX_TAGS
                )));
            }
            if !tags {
                continue;
            }
            for (field, value) in &e.tags {
                if let Some(problem) = self.tag_problem(field, value) {
                    return Err(bad(problem));
                }
            }
            // Each pair compared once (this runs for every event of every ingest).
            for (i, (field, value)) in e.tags.iter().enumerate() {
                if e.tags[i + 1..]
                    .iter()
                    .any(|(f, v)| f == field && v == value)
                {
                    return Err(bad(format!("tag {field}:{value} appears twice")));
                }
            }
        }
        Ok(())
    }

    /// Ingests one event (see [`Store::ingest_batch`]).
    pub fn ingest(&self, event: &Event) -> Result<()> {
        self.ingest_batch(std::slice::from_ref(event))
    }

    /// Ingests a batch: all of it or, on any error, none of it. Durable after [`Store::flush`].
    pub fn ingest_batch(&self, events: &[Event]) -> Result<()> {
        let mut st = self.lock()?;
        self.ingest_locked(&mut st, events, None)?;
        self.changed(&st);
        Ok(())
    }

    /// Makes everything ingested so far durable: on return, a crash loses none of it.
    pub fn flush(&self) -> Result<()> {
        let mut st = self.lock()?;
        self.flush_locked(&mut st)
    }

    fn flush_locked(&self, st: &mut State) -> Result<()> {
        if let Some(earlier) = st.deferred_error.take() {
            // Retry the checkpoint that failed during ingest; it also writes the pending log.
            self.checkpoint_locked(st)
                .map_err(|e| StoreError::DamagedLog {
                    name: format!("checkpoint of {}", self.path.display()),
                    detail: format!("failed during ingest ({earlier}) and again on flush: {e}"),
                })?;
        }
        self.write_pending(st)?;
        self.engine.sync()?;
        self.acknowledge(st)?;
        if self.readers.load(Ordering::Acquire) {
            self.publish(st);
        }
        Ok(())
    }
}

impl Drop for Store {
    /// A clean close checkpoints, so the next open replays nothing. Errors here cannot be
    /// reported; the log is already durable after `flush`, and replay covers the rest.
    fn drop(&mut self) {
        let _ = self.checkpoint();
        // Before the engine (a later field) releases the lock: once it is released another
        // process may write its own record, which must not be the one removed.
        if let Ok(mut h) = self.holder.lock() {
            h.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    /// A panic while the state is held poisons the mutex; the state is not reused: every later
    /// call is an error, and the drop writes nothing.
    #[test]
    fn a_poisoned_state_is_never_reused() {
        let dir = tempdir("poisoned");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.flush().expect("flush");
        let poisoned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut st = store.state.lock().expect("not yet poisoned");
            // A change half made when the panic strikes.
            st.next_seq += 5;
            panic!("a bug while the state is held");
        }));
        assert!(poisoned.is_err());
        for r in [
            store.flush(),
            store.ingest(&events(100, 1)[0]),
            store.checkpoint(),
            store.count(&Slice::Whole, &TimeRange::all()).map(drop),
        ] {
            assert!(matches!(r, Err(StoreError::MustReopen { .. })), "{r:?}");
        }
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(logged_events(&store), 100);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
