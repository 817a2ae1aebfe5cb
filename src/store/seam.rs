//! The store's one handle on its engine, and the guard every engine call passes through.
//!
//! Owns: [`Seam`], which runs every engine call inside `catch_unwind`: a panic in the engine
//! (sled has panicked on a missing blob file) becomes [`EngineError::Panicked`] and leaves the
//! seam failed, so every later call is an error ("reopen the store") instead of a second panic
//! or a read of half-updated engine state; and the translation of [`EngineError`] into
//! [`StoreError::Engine`] with the engine's location; and the splitting of values over
//! [`VALUE_MAX`] into chunks, so that no value the engine stores is large enough for sled to put
//! it in a blob file (which it never fsyncs and never reclaims).
//!
//! A large value is stored as chunks of at most [`VALUE_MAX`] bytes under `keys::chunk(key, i)`
//! and a 16-byte manifest under `key` (a magic that no codec frame or UTF-8 text starts with,
//! the chunk count and the total length). [`Seam::get`] and [`Seam::range`] put it back
//! together; [`Seam::put`] and [`Seam::delete`] remove the chunks a shorter or deleted value no
//! longer uses, in the same batch. A missing or damaged chunk is not an error here: the
//! reassembled bytes are short or wrong, and the caller's decode, which knows what the value
//! is, reports it by name (every value the store writes is a checksummed codec frame).
//!
//! Must not: know what the values mean or the kinds' layout beyond the chunk keys, or hold any
//! state but "failed, and why".

