//! The `sketchdb` command: the CLI of SPEC.md over the library. It parses arguments, opens the
//! store, and turns every error into one line on stderr and a non-zero exit code (1 for a failed
//! command, 2 for bad usage); nothing here decides an answer.

use clap::{Args, Parser, Subcommand};
use sketchdb::gen::{self, GenOptions, StreamKind};
use sketchdb::ingest::{self, Format, IngestError, Mapping, TimeUnit, Zone};
use sketchdb::query::Session;
use sketchdb::shell::serve;
use sketchdb::shell::{self, ShellError, ShellOptions};
use sketchdb::sketch::SketchConfig;
use sketchdb::store::model::DAY_MS;
use sketchdb::store::{BucketWidth, Config, HeldBy, Store, StoreError};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const DEFAULT_DB: &str = "./sketchdb.db";
const DEMO_DB: &str = "./sketchdb-demo.db";

#[derive(Parser)]
#[command(
    name = "sketchdb",
    version,
    about = "Probabilistic sketches over an event stream: ask a question, get an answer with its bound",
    long_about = "sketchdb keeps time-bucketed sketches (Bloom, HyperLogLog, Theta, Count-Min with Top-K, \
reservoir) of a stream of transactions, plus the raw events, and answers a small query language \
with the structure made for each question, saying how wrong the answer may be.\n\n\
With no command it opens the REPL on the store.\n\n\
One process holds a store at a time. While a REPL holds it, `query` and other REPLs read it \
through that REPL (read-only; a Unix socket in the store directory), and `ingest`, `repair` and \
`check` ask it to let the store go (it opens the store again at its next statement). Any other \
holder is named (pid and command) when a command finds the store held; --wait SECONDS waits \
for it.",
    after_help = "Examples:\n  sketchdb demo                                   build a demo store and run the cheat sheet\n  \
sketchdb --db tx.db init\n  sketchdb gen stream-a | sketchdb --db tx.db ingest -\n  \
sketchdb --db tx.db query \"DISTINCT wallets FROM ALL\"\n  sketchdb --db tx.db                             open the REPL\n  \
sketchdb --db tx.db check                       list damaged values (exit 1 if any)"
)]
struct Cli {
    /// The store directory [default: ./sketchdb.db; ./sketchdb-demo.db for demo]
    #[arg(long, global = true, value_name = "DIR", env = "SKETCHDB_DB")]
    db: Option<PathBuf>,
    /// When another process holds the store, wait up to this long for it (seconds, e.g. 5 or
    /// 0.5) instead of failing at once. A REPL holding the store needs no wait: `query` and
    /// the REPL read through it, and writers ask it to let the store go
    #[arg(long, global = true, value_name = "SECONDS", value_parser = parse_wait)]
    wait: Option<Duration>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new, empty store
    #[command(
        after_help = "Example:\n  sketchdb --db tx.db init --item wallet --tag chain --bucket day"
    )]
    Init(InitArgs),
    /// Ingest a JSONL or CSV file (or stdin) into the store, all lines or none
    #[command(
        after_help = "Examples:\n  sketchdb --db tx.db ingest events.jsonl\n  \
sketchdb gen two-chains --scale 0.1 | sketchdb --db tx.db ingest -\n  \
sketchdb --db tx.db ingest --format csv --time-field ts --field wallet=from --field chain=network txs.csv"
    )]
    Ingest(IngestArgs),
    /// Answer one statement, or statements from stdin (one per line, one answer per line)
    #[command(
        after_help = "Examples:\n  sketchdb --db tx.db query \"DISTINCT wallets ON chain:a AND chain:b\"\n  \
sketchdb --db tx.db query --json --now 2026-12-01 \"SEEN 0x52908400098527886e0f7030069857d2e4169ee7 FROM today\"\n  \
printf 'COUNT\\nTOP 5 wallets\\n' | sketchdb --db tx.db query --json"
    )]
    Query(QueryArgs),
    /// Write a synthetic stream as JSONL to stdout: the reference text's three, or `chains`
    #[command(
        after_help = "Streams:\n  stream-a    500 bots send 900,000 transactions, 100,000 wallets send one each (shuffled)\n  \
stream-b    20,000 wallets send 50 transactions each (shuffled)\n  \
two-chains  5,000,000 wallets on each of chain:a and chain:b, exactly 10,000 on both\n  \
chains      EVM-like transactions as users have them: ~400-byte lines with hash, to, value, gas, \
nonce, block, method and status; a daily cycle with 1% late events; bots to one-time wallets; \
3 chains and 2,000 contracts by default (about 1,570 seen in a day of 20,000 events)\n\n\
--scale applies to the reference streams; --days, --events-per-day, --chains, --contracts and \
--time-format to chains.\n\n\
Examples:\n  sketchdb gen two-chains --seed 7 --date 2026-11-30 --scale 0.1 > two-chains.jsonl\n  \
sketchdb gen chains --days 30 --date 2026-11-01 > month.jsonl\n  \
sketchdb gen chains --events-per-day 1000 --time-format ms | sketchdb --db tx.db ingest -"
    )]
    Gen(GenArgs),
    /// Verify every stored value and the raw log, and list what is damaged
    #[command(
        long_about = "Reads every value the store holds (metadata, the tag dictionary, each log block against its \
index entry, each part of each sketch set, the chunks of large values, the all-time filter) and \
lists each damaged one on a line of its own, named by bucket, tag and kind, with whether \
`sketchdb repair` can rebuild it from the raw log. Changes nothing.\n\n\
Exit status: 0 when the store is clean, 1 when anything is damaged or the store cannot be opened.",
        after_help = "Examples:\n  sketchdb --db tx.db check\n  \
sketchdb --db tx.db check --json | jq '.damaged[] | .name'"
    )]
    Check(CheckArgs),
    /// Rebuild damaged sketch sets from the raw log, and report what cannot be recovered
    #[command(
        long_about = "Rebuilds every damaged or missing sketch set whose bucket's raw events are still in the log \
(not expired by retention, no damaged log block among them), each set written whole in one \
atomic batch; deletes chunks no value uses; leaves everything else as it is. Then checks \
again and lists what cannot be recovered.\n\n\
Exit status: 0 when the store is clean afterwards, 1 when damage remains.",
        after_help = "Example:\n  sketchdb --db tx.db check || sketchdb --db tx.db repair"
    )]
    Repair(CheckArgs),
    /// Write a set's HyperLogLog or Theta sketch, merged over a range, as an Apache DataSketches
    /// image (what Druid, Spark, Pinot, ClickHouse and DuckDB read)
    #[command(
        long_about = "Merges the chosen sketch of a set (the whole stream, or one tag value) over every bucket overlapping the range, and writes it as an Apache DataSketches binary image: HLL (HLL_8 or HLL_6 \
HLL_8, HLL_6 or HLL_4 registers; small sketches in DataSketches' list or set mode) or a compact, ordered Theta sketch. \
Raw bytes to stdout or --out, or base64 text (what Druid ingests). A range that cuts a bucket \
takes the whole bucket; stderr says which buckets went in.",
        after_help = "Examples:\n  sketchdb --db tx.db export --sketch theta --tag chain:base --from 2026-12-01 --to 2026-12-08 --out base.theta\n  \
sketchdb --db tx.db export --sketch hll --hll-bits 6 --base64"
    )]
    Export(ExportArgs),
    /// Read an Apache DataSketches HLL or compact Theta image into one set and bucket of the
    /// store, where DISTINCT and the Theta set operations count it with the set's own items
    #[command(
        name = "import-sketch",
        long_about = "Reads one Apache DataSketches image (raw bytes, or base64 as Druid and Spark hand them out; detected, or --encoding) from FILE or stdin and merges it into the set (the whole stream, or --tag FIELD:VALUE) of the bucket holding --at. HLL images in list, set or HLL mode, with HLL_4, HLL_6 or HLL_8 registers and any lg_k at least the store's precision p (folded to p as DataSketches' union does); compact Theta images, ordered or not, compressed or not, hashed with the default seed 9001, trimmed to the store's k.\n\nImported items count in DISTINCT and in AND / EXCEPT / NOT (HLL and Theta) only: COUNT, SEEN, TOP, SAMPLE and the raw events know nothing of them, so DISTINCT over such a set is never answered from the raw events, and says it includes imported sketches. `repair` keeps them. All or nothing: the store is changed and flushed when the command succeeds, and unchanged when it fails.",
        after_help = "Examples:\n  sketchdb --db tx.db import-sketch --tag chain:base --at 2026-12-01 worker2.hll\n  \
sketchdb --db a.db export --sketch theta --base64 | sketchdb --db b.db import-sketch --at 2026-12-01 -"
    )]
    ImportSketch(ImportSketchArgs),
    /// Merge stores of the same configuration (one per worker) into one, all or nothing
    #[command(
        long_about = "Merges the input stores into OUT as if OUT had ingested every input's events: exact \
counts added, HyperLogLog registers by max, Theta by union, Count-Min tables added with the heavy hitters \
re-estimated, Bloom filters by union, samples drawn from each input in proportion to its events, raw \
event logs appended in time order.\n\n\
OUT is created with the inputs' configuration if it does not exist; an existing OUT (of the same \
configuration) is added to, so a new worker's store can be folded into a merged one. The inputs \
are only read. Stores whose configuration differs (item or tag fields, bucket width, any sketch \
parameter, retention, lowercasing) are refused, naming the setting. All or nothing: on any error \
OUT is left as it was (a new OUT is removed). Merging the same input into OUT in two runs counts \
it twice: sketchdb cannot tell.",
        after_help = "Examples:\n  sketchdb merge all.db worker1.db worker2.db worker3.db\n  \
sketchdb merge all.db worker4.db            (fold a new worker into the merged store)\n  \
sketchdb merge --seed 7 all.db w1.db w2.db  (reproducible samples)"
    )]
    Merge(MergeArgs),
    /// Build a demo store, ingest the reference's streams and run its cheat sheet as queries
    #[command(
        after_help = "Examples:\n  sketchdb demo                 (store in ./sketchdb-demo.db, replaced on each run)\n  \
sketchdb demo --scale 0.2     (two-chains at a fifth of the reference's size: a few seconds)\n  \
sketchdb --db /tmp/d demo     (elsewhere; the demo only ever replaces a store it made)"
    )]
    Demo(DemoArgs),
}

