//! Input files to store events: JSONL ([`jsonl`]) and CSV ([`csv`]), with field mapping and
//! timestamps as RFC 3339, Unix seconds or milliseconds ([`time`]).
//!
//! This layer owns reading and checking input and reporting bad lines by number, field and
//! reason. It feeds the store through [`Store::import`], so an input goes in whole or not at
//! all: a bad line (without `skip_bad`) leaves the store exactly as it was. It depends on the
//! store only; it prints nothing (the caller gets [`Progress`] and a [`Summary`]).
//!
//! Parsing runs on its own thread, a batch ahead of the store, so a two-core machine reads
//! and ingests at the same time.

pub mod csv;
pub mod jsonl;
pub mod time;

pub use time::TimeUnit;

use crate::hash::{Item, ItemHashes};
use crate::store::{BucketWidth, Config, Event, Store, StoreError};
use rustc_hash::{FxHashMap, FxHashSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Events per batch handed to the store.
pub const BATCH: usize = 16_384;
/// Bad lines kept for the report under `skip_bad`.
pub const REPORTED_ERRORS: usize = 10;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Jsonl,
    Csv,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            _ => Err(format!("unknown format '{s}' (expected jsonl or csv)")),
        }
    }
}

/// Which input field is which: the time, the item, and each store tag field's source.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapping {
    pub time: String,
    pub item: String,
    /// (store tag field, input field)
    pub tags: Vec<(String, String)>,
    pub unit: TimeUnit,
}

impl Mapping {
    /// Input fields named as the store's: `time`, the item field and the tag fields.
    pub fn for_config(config: &Config) -> Self {
        Mapping {
            time: "time".into(),
            item: config.item_field.clone(),
            tags: config
                .tag_fields
                .iter()
                .map(|t| (t.clone(), t.clone()))
                .collect(),
            unit: TimeUnit::Auto,
        }
    }

    /// Reads input field `source` as store field `store` (the item field or a tag field).
    pub fn rename(&mut self, config: &Config, store: &str, source: &str) -> Result<(), String> {
        if store == config.item_field {
            self.item = source.to_string();
        } else if let Some(t) = self.tags.iter_mut().find(|(s, _)| s == store) {
            t.1 = source.to_string();
        } else {
            return Err(format!(
                "'{store}' is neither the item field ({}) nor a tag field ({}) of this store",
                config.item_field,
                config.tag_fields.join(", ")
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub format: Format,
    pub mapping: Option<Mapping>,
    /// Ingest the good lines and report the bad ones, instead of rejecting the input.
    pub skip_bad: bool,
    /// CSV field delimiter (default `,`).
    pub delimiter: Option<u8>,
    /// The input's size in bytes, when known, for the progress report.
    pub total_bytes: Option<u64>,
}

/// A line that could not be read as an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line number in the input.
    pub line: u64,
    /// The field at fault, when there is one.
    pub field: Option<String>,
    pub reason: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "line {}: field '{field}' {}", self.line, self.reason),
            None => write!(f, "line {}: {}", self.line, self.reason),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(
        "{0}; nothing was ingested (the store is unchanged; --skip-bad ingests the good lines)"
    )]
    Bad(BadLine),
    #[error("reading the input: {0}; nothing was ingested (the store is unchanged)")]
    Io(#[source] std::io::Error),
    #[error("{0}; nothing was ingested (the store is unchanged)")]
    Store(#[from] StoreError),
    #[error(
        "the ingest thread stopped unexpectedly; nothing was ingested (the store is unchanged)"
    )]
    Worker,
}

/// How far an ingest has come, reported after every batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    pub bytes: u64,
    pub total_bytes: Option<u64>,
    pub lines: u64,
    pub events: u64,
    pub skipped: u64,
    /// The input is read and checked; what remains is the commit (one atomic, synced write).
    pub committing: bool,
}

