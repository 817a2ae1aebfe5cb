//! The demo: builds a store from the reference text's three synthetic streams and asks it the
//! questions of the reference's cheat sheet, printing for each the query, sketchdb's answer with
//! its bound and method, and the true value (known by construction), with a verdict computed
//! from the two. It also shows the two answers people try that sketchdb refuses to give (a
//! distinct count scaled up from a sample, an intersection by HyperLogLog inclusion–exclusion)
//! next to what sketchdb answers instead.
//!
//! This module owns the demo store's directory and the report's wording. It goes through the
//! same doors a user does: `gen` writes JSONL into a pipe that `ingest` reads, and every answer
//! comes from a query string run by a [`Session`]. It must not reach into the store's or the
//! sketches' internals, and it never writes a figure it did not just measure.
//!
//! - this file: options, errors, building the store, and the mechanics of asking a question and
//!   checking its answer (`Demo`);
//! - `questions`: the report's sections and their wording;
//! - [`report`]: findings, verdicts and the summary table.

mod questions;
pub mod report;

pub use report::{Finding, Report, Verdict};

use crate::gen::{self, GenError, GenOptions, StreamKind, Truth};
use crate::ingest::{self, IngestError};
use crate::query::{Answer, QueryError, Session, Value};
use crate::sketch::{BloomFilter, CountMin};
use crate::store::{Config, Store, StoreError};
use chrono::NaiveDate;
use report::{num, rel_error};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The two-chains scale the demo uses by default: the reference's own, 5,000,000 wallets on each
/// chain and 10,000 on both (about 20 s on a 2-core machine; `--scale 0.2` takes about 4 s).
pub const DEFAULT_SCALE: f64 = 1.0;
/// The seed of the streams and of the samples.
pub const DEFAULT_SEED: u64 = 42;
/// The file that marks a directory as a demo store, which the next demo may replace.
pub const MARKER: &str = "sketchdb-demo";
/// Never-seen wallets asked about to measure a Bloom filter's false "maybe" rate.
const PROBES: u64 = 10_000;
/// A `wallet_address` stream id no synthetic stream uses: its wallets never transacted.
const NEVER_SEEN: u64 = 0x00de_ad00;
/// Two-sided 95% and 99.9% normal quantiles.
const Z95: f64 = 1.959_964;
const Z999: f64 = 3.290_527;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DemoOptions {
    /// Scale of the two-chains stream, in (0, 1]; stream A and stream B always run at full size.
    pub scale: f64,
    pub seed: u64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            scale: DEFAULT_SCALE,
            seed: DEFAULT_SEED,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(
        "{} exists and is not a demo store; the demo only replaces stores it made (remove it, or give the demo another directory)",
        path.display()
    )]
    NotADemoStore { path: PathBuf },
    #[error("preparing the demo store at {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Gen(#[from] GenError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("ingesting {stream}: {source}")]
    Ingest {
        stream: StreamKind,
        #[source]
        source: IngestError,
    },
    #[error("`{statement}`: {source}")]
    Query {
        statement: String,
        #[source]
        source: Box<QueryError>,
    },
    #[error("`{statement}` gave an answer of an unexpected shape: {answer}")]
    Unexpected { statement: String, answer: String },
    #[error("writing the report: {0}")]
    Output(#[source] std::io::Error),
}

type Result<T> = std::result::Result<T, DemoError>;

/// The day each stream is dated: stream A, stream B, then two-chains on "today".
const DAYS: [(StreamKind, u32, u32); 3] = [
    (StreamKind::StreamA, 11, 29),
    (StreamKind::StreamB, 11, 30),
    (StreamKind::TwoChains, 12, 1),
];

fn day_of(kind: StreamKind) -> NaiveDate {
    let (_, m, d) = DAYS
        .iter()
        .copied()
        .find(|(k, _, _)| *k == kind)
        .unwrap_or(DAYS[0]);
    NaiveDate::from_ymd_opt(2026, m, d).unwrap_or(NaiveDate::MIN)
}

