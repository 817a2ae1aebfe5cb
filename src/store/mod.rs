//! The durable, time-bucketed sketch store on sled.
//!
//! This layer owns persistence: the key layout ([`keys`]), the event log ([`log`]), checkpoints,
//! recovery after a crash, memory budgeting of active sketch sets, and the typed read operations
//! the query engine calls ([`ops`]). It knows nothing of query syntax or answer formatting; it
//! depends only on the sketch layer below it.
//!
//! Write path: every ingested event is hashed once and routed to its bucket's whole-stream set,
//! to one set per tag value, and to the all-time scalable Bloom filter, then appended to the
//! pending log. [`Store::flush`] writes the pending log blocks in one atomic sled batch and syncs;
//! sketch sets are written back only at checkpoints (periodically, when memory runs over budget,
//! and on drop), each with the log position it includes. Opening replays the log past those
//! positions, so nothing flushed is lost and nothing is counted twice (see `docs/STORAGE.md`).

pub mod error;
pub mod keys;
pub mod log;
pub mod model;
pub mod ops;

pub use error::{Result, StoreError};
pub use model::{
    lowercase_item, BucketWidth, Config, Event, Slice, TimeRange, MAX_TIME, MIN_TIME, RANGE_LIMIT,
};

use crate::codec;
use crate::hash::{Item, ItemHashes};
use crate::sketch::{
    BloomFilter, CountMin, HyperLogLog, Reservoir, ScalableBloom, Sketch, SketchError, SketchSet,
    Theta,
};
use keys::Part;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// sled segment size for new stores (sled's default is 512 KiB). sled 0.34 writes any value,
/// or consolidated tree node, larger than a quarter segment to a file of its own, which costs a
/// file creation and which sled never fsyncs (spacejam/sled#1077): such data is safe from a
/// process crash but not from a power cut. 16 MiB (sled's maximum) puts the limit at 4 MiB, so
/// log blocks (at most [`log::BLOCK_BYTES`]), their tree nodes and default-sized sketches
/// (a 1.2 MB Bloom filter) stay in the segment log that `flush` syncs. The cost is a larger
/// minimum footprint (about 17 MB for an empty store instead of 8 MB).
pub const SEGMENT_BYTES: usize = 16 << 20;

/// How long opening waits for a store's lock before reporting it held.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// The on-disk format this build writes and the only one it reads. 3: Bloom filters (the
/// all-time one too) and Count-Min sketches start in exact forms, a changed layout. 2: Count-Min
/// rows hashed by independent SHA-256 words instead of double hashing (a version-1 store's
/// Count-Min tables would be read under the wrong columns, so it is refused with its version
/// named).
pub const FORMAT_VERSION: u32 = 3;
/// The blob kind of the store's metadata records (format version, config, checkpoint).
pub const META_KIND: u8 = 0x50;
const TAG_KIND: u8 = 0x51;

/// A set's stored header: how many events it holds and the log position it includes (every
/// event of this set with a sequence number below `log_pos` is in it).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct SetHeader {
    events: u64,
    log_pos: u64,
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    /// Every stored set includes all of its events below this sequence number, and no set
    /// absent from the store has any.
    log_pos: u64,
}

#[derive(Serialize, Deserialize)]
struct AllTime {
    bloom: ScalableBloom,
    log_pos: u64,
}

pub(crate) struct Active {
    pub(crate) set: SketchSet<Event>,
    /// Events with sequence numbers below this are in `set` (as stored or replayed).
    log_pos: u64,
    dirty: bool,
    last_used: u64,
}

#[derive(Default)]
pub(crate) struct TagDict {
    by_name: HashMap<String, u32>,
    /// field -> value -> id, so ingest looks a tag up without building its name.
    by_pair: FxHashMap<String, FxHashMap<String, u32>>,
    /// `names[id - 1]` is tag `id`'s `field:value`.
    names: Vec<String>,
    /// Ids below this are stored; the rest must be written with the next log block.
    persisted: u32,
}

impl TagDict {
    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn name(&self, id: u32) -> Option<&str> {
        id.checked_sub(1)
            .and_then(|i| self.names.get(i as usize))
            .map(String::as_str)
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.id(name) {
            return id;
        }
        self.names.push(name.to_string());
        let id = self.names.len() as u32;
        self.by_name.insert(name.to_string(), id);
        if let Some((field, value)) = name.split_once(':') {
            self.by_pair
                .entry(field.to_string())
                .or_default()
                .insert(value.to_string(), id);
        }
        id
    }

    /// The id of tag `field:value`, interning it if new.
    fn intern_pair(&mut self, field: &str, value: &str) -> u32 {
        match self.by_pair.get(field).and_then(|values| values.get(value)) {
            Some(&id) => id,
            None => self.intern(&format!("{field}:{value}")),
        }
    }

    /// Forgets ids handed out after `len` (a rejected batch must leave no trace).
    fn truncate(&mut self, len: usize) {
        for name in self.names.drain(len..) {
            self.by_name.remove(&name);
            if let Some((field, value)) = name.split_once(':') {
                if let Some(values) = self.by_pair.get_mut(field) {
                    values.remove(value);
                }
            }
        }
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = (u32, &str)> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (i as u32 + 1, n.as_str()))
    }
}

impl State {
    /// Moves the open block to the sealed ones (infallible: encoding waits for the write).
    fn seal_block(&mut self) {
        let next = log::BlockBuilder::new(self.next_seq);
        let mut full = std::mem::replace(&mut self.open_block, next);
        full.seal();
        self.sealed.push(full);
    }
}

