//! `DirFiles`: the append-only files of an engine on disk, in one directory beside its data.
//!
//! Owns: the directory (made on the first append, and fsynced into its parent then), appends
//! at the end of a file, positional reads, which files were written since the last sync, so
//! that a sync fdatasyncs exactly those (and the directory, when a file was made in it), and
//! the listing of the files with their sizes, read from the directory once and then kept up to
//! date by its own appends, cuts and removals (one process holds a store at a time).
//!
//! Must not: know what the files hold or decide their names; it only refuses names that are not
//! plain (`[0-9a-z.]`, not `.` or `..`), so a name can never reach outside the directory.

use super::EngineError;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

fn io(op: &'static str) -> impl Fn(std::io::Error) -> EngineError {
    move |source| {
        if source.kind() == ErrorKind::StorageFull {
            EngineError::NoSpace {
                op,
                detail: source.to_string(),
            }
        } else {
            EngineError::Io { op, source }
        }
    }
}

/// What a sync still has to make durable.
#[derive(Default)]
struct Dirty {
    /// Files appended to since the last sync.
    files: BTreeSet<String>,
    /// A file was made in the directory (or the directory itself was made).
    dir: bool,
}

/// Append-only files in one directory.
pub struct DirFiles {
    dir: PathBuf,
    dirty: Mutex<Dirty>,
    /// The files and their sizes, once listed: every log block's append asks which file is the
    /// newest and how long it is, and reading the directory for that cost a `stat` per file
    /// per block (a year of 64 MiB files is hundreds). `None` until first listed, and again
    /// after any failed change, which leaves a file's size unknown.
    listing: Mutex<Option<BTreeMap<String, u64>>>,
}

impl DirFiles {
    /// Files in `dir`, which need not exist yet.
    pub fn new(dir: PathBuf) -> DirFiles {
        DirFiles {
            dir,
            dirty: Mutex::new(Dirty::default()),
            listing: Mutex::new(None),
        }
    }

    fn listing(&self) -> std::sync::MutexGuard<'_, Option<BTreeMap<String, u64>>> {
        // A map of names to sizes; a panic cannot leave it half-changed.
        self.listing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a file's new size in the listing, if it is held; `None` forgets the listing.
    fn note_size(&self, name: &str, size: Option<u64>) {
        let mut listing = self.listing();
        match (listing.as_mut(), size) {
            (Some(files), Some(size)) => {
                files.insert(name.to_string(), size);
            }
            _ => *listing = None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> Result<PathBuf, EngineError> {
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'.');
        if !plain {
            return Err(EngineError::Other {
                op: "name a log file",
                detail: format!("{name:?} is not a plain file name"),
            });
        }
        Ok(self.dir.join(name))
    }

    fn dirty(&self) -> std::sync::MutexGuard<'_, Dirty> {
        // Only sets of names live under the lock; a panic cannot leave them half-changed.
        self.dirty.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn append(&self, name: &str, bytes: &[u8]) -> Result<u64, EngineError> {
        let path = self.path(name)?;
        if !self.dir.exists() {
            std::fs::create_dir_all(&self.dir).map_err(io("make the log directory"))?;
            // The directory is an entry of the store directory: fsynced there now, so that a
            // sync of the directory's own entries later has something durable to hang on.
            sync_dir(self.dir.parent().unwrap_or(Path::new(".")))?;
        }
        let made = !path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open a log file"))?;
        let offset = file
            .seek(SeekFrom::End(0))
            .map_err(io("find the end of a log file"))?;
        {
            let mut dirty = self.dirty();
            dirty.files.insert(name.to_string());
            dirty.dir |= made;
        }
        if let Err(e) = file.write_all(bytes) {
            // A half-written tail would shift every later append: cut back to where it was.
            let _ = file.set_len(offset);
            self.note_size(name, None);
            return Err(io("append to a log file")(e));
        }
        self.note_size(name, Some(offset + bytes.len() as u64));
        Ok(offset)
    }

    pub fn read(
        &self,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, EngineError> {
        let path = self.path(name)?;
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open a log file")(e)),
        };
        let size = file.metadata().map_err(io("measure a log file"))?.len();
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Ok(None);
        }
        file.seek(SeekFrom::Start(offset))
            .map_err(io("seek in a log file"))?;
        let mut out = vec![0; len];
        match file.read_exact(&mut out) {
            Ok(()) => Ok(Some(out)),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(io("read a log file")(e)),
        }
    }