/// What an ingest did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub events: u64,
    pub lines: u64,
    pub skipped: u64,
    /// The first bad lines (at most [`REPORTED_ERRORS`]) when `skip_bad` let the rest in.
    pub first_errors: Vec<BadLine>,
    /// Distinct buckets the events fell in.
    pub buckets: usize,
    /// Distinct `field:value` tags the events carried, sorted.
    pub tags: Vec<String>,
    pub elapsed: Duration,
}

impl Summary {
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

enum Msg {
    Batch {
        events: Vec<Event>,
        hashes: Vec<ItemHashes>,
        lines: Vec<u64>,
    },
    Bad(BadLine),
    Io(std::io::Error),
    Done {
        lines: u64,
        skipped: u64,
        first_errors: Vec<BadLine>,
        buckets: usize,
        tags: Vec<String>,
    },
}

/// Sets tag `n` of a recycled event to `(field, value)`, reusing the strings already there: a
/// fresh pair of `String`s per tag per line was a malloc and a free each on the parser thread.
fn set_tag(tags: &mut Vec<(String, String)>, n: usize, field: &str, value: &str) {
    match tags.get_mut(n) {
        Some((f, v)) => {
            f.clear();
            f.push_str(field);
            v.clear();
            v.push_str(value);
        }
        None => tags.push((field.to_string(), value.to_string())),
    }
}

/// Counts the bytes read through it, for progress.
struct Counting<R> {
    inner: R,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads `input` in `options.format` and ingests it into `store` as one unit (see the module
/// docs). `progress` is called after every batch.
pub fn ingest(
    store: &Store,
    input: impl Read + Send,
    options: &Options,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Summary, IngestError> {
    let started = Instant::now();
    let mapping = options
        .mapping
        .clone()
        .unwrap_or_else(|| Mapping::for_config(store.config()));
    let bytes = Arc::new(AtomicU64::new(0));
    let input = Counting {
        inner: input,
        bytes: Arc::clone(&bytes),
    };
    let (to_store, from_parser) = sync_channel::<Msg>(4);
    let (recycle, recycled) = sync_channel::<Vec<Event>>(8);
    std::thread::scope(|scope| {
        let parser = Parser {
            mapping: &mapping,
            skip_bad: options.skip_bad,
            out: to_store,
            recycled,
            lines: 0,
            skipped: 0,
            first_errors: Vec::new(),
            width: store.config().bucket,
            buckets: FxHashSet::default(),
            tags: FxHashMap::default(),
        };
        let format = options.format;
        let delimiter = options.delimiter.unwrap_or(b',');
        let spawned = std::thread::Builder::new()
            .name("sketchdb-parse".into())
            .spawn_scoped(scope, move || match format {
                Format::Jsonl => parser.jsonl(input),
                Format::Csv => parser.csv(input, delimiter),
            });
        if let Err(e) = spawned {
            return Err(IngestError::Io(e));
        }
        store.import(|import| {
            let mut report = Progress {
                total_bytes: options.total_bytes,
                ..Progress::default()
            };
            loop {
                let msg = from_parser.recv().map_err(|_| IngestError::Worker)?;
                match msg {
                    Msg::Batch {
                        events,
                        hashes,
                        lines,
                    } => {
                        import
                            .ingest_hashed(&events, &hashes)
                            .map_err(|e| match e {
                                StoreError::BadEvent { index, reason } => {
                                    IngestError::Bad(BadLine {
                                        line: lines.get(index).copied().unwrap_or(0),
                                        field: None,
                                        reason,
                                    })
                                }
                                other => IngestError::Store(other),
                            })?;
                        report.events = import.events();
                        report.lines = lines.last().copied().unwrap_or(report.lines);
                        report.bytes = bytes.load(Ordering::Relaxed);
                        progress(&report);
                        let _ = recycle.try_send(events);
                    }
                    Msg::Bad(bad) => return Err(IngestError::Bad(bad)),
                    Msg::Io(e) => return Err(IngestError::Io(e)),
                    Msg::Done {
                        lines,
                        skipped,
                        first_errors,
                        buckets,
                        tags,
                    } => {
                        report.lines = lines;
                        report.skipped = skipped;
                        report.bytes = bytes.load(Ordering::Relaxed);
                        report.committing = true;
                        progress(&report);
                        return Ok(Summary {
                            events: import.events(),
                            lines,
                            skipped,
                            first_errors,
                            buckets,
                            tags,
                            elapsed: Duration::ZERO,
                        });
                    }
                }
            }
        })
        // Dropping the receiver (on any error) stops the parser at its next send.
    })
    .map(|mut s| {
        s.elapsed = started.elapsed();
        s
    })
}

/// The reading side: lines to batches of events, on its own thread.
struct Parser<'m> {
    mapping: &'m Mapping,
    skip_bad: bool,
    out: SyncSender<Msg>,
    recycled: Receiver<Vec<Event>>,
    lines: u64,
    skipped: u64,
    first_errors: Vec<BadLine>,
    width: BucketWidth,
    buckets: FxHashSet<i64>,
    tags: FxHashMap<String, FxHashSet<String>>,
}

/// Whether the parser should go on.
enum Flow {
    Go,
    Stop,
}

impl Parser<'_> {
    fn fresh_batch(&self) -> Vec<Event> {
        self.recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH))
    }

