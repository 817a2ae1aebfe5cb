//! `SledEngine`: the store on disk, in sled 0.34. The only file that names sled.
//!
//! Owns: opening sled the way the store needs it (no background flushes, 4 MiB segments for
//! new stores, a bounded page cache, no unfinished snapshot left in its way), the lock wait,
//! mapping sled's errors (a lock held, damage with its file and offset, a full disk), a sync
//! that makes applied writes survive a power cut, the free-space check that keeps sled from
//! meeting a full disk mid-write, and the store directory's size on disk.
//!
//! Must not: know keys, kinds or values. Panics inside sled are caught one level up, by the
//! seam's guard around every call ([`super::Seam`]), and while opening, here.

use super::files::DirFiles;
use super::{panic_message, Engine, EngineError, Entries, Entry, WriteBatch};
use crate::store::model::DEFAULT_ENGINE_CACHE_BYTES;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// sled segment size for new stores (sled's default is 512 KiB). sled 0.34 writes any log
/// message (a value, or a consolidated tree node) larger than a quarter segment to a file of its
/// own in `blobs/`, which it never fsyncs (spacejam/sled#1077) and never reclaims. 4 MiB puts
/// that limit at 1 MiB, above the largest node values of at most [`super::VALUE_MAX`] can make.
/// Not larger: sled allocates its file a segment at a time and keeps segments up to half dead,
/// so a small store pays for whole segments (a 1-day store with 2,000 tag values took 16.8 MB
/// in 16 MiB segments, 10.5 MB in 4 MiB ones). Not smaller: 2 MiB segments let 60 small
/// ingests grow a store to 2× its first size (sled cleans a segment only when half of it is
/// dead), where 4 MiB keeps it at 1.02×. Stores made with 16 MiB (stores before format 6)
/// keep them: sled refuses to open with another size.
pub const SEGMENT_BYTES: usize = 4 << 20;

/// How long opening waits for a store's lock before reporting it held.
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// The file beside sled's own that records the page-cache bound, which sled must be given
/// before the store's configuration (inside sled) can be read.
const CACHE_FILE: &str = "sketchdb-engine";

/// The file beside sled's own that holds the acknowledgement record ([`Engine::write_ack`]):
/// outside sled's log, so a damaged or truncated log file that makes sled recover an earlier
/// state cannot take the record back with it.
pub const ACK_FILE: &str = "sketchdb-ack";
/// Where a new record is written and fsynced before it is renamed over [`ACK_FILE`].
const ACK_TEMP: &str = "sketchdb-ack.new";

/// The directory, inside the store's, of the engine's append-only files (the raw event log).
pub const FILES_DIR: &str = "log";

/// An open sled database, and the append-only files beside it.
pub struct SledEngine {
    db: sled::Db,
    path: PathBuf,
    files: DirFiles,
    /// sled's segment size for this store: the reserve a write must leave free.
    segment: u64,
    /// Why sled is not to write anything more: it failed a write or a flush. sled 0.34 does not
    /// undo a batch that fails half-way: it cancels the batch's manifest, so the items already
    /// in its log buffers are recovered as single writes once those buffers reach the disk.
    /// Any later flush (its own on drop included) could make half a batch durable, and on a
    /// failed buffer write that flush can also wait forever (measured on a full tmpfs).
    broken: Mutex<Option<String>>,
}

fn io(op: &'static str) -> impl Fn(std::io::Error) -> EngineError {
    move |source| {
        if source.kind() == std::io::ErrorKind::StorageFull {
            EngineError::NoSpace {
                op,
                detail: source.to_string(),
            }
        } else {
            EngineError::Io { op, source }
        }
    }
}

/// Whether `name` is a snapshot sled began and never finished (see
/// [`SledEngine::remove_unfinished_snapshots`]).
fn is_unfinished_snapshot(name: &str) -> bool {
    name.starts_with("snap.") && name.ends_with(".generating")
}