pub(crate) struct State {
    pub(crate) tags: TagDict,
    next_seq: u64,
    /// Events ingested but not yet in the log: full blocks whose early write failed (the next
    /// flush retries them), and the block being filled.
    sealed: Vec<log::BlockBuilder>,
    /// Full blocks already written under their `L` keys whose `I` entries wait for the next
    /// flush or checkpoint batch. Until then they are not part of the log (nothing reads an `L`
    /// key without its `I` entry), and a rollback or the next open removes them.
    unindexed: Vec<log::BlockInfo>,
    open_block: log::BlockBuilder,
    pub(crate) sets: FxHashMap<(u32, i64), Active>,
    pub(crate) all_time: ScalableBloom,
    all_time_pos: u64,
    checkpoint_pos: u64,
    since_checkpoint: u64,
    clock: u64,
    /// Per (tag, bucket): the clock value of its last change, for cache validation.
    pub(crate) modified: FxHashMap<(u32, i64), u64>,
    pub(crate) cache: ops::Cache,
    /// A background checkpoint that failed inside `ingest_batch`, reported by the next flush.
    deferred_error: Option<String>,
    /// The newest event time seen (retention is measured against it).
    newest: Option<i64>,
    /// Events older than this were dropped from the log by retention.
    pub(crate) log_retained_from: Option<i64>,
    /// Inside [`Store::import`]: nothing may reach the disk until it commits, so checkpoints
    /// and log writes wait.
    importing: bool,
    /// Why this state can no longer be trusted (a rollback failed): every call then fails with
    /// [`StoreError::MustReopen`], and nothing more is written.
    broken: Option<String>,
}

/// Bytes held in memory by a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// Sketch sets held for ingest (what [`Config::memory_budget`] bounds).
    pub sets: usize,
    /// Merged results kept for reuse (what [`Config::cache_bytes`] bounds).
    pub cache: usize,
}

/// A small number unique to the calling thread (never 0), to recognise the thread running an
/// import. 0 during thread teardown, when thread-locals are gone (no import runs then).
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TOKEN.try_with(|t| *t).unwrap_or(0)
}

/// An open store. `Send + Sync`: ingest and queries may run from many threads; a mutex
/// serializes access to the in-memory state, so readers never see a half-applied event.
pub struct Store {
    path: PathBuf,
    db: sled::Db,
    config: Config,
    state: Mutex<State>,
    /// The [`thread_token`] of the thread inside [`Store::import`], 0 if none: a call from that
    /// thread would wait for itself forever, so it is refused instead.
    importer: AtomicU64,
}

/// An import in progress (see [`Store::import`]).
pub struct Import<'s> {
    store: &'s Store,
    st: &'s mut State,
    events: u64,
}

impl Import<'_> {
    /// Adds a batch to the import; a rejected batch fails the whole import.
    pub fn ingest_batch(&mut self, events: &[Event]) -> Result<()> {
        self.store.ingest_locked(self.st, events, None)?;
        self.events += events.len() as u64;
        Ok(())
    }

    /// [`Import::ingest_batch`] with each event's item hashes already computed, so a reader
    /// thread can take the hashing off the store's thread. `hashes[i]` must be
    /// `ItemHashes` of `events[i].item` (crate-private: a wrong hash would corrupt sketches).
    pub(crate) fn ingest_hashed(&mut self, events: &[Event], hashes: &[ItemHashes]) -> Result<()> {
        self.store.ingest_locked(self.st, events, Some(hashes))?;
        self.events += events.len() as u64;
        Ok(())
    }

    /// Events fed so far.
    pub fn events(&self) -> u64 {
        self.events
    }
}

fn engine(path: &Path) -> impl Fn(sled::Error) -> StoreError + '_ {
    move |source| StoreError::Engine {
        path: path.to_path_buf(),
        source,
    }
}

impl Store {
    /// Creates a store at `dir` (which must not hold one already) with `config`.
    pub fn create(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        let path = dir.as_ref().to_path_buf();
        config.validate()?;
        let db = Self::open_engine(&path)?;
        if db
            .get(keys::meta("format"))
            .map_err(engine(&path))?
            .is_some()
        {
            return Err(StoreError::AlreadyExists { path });
        }
        let mut batch = sled::Batch::default();
        batch.insert(keys::meta("format"), Self::blob(&path, &FORMAT_VERSION)?);
        batch.insert(keys::meta("config"), Self::blob(&path, &config)?);
        batch.insert(
            keys::meta("checkpoint"),
            Self::blob(&path, &Checkpoint { log_pos: 0 })?,
        );
        db.apply_batch(batch).map_err(engine(&path))?;
        db.flush().map_err(engine(&path))?;
        Self::load(path, db)
    }

