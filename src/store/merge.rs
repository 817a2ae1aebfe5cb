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
//! - **Imported sketches.** A set holding DataSketches images (an `X` record, see `imported`)
//!   passes them on: the output set's record becomes the union of its own and the inputs',
//!   written by the commit's batch, so the planner keeps exact answers off the merged set and
//!   `repair` adds those items back as it would in the input.
//! - **All-time filter.** Where every input still holds all its raw events, the appended
//!   events' items go into this store's filter as ingest would put them, so it adds layers as
//!   one store's does and keeps its target rate; otherwise (retention dropped some) the inputs'
//!   filters are merged layer by layer, which holds every item but may load a layer past its
//!   capacity (answers then report the higher rate). The raw-events-retained-from time is the
//!   latest of the inputs' (a raw event older than that may be missing from the merged log).
//!
//! Owns: the merge and its checks. Must not: decide durability or staging (that is `import`
//! and `stage`), or read keys directly (it reads through `logio` and `sets`).

use super::error::{Result, StoreError};
use super::import::Import;
use super::imported::ImportedRecord;
use super::keys::{self, Part};
use super::log::{BlockInfo, MAX_TAGS};
use super::model::Sample;
use super::Store;
use crate::hash::ShaWords;
use crate::sketch::{Sketch, SketchSet};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

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