impl SledEngine {
    /// Creates the engine's files in `dir` (made if missing), with a page cache of
    /// `cache_bytes`. A directory already holding sled's files is opened as it is, with the
    /// settings it has (whoever creates the store there finds out whether it holds one).
    pub fn create(dir: &Path, cache_bytes: u64) -> Result<SledEngine, EngineError> {
        if let Some(existing) = Self::open(dir)? {
            return Ok(existing);
        }
        // The directories made here are entries in their parents, which the engine's `sync`
        // (the store directory and below) never fsyncs: without this, a power cut after
        // `init` reported success could lose the store directory itself.
        let mut made = Vec::new();
        let mut missing = Some(dir);
        while let Some(d) = missing.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            made.push(d);
            missing = d.parent();
        }
        std::fs::create_dir_all(dir).map_err(io("create the store directory"))?;
        for d in made {
            let parent = match d.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            std::fs::File::open(parent)
                .and_then(|f| f.sync_all())
                .map_err(io("fsync the directory holding the store"))?;
        }
        // sled's files first: a directory holding only the settings file would look foreign to
        // `sketchdb init`; without the file (a crash in between) the default cache is used.
        let engine = Self::open_with_cache(dir, cache_bytes, Duration::ZERO)?;
        std::fs::write(
            dir.join(CACHE_FILE),
            format!("cache_bytes: {cache_bytes}\n"),
        )
        .map_err(io("write the engine settings"))?;
        // Syncs the settings file and the directory too.
        engine.sync()?;
        Ok(engine)
    }

    /// Opens the engine in `dir`; `Ok(None)` if `dir` holds none (nothing is created then).
    pub fn open(dir: &Path) -> Result<Option<SledEngine>, EngineError> {
        Self::open_waiting(dir, Duration::ZERO)
    }

    /// [`SledEngine::open`], waiting up to `wait` (at least [`LOCK_WAIT`]) for a lock held
    /// by another process.
    pub fn open_waiting(dir: &Path, wait: Duration) -> Result<Option<SledEngine>, EngineError> {
        if !dir.join("conf").exists() && !dir.join("db").exists() {
            return Ok(None);
        }
        let cache = match std::fs::read_to_string(dir.join(CACHE_FILE)) {
            Ok(text) => text
                .lines()
                .find_map(|l| l.strip_prefix("cache_bytes: "))
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| EngineError::Other {
                    op: "read the engine settings",
                    detail: format!(
                        "{} does not hold a line `cache_bytes: N`",
                        dir.join(CACHE_FILE).display()
                    ),
                })?,
            // A store made before the file existed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => DEFAULT_ENGINE_CACHE_BYTES,
            Err(e) => return Err(io("read the engine settings")(e)),
        };
        Self::open_with_cache(dir, cache, wait).map(Some)
    }

    /// sled's segment size for a store at `dir`: the one it was created with (sled refuses to
    /// open with another), or [`SEGMENT_BYTES`] for a new store.
    pub fn segment_size(dir: &Path) -> usize {
        let persisted = std::fs::read(dir.join("conf")).ok().and_then(|conf| {
            String::from_utf8_lossy(&conf)
                .lines()
                .find_map(|l| l.strip_prefix("segment_size: "))
                .and_then(|v| v.trim().parse().ok())
        });
        persisted.unwrap_or(SEGMENT_BYTES)
    }

    /// A lock held by this process's previous handle, whose I/O threads can outlive its drop by
    /// a moment, is waited out for up to [`LOCK_WAIT`]; a lock still held after that (another
    /// process) is [`EngineError::Locked`], unless the caller asked to wait longer (`wait`).
    fn open_with_cache(
        dir: &Path,
        cache_bytes: u64,
        wait: Duration,
    ) -> Result<SledEngine, EngineError> {
        let started = Instant::now();
        let wait = wait.max(LOCK_WAIT);
        loop {
            match Self::try_open(dir, cache_bytes) {
                Err(EngineError::Locked) if started.elapsed() < wait => {
                    // Quick retries for our own previous handle; another process's hold is
                    // usually longer, so past that the attempts space out.
                    let pause = if started.elapsed() < LOCK_WAIT {
                        10
                    } else {
                        50
                    };
                    std::thread::sleep(Duration::from_millis(pause));
                }
                other => return other,
            }
        }
    }

    /// Removes the snapshots sled started and never finished in `dir`.
    ///
    /// sled writes a snapshot to `snap.<lsn>.generating`, fsyncs it, and only then renames it to
    /// `snap.<lsn>` and removes older snapshots; the rename is the commit. A `.generating` file
    /// is therefore never the only record of anything: the previous snapshot and the log it
    /// summarises are still there, exactly as after a crash before the file was created, which
    /// sled recovers from. But sled 0.34 does not skip such a file when it picks the newest
    /// snapshot at open: an empty or partial one (a full disk while sled snapshots, which it
    /// does when it opens) makes it report damage and refuse the store for good. So the
    /// leftovers go before sled sees the directory.
    fn remove_unfinished_snapshots(dir: &Path) -> Result<(), EngineError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io("list the store's files")(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io("list the store's files"))?;
            if entry
                .file_name()
                .to_str()
                .is_some_and(is_unfinished_snapshot)
            {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io("remove an unfinished sled snapshot")(e)),
                }
            }
        }
        Ok(())
    }

    fn try_open(dir: &Path, cache_bytes: u64) -> Result<SledEngine, EngineError> {
        Self::remove_unfinished_snapshots(dir)?;
        let segment = Self::segment_size(dir);
        let config = sled::Config::new()
            .path(dir)
            // Durability is the store's to decide: nothing is synced behind its back.
            .flush_every_ms(None)
            .segment_size(segment)
            .cache_capacity(cache_bytes);
        let opened = catch_unwind(AssertUnwindSafe(|| config.open())).map_err(|payload| {
            EngineError::Panicked {
                op: "open",
                message: panic_message(&*payload),
            }
        })?;
        match opened {
            Ok(db) => Ok(SledEngine {
                db,
                path: dir.to_path_buf(),
                files: DirFiles::new(dir.join(FILES_DIR)),
                segment: segment as u64,
                broken: Mutex::new(None),
            }),
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("lock") =>
            {
                Err(EngineError::Locked)
            }
            Err(e) => Err(Self::map(dir, "open", e)),
        }
    }

    fn map(dir: &Path, op: &'static str, e: sled::Error) -> EngineError {
        match e {
            // sled clones its stored error, which keeps the kind but turns the text into the
            // `Debug` form (`Os { code: 28, kind: StorageFull, .. }`), so the kind decides.
            sled::Error::Io(source) if source.kind() == std::io::ErrorKind::StorageFull => {
                EngineError::NoSpace {
                    op,
                    detail: "the disk filled up during sled's write".into(),
                }
            }
            sled::Error::Io(source) => EngineError::Io { op, source },
            sled::Error::Corruption { at, .. } => {
                let (file, offset) = match at {
                    Some(sled::DiskPtr::Inline(offset)) => (dir.join("db"), Some(offset)),
                    Some(sled::DiskPtr::Blob(_, blob)) => {
                        (dir.join("blobs").join(blob.to_string()), None)
                    }
                    None => (dir.join("db"), None),
                };
                EngineError::Corrupt { file, offset }
            }
            other => EngineError::Other {
                op,
                detail: other.to_string(),
            },
        }
    }

    fn err(&self, op: &'static str) -> impl Fn(sled::Error) -> EngineError + '_ {
        move |e| Self::map(&self.path, op, e)
    }

    /// Like [`Self::err`] for a write or a flush: sled is not to write anything more.
    fn write_err(&self, op: &'static str) -> impl Fn(sled::Error) -> EngineError + '_ {
        move |e| {
            let e = Self::map(&self.path, op, e);
            self.set_broken(format!("{op} failed: {e}"));
            e
        }
    }

    fn set_broken(&self, reason: String) {
        if let Ok(mut broken) = self.broken.lock() {
            broken.get_or_insert(reason);
        }
    }

    fn refuse_if_broken(&self) -> Result<(), EngineError> {
        let reason = match self.broken.lock() {
            Ok(broken) => broken.clone(),
            Err(_) => Some("a panic while recording a failed write".into()),
        };
        match reason {
            Some(reason) => Err(EngineError::Failed { reason }),
            None => Ok(()),
        }
    }

    /// Refuses a write of `bytes` unless the disk has room for it twice over plus a whole
    /// segment. sled must not meet a full disk mid-write: it does not undo a half-applied
    /// batch (see `broken`), and a failed log write can leave its flush waiting forever. Twice
    /// the bytes covers the tree nodes sled rewrites around the new values; the segment covers
    /// the log segment it may have to start. The check cannot see other writers to the same
    /// disk; what slips past it is reported, and leaves the engine refusing writes.
    fn check_space(&self, op: &'static str, bytes: usize) -> Result<(), EngineError> {
        let needed = (bytes as u64)
            .saturating_mul(2)
            .saturating_add(self.segment);
        let available =
            fs2::available_space(&self.path).map_err(io("measure the disk's free space"))?;
        if available < needed {
            return Err(EngineError::NoSpace {
                op,
                detail: format!(
                    "{} free on the store's disk, a write of {} needs {} (twice its size plus a {} segment)",
                    mib(available),
                    mib(bytes as u64),
                    mib(needed),
                    mib(self.segment)
                ),
            });
        }
        Ok(())
    }

    /// Every file and directory under `dir`, directories after their contents.
    fn files(dir: &Path, out: &mut Vec<(PathBuf, bool)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                Self::files(&entry.path(), out)?;
            } else if kind.is_file() {
                out.push((entry.path(), false));
            }
        }
        out.push((dir.to_path_buf(), true));
        Ok(())
    }
}

