//! The writer's state in memory: the tag dictionary, the sets held for ingest with their log
//! positions and dirtiness, the open log block and the blocks waiting for their index entries,
//! the all-time filter, the clock that orders uses and changes, and what they cost in memory.
//!
//! Owns: the [`State`] behind the store's mutex and its bookkeeping. Must not: do I/O (loading
//! and writing sets is `sets`, `checkpoint`, `stage` and `import`'s business).

use super::model::Sample;
use super::{log, Store};
use crate::sketch::{ScalableBloom, Sketch, SketchSet};
use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

pub(crate) struct Active {
    /// Shared with the published snapshot until the writer next changes it (copy on write:
    /// `Arc::make_mut`), so publishing costs a pointer per set, not a copy.
    pub(crate) set: Arc<SketchSet<Sample>>,
    /// Events with sequence numbers below this are in `set` (as stored or replayed).
    pub(super) log_pos: u64,
    pub(super) dirty: bool,
    pub(super) last_used: u64,
    /// Stored as six values rather than inline in its header (see `sets::INLINE_MAX`): once
    /// split, a set stays split, so no rewrite ever leaves its old part keys behind.
    pub(super) split: bool,
}
#[derive(Default, Clone)]
pub(crate) struct TagDict {
    pub(super) by_name: HashMap<String, u32>,
    /// field -> value -> id, so ingest looks a tag up without building its name.
    pub(super) by_pair: FxHashMap<String, FxHashMap<String, u32>>,
    /// `names[id - 1]` is tag `id`'s `field:value`.
    pub(super) names: Vec<String>,
    /// Ids below this are stored; the rest must be written with the next log block.
    pub(super) persisted: u32,
}

impl TagDict {
    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn name(&self, id: u32) -> Option<&str> {
        id.checked_sub(1)
            .and_then(|i| self.names.get(i as usize))
            .map(String::as_str)
    }

    pub(super) fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.id(name) {
            return id;
        }
        self.names.push(name.to_string());
        let id = self.names.len() as u32;
        self.by_name.insert(name.to_string(), id);
        if let Some((field, value)) = name.split_once(':') {
            self.by_pair
                .entry(field.to_string())
                .or_default()
                .insert(value.to_string(), id);
        }
        id
    }

    /// The id of tag `field:value`, interning it if new. The dictionary is copied only if it
    /// is new and a snapshot shares the dictionary.
    pub(super) fn intern_pair(dict: &mut Arc<TagDict>, field: &str, value: &str) -> u32 {
        match dict.by_pair.get(field).and_then(|values| values.get(value)) {
            Some(&id) => id,
            None => Arc::make_mut(dict).intern(&format!("{field}:{value}")),
        }
    }

    /// Forgets ids handed out after `len` (a rejected batch must leave no trace).
    pub(super) fn truncate(&mut self, len: usize) {
        for name in self.names.drain(len..) {
            self.by_name.remove(&name);
            if let Some((field, value)) = name.split_once(':') {
                if let Some(values) = self.by_pair.get_mut(field) {
                    values.remove(value);
                }
            }
        }
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = (u32, &str)> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (i as u32 + 1, n.as_str()))
    }
}
impl State {
    /// The part of the state that appending to the log changes.
    pub(super) fn log_tail(&mut self) -> LogTail<'_> {
        self.log_and_sets().0
    }

    /// The log's part of the state, and apart from it the sets held and the all-time filter,
    /// which an import piece updates while its events go into the log.
    pub(super) fn log_and_sets(
        &mut self,
    ) -> (
        LogTail<'_>,
        &mut FxHashMap<(u32, i64), Active>,
        &mut Arc<ScalableBloom>,
    ) {
        let log = LogTail {
            next_seq: &mut self.next_seq,
            newest: &mut self.newest,
            open_block: &mut self.open_block,
            finisher: &mut self.finisher,
            sealed: &mut self.sealed,
            unindexed: &mut self.unindexed,
        };
        (log, &mut self.sets, &mut self.all_time)
    }
}

/// The fields of [`State`] that appending events to the log changes, borrowed apart from the
/// rest, so that an import piece can append its events on one thread while its sets are
/// updated on another (see `route`).
pub(super) struct LogTail<'a> {
    pub(super) next_seq: &'a mut u64,
    pub(super) newest: &'a mut Option<i64>,
    pub(super) open_block: &'a mut log::BlockBuilder,
    pub(super) finisher: &'a mut Option<log::Finisher>,
    pub(super) sealed: &'a mut Vec<log::SealedBlock>,
    pub(super) unindexed: &'a mut Vec<log::BlockInfo>,
}

