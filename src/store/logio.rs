//! The log on storage: the writer (blocks appended to the log files as they fill, their index
//! entries and the open block added to the next flush or checkpoint batch after the files are
//! synced, orphans of a crash or a rollback cut away, files whose blocks all expired removed)
//! and the reader (blocks in sequence order from a position, for replay and scans).
//!
//! Blocks live in append-only files of the engine (`log/{first event:020}.log` on disk, each up
//! to [`FILE_BYTES`]); an `I` entry per block, in sled, holds its summary and its place (file,
//! offset, length) and is what makes a block part of the log. Stores written before log files
//! (format 5 and older) keep their blocks under `L` keys, read as before; new blocks go to files.
//!
//! Owns: where blocks and index entries go and when. Must not: encode or decode a block's
//! contents (that is [`super::log`]).

use super::engine::WriteBatch;
use super::error::{Result, StoreError};
use super::model::Event;
use super::seam::Seam;
use super::state::{LogTail, State, TagDict};
use super::{codec, keys, kinds, log, Store};
use std::sync::Arc;

/// Bytes a log file grows to before the next block starts a new one (64 MiB): large enough that
/// a year of a busy stream is a few hundred files, small enough that retention frees space soon
/// after a file's last block expires. The unit tests use 512 KiB, so that their logs span
/// several files and every path meets a file boundary.
pub const FILE_BYTES: u64 = if cfg!(test) { 512 << 10 } else { 64 << 20 };

