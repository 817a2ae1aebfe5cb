//! Input files to store events: JSONL ([`jsonl`]) and CSV ([`csv`]), with field mapping and
//! timestamps as RFC 3339, Unix seconds or milliseconds ([`time`]).
//!
//! This layer owns reading and checking input and reporting bad lines by number, field and
//! reason. It feeds the store through [`Store::import`], so an input goes in whole or not at
//! all: a bad line (without `skip_bad`) leaves the store exactly as it was. It depends on the
//! store only; it prints nothing (the caller gets [`Progress`] and a [`Summary`]).
//!
//! Parsing runs on its own thread, a batch ahead of the store, so a two-core machine reads
//! and ingests at the same time. Whatever ends the ingest early (a bad line, a store error, a
//! panic in the store) stops the parser too, so an ingest always returns.
//!
//! Lines are physical lines (`\n`-terminated, with or without `\r`) counted from 1, in both
//! formats; a CSV record that spans several lines (a quoted field holding a newline) is
//! reported at the line it starts on. A UTF-8 byte-order mark at the start is skipped.

pub mod csv;
pub mod jsonl;
pub mod time;

pub use time::{TimeUnit, Zone};

use crate::hash::{Item, ItemHashes};
use crate::store::{Ahead, BucketWidth, Config, Event, Import, ReaderTags, Store, StoreError};
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::Cell;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Events per batch handed to the store. Every batch in flight holds its lines' strings, so
/// this sets what the batches add to an ingest's memory: about 0.4 MB a batch of `gen chains`
/// lines. Smaller batches are likelier still cached when the store's thread goes over them
/// (several times: keys, pieces, sets, log): against 2,048, the 500k-event contract day took
/// per round 0.89 and 0.95 of the time with 512 (20 interleaved rounds each; 256 0.99, 1,024
/// 0.95–0.96, 4,096 1.02) and peak RSS 146 -> 138 MB, and the `two-chains` 10M file 0.91 (4
/// rounds). Before a piece's log appends stopped taking a thread of their own on two cores,
/// 512 was no better than 2,048; 16,384 had cost 60 MB of RSS and 3-4% of CPU time. Per-batch
/// costs (one channel message, one sum of the sets' sizes in an import) stay small at this size.
pub const BATCH: usize = 512;
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

/// Which input field is which: the time, the item, and each store tag field's source; and how
/// to read times.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapping {
    pub time: String,
    pub item: String,
    /// (store tag field, input field)
    pub tags: Vec<(String, String)>,
    pub unit: TimeUnit,
    /// The zone of times written without an offset (UTC by default).
    pub zone: Zone,
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
            zone: Zone::Utc,
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
    /// 1-based physical line number in the input (where the record starts, for a CSV record
    /// over several lines).
    pub line: u64,
    /// The field at fault, when there is one.
    pub field: Option<String>,
    pub reason: String,
    /// Read as JSONL, this is the first line and it looks like a CSV header: the input is
    /// probably CSV.
    pub looks_like_csv: bool,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "line {}: field '{field}' {}", self.line, self.reason)?,
            None => write!(f, "line {}: {}", self.line, self.reason)?,
        }
        if self.looks_like_csv {
            f.write_str(" (the input looks like CSV, not JSONL)")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A bad line, without [`Options::skip_bad`]. (The message names the option; a front end
    /// with a flag for it says so in its own words, as the CLI does with `--skip-bad`.)
    #[error(
        "{0}; nothing was ingested (the store is unchanged; Options::skip_bad ingests the good lines)"
    )]
    Bad(BadLine),
    #[error("reading the input: {0}; nothing was ingested (the store is unchanged)")]
    Io(#[source] std::io::Error),
    /// Unless the store asks to be reopened (a commit whose outcome is unknown), the ingest
    /// was rolled back whole, and the message says so.
    #[error("{0}{tail}", tail = rolled_back_tail(.0))]
    Store(#[from] StoreError),
    #[error(
        "the ingest thread stopped unexpectedly; nothing was ingested (the store is unchanged)"
    )]
    Worker,
    #[error("internal error (please report): {0}; nothing was ingested (the store is unchanged)")]
    Panic(String),
}