/// A set named across stores: its bucket and its tag's name (`None`: the whole stream), in the
/// order the merge visits sets.
type SetOf = (i64, Option<String>);

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
    ///
    /// It holds this store, then each input in the order given, until it ends: calls on them
    /// from other threads wait. Two merges at once, each into a store the other reads, would
    /// wait for each other for good; run merges one after another.
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
                .chain(
                    h.tags
                        .all()
                        .map(|(_, name)| Arc::make_mut(&mut st.tags).intern(name)),
                )
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
    // Where every input still holds all its raw events, the all-time filter takes their items
    // as ingest would, so it grows layers as one store's does. Merging layer by layer instead
    // would put up to every input's first layer into ours, past its capacity.
    let from_log = held.iter().all(|h| h.log_retained_from.is_none());
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
            .read_block(&info, &mut |ev| {
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
                if from_log {
                    Arc::make_mut(&mut st.all_time).insert(&ShaWords::of(item.as_bytes()));
                }
                out.append_to_log(
                    &mut st.log_tail(),
                    ev.time,
                    &item,
                    fingerprint,
                    &ids,
                    &extra,
                );
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
    let mut sets: BTreeMap<SetOf, Vec<(usize, u32)>> = BTreeMap::new();
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
    // The bytes of sets held, kept up to date as sets load and grow: summing every held set
    // after each merged one (as `stage_over_budget` does) made a merge of 54,000 sets
    // quadratic (217 s for 300,000 events in hour buckets with a contract tag).
    let mut held_bytes = Store::sets_bytes(st);
    let size_of =
        |st: &super::state::State, key| st.sets.get(&key).map_or(0, |a| a.set.size_bytes());
    // `X` records of sets holding imported sketches, written by the commit: the merged set
    // holds their items, so the planner must keep exact answers off it and repair must add
    // them back, as in the input.
    let mut records = Vec::new();
    for ((bucket, name), from) in sets {
        let tag = name
            .as_deref()
            .map_or(keys::WHOLE, |n| Arc::make_mut(&mut st.tags).intern(n));
        let was_held = st.sets.contains_key(&(tag, bucket));
        out.ensure_loaded(st, tag, bucket)?;
        let loaded = size_of(st, (tag, bucket));
        if !was_held {
            held_bytes += loaded;
        }
        let mut record = if st.imported.contains_key(&(tag, bucket)) {
            out.read_imported(&st.tags, tag, bucket)?
        } else {
            None
        };
        for (i, their_tag) in from {
            let (input, h) = (inputs[i], &held[i]);
            let name_of = |part: Part| input.blob_name(&h.tags, part, their_tag, bucket);
            if h.imported.contains_key(&(their_tag, bucket)) {
                let theirs = input
                    .read_imported(&h.tags, their_tag, bucket)
                    .map_err(of_input(input))?;
                if let Some(theirs) = theirs {
                    record
                        .get_or_insert_with(ImportedRecord::default)
                        .merge(&theirs)
                        .map_err(|source| {
                            of_input(input)(StoreError::Damaged {
                                name: input.imported_name(&h.tags, their_tag, bucket),
                                source,
                            })
                        })?;
                }
            }
            let mut set = match h.sets.get(&(their_tag, bucket)) {
                Some(active) => SketchSet::clone(&active.set),
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
            Arc::make_mut(&mut active.set)
                .merge(&set)
                .map_err(|source| {
                    of_input(input)(StoreError::Damaged {
                        name: name_of(Part::Header),
                        source,
                    })
                })?;
        }
        if let Some(record) = record {
            let blob = record.encode().map_err(|source| StoreError::Damaged {
                name: out.imported_name(&st.tags, tag, bucket),
                source,
            })?;
            records.push((keys::imported(tag, bucket).to_vec(), blob));
            st.imported.insert((tag, bucket), record.families());
        }
        st.clock += 1;
        let clock = st.clock;
        if let Some(active) = st.sets.get_mut(&(tag, bucket)) {
            active.dirty = true;
            active.last_used = clock;
        }
        Arc::make_mut(&mut st.modified).insert((tag, bucket), clock);
        held_bytes = held_bytes.saturating_sub(loaded) + size_of(st, (tag, bucket));
        if held_bytes > out.config.memory_budget / 2 {
            held_bytes = out.stage_over_budget(st)?;
        }
        summary.sets += 1;
        progress(MergeProgress {
            phase: MergePhase::Sets,
            done: summary.sets,
            total,
        });
    }

    for (&input, h) in inputs.iter().zip(&held) {
        if !from_log {
            Arc::make_mut(&mut st.all_time)
                .merge(&h.all_time)
                .map_err(|source| {
                    of_input(input)(StoreError::Damaged {
                        name: "all-time bloom filter".into(),
                        source,
                    })
                })?;
        }
        if let Some(from) = h.log_retained_from {
            if st.log_retained_from.is_none_or(|ours| ours < from) {
                st.log_retained_from = Some(from);
                st.retained_from_unsaved = true;
            }
        }
    }
    st.all_time_pos = st.next_seq;
    imp.extra.extend(records);
    progress(MergeProgress {
        phase: MergePhase::Committing,
        done: 0,
        total: 0,
    });
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use crate::gen::{chain_events, chain_name, ChainsOptions};
    use crate::sketch::{HyperLogLog, Sketch, SketchConfig, SketchSet, Theta};
    use crate::store::model::DAY_MS;
    use crate::store::test_support::*;
    use crate::store::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::collections::BTreeSet;

    const CHAINS: u32 = 3;
    const CONTRACTS: u32 = 40;
    const RESERVOIR: usize = 500;

    /// Which worker an event goes to: by a hash of its wallet, so each wallet lives on one
    /// worker and every worker sees the whole time span; 70%, 25% and 5% of the wallets, so
    /// the stream shares differ enough that a merge ignoring them is caught.
    fn worker_of(item: &str) -> usize {
        match crate::hash::murmur(item.as_bytes())[1] % 20 {
            0..=13 => 0,
            14..=18 => 1,
            _ => 2,
        }
    }

    /// Two days of the `chains` stream (with its late events, three buckets), tagged by chain
    /// and contract, each event's position in the stream in its extra fields.
    fn stream() -> Vec<Event> {
        let opts = ChainsOptions {
            days: 2,
            events_per_day: 30_000,
            chains: CHAINS,
            contracts: CONTRACTS,
            ..ChainsOptions::default()
        };
        chain_events(&opts)
            .expect("gen")
            .map(|e| Event {
                time: e.time_ms,
                item: e.wallet.address(),
                tags: vec![
                    ("chain".into(), chain_name(e.chain).into_owned()),
                    ("contract".into(), format!("c{}", e.contract)),
                ],
                extra: format!("{{\"n\":{}}}", e.seq),
            })
            .collect()
    }

    fn slices() -> Vec<Slice> {
        let mut s = vec![Slice::Whole];
        s.extend((0..CHAINS).map(|c| Slice::tag("chain", &chain_name(c))));
        s.extend((0..CONTRACTS).map(|c| Slice::tag("contract", &format!("c{c}"))));
        s
    }

    /// Small sketches, so that within two days every family reaches its sketch form in some
    /// sets and stays exact in others; a budget of 8 sets, so the merge stages.
    fn cfg(conservative: bool) -> Config {
        let sketches = SketchConfig {
            bloom_capacity: 20_000,
            hll_precision: 10,
            theta_nominal_entries: 256,
            cms_epsilon: 0.01,
            cms_conservative: conservative,
            top_k: 20,
            reservoir_size: RESERVOIR,
            ..SketchConfig::default()
        };
        let largest = SketchSet::<Event>::largest_size_bytes(&sketches).expect("size");
        Config {
            tag_fields: vec!["chain".into(), "contract".into()],
            sketches,
            memory_budget: 8 * largest as usize,
            ..Config::default()
        }
    }

    fn store_of(config: &Config, events: &[Event], seed: u64) -> (Store, MemEngine) {
        let engine = MemEngine::new();
        let store = Store::create_with(Box::new(engine.clone()), config.clone()).expect("create");
        store.seed_samples(seed).expect("seed");
        for batch in events.chunks(2_000) {
            store.ingest_batch(batch).expect("ingest");
        }
        store.flush().expect("flush");
        (store, engine)
    }

    /// The reference store (all events) and three workers (split by wallet), each with its
    /// engine, so a test can reopen them.
    fn stores(config: &Config) -> (Vec<Event>, Store, Vec<(Store, MemEngine)>) {
        let all = stream();
        let (reference, _) = store_of(config, &all, 1);
        let workers = (0..3)
            .map(|w| {
                let share: Vec<Event> = all
                    .iter()
                    .filter(|e| worker_of(&e.item) == w)
                    .cloned()
                    .collect();
                store_of(config, &share, 10 + w as u64)
            })
            .collect();
        (all, reference, workers)
    }

    fn buckets(store: &Store) -> Vec<i64> {
        store
            .buckets()
            .expect("buckets")
            .into_iter()
            .map(|(b, _)| b)
            .collect()
    }

    /// Theta's sample of hashes below `theta`.
    fn below(t: &Theta, theta: u64) -> Vec<u64> {
        t.retained_hashes()
            .into_iter()
            .filter(|&h| h < theta)
            .collect()
    }

    /// Every exact and deterministic answer of `merged` is `reference`'s, set by set (see
    /// `Store::merge_from` for which are identical and which bounded).
    ///
    /// `standard` ingested everything under the standard Count-Min rule; `truth` counts each
    /// item's events per (slice name, bucket).
    fn same_answers(
        merged: &Store,
        reference: &Store,
        standard: &Store,
        truth: &Truth,
        all: &[Event],
        at: &str,
    ) {
        let conservative = reference.config().sketches.cms_conservative;
        let every = TimeRange::all();
        assert_eq!(buckets(merged), buckets(reference), "{at}: buckets");
        let items: BTreeSet<&str> = all.iter().map(|e| e.item.as_str()).collect();
        let (mut table_sets, mut theta_estimating, mut bloom_bits) = (0, 0, 0);
        let (mut hip_lost, mut hip_kept, mut hip_reordered) = (0, 0, 0);
        for slice in slices() {
            let which = format!("{at}: {}", slice.name());
            assert_eq!(
                merged.count(&slice, &every).expect("count"),
                reference.count(&slice, &every).expect("count"),
                "{which}: count"
            );
            assert!(
                merged.merged_hll(&slice, &every).expect("hll").sketch
                    == reference.merged_hll(&slice, &every).expect("hll").sketch,
                "{which}: merged hll"
            );
            for bucket in buckets(reference) {
                let which = format!("{which}, bucket {bucket}");
                let (Some(m), Some(r)) = (
                    merged.sketch_set(&slice, bucket).expect("read"),
                    reference.sketch_set(&slice, bucket).expect("read"),
                ) else {
                    assert_eq!(
                        merged.sketch_set(&slice, bucket).expect("read").is_some(),
                        reference
                            .sketch_set(&slice, bucket)
                            .expect("read")
                            .is_some(),
                        "{which}"
                    );
                    continue;
                };
                assert_eq!(m.events, r.events, "{which}: events");
                assert_eq!(
                    m.reservoir.seen(),
                    r.reservoir.seen(),
                    "{which}: samples of"
                );
                assert!(m.hll == r.hll, "{which}: hll registers");
                // The estimate: the same where both hold HIP (a set one worker fed alone
                // keeps it). A set fed by several workers is a union: where a worker's part
                // was dense, its registers came in no order HIP can account for, so it answers
                // from its registers (as a DataSketches union does) where the single store
                // answers from HIP: the known difference, documented in SCALING.md. Where the
                // parts merged in were sparse, their coupons were updates in another order:
                // HIP of its own, an unbiased estimate of the same count.
                match (m.hll.hip_estimate(), r.hll.hip_estimate()) {
                    (Some(mine), Some(theirs)) if mine != theirs => {
                        hip_reordered += 1;
                        let (a, b) = (m.hll.estimate(), r.hll.estimate());
                        assert!(
                            a.lower <= b.upper && b.lower <= a.upper,
                            "{which}: {a:?} {b:?}"
                        );
                    }
                    (None, Some(_)) => {
                        hip_lost += 1;
                        let mut registers = HyperLogLog::new(m.hll.precision()).expect("p");
                        // Into an empty sketch a merge is a copy, HIP and all; the second makes
                        // it a union of the same registers, answered from them.
                        registers.merge(&r.hll).expect("merge");
                        registers.merge(&r.hll).expect("merge");
                        assert_eq!(registers.hip_estimate(), None);
                        assert_eq!(m.hll.estimate(), registers.estimate(), "{which}");
                    }
                    (mine, theirs) => {
                        assert_eq!(mine, theirs, "{which}: hip");
                        hip_kept += usize::from(mine.is_some());
                        assert_eq!(m.hll.estimate(), r.hll.estimate(), "{which}: estimate");
                    }
                }
                // The same fingerprints, or the same bits (only the count of insertions that
                // set a bit differs: a merge adds the sides'; it is not an answer).
                assert_eq!(
                    m.bloom.is_exact(),
                    r.bloom.is_exact(),
                    "{which}: bloom form"
                );
                assert_eq!(m.bloom.ones(), r.bloom.ones(), "{which}: bloom bits");
                assert_eq!(m.bloom.fingerprints(), r.bloom.fingerprints(), "{which}");
                if r.bloom.is_exact() {
                    assert!(m.bloom == r.bloom, "{which}: bloom");
                }
                bloom_bits += usize::from(!r.bloom.is_exact());
                // A union of θ-samples and one stream's θ-sample hold the same hashes below
                // the smaller θ; while nothing was discarded they are the same sketch.
                if r.theta.is_exact() {
                    assert!(m.theta == r.theta, "{which}: exact theta");
                } else {
                    theta_estimating += 1;
                    let theta = m.theta.theta64().min(r.theta.theta64());
                    assert_eq!(below(&m.theta, theta), below(&r.theta, theta), "{which}");
                    assert!(m.theta.retained() >= m.theta.nominal_entries(), "{which}");
                }
                assert_eq!(
                    m.cms.is_exact(),
                    r.cms.is_exact(),
                    "{which}: count-min form"
                );
                assert_eq!(m.cms.total(), r.cms.total(), "{which}: count-min total");
                if r.cms.is_exact() {
                    assert!(m.cms == r.cms, "{which}: exact counts");
                } else {
                    table_sets += 1;
                    let s = standard
                        .sketch_set(&slice, bucket)
                        .expect("read")
                        .expect("a set");
                    for item in items.iter().step_by(23) {
                        let (m, r) = (m.cms.count(item.as_bytes()), r.cms.count(item.as_bytes()));
                        // Standard tables add up to the whole stream's table. Conservative
                        // ones add up to a table whose estimate is at least the truth (a min
                        // of sums is at least the sum of the inputs' mins, each at least its
                        // count) and at most the standard table's (each cell at most the
                        // standard cell), so the same ε·N bound holds; it is not one stream's
                        // conservative table (that one can be lower or higher).
                        if conservative {
                            let key = (slice.name(), bucket, item.to_string());
                            let t = truth.get(&key).copied().unwrap_or(0);
                            let most = s.cms.count(item.as_bytes());
                            assert!(t <= m && m <= most, "{which}: {item}: {t} ≤ {m} ≤ {most}");
                        } else {
                            assert_eq!(m, r, "{which}: count of {item}");
                        }
                    }
                }
                // TOP: the same heavy hitters. One store's candidates carry the estimate of
                // their last update; the merge re-estimates them on the merged table, which
                // (exact counts, or standard tables) is the whole stream's, so the merged
                // estimates are the reference table's current counts. At the cut-off, where
                // candidates tie or one store's estimates are stale, which of them are held
                // can differ, as it does between two stores fed the stream in other orders.
                if r.cms.is_exact() || !conservative {
                    let merged_top = m.cms.top(10);
                    for t in &merged_top {
                        assert_eq!(t.estimate, r.cms.count(&t.item), "{which}: top estimate");
                    }
                    for t in r.cms.top(5) {
                        assert!(
                            merged_top.iter().any(|x| x.item == t.item),
                            "{which}: heavy hitter {} missing",
                            String::from_utf8_lossy(&t.item)
                        );
                    }
                }
                for item in items.iter().step_by(101).chain(["0xnot-a-wallet"].iter()) {
                    let range = TimeRange::between(bucket, bucket + DAY_MS);
                    assert_eq!(
                        merged.membership(&slice, &range, item).expect("seen"),
                        reference.membership(&slice, &range, item).expect("seen"),
                        "{which}: SEEN {item}"
                    );
                }
            }
        }
        // The forms compared: the sizes above put some sets of every family past exact.
        assert!(
            table_sets > 0 && theta_estimating > 0 && bloom_bits > 0 && hip_lost > 0 && hip_reordered > 0,
            "{table_sets} count-min tables, {theta_estimating} estimating thetas, {bloom_bits} bloom bit arrays, {hip_lost} unions of HIP sketches ({hip_kept} kept HIP, {hip_reordered} HIP of their own)"
        );
        // All time: the scalable filter was built from the merged log, so it holds every
        // item and grew its layers as one store's does (the stream's wallets need more than
        // one): at its target rate, though not bit for bit the reference's, whose layers
        // took the items in another order.
        let target = reference.config().sketches.bloom_fpr;
        for item in items.iter().step_by(53) {
            let m = merged
                .membership(&Slice::Whole, &every, item)
                .expect("seen");
            assert!(m.maybe && !m.saturated, "{at}: all-time SEEN {item}: {m:?}");
            assert!(m.false_positive_rate <= target, "{at}: {m:?}");
        }
        // The raw events: the same multiset.
        let raw = |s: &Store| {
            let mut v: Vec<_> = s
                .events(&Slice::Whole, &every)
                .expect("events")
                .into_iter()
                .map(|mut e| {
                    e.tags.sort();
                    (e.time, e.item, e.tags, e.extra)
                })
                .collect();
            v.sort();
            v
        };
        assert!(raw(merged) == raw(reference), "{at}: raw events");
    }

    type Truth = std::collections::HashMap<(String, i64, String), u64>;

    fn truth(all: &[Event], width: BucketWidth) -> Truth {
        let mut t = Truth::new();
        for e in all {
            let bucket = width.bucket_of(e.time);
            let names = std::iter::once(Slice::Whole.name())
                .chain(e.tags.iter().map(|(f, v)| format!("{f}:{v}")));
            for name in names {
                *t.entry((name, bucket, e.item.clone())).or_default() += 1;
            }
        }
        t
    }

    /// Issue 14, item 5: a stream split across three workers by wallet and merged answers as
    /// one store that ingested it all, in both Count-Min update rules; so does a merge done in
    /// two steps (a new worker folded into a merged store); the merged store checks clean and
    /// answers the same after a reopen.
    #[test]
    fn three_workers_merged_answer_like_one_store() {
        let (_, standard, _) = stores(&cfg(false));
        for conservative in [false, true] {
            let config = cfg(conservative);
            let (all, reference, workers) = stores(&config);
            let truth = truth(&all, config.bucket);
            let inputs: Vec<&Store> = workers.iter().map(|(s, _)| s).collect();
            let engine = MemEngine::new();
            let merged = Store::create_with(Box::new(engine.clone()), config.clone()).expect("out");
            merged.seed_samples(99).expect("seed");
            let mut phases = Vec::new();
            let summary = merged
                .merge_from(&inputs, &mut |p| {
                    if phases.last() != Some(&p.phase) {
                        phases.push(p.phase);
                    }
                })
                .expect("merge");
            assert_eq!(
                phases,
                [MergePhase::Log, MergePhase::Sets, MergePhase::Committing]
            );
            assert_eq!(summary.events, all.len() as u64);
            assert_eq!(summary.inputs, 3);
            assert!(summary.samples_repointed > 0);
            let at = format!("conservative {conservative}");
            merged_log_in_time_order(&merged, &inputs);
            same_answers(&merged, &reference, &standard, &truth, &all, &at);
            let report = merged.check().expect("check");
            assert!(report.is_clean(), "{at}: {:?}", report.damaged);
            drop(merged);
            let merged = Store::open_with(Box::new(engine)).expect("reopen");
            let again = format!("{at}, reopened");
            same_answers(&merged, &reference, &standard, &truth, &all, &again);

            let folded = Store::create_with(Box::new(MemEngine::new()), config).expect("out");
            folded
                .merge_from(&inputs[..2], &mut |_| {})
                .expect("merge two");
            folded
                .merge_from(&inputs[2..], &mut |_| {})
                .expect("fold in the third");
            let folded_at = format!("{at}, folded");
            same_answers(&folded, &reference, &standard, &truth, &all, &folded_at);
        }
    }

    /// The merged log is the inputs' blocks whole, each input's in its own order, and at each
    /// step the block taken is the one with the earliest first event among the inputs' next
    /// blocks: checked from the outside, by where each input block's events (told apart by
    /// their extra fields) sit in the merged log.
    fn merged_log_in_time_order(merged: &Store, inputs: &[&Store]) {
        let every = TimeRange::all();
        // Each event of each input: (input, its block's index in that input).
        let mut block_of = std::collections::HashMap::new();
        let blocks: Vec<Vec<crate::store::log::BlockInfo>> = inputs
            .iter()
            .map(|s| s.log_blocks().expect("blocks"))
            .collect();
        for (i, input) in inputs.iter().enumerate() {
            let events = input.events(&Slice::Whole, &every).expect("events");
            let mut at = 0usize;
            for (b, info) in blocks[i].iter().enumerate() {
                for e in &events[at..at + info.count as usize] {
                    block_of.insert(e.extra.clone(), (i, b));
                }
                at += info.count as usize;
            }
            assert_eq!(at, events.len());
        }
        // The input blocks in the order the merged log holds them, each one run.
        let mut order: Vec<(usize, usize)> = Vec::new();
        for e in merged.events(&Slice::Whole, &every).expect("events") {
            let from = block_of[&e.extra];
            if order.last() != Some(&from) {
                assert!(
                    !order.contains(&from),
                    "block {from:?} split in the merged log"
                );
                order.push(from);
            }
        }
        assert_eq!(order.len(), blocks.iter().map(Vec::len).sum::<usize>());
        let mut next = vec![0usize; inputs.len()];
        for (i, b) in order {
            assert_eq!(b, next[i], "input {i}'s blocks out of their order");
            let taken = blocks[i][b].min_time;
            for (j, &n) in next.iter().enumerate() {
                if let Some(other) = blocks[j].get(n) {
                    assert!(
                        taken <= other.min_time,
                        "input {i} block {b} (from {taken}) taken before input {j} block {n} (from {})",
                        other.min_time
                    );
                }
            }
            next[i] += 1;
        }
    }

    /// The merged samples: every one resolves to an event its worker sampled in the same set
    /// (so sequence numbers were re-pointed right), and each worker's share of the slots is its
    /// share of the stream.
    ///
    /// The math: in a set of bucket b with N_b events, n_ib of them worker i's, the merge
    /// fills k_b = min(k, N_b) slots; the number from worker i is hypergeometric (k_b draws
    /// without replacement, weights n_ib / N_b), independently across sets (each set's draws
    /// come from its own generator). So X_i = Σ_b X_ib has mean Σ k_b·p_ib and a variance at
    /// most the binomial Σ k_b·p_ib·(1 − p_ib) (the hypergeometric's is smaller by
    /// (N_b − k_b)/(N_b − 1)); with means in the hundreds the sum is near normal, and the
    /// binomial 99% interval is mean ± 2.576·sd. Here (whole-stream and chain sets) worker 2
    /// holds about 5% of the events: mean ≈ 200 of ≈ 4,000 slots, sd ≈ 14, interval ±36; a
    /// merge taking equal shares would give it ≈ 1,330 (asserted outside), and even ignoring
    /// only one set's weights moves it by hundreds.
    #[test]
    fn merged_samples_are_the_workers_samples_in_proportion_to_their_streams() {
        let config = cfg(true);
        let (_, _, workers) = stores(&config);
        let inputs: Vec<&Store> = workers.iter().map(|(s, _)| s).collect();
        let merged = Store::create_with(Box::new(MemEngine::new()), config).expect("out");
        merged.seed_samples(7).expect("seed");
        merged.merge_from(&inputs, &mut |_| {}).expect("merge");
        let mut rng = StdRng::seed_from_u64(5);
        let key = |e: &Event| (e.time, e.item.clone(), e.extra.clone());
        let mut slots = [0u64; 3];
        let (mut mean, mut var, mut total) = ([0f64; 3], [0f64; 3], 0u64);
        let mut sets = 0;
        let chains = (0..CHAINS).map(|c| Slice::tag("chain", &chain_name(c)));
        for slice in std::iter::once(Slice::Whole).chain(chains) {
            for bucket in buckets(&merged) {
                let range = TimeRange::between(bucket, bucket + DAY_MS);
                let n: Vec<u64> = inputs
                    .iter()
                    .map(|w| w.count(&slice, &range).map_or(0, |(c, _)| c))
                    .collect();
                let all: u64 = n.iter().sum();
                if all <= RESERVOIR as u64 {
                    // Every event is sampled: nothing is drawn.
                    continue;
                }
                sets += 1;
                let (got, _) = merged
                    .sample(&slice, &range, RESERVOIR, &mut rng)
                    .expect("sample");
                assert_eq!(got.len(), RESERVOIR);
                let theirs: Vec<BTreeSet<_>> = inputs
                    .iter()
                    .map(|w| {
                        let (s, _) = w
                            .sample(&slice, &range, RESERVOIR, &mut rng)
                            .expect("sample");
                        s.iter().map(key).collect()
                    })
                    .collect();
                for e in &got {
                    let w = worker_of(&e.item);
                    assert!(
                        theirs[w].contains(&key(e)),
                        "{} {bucket}: {e:?} is not among worker {w}'s samples",
                        slice.name()
                    );
                    slots[w] += 1;
                }
                let k = RESERVOIR as f64;
                for w in 0..3 {
                    let p = n[w] as f64 / all as f64;
                    mean[w] += k * p;
                    var[w] += k * p * (1.0 - p);
                }
                total += RESERVOIR as u64;
            }
        }
        assert!(sets >= 6, "only {sets} sets drew samples");
        let z = crate::sketch::bounds::normal_quantile(0.995);
        for w in 0..3 {
            let half = z * var[w].sqrt();
            assert!(
                (slots[w] as f64 - mean[w]).abs() <= half,
                "worker {w}: {} of {total} slots, expected {:.0} ± {half:.0}",
                slots[w],
                mean[w]
            );
        }
        // The interval is narrow enough to catch a merge that took equal shares.
        let equal = total as f64 / 3.0;
        assert!(
            (equal - mean[2]).abs() > z * var[2].sqrt(),
            "equal shares would pass"
        );
    }

    /// Stores with retention keep their samples as events and may have dropped old raw events:
    /// the merge keeps the sketches whole, says raw events are retained only from the latest
    /// of the workers' times, merges the all-time filters layer by layer (every item still
    /// found), and its samples are the workers' events.
    #[test]
    fn stores_with_retention_merge_their_kept_samples_and_retained_times() {
        let config = Config {
            retention_ms: Some(DAY_MS / 2),
            ..cfg(true)
        };
        let (all, reference, workers) = stores(&config);
        let inputs: Vec<&Store> = workers.iter().map(|(s, _)| s).collect();
        for w in &inputs {
            w.checkpoint().expect("checkpoint");
        }
        let retained: Vec<Option<i64>> = inputs
            .iter()
            .map(|w| w.raw_events_retained_from().expect("retained"))
            .collect();
        // The large workers dropped raw events; the small one's blocks all reach the last day.
        assert!(retained.iter().any(Option::is_some), "{retained:?}");
        let merged = Store::create_with(Box::new(MemEngine::new()), config).expect("out");
        let summary = merged.merge_from(&inputs, &mut |_| {}).expect("merge");
        assert_eq!(
            summary.samples_repointed, 0,
            "kept samples are not positions"
        );
        assert!(
            summary.events < all.len() as u64,
            "retention dropped nothing"
        );
        assert_eq!(
            merged.raw_events_retained_from().expect("retained"),
            retained.iter().copied().max().flatten()
        );
        let every = TimeRange::all();
        for slice in slices() {
            assert_eq!(
                merged.count(&slice, &every).expect("count"),
                reference.count(&slice, &every).expect("count"),
                "{}",
                slice.name()
            );
            assert!(
                merged.merged_hll(&slice, &every).expect("hll").sketch
                    == reference.merged_hll(&slice, &every).expect("hll").sketch
            );
        }
        for e in all.iter().step_by(97) {
            let seen = merged
                .membership(&Slice::Whole, &every, &e.item)
                .expect("seen");
            assert!(seen.maybe, "{} lost from the all-time filter", e.item);
        }
        let ingested: BTreeSet<_> = all.iter().map(|e| (e.time, &e.item, &e.extra)).collect();
        let mut rng = StdRng::seed_from_u64(2);
        for bucket in buckets(&merged) {
            let range = TimeRange::between(bucket, bucket + DAY_MS);
            let (got, _) = merged
                .sample(&Slice::Whole, &range, 50, &mut rng)
                .expect("sample");
            assert!(!got.is_empty());
            for e in &got {
                assert!(ingested.contains(&(e.time, &e.item, &e.extra)), "{e:?}");
            }
        }
        assert!(merged.check().expect("check").is_clean());
    }

    /// Sketches imported into workers' sets (items their logs never had) travel with the
    /// sets: the merged set holds one `X` record of both workers' images, so the planner keeps
    /// exact answers off it, it survives a crash, and repair, rebuilding the set from the merged
    /// log, adds the imported items back. Without the record the merged registers would come
    /// back without them.
    #[test]
    fn imported_sketches_travel_with_their_sets() {
        use crate::sketch::datasketches::{hll_image, HllWidth};
        let config = cfg(true);
        let all = stream();
        let workers: Vec<(Store, MemEngine)> = (0..2)
            .map(|w| {
                let share: Vec<Event> = all[..6_000]
                    .iter()
                    .filter(|e| worker_of(&e.item) % 2 == w)
                    .cloned()
                    .collect();
                store_of(&config, &share, 20 + w as u64)
            })
            .collect();
        let bucket = buckets(&workers[0].0)[0];
        let day = TimeRange::between(bucket, bucket + config.bucket.millis());
        let p = config.sketches.hll_precision;
        let foreign = |seed: u64| {
            let mut h = HyperLogLog::new(p).expect("p");
            for i in 0..5_000 {
                let item = crate::gen::wallet_address(seed, i);
                h.update_murmur(crate::hash::murmur(item.as_bytes()));
            }
            h
        };
        for (w, (store, _)) in workers.iter().enumerate() {
            let image = hll_image(&foreign(70 + w as u64), HllWidth::Hll8);
            store
                .import_sketch(&Slice::Whole, bucket, &image)
                .expect("import");
        }
        let mut both = foreign(70);
        both.merge(&foreign(71)).expect("merge");

        let engine = MemEngine::new();
        let merged = Store::create_with(Box::new(engine.clone()), config.clone()).expect("out");
        let inputs: Vec<&Store> = workers.iter().map(|(s, _)| s).collect();
        merged.merge_from(&inputs, &mut |_| {}).expect("merge");
        let registers = |store: &Store| {
            store
                .merged_hll(&Slice::Whole, &day)
                .expect("hll")
                .sketch
                .expect("events")
                .register_values()
        };
        let want = registers(&merged);
        assert!(want
            .iter()
            .zip(both.register_values())
            .all(|(&m, f)| m >= f));
        drop(merged);
        let merged = Store::open_with(Box::new(engine.crash(0))).expect("reopen");
        assert_eq!(
            merged.imported_sets(&Slice::Whole, &day).expect("sets"),
            ImportedSets { hll: 1, theta: 0 }
        );
        let record = {
            let st = merged.lock().expect("lock");
            merged
                .read_imported(&st.tags, keys::WHOLE, bucket)
                .expect("read")
                .expect("the merged record")
        };
        assert_eq!(record.images, 2);
        assert_eq!(
            record.hll.expect("hll").register_values(),
            both.register_values()
        );
        assert!(merged.check().expect("check").is_clean());
        poke(
            &merged,
            &keys::sketch(keys::Part::Hll, keys::WHOLE, bucket),
            None,
        );
        let report = merged.repair().expect("repair");
        assert!(report.remaining.is_empty(), "{:?}", report.remaining);
        assert_eq!(registers(&merged), want);
    }

    /// What a test can compare of a store's state: every key and value.
    fn snapshot(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
        entries(store, &[])
    }

    #[test]
    fn refused_merges_leave_the_output_as_it_was() {
        let config = cfg(true);
        let (_, _, workers) = stores(&config);
        let w: Vec<&Store> = workers.iter().map(|(s, _)| s).collect();
        let (out, _) = store_of(&config, &stream()[..1_000], 3);
        // An import (a merge is one) begins by checkpointing what is already durable, which
        // changes how the store is laid out, not what it holds: compare from there.
        out.checkpoint().expect("checkpoint");
        let before = snapshot(&out);
        let must_fail = |inputs: &[&Store], says: &[&str]| {
            let err = out.merge_from(inputs, &mut |_| {}).expect_err("refused");
            let text = err.to_string();
            for s in says {
                assert!(text.contains(s), "{text}");
            }
            assert_eq!(snapshot(&out), before, "{text}");
        };
        must_fail(&[w[0], w[1], w[0]], &["given twice"]);
        must_fail(&[w[0], &out], &["cannot be merged into itself"]);
        let other = Config {
            sketches: SketchConfig {
                hll_precision: 12,
                ..config.sketches.clone()
            },
            ..config.clone()
        };
        let (odd, _) = store_of(&other, &stream()[..100], 4);
        must_fail(&[w[0], &odd], &["hll precision differs", "12 in", "10 in"]);
        // An operational setting is not a difference.
        let roomier = Config {
            memory_budget: config.memory_budget * 2,
            ..config.clone()
        };
        assert_eq!(config.merge_difference(&roomier), None);

        // A damaged set of a worker, read from disk (the worker reopened, so nothing of it
        // is in memory): the merge fails naming the worker and the set, after appending
        // the log and merging other sets, and rolls all of it back.
        drop(w);
        let mut workers = workers;
        let (worker, engine) = workers.remove(1);
        worker.checkpoint().expect("checkpoint");
        let bucket = buckets(&worker)[1];
        let tag = worker
            .tag_id_of(&Slice::tag("chain", &chain_name(0)))
            .expect("tag");
        let damaged = format!(
            "hll sketch of bucket {}, chain:{}",
            config.bucket.label(bucket),
            chain_name(0)
        );
        poke(
            &worker,
            &keys::sketch(keys::Part::Hll, tag, bucket),
            Some(b"damaged".to_vec()),
        );
        drop(worker);
        let reopened = Store::open_with(Box::new(engine)).expect("reopen");
        let err = out
            .merge_from(&[&workers[0].0, &reopened, &workers[1].0], &mut |_| {})
            .expect_err("damaged");
        let text = err.to_string();
        assert!(text.contains("merge input"), "{text}");
        assert!(text.contains(&damaged), "{text}");
        assert!(text.contains("output is unchanged"), "{text}");
        assert_eq!(snapshot(&out), before);
        assert_eq!(
            out.count(&Slice::Whole, &TimeRange::all())
                .expect("count")
                .0,
            1_000
        );
        assert!(out.check().expect("check").is_clean());
    }
}
