//! `MemEngine`: an engine in memory for tests, with what a real disk does to unsynced writes.
//!
//! Owns two views of the data: the *durable* one (what survives a crash) and the *volatile*
//! one (what reads see: durable plus every batch applied since the last sync, in order).
//! [`MemEngine::crash`] keeps the durable view plus a prefix of the unsynced batches, as sled
//! recovers a prefix of its log, and fails the crashed handle for good, as a dead process writes
//! nothing more. Append-only files have the same two views: a crash keeps each file as it was
//! last synced plus a torn half of what was appended since (a power cut keeps any prefix of
//! unsynced appends, and half a block is the worst of them for a reader). [`MemEngine::lose_durable`] drops synced batches too, as sled does when the
//! tail of its log is damaged; the acknowledgement record ([`Engine::write_ack`]) survives both. [`MemEngine::fail_nth_write`], [`MemEngine::fail_nth_sync`] and
//! [`MemEngine::panic_on_nth`] inject failures at a chosen call.
//!
//! Must not: be used by production code paths (it is public, and hidden from the docs, only so
//! that integration tests can drive a store on it).

use super::{Engine, EngineError, Entries, Entry, WriteBatch};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Files = BTreeMap<String, Vec<u8>>;

#[derive(Default)]
struct Inner {
    durable: Map,
    volatile: Map,
    /// Batches applied since the last sync, oldest first.
    unsynced: Vec<WriteBatch>,
    /// Bumped by every crash; a handle of an older generation refuses every call.
    generation: u64,
    calls: u64,
    writes: u64,
    syncs: u64,
    fail_write: Option<u64>,
    fail_sync: Option<u64>,
    panic_at: Option<u64>,
    /// The acknowledgement record: durable once written (it lives outside the log).
    ack: Option<Vec<u8>>,
    /// Every synced batch, oldest first, for [`MemEngine::lose_durable`].
    synced: Vec<WriteBatch>,
    /// The durable view before any synced batch.
    base: Map,
    /// Append-only files as they were last synced.
    files_durable: Files,
    /// Append-only files as reads see them.
    files_volatile: Files,
}

/// An in-memory [`Engine`]. Clones share the same data (a test keeps one to crash the engine
/// under a store).
#[doc(hidden)]
#[derive(Clone)]
pub struct MemEngine {
    inner: Arc<Mutex<Inner>>,
    generation: u64,
    location: PathBuf,
}

impl Default for MemEngine {
    fn default() -> Self {
        MemEngine::new()
    }
}

fn apply_to(map: &mut Map, batch: &WriteBatch) {
    for (k, v) in batch.ops() {
        match v {
            Some(v) => {
                map.insert(k.clone(), v.clone());
            }
            None => {
                map.remove(k);
            }
        }
    }
}

