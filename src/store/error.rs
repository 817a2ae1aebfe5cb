//! Errors of the storage layer, each carrying what a user needs to act: the path, the damaged
//! blob's name (bucket, tag, kind), or the offending event.

use crate::sketch::SketchError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: not a sketchdb store (no store metadata found)")]
    NotAStore { path: PathBuf },
    #[error("{path}: a store already exists here")]
    AlreadyExists { path: PathBuf },
    #[error("{path}: store format version {found} is not supported (this build reads versions {oldest} to {supported})")]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        /// The oldest format this build reads.
        oldest: u32,
        /// The format this build writes.
        supported: u32,
    },
    /// Another process holds the store (sled's lock); `held_by` names it from the holder
    /// record it wrote (see [`super::holder`]). [`Store::open_with_wait`](super::Store::open_with_wait)
    /// waits for it.
    #[error("{path}: the store is {held_by}")]
    Locked {
        path: PathBuf,
        held_by: super::holder::HeldBy,
    },
    #[error("{path}: storage engine error: {source}")]
    Engine {
        path: PathBuf,
        #[source]
        source: super::engine::EngineError,
    },
    #[error("damaged {name}: {source}")]
    Damaged {
        name: String,
        #[source]
        source: SketchError,
    },
    #[error("damaged {name}: {detail}")]
    DamagedLog { name: String, detail: String },
    #[error("invalid configuration: {0}")]
    Config(#[source] SketchError),
    #[error("invalid configuration: {0}")]
    ConfigValue(String),
    #[error("event {index} of the batch: {reason}")]
    BadEvent { index: usize, reason: String },
    /// An argument of a library call outside what the store supports (a time range's end, a
    /// bucket time, a sample size): nothing was read or changed.
    #[error("invalid {what} {value}: {reason}")]
    InvalidArgument {
        what: &'static str,
        value: String,
        reason: String,
    },
    /// The in-memory state can no longer be trusted (a rollback failed, or a panic interrupted a
    /// change to it). Every call fails until the store is reopened, which rebuilds the state from
    /// what is durable; nothing unconfirmed is written meanwhile.
    #[error("{path}: the store must be reopened: {reason}")]
    MustReopen { path: PathBuf, reason: String },
    /// A `Store` method called from inside [`Store::import`](super::Store::import) on the same
    /// thread, which holds the store until the import ends (waiting would never end).
    #[error("{path}: called from inside an import on this store; feed the import through the `Import` it was given, or finish it first")]
    InsideImport { path: PathBuf },
    /// The storage engine opened an earlier state than the one acknowledged: its log ends
    /// before the position the acknowledgement record says a flush or commit made durable.
    /// sled recovers the longest undamaged prefix of its log, so a damaged or truncated file
    /// looks like this; opening would silently drop acknowledged events, so it is refused.
    #[error("{path}: the storage engine lost acknowledged events: they were acknowledged up to event {acknowledged}, but the log ends at event {log_end} ({lost} lost); likely a damaged or truncated file in the store directory (sled recovered an earlier state). The store wrote nothing (sled's own recovery may have rewritten its files): restore the store from a backup, or copy the directory aside and run `sketchdb check` on the copy to see what is left", lost = acknowledged - log_end, path = path.display())]
    AcknowledgedLost {
        path: PathBuf,
        acknowledged: u64,
        log_end: u64,
    },
    /// An import whose batch failed after part of it was applied (an import applies a batch in
    /// pieces to stay within the memory budget): it cannot commit, and is rolled back.
    #[error("{path}: the import failed part way and was rolled back: {reason}")]
    ImportFailed { path: PathBuf, reason: String },
    /// An Apache DataSketches image that cannot be imported (malformed, another seed, a
    /// precision below the store's): nothing was changed.
    #[error("cannot import the DataSketches image: {0}")]
    Image(#[from] crate::sketch::datasketches::ImageError),
    /// [`Store::merge_from`](super::Store::merge_from) was given stores that hold different
    /// things: `setting` differs. Nothing was read or written.
    #[error("cannot merge {input} into {output}: their {setting} differs ({input_value} in {input}, {output_value} in {output}); only stores of the same configuration merge")]
    MergeMismatch {
        output: String,
        input: String,
        setting: &'static str,
        output_value: String,
        input_value: String,
    },
    /// An input of [`Store::merge_from`](super::Store::merge_from) could not be merged (damaged,
    /// the output itself, given twice, ...); the output was left as it was.
    #[error("merge input {input}: {source}; nothing was merged (the output is unchanged)", input = input.display())]
    MergeInput {
        input: PathBuf,
        #[source]
        source: Box<StoreError>,
    },
    #[error("{0}")]
    Query(String),
    /// A read found a set rewritten after the snapshot it read from was published (see
    /// [`Store::read`](super::Store::read), which runs the read again on a fresh snapshot).
    #[error("the store changed under this read (a checkpoint rewrote what it read); ask again")]
    Stale,
}

impl StoreError {
    /// What a read gets when every retry found a set rewritten after its snapshot (see
    /// `Store::read`): the statement itself is fine, so the user is told to ask again.
    pub(crate) fn stale_too_often() -> StoreError {
        StoreError::Query(format!(
            "{} checkpoints in a row rewrote what this query read; ask again",
            super::STALE_RETRIES + 1
        ))
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
