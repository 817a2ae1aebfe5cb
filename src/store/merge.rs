//! Merging stores: [`Store::merge_from`] folds stores of the same configuration (one per
//! worker, say) into this one, as if this store had ingested all of their events.
//!
//! The merge runs as an [`Store::import`] of the output, so it is all or nothing and durable
//! when it returns, and it holds at most the memory budget in sets: each merged set is loaded,
//! merged and let go through the same staging path an import's sets take (see `stage`).
//!
//! - **Log.** The inputs' log blocks are appended in time order: a k-way merge of the inputs'
//!   blocks by their earliest event time, each input's blocks in their own order and each
//!   block's events in theirs. Whole blocks are the unit so that where an input's events land
//!   is one offset per block (a few bytes per 4,096 events), which is what re-pointing the
//!   samples below needs; a scan skips blocks by time as well as it did in each input. Tags are
//!   re-coded by name (ids are per store).
//! - **Sets.** For every `(tag, bucket)` any input holds, in bucket order: the output's set (as
//!   stored, or new) merged with each input's by [`SketchSet`](crate::sketch::SketchSet)'s merge:
//!   HLL registers by max, Theta by union, Count-Min tables added (exact counts summed while
//!   they fit) with the heavy hitters re-estimated on the sum, Bloom filters and fingerprints by
//!   union, event counts added, and reservoirs by stream length (each slot from input `i` with
//!   probability `n_i / Σn`, without replacement). Samples that are log positions
//!   ([`Sample::Logged`]) are re-pointed at the events' new positions first.
//! - **All-time filter** merged layer by layer; the raw-events-retained-from time is the latest
//!   of the inputs' (a raw event older than that may be missing from the merged log).
//!
//! Owns: the merge and its checks. Must not: decide durability or staging (that is `import`
//! and `stage`), or read keys directly (it reads through `logio` and `sets`).

use super::error::{Result, StoreError};
use super::import::Import;
use super::keys::{self, Part};
use super::log::{BlockInfo, MAX_TAGS};
use super::model::Sample;
use super::Store;
use crate::sketch::Sketch;
use std::collections::BTreeMap;
use std::path::Path;

/// What a merge is doing, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergePhase {
    /// Appending the inputs' log blocks: `done` and `total` count events.
    Log,
    /// Merging sketch sets: `done` and `total` count the output's sets.
    Sets,
    /// Writing the commit (one synced write, then staged sets moved into place).
    Committing,
}

/// A merge's progress, reported after each log block and each set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeProgress {
    pub phase: MergePhase,
    pub done: u64,
    pub total: u64,
}

/// What a merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeSummary {
    pub inputs: usize,
    /// Raw events appended to the output's log.
    pub events: u64,
    /// Log blocks read from the inputs.
    pub blocks: u64,
    /// Sets of the output that were merged into (a set several inputs hold counts once).
    pub sets: u64,
    /// Reservoir samples re-pointed at their events' positions in the output's log.
    pub samples_repointed: u64,
}

/// Where one input block's events landed in the output's log: events `first..first + count` of
/// the input are events `at..` of the output.
#[derive(Clone, Copy)]
struct Landed {
    first: u64,
    count: u32,
    at: u64,
}

/// The output position of an input's event `seq`, from the input's landed blocks (sorted by
/// `first`).
fn landed_at(landed: &[Landed], seq: u64) -> Option<u64> {
    let i = landed.partition_point(|l| l.first <= seq).checked_sub(1)?;
    let l = landed[i];
    (seq < l.first + u64::from(l.count)).then(|| l.at + (seq - l.first))
}

/// Whether two paths name the same existing directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// An error of one input, naming it.
fn of_input(input: &Store) -> impl Fn(StoreError) -> StoreError + '_ {
    move |e| StoreError::MergeInput {
        input: input.path.clone(),
        source: Box::new(e),
    }
}

