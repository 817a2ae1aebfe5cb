//! Ingest of a 10M-line JSONL file of the `gen` schema (two-chains at full scale), end to end as
//! `sketchdb ingest FILE` runs it: read, parse, route to the sketch sets, log, commit and sync.
//! Also the parser alone on one core, to show which side bounds the pipeline.
//!
//! Run: `cargo bench --bench ingest` (about 1.2 GB of temporary file; a few minutes).

use criterion::{BatchSize, Criterion, Throughput};
use sketchdb::gen::{self, GenOptions, StreamKind};
use sketchdb::ingest::{self, jsonl, Mapping, Options};
use sketchdb::store::{Config, Event, Store};
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "sketchdb-bench-ingest-{name}-{}",
        std::process::id()
    ))
}

fn main() {
    let file = temp("two-chains.jsonl");
    let lines = {
        let out = std::fs::File::create(&file).expect("create the input file");
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        gen::write_jsonl(StreamKind::TwoChains, &GenOptions::default(), &mut out)
            .expect("write the input file")
    };
    let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    println!(
        "input: {lines} lines, {bytes} bytes ({:.1} B/line)",
        bytes as f64 / lines as f64
    );

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(60))
        .configure_from_args();

    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(lines));
    g.bench_function("jsonl_10M_two_chains_file", |b| {
        b.iter_batched(
            || {
                let dir = temp("store");
                let _ = std::fs::remove_dir_all(&dir);
                let store = Store::create(&dir, Config::default()).expect("create");
                (dir, store)
            },
            |(dir, store)| {
                let input = std::fs::File::open(&file).expect("open the input file");
                let options = Options {
                    total_bytes: Some(bytes),
                    ..Options::default()
                };
                let s = ingest::ingest(&store, input, &options, &mut |_| {}).expect("ingest");
                assert_eq!(s.events, lines);
                (dir, store)
            },
            BatchSize::PerIteration,
        );
    });

    // The peer, in the same run: what a Rust service would write by hand with the peer crates
    // on one thread. serde_json into a struct, then a Bloom filter (bloomfilter, 1M at 1%) and
    // a HyperLogLog (hyperloglogplus PF, p = 14) per line: one filter and one counter in memory,
    // against our two sketch sets of five families, the all-time filter, the log and the
    // commit to disk.
    g.throughput(Throughput::Elements(lines));
    g.bench_function("peer_serde_bloomfilter_hyperloglogplus_10M", |b| {
        b.iter(|| {
            #[derive(serde::Deserialize)]
            struct Line<'a> {
                #[allow(dead_code)]
                time: &'a str,
                wallet: &'a str,
                #[allow(dead_code)]
                chain: &'a str,
            }
            let mut bloom: bloomfilter::Bloom<str> =
                bloomfilter::Bloom::new_for_fp_rate(1_000_000, 0.01).expect("size");
            let mut hll: hyperloglogplus::HyperLogLogPF<str, std::hash::RandomState> =
                hyperloglogplus::HyperLogLogPF::new(14, std::hash::RandomState::new()).expect("p");
            let f = std::fs::File::open(&file).expect("open the input file");
            let mut r = std::io::BufReader::with_capacity(1 << 20, f);
            let mut line = Vec::with_capacity(256);
            let mut n = 0u64;
            loop {
                line.clear();
                if r.read_until(b'\n', &mut line).expect("read") == 0 {
                    break;
                }
                let l: Line<'_> = serde_json::from_slice(&line).expect("valid");
                bloom.set(l.wallet);
                hyperloglogplus::HyperLogLog::insert(&mut hll, l.wallet);
                n += 1;
            }
            assert_eq!(n, lines);
            (bloom, hll)
        });
    });

    // The parser alone, on this thread: what one core does before the store sees an event.
    let mapping = Mapping::for_config(&Config::default());
    let text: Vec<u8> = {
        let f = std::fs::File::open(&file).expect("open the input file");
        let mut r = std::io::BufReader::new(f);
        let mut v = Vec::new();
        for _ in 0..1_000_000 {
            if r.read_until(b'\n', &mut v).unwrap_or(0) == 0 {
                break;
            }
        }
        v
    };
    g.throughput(Throughput::Elements(1_000_000));
    g.bench_function("parse_only_1M_lines", |b| {
        let mut event = Event::new(0, "", &[]);
        b.iter(|| {
            let mut n = 0u64;
            for (i, line) in text.split(|&b| b == b'\n').enumerate() {
                if !line.is_empty() {
                    jsonl::parse_line(line, i as u64 + 1, &mapping, &mut event).expect("valid");
                    n += 1;
                }
            }
            n
        });
    });
    g.finish();
    c.final_summary();
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(temp("store"));
}