use super::engine::{panic_message, Engine, EngineError, Entry, WriteBatch, VALUE_MAX};
use super::error::StoreError;
use super::keys;
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

    /// Adds `key` = `value` to `batch`: inline up to [`VALUE_MAX`], as chunks and a manifest
    /// above it, removing chunks of the value it replaces that it does not overwrite.
    pub(crate) fn put(
        &self,
        batch: &mut WriteBatch,
        key: impl Into<Vec<u8>>,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        let key = key.into();
        let old_chunks = self.stored_chunks(&key)?;
        let new_chunks = if value.len() <= VALUE_MAX {
            batch.put(key.clone(), value).map_err(|e| self.err(e))?;
            0
        } else {
            let mut count = 0u32;
            for (i, chunk) in value.chunks(VALUE_MAX).enumerate() {
                let i = u32::try_from(i).map_err(|_| {
                    self.err(EngineError::ValueTooLarge {
                        key: key.clone(),
                        len: value.len(),
                        max: VALUE_MAX * u32::MAX as usize,
                    })
                })?;
                batch
                    .put(keys::chunk(&key, i), chunk.to_vec())
                    .map_err(|e| self.err(e))?;
                count = i + 1;
            }
            let manifest = Manifest {
                count,
                len: value.len() as u64,
            };
            batch
                .put(key.clone(), manifest.encode().to_vec())
                .map_err(|e| self.err(e))?;
            count
        };
        for i in new_chunks..old_chunks {
            batch.delete(keys::chunk(&key, i));
        }
        Ok(())
    }

    /// Adds the removal of `key`, and of its chunks if it has any, to `batch`.
    pub(crate) fn delete(
        &self,
        batch: &mut WriteBatch,
        key: impl Into<Vec<u8>>,
    ) -> Result<(), StoreError> {
        let key = key.into();
        for i in 0..self.stored_chunks(&key)? {
            batch.delete(keys::chunk(&key, i));
        }
        batch.delete(key);
        Ok(())
    }

    /// How many chunks the value stored under `key` has (0: inline or absent).
    fn stored_chunks(&self, key: &[u8]) -> Result<u32, StoreError> {
        let raw = self.guard("get", |e| e.get(key))?;
        Ok(raw
            .as_deref()
            .and_then(Manifest::decode)
            .map_or(0, |m| m.count))
    }

    /// The value under `key`, put back together if it was stored in chunks.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.guard("get", |e| e.get(key))? {
            Some(raw) => self.whole(key, raw).map(Some),
            None => Ok(None),
        }
    }

    /// `raw`, the stored value of `key`, or the value its manifest describes.
    fn whole(&self, key: &[u8], raw: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        let Some(manifest) = Manifest::decode(&raw) else {
            return Ok(raw);
        };
        // Bounded by what the manifest claims, but never trusting it for more than the chunks
        // that are there: a damaged count cannot make this allocate past the stored bytes.
        let mut value = Vec::with_capacity(manifest.len.min(VALUE_MAX as u64 * 64) as usize);
        for i in 0..manifest.count {
            if let Some(chunk) = self.guard("get", |e| e.get(&keys::chunk(key, i)))? {
                value.extend_from_slice(&chunk);
            }
        }
        Ok(value)
    }

    /// The value stored under `key` as the engine holds it: a manifest, not the value, for one
    /// stored in chunks. For `check`, which must see the chunks to say which one is missing.
    pub(crate) fn get_raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.guard("get", |e| e.get(key))
    }

    /// `raw`, the stored value of `key`, put together as [`Seam::get`] would, and how it was
    /// held: `None` if inline; else the chunk count its manifest claims, the indices of the
    /// chunks that are not there, and whether the chunks there add up to the length it claims.
    /// For `check`, which names the missing chunk instead of only a failed checksum.
    pub(crate) fn assemble_checked(
        &self,
        key: &[u8],
        raw: Vec<u8>,
    ) -> Result<(Vec<u8>, Option<ChunkHealth>), StoreError> {
        let Some(manifest) = Manifest::decode(&raw) else {
            return Ok((raw, None));
        };
        let mut value = Vec::with_capacity(manifest.len.min(VALUE_MAX as u64 * 64) as usize);
        let mut missing = Vec::new();
        for i in 0..manifest.count {
            match self.guard("get", |e| e.get(&keys::chunk(key, i)))? {
                Some(chunk) => value.extend_from_slice(&chunk),
                None => missing.push(i),
            }
        }
        let length_ok = value.len() as u64 == manifest.len;
        Ok((
            value,
            Some(ChunkHealth {
                count: manifest.count,
                missing,
                length_ok,
            }),
        ))
    }

    /// How many chunks the manifest `raw` names (0 if `raw` is not a manifest).
    pub(crate) fn manifest_count(raw: &[u8]) -> u32 {
        Manifest::decode(raw).map_or(0, |m| m.count)
    }

    /// Entries with `start <= key < end` as the engine holds them, chunked values as their
    /// manifests: a walk over every key that holds at most one chunk in memory at a time.
    pub(crate) fn raw_range<'a>(
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

    /// [`Seam::raw_range`] over the keys starting with `prefix`.
    pub(crate) fn raw_prefix<'a>(
        &'a self,
        prefix: &[u8],
    ) -> impl Iterator<Item = Result<Entry, StoreError>> + 'a {
        let end = prefix_end(prefix);
        self.raw_range(prefix, end.as_deref())
    }

    /// Entries with `start <= key < end`, each step guarded, chunked values put back together;
    /// an error ends the iteration.
    pub(crate) fn range<'a>(
        &'a self,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<Entry, StoreError>> + 'a {
        let mut failed = false;
        self.raw_range(start, end).map_while(move |entry| {
            if failed {
                return None;
            }
            let entry = entry.and_then(|(key, raw)| self.whole(&key, raw).map(|v| (key, v)));
            failed = entry.is_err();
            Some(entry)
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

    pub(crate) fn write_ack(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.guard("write_ack", |e| e.write_ack(bytes))
    }

    pub(crate) fn read_ack(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.guard("read_ack", |e| e.read_ack())
    }

    pub(crate) fn file_append(&self, name: &str, bytes: &[u8]) -> Result<u64, StoreError> {
        self.guard("file_append", |e| e.file_append(name, bytes))
    }

    pub(crate) fn file_read(
        &self,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.guard("file_read", |e| e.file_read(name, offset, len))
    }

    pub(crate) fn file_list(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.guard("file_list", |e| e.file_list())
    }

    pub(crate) fn file_truncate(&self, name: &str, len: u64) -> Result<(), StoreError> {
        self.guard("file_truncate", |e| e.file_truncate(name, len))
    }

    pub(crate) fn file_remove(&self, name: &str) -> Result<(), StoreError> {
        self.guard("file_remove", |e| e.file_remove(name))
    }

    pub(crate) fn sync_files(&self) -> Result<(), StoreError> {
        self.guard("sync_files", |e| e.sync_files())
    }
}

/// What [`Seam::chunk_health`] found for a value stored in chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkHealth {
    pub(crate) count: u32,
    pub(crate) missing: Vec<u32>,
    pub(crate) length_ok: bool,
}

/// What the key of a value stored in chunks holds instead of the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Manifest {
    count: u32,
    len: u64,
}

impl Manifest {
    /// Not UTF-8 (0xff) and not a codec frame's "SKDB", so no inline value is read as one.
    const MAGIC: [u8; 4] = [0xff, b'S', b'K', b'C'];
    const LEN: usize = 16;