impl Store {
    /// Merges `inputs` into this store, as if it had also ingested every event they hold: see
    /// the module docs for what each family does. The inputs must have this store's
    /// configuration as [`Config::merge_difference`](super::Config::merge_difference) compares
    /// it ([`StoreError::MergeMismatch`] names the first setting that differs); this store may
    /// be new or hold events already (a new worker's store folded into a merged one).
    ///
    /// Guarantees:
    /// - **All or nothing, durable.** It runs as an [`Store::import`]: on any error (a damaged
    ///   input, a full disk) this store is left as it was, on disk and in memory; on `Ok` the
    ///   merge is synced.
    /// - **Within the memory budget** in sets (merged one at a time, staged beyond the budget),
    ///   plus one log block of one input at a time.
    /// - **Inputs are only read.** Each is held (its lock) for the duration, and its pending
    ///   events are written to its log first, as a query's scan does; nothing else is written.
    /// - **Answers.** Exact counts, HyperLogLog registers, Bloom filters (and fingerprints),
    ///   Count-Min tables under the standard update rule, exact Count-Min counts and heavy
    ///   hitters are those of one store that ingested every input's events. Theta keeps the
    ///   same hashes below the smaller θ (a union, not one stream: see `docs/SCALING.md`);
    ///   Count-Min tables under the conservative rule (the default) are the sum of the inputs',
    ///   never below the truth nor above the standard table's, so the same bound holds.
    /// - **Samples** are uniform over the union, each input weighted by its stream length,
    ///   drawn from each output set's reservoir generator (reproducible after
    ///   [`Store::seed_samples`]).
    ///
    /// Refused before anything is read: this store among the inputs, or one input given twice
    /// (as the same `Store` or the same directory), since its events would count twice. Two
    /// separate calls merging the same input cannot be told apart and do count it twice.
    pub fn merge_from(
        &self,
        inputs: &[&Store],
        progress: &mut dyn FnMut(MergeProgress),
    ) -> Result<MergeSummary> {
        self.check_merge_inputs(inputs)?;
        self.import(|imp| merge_into(imp, inputs, progress))
    }

    fn check_merge_inputs(&self, inputs: &[&Store]) -> Result<()> {
        let refuse = |input: &Store, why: &str| StoreError::MergeInput {
            input: input.path.clone(),
            source: Box::new(StoreError::Query(why.to_string())),
        };
        for (i, &input) in inputs.iter().enumerate() {
            if std::ptr::eq(input, self) || same_dir(&input.path, &self.path) {
                return Err(refuse(
                    input,
                    "it is the store being merged into; a store cannot be merged into itself",
                ));
            }
            if inputs[..i]
                .iter()
                .any(|&e| std::ptr::eq(e, input) || same_dir(&e.path, &input.path))
            {
                return Err(refuse(
                    input,
                    "it is given twice; its events would be counted twice",
                ));
            }
            if let Some((setting, output_value, input_value)) =
                self.config.merge_difference(&input.config)
            {
                return Err(StoreError::MergeMismatch {
                    output: self.path.display().to_string(),
                    input: input.path.display().to_string(),
                    setting,
                    output_value,
                    input_value,
                });
            }
        }
        Ok(())
    }
}

