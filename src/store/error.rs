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
    #[error("{path}: store format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{path}: the store is already open for writing by another process")]
    Locked { path: PathBuf },
    #[error("{path}: storage engine error: {source}")]
    Engine {
        path: PathBuf,
        #[source]
        source: sled::Error,
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
    #[error("{0}")]
    Query(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
