//! What the store costs on data shaped like users' (issue 12): bytes on disk, sled's blob
//! files, the ingest's peak memory and its speed, for the shapes of the table.
//!
//! For each shape the JSONL of `sketchdb gen chains` (the library's `write_chains_jsonl`) is
//! written once to a temporary directory, then ingested by the real binary exactly as a user
//! does: `sketchdb --db DIR init` with the shape's flags, then `sketchdb --db DIR ingest FILE`.
//! Every ingest runs as `prlimit --as=CAP --fsize=CAP -- /usr/bin/time -v sketchdb …`: the peak
//! RSS is `/usr/bin/time`'s "Maximum resident set size" of that one child (not getrusage over
//! all children, which would carry the largest earlier child forward), and the caps keep a
//! runaway ingest from taking the shared machine's memory or disk with it.
//!
//! First a footprint run per shape (not timed by criterion): the store directory's size on
//! disk (allocated blocks, as `du`) against the JSONL's bytes, what `blobs/` holds, the peak
//! RSS. Then criterion times the ingest (a fresh store each time; `init` is not timed), with
//! flat sampling (10 ingests). The table at the end gives events/s as the median of every
//! ingest of the shape (the footprint run and criterion's), with the slowest and the fastest.
//! Above it, the time of a fixed integer loop on every core before the shapes and after
//! (`machine_loop`; 0.16–0.17 s on this 2-core VM at its usual speed), so that a figure can be
//! read against the machine's speed at the time.
//!
//! Shapes (20,000 events a day, 3 chains, 2,000 contracts; `chains` defaults):
//! - `day_3chains_30d`: day buckets, tag chain, 30 days;
//! - `hour_3chains_7d`: hour buckets, tag chain, 7 days;
//! - `day_contract_1d`: day buckets, tags chain and contract, 1 day;
//! - `hour_contract_1d`: hour buckets, tags chain and contract, 1 day. Before the issue 12
//!   redesign this grew past 24 GB and was OOM-killed, so it runs only when named in
//!   `SKETCHDB_FOOTPRINT` (or with `all`), and always under the memory cap;
//! - `ingests_60x10`: 60 `ingest` runs of 10 lines each (day buckets, tag chain) into one
//!   store; the size after the first and after the 60th, and their ratio.
//!
//! Environment:
//! - `SKETCHDB_FOOTPRINT=day_contract_1d,ingests_60x10` picks shapes (`all`: every shape;
//!   default: all but `hour_contract_1d`);
//! - `SKETCHDB_FOOTPRINT_DAYS=3` days of the multi-day shapes (default 30 and 7);
//! - `SKETCHDB_FOOTPRINT_EVENTS=20000` events per day;
//! - `SKETCHDB_FOOTPRINT_TIMING=0` footprint runs only (no criterion timing);
//! - `SKETCHDB_FOOTPRINT_MEM_GB=8` address-space cap of each ingest (default 8);
//! - `SKETCHDB_FOOTPRINT_FILE_GB=16` largest file an ingest may write (default 16);
//! - `SKETCHDB_FOOTPRINT_DIR=/path` where the JSONL and the stores go (default the temp dir).
//!
//! Run: `SKETCHDB_FOOTPRINT=day_contract_1d cargo bench --bench footprint`.

use criterion::{Criterion, SamplingMode, Throughput};
use sketchdb::gen::{self, ChainsOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sketchdb");
const TIME: &str = "/usr/bin/time";
const GB: u64 = 1 << 30;

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    bucket: &'static str,
    tags: &'static [&'static str],
    days: u32,
    /// `Some((runs, lines))`: that many ingests of that many lines each, instead of one file.
    batches: Option<(usize, usize)>,
    /// Runs only when asked for by name (or `all`).
    opt_in: bool,
}

const SHAPES: [Shape; 5] = [
    Shape {
        name: "day_3chains_30d",
        bucket: "day",
        tags: &["chain"],
        days: 30,
        batches: None,
        opt_in: false,
    },
    Shape {
        name: "hour_3chains_7d",
        bucket: "hour",
        tags: &["chain"],
        days: 7,
        batches: None,
        opt_in: false,
    },
    Shape {
        name: "day_contract_1d",
        bucket: "day",
        tags: &["chain", "contract"],
        days: 1,
        batches: None,
        opt_in: false,
    },
    Shape {
        name: "hour_contract_1d",
        bucket: "hour",
        tags: &["chain", "contract"],
        days: 1,
        batches: None,
        opt_in: true,
    },
    Shape {
        name: "ingests_60x10",
        bucket: "day",
        tags: &["chain"],
        days: 1,
        batches: Some((60, 10)),
        opt_in: false,
    },
];

