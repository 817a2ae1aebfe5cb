//! Checking and repairing a store: [`Store::check`] reads every stored value by kind and names
//! each damaged one as a user reads it (bucket, tag, kind), with whether the raw log can restore
//! it; [`Store::check_dir`] does the same for a store that damage keeps from opening;
//! [`Store::repair`] rebuilds the damaged sketch sets that the log can restore.
//!
//! Owns: the list of what can be wrong with each stored kind, and the rule for when a set is
//! recoverable (its tag is known, the raw log of its bucket is retained, and no damaged or
//! missing log block may hold its events).
//!
//! Must not: change anything during a check (beyond what opening a store does; a store that
//! does not open is walked from a state marked broken, so nothing is written); decode values any other way than the readers of
//! their kinds do; rebuild a set by any path but recovery's (`replay_into`) or write one by any
//! path but a checkpoint's (`put_set`), so that a repaired set is what recovery would have made.
//! Values are read one at a time (a chunked value is put together only while it is checked);
//! what the walk keeps is a few numbers per stored set and per log block.

use super::checkpoint::Checkpoint;
use super::error::{Result, StoreError};
use super::keys::{self, Part};
use super::seam::Seam;
use super::sets::{AllTime, INLINE_PARTS};
use super::stage::{StagedMarker, MARKER};
use super::state::{Active, State, TagDict};
use super::SledEngine;
use super::{codec, kinds, log, Store, WriteBatch, FORMAT_VERSION, OLDEST_FORMAT};
use crate::sketch::{BloomFilter, CountMin, HyperLogLog, Sketch, Theta};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A copy of an open error to return in place of a later one (errors are not `Clone`).
fn open_error_clone(e: &StoreError) -> StoreError {
    StoreError::DamagedLog {
        name: "store".into(),
        detail: e.to_string(),
    }
}

/// What can be done about a damaged value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Recovery {
    /// [`Store::repair`] rebuilds the whole sketch set from the raw log.
    Rebuild,
    /// [`Store::repair`] deletes it: a leftover that nothing reads.
    Remove,
    /// Nothing in the store can restore it; `why` says what is missing.
    Unrecoverable { why: String },
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Recovery::Rebuild => write!(f, "repair rebuilds it from the raw log"),
            Recovery::Remove => write!(f, "repair removes it"),
            Recovery::Unrecoverable { why } => write!(f, "cannot be recovered: {why}"),
        }
    }
}

/// One damaged (or missing, or stray) stored value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The value as a user reads it: `hll sketch of bucket 2026-12-02, chain:a`.
    pub name: String,
    /// Its stored kind, as the registry names it (`sketch`, `log block`, ...).
    pub kind: &'static str,
    /// For a part of a sketch set: which (`header`, `bloom`, `hll`, ...).
    pub part: Option<&'static str>,
    /// For a sketch set: its bucket's label.
    pub bucket: Option<String>,
    /// For a sketch set: `field:value`, or `whole stream`.
    pub tag: Option<String>,
    /// What is wrong.
    pub detail: String,
    pub recovery: Recovery,
    /// The (tag id, bucket) of the set it belongs to, for repair.
    #[serde(skip)]
    set: Option<(u32, i64)>,
    /// The key to delete, for [`Recovery::Remove`].
    #[serde(skip)]
    key: Vec<u8>,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} [{}; {}]",
            self.name, self.detail, self.kind, self.recovery
        )
    }
}

/// How much a check read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Checked {
    pub metadata: u64,
    pub tags: u64,
    pub log_blocks: u64,
    pub events: u64,
    pub sets: u64,
    pub parts: u64,
    pub chunks: u64,
}

/// What [`Store::check`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    /// Every damaged value, in key order within each kind.
    pub damaged: Vec<Damage>,
    pub checked: Checked,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty()
    }

    /// How many damaged values [`Store::repair`] can restore or remove.
    pub fn repairable(&self) -> usize {
        self.damaged
            .iter()
            .filter(|d| !matches!(d.recovery, Recovery::Unrecoverable { .. }))
            .count()
    }
}

/// What [`Store::repair`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    /// The sets rebuilt from the raw log (`sketch set of bucket ..., tag`).
    pub rebuilt: Vec<String>,
    /// The stray values deleted.
    pub removed: Vec<String>,
    /// What a check still finds afterwards: the damage nothing can restore.
    pub remaining: Vec<Damage>,
}

/// What the walk learned of one stored set.
#[derive(Default)]
struct SetSeen {
    /// One bit per [`Part::ALL`] index: stored, and read without damage.
    present: u8,
    sound: u8,
    events: Option<u64>,
    log_pos: Option<u64>,
    cms_total: Option<u64>,
    reservoir_seen: Option<u64>,
    /// Its events in the log below its `log_pos`.
    logged: u64,
}

fn bit(part: Part) -> u8 {
    1 << (part as u8).min(7)
}

fn part_of(byte: u8) -> Option<Part> {
    Part::ALL.into_iter().find(|&p| p as u8 == byte)
}

/// Decodes one stored part of a set as its reader would, noting the counts it holds in `seen`.
fn decode_part(part: Part, bytes: &[u8], seen: &mut SetSeen) -> std::result::Result<(), String> {
    let e = |e: crate::sketch::SketchError| e.to_string();
    match part {
        Part::Header => {
            let stored = super::sets::decode_header(bytes)?;
            seen.events = Some(stored.header.events);
            seen.log_pos = Some(stored.header.log_pos);
            // A set stored inline: its parts are checked here, each as under its own key.
            let inline = stored
                .inline
                .iter()
                .flat_map(|parts| INLINE_PARTS.into_iter().zip(*parts));
            for (part, blob) in inline {
                seen.present |= bit(part);
                decode_part(part, blob, seen)
                    .map_err(|e| format!("its inline {} part: {e}", part.name()))?;
                seen.sound |= bit(part);
            }
            Ok(())
        }
        Part::Bloom => BloomFilter::decode(bytes).map(drop).map_err(e),
        Part::Hll => HyperLogLog::decode(bytes).map(drop).map_err(e),
        Part::Theta => Theta::decode(bytes).map(drop).map_err(e),
        Part::CountMin => CountMin::decode(bytes)
            .map(|c| seen.cms_total = Some(c.total()))
            .map_err(e),
        Part::Reservoir => super::sets::decode_reservoir(bytes)
            .map(|r| seen.reservoir_seen = Some(r.seen()))
            .map_err(e),
    }
}

