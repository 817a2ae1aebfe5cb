//! The store's one handle on its engine, and the guard every engine call passes through.
//!
//! Owns: [`Seam`], which runs every engine call inside `catch_unwind`: a panic in the engine
//! (sled has panicked on a missing blob file) becomes [`EngineError::Panicked`] and leaves the
//! seam failed, so every later call is an error ("reopen the store") instead of a second panic
//! or a read of half-updated engine state; and the translation of [`EngineError`] into
//! [`StoreError::Engine`] with the engine's location.
//!
//! Must not: know keys or kinds (it passes bytes), or hold any state but "failed, and why".

use super::engine::{panic_message, Engine, EngineError, Entry, WriteBatch};
use super::error::StoreError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The store's handle on its engine: every call is made inside `catch_unwind`, and after a
/// panic every call fails, naming the first failure. Errors come out as
/// [`StoreError::Engine`] with the engine's location.
pub(crate) struct Seam {
    inner: Box<dyn Engine>,
    path: PathBuf,
    failed: Mutex<Option<String>>,
}

impl Seam {
    pub(crate) fn new(inner: Box<dyn Engine>) -> Seam {
        let path = inner.location().to_path_buf();
        Seam {
            inner,
            path,
            failed: Mutex::new(None),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: EngineError) -> StoreError {
        StoreError::Engine {
            path: self.path.clone(),
            source,
        }
    }

    /// Runs `call` unless the engine failed before; a panic fails the engine for good.
    fn guard<'a, T>(
        &'a self,
        op: &'static str,
        call: impl FnOnce(&'a dyn Engine) -> Result<T, EngineError>,
    ) -> Result<T, StoreError> {
        if let Some(reason) = self.failed_reason() {
            return Err(self.err(EngineError::Failed { reason }));
        }
        match catch_unwind(AssertUnwindSafe(|| call(&*self.inner))) {
            Ok(result) => result.map_err(|e| self.err(e)),
            Err(payload) => {
                let message = panic_message(&*payload);
                self.fail(format!("a panic during {op}: {message}"));
                Err(self.err(EngineError::Panicked { op, message }))
            }
        }
    }

    fn failed_reason(&self) -> Option<String> {
        match self.failed.lock() {
            Ok(f) => f.clone(),
            Err(_) => Some("a panic while recording an engine failure".into()),
        }
    }

    /// Marks the engine unusable: every later call fails with `reason`.
    pub(crate) fn fail(&self, reason: String) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert(reason);
        }
    }

    /// [`WriteBatch::put`] with the error as the store reports it.
    pub(crate) fn put(
        &self,
        batch: &mut WriteBatch,
        key: impl Into<Vec<u8>>,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        batch.put(key, value).map_err(|e| self.err(e))
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.guard("get", |e| e.get(key))
    }

    /// Entries with `start <= key < end`, each step guarded; an error ends the iteration.
    pub(crate) fn range<'a>(
        &'a self,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<Entry, StoreError>> + 'a {
        let (mut it, mut error) = match self.guard("range", |e| Ok(e.range(start, end))) {
            Ok(it) => (Some(it), None),
            Err(e) => (None, Some(e)),
        };
        std::iter::from_fn(move || {
            if let Some(e) = error.take() {
                return Some(Err(e));
            }
            let current = it.as_mut()?;
            match self.guard("range", |_| current.next().transpose()) {
                Ok(Some(entry)) => Some(Ok(entry)),
                Ok(None) => {
                    it = None;
                    None
                }
                Err(e) => {
                    it = None;
                    Some(Err(e))
                }
            }
        })
    }

    /// Entries whose key starts with `prefix`.
    pub(crate) fn prefix<'a>(
        &'a self,
        prefix: &[u8],
    ) -> impl Iterator<Item = Result<Entry, StoreError>> + 'a {
        let end = prefix_end(prefix);
        self.range(prefix, end.as_deref())
    }

    pub(crate) fn last_in(&self, start: &[u8], end: &[u8]) -> Result<Option<Entry>, StoreError> {
        self.guard("last_in", |e| e.last_in(start, end))
    }

    pub(crate) fn apply(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.guard("apply", |e| e.apply(batch))
    }

    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        self.guard("sync", |e| e.sync())
    }

    pub(crate) fn disk_bytes(&self) -> Result<u64, StoreError> {
        self.guard("disk_bytes", |e| e.disk_bytes())
    }
}

/// The first key after every key starting with `prefix` (`None`: no such key, all bytes 0xff).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::engine::mem::MemEngine;

    fn seam_with(key: &[u8]) -> (MemEngine, Seam) {
        let mem = MemEngine::new();
        let seam = Seam::new(Box::new(mem.clone()));
        let mut batch = WriteBatch::default();
        seam.put(&mut batch, key.to_vec(), b"v".to_vec())
            .expect("put");
        seam.apply(batch).expect("apply");
        (mem, seam)
    }

    #[test]
    fn an_engine_panic_is_an_error_and_the_seam_refuses_from_then_on() {
        let (mem, seam) = seam_with(b"k");
        mem.panic_on_nth(1);
        let err = seam.get(b"k").expect_err("the panic is an error");
        assert!(
            matches!(
                &err,
                StoreError::Engine {
                    source: EngineError::Panicked { op: "get", .. },
                    ..
                }
            ),
            "{err}"
        );
        // The engine answers again, but what it holds can no longer be trusted: refused.
        assert_eq!(mem.get(b"k").expect("engine"), Some(b"v".to_vec()));
        for later in [
            seam.get(b"k").map(drop),
            seam.sync(),
            seam.prefix(b"k").next().expect("an item").map(drop),
        ] {
            let e = later.expect_err("refused");
            assert!(
                matches!(
                    &e,
                    StoreError::Engine {
                        source: EngineError::Failed { .. },
                        ..
                    }
                ) && e.to_string().contains("reopen"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_panic_starting_a_scan_ends_the_scan_with_the_error() {
        let (mem, seam) = seam_with(b"k");
        mem.panic_on_nth(1);
        let items: Vec<_> = seam.prefix(b"k").collect();
        assert_eq!(items.len(), 1, "one error, then the end");
        assert!(matches!(
            &items[0],
            Err(StoreError::Engine {
                source: EngineError::Panicked { op: "range", .. },
                ..
            })
        ));
    }

    #[test]
    fn prefix_ends_after_every_key_with_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