impl Store {
    /// Calls `each` for every logged event in the blocks whose index entries `wanted` accepts
    /// (a scan wants the blocks overlapping its range, replay the blocks past a position,
    /// repair the ones overlapping its buckets; a damaged block nobody wants is never read).
    /// `stop` is asked before each block; returns `Ok(false)` if it ended the walk early.
    pub(super) fn for_each_block(
        &self,
        wanted: impl Fn(&log::BlockInfo) -> bool,
        stop: &dyn Fn() -> bool,
        mut each: impl FnMut(&log::LogEvent<'_>),
    ) -> Result<bool> {
        for entry in self.engine.prefix(&[keys::INDEX]) {
            if stop() {
                return Ok(false);
            }
            let (k, v) = entry?;
            let first = keys::seq_of(&k).unwrap_or(0);
            let info = log::BlockInfo::decode(&v).map_err(|detail| StoreError::DamagedLog {
                name: format!("log block index at event {first}"),
                detail,
            })?;
            if !wanted(&info) {
                continue;
            }
            self.read_block(&info, &mut each)?;
        }
        Ok(true)
    }

    /// The summaries of the log's blocks, in sequence order (one index entry each, a few
    /// dozen bytes per 4,096 events), for a caller that walks blocks at its own pace, such as
    /// a merge interleaving several stores' logs.
    pub(super) fn log_blocks(&self) -> Result<Vec<log::BlockInfo>> {
        let mut out = Vec::new();
        for entry in self.engine.prefix(&[keys::INDEX]) {
            let (k, v) = entry?;
            let first = keys::seq_of(&k).unwrap_or(0);
            out.push(
                log::BlockInfo::decode(&v).map_err(|detail| StoreError::DamagedLog {
                    name: format!("log block index at event {first}"),
                    detail,
                })?,
            );
        }
        Ok(out)
    }

    /// Calls `each` for every event of the block `info` describes.
    pub(super) fn read_block(
        &self,
        info: &log::BlockInfo,
        each: &mut impl FnMut(&log::LogEvent<'_>),
    ) -> Result<()> {
        let bytes = self
            .block_bytes(info)?
            .ok_or_else(|| StoreError::DamagedLog {
                name: info.label(),
                detail: match info.place {
                    Some(_) => "missing: the log file is gone or shorter".into(),
                    None => "missing".into(),
                },
            })?;
        Self::decode_block_of(info, &bytes, each)
    }

    /// The stored bytes of the block `info` describes: a range of a log file, or the value of
    /// its `L` key in stores written before log files; `None` if they are not there.
    pub(super) fn block_bytes(&self, info: &log::BlockInfo) -> Result<Option<Vec<u8>>> {
        match info.place {
            Some(p) => self
                .engine
                .file_read(&log::file_name(p.file), p.offset, p.len as usize),
            None => self.engine.get(&keys::log(info.first_seq)),
        }
    }

    /// Decodes `bytes` as the block `info` describes (a block whose own header names other
    /// events is damage: a log file cut and written again under a stale index).
    pub(super) fn decode_block_of(
        info: &log::BlockInfo,
        bytes: &[u8],
        each: &mut impl FnMut(&log::LogEvent<'_>),
    ) -> Result<()> {
        log::decode_block_expecting(bytes, info, each).map_err(|detail| {
            StoreError::DamagedLog {
                name: info.label(),
                detail,
            }
        })?;
        Ok(())
    }

    /// Appends a finished block to the log files and returns its summary with its place: at
    /// the end of the newest file, or in a new file named after the block once that one would
    /// pass [`FILE_BYTES`]. Not durable until the files are synced.
    pub(super) fn append_block(&self, blob: &[u8], info: log::BlockInfo) -> Result<log::BlockInfo> {
        let len = u32::try_from(blob.len()).map_err(|_| StoreError::DamagedLog {
            name: info.label(),
            detail: format!("{} bytes: over 4 GiB", blob.len()),
        })?;
        let newest = self
            .engine
            .file_list()?
            .into_iter()
            .rev()
            .find_map(|(name, size)| log::file_number(&name).map(|f| (f, size)));
        let file = match newest {
            Some((f, size)) if size == 0 || size + u64::from(len) <= FILE_BYTES => f,
            _ => info.first_seq,
        };
        let offset = self.engine.file_append(&log::file_name(file), blob)?;
        Ok(log::BlockInfo {
            place: Some(log::Place { file, offset, len }),
            ..info
        })
    }

    /// Appends one event to the open log block (its sequence number is `st.next_seq`), writing
    /// the block early once it is full. `tags` are the event's ids in this store's dictionary;
    /// `fingerprint` is any stable 64-bit hash of the item (the block's item dictionary uses it).
    pub(super) fn append_to_log(
        &self,
        log: &mut LogTail<'_>,
        time: i64,
        item: &str,
        fingerprint: u64,
        tags: &[u32],
        extra: &str,
    ) {
        *log.next_seq += 1;
        *log.newest = Some(log.newest.map_or(time, |n| n.max(time)));
        log.open_block.push(time, item, fingerprint, tags, extra);
        if log.open_block.is_full() {
            self.write_full_block(log);
        }
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

    /// Seals the full open block and hands it to the finisher's thread to be framed, then
    /// appends the blocks sealed before it to the log files, so a long ingest streams its log to
    /// disk instead of holding it for one huge batch. A block's `I` entry, which makes it part
    /// of the log, goes in the next flush or checkpoint batch, after the files are synced. If an
    /// append fails, that block and the ones after it stay sealed in memory and that batch
    /// appends them, reporting any error there.
    pub(super) fn write_full_block(&self, log: &mut LogTail<'_>) {
        if log.finisher.is_none() {
            *log.finisher = log::Finisher::start();
        }
        log.seal_block();
        // Blocks go to the files in sequence order (the cut after a crash relies on it). A
        // block is appended once `log::FRAMED_AHEAD` blocks are sealed after it, so its framing
        // overlaps the filling of those; appending at fixed points keeps the order of writes
        // the same whatever the threads' timing (the fault tests count writes).
        while log.sealed.len() > log::FRAMED_AHEAD {
            if self.append_oldest_sealed(log).is_err() {
                break;
            }
        }
    }

    /// Appends the oldest sealed block to the log files (framed by the finisher, or here) and
    /// moves its summary to `unindexed`. On failure the block stays sealed.
    fn append_oldest_sealed(&self, log: &mut LogTail<'_>) -> Result<()> {
        let Some(sealed) = log.sealed.first_mut() else {
            return Ok(());
        };
        let first = sealed.block().next_seq() - sealed.block().len() as u64;
        let (blob, info) = sealed.framed().map_err(|e| StoreError::DamagedLog {
            name: format!("log block at event {first}"),
            detail: e.to_string(),
        })?;
        let info = self.append_block(&blob, info)?;
        log.unindexed.push(info);
        log.sealed.remove(0);
        Ok(())
    }

    /// Removes what blocks written early left behind when their `I` entries never came (an
    /// import rolled back, or a crash before the flush that would have indexed them): the log
    /// files are cut at the end of the last indexed block and files after it removed, and
    /// `L` keys (stores before log files) at or after `next_seq` deleted. Indexed blocks all
    /// end at or before `next_seq` and before the cut, so none of them is touched. A damaged
    /// last index entry leaves the files as they are: bytes past the indexed blocks are never
    /// read, only wasted, and `check` names the entry.
    pub(super) fn remove_orphan_blocks(engine: &Seam, next_seq: u64) -> Result<()> {
        let mut batch = WriteBatch::default();
        let end = [keys::LOG + 1];
        for entry in engine.range(&keys::log(next_seq), Some(&end)) {
            let (key, _) = entry?;
            engine.delete(&mut batch, key)?;
        }
        engine.apply(batch)?;
        let last = engine.last_in(&[keys::INDEX], &[keys::INDEX + 1])?;
        let keep = match last.map(|(_, v)| log::BlockInfo::decode(&v)) {
            Some(Err(_)) => return Ok(()),
            Some(Ok(info)) => info.place.map(|p| (p.file, p.offset + u64::from(p.len))),
            None => None,
        };
        for (name, size) in engine.file_list()? {
            let Some(file) = log::file_number(&name) else {
                continue;
            };
            match keep {
                Some((last, _)) if file < last => {}
                Some((last, end)) if file == last => {
                    if size > end {
                        engine.file_truncate(&name, end)?;
                    }
                }
                _ => engine.file_remove(&name)?,
            }
        }
        Ok(())
    }

    /// Removes the log files that hold no indexed block any more (retention dropped all of
    /// theirs): those before the file of the first indexed block, or all of them if no block
    /// is indexed. Only called with every written block indexed (right after a checkpoint,
    /// or at open after orphans are gone). Best effort: a file left behind is only space, and
    /// the next call removes it.
    pub(super) fn remove_unused_files(engine: &Seam) -> Result<()> {
        let first = match engine.prefix(&[keys::INDEX]).next() {
            Some(entry) => {
                let (_, v) = entry?;
                match log::BlockInfo::decode(&v) {
                    Ok(info) => info.place.map(|p| p.file),
                    // `check` names it; the files stay.
                    Err(_) => return Ok(()),
                }
            }
            None => Some(u64::MAX),
        };
        // A first block under its `L` key: every file comes after it.
        let Some(first) = first else {
            return Ok(());
        };
        for (name, _) in engine.file_list()? {
            if log::file_number(&name).is_some_and(|f| f < first) {
                engine.file_remove(&name)?;
            }
        }
        Ok(())
    }

    /// Adds the pending events (and new tag names) to `batch`: sealed blocks are appended to
    /// the log files, the files synced, and the index entries of every block written since the
    /// last batch put in `batch` — so no durable index entry ever points at bytes a crash can
    /// take. A failed append leaves the blocks not yet appended sealed, for the next try.
    pub(super) fn log_into(&self, st: &mut State, batch: &mut WriteBatch) -> Result<()> {
        if self.append_pending(st)? {
            self.engine.sync_files()?;
        }
        self.index_into(st, batch)
    }

    /// The first half of [`Store::log_into`]: seals the open block and appends every sealed
    /// block to the log files. Returns whether blocks await their index entries, so the files
    /// must be synced before [`Store::index_into`]'s batch is applied. Apart so that a checkpoint
    /// can sync the files (the end of a large import waits about 20 ms for 40 MB of log there)
    /// while it encodes its sets.
    pub(super) fn append_pending(&self, st: &mut State) -> Result<bool> {
        let mut log = st.log_tail();
        if !log.open_block.is_empty() {
            log.seal_block();
        }
        while !log.sealed.is_empty() {
            self.append_oldest_sealed(&mut log)?;
        }
        Ok(!st.unindexed.is_empty())
    }

    /// The second half of [`Store::log_into`]: new tag names and the index entries of the blocks
    /// appended since the last batch, into `batch`, which must not be applied before the files
    /// are synced.
    pub(super) fn index_into(&self, st: &State, batch: &mut WriteBatch) -> Result<()> {
        for id in st.tags.persisted + 1..=st.tags.names.len() as u32 {
            let name = st.tags.name(id).unwrap_or_default().to_string();
            let blob =
                codec::encode(kinds::TAG.blob, &name).map_err(|e| StoreError::DamagedLog {
                    name: "tag dictionary".into(),
                    detail: e.to_string(),
                })?;
            self.engine.put(batch, keys::tag(id), blob)?;
        }
        for info in &st.unindexed {
            let index = info.encode().map_err(|e| StoreError::DamagedLog {
                name: format!("index of {}", info.label()),
                detail: e.to_string(),
            })?;
            self.engine.put(batch, keys::index(info.first_seq), index)?;
        }
        Ok(())
    }

    pub(super) fn after_log_written(st: &mut State) {
        if st.tags.persisted as usize != st.tags.names.len() {
            let dict = Arc::make_mut(&mut st.tags);
            dict.persisted = dict.names.len() as u32;
        }
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
        let mut batch = WriteBatch::default();
        self.log_into(st, &mut batch)?;
        self.engine.apply(batch)?;
        Self::after_log_written(st);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FILE_BYTES;
    use crate::gen::wallet_address;
    use crate::store::test_support::*;
    use crate::store::*;

    #[test]
    fn blocks_are_written_as_they_fill_and_indexed_by_the_flush() {
        let dir = tempdir("early");
        let store = Store::create(&dir, config()).expect("create");
        let full = log::FRAMED_AHEAD + 3;
        let n = full as u64 * log::BLOCK_EVENTS as u64 + 10;
        store.ingest_batch(&events(0, n)).expect("ingest");
        // Three full blocks are already under their `L` keys, but not yet part of the log;
        // the last few are being framed and are written with the blocks after them or the flush.
        let (l, i) = block_keys(&store);
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(i.is_empty(), "{i:?}");
        store.flush().expect("flush");
        let (l, i) = block_keys(&store);
        assert_eq!(l.len(), full + 1, "the full blocks and the open one");
        assert_eq!(l, i, "every block has its index entry");
        assert_eq!(logged_events(&store), n as usize);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
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
        let blocks = indexed_blocks(&store);
        // 200 × ~4 KB = ~800 KB: at most 192 KiB a block means at least 5 blocks.
        assert!(blocks.len() >= 5, "{blocks:?}");
        for b in &blocks {
            let len = b.place.expect("in a log file").len as usize;
            assert!(len <= log::BLOCK_BYTES + 8_192, "{len} bytes");
        }
        assert_eq!(logged_events(&store), 200);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store recorded as format 7 (whose blocks hold their extras as text) opens as the current
    /// format, and every event's extra fields, hex strings among them, read back exactly from
    /// the blocks written before and after.
    #[test]
    fn a_format_seven_store_is_recorded_as_current_and_its_extras_read_back_exactly() {
        let with_hex = |first: u64, n: u64| -> Vec<Event> {
            events(first, n)
                .into_iter()
                .zip(first..)
                .map(|(e, i)| Event {
                    extra: format!(
                        r#"{{"hash":"0x{:064x}","to":"{}","from":"0x{:040X}","value":"{i}"}}"#,
                        u128::from(i) << 70 | 0xabc,
                        wallet_address(5, i),
                        i
                    ),
                    ..e
                })
                .collect()
        };
        let dir = tempdir("format-7");
        let store = Store::create(&dir, config()).expect("create");
        let mut ingested = with_hex(0, 5_000);
        store.ingest_batch(&ingested).expect("ingest");
        store.flush().expect("flush");
        let store = reopened_from_format(store, &dir, 7);
        let more = with_hex(5_000, 1_000);
        store.ingest_batch(&more).expect("ingest");
        store.flush().expect("flush");
        ingested.extend(more);
        let mut extras = Vec::new();
        store
            .scan(&Slice::Whole, &TimeRange::all(), |e| {
                extras.push(String::from_utf8(e.extra.to_vec()).expect("text"))
            })
            .expect("scan");
        assert_eq!(extras.len(), ingested.len());
        for (got, e) in extras.iter().zip(&ingested) {
            assert_eq!(got, &e.extra);
        }
        assert!(store.check().expect("check").is_clean());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Events of ~4 KB of hex that compresses to about half, so that a few hundred fill the
    /// 512 KiB test log files.
    fn long_events(first: u64, n: u64, day: i64) -> Vec<Event> {
        (first..first + n)
            .map(|i| Event {
                extra: (0..96).map(|j| wallet_address(i, j)).collect(),
                ..Event::new(
                    1_764_547_200_000 + day * crate::store::model::DAY_MS + i as i64,
                    wallet_address(3, i),
                    &[],
                )
            })
            .collect()
    }

    #[test]
    fn a_full_log_file_is_followed_by_one_named_after_the_next_block() {
        let dir = tempdir("rollover");
        let store = Store::create(&dir, config()).expect("create");
        for round in 0..6 {
            store
                .ingest_batch(&long_events(round * 150, 150, 0))
                .expect("ingest");
            store.flush().expect("flush");
        }
        let files = log_files(&store);
        assert!(files.len() >= 2, "{files:?}");
        let blocks = indexed_blocks(&store);
        for (name, size) in &files {
            let number = log::file_number(name).expect("a log file name");
            let inside: Vec<_> = blocks
                .iter()
                .filter(|b| b.place.expect("placed").file == number)
                .collect();
            // Named after its first block; its blocks back to back from byte 0, in order.
            assert_eq!(inside.first().map(|b| b.first_seq), Some(number), "{name}");
            let mut at = 0;
            for b in &inside {
                let p = b.place.expect("placed");
                assert_eq!(p.offset, at, "{name}: {b:?}");
                at += u64::from(p.len);
            }
            assert_eq!(at, *size, "{name} holds exactly its blocks");
            // Only the newest file may pass the limit, and only by its one block.
            assert!(*size <= FILE_BYTES || inside.len() == 1, "{name}: {size}");
        }
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(logged_events(&store), 900);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_log_file_whose_blocks_all_expired_is_removed() {
        let dir = tempdir("expire-files");
        let cfg = Config {
            retention_ms: Some(2 * crate::store::model::DAY_MS),
            ..config()
        };
        let store = Store::create(&dir, cfg).expect("create");
        for day in 0..6 {
            store
                .ingest_batch(&long_events(day as u64 * 300, 300, day))
                .expect("ingest");
            store.checkpoint().expect("checkpoint");
        }
        let files = log_files(&store);
        let blocks = indexed_blocks(&store);
        let first_file = blocks[0].place.expect("placed").file;
        // Every file left holds an indexed block, and the oldest days' files are gone.
        assert_eq!(
            log::file_number(&files[0].0),
            Some(first_file),
            "{files:?} {blocks:?}"
        );
        assert!(blocks[0].min_time >= 1_764_547_200_000 + 3 * crate::store::model::DAY_MS);
        assert!(
            log::file_number(&files[0].0).expect("named") > 0,
            "the first file went"
        );
        let kept = logged_events(&store);
        assert_eq!(kept as u32, blocks.iter().map(|b| b.count).sum::<u32>());
        assert!(store.check().expect("check").is_clean());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_crash_between_writing_blocks_and_indexing_them_loses_nothing_acknowledged() {
        let mem = MemEngine::new();
        let store = Store::create_with(Box::new(mem.clone()), config()).expect("create");
        store.ingest_batch(&long_events(0, 400, 0)).expect("ingest");
        store.flush().expect("flush");
        let acked = indexed_blocks(&store);
        // Blocks written early, never synced or indexed; then the power goes. (Twice the
        // events: a block is written only once `FRAMED_AHEAD` more are sealed after it.)
        store
            .ingest_batch(&long_events(400, 800, 0))
            .expect("ingest");
        assert!(
            block_keys(&store).0.len() > acked.len(),
            "blocks written early"
        );
        let after = mem.crash(0);
        std::mem::forget(store);
        let store = Store::open_with(Box::new(after.clone())).expect("reopen");
        assert_eq!(indexed_blocks(&store), acked);
        assert_eq!(logged_events(&store), 400);
        // The torn tail is cut: new blocks follow the acknowledged ones and read back.
        store
            .ingest_batch(&long_events(400, 400, 0))
            .expect("ingest");
        store.flush().expect("flush");
        assert_eq!(logged_events(&store), 800);
        assert!(store.check().expect("check").is_clean());
    }
}