/// The merge, inside the output's import.
fn merge_into(
    imp: &mut Import<'_>,
    inputs: &[&Store],
    progress: &mut dyn FnMut(MergeProgress),
) -> Result<MergeSummary> {
    let out = imp.store;
    let mut held = Vec::with_capacity(inputs.len());
    for &input in inputs {
        let mut st = input.lock().map_err(of_input(input))?;
        input.write_pending(&mut st).map_err(of_input(input))?;
        held.push(st);
    }
    let st = &mut *imp.st;
    let mut summary = MergeSummary {
        inputs: inputs.len(),
        ..MergeSummary::default()
    };
    // Each input's tag ids to ours, by name: `ours[id]` (0, the whole stream, is no tag).
    let ours: Vec<Vec<u32>> = held
        .iter()
        .map(|h| {
            std::iter::once(keys::WHOLE)
                .chain(h.tags.all().map(|(_, name)| st.tags.intern(name)))
                .collect()
        })
        .collect();

    // The log: input blocks in order of their earliest event, each input's in its own order.
    let blocks: Vec<Vec<BlockInfo>> = inputs
        .iter()
        .map(|&input| input.log_blocks().map_err(of_input(input)))
        .collect::<Result<_>>()?;
    let total: u64 = blocks.iter().flatten().map(|b| u64::from(b.count)).sum();
    let mut landed: Vec<Vec<Landed>> = blocks.iter().map(|b| Vec::with_capacity(b.len())).collect();
    let mut next = vec![0usize; inputs.len()];
    let mut ids: Vec<u32> = Vec::with_capacity(MAX_TAGS);
    while let Some((_, i)) = (0..inputs.len())
        .filter_map(|i| blocks[i].get(next[i]).map(|b| (b.min_time, i)))
        .min()
    {
        let input = inputs[i];
        let info = blocks[i][next[i]];
        next[i] += 1;
        let at = st.next_seq;
        let mut count = 0u32;
        let mut unknown_tag = None;
        input
            .read_block(info.first_seq, &mut |ev| {
                ids.clear();
                for &t in ev.tag_ids() {
                    match ours[i].get(t as usize) {
                        Some(&id) if t != keys::WHOLE => ids.push(id),
                        _ => {
                            unknown_tag.get_or_insert((ev.seq, t));
                        }
                    }
                }
                let item = ev.item.to_text();
                let extra = String::from_utf8_lossy(ev.extra);
                let fingerprint = crate::hash::murmur(item.as_bytes())[0];
                out.append_to_log(st, ev.time, &item, fingerprint, &ids, &extra);
                count += 1;
            })
            .map_err(of_input(input))?;
        let block = || format!("log block at event {}", info.first_seq);
        if let Some((seq, tag)) = unknown_tag {
            return Err(of_input(input)(StoreError::DamagedLog {
                name: block(),
                detail: format!(
                    "event {seq} carries tag id {tag}, which its tag dictionary does not hold"
                ),
            }));
        }
        if count != info.count {
            return Err(of_input(input)(StoreError::DamagedLog {
                name: block(),
                detail: format!(
                    "its index entry says {} events, it holds {count}",
                    info.count
                ),
            }));
        }
        landed[i].push(Landed {
            first: info.first_seq,
            count,
            at,
        });
        summary.blocks += 1;
        summary.events += u64::from(count);
        progress(MergeProgress {
            phase: MergePhase::Log,
            done: summary.events,
            total,
        });
    }
    st.since_checkpoint += summary.events;
    imp.events += summary.events;

    // The sets, in bucket order, each merged from every input holding it.
    let mut sets: BTreeMap<(i64, Option<String>), Vec<(usize, u32)>> = BTreeMap::new();
    for (i, (&input, h)) in inputs.iter().zip(&held).enumerate() {
        for (tag, bucket) in input.all_sets(h).map_err(of_input(input))? {
            let name = match tag {
                keys::WHOLE => None,
                _ => Some(
                    h.tags
                        .name(tag)
                        .ok_or_else(|| {
                            of_input(input)(StoreError::DamagedLog {
                                name: input.blob_name(&h.tags, Part::Header, tag, bucket),
                                detail: format!("tag id {tag} is not in its tag dictionary"),
                            })
                        })?
                        .to_string(),
                ),
            };
            sets.entry((bucket, name)).or_default().push((i, tag));
        }
    }
    let total = sets.len() as u64;
    for ((bucket, name), from) in sets {
        let tag = name.as_deref().map_or(keys::WHOLE, |n| st.tags.intern(n));
        out.ensure_loaded(st, tag, bucket)?;
        for (i, their_tag) in from {
            let (input, h) = (inputs[i], &held[i]);
            let name_of = |part: Part| input.blob_name(&h.tags, part, their_tag, bucket);
            let mut set = match h.sets.get(&(their_tag, bucket)) {
                Some(active) => active.set.clone(),
                None => {
                    input
                        .read_set(&h.tags, their_tag, bucket)
                        .map_err(of_input(input))?
                        .ok_or_else(|| {
                            of_input(input)(StoreError::DamagedLog {
                                name: name_of(Part::Header),
                                detail: "missing".into(),
                            })
                        })?
                        .0
                }
            };
            let mut lost = None;
            set.reservoir = set.reservoir.map(|sample| match sample {
                Sample::Logged(seq) => match landed_at(&landed[i], seq) {
                    Some(at) => {
                        summary.samples_repointed += 1;
                        Sample::Logged(at)
                    }
                    None => {
                        lost.get_or_insert(seq);
                        Sample::Logged(seq)
                    }
                },
                kept => kept,
            });
            if let Some(seq) = lost {
                return Err(of_input(input)(StoreError::DamagedLog {
                    name: name_of(Part::Reservoir),
                    detail: format!("it samples log event {seq}, which the log does not hold"),
                }));
            }
            let active = st
                .sets
                .get_mut(&(tag, bucket))
                .ok_or_else(|| StoreError::MustReopen {
                    path: out.path.clone(),
                    reason: "a set loaded for a merge is not in memory".into(),
                })?;
            active.set.merge(&set).map_err(|source| {
                of_input(input)(StoreError::Damaged {
                    name: name_of(Part::Header),
                    source,
                })
            })?;
        }
        st.clock += 1;
        let clock = st.clock;
        if let Some(active) = st.sets.get_mut(&(tag, bucket)) {
            active.dirty = true;
            active.last_used = clock;
        }
        st.modified.insert((tag, bucket), clock);
        out.stage_over_budget(st)?;
        summary.sets += 1;
        progress(MergeProgress {
            phase: MergePhase::Sets,
            done: summary.sets,
            total,
        });
    }

    for (&input, h) in inputs.iter().zip(&held) {
        st.all_time.merge(&h.all_time).map_err(|source| {
            of_input(input)(StoreError::Damaged {
                name: "all-time bloom filter".into(),
                source,
            })
        })?;
        if let Some(from) = h.log_retained_from {
            if st.log_retained_from.is_none_or(|ours| ours < from) {
                st.log_retained_from = Some(from);
                st.retained_from_unsaved = true;
            }
        }
    }
    st.all_time_pos = st.next_seq;
    progress(MergeProgress {
        phase: MergePhase::Committing,
        done: 0,
        total: 0,
    });
    Ok(summary)
}
