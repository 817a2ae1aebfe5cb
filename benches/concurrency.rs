//! Readers while a writer runs (issue 13's targets): a writer ingesting 10k-event batches with
//! a flush after each, alone, with 1, 2 and 4 reader threads asking `DISTINCT`, `SEEN`, `COUNT
//! <value>` and `TOP` in turn without pause, and with 4 pausing 1 ms between queries; and
//! `COUNT` asked while a 1M-event import runs.
//!
//! Readers take the sketches' answers (`Options::exact_fallback` off): with it on, as in the
//! REPL, `COUNT <wallet>` and `TOP` of a rare wallet answer exactly by scanning the day's raw
//! events instead, which costs the scan (about 150 ms here) whoever writes.
//!
//! Criterion times the writer's batches (alone against with readers) and each `COUNT` during
//! the import; the readers' latencies, which criterion cannot time from other threads, are
//! printed as medians and 99th percentiles after each group.
//!
//! Run: `cargo bench --bench concurrency`.

use criterion::{Criterion, Throughput};
use sketchdb::gen::{splitmix64, wallet_address};
use sketchdb::query::Session;
use sketchdb::store::{Config, Event, Store};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BATCH: usize = 10_000;
const T0: i64 = 1_764_547_200_000; // 2025-12-01
const DAY: i64 = 86_400_000;

/// Batch `k`: wallets from a pool of 200k, two chains, spread over one day per 50 batches.
fn batch(k: u64, n: usize) -> Vec<Event> {
    (0..n as u64)
        .map(|i| {
            let r = splitmix64(k << 24 ^ i);
            let chain = if r & 1 == 0 { "a" } else { "b" };
            let t = T0 + (k / 50) as i64 * DAY + ((i as i64) * DAY) / n as i64;
            Event::new(
                t,
                wallet_address(7, (r >> 8) % 200_000),
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, latencies: &Mutex<Vec<(usize, Duration)>>, names: &[&str]) {
    let all = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    for (q, name) in names.iter().enumerate() {
        let mut l: Vec<Duration> = all
            .iter()
            .filter(|(k, _)| *k == q)
            .map(|(_, d)| *d)
            .collect();
        l.sort();
        println!(
            "{what}: {name:<28} n={:>7}  p50 {:>9.3} ms  p99 {:>9.3} ms  max {:>9.3} ms",
            l.len(),
            percentile(&l, 0.5).as_secs_f64() * 1e3,
            percentile(&l, 0.99).as_secs_f64() * 1e3,
            l.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        );
    }
}

/// The statements readers ask in turn; `{w}` is a wallet of the pool.
const QUERIES: [&str; 4] = [
    "DISTINCT wallets",
    "SEEN {w}",
    "COUNT {w}",
    "TOP 10 wallets",
];

/// Starts `n` readers asking [`QUERIES`] in turn until `stop`, recording each latency, with
/// `pause` between two queries (none: as fast as they answer).
fn readers(
    store: &Arc<Store>,
    n: usize,
    pause: Option<Duration>,
    stop: &Arc<AtomicBool>,
    latencies: &Arc<Mutex<Vec<(usize, Duration)>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|r| {
            let (store, stop, latencies) =
                (Arc::clone(store), Arc::clone(stop), Arc::clone(latencies));
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut q = r;
                let mut session = Session::new(&store);
                session.options.exact_fallback = false;
                let texts: Vec<String> = QUERIES
                    .iter()
                    .map(|t| t.replace("{w}", &wallet_address(7, r as u64)))
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    let k = q % QUERIES.len();
                    let start = Instant::now();
                    let answer = session.query(&texts[k]);
                    mine.push((k, start.elapsed()));
                    if let Err(e) = answer {
                        eprintln!("reader {r}: {e}");
                        return;
                    }
                    q += 1;
                    if let Some(p) = pause {
                        std::thread::sleep(p);
                    }
                }
                if let Ok(mut l) = latencies.lock() {
                    l.extend(mine);
                }
            })
        })
        .collect()
}