    /// Handles one parsed (or failed) line; `Stop` once the input is rejected.
    fn bad(&mut self, bad: BadLine) -> Flow {
        if !self.skip_bad {
            let _ = self.out.send(Msg::Bad(bad));
            return Flow::Stop;
        }
        self.skipped += 1;
        if self.first_errors.len() < REPORTED_ERRORS {
            self.first_errors.push(bad);
        }
        Flow::Go
    }

    /// Sends a full batch; `Stop` if the store side has gone.
    fn send(&mut self, events: &mut Vec<Event>, used: &mut usize, lines: &mut Vec<u64>) -> Flow {
        let mut batch = std::mem::replace(events, self.fresh_batch());
        batch.truncate(*used);
        *used = 0;
        let lines = std::mem::take(lines);
        // Hashing here rather than on the store's thread takes SHA-256 and MurmurHash3 (about
        // 95 ns an event) off the side that bounds the pipeline.
        for e in &batch {
            self.tally(e);
        }
        let hashes = batch
            .iter()
            .map(|e| Item::new(e.item.as_bytes()).hashes)
            .collect();
        match self.out.send(Msg::Batch {
            events: batch,
            hashes,
            lines,
        }) {
            Ok(()) => Flow::Go,
            Err(_) => Flow::Stop,
        }
    }

    fn done(self) {
        let mut tags: Vec<String> = self
            .tags
            .into_iter()
            .flat_map(|(f, vs)| vs.into_iter().map(move |v| format!("{f}:{v}")))
            .collect();
        tags.sort();
        let _ = self.out.send(Msg::Done {
            lines: self.lines,
            skipped: self.skipped,
            first_errors: self.first_errors,
            buckets: self.buckets.len(),
            tags,
        });
    }

    /// Notes the bucket and tags of an event about to be sent, for the summary.
    fn tally(&mut self, e: &Event) {
        self.buckets.insert(self.width.bucket_of(e.time));
        for (f, v) in &e.tags {
            let known = self.tags.get(f.as_str()).is_some_and(|s| s.contains(v));
            if !known {
                self.tags.entry(f.clone()).or_default().insert(v.clone());
            }
        }
    }

    /// The event slot to fill next, reusing the strings of a recycled batch.
    fn slot(events: &mut Vec<Event>, used: usize) -> &mut Event {
        if used == events.len() {
            events.push(Event::new(0, String::new(), &[]));
        }
        &mut events[used]
    }