fn time_label(t: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(t) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => format!("@{t}ms"),
    }
}

/// A damaged or missing log block, with the time span its index gives (`None`: unknown, so
/// it may hold events of any bucket).
struct LogDamage {
    span: Option<(i64, i64)>,
    name: String,
}

/// The walk's findings so far.
struct Walk<'a> {
    tags: &'a TagDict,
    damaged: Vec<Damage>,
    checked: Checked,
    sets: BTreeMap<(u32, i64), SetSeen>,
    /// Sets with no stored key whose events the log holds below the checkpoint.
    absent: BTreeMap<(u32, i64), u64>,
    log_damage: Vec<LogDamage>,
}

impl Walk<'_> {
    fn add(&mut self, name: String, kind: kinds::Kind, detail: String, recovery: Recovery) {
        self.add_named(name, kind.name, detail, recovery);
    }

    fn add_named(&mut self, name: String, kind: &'static str, detail: String, recovery: Recovery) {
        self.damaged.push(Damage {
            name,
            kind,
            part: None,
            bucket: None,
            tag: None,
            detail,
            recovery,
            set: None,
            key: Vec::new(),
        });
    }
}

impl Store {
    fn tag_label(tags: &TagDict, tag: u32) -> String {
        if tag == keys::WHOLE {
            return "whole stream".into();
        }
        match tags.name(tag) {
            Some(name) => name.to_string(),
            None => format!("tag id {tag} (not in the tag dictionary)"),
        }
    }

    fn set_damage(
        &self,
        tags: &TagDict,
        part: Option<Part>,
        (tag, bucket): (u32, i64),
        detail: String,
    ) -> Damage {
        let what = part.map_or("sketch set".to_string(), |p| format!("{} sketch", p.name()));
        let bucket_label = self.config.bucket.label(bucket);
        let tag_label = Self::tag_label(tags, tag);
        Damage {
            name: format!("{what} of bucket {bucket_label}, {tag_label}"),
            kind: kinds::SKETCH.name,
            part: part.map(Part::name),
            bucket: Some(bucket_label),
            tag: Some(tag_label),
            detail,
            // Decided once the whole log has been read.
            recovery: Recovery::Rebuild,
            set: Some((tag, bucket)),
            key: Vec::new(),
        }
    }

    /// Puts a value read raw together, checking its chunks; `Err` says what is wrong with them.
    fn checked_value(
        &self,
        key: &[u8],
        raw: Vec<u8>,
        checked: &mut Checked,
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        let (value, health) = self.engine.assemble_checked(key, raw)?;
        if let Some(h) = health {
            checked.chunks += u64::from(h.count);
            if !h.missing.is_empty() {
                let list: Vec<String> = h.missing.iter().map(u32::to_string).collect();
                let (s, are) = if h.missing.len() == 1 {
                    ("", "is")
                } else {
                    ("s", "are")
                };
                return Ok(Err(format!(
                    "chunk{s} {} of its {} chunks {are} missing",
                    list.join(", "),
                    h.count
                )));
            }
            if !h.length_ok {
                return Ok(Err(format!(
                    "its {} chunks do not add up to the length its manifest records",
                    h.count
                )));
            }
        }
        Ok(Ok(value))
    }

    /// Checks the store at `dir`, also when damage keeps it from opening (a damaged tag
    /// dictionary entry, all-time filter, or a set that replay needs): then every value is still
    /// walked, and the failed open is the first finding. A store that opens is checked as by
    /// [`Store::check`]. Errors that are not damage (no store, locked, another format) are
    /// returned as they are.
    pub fn check_dir(dir: impl AsRef<Path>) -> Result<CheckReport> {
        let path = dir.as_ref();
        let open_error = match Store::open(path) {
            Ok(store) => return store.check(),
            Err(
                e @ (StoreError::Damaged { .. }
                | StoreError::DamagedLog { .. }
                | StoreError::AcknowledgedLost { .. }),
            ) => e,
            Err(e) => return Err(e),
        };
        let engine = match SledEngine::open(path) {
            Ok(Some(engine)) => Seam::new(Box::new(engine)),
            Ok(None) => return Err(open_error),
            Err(_) => return Err(open_error),
        };
        // Without the configuration no value can be named or decoded.
        let config = Self::read_config(&engine).map_err(|_| open_error_clone(&open_error))?;
        let mut tags = TagDict::default();
        for entry in engine.prefix(&[keys::TAG]) {
            let Ok((key, value)) = entry else { break };
            let Some(id) = key
                .get(1..5)
                .filter(|_| key.len() == 5)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
            else {
                continue;
            };
            // Ids are positions: a damaged or missing entry keeps its place, named as such, so
            // the ids after it still name their own tags.
            while (tags.names.len() as u32) + 1 < id {
                let missing = tags.names.len() + 1;
                tags.intern(&format!(
                    "tag id {missing} (its dictionary entry is damaged)"
                ));
            }
            match codec::decode::<String>(kinds::TAG.blob, &value) {
                Ok(name) if (tags.names.len() as u32) + 1 == id && tags.id(&name).is_none() => {
                    tags.intern(&name);
                }
                _ if (tags.names.len() as u32) + 1 == id => {
                    tags.intern(&format!("tag id {id} (its dictionary entry is damaged)"));
                }
                _ => {}
            }
        }
        let checkpoint_pos = Self::read_meta::<Checkpoint>(&engine, "checkpoint")
            .ok()
            .flatten()
            .map_or(0, |c| c.log_pos);
        let state = State {
            tags: std::sync::Arc::new(tags),
            next_seq: 0,
            sealed: Vec::new(),
            finisher: None,
            unindexed: Vec::new(),
            open_block: log::BlockBuilder::new(0),
            sets: Default::default(),
            all_time: std::sync::Arc::new(Self::new_all_time(&config)?),
            all_time_pos: 0,
            checkpoint_pos,
            since_checkpoint: 0,
            clock: 0,
            modified: Default::default(),
            newest: None,
            deferred_error: None,
            log_retained_from: None,
            retained_from_unsaved: false,
            importing: false,
            staged: Default::default(),
            stale_staged: Default::default(),
            import_failed: None,
            import_held: None,
            reader_tags: Vec::new(),
            broken: None,
            imported: Default::default(),
            acked: None,
            stored: Default::default(),
        };
        let store = Store::assemble(engine, config, state);
        let mut st = store.lock()?;
        let mut report = store.check_locked(&st);
        // This state was never recovered: nothing may be written from it, the drop's
        // checkpoint included.
        st.broken = Some("opened for a check only".into());
        drop(st);
        if let Ok(report) = &mut report {
            for d in &mut report.damaged {
                if !matches!(d.recovery, Recovery::Unrecoverable { .. }) {
                    d.recovery = Recovery::Unrecoverable {
                        why: "repair cannot run while the store does not open (see the first \
line); the raw log could then rebuild it"
                            .into(),
                    };
                }
            }
            report.damaged.insert(
                0,
                Damage {
                    name: path.display().to_string(),
                    kind: "store",
                    part: None,
                    bucket: None,
                    tag: None,
                    detail: format!("cannot be opened: {open_error}"),
                    recovery: Recovery::Unrecoverable {
                        why: "repair needs a store that opens; the damage that stops it is \
listed here"
                            .into(),
                    },
                    set: None,
                    key: Vec::new(),
                },
            );
        }
        report
    }

