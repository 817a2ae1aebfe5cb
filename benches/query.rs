//! The query layer end to end: parse time, and statements over stores built in this run.
//!
//! Run: `cargo bench --bench query`.

use criterion::{black_box, Criterion};
use sketchdb::gen::{splitmix64, wallet_address};
use sketchdb::query::{parse, Options, Session};
use sketchdb::sketch::SketchConfig;
use sketchdb::store::{Config, Event, Store};
use std::time::Duration;

const DAY: i64 = 86_400_000;
const T0: i64 = 1_764_547_200_000; // 2025-12-01

fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-qbench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `days` days of `per_day` events: chain a has wallets [0, W), chain b [W - 10,000, 2W - 10,000)
/// with W = pool, so exactly 10,000 wallets can be on both (the reference's shape).
fn build(
    name: &str,
    days: i64,
    per_day: u64,
    pool: u64,
    bloom: u64,
) -> (std::path::PathBuf, Store) {
    let dir = fresh_dir(name);
    let config = Config {
        sketches: SketchConfig {
            bloom_capacity: bloom,
            ..SketchConfig::default()
        },
        ..Config::default()
    };
    let store = Store::create(&dir, config).expect("create");
    for day in 0..days {
        let events: Vec<Event> = (0..per_day)
            .map(|i| {
                let r = splitmix64((day as u64) << 40 ^ i);
                let t = T0 + day * DAY + (i as i64 * DAY) / per_day as i64;
                if r & 1 == 0 {
                    Event::new(t, wallet_address(1, (r >> 8) % pool), &[("chain", "a")])
                } else {
                    Event::new(
                        t,
                        wallet_address(1, pool - 10_000 + (r >> 8) % pool),
                        &[("chain", "b")],
                    )
                }
            })
            .collect();
        for chunk in events.chunks(10_000) {
            store.ingest_batch(chunk).expect("ingest");
        }
    }
    store.flush().expect("flush");
    (dir, store)
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();

    let mut g = c.benchmark_group("query-parse");
    for q in [
        "DISTINCT wallets ON chain:a AND chain:b FROM LAST 30 DAYS",
        "SEEN 0x52908400098527886e0f7030069857d2e4169ee7",
    ] {
        g.bench_function(format!("parse {q}"), |b| {
            b.iter(|| parse(black_box(q)).expect("parses"))
        });
    }
    // A chain is one flat node: time in proportion to its length (docs/QUERY.md, Limits).
    let long_and = format!("COUNT ON c:0{}", " AND c:1".repeat(29_999));
    g.bench_function("parse a 30,000-operand AND chain (240 KB)", |b| {
        b.iter(|| parse(black_box(&long_and)).expect("parses"))
    });
    g.finish();

    let (year_dir, year) = build("year", 365, 20_000, 200_000, 100_000);
    let mut s = Session::with_seed(&year, 1);
    s.query("DISTINCT wallets FROM ALL").expect("warm up");
    let mut g = c.benchmark_group("query-year");
    g.bench_function(
        "DISTINCT wallets FROM ALL over 365 daily buckets, warm",
        |b| b.iter(|| s.query("DISTINCT wallets FROM ALL").expect("distinct")),
    );
    let wallet = wallet_address(1, 4_242);
    let seen = format!("SEEN {wallet}");
    g.bench_function("SEEN all-time (scalable Bloom), warm", |b| {
        b.iter(|| s.query(&seen).expect("seen"))
    });
    s.now = Some(T0 + 364 * DAY);
    g.bench_function("SAMPLE 1000 FROM LAST 7 DAYS (7 buckets)", |b| {
        b.iter(|| s.query("SAMPLE 1000 FROM LAST 7 DAYS").expect("sample"))
    });
    // Each tag's merged Theta read once, each repeated operand applied once.
    let excepts = format!(
        "DISTINCT wallets ON chain:a{}",
        " EXCEPT chain:b".repeat(5_000)
    );
    let mut sketch_only = Session::with_seed(&year, 4);
    sketch_only.options.exact_fallback = false;
    g.bench_function(
        "DISTINCT ON chain:a EXCEPT chain:b x5,000 over 365 buckets, theta only, warm",
        |b| b.iter(|| sketch_only.query(&excepts).expect("theta")),
    );
    g.finish();
    drop(year);
    let _ = std::fs::remove_dir_all(&year_dir);

    // 30 days × 334k = 10M events; the chains share 10,000 of 2M wallets.
    let (month_dir, month) = build("month", 30, 334_000, 1_000_000, 1_000_000);
    let q = "DISTINCT wallets ON chain:a AND chain:b";
    let mut theta_only = Session::with_seed(&month, 2);
    theta_only.options = Options {
        fallback_width: f64::INFINITY,
        ..Options::default()
    };
    let approx = theta_only.query(q).expect("theta");
    let mut fallback = Session::with_seed(&month, 3);
    let exact = fallback.query(q).expect("exact");
    println!("{q} over 30 buckets (10M events): theta {approx}");
    println!("{q} with the automatic fallback: {exact}");
    let mut g = c.benchmark_group("query-month");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function(
        "DISTINCT ON chain:a AND chain:b over 30 buckets, theta only, warm",
        |b| b.iter(|| theta_only.query(q).expect("theta")),
    );
    g.bench_function(
        "the same with the automatic exact fallback (scan of 10M events)",
        |b| b.iter(|| fallback.query(q).expect("exact")),
    );
    g.finish();
    drop(month);
    let _ = std::fs::remove_dir_all(&month_dir);
    c.final_summary();
}