    /// The files and their sizes, by name.
    pub fn list(&self) -> Result<Vec<(String, u64)>, EngineError> {
        let mut listing = self.listing();
        if listing.is_none() {
            *listing = Some(self.read_listing()?.into_iter().collect());
        }
        Ok(listing
            .iter()
            .flatten()
            .map(|(name, &size)| (name.clone(), size))
            .collect())
    }

    fn read_listing(&self) -> Result<Vec<(String, u64)>, EngineError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("list the log directory")(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io("list the log directory"))?;
            let meta = entry.metadata().map_err(io("measure a log file"))?;
            if meta.is_file() {
                out.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
            }
        }
        Ok(out)
    }

    pub fn truncate(&self, name: &str, len: u64) -> Result<(), EngineError> {
        let path = self.path(name)?;
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io("open a log file to cut it"))?;
        let cut = file
            .set_len(len)
            .map_err(io("cut a log file"))
            .and_then(|()| file.sync_all().map_err(io("fsync a cut log file")));
        self.note_size(name, cut.is_ok().then_some(len));
        cut
    }

    pub fn remove(&self, name: &str) -> Result<(), EngineError> {
        let path = self.path(name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                self.note_size(name, None);
                return Err(io("remove a log file")(e));
            }
        }
        if let Some(files) = self.listing().as_mut() {
            files.remove(name);
        }
        self.dirty().files.remove(name);
        sync_dir(&self.dir)
    }

    /// fdatasyncs every file appended to since the last sync, then the directory if a file was
    /// made in it. A name stays dirty until its sync succeeds.
    pub fn sync(&self) -> Result<(), EngineError> {
        let (names, dir) = {
            let d = self.dirty();
            (d.files.iter().cloned().collect::<Vec<_>>(), d.dir)
        };
        for name in &names {
            match File::open(self.path(name)?) {
                Ok(f) => f.sync_data().map_err(io("fdatasync a log file"))?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io("open a log file to sync it")(e)),
            }
            self.dirty().files.remove(name);
        }
        if dir {
            sync_dir(&self.dir)?;
            self.dirty().dir = false;
        }
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> Result<(), EngineError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync the log directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_read_back_cut_and_remove() {
        let base = std::env::temp_dir().join(format!("sketchdb-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let files = DirFiles::new(base.join("log"));
        assert!(files.list().expect("list").is_empty(), "no directory yet");
        assert_eq!(files.append("a.log", b"hello").expect("append"), 0);
        assert_eq!(files.append("a.log", b" world").expect("append"), 5);
        assert_eq!(files.append("b.log", b"x").expect("append"), 0);
        files.sync().expect("sync");
        // The listing kept from the first (empty) one on is what the directory holds.
        let on_disk = || DirFiles::new(base.join("log")).list().expect("list");
        assert_eq!(
            files.list().expect("list"),
            [("a.log".to_string(), 11), ("b.log".to_string(), 1)]
        );
        assert_eq!(files.list().expect("list"), on_disk());
        assert_eq!(
            files.read("a.log", 6, 5).expect("read"),
            Some(b"world".to_vec())
        );
        assert_eq!(files.read("a.log", 6, 6).expect("read past the end"), None);
        assert_eq!(
            files.read("c.log", 0, 1).expect("read a missing file"),
            None
        );
        files.truncate("a.log", 5).expect("truncate");
        assert_eq!(
            files.read("a.log", 0, 5).expect("read"),
            Some(b"hello".to_vec())
        );
        assert_eq!(files.append("a.log", b"!").expect("append"), 5);
        files.remove("b.log").expect("remove");
        files.remove("b.log").expect("removing twice is nothing");
        assert_eq!(files.list().expect("list"), [("a.log".to_string(), 6)]);
        assert_eq!(files.list().expect("list"), on_disk());
        for bad in ["", "..", "../x", "a/b", "A.log"] {
            assert!(files.append(bad, b"x").is_err(), "{bad:?} accepted");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