/// `FROM d TO d`: exactly the stream's day.
fn on(kind: StreamKind) -> String {
    let d = day_of(kind);
    format!("FROM {d} TO {d}")
}

/// Where the demo is while it ingests, for a caller that shows progress (the report itself
/// only says how each ingest ended).
#[derive(Clone, Copy, Debug)]
pub enum Stage<'p> {
    Ingesting {
        stream: StreamKind,
        progress: &'p ingest::Progress,
    },
    Ingested {
        stream: StreamKind,
    },
}

/// Builds the demo store at `path` (replacing an earlier demo store there), writes the report to
/// `out`, and returns what it checked. `stage` hears of each ingest's progress.
pub fn run(
    path: &Path,
    opts: &DemoOptions,
    out: &mut dyn Write,
    stage: &mut dyn FnMut(Stage<'_>),
) -> Result<Report> {
    let started = Instant::now();
    let gen_opts = |kind: StreamKind| GenOptions {
        seed: opts.seed,
        date: day_of(kind),
        scale: if kind == StreamKind::TwoChains {
            opts.scale
        } else {
            1.0
        },
    };
    // Check every stream's options before touching the disk.
    let truths = [
        gen::truth(StreamKind::StreamA, &gen_opts(StreamKind::StreamA))?,
        gen::truth(StreamKind::StreamB, &gen_opts(StreamKind::StreamB))?,
        gen::truth(StreamKind::TwoChains, &gen_opts(StreamKind::TwoChains))?,
    ];
    prepare_dir(path)?;
    let store = Store::create(path, Config::default())?;
    // The reservoirs too, so that the whole report (its samples included) follows from the seed.
    store.seed_samples(opts.seed)?;
    std::fs::write(
        path.join(MARKER),
        "made by `sketchdb demo`; the next demo run replaces this store\n",
    )
    .map_err(|source| DemoError::Dir {
        path: path.to_path_buf(),
        source,
    })?;

    let mut demo = Demo {
        out,
        session: Session::with_seed(&store, opts.seed),
        report: Report::default(),
        truths,
        seed: opts.seed,
        sizes: Sizes::of(&store.config().sketches)?,
    };
    demo.intro(path)?;
    for (kind, _, _) in DAYS {
        demo.build(kind, &gen_opts(kind), stage)?;
    }
    let today = day_of(StreamKind::TwoChains);
    demo.set_now(today)?;
    let wallets = Wallets::of(&gen_opts)?;
    demo.distinct()?;
    demo.sample_trap()?;
    demo.seen(&wallets)?;
    demo.frequency(&wallets)?;
    demo.two_sets()?;
    demo.exact()?;
    demo.close(path, started.elapsed())?;
    Ok(demo.report)
}

/// Makes sure `path` is free for a new store: absent, an empty directory, or an earlier demo
/// store (which is removed). Anything else is refused, so `--db` can never wipe a real store.
fn prepare_dir(path: &Path) -> Result<()> {
    let io = |source| DemoError::Dir {
        path: path.to_path_buf(),
        source,
    };
    if !path.exists() {
        return Ok(());
    }
    if path.join(MARKER).is_file() {
        return std::fs::remove_dir_all(path).map_err(io);
    }
    let empty = path.is_dir() && std::fs::read_dir(path).map_err(io)?.next().is_none();
    if empty {
        Ok(())
    } else {
        Err(DemoError::NotADemoStore {
            path: path.to_path_buf(),
        })
    }
}

/// Generates `kind` as JSONL into a pipe on one thread and ingests it on this one: the path
/// `sketchdb gen … | sketchdb ingest -` takes.
fn ingest_stream(
    store: &Store,
    kind: StreamKind,
    opts: &GenOptions,
    stage: &mut dyn FnMut(Stage<'_>),
) -> Result<ingest::Summary> {
    opts.validate()?;
    let (reader, mut writer) = std::io::pipe().map_err(|source| DemoError::Ingest {
        stream: kind,
        source: IngestError::Io(source),
    })?;
    let opts = *opts;
    std::thread::scope(|scope| {
        // The writer is dropped when the generator returns, which ends the reader's input.
        let producer = scope.spawn(move || gen::write_jsonl(kind, &opts, &mut writer));
        let ingested = ingest::ingest(store, reader, &ingest::Options::default(), &mut |p| {
            stage(Stage::Ingesting {
                stream: kind,
                progress: p,
            })
        });
        stage(Stage::Ingested { stream: kind });
        let produced = producer.join();
        let summary = ingested.map_err(|source| DemoError::Ingest {
            stream: kind,
            source,
        })?;
        match produced {
            Ok(Ok(_)) => Ok(summary),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(DemoError::Ingest {
                stream: kind,
                source: IngestError::Worker,
            }),
        }
    })
}

/// The wallets the questions name, found in the generated streams.
struct Wallets {
    /// Stream A's bots (each sends `events_per_bot` transactions).
    bots: HashSet<String>,
    /// One bot and one one-time wallet of stream A.
    a_bot: String,
    a_user: String,
    /// A wallet of chain a in the two-chains stream.
    chain_a: String,
}

impl Wallets {
    fn of(gen_opts: &dyn Fn(StreamKind) -> GenOptions) -> Result<Wallets> {
        let mut bots = HashSet::new();
        let mut a_user = None;
        for e in gen::events(StreamKind::StreamA, &gen_opts(StreamKind::StreamA))? {
            match e.kind {
                "bot" => {
                    bots.insert(e.wallet.address());
                }
                _ if a_user.is_none() => a_user = Some(e.wallet.address()),
                _ => {}
            }
        }
        let chain_a = gen::events(StreamKind::TwoChains, &gen_opts(StreamKind::TwoChains))?
            .find(|e| e.chain == "a")
            .map(|e| e.wallet.address());
        let mut sorted: Vec<&String> = bots.iter().collect();
        sorted.sort();
        let a_bot = sorted.first().map(|s| s.to_string());
        match (a_bot, a_user, chain_a) {
            (Some(a_bot), Some(a_user), Some(chain_a)) => Ok(Wallets {
                bots,
                a_bot,
                a_user,
                chain_a,
            }),
            _ => Err(DemoError::Unexpected {
                statement: "gen".into(),
                answer: "a stream without bots, users or chain a".into(),
            }),
        }
    }
}

/// A wallet that never transacted in any stream.
fn never_seen(i: u64) -> String {
    gen::wallet_address(NEVER_SEEN, i)
}

/// What one day's sketch set costs under the store's sizing, for the report's prose.
struct Sizes {
    bloom_capacity: u64,
    bloom_fpr: f64,
    bloom_bytes: u64,
    hll_registers: u64,
    hll_bytes: u64,
    cms_width: u64,
    cms_depth: u32,
    cms_bytes: u64,
    top_k: usize,
    reservoir: usize,
}

impl Sizes {
    fn of(c: &crate::sketch::SketchConfig) -> Result<Sizes> {
        let (m, _) =
            BloomFilter::optimal_size(c.bloom_capacity, c.bloom_fpr).map_err(StoreError::Config)?;
        let (cms_width, cms_depth) =
            CountMin::dimensions(c.cms_epsilon, c.cms_delta).map_err(StoreError::Config)?;
        let hll_registers = 1u64 << c.hll_precision;
        Ok(Sizes {
            bloom_capacity: c.bloom_capacity,
            bloom_fpr: c.bloom_fpr,
            bloom_bytes: m.div_ceil(8),
            hll_registers,
            // Dense registers take 6 bits each.
            hll_bytes: hll_registers * 6 / 8,
            cms_width,
            cms_depth,
            // 8-byte counters.
            cms_bytes: cms_width * u64::from(cms_depth) * 8,
            top_k: c.top_k,
            reservoir: c.reservoir_size,
        })
    }
}

/// Bytes as people say them: `12 KB`, `1.2 MB`.
fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0} KB", n / 1e3)
    } else {
        format!("{n} bytes")
    }
}