impl MemEngine {
    pub fn new() -> MemEngine {
        MemEngine {
            inner: Arc::new(Mutex::new(Inner::default())),
            generation: 0,
            location: PathBuf::from("<memory>"),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic injected by `panic_on_nth` happens with the lock released; a poisoned lock
        // would mean a bug in this file, and the data is still consistent (every change below
        // is made whole under the lock).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a call and decides its fate: a crashed handle refuses, an armed panic fires.
    fn enter(&self, op: &'static str) -> Result<MutexGuard<'_, Inner>, EngineError> {
        let mut inner = self.lock();
        if inner.generation != self.generation {
            return Err(EngineError::Failed {
                reason: format!("{op} after a simulated crash"),
            });
        }
        inner.calls += 1;
        if inner.panic_at == Some(inner.calls) {
            inner.panic_at = None;
            let call = inner.calls;
            drop(inner);
            panic!("MemEngine: injected panic in {op} (call {call})");
        }
        Ok(inner)
    }

    /// A crash: every batch not yet synced is lost except the first `keep` of them (sled
    /// recovers a prefix of its log). Returns a handle on what survived; this handle, and every
    /// other clone made before, refuses every call from now on.
    pub fn crash(&self, keep: usize) -> MemEngine {
        let mut inner = self.lock();
        let unsynced = std::mem::take(&mut inner.unsynced);
        for batch in unsynced.into_iter().take(keep) {
            apply_to(&mut inner.durable, &batch);
            inner.synced.push(batch);
        }
        inner.volatile = inner.durable.clone();
        let mut files = Files::new();
        for (name, now) in &inner.files_volatile {
            let synced = inner.files_durable.get(name).map_or(0, Vec::len);
            let kept = synced + now.len().saturating_sub(synced) / 2;
            if kept > 0 {
                files.insert(name.clone(), now[..kept.min(now.len())].to_vec());
            }
        }
        inner.files_durable = files.clone();
        inner.files_volatile = files;
        inner.generation += 1;
        inner.fail_write = None;
        inner.fail_sync = None;
        inner.panic_at = None;
        MemEngine {
            inner: Arc::clone(&self.inner),
            generation: inner.generation,
            location: self.location.clone(),
        }
    }

    /// Damage that makes the engine recover an earlier state than it acknowledged (sled
    /// recovers a prefix of its log, so a damaged or truncated log file loses its tail): the
    /// last `n` synced batches are dropped from the durable view, and unsynced ones are lost as
    /// in a crash. The acknowledgement record, kept outside the log, is untouched. Returns a
    /// handle on what is left; every earlier handle refuses every call, as after
    /// [`MemEngine::crash`].
    pub fn lose_durable(&self, n: usize) -> MemEngine {
        {
            let mut inner = self.lock();
            let keep = inner.synced.len().saturating_sub(n);
            inner.synced.truncate(keep);
            let mut durable = inner.base.clone();
            for batch in &inner.synced {
                apply_to(&mut durable, batch);
            }
            inner.durable = durable;
        }
        self.crash(0)
    }

    /// Calls made to the engine so far (reads and writes alike).
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Batches applied since the last sync.
    pub fn unsynced_batches(&self) -> usize {
        self.lock().unsynced.len()
    }

    /// The `n`-th `apply` from now (1 is the next) fails, writing nothing.
    pub fn fail_nth_write(&self, n: u64) {
        let mut inner = self.lock();
        inner.fail_write = Some(inner.writes + n);
    }

    /// The `n`-th `sync` from now fails, making nothing durable.
    pub fn fail_nth_sync(&self, n: u64) {
        let mut inner = self.lock();
        inner.fail_sync = Some(inner.syncs + n);
    }

    /// The `n`-th call of any kind from now panics before doing anything.
    pub fn panic_on_nth(&self, n: u64) {
        let mut inner = self.lock();
        inner.panic_at = Some(inner.calls + n);
    }

    /// Clears every armed failure.
    pub fn disarm(&self) {
        let mut inner = self.lock();
        inner.fail_write = None;
        inner.fail_sync = None;
        inner.panic_at = None;
    }

    /// A copy of what a crash now would keep at least (the durable view).
    pub fn durable(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.lock().durable.clone()
    }

    /// File `name` as reads see it now.
    pub fn file(&self, name: &str) -> Option<Vec<u8>> {
        self.lock().files_volatile.get(name).cloned()
    }

    /// Overwrites bytes of file `name` from `offset` in both views, bypassing the store (tests
    /// damage the log this way); `None` cuts the file at `offset` instead.
    pub fn poke_file(&self, name: &str, offset: usize, bytes: Option<&[u8]>) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        for files in [&mut inner.files_durable, &mut inner.files_volatile] {
            if let Some(f) = files.get_mut(name) {
                match bytes {
                    Some(b) => {
                        let end = (offset + b.len()).min(f.len());
                        if offset < end {
                            f[offset..end].copy_from_slice(&b[..end - offset]);
                        }
                    }
                    None => f.truncate(offset),
                }
            }
        }
    }

    /// A copy of what reads see now (the volatile view).
    pub fn volatile(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.lock().volatile.clone()
    }

    /// Sets `key` in both views at once, bypassing the store (tests damage values this way).
    pub fn poke(&self, key: &[u8], value: Option<Vec<u8>>) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        // Durable at once: kept by a later `lose_durable` unless it drops this change too.
        // (Bypassing `put`'s size limit, as the poke itself does.)
        let mut batch = WriteBatch::default();
        batch.ops.push((key.to_vec(), value.clone()));
        inner.synced.push(batch);
        for map in [&mut inner.durable, &mut inner.volatile] {
            match &value {
                Some(v) => {
                    map.insert(key.to_vec(), v.clone());
                }
                None => {
                    map.remove(key);
                }
            }
        }
    }
}

impl Engine for MemEngine {
    fn location(&self) -> &Path {
        &self.location
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let inner = self.enter("get")?;
        Ok(inner.volatile.get(key).cloned())
    }

