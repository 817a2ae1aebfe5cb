//! What the store holds: its configuration, events, buckets and time ranges, and the limits
//! every input is checked against before the store does arithmetic on it.

use super::error::{Result, StoreError};
use crate::sketch::{BloomFilter, CountMin, SketchConfig, SketchSet};
use serde::{Deserialize, Serialize};

/// Milliseconds in an hour and a day.
pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// The earliest event time a store accepts: 0000-01-01T00:00:00Z (Unix milliseconds).
///
/// `MIN_TIME..=MAX_TIME` is the span of RFC 3339's four-digit years, so every bucket has a
/// `YYYY-MM-DD` label the query language can name, and inside it every sum the store forms
/// (a bucket's end, a retention cutoff) stays far from `i64`'s ends.
pub const MIN_TIME: i64 = -62_167_219_200_000;
/// The latest event time a store accepts: 9999-12-31T23:59:59.999Z.
pub const MAX_TIME: i64 = 253_402_300_799_999;
/// How far from zero a [`TimeRange`]'s ends may lie: 2^62 ms, about 146 million years. Every
/// event time is far inside, and rounding an end to its bucket or adding a bucket width to it
/// cannot overflow. The ends of `i64` used as "unbounded" are refused: that is `None`.
pub const RANGE_LIMIT: i64 = 1 << 62;

/// Tag values one event may carry.
pub const MAX_TAGS: usize = 16;

/// The longest a field name may be: a name is a field's name, not data; a longer one is a
/// mistake (a data line read as a header, say).
pub const MAX_NAME_BYTES: usize = 128;

/// The largest stored sketch the configuration may imply (3 MiB). Values reach sled in chunks of
/// at most [`super::VALUE_MAX`], so this no longer guards sled's blob files; it bounds what one
/// set costs to hold, rewrite and read back (a 3 MiB sketch is 192 chunks), and it is the
/// limit every existing store's configuration was accepted under.
pub const MAX_SKETCH_BLOB: u64 = 3 << 20;

/// The storage engine's page cache unless configured otherwise: 64 MiB.
pub const DEFAULT_ENGINE_CACHE_BYTES: u64 = 64 << 20;
/// The smallest engine page cache a configuration may ask for.
pub const MIN_ENGINE_CACHE_BYTES: u64 = 1 << 20;
/// The largest engine page cache a configuration may ask for.
pub const MAX_ENGINE_CACHE_BYTES: u64 = 64 << 30;

/// The width of a time bucket (UTC, by event time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BucketWidth {
    Day,
    Hour,
}

impl BucketWidth {
    pub fn millis(self) -> i64 {
        match self {
            BucketWidth::Day => DAY_MS,
            BucketWidth::Hour => HOUR_MS,
        }
    }

    /// The start of the bucket holding `time` (floor, also for times before 1970). Exact for
    /// every time inside [`RANGE_LIMIT`]; beyond it (where the store refuses times) it saturates
    /// instead of overflowing.
    pub fn bucket_of(self, time: i64) -> i64 {
        time.saturating_sub(time.rem_euclid(self.millis()))
    }

    /// A bucket start as people write it: `YYYY-MM-DD` for days, `YYYY-MM-DDTHH` for hours.
    pub fn label(self, bucket: i64) -> String {
        match chrono::DateTime::from_timestamp_millis(bucket) {
            Some(t) => match self {
                BucketWidth::Day => t.format("%Y-%m-%d").to_string(),
                BucketWidth::Hour => t.format("%Y-%m-%dT%H").to_string(),
            },
            None => format!("@{bucket}ms"),
        }
    }
}

/// A store's configuration, fixed at creation and kept in the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// The field whose value is the item (`wallet`).
    pub item_field: String,
    /// Fields whose values are tags (`chain`); each tag value gets its own sketch sets.
    pub tag_fields: Vec<String>,
    pub bucket: BucketWidth,
    pub sketches: SketchConfig,
    /// Raw events older than this many milliseconds (by event time, against the newest event)
    /// are dropped from the log; sketches are kept. `None` keeps everything.
    pub retention_ms: Option<i64>,
    /// Bytes of sketch sets kept in memory; beyond it, sets are checkpointed and evicted.
    pub memory_budget: usize,
    /// A checkpoint is taken after this many events, bounding the log replayed on open.
    pub checkpoint_every: u64,
    /// Bytes of merged query results (over buckets no longer changing) kept for reuse.
    pub cache_bytes: usize,
    /// Items are lowercased on the way in, and query literals (`SEEN 0xABC`) the same way, so
    /// `0xABC` and `0xabc` are one wallet. Fixed at creation: a store that lowercased some of
    /// its input and not the rest would hold one wallet as two items.
    pub lowercase_items: bool,
    /// Bytes of the storage engine's page cache (sled's cache capacity), outside
    /// `memory_budget`. sled's own default, 1 GiB, was most of a process's memory.
    pub engine_cache_bytes: u64,
}