/// What an ingest ended by a store error adds: the store is unchanged, unless the store asks to
/// be reopened because a commit's outcome is unknown.
fn rolled_back_tail(e: &StoreError) -> &'static str {
    if matches!(e, StoreError::MustReopen { .. }) {
        ""
    } else {
        "; nothing was ingested (the store is unchanged)"
    }
}

impl IngestError {
    /// The input was read as JSONL but its first line looks like a CSV header.
    pub fn looks_like_csv(&self) -> bool {
        matches!(self, IngestError::Bad(b) if b.looks_like_csv)
    }
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

/// What an ingest did. Every physical line is one of: an event, a bad line skipped, a header
/// line, a blank line, or a continuation line of a CSV record over several lines, so
/// `lines == events + skipped + header + blank + continued`.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub events: u64,
    /// Physical lines in the input.
    pub lines: u64,
    /// Bad lines left out under `skip_bad`.
    pub skipped: u64,
    /// Lines of the CSV header (0 for JSONL).
    pub header: u64,
    /// Empty or whitespace-only lines.
    pub blank: u64,
    /// Lines after the first of CSV records that span several lines.
    pub continued: u64,
    /// The first bad lines (at most [`REPORTED_ERRORS`]) when `skip_bad` let the rest in.
    pub first_errors: Vec<BadLine>,
    /// Distinct buckets the events fell in.
    pub buckets: usize,
    /// Distinct `field:value` tags the events carried, sorted.
    pub tags: Vec<String>,
    /// The zone that times without an offset were read in.
    pub zone: Zone,
    /// Events whose time had no offset (read in `zone`).
    pub zoned: u64,
    pub elapsed: Duration,
}

impl Summary {
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A batch's tags as the parser numbered them: each event's tag numbers, flattened, and the
/// tags first met in the batch (see [`ReaderTags`]).
type NumberedTags = (Vec<u32>, Vec<(String, String)>);

enum Msg {
    Batch {
        events: Vec<Event>,
        hashes: Vec<ItemHashes>,
        /// The events' tags as the parser numbered them (see [`ReaderTags`]), and the tags
        /// this batch named first; `None` once the numbering ran out of ids.
        tags: Option<NumberedTags>,
        lines: Vec<u64>,
    },
    Bad(BadLine),
    Io(std::io::Error),
    Done(Box<Summary>),
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

/// Counts the bytes read through it (for progress), and stops reading once the store side has
/// given up.
struct Counting<'a, R> {
    inner: R,
    bytes: Arc<AtomicU64>,
    stop: &'a AtomicBool,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the ingest was stopped"));
        }
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What the store side does with one batch. [`ingest`] feeds the store; tests put a failure or
/// a panic in between to check that either one ends the ingest.
type Feed<'f> = dyn FnMut(&mut Import<'_>, &[Event], Ahead<'_>) -> Result<(), StoreError> + 'f;

/// Reads `input` in `options.format` and ingests it into `store` as one unit (see the module
/// docs). `progress` is called after every batch.
///
/// Any failure of the store (an error, or a panic inside it) ends the ingest with that error
/// and the store as it was: the reading thread is told to stop and is waited for, which takes
/// as long as the read it is in (at once for a file; for a pipe, until its writer writes again
/// or closes it).
pub fn ingest(
    store: &Store,
    input: impl Read + Send,
    options: &Options,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Summary, IngestError> {
    ingest_with(
        store,
        input,
        options,
        progress,
        &mut |import, events, ahead| import.ingest_ahead(events, ahead),
    )
}

fn ingest_with(
    store: &Store,
    input: impl Read + Send,
    options: &Options,
    progress: &mut dyn FnMut(&Progress),
    feed: &mut Feed<'_>,
) -> Result<Summary, IngestError> {
    let started = Instant::now();
    let mapping = options
        .mapping
        .clone()
        .unwrap_or_else(|| Mapping::for_config(store.config()));
    let bytes = Arc::new(AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let input = Counting {
        inner: input,
        bytes: Arc::clone(&bytes),
        stop: &stop,
    };
    // Every batch in flight holds its events' strings (about 0.4 MB for `BATCH` lines of
    // `gen chains`), so the batches are part of what an ingest holds besides sets: at most
    // six exist (one being parsed, two waiting, one being applied, two going back for reuse;
    // were 4 waiting and 8 for reuse). One of each cost about 20% of the throughput of a
    // 2M-line two-chains ingest on this VM; two of each no measurable difference (3 runs each).
    let (to_store, from_parser) = sync_channel::<Msg>(2);
    let (recycle, recycled) = sync_channel::<Vec<Event>>(2);
    let lowercase = store.config().lowercase_items;
    std::thread::scope(|scope| {
        let parser = Parser {
            mapping: &mapping,
            skip_bad: options.skip_bad,
            lowercase,
            out: to_store,
            recycled,
            stop: &stop,
            counts: Summary::default(),
            width: store.config().bucket,
            buckets: FxHashSet::default(),
            last_bucket: None,
            tags: Vec::new(),
            named: Some(0),
        };
        let format = options.format;
        let delimiter = options.delimiter.unwrap_or(b',');
        let parser = std::thread::Builder::new()
            .name("sketchdb-parse".into())
            .spawn_scoped(scope, move || match format {
                Format::Jsonl => parser.jsonl(input),
                Format::Csv => parser.csv(input, delimiter),
            })
            .map_err(IngestError::Io)?;
        // Owned by this closure, not borrowed from outside the scope: it must be gone before
        // the scope waits for the parser, or a parser blocked on the full channel after a store
        // error would wait for it forever (and the scope for the parser).
        let from_parser = from_parser;
        let outcome = store.import(|import| {
            // A panic in the store is caught here, inside the import, so that the import rolls
            // back as for any error and the store stays usable.
            let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                feed_store(
                    import,
                    &from_parser,
                    &recycle,
                    &bytes,
                    options,
                    progress,
                    feed,
                )
            }));
            fed.unwrap_or_else(|panic| Err(IngestError::Panic(panic_message(&*panic))))
        });
        stop.store(true, Ordering::Relaxed);
        drop(from_parser);
        let parsed = parser.join();
        match (outcome, parsed) {
            (Err(IngestError::Worker), Err(panic)) => {
                Err(IngestError::Panic(panic_message(&*panic)))
            }
            (outcome, _) => outcome,
        }
    })
    .map(|mut s| {
        s.elapsed = started.elapsed();
        s
    })
}