struct Demo<'a> {
    out: &'a mut dyn Write,
    session: Session<'a>,
    report: Report,
    /// Stream A, stream B, two-chains.
    truths: [Truth; 3],
    seed: u64,
    sizes: Sizes,
}

/// The truth of `kind` among the demo's three.
fn truth_of(truths: &[Truth; 3], kind: StreamKind) -> &Truth {
    match kind {
        StreamKind::StreamA => &truths[0],
        StreamKind::StreamB => &truths[1],
        StreamKind::TwoChains => &truths[2],
    }
}

fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 1.0 {
        format!("{:.0} µs", ms * 1000.0)
    } else if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 10_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

/// An answer, short: `≈ 100,793`, `100,500` or `maybe`.
fn short(a: &Answer) -> String {
    match &a.value {
        Value::Number(v) if a.exact => num(*v),
        Value::Number(v) => format!("≈ {}", num(*v)),
        Value::Text(t) => t.clone(),
        Value::List(items) => format!("{} rows", items.len()),
    }
}

impl Demo<'_> {
    fn say(&mut self, text: impl AsRef<str>) -> Result<()> {
        writeln!(self.out, "{}", text.as_ref()).map_err(DemoError::Output)?;
        self.out.flush().map_err(DemoError::Output)
    }

    fn heading(&mut self, title: &str) -> Result<()> {
        let rule = "─".repeat(title.chars().count());
        self.say(format!("\n{title}\n{rule}"))
    }

    /// Runs a statement without printing it.
    fn quietly(&mut self, statement: &str) -> Result<Answer> {
        self.session
            .query(statement)
            .map_err(|source| DemoError::Query {
                statement: statement.to_string(),
                source: Box::new(source),
            })
    }

    /// Prints the statement as typed at the prompt, runs it, and prints the answer (lists cut
    /// to `rows` rows) with the time it took.
    fn ask(&mut self, statement: &str, rows: usize) -> Result<Answer> {
        self.say(format!("  sketchdb> {statement}"))?;
        let t = Instant::now();
        let answer = self.quietly(statement)?;
        let took = t.elapsed();
        let text = answer.to_string();
        let mut lines: Vec<String> = Vec::new();
        let mut shown = 0;
        let mut hidden = 0;
        for (i, line) in text.lines().enumerate() {
            let is_row = i > 0 && line.starts_with("  {");
            if is_row && shown >= rows {
                hidden += 1;
                continue;
            }
            if is_row {
                shown += 1;
            }
            if line.is_empty() {
                continue;
            }
            lines.push(line.to_string());
        }
        if hidden > 0 {
            let at = 1 + shown;
            // "more" only after rows that are shown.
            let text = if shown > 0 {
                format!(
                    "  … {} more rows",
                    crate::query::answer::thousands(hidden as f64)
                )
            } else {
                format!(
                    "  ({} rows not shown)",
                    crate::query::answer::thousands(hidden as f64)
                )
            };
            lines.insert(at.min(lines.len()), text);
        }
        for line in &lines {
            self.say(format!("    {line}"))?;
        }
        self.say(format!("    ({})", millis(took)))?;
        Ok(answer)
    }

    /// Runs a statement with the exact fallback off: the planner's sketch answers alone.
    fn ask_sketch_only(&mut self, statement: &str, rows: usize) -> Result<Answer> {
        let saved = self.session.options;
        self.session.options.exact_fallback = false;
        let answer = self.ask(statement, rows);
        self.session.options = saved;
        answer
    }

    fn number(&self, statement: &str, a: &Answer) -> Result<f64> {
        match a.value {
            Value::Number(v) => Ok(v),
            _ => Err(DemoError::Unexpected {
                statement: statement.to_string(),
                answer: a.to_string(),
            }),
        }
    }

    fn record(&mut self, finding: Finding, line: String) -> Result<()> {
        self.say(format!("    truth: {line}  {}", finding.verdict.mark()))?;
        if finding.verdict == Verdict::Outside {
            self.say("    (a 95% interval leaves the truth out about one time in twenty; this is such a time)")?;
        }
        self.report.findings.push(finding);
        Ok(())
    }

    /// Checks a numeric answer against the truth: exact answers must equal it, estimates must
    /// hold it inside their stated interval.
    fn check_number(
        &mut self,
        question: &str,
        statement: &str,
        a: &Answer,
        truth: f64,
    ) -> Result<()> {
        let v = self.number(statement, a)?;
        let verdict = if a.exact {
            if v == truth {
                Verdict::Exact
            } else {
                Verdict::Outside
            }
        } else {
            Verdict::of_bound(truth, a.lower.unwrap_or(v), a.upper.unwrap_or(v))
        };
        let line = if a.exact {
            num(truth)
        } else {
            format!(
                "{}, the estimate is off by {}",
                num(truth),
                rel_error(v, truth)
            )
        };
        self.record(
            Finding {
                question: question.to_string(),
                method: a.method.clone(),
                answer: short(a),
                truth: num(truth),
                verdict,
            },
            line,
        )
    }

    /// Asks a numeric question and checks it.
    fn ask_number(&mut self, question: &str, statement: &str, truth: f64) -> Result<Answer> {
        let a = self.ask(statement, 0)?;
        self.check_number(question, statement, &a, truth)?;
        Ok(a)
    }

    fn truth(&self, kind: StreamKind) -> &Truth {
        truth_of(&self.truths, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("sketchdb-demo-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn a_directory_that_is_not_a_demo_store_is_never_replaced() {
        let dir = temp("guard");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("precious"), "keep me").expect("write");
        let mut out = Vec::new();
        let err =
            run(&dir, &DemoOptions::default(), &mut out, &mut |_| {}).expect_err("must refuse");
        assert!(matches!(err, DemoError::NotADemoStore { .. }), "{err}");
        assert!(err.to_string().contains("not a demo store"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("precious"))
                .ok()
                .as_deref(),
            Some("keep me")
        );
        assert!(out.is_empty(), "nothing printed before the refusal");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_scale_is_refused_before_the_disk_is_touched() {
        let dir = temp("scale");
        let mut out = Vec::new();
        let opts = DemoOptions {
            scale: 1.5,
            ..DemoOptions::default()
        };
        let err = run(&dir, &opts, &mut out, &mut |_| {}).expect_err("must refuse");
        assert!(err.to_string().contains("scale"), "{err}");
        assert!(!dir.exists());
    }

    #[test]
    fn prepare_dir_accepts_absent_empty_and_earlier_demo_directories() {
        let dir = temp("prepare");
        prepare_dir(&dir).expect("absent");
        std::fs::create_dir_all(&dir).expect("mkdir");
        prepare_dir(&dir).expect("empty");
        std::fs::write(dir.join(MARKER), "").expect("marker");
        std::fs::write(dir.join("db"), "old").expect("file");
        prepare_dir(&dir).expect("earlier demo");
        assert!(!dir.exists(), "an earlier demo store is removed");
    }

    #[test]
    fn the_days_are_distinct_and_ordered() {
        let a = day_of(StreamKind::StreamA);
        let b = day_of(StreamKind::StreamB);
        let c = day_of(StreamKind::TwoChains);
        assert!(a < b && b < c);
        assert_eq!(on(StreamKind::StreamB), "FROM 2026-11-30 TO 2026-11-30");
    }
}