/// The knobs, from the environment.
struct Settings {
    shapes: Vec<Shape>,
    days: Option<u32>,
    events_per_day: u64,
    timing: bool,
    mem_cap: u64,
    file_cap: u64,
    dir: PathBuf,
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={v}: not a number"),
    }
}

impl Settings {
    fn from_env() -> Settings {
        let shapes = match std::env::var("SKETCHDB_FOOTPRINT") {
            Ok(list) if list.trim() == "all" => SHAPES.to_vec(),
            Ok(list) => list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|name| {
                    SHAPES
                        .iter()
                        .find(|s| s.name == name)
                        .copied()
                        .unwrap_or_else(|| {
                            let names: Vec<_> = SHAPES.iter().map(|s| s.name).collect();
                            panic!("SKETCHDB_FOOTPRINT: no shape {name} (shapes: {names:?})")
                        })
                })
                .collect(),
            Err(_) => SHAPES.iter().filter(|s| !s.opt_in).copied().collect(),
        };
        Settings {
            shapes,
            days: env_number("SKETCHDB_FOOTPRINT_DAYS"),
            events_per_day: env_number("SKETCHDB_FOOTPRINT_EVENTS").unwrap_or(20_000),
            timing: std::env::var("SKETCHDB_FOOTPRINT_TIMING").map_or(true, |v| v.trim() != "0"),
            mem_cap: env_number::<u64>("SKETCHDB_FOOTPRINT_MEM_GB").unwrap_or(8) * GB,
            file_cap: env_number::<u64>("SKETCHDB_FOOTPRINT_FILE_GB").unwrap_or(16) * GB,
            dir: std::env::var_os("SKETCHDB_FOOTPRINT_DIR")
                .map_or_else(std::env::temp_dir, PathBuf::from)
                .join(format!("sketchdb-footprint-{}", std::process::id())),
        }
    }

    /// The shape's days: its own, or `SKETCHDB_FOOTPRINT_DAYS` for the multi-day shapes.
    fn days(&self, shape: &Shape) -> u32 {
        match self.days {
            Some(d) if shape.days > 1 => d,
            _ => shape.days,
        }
    }
}

/// One `ingest` child: how it ended, its wall time and its peak RSS.
struct Ingest {
    wall: Duration,
    max_rss_kb: Option<u64>,
    /// `None` on success, else the exit status and the last lines of stderr.
    failure: Option<String>,
}

fn run(cmd: &mut Command) -> std::process::Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn init(shape: &Shape, db: &Path) {
    let _ = std::fs::remove_dir_all(db);
    let mut cmd = Command::new(BIN);
    cmd.arg("--db")
        .arg(db)
        .args(["init", "--bucket", shape.bucket]);
    for t in shape.tags {
        cmd.args(["--tag", t]);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "init {}: {}",
        shape.name,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ingest(settings: &Settings, db: &Path, file: &Path, lines: u64) -> Ingest {
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--as={}", settings.mem_cap))
        .arg(format!("--fsize={}", settings.file_cap))
        .args(["--", TIME, "-v", BIN, "--db"])
        .arg(db)
        .args(["ingest", "--quiet"])
        .arg(file);
    let started = Instant::now();
    let out = run(&mut cmd);
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let max_rss_kb = stderr.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Maximum resident set size (kbytes):")
            .and_then(|v| v.trim().parse().ok())
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("ingested {} events", thousands(lines));
    let failure = if out.status.success() && stdout.contains(&want) {
        None
    } else {
        // sketchdb's own message (and time's "Command terminated by signal"), without the
        // backtrace and time's tab-indented report.
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                !l.starts_with('\t')
                    && !l.starts_with(' ')
                    && !l.starts_with("stack backtrace")
                    && !l.starts_with("note:")
            })
            .take(2)
            .collect();
        Some(format!(
            "{} after {:.1} s: {}{}",
            out.status,
            wall.as_secs_f64(),
            stdout.trim(),
            said.join("; ")
        ))
    };
    Ingest {
        wall,
        max_rss_kb,
        failure,
    }
}

/// Bytes allocated on disk (as `du`), apparent bytes, and files, under `path`.
#[derive(Clone, Copy, Default)]
struct Usage {
    allocated: u64,
    apparent: u64,
    files: u64,
}