    fn jsonl(mut self, input: impl Read) {
        let mut reader = BufReader::with_capacity(1 << 20, input);
        let mut line = Vec::with_capacity(256);
        let mut events = self.fresh_batch();
        let mut used = 0;
        let mut lines: Vec<u64> = Vec::with_capacity(BATCH);
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    let _ = self.out.send(Msg::Io(e));
                    return;
                }
            }
            self.lines += 1;
            let mut text: &[u8] = &line;
            while let [rest @ .., b'\n' | b'\r'] = text {
                text = rest;
            }
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let number = self.lines;
            match jsonl::parse_line(text, number, self.mapping, Self::slot(&mut events, used)) {
                Ok(()) => {
                    used += 1;
                    lines.push(number);
                }
                Err(bad) => {
                    if let Flow::Stop = self.bad(bad) {
                        return;
                    }
                }
            }
            if used == BATCH {
                if let Flow::Stop = self.send(&mut events, &mut used, &mut lines) {
                    return;
                }
            }
        }
        if used > 0 {
            if let Flow::Stop = self.send(&mut events, &mut used, &mut lines) {
                return;
            }
        }
        self.done();
    }

    fn csv(mut self, input: impl Read, delimiter: u8) {
        let mut reader = ::csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .has_headers(true)
            // Column counts are checked here, so a short row is reported by line, not fatal.
            .flexible(true)
            .from_reader(BufReader::with_capacity(1 << 20, input));
        let header = match reader.byte_headers() {
            Ok(h) => h.clone(),
            Err(e) => {
                let _ = self.out.send(Self::csv_error(e, 1));
                return;
            }
        };
        if header.is_empty() {
            self.done();
            return;
        }
        let columns = match csv::Columns::from_header(&header, self.mapping) {
            Ok(c) => c,
            Err(bad) => {
                let _ = self.out.send(Msg::Bad(bad));
                return;
            }
        };
        let mut record = ::csv::ByteRecord::new();
        let mut events = self.fresh_batch();
        let mut used = 0;
        let mut lines: Vec<u64> = Vec::with_capacity(BATCH);
        loop {
            match reader.read_byte_record(&mut record) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    let line = e.position().map_or(self.lines + 1, |p| p.line());
                    let msg = Self::csv_error(e, line);
                    match msg {
                        Msg::Bad(bad) => {
                            if let Flow::Stop = self.bad(bad) {
                                return;
                            }
                            continue;
                        }
                        other => {
                            let _ = self.out.send(other);
                            return;
                        }
                    }
                }
            }
            let number = record.position().map_or(self.lines + 1, |p| p.line());
            self.lines = number;
            match columns.parse(&record, number, self.mapping, Self::slot(&mut events, used)) {
                Ok(()) => {
                    used += 1;
                    lines.push(number);
                }
                Err(bad) => {
                    if let Flow::Stop = self.bad(bad) {
                        return;
                    }
                }
            }
            if used == BATCH {
                if let Flow::Stop = self.send(&mut events, &mut used, &mut lines) {
                    return;
                }
            }
        }
        if used > 0 {
            if let Flow::Stop = self.send(&mut events, &mut used, &mut lines) {
                return;
            }
        }
        self.done();
    }

    fn csv_error(e: ::csv::Error, line: u64) -> Msg {
        match e.into_kind() {
            ::csv::ErrorKind::Io(io) => Msg::Io(io),
            ::csv::ErrorKind::Utf8 { err, .. } => Msg::Bad(BadLine {
                line,
                field: None,
                reason: format!("is not UTF-8 text ({err})"),
            }),
            other => Msg::Bad(BadLine {
                line,
                field: None,
                reason: format!("bad CSV: {other:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Slice, TimeRange};

    fn tempdir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sketchdb-ingest-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn lines(n: u64, bad_at: Option<u64>) -> String {
        let mut s = String::new();
        for i in 1..=n {
            if Some(i) == bad_at {
                s.push_str("{\"time\":\"2026-12-01T00:00:00Z\",\"wallet\":\"0xdead\"\n");
            } else {
                s.push_str(&format!(
                    "{{\"time\":{},\"wallet\":\"0x{:x}\",\"chain\":\"{}\",\"kind\":\"user\"}}\n",
                    1_764_547_200 + i as i64,
                    i % 997,
                    if i % 2 == 0 { "a" } else { "b" }
                ));
            }
        }
        s
    }

    fn count(store: &Store) -> u64 {
        store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count")
            .0
    }

    #[test]
    fn a_bad_line_rejects_the_input_and_leaves_the_store_as_it_was() {
        let dir = tempdir("bad");
        let store = Store::create(&dir, Config::default()).expect("create");
        let first = ingest(
            &store,
            lines(3000, None).as_bytes(),
            &Options::default(),
            &mut |_| {},
        )
        .expect("good input");
        assert_eq!(
            (first.events, first.buckets, first.tags.len()),
            (3000, 1, 2)
        );
        let tags_before = store.tags().expect("tags");
        let buckets_before = store.buckets().expect("buckets");
        let err = ingest(
            &store,
            lines(40_000, Some(33_333)).as_bytes(),
            &Options::default(),
            &mut |_| {},
        )
        .expect_err("bad line");
        match &err {
            IngestError::Bad(b) => {
                assert_eq!(b.line, 33_333);
                assert!(b.reason.contains("bad JSON"), "{b}");
            }
            other => panic!("unexpected {other}"),
        }
        assert!(err.to_string().contains("store is unchanged"), "{err}");
        assert_eq!(count(&store), 3000);
        assert_eq!(store.tags().expect("tags"), tags_before);
        assert_eq!(store.buckets().expect("buckets"), buckets_before);
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(
            count(&store),
            3000,
            "nothing of the rejected input reached the disk"
        );
        // And the store still takes input afterwards.
        ingest(
            &store,
            lines(10, None).as_bytes(),
            &Options::default(),
            &mut |_| {},
        )
        .expect("good input after a rejected one");
        assert_eq!(count(&store), 3010);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn skip_bad_ingests_the_good_lines_and_reports_the_first_errors() {
        let dir = tempdir("skip");
        let store = Store::create(&dir, Config::default()).expect("create");
        let mut text = lines(20_000, Some(5));
        text.push_str("{\"time\":\"soon\",\"wallet\":\"0x1\"}\n\n{\"wallet\":\"0x2\"}\n");
        let options = Options {
            skip_bad: true,
            ..Options::default()
        };
        let mut last = Progress::default();
        let s = ingest(&store, text.as_bytes(), &options, &mut |p| last = *p).expect("skip");
        assert_eq!((s.events, s.skipped, s.lines), (19_999, 3, 20_003));
        let at: Vec<(u64, Option<&str>)> = s
            .first_errors
            .iter()
            .map(|b| (b.line, b.field.as_deref()))
            .collect();
        assert_eq!(
            at,
            vec![(5, None), (20_001, Some("time")), (20_003, Some("time"))]
        );
        assert_eq!(last.events, 19_999);
        assert_eq!(last.bytes, text.len() as u64);
        assert_eq!(count(&store), 19_999);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn csv_with_renamed_fields_and_a_short_row() {
        let dir = tempdir("csv");
        let store = Store::create(&dir, Config::default()).expect("create");
        let mut mapping = Mapping::for_config(store.config());
        mapping.time = "ts".into();
        mapping
            .rename(store.config(), "wallet", "from")
            .expect("item");
        mapping
            .rename(store.config(), "chain", "network")
            .expect("tag");
        assert!(mapping.rename(store.config(), "fee", "x").is_err());
        let options = Options {
            format: Format::Csv,
            mapping: Some(mapping),
            ..Options::default()
        };
        let good = "ts,from,network,fee\n2026-12-01T10:00:00Z,0xa,a,1\n1764590400,0xb,b,2\n";
        let s = ingest(&store, good.as_bytes(), &options, &mut |_| {}).expect("csv");
        assert_eq!(
            (s.events, s.lines, s.tags.clone()),
            (2, 3, vec!["chain:a".into(), "chain:b".into()])
        );
        let bad = "ts,from,network,fee\n2026-12-01T10:00:00Z,0xa,a,1\n2026-12-01T11:00:00Z,0xc\n";
        let e = ingest(&store, bad.as_bytes(), &options, &mut |_| {}).expect_err("short row");
        assert!(
            e.to_string()
                .contains("line 3: has 2 columns, the header has 4"),
            "{e}"
        );
        assert_eq!(count(&store), 2);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