#[derive(Args)]
struct InitArgs {
    /// The input field whose value is the item
    #[arg(long, value_name = "F", default_value = "wallet")]
    item: String,
    /// A field whose values are tags, each with its own sketches (repeatable) [default: chain]
    #[arg(long = "tag", value_name = "F")]
    tags: Vec<String>,
    /// No tag fields at all
    #[arg(long, conflicts_with = "tags")]
    no_tags: bool,
    /// Bucket width
    #[arg(long, value_name = "day|hour", default_value = "day", value_parser = parse_bucket)]
    bucket: BucketWidth,
    /// Distinct items per bucket the Bloom filters are sized for
    #[arg(long, value_name = "N")]
    bloom_capacity: Option<u64>,
    /// Bloom false-positive rate at that capacity
    #[arg(long, value_name = "P")]
    bloom_fpr: Option<f64>,
    /// HyperLogLog precision (2^p registers)
    #[arg(long, value_name = "P")]
    hll_p: Option<u8>,
    /// Theta nominal entries (a power of two)
    #[arg(long, value_name = "K")]
    theta_k: Option<u32>,
    /// Count-Min additive error as a fraction of the bucket's events
    #[arg(long, value_name = "E")]
    cms_epsilon: Option<f64>,
    /// Count-Min failure probability per query
    #[arg(long, value_name = "D")]
    cms_delta: Option<f64>,
    /// Heavy-hitter candidates kept per set
    #[arg(long, value_name = "K")]
    top_k: Option<usize>,
    /// Events sampled per set
    #[arg(long, value_name = "N")]
    reservoir: Option<usize>,
    /// Drop raw events older than this many days (sketches are kept)
    #[arg(long, value_name = "DAYS")]
    retention_days: Option<u32>,
    /// Lowercase every item on the way in, and item literals in queries (SEEN 0xABC finds
    /// 0xabc): for wallets written in mixed case (EIP-55 checksums). Kept in the store, so
    /// every later ingest and query does the same
    #[arg(long)]
    lowercase_items: bool,
    /// Memory for sketch sets, in bytes or with a binary suffix (64M, 1G; K, M, G, T and
    /// KiB, MiB, GiB, TiB): every ingest, imports included, holds at most this much in sets
    /// and stages the rest on disk until its commit [default: 1G]
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    memory_budget: Option<usize>,
}

