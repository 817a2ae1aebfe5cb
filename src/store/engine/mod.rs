//! The storage seam: the few operations the store needs from a key-value engine.
//!
//! Owns: [`Engine`] (ordered keys, atomic batches, an explicit sync, and a few append-only
//! files beside the keys), [`WriteBatch`] (which refuses any value over [`VALUE_MAX`]) and
//! [`EngineError`]. The store calls an engine only through `store::seam`, which catches the
//! engine's panics and splits larger values into chunks.
//!
//! Must not: know keys, kinds or what the values mean, or the store's errors.
//!
//! Two engines implement the trait: [`sled::SledEngine`], the one on disk (the only file that
//! names sled), and [`mem::MemEngine`], an in-memory engine with a durable and a volatile view
//! that tests crash, fail and panic at chosen calls.

pub mod files;
pub mod mem;
pub mod sled;

use std::path::{Path, PathBuf};

/// The largest value the store writes (16 KiB); `store::seam` stores larger ones as chunks of
/// this size and [`WriteBatch::put`] refuses anything over it. Why 16 KiB: sled 0.34 moves any
/// log message over `segment_size / 4` into a blob file that it never fsyncs and never
/// reclaims; a leaf node holds at most 16 entries before it splits, plus up to 10 deltas before
/// it is consolidated, so a consolidated node stays under about 27 × (value + key) ≈ 450 KiB,
/// below the 1 MiB threshold of the 4 MiB segments new stores use (and far below the 4 MiB of
/// the 16 MiB segments older stores have).
pub const VALUE_MAX: usize = 16 << 10;

/// What an engine call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Damage inside the engine's own files, where the engine says where.
    #[error("damaged storage-engine data in {file} at byte {offset}; the store cannot read it as it is: copy the directory aside, then run `sketchdb check`", offset = offset.map_or("(unknown)".to_string(), |o| o.to_string()), file = file.display())]
    Corrupt { file: PathBuf, offset: Option<u64> },
    #[error("a value of {len} bytes under key {key:02x?}: over the {max}-byte limit of one stored value (a bug: large values are split into chunks)")]
    ValueTooLarge {
        key: Vec<u8>,
        len: usize,
        max: usize,
    },
    #[error("the storage engine panicked during {op}: {message}")]
    Panicked { op: &'static str, message: String },
    #[error(
        "the storage engine failed earlier ({reason}) and refuses further work: reopen the store"
    )]
    Failed { reason: String },
    #[error("held by another process")]
    Locked,
    /// The disk holding the store is full, or too full for the write to be safe (see
    /// `SledEngine`'s free-space check): users must learn that it is the disk, not the store,
    /// and that freeing space is the remedy.
    #[error("no space left on device ({op}: {detail}); free space on the disk holding the store, then retry: what was acknowledged before is kept")]
    NoSpace { op: &'static str, detail: String },
    #[error("{op}: {detail}")]
    Other { op: &'static str, detail: String },
    /// A failure injected by [`mem::MemEngine`] for tests.
    #[error("{op}: injected failure (call {call})")]
    Injected { op: &'static str, call: u64 },
}

/// Writes applied together: after any crash all of them are there or none is.
#[derive(Debug, Default)]
pub struct WriteBatch {
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    bytes: usize,
}

impl WriteBatch {
    /// Sets `key` to `value`, refusing a value over [`VALUE_MAX`] (an error, not an assert: a
    /// bug must not write a value the engine would put in a file it never syncs).
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: Vec<u8>) -> Result<(), EngineError> {
        let key = key.into();
        if value.len() > VALUE_MAX {
            return Err(EngineError::ValueTooLarge {
                len: value.len(),
                max: VALUE_MAX,
                key,
            });
        }
        self.bytes += key.len() + value.len();
        self.ops.push((key, Some(value)));
        Ok(())
    }

    /// Removes `key` (nothing if absent).
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        let key = key.into();
        self.bytes += key.len();
        self.ops.push((key, None));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Bytes of keys and values in the batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The writes in the order they were added (a later write to a key wins).
    pub fn ops(&self) -> &[(Vec<u8>, Option<Vec<u8>>)] {
        &self.ops
    }

    pub fn into_ops(self) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        self.ops
    }
}

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);
/// Entries in key order.
pub type Entries<'a> = Box<dyn Iterator<Item = Result<Entry, EngineError>> + 'a>;

/// An ordered key-value engine with atomic batches and an explicit sync.
pub trait Engine: Send + Sync {
    /// Where the engine keeps its data, for messages.
    fn location(&self) -> &Path;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;
    /// Entries with `start <= key < end` (`end` `None`: to the last key), ascending.
    fn range<'a>(&'a self, start: &[u8], end: Option<&[u8]>) -> Entries<'a>;
    /// The last entry with `start <= key < end`.
    fn last_in(&self, start: &[u8], end: &[u8]) -> Result<Option<Entry>, EngineError>;
    /// Atomic: after any crash all of the batch survives or none of it. Not durable until
    /// [`Engine::sync`].
    fn apply(&self, batch: WriteBatch) -> Result<(), EngineError>;
    /// Everything applied before the call is durable when it returns `Ok`.
    fn sync(&self) -> Result<(), EngineError>;
    /// Bytes the engine occupies on disk.
    fn disk_bytes(&self) -> Result<u64, EngineError>;
    /// Replaces the acknowledgement record, a few bytes kept outside the engine's log (so
    /// that whatever the log loses, the record still says how far it was acknowledged):
    /// durable when it returns `Ok`, and after any crash either the old record or the new one,
    /// whole.
    fn write_ack(&self, bytes: &[u8]) -> Result<(), EngineError>;
    /// The acknowledgement record last written, `None` if none ever was.
    fn read_ack(&self) -> Result<Option<Vec<u8>>, EngineError>;

    // Append-only files beside the keys, for data written once and read by position (the raw
    // event log): a log-structured tree holds such data at two to three times its size, a file
    // at its size. Names are short and plain (`[0-9a-z.]`, no path). Like `apply`, nothing
    // written is durable until [`Engine::sync_files`] or [`Engine::sync`]; a crash may keep any
    // prefix of what was appended since.

    /// Appends `bytes` to file `name` (created if missing) and returns the offset they start
    /// at. A failed append leaves the file as it was.
    fn file_append(&self, name: &str, bytes: &[u8]) -> Result<u64, EngineError>;
    /// `len` bytes of file `name` from `offset`; `None` if the file is missing or shorter.
    fn file_read(
        &self,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, EngineError>;
    /// Every file with its length, by name.
    fn file_list(&self) -> Result<Vec<(String, u64)>, EngineError>;
    /// Cuts file `name` to `len` bytes; durable when it returns.
    fn file_truncate(&self, name: &str, len: u64) -> Result<(), EngineError>;
    /// Removes file `name` (nothing if missing); durable when it returns.
    fn file_remove(&self, name: &str) -> Result<(), EngineError>;
    /// Everything appended to files before the call is durable when it returns `Ok`: called
    /// before a batch that points into the files is applied, so no durable key ever points
    /// at bytes a crash can take away.
    fn sync_files(&self) -> Result<(), EngineError>;
}

/// The text of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