/// The configuration as stores written before `engine_cache_bytes` hold it (see
/// [`ConfigV1`] for why each old layout is decoded as itself). bincode writes a nested
/// struct's fields in line, so this is exactly version 1's layout and one more field.
#[derive(Deserialize)]
pub(crate) struct ConfigV2 {
    v1: ConfigV1,
    lowercase_items: bool,
}

impl From<ConfigV2> for Config {
    fn from(c: ConfigV2) -> Self {
        Config {
            lowercase_items: c.lowercase_items,
            ..Config::from(c.v1)
        }
    }
}

/// The configuration as stores written before `lowercase_items` existed hold it. bincode is
/// not self-describing, so the old layout (one field shorter) is decoded as itself rather than
/// through `#[serde(default)]`, which bincode 1.3 ignores (it reads every field of a struct
/// and fails at the end of the shorter blob).
#[derive(Deserialize)]
pub(crate) struct ConfigV1 {
    item_field: String,
    tag_fields: Vec<String>,
    bucket: BucketWidth,
    sketches: SketchConfig,
    retention_ms: Option<i64>,
    memory_budget: usize,
    checkpoint_every: u64,
    cache_bytes: usize,
}

impl From<ConfigV1> for Config {
    fn from(c: ConfigV1) -> Self {
        Config {
            item_field: c.item_field,
            tag_fields: c.tag_fields,
            bucket: c.bucket,
            sketches: c.sketches,
            retention_ms: c.retention_ms,
            memory_budget: c.memory_budget,
            checkpoint_every: c.checkpoint_every,
            cache_bytes: c.cache_bytes,
            lowercase_items: false,
            engine_cache_bytes: DEFAULT_ENGINE_CACHE_BYTES,
        }
    }
}

/// Lowercases an item in place (a store's `lowercase_items`); ASCII, the common case of hex
/// wallets, without allocating.
pub fn lowercase_item(item: &mut String) {
    if item.is_ascii() {
        item.make_ascii_lowercase();
    } else if item.chars().any(char::is_uppercase) {
        *item = item.to_lowercase();
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            item_field: "wallet".into(),
            tag_fields: vec!["chain".into()],
            bucket: BucketWidth::Day,
            sketches: SketchConfig::default(),
            retention_ms: None,
            memory_budget: 1 << 30,
            checkpoint_every: 5_000_000,
            cache_bytes: 64 << 20,
            lowercase_items: false,
            engine_cache_bytes: DEFAULT_ENGINE_CACHE_BYTES,
        }
    }
}

impl Config {
    /// Whether the log keeps every event for good (no retention), so that a reservoir may hold
    /// sequence numbers into it ([`Sample::Logged`]) instead of events.
    pub fn keeps_whole_log(&self) -> bool {
        self.retention_ms.is_none()
    }