#[derive(Args)]
struct IngestArgs {
    /// The input file, or - for stdin
    #[arg(value_name = "FILE|-", default_value = "-")]
    input: String,
    /// Input format [default: csv for *.csv files, else jsonl]
    #[arg(long, value_name = "jsonl|csv")]
    format: Option<Format>,
    /// The field holding the event time (RFC 3339, a date and time without an offset, Unix
    /// seconds or milliseconds)
    #[arg(long, value_name = "F", default_value = "time")]
    time_field: String,
    /// How to read numeric times
    #[arg(long, value_name = "auto|s|ms", default_value = "auto")]
    time_unit: TimeUnit,
    /// The time zone of times written without an offset (2026-09-02 05:00:00): UTC, an offset
    /// such as +02:00, or an IANA name such as Europe/Berlin. Times with an offset or Z, and
    /// numeric times, do not depend on it
    #[arg(
        long,
        value_name = "ZONE",
        default_value = "UTC",
        allow_hyphen_values = true
    )]
    timezone: Zone,
    /// Read store field STORE from input field INPUT, e.g. --field wallet=from (repeatable)
    #[arg(long = "field", value_name = "STORE=INPUT")]
    fields: Vec<String>,
    /// Ingest the good lines and report the bad ones instead of rejecting the input
    #[arg(long)]
    skip_bad: bool,
    /// CSV field delimiter: one ASCII character, or \t or tab for a tab
    #[arg(long, value_name = "C", default_value = ",", value_parser = parse_delimiter)]
    delimiter: u8,
    /// No progress bar, even on a terminal
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args)]
struct QueryArgs {
    /// The statement; without it, statements are read from stdin, one per line
    statement: Option<String>,
    /// One JSON object per answer
    #[arg(long)]
    json: bool,
    /// The clock for today / yesterday / LAST n DAYS (YYYY-MM-DD or YYYY-MM-DDTHH)
    #[arg(long, value_name = "DATE")]
    now: Option<String>,
    /// Seed for SAMPLE, for reproducible samples
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportSketch {
    Hll,
    Theta,
}

#[derive(Args)]
struct ExportArgs {
    /// Which sketch: hll or theta
    #[arg(long, value_enum)]
    sketch: ExportSketch,
    /// HLL register width once the sketch has registers: 8, 6 or 4
    #[arg(long, default_value_t = 8, value_parser = parse_hll_bits)]
    hll_bits: u8,
    /// The set: a tag as field:value (default: the whole stream)
    #[arg(long, value_name = "FIELD:VALUE")]
    tag: Option<String>,
    /// Start of the range, inclusive: RFC 3339, a date, or Unix seconds or milliseconds
    #[arg(long, value_name = "TIME")]
    from: Option<String>,
    /// End of the range, exclusive
    #[arg(long, value_name = "TIME")]
    to: Option<String>,
    /// Write base64 text (one line) instead of raw bytes
    #[arg(long)]
    base64: bool,
    /// Write to FILE instead of stdout
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ImageEncoding {
    /// base64 if the input is all base64 text, else raw bytes
    Auto,
    Raw,
    Base64,
}

#[derive(Args)]
struct ImportSketchArgs {
    /// The image file, or - for stdin
    #[arg(value_name = "FILE|-", default_value = "-")]
    input: String,
    /// The set: a tag as field:value (default: the whole stream)
    #[arg(long, value_name = "FIELD:VALUE")]
    tag: Option<String>,
    /// A time in the bucket to import into: RFC 3339, a date, or Unix seconds or milliseconds
    #[arg(long, value_name = "TIME")]
    at: String,
    /// How the input holds the image
    #[arg(long, value_enum, default_value = "auto")]
    encoding: ImageEncoding,
}

#[derive(Args)]
struct MergeArgs {
    /// The output store: created if it does not exist, else merged into
    #[arg(value_name = "OUT")]
    out: PathBuf,
    /// The stores to merge into it (only read)
    #[arg(value_name = "IN", required = true)]
    inputs: Vec<PathBuf>,
    /// Seed for the merged samples' draws, for a reproducible merge
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// No progress display, even on a terminal
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args)]
struct CheckArgs {
    /// One JSON object: the damaged values, what was read (and, for repair, what was done)
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct GenArgs {
    /// stream-a, stream-b, two-chains or chains
    #[arg(value_parser = parse_gen_stream)]
    stream: GenStream,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The UTC day the event times spread over (chains: the first day)
    #[arg(long, value_name = "YYYY-MM-DD", default_value = "2026-12-01")]
    date: chrono::NaiveDate,
    /// Reference streams: shrink the wallet counts proportionally (0 < scale ≤ 1) [default: 1]
    #[arg(long, value_name = "S")]
    scale: Option<f64>,
    /// chains: consecutive days to write [default: 1]
    #[arg(long, value_name = "N")]
    days: Option<u32>,
    /// chains: events in each day [default: 20000]
    #[arg(long, value_name = "N")]
    events_per_day: Option<u64>,
    /// chains: distinct chain values [default: 3]
    #[arg(long, value_name = "N")]
    chains: Option<u32>,
    /// chains: distinct contract values [default: 2000]
    #[arg(long, value_name = "N")]
    contracts: Option<u32>,
    /// chains: `time` as RFC 3339 with ms, Unix milliseconds or Unix seconds [default: iso]
    #[arg(long, value_name = "iso|ms|s")]
    time_format: Option<gen::TimeFormat>,
}

/// The `gen` command's streams: the reference text's three and `chains`.
#[derive(Clone, Copy)]
enum GenStream {
    Reference(StreamKind),
    Chains,
}

fn parse_gen_stream(s: &str) -> Result<GenStream, String> {
    if s == "chains" {
        return Ok(GenStream::Chains);
    }
    s.parse::<StreamKind>()
        .map(GenStream::Reference)
        .map_err(|_| {
            format!("unknown stream '{s}': expected one of stream-a, stream-b, two-chains, chains")
        })
}

#[derive(Args)]
struct DemoArgs {
    /// Scale of the two-chains stream, in (0, 1] (stream-a and stream-b always run at full size;
    /// 1 is the reference's 5,000,000 wallets a chain, about 20 s; 0.2 takes about 4 s)
    #[arg(long, default_value_t = sketchdb::demo::DEFAULT_SCALE)]
    scale: f64,
    /// Seed of the streams and the samples
    #[arg(long, default_value_t = sketchdb::demo::DEFAULT_SEED)]
    seed: u64,
}

fn parse_wait(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("'{s}' is not a number of seconds (e.g. 5 or 0.5)"))
}

fn parse_bucket(s: &str) -> Result<BucketWidth, String> {
    match s.to_ascii_lowercase().as_str() {
        "day" | "days" | "d" => Ok(BucketWidth::Day),
        "hour" | "hours" | "h" => Ok(BucketWidth::Hour),
        _ => Err(format!(
            "'{s}' is not a bucket width (expected day or hour)"
        )),
    }
}

/// A byte count: digits, optionally followed by a binary suffix (`64M` is 64 MiB).
fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => {
            return Err(format!(
                "'{s}' is not a byte count (expected e.g. 67108864, 64M or 1G)"
            ))
        }
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| format!("'{s}' is not a byte count (expected e.g. 67108864, 64M or 1G)"))
}

fn parse_delimiter(s: &str) -> Result<u8, String> {
    match s {
        "\\t" | "tab" | "TAB" | "\t" => Ok(b'\t'),
        _ => match s.as_bytes() {
            [b] if b.is_ascii() && !matches!(b, b'"' | b'\n' | b'\r') => Ok(*b),
            _ => Err(format!(
                "'{s}' is not a delimiter (expected one ASCII character other than a quote or a \
newline, or \\t or tab for a tab)"
            )),
        },
    }
}

/// A failed command: its one-line message.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let text = info.to_string().replace('\n', " ");
        eprintln!("sketchdb: internal error (please report): {text}");
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("sketchdb: {}", one_line(&msg));
            ExitCode::from(1)
        }
    }
}

fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn run(cli: Cli) -> Outcome {
    let db = || cli.db.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
    let wait = cli.wait.unwrap_or(Duration::ZERO);
    match cli.command {
        None => repl(&db(), wait),
        Some(Command::Init(a)) => init(&db(), a),
        Some(Command::Ingest(a)) => ingest_cmd(&db(), a, wait),
        Some(Command::Query(a)) => query(&db(), a, wait),
        Some(Command::Gen(a)) => gen_cmd(a),
        Some(Command::Check(a)) => check_cmd(&db(), a, wait),
        Some(Command::Repair(a)) => repair_cmd(&db(), a, wait),
        Some(Command::Export(a)) => export_cmd(&db(), a, wait),
        Some(Command::ImportSketch(a)) => import_sketch_cmd(&db(), a, wait),
        Some(Command::Merge(a)) => merge_cmd(a, wait),
        Some(Command::Demo(a)) => {
            let path = cli.db.clone().unwrap_or_else(|| PathBuf::from(DEMO_DB));
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let opts = sketchdb::demo::DemoOptions {
                scale: a.scale,
                seed: a.seed,
            };
            let show = std::io::stderr().is_terminal();
            let mut bar: Option<(indicatif::ProgressBar, std::time::Instant)> = None;
            let mut stage = |s: sketchdb::demo::Stage<'_>| match s {
                sketchdb::demo::Stage::Ingesting { stream, progress } if show => {
                    let (bar, started) =
                        bar.get_or_insert_with(|| (progress_bar(None), std::time::Instant::now()));
                    show_progress(bar, progress, *started, stream.name());
                }
                sketchdb::demo::Stage::Ingesting { .. } => {}
                sketchdb::demo::Stage::Ingested { .. } => {
                    if let Some((bar, _)) = bar.take() {
                        bar.finish_and_clear();
                    }
                }
            };
            ignore_closed_pipe(
                sketchdb::demo::run(&path, &opts, &mut out, &mut stage)
                    .map(|_| ())
                    .map_err(|e| match e {
                        // The library's words for the directory are --db here.
                        sketchdb::demo::DemoError::NotADemoStore { path } => format!(
                            "{} exists and is not a demo store; the demo only replaces stores it made (remove it, or pass another --db)",
                            path.display()
                        ),
                        other => other.to_string(),
                    }),
            )
        }
    }
}

/// Opens an existing store, saying how to make one if there is none; a store held by another
/// process is waited for up to `wait`.
fn open(path: &Path, wait: Duration) -> Result<Store, Failure> {
    no_store(path)?;
    Store::open_with_wait(path, wait).map_err(|e| held(e, wait))
}