    fn range<'a>(&'a self, start: &[u8], end: Option<&[u8]>) -> Entries<'a> {
        let inner = match self.enter("range") {
            Ok(inner) => inner,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        let upper = match end {
            Some(e) => Bound::Excluded(e.to_vec()),
            None => Bound::Unbounded,
        };
        if end.is_some_and(|e| e <= start) {
            return Box::new(std::iter::empty());
        }
        let entries: Vec<Result<Entry, EngineError>> = inner
            .volatile
            .range((Bound::Included(start.to_vec()), upper))
            .map(|(k, v)| Ok((k.clone(), v.clone())))
            .collect();
        Box::new(entries.into_iter())
    }

    fn last_in(&self, start: &[u8], end: &[u8]) -> Result<Option<Entry>, EngineError> {
        let inner = self.enter("last_in")?;
        if end <= start {
            return Ok(None);
        }
        Ok(inner
            .volatile
            .range(start.to_vec()..end.to_vec())
            .next_back()
            .map(|(k, v)| (k.clone(), v.clone())))
    }

    fn apply(&self, batch: WriteBatch) -> Result<(), EngineError> {
        let mut inner = self.enter("apply")?;
        inner.writes += 1;
        if inner.fail_write == Some(inner.writes) {
            return Err(EngineError::Injected {
                op: "apply",
                call: inner.calls,
            });
        }
        apply_to(&mut inner.volatile, &batch);
        inner.unsynced.push(batch);
        Ok(())
    }

    fn sync(&self) -> Result<(), EngineError> {
        let mut inner = self.enter("sync")?;
        inner.syncs += 1;
        if inner.fail_sync == Some(inner.syncs) {
            return Err(EngineError::Injected {
                op: "sync",
                call: inner.calls,
            });
        }
        let unsynced = std::mem::take(&mut inner.unsynced);
        for batch in unsynced {
            apply_to(&mut inner.durable, &batch);
            inner.synced.push(batch);
        }
        inner.files_durable = inner.files_volatile.clone();
        Ok(())
    }

    fn file_append(&self, name: &str, bytes: &[u8]) -> Result<u64, EngineError> {
        let mut inner = self.enter("file_append")?;
        inner.writes += 1;
        if inner.fail_write == Some(inner.writes) {
            return Err(EngineError::Injected {
                op: "file_append",
                call: inner.calls,
            });
        }
        let file = inner.files_volatile.entry(name.to_string()).or_default();
        let offset = file.len() as u64;
        file.extend_from_slice(bytes);
        Ok(offset)
    }