impl Engine for SledEngine {
    fn location(&self) -> &Path {
        &self.path
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self
            .db
            .get(key)
            .map_err(self.err("get"))?
            .map(|v| v.to_vec()))
    }

    fn range<'a>(&'a self, start: &[u8], end: Option<&[u8]>) -> Entries<'a> {
        let iter = match end {
            Some(end) if end <= start => return Box::new(std::iter::empty()),
            Some(end) => self.db.range(start.to_vec()..end.to_vec()),
            None => self.db.range(start.to_vec()..),
        };
        Box::new(iter.map(move |entry| {
            entry
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(self.err("range"))
        }))
    }

    fn last_in(&self, start: &[u8], end: &[u8]) -> Result<Option<Entry>, EngineError> {
        if end <= start {
            return Ok(None);
        }
        let last = self
            .db
            .range(start.to_vec()..end.to_vec())
            .next_back()
            .transpose()
            .map_err(self.err("last_in"))?;
        Ok(last.map(|(k, v)| (k.to_vec(), v.to_vec())))
    }

    fn apply(&self, batch: WriteBatch) -> Result<(), EngineError> {
        self.refuse_if_broken()?;
        // Only deletions (orphan blocks after a failed import) are let through on a full disk:
        // they are tiny, and half of them applied changes nothing anyone reads.
        if batch.ops().iter().any(|(_, v)| v.is_some()) {
            self.check_space("apply", batch.bytes())?;
        }
        let mut b = sled::Batch::default();
        for (k, v) in batch.into_ops() {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
        }
        self.db.apply_batch(b).map_err(self.write_err("apply"))
    }

    /// sled's flush writes its buffers and waits for them with `sync_file_range`, which on Linux
    /// neither commits file metadata (a grown file's size) nor flushes the device cache; new
    /// files (a snapshot, a blob) and their directory entries are not synced at all. So after it,
    /// every file in the directory and the directory itself are fsynced.
    fn sync(&self) -> Result<(), EngineError> {
        self.refuse_if_broken()?;
        self.files.sync()?;
        self.db.flush().map_err(self.write_err("flush"))?;
        let mut files = Vec::new();
        Self::files(&self.path, &mut files).map_err(io("list the store's files"))?;
        for (path, _) in files {
            match std::fs::File::open(&path) {
                Ok(f) => f.sync_all().map_err(io("fsync a store file"))?,
                // sled removes old snapshots as it writes new ones.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("open a store file to fsync it")(e)),
            }
        }
        Ok(())
    }

    /// Atomic and durable: the bytes go to a temporary file, which is fsynced, renamed over
    /// [`ACK_FILE`], and the directory fsynced; a crash at any point leaves the old record or
    /// the new one.
    fn write_ack(&self, bytes: &[u8]) -> Result<(), EngineError> {
        use std::io::Write;
        self.refuse_if_broken()?;
        let temp = self.path.join(ACK_TEMP);
        let mut file =
            std::fs::File::create(&temp).map_err(io("create the acknowledgement record"))?;
        file.write_all(bytes)
            .map_err(io("write the acknowledgement record"))?;
        file.sync_all()
            .map_err(io("fsync the acknowledgement record"))?;
        drop(file);
        std::fs::rename(&temp, self.path.join(ACK_FILE))
            .map_err(io("rename the acknowledgement record into place"))?;
        std::fs::File::open(&self.path)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync the store directory"))
    }

    fn read_ack(&self) -> Result<Option<Vec<u8>>, EngineError> {
        match std::fs::read(self.path.join(ACK_FILE)) {
            Ok(bytes) => Ok(Some(bytes)),
            // A store made before the record existed, or never flushed since.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read the acknowledgement record")(e)),
        }
    }

    fn file_append(&self, name: &str, bytes: &[u8]) -> Result<u64, EngineError> {
        self.refuse_if_broken()?;
        // The same reserve as a batch: the file shares the disk with sled's segments.
        self.check_space("append to the log", bytes.len())?;
        self.files.append(name, bytes)
    }

    fn file_read(
        &self,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, EngineError> {
        self.files.read(name, offset, len)
    }

    fn file_list(&self) -> Result<Vec<(String, u64)>, EngineError> {
        self.files.list()
    }

    fn file_truncate(&self, name: &str, len: u64) -> Result<(), EngineError> {
        self.refuse_if_broken()?;
        self.files.truncate(name, len)
    }

    fn file_remove(&self, name: &str) -> Result<(), EngineError> {
        self.refuse_if_broken()?;
        self.files.remove(name)
    }

    fn sync_files(&self) -> Result<(), EngineError> {
        self.refuse_if_broken()?;
        self.files.sync()
    }

    /// Bytes allocated to the store's files (what `du` reports), so sparse regions and
    /// reclaimed segments do not count.
    fn disk_bytes(&self) -> Result<u64, EngineError> {
        use std::os::unix::fs::MetadataExt;
        let mut files = Vec::new();
        Self::files(&self.path, &mut files).map_err(io("list the store's files"))?;
        let mut total = 0;
        for (path, _) in files {
            match std::fs::metadata(&path) {
                Ok(m) => total += m.blocks() * 512,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("measure a store file")(e)),
            }
        }
        Ok(total)
    }
}