    /// Reads every stored value and the log, and lists what is damaged: metadata, the tag
    /// dictionary, every log block (it decodes, and agrees with its index entry on first event,
    /// count and time span; no gaps or overlaps between blocks while nothing was expired), every
    /// part of every sketch set (it decodes and passes its family's checks, its header is
    /// there, its tag is known, its counts agree with each other and with the log), the chunks
    /// of large values (none missing, none left over), and the all-time filter. Changes
    /// nothing. Holds the store's lock throughout, so ingest waits.
    pub fn check(&self) -> Result<CheckReport> {
        let st = self.lock()?;
        self.check_locked(&st)
    }

    fn check_locked(&self, st: &State) -> Result<CheckReport> {
        let mut w = Walk {
            tags: &st.tags,
            damaged: Vec::new(),
            checked: Checked::default(),
            sets: BTreeMap::new(),
            absent: BTreeMap::new(),
            log_damage: Vec::new(),
        };
        let retained_from = self.check_meta(&mut w)?;
        self.check_tags(&mut w)?;
        self.check_all_time(&mut w)?;
        self.check_sets(&mut w)?;
        self.check_staged(&mut w)?;
        self.check_imported(&mut w)?;
        self.check_log(&mut w, st.checkpoint_pos, retained_from)?;
        self.check_set_totals(&mut w, retained_from);
        self.check_orphan_chunks(&mut w)?;
        self.check_unknown_keys(&mut w)?;
        Ok(CheckReport {
            damaged: w.damaged,
            checked: w.checked,
        })
    }

    /// The metadata records; returns the retention cutoff if it reads.
    fn check_meta(&self, w: &mut Walk<'_>) -> Result<Option<i64>> {
        let unfixable = || Recovery::Unrecoverable {
            why: "store metadata is not kept anywhere else".into(),
        };
        let mut retained_from = None;
        let mut seen = BTreeSet::new();
        for entry in self.engine.raw_prefix(&[keys::META]) {
            let (key, raw) = entry?;
            w.checked.metadata += 1;
            let name = String::from_utf8_lossy(&key[1..]).into_owned();
            let label = format!("store metadata '{name}'");
            let bytes = match self.checked_value(&key, raw, &mut w.checked)? {
                Ok(b) => b,
                Err(detail) => {
                    w.add(label, kinds::META, detail, unfixable());
                    continue;
                }
            };
            let meta = kinds::META.blob;
            let outcome: std::result::Result<(), String> = match name.as_str() {
                "format" => match codec::decode::<u32>(meta, &bytes) {
                    Ok(v) if (OLDEST_FORMAT..=FORMAT_VERSION).contains(&v) => Ok(()),
                    Ok(v) => Err(format!(
                        "format {v}, this build reads {OLDEST_FORMAT} to {FORMAT_VERSION}"
                    )),
                    Err(e) => Err(e.to_string()),
                },
                "config" => Self::read_config(&self.engine)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                "checkpoint" => codec::decode::<Checkpoint>(meta, &bytes)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                "retained_from" => codec::decode::<i64>(meta, &bytes)
                    .map(|t| retained_from = Some(t))
                    .map_err(|e| e.to_string()),
                MARKER => codec::decode::<StagedMarker>(meta, &bytes)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                _ => Err("not a record this build writes".into()),
            };
            if let Err(detail) = outcome {
                w.add(label, kinds::META, detail, unfixable());
            }
            seen.insert(name);
        }
        for required in ["format", "config", "checkpoint"] {
            if !seen.contains(required) {
                w.add(
                    format!("store metadata '{required}'"),
                    kinds::META,
                    "missing".into(),
                    unfixable(),
                );
            }
        }
        Ok(retained_from)
    }