fn usage(path: &Path) -> Usage {
    let mut u = Usage::default();
    let Ok(entries) = std::fs::read_dir(path) else {
        return u;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if meta.is_dir() {
            let sub = usage(&entry.path());
            u.allocated += sub.allocated;
            u.apparent += sub.apparent;
            u.files += sub.files;
        } else {
            u.allocated += meta.blocks() * 512;
            u.apparent += meta.len();
            u.files += 1;
        }
    }
    u
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// What the table shows for a shape.
struct Row {
    name: &'static str,
    events: u64,
    jsonl: u64,
    store: Usage,
    blobs: Usage,
    max_rss_kb: Option<u64>,
    /// Wall times of every successful ingest (of the whole 60 for `ingests_60x10`).
    walls: Vec<Duration>,
    failure: Option<String>,
    /// `ingests_60x10`: the store after the first ingest.
    first: Option<Usage>,
}

/// The shape's input: one file, or the batches' files.
fn write_input(settings: &Settings, shape: &Shape) -> (Vec<(PathBuf, u64)>, u64, u64) {
    let opts = ChainsOptions {
        days: settings.days(shape),
        events_per_day: match shape.batches {
            Some((runs, lines)) => (runs * lines) as u64,
            None => settings.events_per_day,
        },
        ..ChainsOptions::default()
    };
    let mut text = Vec::new();
    let lines = gen::write_chains_jsonl(&opts, &mut text).expect("generate");
    let bytes = text.len() as u64;
    let files = match shape.batches {
        None => {
            let path = settings.dir.join(format!("{}.jsonl", shape.name));
            std::fs::write(&path, &text).expect("write the JSONL");
            // On disk before any ingest is timed: left to the kernel's writeback, 200 MB of
            // dirty input went out some 30 s later, under the timed ingests' own fsyncs.
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .expect("sync the JSONL");
            vec![(path, lines)]
        }
        Some((_, per)) => text
            .split_inclusive(|&b| b == b'\n')
            .collect::<Vec<_>>()
            .chunks(per)
            .enumerate()
            .map(|(i, chunk)| {
                let path = settings.dir.join(format!("{}-{i:03}.jsonl", shape.name));
                let mut f = std::fs::File::create(&path).expect("create a batch");
                for l in chunk {
                    f.write_all(l).expect("write a batch");
                }
                f.sync_all().expect("sync a batch");
                (path, chunk.len() as u64)
            })
            .collect(),
    };
    (files, lines, bytes)
}

/// One full ingest of the shape into a fresh store: all its files, in order. Returns the
/// summed wall time, the peak RSS over the children, the first failure, and the store after
/// the first file.
fn ingest_shape(
    settings: &Settings,
    shape: &Shape,
    db: &Path,
    files: &[(PathBuf, u64)],
) -> (Duration, Option<u64>, Option<String>, Option<Usage>) {
    init(shape, db);
    let mut wall = Duration::ZERO;
    let mut rss: Option<u64> = None;
    let mut first = None;
    for (i, (file, lines)) in files.iter().enumerate() {
        let r = ingest(settings, db, file, *lines);
        wall += r.wall;
        rss = rss.max(r.max_rss_kb);
        if r.failure.is_some() {
            return (wall, rss, r.failure, first);
        }
        if i == 0 && files.len() > 1 {
            first = Some(usage(db));
        }
    }
    (wall, rss, None, first)
}

fn main() {
    let settings = Settings::from_env();
    let loop_before = machine_loop();
    for tool in ["prlimit", TIME] {
        let ok = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{tool} is needed (util-linux's prlimit caps each ingest; GNU time reports its RSS)"
        );
    }
    std::fs::create_dir_all(&settings.dir).expect("create the bench directory");
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();

    // The generator itself: how long the input of one day takes to make.
    {
        let mut g = c.benchmark_group("gen");
        g.throughput(Throughput::Elements(20_000));
        g.bench_function("chains_20k_lines", |b| {
            b.iter(|| {
                gen::write_chains_jsonl(&ChainsOptions::default(), &mut std::io::sink())
                    .expect("generate")
            })
        });
        g.finish();
    }

    let mut rows = Vec::new();
    for shape in &settings.shapes {
        let (files, events, jsonl) = write_input(&settings, shape);
        let db = settings.dir.join(format!("{}.db", shape.name));
        println!(
            "footprint {}: {} events, {} of JSONL ({:.0} B/line), caps {} GB memory / {} GB file",
            shape.name,
            thousands(events),
            mb(jsonl),
            jsonl as f64 / events as f64,
            settings.mem_cap / GB,
            settings.file_cap / GB
        );
        let (wall, max_rss_kb, failure, first) = ingest_shape(&settings, shape, &db, &files);
        let mut row = Row {
            name: shape.name,
            events,
            jsonl,
            store: usage(&db),
            blobs: usage(&db.join("blobs")),
            max_rss_kb,
            walls: Vec::new(),
            failure,
            first,
        };
        if row.failure.is_none() {
            row.walls.push(wall);
        }
        let _ = std::fs::remove_dir_all(&db);
        if settings.timing && row.failure.is_none() {
            let mut g = c.benchmark_group("footprint");
            g.sampling_mode(SamplingMode::Flat);
            g.throughput(Throughput::Elements(events));
            g.bench_function(shape.name, |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (wall, rss, failure, _) = ingest_shape(&settings, shape, &db, &files);
                        if let Some(f) = failure {
                            panic!("{}: an ingest failed while timing: {f}", shape.name);
                        }
                        row.max_rss_kb = row.max_rss_kb.max(rss);
                        row.walls.push(wall);
                        total += wall;
                    }
                    total
                })
            });
            g.finish();
            let _ = std::fs::remove_dir_all(&db);
        }
        for (f, _) in &files {
            let _ = std::fs::remove_file(f);
        }
        print_row(&row);
        rows.push(row);
    }
    c.final_summary();
    let loops = (loop_before, machine_loop());
    print_table(&settings, &rows, loops);
    let _ = std::fs::remove_dir_all(&settings.dir);
}