    fn encode(self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(&Self::MAGIC);
        out[4..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    fn decode(raw: &[u8]) -> Option<Manifest> {
        if raw.len() != Self::LEN || raw[..4] != Self::MAGIC {
            return None;
        }
        Some(Manifest {
            count: u32::from_le_bytes(raw[4..8].try_into().ok()?),
            len: u64::from_le_bytes(raw[8..].try_into().ok()?),
        })
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

    /// A value of `len` bytes that differs at every position mod 251, so a chunk in the wrong
    /// place or a lost one shows.
    fn big(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    fn keys_with(mem: &MemEngine, prefix: u8) -> Vec<Vec<u8>> {
        mem.range(&[prefix], Some(&[prefix + 1]))
            .map(|e| e.expect("scan").0)
            .collect()
    }

    fn write(seam: &Seam, key: &[u8], value: Option<Vec<u8>>) {
        let mut batch = WriteBatch::default();
        match value {
            Some(v) => seam.put(&mut batch, key.to_vec(), v).expect("put"),
            None => seam.delete(&mut batch, key.to_vec()).expect("delete"),
        }
        for (_, v) in batch.ops() {
            assert!(v.as_ref().map_or(0, Vec::len) <= VALUE_MAX);
        }
        seam.apply(batch).expect("apply");
    }

    #[test]
    fn a_value_over_the_limit_is_stored_in_chunks_and_read_back_whole() {
        let (mem, seam) = seam_with(b"k");
        // 3 full chunks and a partial one; and one exactly at the limit, which stays inline.
        let value = big(3 * VALUE_MAX + 17);
        write(&seam, b"Sbig", Some(value.clone()));
        write(&seam, b"Sedge", Some(big(VALUE_MAX)));
        assert_eq!(seam.get(b"Sbig").expect("get"), Some(value.clone()));
        assert_eq!(keys_with(&mem, keys::CHUNK).len(), 4);
        assert_eq!(
            mem.get(b"Sbig").expect("raw").map(|v| v.len()),
            Some(Manifest::LEN)
        );
        assert_eq!(mem.get(b"Sedge").expect("raw"), Some(big(VALUE_MAX)));
        let scanned: Vec<_> = seam.prefix(b"S").collect::<Result<_, _>>().expect("scan");
        assert_eq!(
            scanned,
            vec![
                (b"Sbig".to_vec(), value),
                (b"Sedge".to_vec(), big(VALUE_MAX))
            ]
        );
    }

    #[test]
    fn a_shorter_value_and_a_delete_leave_no_chunk_behind() {
        let (mem, seam) = seam_with(b"k");
        write(&seam, b"Sa", Some(big(5 * VALUE_MAX)));
        write(&seam, b"Sab", Some(big(2 * VALUE_MAX + 1)));
        assert_eq!(keys_with(&mem, keys::CHUNK).len(), 8);
        write(&seam, b"Sa", Some(big(VALUE_MAX + 1)));
        assert_eq!(seam.get(b"Sa").expect("get"), Some(big(VALUE_MAX + 1)));
        assert_eq!(keys_with(&mem, keys::CHUNK).len(), 2 + 3);
        write(&seam, b"Sa", Some(b"small".to_vec()));
        assert_eq!(keys_with(&mem, keys::CHUNK).len(), 3, "only Sab's");
        write(&seam, b"Sab", None);
        assert!(keys_with(&mem, keys::CHUNK).is_empty());
        assert_eq!(seam.get(b"Sab").expect("get"), None);
        // The neighbour whose key extends this one's was never touched.
        assert_eq!(seam.get(b"Sa").expect("get"), Some(b"small".to_vec()));
    }

    #[test]
    fn a_lost_chunk_reads_back_short_for_the_callers_checksum_to_catch() {
        let (mem, seam) = seam_with(b"k");
        let value = big(3 * VALUE_MAX);
        write(&seam, b"Sv", Some(value.clone()));
        let mut batch = WriteBatch::default();
        batch.delete(keys::chunk(b"Sv", 1));
        mem.apply(batch).expect("apply");
        let read = seam.get(b"Sv").expect("get").expect("present");
        assert_eq!(read.len(), 2 * VALUE_MAX);
        assert_ne!(read, value);
    }

    #[test]
    fn the_batch_refuses_a_value_over_the_limit() {
        let mut batch = WriteBatch::default();
        batch
            .put(b"k".to_vec(), big(VALUE_MAX))
            .expect("at the limit");
        let err = batch
            .put(b"k".to_vec(), big(VALUE_MAX + 1))
            .expect_err("over it");
        assert!(matches!(err, EngineError::ValueTooLarge { len, .. } if len == VALUE_MAX + 1));
    }

    #[test]
    fn prefix_ends_after_every_key_with_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