/// The text of a panic's payload, for the error that reports it.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The store side of [`ingest`]: batches from the parser into the import until the parser is
/// done or anything fails.
fn feed_store(
    import: &mut Import<'_>,
    from_parser: &Receiver<Msg>,
    recycle: &SyncSender<Vec<Event>>,
    bytes: &AtomicU64,
    options: &Options,
    progress: &mut dyn FnMut(&Progress),
    feed: &mut Feed<'_>,
) -> Result<Summary, IngestError> {
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
                tags,
                lines,
            } => {
                let ahead = Ahead {
                    hashes: &hashes,
                    tags: tags.as_ref().map(|(ids, new)| ReaderTags { ids, new }),
                };
                feed(import, &events, ahead).map_err(|e| match e {
                    StoreError::BadEvent { index, reason } => IngestError::Bad(BadLine {
                        line: lines.get(index).copied().unwrap_or(0),
                        field: None,
                        reason,
                        looks_like_csv: false,
                    }),
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
            Msg::Done(summary) => {
                report.lines = summary.lines;
                report.skipped = summary.skipped;
                report.bytes = bytes.load(Ordering::Relaxed);
                report.committing = true;
                progress(&report);
                return Ok(Summary {
                    events: import.events(),
                    ..*summary
                });
            }
        }
    }
}

/// The reading side: lines to batches of events, on its own thread.
struct Parser<'m> {
    mapping: &'m Mapping,
    skip_bad: bool,
    /// Lowercase items (the store's `lowercase_items`), before they are hashed.
    lowercase: bool,
    out: SyncSender<Msg>,
    recycled: Receiver<Vec<Event>>,
    /// Set when the store side has stopped: no point reading on.
    stop: &'m AtomicBool,
    /// The summary's counts (events are counted by the store side).
    counts: Summary,
    width: BucketWidth,
    buckets: FxHashSet<i64>,
    /// The bucket last put in `buckets`.
    last_bucket: Option<i64>,
    /// Every tag sent, numbered from 1 in the order first met: the store maps the numbers to
    /// its ids once per new tag, instead of hashing every event's tag strings on its thread.
    /// Per field, in the order first met: a store has a few tag fields, found by comparing
    /// their names (hashing each event's field names cost as much as the value lookup).
    tags: Vec<(String, FxHashMap<String, u32>)>,
    /// The last number given; `None` once they ran out (the store then reads the strings).
    named: Option<u32>,
}