    fn file_read(
        &self,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, EngineError> {
        let inner = self.enter("file_read")?;
        let Some(file) = inner.files_volatile.get(name) else {
            return Ok(None);
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        Ok(start
            .checked_add(len)
            .and_then(|end| file.get(start..end))
            .map(<[u8]>::to_vec))
    }

    fn file_list(&self) -> Result<Vec<(String, u64)>, EngineError> {
        let inner = self.enter("file_list")?;
        Ok(inner
            .files_volatile
            .iter()
            .map(|(name, f)| (name.clone(), f.len() as u64))
            .collect())
    }

    fn file_truncate(&self, name: &str, len: u64) -> Result<(), EngineError> {
        let mut guard = self.enter("file_truncate")?;
        let inner = &mut *guard;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if let Some(f) = inner.files_volatile.get_mut(name) {
            f.truncate(len);
            // Durable when it returns, with the bytes it kept (an fsync of the whole file).
            inner.files_durable.insert(name.to_string(), f.clone());
        }
        Ok(())
    }

    fn file_remove(&self, name: &str) -> Result<(), EngineError> {
        let mut inner = self.enter("file_remove")?;
        inner.files_volatile.remove(name);
        inner.files_durable.remove(name);
        Ok(())
    }

    fn sync_files(&self) -> Result<(), EngineError> {
        let mut inner = self.enter("sync_files")?;
        inner.syncs += 1;
        if inner.fail_sync == Some(inner.syncs) {
            return Err(EngineError::Injected {
                op: "sync_files",
                call: inner.calls,
            });
        }
        inner.files_durable = inner.files_volatile.clone();
        Ok(())
    }

    fn disk_bytes(&self) -> Result<u64, EngineError> {
        let inner = self.enter("disk_bytes")?;
        let files: u64 = inner.files_durable.values().map(|f| f.len() as u64).sum();
        Ok(files
            + inner
                .durable
                .iter()
                .map(|(k, v)| (k.len() + v.len()) as u64)
                .sum::<u64>())
    }

    fn write_ack(&self, bytes: &[u8]) -> Result<(), EngineError> {
        let mut inner = self.enter("write_ack")?;
        inner.ack = Some(bytes.to_vec());
        Ok(())
    }

    fn read_ack(&self) -> Result<Option<Vec<u8>>, EngineError> {
        let inner = self.enter("read_ack")?;
        Ok(inner.ack.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(e: &MemEngine, key: &[u8]) -> Result<(), EngineError> {
        let mut batch = WriteBatch::default();
        batch.put(key.to_vec(), key.to_vec())?;
        e.apply(batch)
    }

    fn keys(map: &Map) -> Vec<&[u8]> {
        map.keys().map(|k| k.as_slice()).collect()
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_a_prefix_of_the_rest() {
        let e = MemEngine::new();
        put(&e, b"a").expect("a");
        e.sync().expect("sync");
        for k in [b"b", b"c", b"d"] {
            put(&e, k).expect("put");
        }
        // Reads see everything applied; a crash now keeps only what was synced.
        assert_eq!(e.get(b"d").expect("get"), Some(b"d".to_vec()));
        assert_eq!(keys(&e.durable()), [b"a"]);
        let after = e.crash(2);
        assert!(matches!(e.get(b"a"), Err(EngineError::Failed { .. })));
        assert_eq!(keys(&after.volatile()), [b"a", b"b", b"c"]);
        // What survived a crash is durable: the next crash keeps it.
        let again = after.crash(0);
        assert_eq!(keys(&again.volatile()), [b"a", b"b", b"c"]);
    }

    #[test]
    fn an_injected_write_failure_writes_nothing_and_only_once() {
        let e = MemEngine::new();
        e.fail_nth_write(2);
        put(&e, b"a").expect("first write");
        assert!(matches!(
            put(&e, b"b"),
            Err(EngineError::Injected { op: "apply", .. })
        ));
        put(&e, b"c").expect("third write");
        e.fail_nth_sync(1);
        assert!(e.sync().is_err());
        assert!(
            e.durable().is_empty(),
            "a failed sync makes nothing durable"
        );
        e.sync().expect("sync");
        assert_eq!(keys(&e.durable()), [b"a", b"c"]);
    }

    #[test]
    fn a_crash_keeps_files_as_synced_plus_a_torn_half_of_the_rest() {
        let e = MemEngine::new();
        assert_eq!(e.file_append("a", b"1234").expect("append"), 0);
        e.sync_files().expect("sync");
        assert_eq!(e.file_append("a", b"5678").expect("append"), 4);
        e.file_append("b", b"xy").expect("append");
        assert_eq!(
            e.file_read("a", 2, 4).expect("read"),
            Some(b"3456".to_vec())
        );
        assert_eq!(e.file_read("a", 6, 4).expect("read past the end"), None);
        let after = e.crash(0);
        assert!(e.file_list().is_err(), "the crashed handle refuses");
        assert_eq!(after.file("a"), Some(b"123456".to_vec()));
        assert_eq!(after.file("b"), Some(b"x".to_vec()));
        after.file_truncate("a", 5).expect("truncate");
        after.file_remove("b").expect("remove");
        let again = after.crash(0);
        assert_eq!(
            again.file_list().expect("list"),
            [("a".to_string(), 5)],
            "a cut and a removal are durable when they return"
        );
        again.fail_nth_write(1);
        assert!(again.file_append("a", b"z").is_err());
        assert_eq!(again.file("a"), Some(b"12345".to_vec()));
    }

    #[test]
    fn an_injected_panic_fires_at_its_call_and_leaves_the_data_whole() {
        let e = MemEngine::new();
        put(&e, b"a").expect("a");
        e.panic_on_nth(2);
        e.get(b"a").expect("first call");
        let caught = std::panic::catch_unwind(|| e.get(b"a"));
        assert!(caught.is_err(), "the second call panics");
        assert_eq!(e.get(b"a").expect("after"), Some(b"a".to_vec()));
    }
}