impl LogTail<'_> {
    /// Moves the open block's events to the sealed blocks (infallible: framing waits for the
    /// write), handing them to the finisher if one runs, and empties the open block for the
    /// events after them.
    pub(super) fn seal_block(&mut self) {
        let full = self.open_block.take_sealed();
        let sealed = match &*self.finisher {
            Some(finisher) => finisher.submit(full),
            None => log::SealedBlock::new(full),
        };
        self.sealed.push(sealed);
    }
}
pub(crate) struct State {
    /// Shared with the published snapshot (copy on write, like the sets).
    pub(crate) tags: Arc<TagDict>,
    pub(super) next_seq: u64,
    /// Events ingested but not yet in the log: full blocks being framed on the finisher's
    /// thread or whose early write failed (the next flush retries them), in order, and the
    /// block being filled.
    pub(super) sealed: Vec<log::SealedBlock>,
    /// Frames full blocks on a thread of its own; started by the first full block.
    pub(super) finisher: Option<log::Finisher>,
    /// Full blocks already written under their `L` keys whose `I` entries wait for the next
    /// flush or checkpoint batch. Until then they are not part of the log (nothing reads an `L`
    /// key without its `I` entry), and a rollback or the next open removes them.
    pub(super) unindexed: Vec<log::BlockInfo>,
    pub(super) open_block: log::BlockBuilder,
    pub(crate) sets: FxHashMap<(u32, i64), Active>,
    pub(crate) all_time: Arc<ScalableBloom>,
    pub(super) all_time_pos: u64,
    pub(super) checkpoint_pos: u64,
    pub(super) since_checkpoint: u64,
    pub(super) clock: u64,
    /// Per (tag, bucket): the clock value of its last change, for cache validation.
    pub(crate) modified: Arc<FxHashMap<(u32, i64), u64>>,
    /// A background checkpoint that failed inside `ingest_batch`, reported by the next flush.
    pub(super) deferred_error: Option<String>,
    /// The newest event time seen (retention is measured against it).
    pub(super) newest: Option<i64>,
    /// Events older than this were dropped from the log by retention.
    pub(crate) log_retained_from: Option<i64>,
    /// `log_retained_from` was raised by something other than expiry (a merge whose inputs had
    /// dropped raw events): the next checkpoint records it.
    pub(super) retained_from_unsaved: bool,
    /// Inside [`Store::import`]: nothing may reach the disk until it commits, so checkpoints
    /// and log writes wait.
    pub(super) importing: bool,
    /// Sets the running import evicted to their staged (`G`) keys (see `store::stage`): their
    /// newest version is there, not in memory nor under their `S` keys. Empty outside imports.
    pub(super) staged: BTreeSet<(u32, i64)>,
    /// Sets read back from their staged keys since: memory holds the newest version, and their
    /// `G` keys are stale until staged again; they are deleted before the commit.
    pub(super) stale_staged: BTreeSet<(u32, i64)>,
    /// Why the running import can no longer commit: a batch failed after part of it changed
    /// memory (it is applied in pieces). The import then rolls back whatever its closure says.
    pub(super) import_failed: Option<String>,
    /// The bytes the sets hold, carried from batch to batch of the running import (only its
    /// batches change the sets while it runs): summing every set at each batch took 2% of the
    /// store thread with 2,048-event batches, and batches are 512 now. `None` outside imports,
    /// before the first batch and after a failed one (the next batch sums again).
    pub(super) import_held: Option<usize>,
    /// The store's id of each tag the running import's reader numbered (see
    /// `route::ReaderTags`), by reader id less one. Empty outside imports.
    pub(super) reader_tags: Vec<u32>,
    /// Why this state can no longer be trusted (a rollback failed): every call then fails with
    /// [`StoreError::MustReopen`], and nothing more is written.
    pub(super) broken: Option<String>,
    /// The sets holding sketches imported from DataSketches images (an `X` key each), with
    /// the families imported: items the raw log, Bloom filters, Count-Min and the exact counts
    /// know nothing of.
    pub(crate) imported: std::collections::BTreeMap<(u32, i64), ImportedSets>,
    /// What the acknowledgement record holds, as far as this process knows (`None`: unknown or
    /// none), so a flush with nothing new does not rewrite it.
    pub(super) acked: Option<super::ack::Ack>,
    /// Every set whose header is committed in the engine, kept as the writer commits them so
    /// that readers list a tag's buckets from their view instead of scanning the engine:
    /// sled holds every reader of it while a batch is applied (a checkpoint's took 0.3 s and
    /// stalled all queries with it). Shared with views, copied on write.
    pub(crate) stored: Arc<BTreeSet<(u32, i64)>>,
}

/// Sets holding imported sketches, by family (see [`Store::imported_sets`]). For one set, each
/// count is 0 or 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportedSets {
    /// Sets with an imported HLL: DISTINCT of one tag, or of tags joined by OR, counts it.
    pub hll: usize,
    /// Sets with an imported Theta: DISTINCT with AND, EXCEPT or NOT counts it.
    pub theta: usize,
}

impl std::ops::AddAssign for ImportedSets {
    fn add_assign(&mut self, o: Self) {
        self.hll += o.hll;
        self.theta += o.theta;
    }
}

/// Bytes held in memory by a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// Sketch sets held for ingest (what [`Config::memory_budget`] bounds).
    pub sets: usize,
    /// Merged results kept for reuse (what [`Config::cache_bytes`] bounds).
    pub cache: usize,
}
impl Store {
    pub(super) fn sets_bytes(st: &State) -> usize {
        st.sets.values().map(|a| a.set.size_bytes()).sum()
    }
}