    /// An item as this store keeps it (see `lowercase_items`).
    pub fn normalise_item<'a>(&self, item: &'a str) -> std::borrow::Cow<'a, str> {
        if self.lowercase_items && item.chars().any(char::is_uppercase) {
            let mut owned = item.to_string();
            lowercase_item(&mut owned);
            std::borrow::Cow::Owned(owned)
        } else {
            std::borrow::Cow::Borrowed(item)
        }
    }

    /// Checks every field, so that a store created with this configuration never later refuses
    /// an event, or its own sketches, for a reason the configuration already implied:
    ///
    /// - names: the item field and each tag field are non-empty identifiers (letters, digits,
    ///   `_`, `-`, `.`, at most [`MAX_NAME_BYTES`]), the forms `ON <field>:<value>` can name;
    ///   no tag field is listed twice or is also the item field;
    /// - counts: at most [`MAX_TAGS`] tag fields, the tags one event may carry;
    /// - sizes: each family's parameters in their own bounds ([`SketchConfig::validate`]), and
    ///   no stored sketch larger than [`MAX_SKETCH_BLOB`];
    /// - budgets: the memory budget holds the sets one event touches (the whole stream's and one
    ///   per tag field) at their largest; otherwise every batch would checkpoint and evict
    ///   everything, and the budget still would not be met;
    /// - retention: positive and at most the supported span of event times;
    /// - checkpoints: at least every event.
    pub fn validate(&self) -> Result<()> {
        self.sketches.validate().map_err(StoreError::Config)?;
        check_name("item field", &self.item_field)?;
        if self.tag_fields.len() > MAX_TAGS {
            return Err(StoreError::ConfigValue(format!(
                "{} tag fields; an event carries at most {MAX_TAGS} tags, so at most {MAX_TAGS} tag fields",
                self.tag_fields.len()
            )));
        }
        for (i, t) in self.tag_fields.iter().enumerate() {
            check_name("tag field", t)?;
            if self.tag_fields[..i].contains(t) {
                return Err(StoreError::ConfigValue(format!(
                    "tag field '{t}' is listed twice"
                )));
            }
        }
        if self.tag_fields.contains(&self.item_field) {
            return Err(StoreError::ConfigValue(format!(
                "'{}' cannot be both the item field and a tag field",
                self.item_field
            )));
        }
        self.check_sizes()?;
        if let Some(r) = self.retention_ms {
            let span = MAX_TIME - MIN_TIME;
            if r <= 0 || r > span {
                return Err(StoreError::ConfigValue(format!(
                    "retention of {r} ms: must be positive and at most the supported span of event times ({span} ms, years 0000 to 9999); to keep every raw event, set no retention"
                )));
            }
        }
        if self.checkpoint_every == 0 {
            return Err(StoreError::ConfigValue(
                "checkpoint interval must be at least 1 event".into(),
            ));
        }
        // Below a few pages sled thrashes on every read; above the limit the bound is no bound.
        if !(MIN_ENGINE_CACHE_BYTES..=MAX_ENGINE_CACHE_BYTES).contains(&self.engine_cache_bytes) {
            return Err(StoreError::ConfigValue(format!(
                "engine cache of {} bytes: must be between {MIN_ENGINE_CACHE_BYTES} (1 MiB) and {MAX_ENGINE_CACHE_BYTES} (64 GiB)",
                self.engine_cache_bytes
            )));
        }
        Ok(())
    }

    /// The stored sketches' sizes and the memory budget (see [`Config::validate`]).
    fn check_sizes(&self) -> Result<()> {
        let s = &self.sketches;
        let (m, _) =
            BloomFilter::optimal_size(s.bloom_capacity, s.bloom_fpr).map_err(StoreError::Config)?;
        let (w, d) =
            CountMin::dimensions(s.cms_epsilon, s.cms_delta).map_err(StoreError::Config)?;
        // A Theta blob stores at most the 15/16 of its 2k slots a rebuild allows, 8 bytes each.
        let theta = u64::from(s.theta_nominal_entries) * 15;
        let blobs = [
            (
                "bloom filter",
                format!("capacity {} at rate {}", s.bloom_capacity, s.bloom_fpr),
                m.div_ceil(8),
            ),
            (
                "count-min table",
                format!("epsilon {}, delta {}", s.cms_epsilon, s.cms_delta),
                w * u64::from(d) * 8,
            ),
            (
                "theta sketch",
                format!("nominal entries {}", s.theta_nominal_entries),
                theta,
            ),
        ];
        for (name, params, bytes) in blobs {
            if bytes > MAX_SKETCH_BLOB {
                return Err(StoreError::ConfigValue(format!(
                    "a {name} of {params} takes {bytes} bytes, over the {MAX_SKETCH_BLOB} one sketch of a set may take"
                )));
            }
        }
        let per_set = SketchSet::<Event>::largest_size_bytes(s).map_err(StoreError::Config)?;
        let sets = 1 + self.tag_fields.len() as u64;
        let needed = per_set.saturating_mul(sets);
        if (self.memory_budget as u64) < needed {
            return Err(StoreError::ConfigValue(format!(
                "memory budget of {} bytes: one event touches {sets} sketch sets of up to {per_set} bytes each, so the budget must be at least {needed} bytes",
                self.memory_budget
            )));
        }
        Ok(())
    }
}

