//! `SledEngine`: the store on disk, in sled 0.34. The only file that names sled.
//!
//! Owns: opening sled the way the store needs it (no background flushes, 16 MiB segments for
//! new stores, a bounded page cache), the lock wait, mapping sled's errors (a lock held, damage
//! with its file and offset), a sync that makes applied writes survive a power cut, and the
//! store directory's size on disk.
//!
//! Must not: know keys, kinds or values. Panics inside sled are caught one level up, by the
//! seam's guard around every call ([`super::Seam`]), and while opening, here.

use super::{panic_message, Engine, EngineError, Entries, Entry, WriteBatch};
use crate::store::model::DEFAULT_ENGINE_CACHE_BYTES;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// sled segment size for new stores (sled's default is 512 KiB). sled 0.34 writes any log
/// message (a value, or a consolidated tree node) larger than a quarter segment to a file of its
/// own in `blobs/`, which it never fsyncs (spacejam/sled#1077) and never reclaims. 16 MiB (sled's
/// maximum) puts that limit at 4 MiB, above the largest node values of at most
/// [`super::VALUE_MAX`] can make.
pub const SEGMENT_BYTES: usize = 16 << 20;

/// How long opening waits for a store's lock before reporting it held.
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// The file beside sled's own that records the page-cache bound, which sled must be given
/// before the store's configuration (inside sled) can be read.
const CACHE_FILE: &str = "sketchdb-engine";

/// An open sled database.
pub struct SledEngine {
    db: sled::Db,
    path: PathBuf,
}

fn io(op: &'static str) -> impl Fn(std::io::Error) -> EngineError {
    move |source| EngineError::Io { op, source }
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
        let engine = Self::open_with_cache(dir, cache_bytes)?;
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
        Self::open_with_cache(dir, cache).map(Some)
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
    /// process) is [`EngineError::Locked`].
    fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<SledEngine, EngineError> {
        let started = Instant::now();
        loop {
            match Self::try_open(dir, cache_bytes) {
                Err(EngineError::Locked) if started.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    fn try_open(dir: &Path, cache_bytes: u64) -> Result<SledEngine, EngineError> {
        let config = sled::Config::new()
            .path(dir)
            // Durability is the store's to decide: nothing is synced behind its back.
            .flush_every_ms(None)
            .segment_size(Self::segment_size(dir))
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
        let mut b = sled::Batch::default();
        for (k, v) in batch.into_ops() {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
        }
        self.db.apply_batch(b).map_err(self.err("apply"))
    }

    /// sled's flush writes its buffers and waits for them with `sync_file_range`, which on Linux
    /// neither commits file metadata (a grown file's size) nor flushes the device cache; new
    /// files (a snapshot, a blob) and their directory entries are not synced at all. So after it,
    /// every file in the directory and the directory itself are fsynced.
    fn sync(&self) -> Result<(), EngineError> {
        self.db.flush().map_err(self.err("flush"))?;
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
}