    /// Opens an existing store, replaying its log past the last checkpoint.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        let path = dir.as_ref().to_path_buf();
        if !path.join("conf").exists() && !path.join("db").exists() {
            return Err(StoreError::NotAStore { path });
        }
        let db = Self::open_engine(&path)?;
        Self::load(path, db)
    }

    /// sled's segment size for a store at `path`: the one it was created with (sled refuses to
    /// open with another), or [`SEGMENT_BYTES`] for a new store.
    fn segment_size(path: &Path) -> usize {
        let persisted = std::fs::read(path.join("conf")).ok().and_then(|conf| {
            String::from_utf8_lossy(&conf)
                .lines()
                .find_map(|l| l.strip_prefix("segment_size: "))
                .and_then(|v| v.trim().parse().ok())
        });
        persisted.unwrap_or(SEGMENT_BYTES)
    }

    /// Opens sled at `path`. A lock held by this process's previous handle, whose I/O threads
    /// can outlive its drop by a moment, is waited out for up to [`LOCK_WAIT`]; a lock still
    /// held after that (another process) is [`StoreError::Locked`].
    fn open_engine(path: &Path) -> Result<sled::Db> {
        let started = std::time::Instant::now();
        loop {
            match Self::try_open_engine(path) {
                Err(StoreError::Locked { .. }) if started.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    fn try_open_engine(path: &Path) -> Result<sled::Db> {
        sled::Config::new()
            .path(path)
            // Durability is ours to decide: nothing is synced behind flush()'s back.
            .flush_every_ms(None)
            .segment_size(Self::segment_size(path))
            .open()
            .map_err(|source| match &source {
                sled::Error::Io(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    StoreError::Locked {
                        path: path.to_path_buf(),
                    }
                }
                sled::Error::Io(e) if e.to_string().contains("lock") => StoreError::Locked {
                    path: path.to_path_buf(),
                },
                _ => StoreError::Engine {
                    path: path.to_path_buf(),
                    source,
                },
            })
    }

    fn blob<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>> {
        codec::encode(META_KIND, value).map_err(|e| StoreError::DamagedLog {
            name: format!("{} metadata", path.display()),
            detail: e.to_string(),
        })
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        path: &Path,
        db: &sled::Db,
        name: &str,
    ) -> Result<Option<T>> {
        match db.get(keys::meta(name)).map_err(engine(path))? {
            None => Ok(None),
            Some(bytes) => {
                codec::decode(META_KIND, &bytes)
                    .map(Some)
                    .map_err(|e| StoreError::DamagedLog {
                        name: format!("store metadata '{name}'"),
                        detail: e.to_string(),
                    })
            }
        }
    }

    /// The stored configuration, in its current layout or the one before `lowercase_items`
    /// (see [`model::ConfigV1`]).
    fn read_config(path: &Path, db: &sled::Db) -> Result<Config> {
        let config = match Self::read_meta::<Config>(path, db, "config") {
            Ok(c) => c,
            Err(current) => match Self::read_meta::<model::ConfigV1>(path, db, "config") {
                Ok(old) => old.map(Config::from),
                Err(_) => return Err(current),
            },
        };
        config.ok_or_else(|| StoreError::NotAStore {
            path: path.to_path_buf(),
        })
    }

    fn load(path: PathBuf, db: sled::Db) -> Result<Store> {
        let (config, state) = Self::read_state(path.clone(), &db)?;
        // Before anything new is written at these positions.
        Self::remove_orphan_blocks(&path, &db, state.next_seq)?;
        let store = Store {
            path,
            db,
            config,
            state: Mutex::new(state),
            importer: AtomicU64::new(0),
        };
        store.replay()?;
        Ok(store)
    }

    /// The store's configuration and in-memory state as stored: no sets loaded, nothing
    /// replayed.
    fn read_state(path: PathBuf, db: &sled::Db) -> Result<(Config, State)> {
        let version: u32 = match Self::read_meta(&path, db, "format")? {
            Some(v) => v,
            None => return Err(StoreError::NotAStore { path }),
        };
        if version != FORMAT_VERSION {
            return Err(StoreError::UnsupportedVersion {
                path,
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let config = Self::read_config(&path, db)?;
        let checkpoint: Checkpoint =
            Self::read_meta(&path, db, "checkpoint")?.unwrap_or(Checkpoint { log_pos: 0 });
        let log_retained_from: Option<i64> = Self::read_meta(&path, db, "retained_from")?;

        let mut tags = TagDict::default();
        for entry in db.scan_prefix([keys::TAG]) {
            let (k, v) = entry.map_err(engine(&path))?;
            let id = k
                .get(1..5)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes);
            let name: String = codec::decode(TAG_KIND, &v).map_err(|e| StoreError::DamagedLog {
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

        let all_time = match db.get(keys::ALL_TIME).map_err(engine(&path))? {
            Some(bytes) => codec::decode::<AllTime>(SketchKindTag::ALL_TIME, &bytes)
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

        let last_block = db
            .scan_prefix([keys::INDEX])
            .next_back()
            .transpose()
            .map_err(engine(&path))?;
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
            tags,
            next_seq,
            sealed: Vec::new(),
            unindexed: Vec::new(),
            open_block: log::BlockBuilder::new(next_seq),
            sets: FxHashMap::default(),
            all_time: all_time.bloom,
            all_time_pos: all_time.log_pos,
            checkpoint_pos: checkpoint.log_pos,
            since_checkpoint: 0,
            clock: 0,
            modified: FxHashMap::default(),
            cache: ops::Cache::new(config.cache_bytes),
            newest: None,
            deferred_error: None,
            log_retained_from,
            importing: false,
            broken: None,
        };
        Ok((config, state))
    }

    fn new_all_time(config: &Config) -> Result<ScalableBloom> {
        ScalableBloom::new(config.sketches.bloom_capacity, config.sketches.bloom_fpr)
            .map_err(StoreError::Config)
    }

    /// Typed access to the sketch set (a copy) of the bucket holding `time`, for services that
    /// want the sketches themselves. `None` if the slice has no events in that bucket. A time
    /// outside [`MIN_TIME`]`..=`[`MAX_TIME`] is an error.
    ///
    /// A set not held for ingest is read from disk for the copy and not kept, so reads never
    /// grow the memory that [`Config::memory_budget`] bounds.
    pub fn sketch_set(&self, slice: &Slice, time: i64) -> Result<Option<SketchSet<Event>>> {
        model::check_time(time).map_err(|reason| StoreError::InvalidArgument {
            what: "bucket time",
            value: format!("{time} ms"),
            reason,
        })?;
        let st = self.lock()?;
        let tag = match slice {
            Slice::Whole => keys::WHOLE,
            Slice::Tag { .. } => match st.tags.id(&slice.name()) {
                Some(id) => id,
                None => return Ok(None),
            },
        };
        let bucket = self.config.bucket.bucket_of(time);
        if let Some(active) = st.sets.get(&(tag, bucket)) {
            return Ok(Some(active.set.clone()));
        }
        Ok(self.read_set(&st.tags, tag, bucket)?.map(|(set, _)| set))
    }

    /// Bytes the store holds in memory: sketch sets and cached merges.
    pub fn memory_use(&self) -> Result<MemoryUse> {
        let st = self.lock()?;
        Ok(MemoryUse {
            sets: Self::sets_bytes(&st),
            cache: st.cache.used(),
        })
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
        let st = self.state.lock().map_err(|_| StoreError::MustReopen {
            path: self.path.clone(),
            reason: "a panic interrupted a change to its in-memory state".into(),
        })?;
        if let Some(reason) = &st.broken {
            return Err(StoreError::MustReopen {
                path: self.path.clone(),
                reason: reason.clone(),
            });
        }
        Ok(st)
    }

    /// Replays log events past each set's checkpoint (after a crash, or a drop without a
    /// checkpoint). Events below a set's stored position are already in it and are skipped, so
    /// nothing is counted twice.
    fn replay(&self) -> Result<()> {
        let mut st = self.lock()?;
        let from = st.checkpoint_pos.min(st.all_time_pos);
        if from >= st.next_seq {
            return Ok(());
        }
        let mut events: Vec<(u64, Event, Vec<u32>)> = Vec::new();
        self.for_each_block_from(
            from,
            |ev, tags| {
                if ev.seq >= from {
                    events.push((ev.seq, Self::to_event(ev, tags), ev.tag_ids().to_vec()));
                }
            },
            &st.tags,
        )?;
        for (seq, event, tag_ids) in events {
            let bucket = self.config.bucket.bucket_of(event.time);
            let item = Item::new(event.item.as_bytes());
            for &tag in std::iter::once(&keys::WHOLE).chain(&tag_ids) {
                self.ensure_loaded(&mut st, tag, bucket)?;
                st.clock += 1;
                let clock = st.clock;
                if let Some(active) = st.sets.get_mut(&(tag, bucket)) {
                    if seq >= active.log_pos {
                        active.set.update(&item, || event.clone());
                        active.log_pos = seq + 1;
                        active.dirty = true;
                        active.last_used = clock;
                    }
                }
            }
            if seq >= st.all_time_pos {
                st.all_time.insert(&item.hashes.sha);
                st.all_time_pos = seq + 1;
            }
            st.newest = Some(st.newest.map_or(event.time, |n| n.max(event.time)));
        }
        // Replay loads every set the replayed events touch; hold no more than the budget after.
        if Self::sets_bytes(&st) > self.config.memory_budget {
            self.checkpoint_locked(&mut st)?;
        }
        Ok(())
    }

    /// Calls `each` for every logged event in blocks that end after `from`.
    fn for_each_block_from(
        &self,
        from: u64,
        mut each: impl FnMut(&log::LogEvent<'_>, &TagDict),
        tags: &TagDict,
    ) -> Result<()> {
        for entry in self.db.range(keys::index(0)..=keys::index(u64::MAX)) {
            let (k, v) = entry.map_err(engine(&self.path))?;
            let first = keys::seq_of(&k).unwrap_or(0);
            let info = log::BlockInfo::decode(&v).map_err(|detail| StoreError::DamagedLog {
                name: format!("log block index at event {first}"),
                detail,
            })?;
            if info.end_seq() <= from {
                continue;
            }
            let block = self
                .db
                .get(keys::log(first))
                .map_err(engine(&self.path))?
                .ok_or_else(|| StoreError::DamagedLog {
                    name: format!("log block at event {first}"),
                    detail: "missing".into(),
                })?;
            log::decode_block(&block, |ev| each(ev, tags)).map_err(|detail| {
                StoreError::DamagedLog {
                    name: format!("log block at event {first}"),
                    detail,
                }
            })?;
        }
        Ok(())
    }

    pub(crate) fn to_event(ev: &log::LogEvent<'_>, tags: &TagDict) -> Event {
        Event {
            time: ev.time,
            item: ev.item.to_text(),
            tags: ev
                .tag_ids()
                .iter()
                .filter_map(|&id| tags.name(id))
                .filter_map(|n| n.split_once(':'))
                .map(|(f, v)| (f.to_string(), v.to_string()))
                .collect(),
            extra: String::from_utf8_lossy(ev.extra).into_owned(),
        }
    }

    /// A human name for a stored sketch, used in damage reports.
    pub(crate) fn blob_name(&self, tags: &TagDict, part: Part, tag: u32, bucket: i64) -> String {
        let tag_name = if tag == keys::WHOLE {
            "whole stream".to_string()
        } else {
            tags.name(tag).unwrap_or("unknown tag").to_string()
        };
        format!(
            "{} sketch of bucket {}, {}",
            part.name(),
            self.config.bucket.label(bucket),
            tag_name
        )
    }

    /// Reads one stored part of a set, checking it.
    pub(crate) fn read_part<S: Sketch>(
        &self,
        tags: &TagDict,
        part: Part,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<S>> {
        let Some(bytes) = self
            .db
            .get(keys::sketch(part, tag, bucket))
            .map_err(engine(&self.path))?
        else {
            return Ok(None);
        };
        S::decode(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Damaged {
                name: self.blob_name(tags, part, tag, bucket),
                source,
            })
    }

    pub(crate) fn read_header(
        &self,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(u64, u64)>> {
        let Some(bytes) = self
            .db
            .get(keys::sketch(Part::Header, tag, bucket))
            .map_err(engine(&self.path))?
        else {
            return Ok(None);
        };
        let h: SetHeader =
            codec::decode(META_KIND, &bytes).map_err(|e| StoreError::DamagedLog {
                name: self.blob_name(tags, Part::Header, tag, bucket),
                detail: e.to_string(),
            })?;
        Ok(Some((h.events, h.log_pos)))
    }

    /// Makes sure the set for (tag, bucket) is in memory, loading it or creating it empty.
    fn ensure_loaded(&self, st: &mut State, tag: u32, bucket: i64) -> Result<()> {
        if st.sets.contains_key(&(tag, bucket)) {
            return Ok(());
        }
        let (set, log_pos) = match self.read_set(&st.tags, tag, bucket)? {
            Some(stored) => stored,
            None => (
                SketchSet::new(&self.config.sketches).map_err(StoreError::Config)?,
                0,
            ),
        };
        let active = Active {
            set,
            log_pos,
            dirty: false,
            last_used: st.clock,
        };
        st.sets.insert((tag, bucket), active);
        Ok(())
    }

    /// Reads and checks a stored set with the log position it includes; `None` if none is
    /// stored.
    fn read_set(
        &self,
        tags: &TagDict,
        tag: u32,
        bucket: i64,
    ) -> Result<Option<(SketchSet<Event>, u64)>> {
        let Some((events, log_pos)) = self.read_header(tags, tag, bucket)? else {
            return Ok(None);
        };
        let missing = |part: Part| StoreError::DamagedLog {
            name: self.blob_name(tags, part, tag, bucket),
            detail: "missing".into(),
        };
        let set = SketchSet {
            bloom: self
                .read_part::<BloomFilter>(tags, Part::Bloom, tag, bucket)?
                .ok_or_else(|| missing(Part::Bloom))?,
            hll: self
                .read_part::<HyperLogLog>(tags, Part::Hll, tag, bucket)?
                .ok_or_else(|| missing(Part::Hll))?,
            theta: self
                .read_part::<Theta>(tags, Part::Theta, tag, bucket)?
                .ok_or_else(|| missing(Part::Theta))?,
            cms: self
                .read_part::<CountMin>(tags, Part::CountMin, tag, bucket)?
                .ok_or_else(|| missing(Part::CountMin))?,
            reservoir: self
                .read_part::<Reservoir<Event>>(tags, Part::Reservoir, tag, bucket)?
                .ok_or_else(|| missing(Part::Reservoir))?,
            events,
        };
        set.validate().map_err(|source| StoreError::Damaged {
            name: self.blob_name(tags, Part::Header, tag, bucket),
            source,
        })?;
        Ok(Some((set, log_pos)))
    }

    /// Checks a batch without changing anything: every event must have a time in the supported
    /// span, an item and only the configured tag fields.
    fn check_batch(&self, events: &[Event]) -> Result<()> {
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
            for (field, value) in &e.tags {
                if !self.config.tag_fields.iter().any(|f| f == field) {
                    return Err(bad(format!(
                        "'{field}' is not a tag field of this store (tag fields: {})",
                        self.config.tag_fields.join(", ")
                    )));
                }
                if value.is_empty() {
                    return Err(bad(format!("tag '{field}' has an empty value")));
                }
                if e.tags
                    .iter()
                    .filter(|(f, v)| f == field && v == value)
                    .count()
                    > 1
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
        self.ingest_locked(&mut st, events, None)
    }

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
    /// sketch sets it touches (the memory budget is not enforced meanwhile) and one open block.
    /// A crash before the commit loses the import and nothing else.
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
        self.importer.store(thread_token(), Ordering::Release);
        let outcome = {
            let mut import = Import {
                store: self,
                st: &mut st,
                events: 0,
            };
            // Caught so that the rollback runs with the lock held and the mutex is not
            // poisoned; the panic is resumed below, after the lock is released.
            catch_unwind(AssertUnwindSafe(|| fill(&mut import)))
        };
        self.importer.store(0, Ordering::Release);
        match outcome {
            Ok(Ok(value)) => {
                st.importing = false;
                let committed = self.checkpoint_locked(&mut st);
                let committed = match committed {
                    Ok(()) => Ok(value),
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
    fn roll_back(&self, st: &mut State, durable: u64, why: &str) -> Result<()> {
        let reread = Self::read_state(self.path.clone(), &self.db).and_then(|(_, fresh)| {
            Self::remove_orphan_blocks(&self.path, &self.db, fresh.next_seq)?;
            Ok(fresh)
        });
        let reason = match reread {
            Ok(fresh) if fresh.next_seq == durable => {
                *st = fresh;
                return Ok(());
            }
            Ok(fresh) => format!(
                "{why}, yet the log on disk runs to event {} instead of {durable}: the commit was written but not confirmed durable; reopen the store to see what it kept",
                fresh.next_seq
            ),
            Err(e) => format!("{why}, and rolling it back failed: {e}"),
        };
        st.broken = Some(reason.clone());
        Err(StoreError::MustReopen {
            path: self.path.clone(),
            reason,
        })
    }

    /// `hashed`, when given, holds each event's item hashes computed ahead (on another thread).
    fn ingest_locked(
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
        let tags_before = st.tags.names.len();
        // Resolve tags and load every set the batch touches before changing any of them, so a
        // damaged blob rejects the whole batch and leaves memory as it was.
        let mut buckets: Vec<i64> = Vec::with_capacity(events.len());
        let mut tag_ids: Vec<u32> = Vec::with_capacity(events.len());
        let mut tag_ends: Vec<usize> = Vec::with_capacity(events.len());
        for e in events {
            for (f, v) in &e.tags {
                let id = st.tags.intern_pair(f, v);
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
                st.tags.truncate(tags_before);
                return Err(e);
            }
            loaded_now.push((tag, bucket));
        }
        st.clock += 1;
        let clock = st.clock;
        for &key in &needed {
            st.modified.insert(key, clock);
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
                active
                    .set
                    .update_batch(&items, which, |i| events[i].clone());
                if let Some(&last) = which.last() {
                    active.log_pos = first_seq + last as u64 + 1;
                }
            }
        }
        for (n, item) in items.iter().enumerate() {
            if let Some(ahead) = items.get(n + 8) {
                st.all_time.prefetch(&ahead.hashes.sha);
            }
            st.all_time.insert(&item.hashes.sha);
        }
        let mut start = 0;
        for ((event, item), &end) in events.iter().zip(&items).zip(&tag_ends) {
            let ids = &tag_ids[start..end];
            start = end;
            st.next_seq += 1;
            st.newest = Some(st.newest.map_or(event.time, |n| n.max(event.time)));
            st.open_block.push(
                event.time,
                &event.item,
                item.hashes.murmur[0],
                ids,
                &event.extra,
            );
            if st.open_block.is_full() {
                self.write_full_block(st);
            }
        }
        st.all_time_pos = st.next_seq;
        st.since_checkpoint += events.len() as u64;
        let over_budget = Self::sets_bytes(st) > self.config.memory_budget;
        if !st.importing && (st.since_checkpoint >= self.config.checkpoint_every || over_budget) {
            // The batch is applied whatever happens here; failing the call would invite a retry
            // that counts it twice. A failed checkpoint is retried, and reported, by the next
            // flush.
            if let Err(e) = self.checkpoint_locked(st) {
                st.deferred_error = Some(e.to_string());
            }
        }
        Ok(())
    }

    /// Writes the full open block under its `L` key now and starts the next one in the same
    /// builder, so a long ingest streams its log to disk instead of holding it for one huge
    /// batch (10M events ingested in 8.7–10 s instead of 14 s, with flat memory). Its `I`
    /// entry, which makes it part of the log, goes in the next flush or checkpoint batch. If the
    /// write fails, the block is sealed in memory instead and that batch writes it whole,
    /// reporting any error there.
    fn write_full_block(&self, st: &mut State) {
        let written = st.open_block.finish().ok().and_then(|(blob, info)| {
            self.db
                .insert(keys::log(info.first_seq), blob)
                .ok()
                .map(|_| info)
        });
        match written {
            Some(info) => {
                st.unindexed.push(info);
                let next = st.next_seq;
                st.open_block.reset(next);
            }
            None => st.seal_block(),
        }
    }

    /// Removes `L` blocks at or after `next_seq`: blocks written early whose `I` entries never
    /// came (an import rolled back, or a crash before the flush that would have indexed them).
    /// Indexed blocks all end at or before `next_seq`, so none of them is touched.
    fn remove_orphan_blocks(path: &Path, db: &sled::Db, next_seq: u64) -> Result<()> {
        let mut batch = sled::Batch::default();
        let mut any = false;
        for key in db.range(keys::log(next_seq)..=keys::log(u64::MAX)).keys() {
            batch.remove(key.map_err(engine(path))?);
            any = true;
        }
        if any {
            db.apply_batch(batch).map_err(engine(path))?;
        }
        Ok(())
    }

    fn sets_bytes(st: &State) -> usize {
        st.sets.values().map(|a| a.set.size_bytes()).sum()
    }

    /// Evicts clean sets, least recently used first, while memory is over budget: down to half
    /// the budget, so the next batches do not checkpoint again at once. Dirty sets stay (only
    /// a checkpoint may drop them).
    fn evict_over_budget(&self, st: &mut State) {
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

    /// Adds the pending events (and new tag names) to `batch` as log blocks.
    fn log_into(&self, st: &mut State, batch: &mut sled::Batch) -> Result<()> {
        for id in st.tags.persisted + 1..=st.tags.names.len() as u32 {
            let name = st.tags.name(id).unwrap_or_default().to_string();
            let blob = codec::encode(TAG_KIND, &name).map_err(|e| StoreError::DamagedLog {
                name: "tag dictionary".into(),
                detail: e.to_string(),
            })?;
            batch.insert(&keys::tag(id), blob);
        }
        if !st.open_block.is_empty() {
            st.seal_block();
        }
        for info in &st.unindexed {
            let index = info.encode().map_err(|e| StoreError::DamagedLog {
                name: format!("index of log block at event {}", info.first_seq),
                detail: e.to_string(),
            })?;
            batch.insert(&keys::index(info.first_seq), index);
        }
        for block in &st.sealed {
            let first = block.next_seq() - block.len() as u64;
            let encoding = |e: codec::CodecError| StoreError::DamagedLog {
                name: format!("log block at event {first}"),
                detail: e.to_string(),
            };
            let (blob, info) = block.finish().map_err(encoding)?;
            let index = info.encode().map_err(encoding)?;
            batch.insert(&keys::log(info.first_seq), blob);
            batch.insert(&keys::index(info.first_seq), index);
        }
        Ok(())
    }

    fn after_log_written(st: &mut State) {
        st.tags.persisted = st.tags.names.len() as u32;
        st.sealed.clear();
        st.unindexed.clear();
        st.open_block = log::BlockBuilder::new(st.next_seq);
    }

    /// Writes the pending log without syncing (queries that scan the log need it there).
    pub(crate) fn write_pending(&self, st: &mut State) -> Result<()> {
        if st.importing {
            return Ok(());
        }
        let nothing_pending =
            st.sealed.is_empty() && st.unindexed.is_empty() && st.open_block.is_empty();
        if nothing_pending && st.tags.persisted as usize == st.tags.names.len() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        self.log_into(st, &mut batch)?;
        self.db.apply_batch(batch).map_err(engine(&self.path))?;
        Self::after_log_written(st);
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
        self.db.flush().map_err(engine(&self.path))?;
        Ok(())
    }

    /// Writes every changed sketch set back with the log position it includes, in one atomic
    /// batch with the pending log, syncs, and evicts the least recently used sets while memory
    /// is over budget.
    pub fn checkpoint(&self) -> Result<()> {
        let mut st = self.lock()?;
        self.checkpoint_locked(&mut st)
    }

    fn checkpoint_locked(&self, st: &mut State) -> Result<()> {
        if st.importing {
            // An unfinished import (or one that panicked) must not reach the disk.
            return Ok(());
        }
        let unchanged = st.since_checkpoint == 0
            && st.sealed.is_empty()
            && st.unindexed.is_empty()
            && st.open_block.is_empty()
            && st.checkpoint_pos == st.next_seq
            && st.sets.values().all(|a| !a.dirty);
        if unchanged {
            self.evict_over_budget(st);
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        self.log_into(st, &mut batch)?;
        let pos = st.next_seq;
        let encode_err =
            |name: String| move |source: SketchError| StoreError::Damaged { name, source };
        let tags = &st.tags;
        for (&(tag, bucket), active) in st.sets.iter_mut().filter(|(_, a)| a.dirty) {
            let name = |part: Part| self.blob_name(tags, part, tag, bucket);
            let s = &active.set;
            let encoded = [
                (Part::Bloom, s.bloom.encode()),
                (Part::Hll, s.hll.encode()),
                (Part::Theta, s.theta.encode()),
                (Part::CountMin, s.cms.encode()),
                (Part::Reservoir, s.reservoir.encode()),
            ];
            for (part, blob) in encoded {
                let blob = blob.map_err(encode_err(name(part)))?;
                batch.insert(&keys::sketch(part, tag, bucket), blob);
            }
            let header = SetHeader {
                events: s.events,
                log_pos: pos,
            };
            batch.insert(
                &keys::sketch(Part::Header, tag, bucket),
                Self::blob(&self.path, &header)?,
            );
        }
        let all_time = AllTime {
            bloom: st.all_time.clone(),
            log_pos: pos,
        };
        let all_time_blob = codec::encode(SketchKindTag::ALL_TIME, &all_time).map_err(|e| {
            StoreError::DamagedLog {
                name: "all-time bloom filter".into(),
                detail: e.to_string(),
            }
        })?;
        batch.insert(keys::ALL_TIME, all_time_blob);
        batch.insert(
            keys::meta("checkpoint"),
            Self::blob(&self.path, &Checkpoint { log_pos: pos })?,
        );
        let expired = self.expire_into(st, pos, &mut batch)?;
        self.db.apply_batch(batch).map_err(engine(&self.path))?;
        self.db.flush().map_err(engine(&self.path))?;
        Self::after_log_written(st);
        if let Some(t) = expired {
            st.log_retained_from = Some(st.log_retained_from.map_or(t, |old| old.max(t)));
        }
        for active in st.sets.values_mut() {
            active.dirty = false;
            active.log_pos = pos;
        }
        st.checkpoint_pos = pos;
        st.since_checkpoint = 0;
        self.evict_over_budget(st);
        Ok(())
    }

    /// Drops log blocks older than the retention window. Only blocks wholly below the
    /// checkpoint position go: the ones after it are still needed for recovery. Sketches are
    /// never touched. Returns the new oldest retained time if anything was dropped.
    fn expire_into(
        &self,
        st: &State,
        checkpoint: u64,
        batch: &mut sled::Batch,
    ) -> Result<Option<i64>> {
        let (Some(retention), Some(newest)) = (self.config.retention_ms, st.newest) else {
            return Ok(None);
        };
        // Saturating: a store created before retention was bounded may hold any value.
        let cutoff = newest.saturating_sub(retention);
        let mut dropped_any = false;
        for entry in self.db.scan_prefix([keys::INDEX]) {
            let (k, v) = entry.map_err(engine(&self.path))?;
            let Ok(info) = log::BlockInfo::decode(&v) else {
                continue;
            };
            if info.max_time < cutoff && info.end_seq() <= checkpoint {
                batch.remove(k.clone());
                batch.remove(&keys::log(info.first_seq));
                dropped_any = true;
            }
        }
        if dropped_any {
            // Never move backwards: `newest` is only known for events seen since open.
            let from = st.log_retained_from.map_or(cutoff, |old| old.max(cutoff));
            batch.insert(keys::meta("retained_from"), Self::blob(&self.path, &from)?);
            return Ok(Some(from));
        }
        Ok(None)
    }
}

impl Drop for Store {
    /// A clean close checkpoints, so the next open replays nothing. Errors here cannot be
    /// reported; the log is already durable after `flush`, and replay covers the rest.
    fn drop(&mut self) {
        let _ = self.checkpoint();
    }
}

/// Blob kinds of the store's own records.
struct SketchKindTag;

impl SketchKindTag {
    const ALL_TIME: u8 = 0x52;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::wallet_address;

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sketchdb-store-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn config() -> Config {
        Config {
            sketches: crate::sketch::SketchConfig {
                bloom_capacity: 20_000,
                reservoir_size: 50,
                ..crate::sketch::SketchConfig::default()
            },
            ..Config::default()
        }
    }

    /// `n` events from `first` on one day, alternating chains.
    fn events(first: u64, n: u64) -> Vec<Event> {
        (first..first + n)
            .map(|i| {
                let chain = if i % 2 == 0 { "a" } else { "b" };
                Event::new(
                    1_764_547_200_000 + i as i64,
                    wallet_address(9, i),
                    &[("chain", chain)],
                )
            })
            .collect()
    }

    /// The first sequence numbers of the `L` and of the `I` keys.
    fn block_keys(store: &Store) -> (Vec<u64>, Vec<u64>) {
        let seqs = |prefix: u8| -> Vec<u64> {
            store
                .db
                .scan_prefix([prefix])
                .keys()
                .map(|k| keys::seq_of(&k.expect("key")).expect("a seq"))
                .collect()
        };
        (seqs(keys::LOG), seqs(keys::INDEX))
    }

    fn logged_events(store: &Store) -> usize {
        store
            .events(&Slice::Whole, &TimeRange::all())
            .expect("scan")
            .len()
    }

    #[test]
    fn blocks_are_written_as_they_fill_and_indexed_by_the_flush() {
        let dir = tempdir("early");
        let store = Store::create(&dir, config()).expect("create");
        let n = 3 * log::BLOCK_EVENTS as u64 + 10;
        store.ingest_batch(&events(0, n)).expect("ingest");
        // Three full blocks are already under their `L` keys, but not yet part of the log.
        let (l, i) = block_keys(&store);
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(i.is_empty(), "{i:?}");
        store.flush().expect("flush");
        let (l, i) = block_keys(&store);
        assert_eq!(l.len(), 4, "three full blocks and the open one");
        assert_eq!(l, i, "every block has its index entry");
        assert_eq!(logged_events(&store), n as usize);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

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
            .db
            .get(keys::meta("format"))
            .expect("get")
            .expect("format");
        let failed: std::result::Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(&events(100, 1_000))?;
            // The fault: the metadata the rollback re-reads is unreadable.
            imp.store
                .db
                .insert(keys::meta("format"), b"damaged".to_vec())
                .expect("insert");
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
        store
            .db
            .insert(keys::meta("format"), format.to_vec())
            .expect("restore");
        store.db.flush().expect("sync");
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
        store
            .db
            .insert(
                keys::meta("checkpoint"),
                Store::blob(&dir, &Checkpoint { log_pos: 0 }).expect("blob"),
            )
            .expect("insert");
        store.db.remove(keys::ALL_TIME).expect("remove");
        for key in store.db.scan_prefix([keys::SKETCH]).keys() {
            store.db.remove(key.expect("key")).expect("remove");
        }
        store.db.flush().expect("sync");
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

    #[test]
    fn blocks_left_by_a_crash_are_removed_on_open() {
        let dir = tempdir("orphans");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.flush().expect("flush");
        // What a crash after early block writes, before the flush that indexes them, leaves.
        let next = store.lock().expect("lock").next_seq;
        for first in [next, next + log::BLOCK_EVENTS as u64] {
            store
                .db
                .insert(keys::log(first), b"written early, never indexed".to_vec())
                .expect("insert");
        }
        store.db.flush().expect("sync");
        // The closing checkpoint indexes only blocks this process wrote, so they stay orphans.
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        let (l, i) = block_keys(&store);
        assert_eq!(l, i, "the orphans are gone: {l:?}");
        assert_eq!(logged_events(&store), 100);
        store.ingest_batch(&events(100, 10)).expect("ingest");
        store.flush().expect("flush");
        assert_eq!(logged_events(&store), 110);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_store_gets_large_segments_and_an_old_one_keeps_its_own() {
        let dir = tempdir("segments");
        assert_eq!(Store::segment_size(&dir), SEGMENT_BYTES);
        drop(Store::create(&dir, config()).expect("create"));
        assert_eq!(Store::segment_size(&dir), SEGMENT_BYTES);
        // A store made with sled's default segment size (as before SEGMENT_BYTES) still opens.
        let old = tempdir("segments-old");
        let db = sled::Config::new()
            .path(&old)
            .segment_size(512 * 1024)
            .open()
            .expect("sled");
        drop(db);
        assert_eq!(Store::segment_size(&old), 512 * 1024);
        assert!(Store::open_engine(&old).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&old);
    }

    #[test]
    fn a_block_of_long_events_is_sealed_by_its_size() {
        let dir = tempdir("bytes");
        let store = Store::create(&dir, config()).expect("create");
        let big: Vec<Event> = (0..200u64)
            .map(|i| Event {
                extra: "x".repeat(4_000),
                ..Event::new(1_764_547_200_000, wallet_address(9, i), &[])
            })
            .collect();
        store.ingest_batch(&big).expect("ingest");
        store.flush().expect("flush");
        let (l, _) = block_keys(&store);
        // 200 × ~4 KB = ~800 KB: at most 192 KiB a block means at least 5 blocks.
        assert!(l.len() >= 5, "{l:?}");
        for (_, v) in store.db.scan_prefix([keys::LOG]).map(|e| e.expect("entry")) {
            assert!(v.len() <= log::BLOCK_BYTES + 8_192, "{} bytes", v.len());
        }
        assert_eq!(logged_events(&store), 200);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
