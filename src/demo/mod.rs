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
        "{} exists and is not a demo store; the demo only replaces stores it made (remove it, or pass another --db)",
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
            lines.insert(at.min(lines.len()), format!("  … {hidden} more rows"));
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

    fn intro(&mut self, path: &Path) -> Result<()> {
        self.say("sketchdb demo: start from the question")?;
        self.say("══════════════════════════════════════")?;
        self.say(
            "sketchdb keeps small probabilistic summaries (sketches) of a stream of transactions, one
set per day and per chain, next to the raw events, and answers each question with the
structure made for it: a HyperLogLog for \"how many distinct?\", a Bloom filter for \"have we
seen it?\", a Theta sketch for \"how many in both?\", a Count-Min sketch for \"how often?\", a
reservoir for \"show me some\". Every answer says which structure gave it and how wrong it may
be, and where a sketch cannot answer well the engine counts exactly from the raw events.

Below, each question is asked in sketchdb's query language of a store built from synthetic
streams whose true answers are known by construction: the query, sketchdb's answer with its
bound and method, and the truth, with a verdict computed from the two.",
        )?;
        self.say(format!(
            "\nBuilding the store {} from three synthetic streams (seed {}):",
            path.display(),
            self.seed
        ))
    }

    fn build(
        &mut self,
        kind: StreamKind,
        opts: &GenOptions,
        stage: &mut dyn FnMut(Stage<'_>),
    ) -> Result<()> {
        let t = self.truth(kind).clone();
        let what = match kind {
            StreamKind::StreamA => format!(
                "stream A: {} bots send {} transactions each; {} wallets send one",
                num(t.bots as f64),
                num(t.events_per_bot as f64),
                num(t.users as f64)
            ),
            StreamKind::StreamB => format!(
                "stream B: {} wallets send {} transactions each",
                num(t.users as f64),
                num(t.events_per_user.unwrap_or(0) as f64)
            ),
            StreamKind::TwoChains => {
                let per_chain = t.chains.first().map_or(0, |c| c.distinct_wallets);
                format!(
                    "two chains: {} wallets on chain a, {} on chain b, {} of them on both",
                    num(per_chain as f64),
                    num(per_chain as f64),
                    num(t.on_both_chains.unwrap_or(0) as f64)
                )
            }
        };
        self.say(format!("  {}  {what}", opts.date))?;
        let store = self.session.store;
        let s = ingest_stream(store, kind, opts, stage)?;
        self.say(format!(
            "              {} events, {} distinct wallets; ingested as JSONL in {:.2} s ({} events/s)",
            num(s.events as f64),
            num(t.distinct_wallets as f64),
            s.elapsed.as_secs_f64(),
            num(s.events_per_second())
        ))
    }

    fn set_now(&mut self, today: NaiveDate) -> Result<()> {
        self.quietly(&format!("SET NOW = {today}"))?;
        self.say(format!(
            "  The clock is set to {today} (SET NOW = {today}), so \"today\" is the two-chains day."
        ))
    }

    /// HyperLogLog: distinct wallets per day and over all days.
    fn distinct(&mut self) -> Result<()> {
        self.heading("1. How many distinct wallets?  HyperLogLog")?;
        let (registers, size) = (self.sizes.hll_registers, self.sizes.hll_bytes);
        self.say(format!(
            "  A HyperLogLog sees every wallet but keeps only {} small registers ({} a day).
  A wallet that sends 1,800 transactions counts once. The 95% interval comes with the answer.\n",
            num(registers as f64),
            bytes(size)
        ))?;
        for kind in [StreamKind::StreamA, StreamKind::StreamB] {
            let truth = self.truth(kind).distinct_wallets as f64;
            let q = format!("DISTINCT wallets {}", on(kind));
            let label = format!(
                "distinct wallets, stream {}",
                if kind == StreamKind::StreamA {
                    "A"
                } else {
                    "B"
                }
            );
            self.ask_number(&label, &q, truth)?;
        }
        self.say("  Days merge for free (a union of HyperLogLogs is a register-wise max):")?;
        let all: u64 = self.truths.iter().map(|t| t.distinct_wallets).sum();
        self.ask_number(
            "distinct wallets, all days",
            "DISTINCT wallets FROM ALL",
            all as f64,
        )?;
        Ok(())
    }

    /// The reservoir, and why a distinct count must not come from it.
    fn sample_trap(&mut self) -> Result<()> {
        self.heading("2. Why not count the wallets in a sample and scale up?  (the wrong tool)")?;
        let k = num(self.sizes.reservoir as f64);
        self.say(format!(
            "  Each day keeps a uniform sample of {k} of its transactions (a reservoir). Counting the
  distinct wallets in it and multiplying by (transactions / {k}) is the shortcut people try.\n",
        ))?;
        let mut naive = Vec::new();
        let mut bot_share = None;
        for (kind, name) in [(StreamKind::StreamA, "A"), (StreamKind::StreamB, "B")] {
            let q = format!("SAMPLE {} {}", self.sizes.reservoir, on(kind));
            let a = self.ask(&q, if kind == StreamKind::StreamA { 2 } else { 0 })?;
            let Value::List(rows) = &a.value else {
                return Err(DemoError::Unexpected {
                    statement: q,
                    answer: a.to_string(),
                });
            };
            let t = self.truth(kind).clone();
            let distinct: HashSet<&str> = rows
                .iter()
                .filter_map(|r| r.get("wallet").and_then(|w| w.as_str()))
                .collect();
            let scale = t.events as f64 / rows.len().max(1) as f64;
            let estimate = distinct.len() as f64 * scale;
            self.say(format!(
                "    {} distinct wallets in {} transactions, × {} = {}",
                num(distinct.len() as f64),
                num(rows.len() as f64),
                num(scale),
                num(estimate)
            ))?;
            self.record(
                Finding {
                    question: format!("distinct wallets, stream {name}, from a sample"),
                    method: "reservoir ×".to_string() + &num(scale),
                    answer: num(estimate),
                    truth: num(t.distinct_wallets as f64),
                    verdict: Verdict::WrongTool,
                },
                format!(
                    "{} distinct wallets: the estimate is off by {}",
                    num(t.distinct_wallets as f64),
                    rel_error(estimate, t.distinct_wallets as f64)
                ),
            )?;
            naive.push((estimate, t.distinct_wallets as f64));
            if kind == StreamKind::StreamA {
                let bots = rows
                    .iter()
                    .filter(|r| r.get("kind").and_then(|k| k.as_str()) == Some("bot"))
                    .count();
                bot_share = Some((bots, rows.len(), t.bot_share()));
            }
        }
        if let [(est_a, true_a), (est_b, true_b)] = naive[..] {
            let backwards = (est_a < est_b) != (true_a < true_b);
            let verdict = if backwards {
                format!(
                    "  The sample ranks the streams backwards: stream A has {:.1}× as many wallets as B, but the\n  scaled-up sample says {:.2}×.",
                    true_a / true_b,
                    est_a / est_b
                )
            } else {
                format!(
                    "  This sample happens to rank the streams the right way round, but still says {:.2}× where\n  the truth is {:.1}×.",
                    est_a / est_b,
                    true_a / true_b
                )
            };
            self.say(verdict)?;
            self.say(
                "  In stream A, 90% of transactions come from 500 bots, so the one-time wallets that make up\n  almost all of its distinct wallets are only about 100 of the 1,000 sampled: the sample cannot\n  tell a long tail of quiet wallets from none. sketchdb never answers DISTINCT from a sample\n  (a SAMPLE answer says so); section 1 is how it counts.",
            )?;
        }
        if let Some((bots, n, truth)) = bot_share {
            // The share of bot transactions in a uniform sample of n is Binomial(n, p)/n; its 95%
            // normal interval is p̂ ± 1.96·√(p̂(1 − p̂)/n).
            let p = bots as f64 / n.max(1) as f64;
            let half = Z95 * (p * (1.0 - p) / n.max(1) as f64).sqrt();
            self.say("\n  What the sample is good for: questions about transactions.")?;
            self.say(format!(
                "    bot transactions in stream A's sample: {} of {} = {} (95% CI {} – {})",
                num(bots as f64),
                num(n as f64),
                pct(p),
                pct(p - half),
                pct(p + half)
            ))?;
            self.record(
                Finding {
                    question: "share of bot transactions, stream A".into(),
                    method: "reservoir".into(),
                    answer: pct(p),
                    truth: pct(truth),
                    verdict: Verdict::of_bound(truth, p - half, p + half),
                },
                pct(truth),
            )?;
        }
        Ok(())
    }

    /// Asks `PROBES` never-seen wallets and compares the "maybe" rate with the stated one.
    fn probe(&mut self, range: &str, stated: f64, label: &str) -> Result<()> {
        let mut maybes = 0u64;
        for i in 1..=PROBES {
            let q = format!("SEEN {} {range}", never_seen(i));
            let a = self.quietly(&q)?;
            if a.value == Value::Text("maybe".into()) {
                maybes += 1;
            }
        }
        // The count of false "maybe"s is Binomial(PROBES, fpr): accept it within 3.29 standard
        // deviations (99.9%) of PROBES·fpr.
        let n = PROBES as f64;
        let expected = n * stated;
        let sd = (n * stated * (1.0 - stated)).sqrt();
        let verdict = if (maybes as f64 - expected).abs() <= Z999 * sd + 0.5 {
            Verdict::Within
        } else {
            Verdict::Outside
        };
        self.say(format!(
            "    asked about {} wallets that never transacted: {} answered \"maybe\" ({})",
            num(n),
            num(maybes as f64),
            pct(maybes as f64 / n)
        ))?;
        self.record(
            Finding {
                question: format!("false 'maybe' rate, {label}"),
                method: "bloom".into(),
                answer: pct(maybes as f64 / n),
                truth: format!("{} stated", pct(stated)),
                verdict,
            },
            format!(
                "the stated rate is {}, so about {} of {} are expected (99.9%: ±{})",
                pct(stated),
                num(expected),
                num(n),
                num(Z999 * sd)
            ),
        )
    }

    /// Asks SEEN about a wallet that did transact: "maybe" is right, "no" would be a false
    /// negative, which a Bloom filter never gives. Returns the stated false-positive rate.
    fn seen_present(&mut self, question: &str, statement: &str) -> Result<f64> {
        let a = self.ask(statement, 0)?;
        let maybe = a.value == Value::Text("maybe".into());
        self.record(
            Finding {
                question: question.to_string(),
                method: a.method.clone(),
                answer: short(&a),
                truth: "yes".into(),
                verdict: if maybe {
                    Verdict::Within
                } else {
                    Verdict::Outside
                },
            },
            "yes (it did transact; a Bloom filter never says \"no\" to a wallet it holds)".into(),
        )?;
        Ok(a.false_positive_rate.unwrap_or(0.0))
    }

    /// Bloom filters: "no" is certain, "maybe" carries its false-positive rate.
    fn seen(&mut self, w: &Wallets) -> Result<()> {
        self.heading("3. Have we seen wallet X?  Bloom filter")?;
        self.say(format!(
            "  A Bloom filter per day ({}, sized for {} wallets at {}) answers \"no\", which is\n  certain, or \"maybe\", with the chance that a wallet never seen would get \"maybe\" too.\n",
            bytes(self.sizes.bloom_bytes),
            num(self.sizes.bloom_capacity as f64),
            pct(self.sizes.bloom_fpr).replace(".00", "")
        ))?;
        let a_day = on(StreamKind::StreamA);
        self.seen_present(
            "seen: a bot of stream A",
            &format!("SEEN {} {a_day}", w.a_bot),
        )?;
        let q = format!("SEEN {} {a_day}", never_seen(0));
        let a = self.ask(&q, 0)?;
        let no = a.value == Value::Text("no".into());
        self.record(
            Finding {
                question: "seen: a wallet that never transacted".into(),
                method: a.method.clone(),
                answer: short(&a),
                truth: "no".into(),
                // A "maybe" here is a false positive, which the stated rate allows.
                verdict: if no { Verdict::Exact } else { Verdict::Within },
            },
            "no".into(),
        )?;

        let t = self.truth(StreamKind::TwoChains).distinct_wallets;
        let capacity = self.sizes.bloom_capacity;
        self.say(if t > capacity {
            format!(
                "\n  A filter loaded past its size says so. Today's holds {} wallets, sized for {}:",
                num(t as f64),
                num(capacity as f64)
            )
        } else {
            format!(
                "\n  Today's filter holds {} wallets, within the {} it was sized for:",
                num(t as f64),
                num(capacity as f64)
            )
        })?;
        let stated = self.seen_present(
            "seen: a wallet of chain a, today",
            &format!("SEEN {} FROM today", w.chain_a),
        )?;
        let label = if t > capacity {
            "today's overfull filter"
        } else {
            "today's filter"
        };
        self.probe("FROM today", stated, label)?;

        self.say(
            "\n  With no range, the all-time scalable Bloom filter answers; it adds a layer as it fills:",
        )?;
        let stated = self.seen_present(
            "seen: a bot of stream A, all time",
            &format!("SEEN {}", w.a_bot),
        )?;
        self.probe("", stated, "the all-time filter")?;
        Ok(())
    }

    /// Count-Min with Top-K, and the exact fallback for quiet wallets.
    fn frequency(&mut self, w: &Wallets) -> Result<()> {
        self.heading("4. How often does wallet X transact?  Count-Min sketch with Top-K")?;
        let t = self.truth(StreamKind::StreamA).clone();
        let eps = self.session.store.config().sketches.cms_epsilon;
        let bound = eps * t.events as f64;
        self.say(format!(
            "  A Count-Min sketch ({} × {} counters, {} a day) never counts too few, and counts too\n  many by more than ε·N = {} (N = {} transactions that day) with probability at most {}.\n  A heap beside it keeps the {} loudest.\n",
            self.sizes.cms_depth,
            num(self.sizes.cms_width as f64),
            bytes(self.sizes.cms_bytes),
            num(bound),
            num(t.events as f64),
            pct(self.session.store.config().sketches.cms_delta).replace(".00", ""),
            self.sizes.top_k
        ))?;
        let q = format!("TOP 5 wallets {}", on(StreamKind::StreamA));
        let a = self.ask(&q, 5)?;
        let Value::List(rows) = &a.value else {
            return Err(DemoError::Unexpected {
                statement: q,
                answer: a.to_string(),
            });
        };
        let per_bot = t.events_per_bot as f64;
        let counts: Vec<(bool, f64)> = rows
            .iter()
            .map(|r| {
                let item = r.get("item").and_then(|v| v.as_str()).unwrap_or("");
                let count = r.get("count").and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
                (w.bots.contains(item), count)
            })
            .collect();
        let all_bots = counts.iter().all(|&(bot, _)| bot);
        let in_bound = counts
            .iter()
            .all(|&(_, c)| c >= per_bot && c - per_bot <= bound);
        let (lo, hi) = counts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, c)| {
                (lo.min(c), hi.max(c))
            });
        self.record(
            Finding {
                question: "top 5 wallets, stream A".into(),
                method: a.method.clone(),
                answer: format!("{} bots, {}–{}", counts.iter().filter(|c| c.0).count(), num(lo), num(hi)),
                truth: format!("bots, {} each", num(per_bot)),
                verdict: if all_bots && in_bound && counts.len() == rows.len() && !rows.is_empty() {
                    Verdict::Within
                } else {
                    Verdict::Outside
                },
            },
            format!(
                "{} of the 5 are bots, which send {} each; every count is at least that and at most {} over",
                counts.iter().filter(|c| c.0).count(),
                num(per_bot),
                num(bound)
            ),
        )?;

        self.say("\n  One wallet's count, from the sketch alone (the engine's exact fallback turned off):")?;
        let a_day = on(StreamKind::StreamA);
        let q = format!("COUNT {} {a_day}", w.a_bot);
        let a = self.ask_sketch_only(&q, 0)?;
        self.check_number("transactions of a bot, Count-Min", &q, &a, per_bot)?;
        let per_user = t.events_per_user.unwrap_or(1) as f64;
        let q = format!("COUNT {} {a_day}", w.a_user);
        let a = self.ask_sketch_only(&q, 0)?;
        self.check_number(
            "transactions of a one-time wallet, Count-Min",
            &q,
            &a,
            per_user,
        )?;
        let over = self.number(&q, &a)? - per_user;
        self.say(format!(
            "  Over by {}: nothing next to a bot's 1,800, but {}× the truth for a one-time wallet.",
            num(over),
            num((over + per_user) / per_user)
        ))?;
        self.say(
            "  With the fallback on (the default), the engine sees that the interval is wider than ±25% of\n  the answer and, since the raw events are kept, counts exactly instead, and says so:",
        )?;
        self.ask_number("transactions of a one-time wallet", &q, per_user)?;
        Ok(())
    }

    /// Two sets: union by HLL, intersection by Theta or the raw events, never by inclusion–exclusion.
    fn two_sets(&mut self) -> Result<()> {
        self.heading("5. How many wallets used both chains?  Theta sketch, or the raw events")?;
        let t = self.truth(StreamKind::TwoChains).clone();
        let per_chain = t.chains.first().map_or(0, |c| c.distinct_wallets) as f64;
        let both = t.on_both_chains.unwrap_or(0) as f64;
        self.say(format!(
            "  Today {} wallets used chain a and {} used chain b; only {} used both.\n  A union is HyperLogLog's job:\n",
            num(per_chain),
            num(per_chain),
            num(both)
        ))?;
        let union = self.ask_number(
            "wallets on chain a or b, today",
            "DISTINCT wallets ON chain:a OR chain:b FROM today",
            t.distinct_wallets as f64,
        )?;
        self.say(
            "\n  The usual trick for the intersection is |a| + |b| − |a ∪ b| on HyperLogLogs (what a Redis\n  user computes from PFCOUNT):",
        )?;
        let a = self.ask_number(
            "wallets on chain a, today",
            "DISTINCT wallets ON chain:a FROM today",
            per_chain,
        )?;
        let b = self.ask_number(
            "wallets on chain b, today",
            "DISTINCT wallets ON chain:b FROM today",
            per_chain,
        )?;
        let value = |x: &Answer| match x.value {
            Value::Number(v) => v,
            _ => f64::NAN,
        };
        let half = |x: &Answer| (x.upper.unwrap_or(0.0) - x.lower.unwrap_or(0.0)) / 2.0;
        let ie = value(&a) + value(&b) - value(&union);
        self.say(format!(
            "    |a| + |b| − |a ∪ b| = {} + {} − {} = {}",
            num(value(&a)),
            num(value(&b)),
            num(value(&union)),
            num(ie)
        ))?;
        self.record(
            Finding {
                question: "wallets on both chains, by |a|+|b|−|a∪b|".into(),
                method: "hll incl.–excl.".into(),
                answer: num(ie),
                truth: num(both),
                verdict: Verdict::WrongTool,
            },
            format!("{}: off by {}", num(both), rel_error(ie, both)),
        )?;
        self.say(format!(
            "  Each count is good to about ±{:.1}%, but that is ±{}, ±{} and ±{} wallets (95%): the\n  subtraction turns errors that are small next to {} into errors far larger than {}.\n  sketchdb never answers an intersection this way.\n",
            half(&a) / value(&a) * 100.0,
            num(half(&a)),
            num(half(&b)),
            num(half(&union)),
            num(per_chain),
            num(both)
        ))?;
        let q = "DISTINCT wallets ON chain:a AND chain:b FROM today";
        self.say("  A Theta sketch keeps hash values, so it can intersect; alone (fallback off) it says:")?;
        let theta = self.ask_sketch_only(q, 0)?;
        self.check_number("wallets on both chains, Theta", q, &theta, both)?;
        self.say(
            "  That interval is honest but wide: a small overlap is hard for any sketch. So the engine, as it\n  does by default, answers exactly from the raw events:",
        )?;
        self.ask_number("wallets on both chains", q, both)?;
        self.say("\n  A difference is Theta's job too:")?;
        self.ask_number(
            "wallets on chain a but not b, today",
            "DISTINCT wallets ON chain:a EXCEPT chain:b FROM today",
            per_chain - both,
        )?;
        Ok(())
    }

    /// Exact answers: event counts, and EXACT when slightly wrong is not good enough.
    fn exact(&mut self) -> Result<()> {
        self.heading("6. What if slightly wrong is not good enough?  Exact answers")?;
        self.say("  Event counts are kept exactly per day and chain:")?;
        let events: u64 = self.truths.iter().map(|t| t.events).sum();
        self.ask_number("transactions, all days", "COUNT FROM ALL", events as f64)?;
        self.say(
            "  And EXACT answers any question from the raw events, at the cost of reading them (compare the\n  time with section 1's):",
        )?;
        let truth = self.truth(StreamKind::StreamA).distinct_wallets as f64;
        self.ask_number(
            "distinct wallets, stream A, exact",
            &format!("EXACT DISTINCT wallets {}", on(StreamKind::StreamA)),
            truth,
        )?;
        Ok(())
    }

    fn close(&mut self, path: &Path, took: Duration) -> Result<()> {
        self.heading("Summary")?;
        let table = self.report.to_string();
        self.say(table.trim_end())?;
        self.say(format!("\n{}", self.report.conclusion()))?;
        self.say(format!(
            "\nThe demo took {:.1} s. The store stays in {}; explore it in the REPL:\n  sketchdb --db {}\n(try HELP, EXPLAIN DISTINCT wallets ON chain:a AND chain:b FROM today, SHOW SKETCHES).",
            took.as_secs_f64(),
            path.display(),
            path.display()
        ))
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