    /// The tag dictionary: every entry decodes, ids run 1, 2, ... with no repeat.
    fn check_tags(&self, w: &mut Walk<'_>) -> Result<()> {
        let unfixable = || Recovery::Unrecoverable {
            why: "the log and the sketches hold tag ids only; the names are kept nowhere else"
                .into(),
        };
        let mut expected = 1u32;
        let mut names = BTreeSet::new();
        for entry in self.engine.raw_prefix(&[keys::TAG]) {
            let (key, raw) = entry?;
            w.checked.tags += 1;
            let id = key
                .get(1..5)
                .filter(|_| key.len() == 5)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes);
            let label = match id {
                Some(id) => format!("tag dictionary entry {id}"),
                None => format!("tag dictionary entry under key {key:02x?}"),
            };
            let bytes = match self.checked_value(&key, raw, &mut w.checked)? {
                Ok(b) => b,
                Err(detail) => {
                    w.add(label, kinds::TAG, detail, unfixable());
                    continue;
                }
            };
            match codec::decode::<String>(kinds::TAG.blob, &bytes) {
                Err(e) => w.add(label, kinds::TAG, e.to_string(), unfixable()),
                Ok(name) => {
                    if id != Some(expected) {
                        w.add(
                            format!("{label} ('{name}')"),
                            kinds::TAG,
                            format!("expected id {expected}: the dictionary has a gap"),
                            unfixable(),
                        );
                    } else if !names.insert(name.clone()) {
                        w.add(
                            format!("{label} ('{name}')"),
                            kinds::TAG,
                            "repeats an earlier entry".into(),
                            unfixable(),
                        );
                    }
                }
            }
            expected = id.map_or(expected, |i| i.saturating_add(1));
        }
        Ok(())
    }

    fn check_all_time(&self, w: &mut Walk<'_>) -> Result<()> {
        let Some(raw) = self.engine.get_raw(keys::ALL_TIME)? else {
            return Ok(());
        };
        let unfixable = || Recovery::Unrecoverable {
            why: "repair does not rebuild the all-time filter".into(),
        };
        let name = kinds::ALL_TIME.name.to_string();
        let outcome = match self.checked_value(keys::ALL_TIME, raw, &mut w.checked)? {
            Err(detail) => Err(detail),
            Ok(bytes) => codec::decode::<AllTime>(kinds::ALL_TIME.blob, &bytes)
                .map_err(|e| e.to_string())
                .and_then(|a| a.bloom.validate().map_err(|e| e.to_string())),
        };
        if let Err(detail) = outcome {
            w.add(name, kinds::ALL_TIME, detail, unfixable());
        }
        Ok(())
    }

    /// Every part of every stored set, one value at a time.
    fn check_sets(&self, w: &mut Walk<'_>) -> Result<()> {
        for entry in self.engine.raw_prefix(&[keys::SKETCH]) {
            let (key, raw) = entry?;
            w.checked.parts += 1;
            let (Some((tag, bucket)), Some(part)) = (
                keys::parse_sketch(&key),
                key.get(1).copied().and_then(part_of),
            ) else {
                w.add(
                    format!("sketch key {key:02x?}"),
                    kinds::SKETCH,
                    "not a key this build writes".into(),
                    Recovery::Unrecoverable {
                        why: "unknown to this build; left as it is".into(),
                    },
                );
                continue;
            };
            let seen = w.sets.entry((tag, bucket)).or_default();
            seen.present |= bit(part);
            let had = seen.present;
            let outcome = match self.checked_value(&key, raw, &mut w.checked)? {
                Err(detail) => Err(detail),
                Ok(bytes) => decode_part(part, &bytes, seen),
            };
            // An inline set's parts count as parts too, read from its header.
            w.checked.parts += u64::from((seen.present & !had).count_ones());
            match outcome {
                Ok(()) => seen.sound |= bit(part),
                Err(detail) => {
                    let d = self.set_damage(w.tags, Some(part), (tag, bucket), detail);
                    w.damaged.push(d);
                }
            }
        }
        w.checked.sets = w.sets.len() as u64;
        Ok(())
    }

    /// Every record of imported sketches (`X` keys). The raw log never held their items, so
    /// a damaged one cannot be rebuilt (its set's HLL and Theta parts still hold them, until
    /// the set itself is rebuilt). A record whose set is not stored makes that set's parts
    /// missing, so that repair rebuilds it (from the log, with the record added back).
    fn check_imported(&self, w: &mut Walk<'_>) -> Result<()> {
        for entry in self.engine.raw_prefix(&[keys::IMPORTED]) {
            let (key, raw) = entry?;
            w.checked.parts += 1;
            let Some((tag, bucket)) = keys::parse_imported(&key) else {
                w.add(
                    format!("imported sketches key {key:02x?}"),
                    kinds::IMPORTED,
                    "not a key this build writes".into(),
                    Recovery::Unrecoverable {
                        why: "unknown to this build; left as it is".into(),
                    },
                );
                continue;
            };
            w.sets.entry((tag, bucket)).or_default();
            let outcome = match self.checked_value(&key, raw, &mut w.checked)? {
                Err(detail) => Err(detail),
                Ok(bytes) => super::imported::decode_imported(&bytes).map(drop),
            };
            if let Err(detail) = outcome {
                w.add(
                    self.imported_name(w.tags, tag, bucket),
                    kinds::IMPORTED,
                    detail,
                    Recovery::Unrecoverable {
                        why: "imported sketches are not in the raw log: import their images again (the set's own HLL and Theta still count them unless the set is rebuilt)".into(),
                    },
                );
            }
        }
        Ok(())
    }

    /// Every value an import staged (`G` keys): a store that opened has none (opening moves a
    /// committed import's into place and deletes an uncommitted one's), but a store that does
    /// not open may. Each is decoded as its `S` part would be; a damaged one is named
    /// "staged ..." and is removed by repair (the import that wrote it did not commit, or its
    /// set is rebuilt from the log once it is in place).
    fn check_staged(&self, w: &mut Walk<'_>) -> Result<()> {
        for entry in self.engine.raw_prefix(&[keys::STAGED]) {
            let (key, raw) = entry?;
            w.checked.parts += 1;
            let parsed = keys::committed_of_staged(&key).and_then(|k| {
                let set = keys::parse_sketch(&k)?;
                Some((set, part_of(k[1])?))
            });
            let outcome = match self.checked_value(&key, raw, &mut w.checked)? {
                Err(detail) => Err(detail),
                Ok(bytes) => match parsed {
                    Some((_, part)) => decode_part(part, &bytes, &mut SetSeen::default()),
                    None => Err("not a key this build writes".into()),
                },
            };
            let Err(detail) = outcome else {
                continue;
            };
            let mut d = match parsed {
                Some((set, part)) => {
                    let mut d = self.set_damage(w.tags, Some(part), set, detail);
                    d.name = format!("staged {}", d.name);
                    d.set = None;
                    d
                }
                None => Damage {
                    name: format!("staged sketch key {key:02x?}"),
                    kind: kinds::STAGED.name,
                    part: None,
                    bucket: None,
                    tag: None,
                    detail,
                    recovery: Recovery::Remove,
                    set: None,
                    key: Vec::new(),
                },
            };
            d.kind = kinds::STAGED.name;
            d.recovery = Recovery::Remove;
            d.key = key;
            w.damaged.push(d);
        }
        Ok(())
    }

    /// Every log block against its index entry, the blocks against each other, and each
    /// event counted toward the stored sets that should include it.
    fn check_log(
        &self,
        w: &mut Walk<'_>,
        checkpoint_pos: u64,
        retained_from: Option<i64>,
    ) -> Result<()> {
        let lost = |why: &str| Recovery::Unrecoverable { why: why.into() };
        let mut indexed = BTreeSet::new();
        let mut prev_end: Option<u64> = None;
        for entry in self.engine.raw_prefix(&[keys::INDEX]) {
            let (key, raw) = entry?;
            w.checked.log_blocks += 1;
            let Some(first) = keys::seq_of(&key).filter(|_| key.len() == 9) else {
                w.add(
                    format!("log block index under key {key:02x?}"),
                    kinds::INDEX,
                    "not a key this build writes".into(),
                    lost("unknown to this build; left as it is"),
                );
                continue;
            };
            indexed.insert(first);
            let index_name = format!("log block index at event {first}");
            let unknown_span = |w: &mut Walk<'_>, detail: String| {
                w.add(
                    index_name.clone(),
                    kinds::INDEX,
                    detail,
                    lost("the raw events of its block cannot be placed in time"),
                );
                w.log_damage.push(LogDamage {
                    span: None,
                    name: format!("log block at event {first}"),
                });
            };
            let info = match self.checked_value(&key, raw, &mut w.checked)? {
                Err(detail) => {
                    unknown_span(w, detail);
                    continue;
                }
                Ok(bytes) => match log::BlockInfo::decode(&bytes) {
                    Err(detail) => {
                        unknown_span(w, detail);
                        continue;
                    }
                    Ok(info) if info.first_seq != first => {
                        unknown_span(w, format!("names first event {}", info.first_seq));
                        continue;
                    }
                    Ok(info) => info,
                },
            };
            match prev_end {
                Some(end) if first < end => {
                    w.add(
                        index_name.clone(),
                        kinds::INDEX,
                        format!("overlaps the block before it, which ends at event {end}"),
                        lost("two blocks claim the same events"),
                    );
                    w.log_damage.push(LogDamage {
                        span: None,
                        name: format!("log blocks around event {first}"),
                    });
                }
                // Retention deletes whole blocks, and not only the oldest (late events make old
                // blocks among new ones), so gaps are damage only while nothing was expired.
                Some(end) if first > end && retained_from.is_none() => {
                    w.add(
                        format!("log events {end} to {}", first - 1),
                        kinds::LOG,
                        "missing: no block holds them".into(),
                        lost("their raw events are gone"),
                    );
                    w.log_damage.push(LogDamage {
                        span: None,
                        name: format!("log events {end} to {}", first - 1),
                    });
                }
                None if first > 0 && retained_from.is_none() => {
                    w.add(
                        format!("log events 0 to {}", first - 1),
                        kinds::LOG,
                        "missing: no block holds them".into(),
                        lost("their raw events are gone"),
                    );
                    w.log_damage.push(LogDamage {
                        span: None,
                        name: format!("log events 0 to {}", first - 1),
                    });
                }
                _ => {}
            }
            // Saturating: an index entry is checksummed, but a check must not trust one to stay
            // in range.
            let end = info.first_seq.saturating_add(u64::from(info.count));
            prev_end = Some(prev_end.map_or(end, |e| e.max(end)));
            let name = format!(
                "log block at event {first} ({} events, {} to {}{})",
                info.count,
                time_label(info.min_time),
                time_label(info.max_time),
                info.place.map_or(String::new(), |p| format!(
                    ", in log/{} bytes {}..{}",
                    log::file_name(p.file),
                    p.offset,
                    p.offset + u64::from(p.len)
                ))
            );
            let span = Some((info.min_time, info.max_time));
            let damaged_block = |w: &mut Walk<'_>, detail: String| {
                w.add(
                    name.clone(),
                    kinds::LOG,
                    detail,
                    lost("the raw log is the only copy of its events"),
                );
                w.log_damage.push(LogDamage {
                    span,
                    name: name.clone(),
                });
            };
            let stored = match info.place {
                Some(p) => self
                    .engine
                    .file_read(&log::file_name(p.file), p.offset, p.len as usize)?
                    .ok_or_else(|| "missing: its log file is gone or shorter".to_string()),
                None => match self.engine.get_raw(&keys::log(first))? {
                    Some(raw) => self
                        .checked_value(&keys::log(first), raw, &mut w.checked)?
                        .map_err(|detail| detail.to_string()),
                    None => Err("missing".to_string()),
                },
            };
            let bytes = match stored {
                Ok(b) => b,
                Err(detail) => {
                    damaged_block(w, detail);
                    continue;
                }
            };
            // Counted only once the whole block has decoded, so a block that fails halfway
            // counts nothing.
            let mut events: Vec<(u64, i64, Vec<u32>)> =
                Vec::with_capacity((info.count as usize).min(log::BLOCK_EVENTS));
            let (mut min, mut max) = (i64::MAX, i64::MIN);
            let mut unknown_tag = None;
            let decoded = log::decode_block(&bytes, |ev| {
                min = min.min(ev.time);
                max = max.max(ev.time);
                for &t in ev.tag_ids() {
                    if w.tags.name(t).is_none() {
                        unknown_tag.get_or_insert(t);
                    }
                }
                let bucket = self.config.bucket.bucket_of(ev.time);
                events.push((ev.seq, bucket, ev.tag_ids().to_vec()));
            });
            let problem = match decoded {
                Err(detail) => Some(detail),
                Ok(header)
                    if header
                        != (log::BlockInfo {
                            place: None,
                            ..info
                        }) =>
                {
                    Some(format!(
                        "its header says {} events from event {} ({} to {}), its index entry {} \
from event {}",
                        header.count,
                        header.first_seq,
                        time_label(header.min_time),
                        time_label(header.max_time),
                        info.count,
                        info.first_seq
                    ))
                }
                Ok(_) if info.count > 0 && (min, max) != (info.min_time, info.max_time) => {
                    Some(format!(
                        "its events run from {} to {}, not as its index says",
                        time_label(min),
                        time_label(max)
                    ))
                }
                Ok(_) => unknown_tag.map(|t| {
                    format!("an event carries tag id {t}, which is not in the tag dictionary")
                }),
            };
            if let Some(detail) = problem {
                damaged_block(w, detail);
                continue;
            }
            w.checked.events += events.len() as u64;
            for (seq, bucket, tags) in events {
                for tag in std::iter::once(keys::WHOLE).chain(tags) {
                    match w.sets.get_mut(&(tag, bucket)) {
                        Some(s) if s.log_pos.is_some_and(|p| seq < p) => s.logged += 1,
                        Some(_) => {}
                        None if seq < checkpoint_pos => {
                            *w.absent.entry((tag, bucket)).or_default() += 1;
                        }
                        None => {}
                    }
                }
            }
        }
        // Blocks past the indexed log are written early and wait for the next flush to index
        // them (or, after a crash, for the next open to remove them): not damage.
        let indexed_end = prev_end.unwrap_or(0);
        for entry in self.engine.raw_prefix(&[keys::LOG]) {
            let (key, _) = entry?;
            match keys::seq_of(&key).filter(|_| key.len() == 9) {
                Some(first) if indexed.contains(&first) || first >= indexed_end => {}
                Some(first) => w.add(
                    format!("log block at event {first}"),
                    kinds::LOG,
                    "has no index entry, so nothing reads it".into(),
                    lost("its index entry is lost; left as it is"),
                ),
                None => w.add(
                    format!("log block under key {key:02x?}"),
                    kinds::LOG,
                    "not a key this build writes".into(),
                    lost("unknown to this build; left as it is"),
                ),
            }
        }
        Ok(())
    }

    /// Whether the raw log can rebuild set (tag, bucket), or why not.
    fn set_recovery(
        &self,
        tags: &TagDict,
        log_damage: &[LogDamage],
        retained_from: Option<i64>,
        (tag, bucket): (u32, i64),
    ) -> Recovery {
        if tag != keys::WHOLE && tags.name(tag).is_none() {
            return Recovery::Unrecoverable {
                why: format!("tag id {tag} is not in the tag dictionary"),
            };
        }
        if let Some(from) = retained_from.filter(|&from| bucket < from) {
            return Recovery::Unrecoverable {
                why: format!(
                    "the raw log is kept only from {}; older events were expired",
                    time_label(from)
                ),
            };
        }
        let end = bucket.saturating_add(self.config.bucket.millis());
        for d in log_damage {
            let overlaps = d.span.is_none_or(|(lo, hi)| lo < end && hi >= bucket);
            if overlaps {
                return Recovery::Unrecoverable {
                    why: format!("{} may hold its events and is damaged", d.name),
                };
            }
        }
        Recovery::Rebuild
    }

    /// Per set: every part there, counts that agree with each other and with the log; sets
    /// the log has events for but the store does not; then each set finding's recovery.
    fn check_set_totals(&self, w: &mut Walk<'_>, retained_from: Option<i64>) {
        let mut found = Vec::new();
        for (&set, seen) in &w.sets {
            let (tag, _) = set;
            if tag != keys::WHOLE && w.tags.name(tag).is_none() {
                found.push(self.set_damage(
                    w.tags,
                    None,
                    set,
                    "its tag id is not in the tag dictionary, so no query can reach it".into(),
                ));
            }
            for part in Part::ALL {
                if seen.present & bit(part) == 0 {
                    found.push(self.set_damage(w.tags, Some(part), set, "missing".into()));
                }
            }
            let Some(events) = seen.events else {
                continue;
            };
            let mut disagree = Vec::new();
            if let Some(total) = seen.cms_total.filter(|&t| t != events) {
                disagree.push(format!("its count-min holds {total}"));
            }
            if let Some(n) = seen.reservoir_seen.filter(|&n| n != events) {
                disagree.push(format!("its reservoir has seen {n}"));
            }
            let rebuildable =
                self.set_recovery(w.tags, &w.log_damage, retained_from, set) == Recovery::Rebuild;
            if rebuildable && seen.logged != events {
                disagree.push(format!(
                    "the log holds {} of its events below its position {}",
                    seen.logged,
                    seen.log_pos.unwrap_or(0)
                ));
            }
            if !disagree.is_empty() {
                found.push(self.set_damage(
                    w.tags,
                    Some(Part::Header),
                    set,
                    format!("counts {events} events, but {}", disagree.join(" and ")),
                ));
            }
        }
        for (&set, &n) in &w.absent {
            found.push(self.set_damage(
                w.tags,
                None,
                set,
                format!("missing: the log holds {n} of its events below the checkpoint"),
            ));
        }
        w.damaged.extend(found);
        for d in &mut w.damaged {
            if let Some(set) = d.set {
                d.recovery = self.set_recovery(w.tags, &w.log_damage, retained_from, set);
            }
        }
    }

    /// Chunks whose value no longer names them (left by damage to a manifest).
    fn check_orphan_chunks(&self, w: &mut Walk<'_>) -> Result<()> {
        let mut owner: Option<(Vec<u8>, u32)> = None;
        for entry in self.engine.raw_prefix(&[keys::CHUNK]) {
            let (key, _) = entry?;
            let Some(split) = key.len().checked_sub(4).filter(|&s| s >= 2) else {
                continue;
            };
            let value_key = &key[1..split];
            let index = key[split..]
                .try_into()
                .map(u32::from_be_bytes)
                .unwrap_or(u32::MAX);
            let count = match &owner {
                Some((k, count)) if k == value_key => *count,
                _ => {
                    let count = self
                        .engine
                        .get_raw(value_key)?
                        .map_or(0, |raw| super::seam::Seam::manifest_count(&raw));
                    owner = Some((value_key.to_vec(), count));
                    count
                }
            };
            if index >= count {
                w.damaged.push(Damage {
                    name: format!("chunk {index} of the value under key {value_key:02x?}"),
                    kind: kinds::CHUNK.name,
                    part: None,
                    bucket: None,
                    tag: None,
                    detail: "belongs to no stored value".into(),
                    recovery: Recovery::Remove,
                    set: None,
                    key: key.clone(),
                });
            }
        }
        Ok(())
    }

    /// Keys outside every kind of the registry: the walks above would never see them.
    fn check_unknown_keys(&self, w: &mut Walk<'_>) -> Result<()> {
        let mut prefixes: Vec<u8> = kinds::ALL.iter().map(|k| k.prefix).collect();
        prefixes.sort_unstable();
        let mut start: Vec<u8> = Vec::new();
        for end in prefixes.iter().map(|&p| Some(vec![p])).chain([None]) {
            for entry in self.engine.raw_range(&start, end.as_deref()) {
                let (key, _) = entry?;
                w.add_named(
                    format!("value under key {key:02x?}"),
                    "unknown",
                    "not a kind this build writes".into(),
                    Recovery::Unrecoverable {
                        why: "unknown to this build; left as it is".into(),
                    },
                );
            }
            // The next gap starts after every key with this prefix.
            match end.and_then(|e| super::seam::prefix_end(&e)) {
                Some(next) => start = next,
                None => break,
            }
        }
        Ok(())
    }

    /// Rebuilds every damaged or missing sketch set whose bucket's raw log is retained and
    /// intact, from an empty set through recovery's replay, and writes each in one atomic batch
    /// (all six parts and the header, at the current log position, replacing any stray parts
    /// and chunks); deletes stray chunks; leaves everything else as it is. A rebuilt set that
    /// the log holds no event for is deleted instead. Then checks again: what is still damaged
    /// is what cannot be recovered.
    pub fn repair(&self) -> Result<RepairReport> {
        let mut st = self.lock()?;
        // Everything ingested reaches the log, and every changed set the disk, first: the log
        // is then the whole truth up to `pos`, and no set in memory is newer than its stored
        // form.
        self.checkpoint_locked(&mut st)?;
        let before = self.check_locked(&st)?;
        let targets: BTreeSet<(u32, i64)> = before
            .damaged
            .iter()
            .filter(|d| d.recovery == Recovery::Rebuild)
            .filter_map(|d| d.set)
            .collect();
        let mut report = RepairReport::default();
        if !targets.is_empty() {
            self.rebuild_sets(&mut st, &targets, &mut report)?;
        }
        let mut batch = WriteBatch::default();
        for d in before
            .damaged
            .iter()
            .filter(|d| d.recovery == Recovery::Remove)
        {
            if d.kind == kinds::STAGED.name {
                // With its chunks, if it has any.
                self.engine.delete(&mut batch, d.key.clone())?;
            } else {
                batch.delete(d.key.clone());
            }
            report.removed.push(d.name.clone());
        }
        self.engine.apply(batch)?;
        self.engine.sync()?;
        report.remaining = self.check_locked(&st)?.damaged;
        Ok(report)
    }

    fn rebuild_sets(
        &self,
        st: &mut State,
        targets: &BTreeSet<(u32, i64)>,
        report: &mut RepairReport,
    ) -> Result<()> {
        let pos = st.next_seq;
        for &(tag, bucket) in targets {
            let set = self.empty_set(tag, bucket)?;
            st.clock += 1;
            let active = Active {
                set: std::sync::Arc::new(set),
                log_pos: 0,
                dirty: true,
                last_used: st.clock,
                split: false,
            };
            st.sets.insert((tag, bucket), active);
        }
        if let Err(e) = self.replay_into(st, 0, Some(targets)) {
            for t in targets {
                st.sets.remove(t);
            }
            return Err(e);
        }
        st.clock += 1;
        let clock = st.clock;
        for &(tag, bucket) in targets {
            // Out of memory once written, so a repair never holds more than the budget; the
            // next ingest that needs it reads it back.
            let Some(mut active) = st.sets.remove(&(tag, bucket)) else {
                continue;
            };
            // The log never held the items of sketches imported into the set: they come back
            // from the record kept of them (a damaged record is check's finding, and the set
            // is rebuilt without it).
            let imported = self.read_imported(&st.tags, tag, bucket).ok().flatten();
            if let Some(r) = &imported {
                let merged = r
                    .hll
                    .as_ref()
                    .map_or(Ok(()), |h| Arc::make_mut(&mut active.set).hll.merge(h))
                    .and_then(|()| {
                        r.theta
                            .as_ref()
                            .map_or(Ok(()), |t| Arc::make_mut(&mut active.set).theta.merge(t))
                    });
                merged.map_err(|source| StoreError::Damaged {
                    name: self.imported_name(&st.tags, tag, bucket),
                    source,
                })?;
            }
            // Whatever form the damaged set had goes, then the rebuilt one is written in the
            // form its size calls for (later writes in a batch win).
            let mut batch = WriteBatch::default();
            for part in Part::ALL {
                self.engine
                    .delete(&mut batch, keys::sketch(part, tag, bucket).to_vec())?;
            }
            let keep = active.set.events > 0 || imported.is_some();
            if keep {
                self.put_set(&mut batch, &st.tags, (tag, bucket), &active.set, pos, false)?;
            }
            self.engine.apply(batch)?;
            let stored = Arc::make_mut(&mut st.stored);
            if keep {
                stored.insert((tag, bucket));
            } else {
                stored.remove(&(tag, bucket));
            }
            std::sync::Arc::make_mut(&mut st.modified).insert((tag, bucket), clock);
            report.rebuilt.push(format!(
                "sketch set of bucket {}, {} ({} events{})",
                self.config.bucket.label(bucket),
                Self::tag_label(&st.tags, tag),
                active.set.events,
                match &imported {
                    Some(r) => format!(
                        ", and the {} imported sketch{} kept beside it",
                        r.images,
                        if r.images == 1 { "" } else { "es" }
                    ),
                    None => String::new(),
                }
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;
    use crate::store::{Config, Event, Slice, TimeRange};

    const DAY0: i64 = 1_764_547_200_000;

    fn hll_estimate(store: &Store, slice: &Slice) -> Vec<u8> {
        store
            .merged_hll(slice, &TimeRange::all())
            .expect("hll")
            .sketch
            .expect("some")
            .register_values()
    }

    #[test]
    fn a_clean_store_checks_clean_and_repair_does_nothing() {
        let dir = tempdir("check-clean");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 500)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let report = store.check().expect("check");
        assert!(report.is_clean(), "{:?}", report.damaged);
        assert_eq!(report.checked.events, 500);
        assert_eq!(report.checked.sets, 3);
        assert_eq!(report.checked.parts, 18);
        let repair = store.repair().expect("repair");
        assert!(repair.rebuilt.is_empty() && repair.remaining.is_empty());
        // A key of no known kind, before the first prefix, between two and after the last.
        for key in [&b"0"[..], b"B", b"Z"] {
            poke(&store, key, Some(b"?".to_vec()));
        }
        let report = store.check().expect("check");
        let unknown: Vec<&str> = report.damaged.iter().map(|d| d.kind).collect();
        assert_eq!(unknown, ["unknown"; 3], "{:?}", report.damaged);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_and_missing_sets_are_named_and_rebuilt_from_the_log() {
        let dir = tempdir("check-sets");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 500)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let a = Slice::tag("chain", "a");
        let before = (
            hll_estimate(&store, &a),
            hll_estimate(&store, &Slice::Whole),
        );
        let hll = keys::sketch(Part::Hll, 1, DAY0);
        let mut v = store.engine.get(&hll).expect("get").expect("stored");
        let mid = v.len() / 2;
        v[mid] ^= 0xff;
        poke(&store, &hll, Some(v));
        poke(&store, &keys::sketch(Part::Header, 2, DAY0), None);
        for part in Part::ALL {
            poke(&store, &keys::sketch(part, keys::WHOLE, DAY0), None);
        }
        let report = store.check().expect("check");
        let lines: Vec<String> = report.damaged.iter().map(|d| d.to_string()).collect();
        assert_eq!(report.damaged.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with("hll sketch of bucket 2025-12-01, chain:a:"),
            "{lines:#?}"
        );
        assert!(lines[1].starts_with("header sketch of bucket 2025-12-01, chain:b: missing"));
        assert!(lines[2].starts_with("sketch set of bucket 2025-12-01, whole stream: missing"));
        assert!(report
            .damaged
            .iter()
            .all(|d| d.recovery == Recovery::Rebuild));

        let repair = store.repair().expect("repair");
        assert_eq!(repair.rebuilt.len(), 3, "{repair:?}");
        assert!(repair.remaining.is_empty(), "{:?}", repair.remaining);
        assert!(store.check().expect("check").is_clean());
        let after = (
            hll_estimate(&store, &a),
            hll_estimate(&store, &Slice::Whole),
        );
        assert_eq!(before, after);
        let b = store.count(&Slice::tag("chain", "b"), &TimeRange::all());
        assert_eq!(b.expect("count").0, 250);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn blocks_waiting_for_their_index_are_not_damage_but_a_set_of_an_unknown_tag_is() {
        let dir = tempdir("check-pending");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        // A full block written early (once the blocks framed after it filled), its index entry
        // due with the next flush.
        let blocks = crate::store::log::FRAMED_AHEAD as u64 + 1;
        let n = blocks * crate::store::log::BLOCK_EVENTS as u64 + 5;
        store.ingest_batch(&events(100, n)).expect("ingest");
        let (l, i) = block_keys(&store);
        assert_eq!(l.len(), i.len() + 1, "one block waits for its index entry");
        let report = store.check().expect("check");
        assert!(report.is_clean(), "{:?}", report.damaged);
        // A small set is stored inline: its header value is the whole set.
        let set = store
            .engine
            .get(&keys::sketch(Part::Header, 1, DAY0))
            .expect("get")
            .expect("stored");
        poke(&store, &keys::sketch(Part::Header, 7, DAY0), Some(set));
        let report = store.check().expect("check");
        let lines: Vec<String> = report.damaged.iter().map(|d| d.to_string()).collect();
        assert!(
            lines.iter().any(|l| l.starts_with(
                "sketch set of bucket 2025-12-01, tag id 7 (not in the tag dictionary): its tag id"
            ) && l.contains("cannot be recovered")),
            "{lines:#?}"
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_set_older_than_the_retained_log_is_unrecoverable_and_the_expired_gap_is_no_damage() {
        let dir = tempdir("check-retention");
        let cfg = Config {
            retention_ms: Some(3 * crate::store::model::DAY_MS),
            ..config()
        };
        let store = Store::create(&dir, cfg).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let later = DAY0 + 10 * crate::store::model::DAY_MS;
        let new: Vec<Event> = events(100, 100)
            .into_iter()
            .map(|e| Event {
                time: later + e.time - DAY0,
                ..e
            })
            .collect();
        store.ingest_batch(&new).expect("ingest");
        store.checkpoint().expect("checkpoint");
        // The first block is gone; the second, written by that checkpoint, survives one more.
        store.ingest_batch(&new[..1]).expect("ingest");
        store.checkpoint().expect("checkpoint");
        let (l, _) = block_keys(&store);
        assert!(!l.contains(&0), "the old block was expired: {l:?}");
        assert!(store.check().expect("check").is_clean());
        for (tag, bucket) in [(1, DAY0), (1, later)] {
            poke(
                &store,
                &keys::sketch(Part::Hll, tag, bucket),
                Some(b"x".to_vec()),
            );
        }
        let report = store.check().expect("check");
        let lines: Vec<String> = report.damaged.iter().map(|d| d.to_string()).collect();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with("hll sketch of bucket 2025-12-01, chain:a")
                && lines[0].contains("cannot be recovered: the raw log is kept only from"),
            "{lines:#?}"
        );
        assert!(lines[1].contains("repair rebuilds it"), "{lines:#?}");
        let repair = store.repair().expect("repair");
        assert_eq!(repair.rebuilt.len(), 1);
        assert_eq!(repair.remaining.len(), 1);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_log_block_makes_its_buckets_sets_unrecoverable() {
        let dir = tempdir("check-log");
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 100)).expect("ingest");
        store.flush().expect("flush");
        store.ingest_batch(&events(100, 100)).expect("ingest");
        store.checkpoint().expect("checkpoint");
        // Its last 9 bytes zeroed, as a torn write leaves them.
        damage_block(&store, 100, |b| {
            let n = b.len();
            b[n - 9..].fill(0);
        });
        let hll = keys::sketch(Part::Hll, 1, DAY0);
        poke(&store, &hll, Some(b"garbage".to_vec()));
        // A chunk whose value is gone: left by damage, removed by repair.
        poke(
            &store,
            &keys::chunk(&keys::sketch(Part::Bloom, 9, 0), 0),
            Some(vec![1]),
        );
        let report = store.check().expect("check");
        let lines: Vec<String> = report.damaged.iter().map(|d| d.to_string()).collect();
        assert_eq!(report.damaged.len(), 3, "{lines:#?}");
        assert!(lines
            .iter()
            .any(|l| l.starts_with("log block at event 100 (100 events")));
        assert!(lines.iter().any(
            |l| l.starts_with("hll sketch of bucket 2025-12-01, chain:a")
                && l.contains("cannot be recovered: log block at event 100")
        ));
        assert!(lines
            .iter()
            .any(|l| l.contains("belongs to no stored value")));
        assert_eq!(report.repairable(), 1);
        let repair = store.repair().expect("repair");
        assert!(repair.rebuilt.is_empty());
        assert_eq!(repair.removed.len(), 1);
        assert_eq!(repair.remaining.len(), 2, "{:?}", repair.remaining);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