/// A store holding `batches` batches already, for the writer to go on from.
fn prepared(name: &str, batches: u64) -> (PathBuf, Arc<Store>) {
    let dir = fresh_dir(name);
    let store = Store::create(&dir, Config::default()).expect("create");
    for k in 0..batches {
        store.ingest_batch(&batch(k, BATCH)).expect("ingest");
    }
    store.flush().expect("flush");
    (dir, Arc::new(store))
}

fn writer_with_readers(c: &mut Criterion) {
    let mut g = c.benchmark_group("concurrency-writer");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(BATCH as u64));
    // Readers without pause take CPU as much as the lock: on two cores, four of them and the
    // writer are five busy threads, so one and two such readers are measured too (what four
    // would see with a core each). Paced ones (a query a millisecond each, thousands a second
    // in all) show what waiting costs the writer.
    let pace = Duration::from_millis(1);
    let cases = [
        (0usize, None),
        (1, None),
        (2, None),
        (4, None),
        (4, Some(pace)),
    ];
    for (readers_n, pause) in cases {
        let (dir, store) = prepared(&format!("writer-{readers_n}"), 20);
        let stop = Arc::new(AtomicBool::new(false));
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let threads = readers(&store, readers_n, pause, &stop, &latencies);
        let mut k = 20u64;
        let name = match (readers_n, pause) {
            (0, _) => "batch+flush, alone".to_string(),
            (1, None) => "batch+flush, 1 reader".to_string(),
            (n, None) => format!("batch+flush, {n} readers"),
            (n, Some(p)) => format!("batch+flush, {n} readers pausing {} ms", p.as_millis()),
        };
        g.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                let batches: Vec<Vec<Event>> = (0..iters).map(|i| batch(k + i, BATCH)).collect();
                k += iters;
                let start = Instant::now();
                for events in &batches {
                    store.ingest_batch(events).expect("ingest");
                    store.flush().expect("flush");
                }
                start.elapsed()
            })
        });
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        if readers_n > 0 {
            report(&name, &latencies, &QUERIES);
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
    g.finish();
}

fn count_during_import(c: &mut Criterion) {
    let mut g = c.benchmark_group("concurrency-import");
    g.sample_size(30).measurement_time(Duration::from_secs(10));
    let (dir, store) = prepared("import", 5);
    // 1M-event imports, one after another, for as long as the bench asks.
    let stop = Arc::new(AtomicBool::new(false));
    let importing = Arc::new(AtomicBool::new(false));
    let importer = {
        let (store, stop, importing) = (
            Arc::clone(&store),
            Arc::clone(&stop),
            Arc::clone(&importing),
        );
        std::thread::spawn(move || {
            let mut k = 1_000u64;
            while !stop.load(Ordering::Relaxed) {
                importing.store(true, Ordering::Release);
                let outcome = store.import(|imp| {
                    for _ in 0..100 {
                        imp.ingest_batch(&batch(k, BATCH))?;
                        k += 1;
                    }
                    Ok::<_, sketchdb::store::StoreError>(())
                });
                importing.store(false, Ordering::Release);
                if let Err(e) = outcome {
                    eprintln!("import: {e}");
                    return;
                }
            }
        })
    };
    while !importing.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut during = Vec::new();
    g.bench_function("COUNT while a 1M-event import runs", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let busy = importing.load(Ordering::Acquire);
                let start = Instant::now();
                let answer = store.query("COUNT").expect("count");
                let took = start.elapsed();
                std::hint::black_box(answer);
                if busy {
                    during.push(took);
                }
                total += took;
            }
            total
        })
    });
    stop.store(true, Ordering::Relaxed);
    let _ = importer.join();
    during.sort();
    println!(
        "COUNT while importing: n={}  p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        during.len(),
        percentile(&during, 0.5).as_secs_f64() * 1e3,
        percentile(&during, 0.99).as_secs_f64() * 1e3,
        during.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    g.finish();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    writer_with_readers(&mut c);
    count_during_import(&mut c);
    c.final_summary();
}
