//! The store on disk: ingest throughput with the log on, bytes on disk per event, open time,
//! merged HLL over a year of buckets (cold and warm), and exact scan speed.
//!
//! Run: `cargo bench --bench store`. Sizes and counts printed before the timings are measured
//! in the same run.

use criterion::{BatchSize, Criterion, Throughput};
use sketchdb::gen::{splitmix64, wallet_address};
use sketchdb::sketch::SketchConfig;
use sketchdb::store::{Config, Engine, Event, SledEngine, Slice, Store, TimeRange};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BATCH: usize = 10_000;
const DAY: i64 = 86_400_000;
const T0: i64 = 1_764_547_200_000; // 2025-12-01

/// Events of the `gen` schema: a wallet from a pool of 200k (so repeats happen, as on a real
/// chain), one chain tag, times spread over `day`.
fn day_of_events(day: i64, n: usize, seed: u64) -> Vec<Event> {
    (0..n as u64)
        .map(|i| {
            let r = splitmix64(seed ^ (day as u64) << 32 ^ i);
            let chain = if r & 1 == 0 { "a" } else { "b" };
            let t = T0 + day * DAY + (i as i64 * DAY) / n as i64;
            Event::new(
                t,
                wallet_address(seed, (r >> 8) % 200_000),
                &[("chain", chain)],
            )
        })
        .collect()
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Bytes of keys and values under one key prefix, read back through the store's engine.
fn bytes_under(dir: &Path, prefix: &[u8]) -> (u64, u64) {
    let db = SledEngine::open(dir).expect("raw open").expect("a store");
    let mut bytes = 0u64;
    let mut n = 0u64;
    let end = [prefix[0] + 1];
    for entry in db.range(prefix, Some(&end)) {
        let (k, v) = entry.expect("entry");
        bytes += (k.len() + v.len()) as u64;
        n += 1;
    }
    (bytes, n)
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn size_report(label: &str, dir: &Path, events: u64) {
    let (log, blocks) = bytes_under(dir, b"L");
    let (index, _) = bytes_under(dir, b"I");
    let (sketches, sketch_values) = bytes_under(dir, b"S");
    let (all_time, _) = bytes_under(dir, b"A");
    println!(
        "{label}: {events} events; log {:.1} B/event ({blocks} blocks, index {:.2} B/event); \
         sketches {:.1} B/event ({sketch_values} values, {:.1} MB) + all-time bloom {:.1} MB; \
         files on disk {:.1} MB",
        (log + index) as f64 / events as f64,
        index as f64 / events as f64,
        sketches as f64 / events as f64,
        sketches as f64 / 1e6,
        all_time as f64 / 1e6,
        dir_size(dir) as f64 / 1e6,
    );
}

fn ingest(c: &mut Criterion) {
    let dir = fresh_dir("ingest");
    let store = Store::create(&dir, Config::default()).expect("create");
    let batches: Vec<Vec<Event>> = (0..100).map(|b| day_of_events(0, BATCH, b)).collect();
    let mut g = c.benchmark_group("store-ingest");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    let mut next = 0;
    g.bench_function("ingest_batch(10k) + flush, log on, default sizing", |b| {
        b.iter(|| {
            store
                .ingest_batch(&batches[next % batches.len()])
                .expect("ingest");
            store.flush().expect("flush");
            next += 1;
        })
    });
    g.finish();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One 1M-event day, then 30 days of 300k events each: bytes per event, log and sketches apart.
fn sizes() {
    let dir = fresh_dir("size-day");
    {
        let store = Store::create(&dir, Config::default()).expect("create");
        let start = Instant::now();
        for chunk in day_of_events(0, 1_000_000, 1).chunks(BATCH) {
            store.ingest_batch(chunk).expect("ingest");
            store.flush().expect("flush");
        }
        println!(
            "ingested 1M events in {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }
    size_report("1 day x 1M", &dir, 1_000_000);
    let _ = std::fs::remove_dir_all(&dir);

    let dir = fresh_dir("size-30");
    {
        let store = Store::create(&dir, Config::default()).expect("create");
        for day in 0..30 {
            for chunk in day_of_events(day, 300_000, 2).chunks(BATCH) {
                store.ingest_batch(chunk).expect("ingest");
            }
            store.flush().expect("flush");
        }
    }
    size_report("30 days x 300k", &dir, 9_000_000);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A year of daily buckets (20k events a day; Bloom sized for 100k a day, as a store of this
/// traffic would be configured), then open time and merged HLL over all 365 buckets.
fn year(c: &mut Criterion) {
    let dir = fresh_dir("year");
    let config = Config {
        sketches: SketchConfig {
            bloom_capacity: 100_000,
            ..SketchConfig::default()
        },
        ..Config::default()
    };
    {
        let store = Store::create(&dir, config).expect("create");
        for day in 0..365 {
            store
                .ingest_batch(&day_of_events(day, 20_000, 3))
                .expect("ingest");
        }
        store.flush().expect("flush");
    }
    size_report("365 days x 20k", &dir, 365 * 20_000);
    let mut g = c.benchmark_group("store-year");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("open a store with 365 daily buckets", |b| {
        b.iter_batched(
            || (),
            |_| Store::open(&dir).expect("open"),
            BatchSize::PerIteration,
        )
    });
    let all = TimeRange::all();
    g.bench_function(
        "merged HLL over 365 buckets, cold (first query after open)",
        |b| {
            b.iter_batched(
                || Store::open(&dir).expect("open"),
                |s| {
                    let m = s.merged_hll(&Slice::Whole, &all).expect("hll");
                    assert_eq!(m.buckets, 365);
                    s
                },
                BatchSize::PerIteration,
            )
        },
    );
    let store = Store::open(&dir).expect("open");
    store.merged_hll(&Slice::Whole, &all).expect("warm up");
    g.bench_function("merged HLL over 365 buckets, warm", |b| {
        b.iter(|| store.merged_hll(&Slice::Whole, &all).expect("hll"))
    });
    g.finish();

    let mut g = c.benchmark_group("store-scan");
    let events = 365 * 20_000u64;
    g.throughput(Throughput::Elements(events));
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let wallet = wallet_address(3, 12_345);
    let mut buf = [0u8; 20];
    let key = Store::item_key(&wallet, &mut buf);
    g.bench_function(
        "exact scan of 7.3M events, filter chain:a and one wallet",
        |b| {
            b.iter(|| {
                let mut hits = 0u64;
                let decoded = store
                    .scan(&Slice::tag("chain", "a"), &all, |ev| {
                        if ev.item == key {
                            hits += 1;
                        }
                    })
                    .expect("scan");
                assert_eq!(decoded, events);
                hits
            })
        },
    );
    g.finish();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    sizes();
    ingest(&mut c);
    year(&mut c);
    c.final_summary();
}