/// Bytes as MiB with one decimal, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

impl Drop for SledEngine {
    /// After a failed write sled is not let near the disk again: dropping the last handle would
    /// run its flush (see `broken`), so one handle is leaked instead. Its threads and file lock
    /// live until the process ends; a reopen in the same process then finds the store locked.
    fn drop(&mut self) {
        let broken = self.broken.lock().map_or(true, |b| b.is_some());
        if broken {
            std::mem::forget(self.db.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_gets_large_segments_and_an_old_one_keeps_its_own() {
        let dir = crate::store::test_support::tempdir("segments");
        assert_eq!(SledEngine::segment_size(&dir), SEGMENT_BYTES);
        drop(
            crate::store::Store::create(&dir, crate::store::test_support::config())
                .expect("create"),
        );
        assert_eq!(SledEngine::segment_size(&dir), SEGMENT_BYTES);
        // A store made with sled's default segment size (as before SEGMENT_BYTES) still opens.
        let old = crate::store::test_support::tempdir("segments-old");
        let db = sled::Config::new()
            .path(&old)
            .segment_size(512 * 1024)
            .open()
            .expect("sled");
        drop(db);
        assert_eq!(SledEngine::segment_size(&old), 512 * 1024);
        assert!(SledEngine::open(&old).expect("opens").is_some());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&old);
    }

    #[test]
    fn an_unfinished_snapshot_left_by_a_full_disk_does_not_stop_the_store_opening() {
        let dir = crate::store::test_support::tempdir("unfinished-snapshot");
        let store = crate::store::Store::create(&dir, crate::store::test_support::config())
            .expect("create");
        drop(store);
        // What sled leaves when the disk fills while it snapshots at open: an empty file whose
        // name sorts after every finished snapshot. sled alone reports it as damage.
        let leftover = dir.join("snap.FFFFFFFFFFFFFFFF.generating");
        std::fs::write(&leftover, b"").expect("plant");
        let reopened = crate::store::Store::open(&dir).expect("opens");
        assert!(!leftover.exists(), "the leftover is cleared");
        drop(reopened);
        assert!(is_unfinished_snapshot("snap.0000000000AE38DF.generating"));
        assert!(!is_unfinished_snapshot("snap.0000000000AE38DF"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