impl Config {
    /// The first setting that decides what a store holds in which `self` and `other` differ,
    /// as `(setting, self's value, other's value)`; `None` when stores of the two can be merged
    /// ([`super::Store::merge_from`]). Compared: the item field, the tag fields (as a set: ids
    /// are per store and events name their tags), the bucket width, every sketch parameter,
    /// retention (it decides whether samples are log positions or events) and item
    /// lowercasing. Not compared: the memory budget, checkpoint interval and cache sizes, which
    /// are how one process runs a store, not what it holds.
    pub fn merge_difference(&self, other: &Config) -> Option<(&'static str, String, String)> {
        let tags = |c: &Config| {
            let mut t = c.tag_fields.clone();
            t.sort();
            t
        };
        let s = &self.sketches;
        let o = &other.sketches;
        let settings: [(&'static str, String, String); 14] = [
            (
                "item field",
                self.item_field.clone(),
                other.item_field.clone(),
            ),
            ("tag fields", tags(self).join(", "), tags(other).join(", ")),
            (
                "bucket width",
                format!("{:?}", self.bucket),
                format!("{:?}", other.bucket),
            ),
            (
                "bloom capacity",
                s.bloom_capacity.to_string(),
                o.bloom_capacity.to_string(),
            ),
            (
                "bloom false-positive rate",
                s.bloom_fpr.to_string(),
                o.bloom_fpr.to_string(),
            ),
            (
                "hll precision",
                s.hll_precision.to_string(),
                o.hll_precision.to_string(),
            ),
            (
                "theta nominal entries",
                s.theta_nominal_entries.to_string(),
                o.theta_nominal_entries.to_string(),
            ),
            (
                "count-min epsilon",
                s.cms_epsilon.to_string(),
                o.cms_epsilon.to_string(),
            ),
            (
                "count-min delta",
                s.cms_delta.to_string(),
                o.cms_delta.to_string(),
            ),
            (
                "count-min update rule",
                update_rule(s.cms_conservative),
                update_rule(o.cms_conservative),
            ),
            ("top-k", s.top_k.to_string(), o.top_k.to_string()),
            (
                "reservoir size",
                s.reservoir_size.to_string(),
                o.reservoir_size.to_string(),
            ),
            (
                "retention",
                retention(self.retention_ms),
                retention(other.retention_ms),
            ),
            (
                "item lowercasing",
                self.lowercase_items.to_string(),
                other.lowercase_items.to_string(),
            ),
        ];
        settings.into_iter().find(|(_, a, b)| a != b)
    }
}

fn update_rule(conservative: bool) -> String {
    if conservative {
        "conservative"
    } else {
        "standard"
    }
    .to_string()
}

fn retention(ms: Option<i64>) -> String {
    ms.map_or_else(
        || "none (every raw event kept)".into(),
        |ms| format!("{ms} ms"),
    )
}

/// A field name the query language can name: see [`Config::validate`].
fn check_name(what: &str, name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.';
    let reason = if name.is_empty() {
        "is empty".to_string()
    } else if name.len() > MAX_NAME_BYTES {
        format!("is longer than {MAX_NAME_BYTES} bytes")
    } else if !name.chars().all(ok_char) {
        "may hold only letters, digits, '_', '-' and '.', the words queries can name a field by"
            .to_string()
    } else {
        return Ok(());
    };
    Err(StoreError::ConfigValue(format!("{what} '{name}' {reason}")))
}

/// Checks an event time against the supported span.
pub(crate) fn check_time(time: i64) -> std::result::Result<(), String> {
    if (MIN_TIME..=MAX_TIME).contains(&time) {
        return Ok(());
    }
    Err(format!(
        "time {time} ms is outside the supported span {MIN_TIME}..={MAX_TIME} ms (years 0000 to 9999)"
    ))
}

/// One record of the stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Event time, Unix milliseconds (UTC).
    pub time: i64,
    /// The item value (the sender wallet).
    pub item: String,
    /// `(tag field, value)` pairs, e.g. `("chain", "a")`.
    pub tags: Vec<(String, String)>,
    /// Every other field, verbatim (a JSON object's text, or empty).
    pub extra: String,
}

