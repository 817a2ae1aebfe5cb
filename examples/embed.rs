//! Embedding sketchdb in a Rust service: one store, a writer thread ingesting batches, and
//! readers asking questions at the same time. `cargo test` builds this; run it with
//! `cargo run --release --example embed`.

use sketchdb::gen::{self, GenOptions, StreamKind};
use sketchdb::query::{Answer, Session, Value};
use sketchdb::store::{Config, Event, Slice, Store, TimeRange};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("sketchdb-embed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(Store::create(&dir, Config::default())?);

    // A writer: the reference's stream A, in batches, durable after each flush.
    let writer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || -> Result<u64, String> {
            let options = GenOptions::default(); // seed 42, 2026-12-01
            let mut batch: Vec<Event> = Vec::with_capacity(10_000);
            let mut total = 0;
            for e in gen::events(StreamKind::StreamA, &options).map_err(|e| e.to_string())? {
                batch.push(gen::to_store_event(&e));
                if batch.len() == batch.capacity() {
                    store.ingest_batch(&batch).map_err(|e| e.to_string())?;
                    store.flush().map_err(|e| e.to_string())?; // survives a crash from here on
                    total += batch.len() as u64;
                    batch.clear();
                }
            }
            store.ingest_batch(&batch).map_err(|e| e.to_string())?;
            store.flush().map_err(|e| e.to_string())?;
            Ok(total + batch.len() as u64)
        })
    };

    // A reader meanwhile: `Store` is Send + Sync, and every answer is consistent (no
    // half-applied batch).
    let reader = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || -> Result<f64, String> {
            let mut last = 0.0;
            for _ in 0..5 {
                let a = store.query("COUNT").map_err(|e| e.to_string())?;
                if let Value::Number(n) = a.value {
                    assert!(n >= last, "counts never go backwards");
                    last = n;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(last)
        })
    };
    let written = writer.join().map_err(|_| "writer panicked")??;
    let seen_by_reader = reader.join().map_err(|_| "reader panicked")??;
    println!("wrote {written} events; the reader saw up to {seen_by_reader} while they arrived");

    // The query language, with the answer's bound and method as data.
    let distinct: Answer = store.query("DISTINCT wallets FROM 2026-12-01 TO 2026-12-01")?;
    println!("{distinct}");
    println!(
        "  value {:?}, 95% bounds {:?}..{:?}, by {} over {} bucket(s)",
        distinct.value, distinct.lower, distinct.upper, distinct.method, distinct.buckets
    );
    // The same answer as JSON, as `sketchdb query --json` prints it.
    println!("{}", store.query("TOP 3 wallets")?.to_json());

    // A session keeps a clock (for `today`) and a seed (for reproducible samples).
    let mut session = Session::with_seed(&store, 7);
    session.query("SET NOW = 2026-12-01")?;
    let sample = session.query("SAMPLE 3 FROM today")?;
    println!("{sample}");

    // Typed access for services that want the sketches themselves.
    let hll = store.merged_hll(&Slice::Whole, &TimeRange::all())?;
    if let Some(h) = hll.sketch {
        use sketchdb::Sketch;
        println!(
            "merged HLL over {} bucket(s): {:.0}",
            hll.buckets,
            h.estimate().value
        );
    }

    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