/// The machine's speed at the moment: one fixed chain of integer work (xorshift, each step
/// needing the last) on every core at once, timed. On a shared VM the host's load moves every
/// figure here: on 2026-12-07 a loop like it ran 1.8 times its usual time for half hours at a
/// stretch, and the same build's contract-day ingest then made 420–460k events/s instead of
/// 550–710k, so each table says which kind of minute it was measured in.
fn machine_loop() -> Duration {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for core in 0..cores {
            scope.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ core as u64;
                for _ in 0..100_000_000u32 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                std::hint::black_box(x)
            });
        }
    });
    started.elapsed()
}

fn median(walls: &[Duration]) -> Option<Duration> {
    let mut w = walls.to_vec();
    w.sort_unstable();
    w.get(w.len() / 2).copied()
}

fn print_row(r: &Row) {
    println!(
        "footprint {}: store {} on disk ({:.2}× the JSONL), blobs/ {} files {}, peak RSS {}{}",
        r.name,
        mb(r.store.allocated),
        r.store.allocated as f64 / r.jsonl as f64,
        r.blobs.files,
        mb(r.blobs.allocated),
        r.max_rss_kb.map_or("n/a".to_string(), |kb| mb(kb * 1024)),
        r.failure
            .as_ref()
            .map_or(String::new(), |f| format!(", FAILED: {f}"))
    );
}

fn print_table(settings: &Settings, rows: &[Row], (before, after): (Duration, Duration)) {
    println!();
    println!(
        "machine: a fixed integer loop on every core took {:.2} s before the shapes and {:.2} s \
after (see `machine_loop`)",
        before.as_secs_f64(),
        after.as_secs_f64()
    );
    println!(
        "sketchdb footprint ({} events a day of `gen chains`; store = allocated bytes of the store \
directory, as du; RSS = /usr/bin/time -v of the ingest child; events/s = median of {} ingests, \
slowest–fastest in brackets; memory cap {} GB)",
        thousands(settings.events_per_day),
        if settings.timing {
            "the footprint run's and criterion's"
        } else {
            "the footprint run's (timing off)"
        },
        settings.mem_cap / GB
    );
    println!(
        "| shape | events | JSONL | store on disk | store / JSONL | blobs/ | peak RSS | events/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        let per_second =
            |w: Duration| thousands((r.events as f64 / w.as_secs_f64()).round() as u64);
        // The slowest and fastest ingest beside the median: on a shared machine the same build
        // moves by a quarter between minutes, and a median alone hides which kind of minute it was.
        let rate = match (median(&r.walls), r.walls.iter().max(), r.walls.iter().min()) {
            (Some(m), Some(&slowest), Some(&fastest)) if r.walls.len() > 1 => format!(
                "{} ({}–{})",
                per_second(m),
                per_second(slowest),
                per_second(fastest)
            ),
            (Some(m), _, _) => per_second(m),
            _ => "—".to_string(),
        };
        let store = match (&r.failure, r.first) {
            (Some(_), _) => format!("{} when it failed (below)", mb(r.store.allocated)),
            (None, Some(first)) => format!(
                "{} after the first, {} after the last ({:.1}×)",
                mb(first.allocated),
                mb(r.store.allocated),
                r.store.allocated as f64 / first.allocated.max(1) as f64
            ),
            (None, None) => mb(r.store.allocated),
        };
        println!(
            "| {} | {} | {} | {} | {:.2}× | {} files, {} | {} | {} |",
            r.name,
            thousands(r.events),
            mb(r.jsonl),
            store,
            r.store.allocated as f64 / r.jsonl as f64,
            r.blobs.files,
            mb(r.blobs.allocated),
            r.max_rss_kb.map_or("n/a".to_string(), |kb| mb(kb * 1024)),
            rate
        );
    }
    for r in rows {
        if let Some(f) = &r.failure {
            println!(
                "{} FAILED (run under a {} GB address-space cap; prlimit --as counts reserved, \
not only resident, memory): {f}",
                r.name,
                settings.mem_cap / GB
            );
        }
    }
}