impl crate::sketch::HeapSize for Event {
    /// The strings' buffers, so a set's reservoir reports what its events hold.
    fn heap_bytes(&self) -> usize {
        self.item.heap_bytes() + self.tags.heap_bytes() + self.extra.heap_bytes()
    }
}

/// An event as a set's reservoir holds it. A store that keeps its whole log holds the event's
/// sequence number there (8 bytes instead of the event, which took a sampled set's reservoir
/// from most of its bytes to a few KB) and reads the event back when a sample is asked for; a
/// store with retention may drop the log under its samples, so it keeps the events themselves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sample {
    /// The event's sequence number in the log.
    Logged(u64),
    /// The event itself.
    Kept(Box<Event>),
}

impl crate::sketch::HeapSize for Sample {
    fn heap_bytes(&self) -> usize {
        match self {
            Sample::Logged(_) => 0,
            Sample::Kept(e) => std::mem::size_of::<Event>() + e.heap_bytes(),
        }
    }
}

impl Event {
    /// An event with one tag per `(field, value)`.
    pub fn new(time: i64, item: impl Into<String>, tags: &[(&str, &str)]) -> Self {
        Event {
            time,
            item: item.into(),
            tags: tags
                .iter()
                .map(|(f, v)| (f.to_string(), v.to_string()))
                .collect(),
            extra: String::new(),
        }
    }
}

/// A half-open span of event time `[start, end)` in Unix milliseconds; `None` is unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TimeRange {
    pub start: Option<i64>,
    pub end: Option<i64>,
}

impl TimeRange {
    /// All time.
    pub fn all() -> Self {
        TimeRange::default()
    }

    pub fn between(start: i64, end: i64) -> Self {
        TimeRange {
            start: Some(start),
            end: Some(end),
        }
    }

    pub fn contains(&self, time: i64) -> bool {
        self.start.is_none_or(|s| time >= s) && self.end.is_none_or(|e| time < e)
    }

    /// Whether a bucket `[bucket, bucket + width)` overlaps the range.
    pub fn overlaps_bucket(&self, bucket: i64, width: i64) -> bool {
        self.start.is_none_or(|s| bucket + width > s) && self.end.is_none_or(|e| bucket < e)
    }

    pub fn is_all(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }

    /// Refuses ends beyond [`RANGE_LIMIT`] and a start after the end, naming the value.
    pub fn check(&self) -> Result<()> {
        for (what, end) in [("range start", self.start), ("range end", self.end)] {
            if let Some(t) = end {
                if !(-RANGE_LIMIT..=RANGE_LIMIT).contains(&t) {
                    return Err(StoreError::InvalidArgument {
                        what,
                        value: format!("{t} ms"),
                        reason: format!(
                            "range ends must lie within ±{RANGE_LIMIT} ms; for an unbounded side use None"
                        ),
                    });
                }
            }
        }
        if let (Some(s), Some(e)) = (self.start, self.end) {
            if s > e {
                return Err(StoreError::InvalidArgument {
                    what: "range",
                    value: format!("{s}..{e} ms"),
                    reason: "the start is after the end".into(),
                });
            }
        }
        Ok(())
    }
}

/// Which slice of the stream: everything, or one tag value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Slice {
    Whole,
    Tag { field: String, value: String },
}

impl Slice {
    pub fn tag(field: &str, value: &str) -> Self {
        Slice::Tag {
            field: field.into(),
            value: value.into(),
        }
    }

