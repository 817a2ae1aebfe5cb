//! What the store holds: its configuration, events, buckets and time ranges.

use super::error::{Result, StoreError};
use crate::sketch::SketchConfig;
use serde::{Deserialize, Serialize};

/// Milliseconds in an hour and a day.
pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;

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

    /// The start of the bucket holding `time` (floor, also for times before 1970).
    pub fn bucket_of(self, time: i64) -> i64 {
        time.div_euclid(self.millis()) * self.millis()
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
        }
    }
}

impl Config {
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

    pub fn validate(&self) -> Result<()> {
        self.sketches.validate().map_err(StoreError::Config)?;
        if self.item_field.is_empty() {
            return Err(StoreError::ConfigValue(
                "the item field name is empty".into(),
            ));
        }
        if let Some(t) = self
            .tag_fields
            .iter()
            .find(|t| t.is_empty() || t.contains(':'))
        {
            return Err(StoreError::ConfigValue(format!(
                "tag field '{t}' must be non-empty and contain no ':'"
            )));
        }
        if self.tag_fields.contains(&self.item_field) {
            return Err(StoreError::ConfigValue(format!(
                "'{}' cannot be both the item field and a tag field",
                self.item_field
            )));
        }
        if matches!(self.retention_ms, Some(r) if r <= 0) {
            return Err(StoreError::ConfigValue("retention must be positive".into()));
        }
        if self.checkpoint_every == 0 {
            return Err(StoreError::ConfigValue(
                "checkpoint interval must be at least 1 event".into(),
            ));
        }
        Ok(())
    }
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
    }
}