/// Whether the parser should go on.
enum Flow {
    Go,
    Stop,
}

/// A UTF-8 byte-order mark, which some exporters (Excel among them) write first.
const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Parser<'_> {
    fn fresh_batch(&self) -> Vec<Event> {
        self.recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH))
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Handles a line that is not an event; `Stop` once the input is rejected.
    fn bad(&mut self, bad: BadLine) -> Flow {
        if !self.skip_bad {
            let _ = self.out.send(Msg::Bad(bad));
            return Flow::Stop;
        }
        self.counts.skipped += 1;
        if self.counts.first_errors.len() < REPORTED_ERRORS {
            self.counts.first_errors.push(bad);
        }
        Flow::Go
    }

    /// Counts a parsed event and normalises it as the store wants it.
    fn accept(&mut self, event: &mut Event, zoned: bool) {
        self.counts.zoned += u64::from(zoned);
        if self.lowercase {
            crate::store::lowercase_item(&mut event.item);
        }
    }

    /// Sends a full batch; `Stop` if the store side has gone.
    fn send(&mut self, events: &mut Vec<Event>, used: &mut usize, lines: &mut Vec<u64>) -> Flow {
        let mut batch = std::mem::replace(events, self.fresh_batch());
        batch.truncate(*used);
        *used = 0;
        let lines = std::mem::take(lines);
        // Hashing and numbering tags here rather than on the store's thread takes SHA-256,
        // MurmurHash3 (about 95 ns an event) and the tag lookups off the side that bounds the
        // pipeline.
        let mut ids = Vec::with_capacity(2 * batch.len());
        let mut new = Vec::new();
        for e in &batch {
            self.tally(e, &mut ids, &mut new);
        }
        let hashes = batch
            .iter()
            .map(|e| Item::new(e.item.as_bytes()).hashes)
            .collect();
        match self.out.send(Msg::Batch {
            events: batch,
            hashes,
            tags: self.named.map(|_| (ids, new)),
            lines,
        }) {
            Ok(()) => Flow::Go,
            Err(_) => Flow::Stop,
        }
    }

    fn done(mut self) {
        let mut tags: Vec<String> = std::mem::take(&mut self.tags)
            .into_iter()
            .flat_map(|(f, vs)| vs.into_keys().map(move |v| format!("{f}:{v}")))
            .collect();
        tags.sort();
        let summary = Summary {
            buckets: self.buckets.len(),
            tags,
            zone: self.mapping.zone,
            ..self.counts
        };
        let _ = self.out.send(Msg::Done(Box::new(summary)));
    }

    /// Notes the bucket and tags of an event about to be sent, for the summary, and its tags'
    /// numbers in `ids`, naming in `new` the tags it is the first to carry.
    fn tally(&mut self, e: &Event, ids: &mut Vec<u32>, new: &mut Vec<(String, String)>) {
        // Events come in time order mostly, so most share the previous one's bucket.
        let bucket = self.width.bucket_of(e.time);
        if self.last_bucket != Some(bucket) {
            self.buckets.insert(bucket);
            self.last_bucket = Some(bucket);
        }
        for (f, v) in &e.tags {
            let field = match self.tags.iter().position(|(name, _)| name == f) {
                Some(i) => i,
                None => {
                    self.tags.push((f.clone(), FxHashMap::default()));
                    self.tags.len() - 1
                }
            };
            let values = &mut self.tags[field].1;
            if let Some(&id) = values.get(v.as_str()) {
                ids.push(id);
                continue;
            }
            let id = self.named.and_then(|n| n.checked_add(1));
            self.named = id;
            values.insert(v.clone(), id.unwrap_or(0));
            ids.push(id.unwrap_or(0));
            new.push((f.clone(), v.clone()));
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
        // The first line with anything on it, until it has been read.
        let mut first = true;
        loop {
            if self.stopped() {
                return;
            }
            // A line whole in the reader's buffer is read where it is (copying each line out
            // first cost 29M instructions per 100k chain lines); one that crosses the buffer's
            // end, or the file's last line without a newline, is gathered into `line`.
            let buffered = match reader.fill_buf() {
                Ok(buf) => memchr::memchr(b'\n', buf).map(|n| n + 1),
                Err(e) => {
                    let _ = self.out.send(Msg::Io(e));
                    return;
                }
            };
            // The bytes to consume once the line is read: 0 for a line gathered into `line`
            // (`read_until` consumed it already).
            let whole = match buffered {
                Some(n) => n,
                None => {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) => break,
                        Ok(_) => 0,
                        Err(e) => {
                            let _ = self.out.send(Msg::Io(e));
                            return;
                        }
                    }
                }
            };
            self.counts.lines += 1;
            let mut text: &[u8] = match whole {
                0 => &line,
                n => reader.buffer().get(..n).unwrap_or_default(),
            };
            if self.counts.lines == 1 {
                text = text.strip_prefix(BOM).unwrap_or(text);
            }
            while let [rest @ .., b'\n' | b'\r'] = text {
                text = rest;
            }
            if text.iter().all(u8::is_ascii_whitespace) {
                self.counts.blank += 1;
                reader.consume(whole);
                continue;
            }
            let number = self.counts.lines;
            let slot = Self::slot(&mut events, used);
            match jsonl::parse_line(text, number, self.mapping, slot) {
                Ok(zoned) => {
                    let event = &mut events[used];
                    self.accept(event, zoned);
                    used += 1;
                    lines.push(number);
                }
                Err(mut bad) => {
                    bad.looks_like_csv = first && csv::looks_like_header(text);
                    if let Flow::Stop = self.bad(bad) {
                        return;
                    }
                }
            }
            first = false;
            reader.consume(whole);
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
        let tail = Rc::new(Tail::default());
        let input = TailReader {
            inner: input,
            tail: Rc::clone(&tail),
        };
        let mut reader = ::csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .has_headers(true)
            // Column counts are checked here, so a short row is reported by line, not fatal.
            .flexible(true)
            // Records end at `\n` alone, so that a CRLF line ends on its `\n` and the next
            // record's position is on the next line (with the default CRLF terminator, csv
            // reports every record after the first one line too early); the `\r` left at the
            // end of the last field is trimmed with the rest of its white space.
            .terminator(::csv::Terminator::Any(b'\n'))
            .from_reader(BufReader::with_capacity(1 << 20, input));
        let header = match reader.byte_headers() {
            Ok(h) => h.clone(),
            Err(e) => {
                let _ = self.out.send(Self::csv_error(e, 1));
                return;
            }
        };
        if header.is_empty() {
            self.counts.lines = tail.lines(reader.position().line());
            self.counts.blank = self.counts.lines;
            self.done();
            return;
        }
        let header_lines = spanned(&header);
        let header_line = tail.start_line(reader.position(), header_lines);
        // Blank lines before the header count as blank (below); its own lines as header.
        self.counts.header = header_lines;
        let columns = match csv::Columns::from_header(&header, header_line, self.mapping) {
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
        // Lines that records (good, bad or blank) start on.
        let mut record_lines = 0u64;
        loop {
            if self.stopped() {
                return;
            }
            match reader.read_byte_record(&mut record) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    let line = e.position().map_or(reader.position().line(), |p| p.line());
                    let msg = Self::csv_error(e, line);
                    match msg {
                        Msg::Bad(bad) => {
                            record_lines += 1;
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
            let span = spanned(&record);
            let number = tail.start_line(reader.position(), span);
            record_lines += 1;
            self.counts.continued += span - 1;
            // A line of white space alone (`\r` of a blank CRLF line, or spaces) is a record of
            // one empty field to csv; it is a blank line here, as in JSONL.
            if record.len() == 1 && record[0].trim_ascii().is_empty() {
                self.counts.blank += 1;
                record_lines -= 1;
                continue;
            }
            match columns.parse(&record, number, self.mapping, Self::slot(&mut events, used)) {
                Ok(zoned) => {
                    let event = &mut events[used];
                    self.accept(event, zoned);
                    used += 1;
                    lines.push(number);
                }
                Err(mut bad) => {
                    if span > 1 {
                        bad.reason.push_str(&format!(
                            " (the record starts on this line and spans {span} lines, to line {})",
                            number + span - 1
                        ));
                    }
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
        self.counts.lines = tail.lines(reader.position().line());
        // Whatever no record, header or blank record took: empty lines, which csv skips.
        let accounted = self.counts.header + record_lines + self.counts.continued;
        self.counts.blank += self
            .counts
            .lines
            .saturating_sub(accounted + self.counts.blank);
        self.done();
    }

    fn csv_error(e: ::csv::Error, line: u64) -> Msg {
        match e.into_kind() {
            ::csv::ErrorKind::Io(io) => Msg::Io(io),
            ::csv::ErrorKind::Utf8 { err, .. } => Msg::Bad(BadLine {
                line,
                field: None,
                reason: format!("is not UTF-8 text ({err})"),
                looks_like_csv: false,
            }),
            other => Msg::Bad(BadLine {
                line,
                field: None,
                reason: format!("bad CSV: {other:?}"),
                looks_like_csv: false,
            }),
        }
    }
}

/// Physical lines a CSV record (or header) covers: one, plus one per newline inside its
/// quoted fields.
fn spanned(record: &::csv::ByteRecord) -> u64 {
    1 + record.as_slice().iter().filter(|&&b| b == b'\n').count() as u64
}

/// How far the CSV input has been read, which csv does not say: its positions count the
/// newlines consumed, but a record's own position is taken before the empty lines csv skips
/// ahead of it, so a record's line is worked out from where it ends instead.
#[derive(Default)]
struct Tail {
    read: Cell<u64>,
    /// The last byte read, if any.
    last: Cell<Option<u8>>,
}

impl Tail {
    /// The line a record (or header) of `span` lines starts on, given the reader's position
    /// right after it: a record ends at a newline, or at the end of the input without one.
    fn start_line(&self, after: &::csv::Position, span: u64) -> u64 {
        let at_end_without_newline =
            after.byte() >= self.read.get() && self.last.get() != Some(b'\n');
        (after.line() + u64::from(at_end_without_newline)).saturating_sub(span)
    }

    /// Physical lines in the whole input, from csv's line counter at its end (one more than the
    /// newlines read): an input that ends with a newline has no line after it.
    fn lines(&self, line_counter: u64) -> u64 {
        match self.last.get() {
            None => 0,
            Some(b'\n') => line_counter.saturating_sub(1),
            Some(_) => line_counter,
        }
    }
}

struct TailReader<R> {
    inner: R,
    tail: Rc<Tail>,
}

impl<R: Read> Read for TailReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(&last) = buf[..n].last() {
            self.tail.last.set(Some(last));
            self.tail.read.set(self.tail.read.get() + n as u64);
        }
        Ok(n)
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

    /// Gives at most a few bytes a read, so nearly every line crosses the end of the parser's
    /// buffer and is gathered rather than read in place.
    struct Trickle<'a> {
        data: &'a [u8],
        reads: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            let n = (self.reads % 13 + 1).min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// The store's events as (time, item, tags, extra), in log order.
    fn logged(store: &Store) -> Vec<(i64, String, Vec<u32>, Vec<u8>)> {
        let mut out = Vec::new();
        store
            .scan(&Slice::Whole, &TimeRange::all(), |e| {
                out.push((
                    e.time,
                    e.item.to_text(),
                    e.tag_ids().to_vec(),
                    e.extra.to_vec(),
                ))
            })
            .expect("scan");
        out
    }

    #[test]
    fn lines_read_in_the_buffer_and_lines_gathered_across_it_are_the_same_lines() {
        // A byte order mark, CRLF and LF lines, blank and white-space lines, extra fields,
        // and a last line without its newline.
        let mut text = String::from("\u{feff}");
        for (i, line) in lines(400, None).lines().enumerate() {
            text.push_str(&line.replace("\"kind\"", &format!("\"n\":{i},\"kind\"")));
            text.push_str(if i % 3 == 0 { "\r\n" } else { "\n" });
            if i % 57 == 1 {
                text.push_str("\n  \t\r\n");
            }
        }
        text.truncate(text.trim_end().len());
        let mut results = Vec::new();
        for trickle in [false, true] {
            let dir = tempdir(if trickle { "trickle" } else { "whole" });
            let store = Store::create(&dir, Config::default()).expect("create");
            let summary = if trickle {
                let reader = Trickle {
                    data: text.as_bytes(),
                    reads: 0,
                };
                ingest(&store, reader, &Options::default(), &mut |_| {})
            } else {
                ingest(&store, text.as_bytes(), &Options::default(), &mut |_| {})
            }
            .expect("ingest");
            // Two blank lines after lines 1, 58, …, 343.
            assert_eq!((summary.events, summary.lines), (400, 400 + 2 * 7));
            assert_eq!(summary.blank, 2 * 7);
            results.push(logged(&store));
        }
        assert_eq!(results[0].len(), 400);
        assert_eq!(results[0], results[1]);
        // A bad line is named by the same number either way.
        let bad = lines(300, Some(123));
        for reader in [
            Box::new(bad.as_bytes()) as Box<dyn Read + Send>,
            Box::new(Trickle {
                data: bad.as_bytes(),
                reads: 0,
            }),
        ] {
            let dir = tempdir("trickle-bad");
            let store = Store::create(&dir, Config::default()).expect("create");
            match ingest(&store, reader, &Options::default(), &mut |_| {}) {
                Err(IngestError::Bad(b)) => assert_eq!(b.line, 123),
                other => panic!("unexpected {other:?}"),
            }
        }
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

    /// Runs `ingest_with` on a thread of its own (not a scoped one, which the test would have
    /// to join) and waits at most a minute: a hang fails the test instead of stalling the suite.
    fn ingest_within_a_minute(
        store: &Arc<Store>,
        text: String,
        fail_at_batch: usize,
        panic: bool,
    ) -> Result<Summary, IngestError> {
        let (done, result) = std::sync::mpsc::channel();
        let store = Arc::clone(store);
        std::thread::spawn(move || {
            let mut batch = 0;
            let r = ingest_with(
                &store,
                text.as_bytes(),
                &Options::default(),
                &mut |_| {},
                &mut |import, events, ahead| {
                    batch += 1;
                    if batch == fail_at_batch {
                        if panic {
                            panic!("injected store panic at batch {batch}");
                        }
                        return Err(StoreError::DamagedLog {
                            name: "injected blob".into(),
                            detail: format!("failure at batch {batch}"),
                        });
                    }
                    import.ingest_ahead(events, ahead)
                },
            );
            let _ = done.send(r);
        });
        result
            .recv_timeout(Duration::from_secs(60))
            .expect("the ingest did not end within a minute of the store failing")
    }

    #[test]
    fn a_store_error_or_panic_mid_input_ends_the_ingest_and_leaves_the_store_as_it_was() {
        let dir = tempdir("store-fails");
        let store = Arc::new(Store::create(&dir, Config::default()).expect("create"));
        ingest(
            &store,
            lines(1000, None).as_bytes(),
            &Options::default(),
            &mut |_| {},
        )
        .expect("good input");
        let tags_before = store.tags().expect("tags");
        // 200,000 lines are 13 batches: the store fails on the third while the parser has
        // more than the channel's four left to send.
        for panic in [false, true] {
            let err = ingest_within_a_minute(&store, lines(200_000, None), 3, panic)
                .expect_err("store failed");
            match (&err, panic) {
                (IngestError::Store(e), false) => {
                    assert!(e.to_string().contains("failure at batch 3"), "{e}")
                }
                (IngestError::Panic(m), true) => {
                    assert!(m.contains("injected store panic at batch 3"), "{m}")
                }
                (other, _) => panic!("unexpected {other}"),
            }
            assert!(err.to_string().contains("store is unchanged"), "{err}");
            assert_eq!(count(&store), 1000, "panic: {panic}");
            assert_eq!(store.tags().expect("tags"), tags_before);
        }
        // The store is still usable, and nothing of the failed inputs reaches the disk.
        let s = ingest_within_a_minute(&store, lines(20_000, None), 0, false).expect("ingest");
        assert_eq!(s.events, 20_000);
        store.flush().expect("flush");
        drop(store);
        let store = Store::open(&dir).expect("reopen");
        assert_eq!(count(&store), 21_000);
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

    #[test]
    fn a_store_error_claims_the_store_unchanged_only_when_it_is() {
        let path = std::path::PathBuf::from("/s/tx.db");
        let unknown = IngestError::Store(StoreError::MustReopen {
            path: path.clone(),
            reason: "the commit was written but not confirmed durable".into(),
        });
        assert!(!unknown.to_string().contains("unchanged"), "{unknown}");
        let rolled_back = IngestError::Store(StoreError::Locked {
            path,
            held_by: crate::store::holder::HeldBy::Unknown,
        });
        assert!(
            rolled_back.to_string().contains("the store is unchanged"),
            "{rolled_back}"
        );
    }
}