    /// `field:value`, the form used in the tag dictionary and in messages.
    pub fn name(&self) -> String {
        match self {
            Slice::Whole => "whole stream".into(),
            Slice::Tag { field, value } => format!("{field}:{value}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_floor_and_label() {
        let w = BucketWidth::Day;
        let t = 1_764_633_600_000; // 2025-12-02T00:00:00Z
        assert_eq!(w.bucket_of(t + 5), t);
        assert_eq!(w.bucket_of(t - 1), t - DAY_MS);
        assert_eq!(w.label(t), "2025-12-02");
        assert_eq!(BucketWidth::Hour.label(t + 3 * HOUR_MS), "2025-12-02T03");
        assert_eq!(w.bucket_of(-1), -DAY_MS);
    }

    /// Whatever the values, validation answers (never panics), and a configuration it accepts
    /// builds its sets, whose sets for one event fit the memory budget at their largest.
    #[test]
    fn validation_never_panics_and_what_it_accepts_works() {
        use crate::sketch::Sketch;
        use proptest::prelude::*;
        // Each value from its valid range nine times in ten (so that a good share of the
        // configurations are valid throughout and the second half of the check runs), from
        // anywhere otherwise.
        let cap = prop_oneof![9 => 1u64..3_000_000, 1 => any::<u64>()];
        let fpr = prop_oneof![9 => 1e-9f64..0.5, 1 => prop::num::f64::ANY];
        let p = prop_oneof![9 => 4u8..=18, 1 => any::<u8>()];
        let k = prop_oneof![9 => (4u32..=18).prop_map(|lg| 1u32 << lg), 1 => any::<u32>()];
        let eps = prop_oneof![9 => 1e-4f64..0.5, 1 => prop::num::f64::ANY];
        let delta = prop_oneof![9 => 1e-9f64..0.9, 1 => prop::num::f64::ANY];
        let top = prop_oneof![9 => 0usize..=10_000, 1 => any::<usize>()];
        let res = prop_oneof![9 => 0usize..=10_000, 1 => any::<usize>()];
        let tags = prop_oneof![9 => 0usize..=16, 1 => 17usize..40];
        let budget = prop_oneof![9 => 0usize..(1 << 30), 1 => any::<usize>()];
        let retention = prop::option::of(prop_oneof![9 => 1i64..(1 << 50), 1 => any::<i64>()]);
        let config = (
            (cap, fpr, p, k),
            (eps, delta, top, res),
            (tags, budget, retention),
        )
            .prop_map(
                |((cap, fpr, p, k), (eps, delta, top, res), (tags, budget, retention))| Config {
                    tag_fields: (0..tags).map(|i| format!("t{i}")).collect(),
                    sketches: SketchConfig {
                        bloom_capacity: cap,
                        bloom_fpr: fpr,
                        hll_precision: p,
                        theta_nominal_entries: k,
                        cms_epsilon: eps,
                        cms_delta: delta,
                        top_k: top,
                        reservoir_size: res,
                        ..SketchConfig::default()
                    },
                    memory_budget: budget,
                    retention_ms: retention,
                    ..Config::default()
                },
            );
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 2_000,
            ..ProptestConfig::default()
        });
        let accepted = std::sync::atomic::AtomicUsize::new(0);
        runner
            .run(&config, |c| {
                if c.validate().is_ok() {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let set = SketchSet::<Event>::new(&c.sketches).expect("builds");
                    let largest =
                        SketchSet::<Event>::largest_size_bytes(&c.sketches).expect("size");
                    prop_assert!(set.size_bytes() as u64 <= largest);
                    prop_assert!(
                        (c.tag_fields.len() as u64 + 1) * largest <= c.memory_budget as u64
                    );
                    prop_assert!(c.tag_fields.len() <= MAX_TAGS);
                }
                Ok(())
            })
            .expect("validation holds");
        let accepted = accepted.into_inner();
        assert!(
            accepted >= 200,
            "only {accepted} of 2,000 configurations were valid"
        );
    }

    #[test]
    fn ranges_and_configs() {
        let r = TimeRange::between(100, 200);
        assert!(r.contains(100) && !r.contains(200));
        assert!(r.overlaps_bucket(0, 101) && !r.overlaps_bucket(0, 100));
        assert!(TimeRange::all().contains(i64::MIN));
        Config::default().validate().expect("default is valid");
        let bad = Config {
            tag_fields: vec!["wallet".into()],
            ..Config::default()
        };
        assert!(bad.validate().is_err());
        for (cache, ok) in [
            (0, false),
            (MIN_ENGINE_CACHE_BYTES - 1, false),
            (MIN_ENGINE_CACHE_BYTES, true),
            (MAX_ENGINE_CACHE_BYTES, true),
            (MAX_ENGINE_CACHE_BYTES + 1, false),
        ] {
            let c = Config {
                engine_cache_bytes: cache,
                ..Config::default()
            };
            assert_eq!(c.validate().is_ok(), ok, "engine cache {cache}");
        }
    }
}