fn no_store(path: &Path) -> Outcome {
    if !path.exists() {
        return Err(Failure(format!(
            "no store at {}: create one with `sketchdb --db {} init`, or try `sketchdb demo`",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

/// Opens a store to write it (or to check it): a holder that serves (a REPL) is asked to let
/// it go, which it does between its statements (it opens the store again at its next one);
/// any other holder is waited for up to `wait`.
fn open_to_write(path: &Path, wait: Duration) -> Result<Store, Failure> {
    no_store(path)?;
    if ask_to_let_go(path) {
        // The holder has closed the store; its engine lets go of the lock a moment later.
        let wait = wait.max(Duration::from_secs(5));
        return Store::open_with_wait(path, wait).map_err(|e| held(e, wait));
    }
    open(path, wait)
}

/// Asks the process holding the store at `path`, if it serves, to let it go; `true` once it
/// has.
fn ask_to_let_go(path: &Path) -> bool {
    let held_by = sketchdb::store::holder::read(path);
    let Some(mut client) = serve::Client::connect(path, &held_by, &serve::Hello::default()) else {
        return false;
    };
    let me = std::env::args().collect::<Vec<_>>().join(" ");
    client
        .let_go(&format!("pid {} (`{me}`)", std::process::id()))
        .is_ok()
}

/// An open error, with what the user can do about a store held by another process: the
/// library names the holder; the flags are the CLI's to name.
fn held(e: StoreError, waited: Duration) -> Failure {
    let StoreError::Locked { held_by, .. } = &e else {
        return Failure(e.to_string());
    };
    let waited = if waited.is_zero() {
        "run with --wait SECONDS to wait for it".to_string()
    } else {
        format!(
            "waited {} s for it; a longer --wait may do",
            Duration::from_millis(waited.as_millis() as u64).as_secs_f64()
        )
    };
    let serving = matches!(held_by, HeldBy::Process(h) if h.socket.is_some());
    let through = if serving {
        ", or read it through the holder (`sketchdb query` and the REPL do that by themselves)"
    } else {
        ""
    };
    Failure(format!("{e}; {waited}{through}"))
}

/// Opens a store for `check` or `repair`; an error says which store and what it was for.
fn open_to(path: &Path, what: &str, wait: Duration) -> Result<Store, Failure> {
    open_to_write(path, wait).map_err(|Failure(e)| {
        let shown = path.display().to_string();
        if e.contains(&shown) {
            Failure(format!("cannot {what}: {e}"))
        } else {
            Failure(format!("cannot {what} {shown}: {e}"))
        }
    })
}

fn checked_summary(c: &sketchdb::store::Checked) -> String {
    format!(
        "checked {} metadata records, {} tags, {} log blocks ({} events), {} sketch sets ({} \
parts), {} chunks",
        c.metadata, c.tags, c.log_blocks, c.events, c.sets, c.parts, c.chunks
    )
}

fn print_json(value: &serde_json::Value) -> Outcome {
    let mut out = std::io::stdout().lock();
    ignore_closed_pipe(writeln!(out, "{value}").map_err(|e| e.to_string()))
}

/// A time given on the command line: RFC 3339, Unix seconds or milliseconds, or a bare date
/// (its midnight, UTC).
fn parse_time(flag: &str, s: &str) -> Result<i64, Failure> {
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d") {
        return Ok(d
            .and_time(chrono::NaiveTime::MIN)
            .and_utc()
            .timestamp_millis());
    }
    ingest::time::from_text(s, TimeUnit::Auto)
        .map_err(|e| Failure(format!("--{flag} {s}: {e}, or a date (2026-12-01)")))
}

/// The set `--tag FIELD:VALUE` names, or the whole stream without it.
fn parse_slice(tag: Option<&str>) -> Result<sketchdb::store::Slice, Failure> {
    use sketchdb::store::Slice;
    match tag {
        None => Ok(Slice::Whole),
        Some(t) => match t.split_once(':') {
            Some((field, value)) if !field.is_empty() && !value.is_empty() => {
                Ok(Slice::tag(field, value))
            }
            _ => Err(Failure(format!(
                "--tag {t}: expected FIELD:VALUE, for example chain:base"
            ))),
        },
    }
}

fn export_cmd(path: &Path, a: ExportArgs, wait: Duration) -> Outcome {
    use sketchdb::sketch::datasketches::{self, HllWidth};
    use sketchdb::store::TimeRange;
    let time = |flag: &str, t: &Option<String>| -> Result<Option<i64>, Failure> {
        t.as_deref().map(|s| parse_time(flag, s)).transpose()
    };
    let range = TimeRange {
        start: time("from", &a.from)?,
        end: time("to", &a.to)?,
    };
    let slice = parse_slice(a.tag.as_deref())?;
    let store = open_to(path, "export from", wait)?;
    let (image, buckets, estimate, what) = match a.sketch {
        ExportSketch::Hll => {
            let merged = store.merged_hll(&slice, &range)?;
            let width = match a.hll_bits {
                4 => HllWidth::Hll4,
                6 => HllWidth::Hll6,
                _ => HllWidth::Hll8,
            };
            let sketch = merged.sketch.ok_or_else(|| nothing_in(&slice, &range))?;
            (
                datasketches::hll_image(&sketch, width),
                merged.buckets,
                sketchdb::sketch::Sketch::estimate(&sketch).value,
                format!("HLL (HLL_{}, lg_k {})", a.hll_bits, sketch.precision()),
            )
        }
        ExportSketch::Theta => {
            let merged = store.merged_theta(&slice, &range)?;
            let sketch = merged.sketch.ok_or_else(|| nothing_in(&slice, &range))?;
            (
                datasketches::theta_image(&sketch),
                merged.buckets,
                sketchdb::sketch::Sketch::estimate(&sketch).value,
                format!(
                    "compact Theta (lg_k {}, {} retained)",
                    sketch.lg_k(),
                    sketch.retained()
                ),
            )
        }
    };
    drop(store);
    let bytes = if a.base64 {
        let mut text = datasketches::base64(&image).into_bytes();
        text.push(b'\n');
        text
    } else {
        image
    };
    match &a.out {
        Some(file) => std::fs::write(file, &bytes)
            .map_err(|e| Failure(format!("cannot write {}: {e}", file.display())))?,
        None => {
            if !a.base64 && std::io::stdout().is_terminal() {
                return Err(Failure(
                    "a binary image is not written to a terminal: give --out FILE or --base64"
                        .into(),
                ));
            }
            ignore_closed_pipe(
                std::io::stdout()
                    .lock()
                    .write_all(&bytes)
                    .map_err(|e| e.to_string()),
            )?;
        }
    }
    eprintln!(
        "exported the {what} of {} over {buckets} bucket{}: estimate {estimate:.0}, {} bytes{}",
        slice.name(),
        if buckets == 1 { "" } else { "s" },
        bytes.len(),
        a.out
            .as_ref()
            .map(|f| format!(" to {}", f.display()))
            .unwrap_or_default()
    );
    Ok(())
}

fn import_sketch_cmd(path: &Path, a: ImportSketchArgs, wait: Duration) -> Outcome {
    use sketchdb::sketch::datasketches::{self, Encoding};
    use std::io::Read;
    let slice = parse_slice(a.tag.as_deref())?;
    let at = parse_time("at", &a.at)?;
    let input = if a.input == "-" {
        if std::io::stdin().is_terminal() {
            return Err(Failure(
                "no image: give FILE, or pipe the image in (`... | sketchdb import-sketch --at TIME -`)".into(),
            ));
        }
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Failure(format!("cannot read stdin: {e}")))?;
        bytes
    } else {
        std::fs::read(&a.input).map_err(|e| Failure(format!("cannot read {}: {e}", a.input)))?
    };
    let encoding = match a.encoding {
        ImageEncoding::Auto => Encoding::Auto,
        ImageEncoding::Raw => Encoding::Raw,
        ImageEncoding::Base64 => Encoding::Base64,
    };
    let source = if a.input == "-" { "stdin" } else { &a.input };
    // Read before the store is opened: a bad image never waits for, or touches, the store.
    let image = datasketches::decode_input(&input, encoding)
        .and_then(|bytes| datasketches::read_image(&bytes).map(|_| bytes))
        .map_err(|e| {
            Failure(format!(
                "{source}: not an importable DataSketches image: {e}"
            ))
        })?;
    let store = open_to(path, "import into", wait)?;
    let done = store
        .import_sketch(&slice, at, &image)
        .map_err(|e| Failure(format!("{source}: {e}")))?;
    drop(store);
    let mut out = std::io::stdout().lock();
    ignore_closed_pipe(
        writeln!(
            out,
            "imported {} ({}) into {}, bucket {}: it estimates {:.0}; the set's {} there now estimates {:.0}",
            done.image,
            source,
            done.set,
            done.bucket_label,
            done.estimate.value,
            done.family,
            done.set_estimate.value
        )
        .map_err(|e| e.to_string()),
    )
}

/// An open error for `what` at `path`, saying which store unless the error already does.
fn naming(path: &Path, what: &str, Failure(e): Failure) -> Failure {
    let shown = path.display().to_string();
    if e.contains(&shown) {
        Failure(format!("cannot {what}: {e}"))
    } else {
        Failure(format!("cannot {what} {shown}: {e}"))
    }
}

fn merge_cmd(a: MergeArgs, wait: Duration) -> Outcome {
    use sketchdb::store::{MergePhase, MergeProgress};
    // Refused before anything is opened: a second open of one directory would find it held by
    // this very process. The library refuses the same again for its callers.
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let out_at = canonical(&a.out);
    for (i, input) in a.inputs.iter().enumerate() {
        let at = canonical(input);
        if at == out_at {
            return Err(Failure(format!(
                "{} is the output store: a store cannot be merged into itself",
                input.display()
            )));
        }
        if a.inputs[..i].iter().any(|e| canonical(e) == at) {
            return Err(Failure(format!(
                "{} is given twice: its events would be counted twice",
                input.display()
            )));
        }
    }
    let mut inputs = Vec::with_capacity(a.inputs.len());
    for path in &a.inputs {
        no_store(path).map_err(|e| naming(path, "merge", e))?;
        let store =
            Store::open_with_wait(path, wait).map_err(|e| naming(path, "merge", held(e, wait)))?;
        inputs.push(store);
    }
    let first = &inputs[0];
    for (path, input) in a.inputs.iter().zip(&inputs).skip(1) {
        if let Some((setting, x, y)) = first.config().merge_difference(input.config()) {
            return Err(Failure(format!(
                "cannot merge {} with {}: their {setting} differs ({x} in {}, {y} in {}); only stores of the same configuration merge",
                a.inputs[0].display(),
                path.display(),
                a.inputs[0].display(),
                path.display()
            )));
        }
    }
    refuse_foreign_directory(&a.out)?;
    let existed = a.out.join("db").exists() || a.out.join("conf").exists();
    let out = if existed {
        open_to(&a.out, "merge into", wait)?
    } else {
        Store::create(&a.out, first.config().clone())
            .map_err(|e| naming(&a.out, "create", e.into()))?
    };
    if let Some(seed) = a.seed {
        out.seed_samples(seed)?;
    }
    let show = !a.quiet && std::io::stderr().is_terminal();
    let bar = show.then(|| progress_bar(None));
    let started = std::time::Instant::now();
    let mut report = |p: MergeProgress| {
        let Some(bar) = &bar else { return };
        bar.set_message(match p.phase {
            MergePhase::Log => format!(
                "raw events: {} of {}",
                thousands(p.done as f64),
                thousands(p.total as f64)
            ),
            MergePhase::Sets => format!(
                "sketch sets: {} of {}",
                thousands(p.done as f64),
                thousands(p.total as f64)
            ),
            MergePhase::Committing => "committing in one synced write".to_string(),
        });
    };
    let refs: Vec<&Store> = inputs.iter().collect();
    let merged = out.merge_from(&refs, &mut report);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let summary = match merged {
        Ok(s) => s,
        Err(e) => {
            if !existed {
                // Nothing of a new OUT should remain after a failed merge.
                drop(out);
                let _ = std::fs::remove_dir_all(&a.out);
            }
            return Err(Failure(e.to_string()));
        }
    };
    println!(
        "merged {} store{} into {}{}: {} events ({} log blocks), {} sketch sets, {} samples re-pointed, in {:.2} s",
        summary.inputs,
        if summary.inputs == 1 { "" } else { "s" },
        a.out.display(),
        if existed { "" } else { " (new)" },
        thousands(summary.events as f64),
        thousands(summary.blocks as f64),
        thousands(summary.sets as f64),
        thousands(summary.samples_repointed as f64),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn parse_hll_bits(s: &str) -> Result<u8, String> {
    match s.trim() {
        "8" => Ok(8),
        "6" => Ok(6),
        "4" => Ok(4),
        other => Err(format!("{other}: expected 4, 6 or 8")),
    }
}

fn nothing_in(slice: &sketchdb::store::Slice, range: &sketchdb::store::TimeRange) -> Failure {
    Failure(format!(
        "{} has no events in {}: nothing to export",
        slice.name(),
        match (range.start, range.end) {
            (None, None) => "the store".to_string(),
            _ => "the range".to_string(),
        }
    ))
}

fn check_cmd(path: &Path, a: CheckArgs, wait: Duration) -> Outcome {
    if !path.exists() {
        open_to(path, "check", wait)?;
    }
    // Only the lock is waited for here (a serving holder lets go); the check opens the store
    // itself.
    let wait = if ask_to_let_go(path) {
        wait.max(Duration::from_secs(5))
    } else {
        wait
    };
    if !wait.is_zero() {
        let _ = sketchdb::store::SledEngine::open_waiting(path, wait);
    }
    // A store that damage keeps from opening is still walked, so every damaged value is listed.
    let report = Store::check_dir(path).map_err(|e| {
        let shown = path.display().to_string();
        let Failure(e) = held(e, wait);
        if e.contains(&shown) {
            Failure(format!("cannot check: {e}"))
        } else {
            Failure(format!("cannot check {shown}: {e}"))
        }
    })?;
    let shown = path.display();
    if a.json {
        print_json(&serde_json::json!({
            "store": shown.to_string(),
            "clean": report.is_clean(),
            "damaged": report.damaged,
            "checked": report.checked,
        }))?;
    } else {
        let mut out = std::io::stdout().lock();
        for d in &report.damaged {
            ignore_closed_pipe(writeln!(out, "damaged: {d}").map_err(|e| e.to_string()))?;
        }
        if report.is_clean() {
            ignore_closed_pipe(
                writeln!(out, "{shown}: clean; {}", checked_summary(&report.checked))
                    .map_err(|e| e.to_string()),
            )?;
        }
    }
    if report.is_clean() {
        return Ok(());
    }
    let n = report.damaged.len();
    let fixable = report.repairable();
    Err(Failure(format!(
        "{shown}: {n} damaged value{} ({fixable} repairable with `sketchdb --db {shown} \
repair`, {} not); {}",
        if n == 1 { "" } else { "s" },
        n - fixable,
        checked_summary(&report.checked)
    )))
}

fn repair_cmd(path: &Path, a: CheckArgs, wait: Duration) -> Outcome {
    let store = open_to(path, "repair", wait)?;
    let report = store.repair()?;
    let shown = path.display();
    if a.json {
        print_json(&serde_json::json!({
            "store": shown.to_string(),
            "clean": report.remaining.is_empty(),
            "rebuilt": report.rebuilt,
            "removed": report.removed,
            "remaining": report.remaining,
        }))?;
    } else {
        let mut out = std::io::stdout().lock();
        let lines = report
            .rebuilt
            .iter()
            .map(|r| format!("rebuilt: {r}"))
            .chain(report.removed.iter().map(|r| format!("removed: {r}")))
            .chain(
                report
                    .remaining
                    .iter()
                    .map(|d| format!("not recovered: {d}")),
            );
        for line in lines {
            ignore_closed_pipe(writeln!(out, "{line}").map_err(|e| e.to_string()))?;
        }
        if report.remaining.is_empty() {
            let done = if report.rebuilt.is_empty() && report.removed.is_empty() {
                "nothing to repair".to_string()
            } else {
                format!(
                    "repaired: {} sets rebuilt, {} stray values removed",
                    report.rebuilt.len(),
                    report.removed.len()
                )
            };
            ignore_closed_pipe(
                writeln!(out, "{shown}: {done}; the store checks clean").map_err(|e| e.to_string()),
            )?;
        }
    }
    if report.remaining.is_empty() {
        return Ok(());
    }
    let n = report.remaining.len();
    Err(Failure(format!(
        "{shown}: {} sets rebuilt, {} stray values removed; {n} damaged value{} cannot be \
recovered (listed above)",
        report.rebuilt.len(),
        report.removed.len(),
        if n == 1 { "" } else { "s" }
    )))
}

fn init(path: &Path, a: InitArgs) -> Outcome {
    let d = SketchConfig::default();
    let sketches = SketchConfig {
        bloom_capacity: a.bloom_capacity.unwrap_or(d.bloom_capacity),
        bloom_fpr: a.bloom_fpr.unwrap_or(d.bloom_fpr),
        hll_precision: a.hll_p.unwrap_or(d.hll_precision),
        theta_nominal_entries: a.theta_k.unwrap_or(d.theta_nominal_entries),
        cms_epsilon: a.cms_epsilon.unwrap_or(d.cms_epsilon),
        cms_delta: a.cms_delta.unwrap_or(d.cms_delta),
        top_k: a.top_k.unwrap_or(d.top_k),
        reservoir_size: a.reservoir.unwrap_or(d.reservoir_size),
        ..d
    };
    let tags = if a.no_tags {
        Vec::new()
    } else if a.tags.is_empty() {
        vec!["chain".to_string()]
    } else {
        a.tags
    };
    let config = Config {
        item_field: a.item,
        tag_fields: tags,
        bucket: a.bucket,
        sketches,
        retention_ms: a.retention_days.map(|d| i64::from(d) * DAY_MS),
        lowercase_items: a.lowercase_items,
        memory_budget: a.memory_budget.unwrap_or(Config::default().memory_budget),
        ..Config::default()
    };
    config.validate()?;
    refuse_foreign_directory(path)?;
    let store = Store::create(path, config)?;
    let c = store.config();
    println!(
        "created {} (item: {}{}; tags: {}; buckets: {:?})",
        path.display(),
        c.item_field,
        if c.lowercase_items {
            ", lowercased"
        } else {
            ""
        },
        if c.tag_fields.is_empty() {
            "none".to_string()
        } else {
            c.tag_fields.join(", ")
        },
        c.bucket
    );
    Ok(())
}

/// `init` makes a store in a new or empty directory only: sled would otherwise put its files
/// among someone else's. A directory that already holds a store is left to `Store::create`,
/// which says so.
fn refuse_foreign_directory(path: &Path) -> Outcome {
    if path.exists() && !path.is_dir() {
        return Err(Failure(format!(
            "{} is a file, not a directory: give --db a new or empty directory",
            path.display()
        )));
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return Ok(());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                format!("{name}/")
            } else {
                name
            }
        })
        .collect();
    // sled's own files: a store (or one whose creation was cut short) lives here.
    if names.is_empty() || names.iter().any(|n| n == "conf" || n == "db") {
        return Ok(());
    }
    names.sort();
    let shown = names.len().min(5);
    let more = if names.len() > shown {
        format!(" and {} more", names.len() - shown)
    } else {
        String::new()
    };
    Err(Failure(format!(
        "{} is not empty and not a sketchdb store (it holds {}{more}): give --db a new or \
empty directory",
        path.display(),
        names[..shown].join(", ")
    )))
}

fn ingest_cmd(path: &Path, a: IngestArgs, wait: Duration) -> Outcome {
    let store = open_to_write(path, wait)?;
    let mut mapping = Mapping::for_config(store.config());
    mapping.time = a.time_field;
    mapping.unit = a.time_unit;
    mapping.zone = a.timezone;
    for f in &a.fields {
        let (store_field, input) = f.split_once('=').ok_or_else(|| {
            Failure(format!(
                "--field '{f}': expected STORE=INPUT, e.g. wallet=from"
            ))
        })?;
        mapping
            .rename(store.config(), store_field.trim(), input.trim())
            .map_err(|e| Failure(format!("--field '{f}': {e}")))?;
    }
    let from_stdin = a.input == "-";
    let format = a
        .format
        .unwrap_or(if a.input.to_ascii_lowercase().ends_with(".csv") {
            Format::Csv
        } else {
            Format::Jsonl
        });
    let (input, total): (Box<dyn std::io::Read + Send>, Option<u64>) = if from_stdin {
        (Box::new(std::io::stdin()), None)
    } else {
        let file = std::fs::File::open(&a.input)
            .map_err(|e| Failure(format!("cannot open {}: {e}", a.input)))?;
        let len = file.metadata().ok().map(|m| m.len());
        (Box::new(file), len)
    };
    let options = ingest::Options {
        format,
        mapping: Some(mapping),
        skip_bad: a.skip_bad,
        delimiter: Some(a.delimiter),
        total_bytes: total,
    };
    let show = !a.quiet && std::io::stderr().is_terminal();
    let bar = show.then(|| progress_bar(total));
    let started = std::time::Instant::now();
    let result = ingest::ingest(&store, input, &options, &mut |p| {
        if let Some(bar) = &bar {
            show_progress(bar, p, started, "");
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let s = match result {
        Ok(s) => s,
        Err(e) => {
            let mut text = match &e {
                // The library names its option; here it is the flag.
                IngestError::Bad(line) => format!(
                    "{line}; nothing was ingested (the store is unchanged; --skip-bad ingests the good lines)"
                ),
                other => other.to_string(),
            };
            if format == Format::Jsonl && e.looks_like_csv() {
                text.push_str("; pass --format csv to read it as CSV");
            }
            return Err(Failure(text));
        }
    };
    let mut out = format!(
        "ingested {} events from {} lines{} into {} bucket{} in {:.2} s ({} events/s); tags seen: {}",
        thousands(s.events as f64),
        thousands(s.lines as f64),
        line_breakdown(&s),
        thousands(s.buckets as f64),
        if s.buckets == 1 { "" } else { "s" },
        s.elapsed.as_secs_f64(),
        thousands(s.events_per_second()),
        if s.tags.is_empty() {
            "none".to_string()
        } else if s.tags.len() <= 8 {
            s.tags.join(", ")
        } else {
            format!("{} ({}, …)", s.tags.len(), s.tags[..8].join(", "))
        }
    );
    if s.skipped > 0 {
        out.push_str(&format!(
            "\nskipped {} bad line{}; the first:",
            thousands(s.skipped as f64),
            if s.skipped == 1 { "" } else { "s" }
        ));
        for e in &s.first_errors {
            out.push_str(&format!("\n  {e}"));
        }
        if format == Format::Jsonl && s.first_errors.first().is_some_and(|b| b.looks_like_csv) {
            out.push_str("\n  (pass --format csv to read the input as CSV)");
        }
    }
    if s.zoned > 0 {
        out.push_str(&format!(
            "\n{} time{} without an offset read as {} (--timezone)",
            thousands(s.zoned as f64),
            if s.zoned == 1 { "" } else { "s" },
            s.zone
        ));
    }
    println!("{out}");
    Ok(())
}

/// The lines that are not events, so that the counts add up: "(1 header, 2 blank, 3 skipped)".
fn line_breakdown(s: &ingest::Summary) -> String {
    let parts: Vec<String> = [
        (s.header, "header"),
        (s.blank, "blank"),
        (s.skipped, "skipped"),
        (s.continued, "inside quoted fields"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", thousands(*n as f64)))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn progress_bar(total: Option<u64>) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressStyle};
    let (bar, template) = match total {
        Some(n) => (
            ProgressBar::new(n),
            "{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% {binary_bytes}/{binary_total_bytes}  {msg}  eta {eta}",
        ),
        None => (ProgressBar::no_length(), "{spinner} [{elapsed_precise}] {msg}"),
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(10));
    // Keep the spinner turning through the commit, which reports nothing until it ends.
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    bar
}

/// Moves the bar to `p` (bytes for a file, events otherwise) with the events and their rate.
fn show_progress(
    bar: &indicatif::ProgressBar,
    p: &ingest::Progress,
    started: std::time::Instant,
    what: &str,
) {
    let rate = p.events as f64 / started.elapsed().as_secs_f64().max(1e-3);
    match p.total_bytes {
        Some(_) => bar.set_position(p.bytes),
        None => bar.set_position(p.events),
    }
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    };
    bar.set_message(if p.committing {
        format!(
            "{what}read {} events; committing them in one synced write",
            thousands(p.events as f64)
        )
    } else {
        format!(
            "{what}{} events, {}/s",
            thousands(p.events as f64),
            thousands(rate)
        )
    });
}

fn thousands(x: f64) -> String {
    sketchdb::query::answer::thousands(x.round())
}

/// Where answers come from: the store, opened here, or the process holding it.
enum Opened {
    Local(Box<Store>),
    Remote(serve::Client),
}

/// Opens the store, or, when another process holds it and answers queries, connects to that
/// process; otherwise a held store is waited for up to `wait`.
fn open_or_ask(path: &Path, wait: Duration, hello: &serve::Hello) -> Result<Opened, Failure> {
    no_store(path)?;
    let started = std::time::Instant::now();
    // A record naming a running holder that serves: ask it at once, without first waiting
    // out the lock.
    if let Some(client) = serve::Client::connect(path, &sketchdb::store::holder::read(path), hello)
    {
        return Ok(Opened::Remote(client));
    }
    match Store::open(path) {
        Ok(store) => Ok(Opened::Local(Box::new(store))),
        Err(e) => {
            if let StoreError::Locked { held_by, .. } = &e {
                if let Some(client) = serve::Client::connect(path, held_by, hello) {
                    return Ok(Opened::Remote(client));
                }
                if !wait.is_zero() {
                    // The first attempt's short wait counts towards --wait.
                    let rest = wait.saturating_sub(started.elapsed());
                    return Store::open_with_wait(path, rest)
                        .map(|s| Opened::Local(Box::new(s)))
                        .map_err(|e| held(e, wait));
                }
            }
            Err(held(e, Duration::ZERO))
        }
    }
}

/// An answer as `query` prints it, or the error's text.
struct Rendered {
    text: String,
    json: String,
}

/// Asks statements of a local session or of the holder, the same way.
enum Asker<'s> {
    Local(Box<Session<'s>>),
    Remote(serve::Client),
}

impl Asker<'_> {
    fn ask(&mut self, statement: &str) -> Result<Rendered, String> {
        match self {
            Asker::Local(session) => session
                .query(statement)
                .map(|a| Rendered {
                    text: a.to_string(),
                    json: a.to_json(),
                })
                .map_err(|e| e.to_string()),
            Asker::Remote(client) => match client.ask(statement) {
                Ok(r) if r.ok => Ok(Rendered {
                    text: r.text,
                    json: r.json,
                }),
                Ok(r) => Err(r.text),
                Err(e) => Err(format!("asking the process holding the store: {e}")),
            },
        }
    }
}

fn query(path: &Path, a: QueryArgs, wait: Duration) -> Outcome {
    let hello = serve::Hello {
        seed: a.seed,
        colour: false,
    };
    let store;
    let mut session = match open_or_ask(path, wait, &hello)? {
        Opened::Local(s) => {
            store = s;
            Asker::Local(Box::new(match a.seed {
                Some(seed) => Session::with_seed(&store, seed),
                None => Session::new(&store),
            }))
        }
        Opened::Remote(client) => Asker::Remote(client),
    };
    if let Some(now) = &a.now {
        session
            .ask(&format!("SET NOW = {now}"))
            .map_err(|e| Failure(format!("--now '{now}': {e}")))?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let render = |answer: &Rendered| {
        if a.json {
            answer.json.clone()
        } else {
            answer.text.clone()
        }
    };
    if let Some(statement) = &a.statement {
        let answer = session.ask(statement).map_err(Failure)?;
        return ignore_closed_pipe(writeln!(out, "{}", render(&answer)).map_err(|e| e.to_string()));
    }
    let mut failed = 0u64;
    let mut input = std::io::stdin().lock();
    let mut bytes = Vec::new();
    for n in 0u64.. {
        bytes.clear();
        let read = input
            .read_until(b'\n', &mut bytes)
            .map_err(|e| Failure(format!("reading stdin: {e}")))?;
        if read == 0 {
            break;
        }
        // A line that is not UTF-8 is answered with an error like any bad statement, and the
        // lines after it still run.
        let answer = match std::str::from_utf8(&bytes) {
            Ok(line) => {
                let text = line.trim();
                if text.is_empty() || text.starts_with("--") {
                    continue;
                }
                session.ask(text)
            }
            Err(e) => Err(format!(
                "the statement is not UTF-8 text (invalid byte at column {})",
                e.valid_up_to() + 1
            )),
        };
        let written = match answer {
            Ok(answer) => writeln!(out, "{}", render(&answer)),
            Err(e) => {
                failed += 1;
                let msg = one_line(&e);
                eprintln!("sketchdb: line {}: {msg}", n + 1);
                if a.json {
                    // `kind` first, as in an answer and the REPL's `\json` errors.
                    let msg = serde_json::Value::String(msg);
                    writeln!(
                        out,
                        "{{\"kind\":\"error\",\"error\":{msg},\"line\":{}}}",
                        n + 1
                    )
                } else {
                    Ok(())
                }
            }
        };
        ignore_closed_pipe(written.map_err(|e| e.to_string()))?;
    }
    if failed > 0 {
        return Err(Failure(format!(
            "{failed} statement{} failed",
            if failed == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// A reader that went away (`sketchdb gen | head`) is not an error.
fn ignore_closed_pipe(r: Result<(), String>) -> Outcome {
    match r {
        Err(e) if e.contains("Broken pipe") || e.contains("broken pipe") => Ok(()),
        other => other.map_err(Failure),
    }
}

/// Exits with clap's usage error (code 2) for a flag the chosen stream does not take.
fn gen_usage(flag: &str, stream: &str, takes: &str) -> ! {
    use clap::CommandFactory;
    Cli::command()
        .error(
            clap::error::ErrorKind::ArgumentConflict,
            format!("--{flag} does not apply to {stream}; {takes}"),
        )
        .exit()
}

fn gen_cmd(a: GenArgs) -> Outcome {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = match a.stream {
        GenStream::Reference(kind) => {
            let chain_flags = [
                ("days", a.days.is_some()),
                ("events-per-day", a.events_per_day.is_some()),
                ("chains", a.chains.is_some()),
                ("contracts", a.contracts.is_some()),
                ("time-format", a.time_format.is_some()),
            ];
            if let Some((flag, _)) = chain_flags.iter().find(|(_, given)| *given) {
                gen_usage(
                    flag,
                    kind.name(),
                    "it takes --seed, --date and --scale (the others are for chains)",
                );
            }
            let options = GenOptions {
                seed: a.seed,
                date: a.date,
                scale: a.scale.unwrap_or(1.0),
            };
            gen::write_jsonl(kind, &options, &mut out)
        }
        GenStream::Chains => {
            if a.scale.is_some() {
                gen_usage(
                    "scale",
                    "chains",
                    "size it with --days and --events-per-day",
                );
            }
            let d = gen::ChainsOptions::default();
            let options = gen::ChainsOptions {
                seed: a.seed,
                date: a.date,
                days: a.days.unwrap_or(d.days),
                events_per_day: a.events_per_day.unwrap_or(d.events_per_day),
                chains: a.chains.unwrap_or(d.chains),
                contracts: a.contracts.unwrap_or(d.contracts),
                time_format: a.time_format.unwrap_or(d.time_format),
            };
            gen::write_chains_jsonl(&options, &mut out)
        }
    };
    let written = written.map(|_| ()).and_then(|()| {
        out.flush().map_err(|source| gen::GenError::Io {
            what: "stdout".into(),
            source,
        })
    });
    match written {
        Err(gen::GenError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            Ok(())
        }
        other => Ok(other?),
    }
}

fn repl(path: &Path, wait: Duration) -> Outcome {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let history = std::env::var_os("SKETCHDB_HISTORY")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".sketchdb_history")));
    let colour = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let options = ShellOptions {
        name,
        history,
        colour,
        now: None,
    };
    let hello = serve::Hello { seed: None, colour };
    let mut wait = wait;
    // A REPL reading through another process goes on when that process goes away or lets
    // the store go: it finds the store's holder again, or opens the store itself.
    for _ in 0..10 {
        match open_or_ask(path, wait, &hello)? {
            Opened::Local(store) => {
                // While the REPL holds the store, other processes read it through the REPL,
                // and a writer may ask it to let go.
                let (holding, bound) = serve::Holding::new(*store);
                if let Err(e) = bound {
                    eprintln!(
                        "sketchdb: warning: other processes cannot query {} or write to it \
while this REPL holds it (serving on {} failed: {e})",
                        path.display(),
                        path.join(serve::SOCKET_FILE).display()
                    );
                }
                match serve::serve_while(&holding, || shell::run(&holding, options.clone())) {
                    Err(ShellError::Holder(why)) => {
                        eprintln!(
                            "sketchdb: {why}; reading through it (the statement did not run)"
                        );
                    }
                    other => return Ok(other?),
                }
            }
            Opened::Remote(client) => match shell::run_remote(client, options.clone()) {
                Err(ShellError::Holder(why)) => {
                    eprintln!(
                        "sketchdb: {why}; opening the store again (waiting up to a minute for \
a writer; the statement did not run)"
                    );
                    wait = wait.max(Duration::from_secs(60));
                }
                other => return Ok(other?),
            },
        }
    }
    Err(Failure(format!(
        "{}: the processes holding the store kept going away; start the REPL again",
        path.display()
    )))
}
