//! Many writers and readers on one store at once, as a service embedding it runs them: writers
//! ingest batches (flushing, checkpointing and importing now and then), readers ask every kind
//! of question on snapshots. Every answer must be consistent with some prefix of whole
//! batches, no thread may wait forever, and at the end the exact counts are what was ingested.
//!
//! Runs for `SKETCHDB_STRESS_SECS` seconds (20 unless given; set it to 300 to run minutes).

mod support;

use sketchdb::store::{Config, Event, Slice, Snapshot, Store, StoreError, TimeRange};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const WRITERS: usize = 3;
const READERS: usize = 4;
/// Events per batch: every count a reader sees of one writer is a multiple of it.
const BATCH: u64 = 250;
const DAY: i64 = 86_400_000;
const START: i64 = 1_764_547_200_000;

fn item(writer: usize, batch: u64, i: u64) -> String {
    format!("w{writer}-b{batch}-e{i}")
}

/// Batch `batch` of writer `writer`: spread over three days (ranges cut buckets), two chains.
fn batch_of(writer: usize, batch: u64) -> Vec<Event> {
    (0..BATCH)
        .map(|i| {
            let time = START + ((batch * BATCH + i) as i64 * 7_919) % (3 * DAY);
            let chain = if i % 2 == 0 { "a" } else { "b" };
            let w = format!("w{writer}");
            Event::new(
                time,
                item(writer, batch, i),
                &[("chain", chain), ("writer", &w)],
            )
        })
        .collect()
}

fn writer_slice(w: usize) -> Slice {
    Slice::tag("writer", &format!("w{w}"))
}

/// Events of writer `w` in a snapshot (0 before its first batch is visible).
fn count_of(s: &Snapshot<'_>, w: usize) -> Result<u64, StoreError> {
    match s.count(&writer_slice(w), &TimeRange::all()) {
        Ok((n, _)) => Ok(n),
        Err(StoreError::Query(m)) if m.contains("no events with") => Ok(0),
        Err(e) => Err(e),
    }
}

/// Ends a check with an answer inconsistent with every prefix of whole batches.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(StoreError::Query(format!("inconsistent: {}", format!($($arg)*))))
    };
}

/// One reader's checks of one snapshot; returns the per-writer batch counts it saw.
fn check_snapshot(
    s: &Snapshot<'_>,
    round: u64,
    begun: &[AtomicU64],
) -> Result<Vec<u64>, StoreError> {
    let all = TimeRange::all();
    let total = s.count(&Slice::Whole, &all)?.0;
    let mut batches = Vec::with_capacity(WRITERS);
    let mut sum = 0;
    for (w, begun) in begun.iter().enumerate() {
        let n = count_of(s, w)?;
        if n % BATCH != 0 {
            bail!("writer {w}: {n} events, not whole batches of {BATCH}");
        }
        let k = n / BATCH;
        // Read after the snapshot: a writer counts a batch before it hands it to the store.
        let begun = begun.load(Ordering::Acquire);
        if k > begun {
            bail!("writer {w}: {k} batches visible, {begun} handed to the store");
        }
        if k > 0 {
            let last = item(w, k - 1, BATCH - 1);
            let m = s.membership(&writer_slice(w), &all, &last)?;
            if !m.maybe {
                bail!("writer {w}: {k} batches counted, but its last item is not seen");
            }
        }
        sum += n;
        batches.push(k);
    }
    if sum != total {
        bail!("total {total} but the writers' counts add to {sum}");
    }
    match round % 4 {
        0 => {
            // The log agrees with the counts of the same snapshot.
            let w = (round as usize / 4) % WRITERS;
            if batches[w] == 0 {
                return Ok(batches);
            }
            let scanned = s.events(&writer_slice(w), &all)?.len() as u64;
            if scanned != batches[w] * BATCH {
                bail!(
                    "writer {w}: scan found {scanned}, count said {}",
                    batches[w] * BATCH
                );
            }
        }
        1 => {
            let m = s.merged_hll(&Slice::Whole, &all)?;
            let est = m
                .sketch
                .map_or(0.0, |h| sketchdb::sketch::Sketch::estimate(&h).value);
            // Every item is distinct: 5% is over 6 standard errors of HLL p=14 (0.81%).
            if (est - total as f64).abs() > 0.05 * total as f64 + 5.0 {
                bail!("distinct {est} for {total} distinct items");
            }
        }
        2 => {
            let (top, merged) = s.top(&Slice::Whole, &all, 5)?;
            let counted = merged.sketch.map_or(0, |c| c.total());
            if counted != total || top.len() > 5 {
                bail!("top over {counted} events, count says {total}");
            }
        }
        _ => {
            let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(round);
            let (sample, _) = s.sample(&Slice::Whole, &all, 20, &mut rng)?;
            if sample.len() as u64 != total.min(20) {
                bail!("{} sampled of {total}", sample.len());
            }
        }
    }
    Ok(batches)
}

#[test]
fn writers_and_readers_stay_consistent_and_nothing_waits_forever() {
    let secs: u64 = std::env::var("SKETCHDB_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = support::tempdir("stress");
    let config = Config {
        tag_fields: vec!["chain".into(), "writer".into()],
        ..Config::default()
    };
    let store = Arc::new(Store::create(&dir, config).expect("create"));
    let counters =
        || -> Arc<Vec<AtomicU64>> { Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect()) };
    // Per writer: batches handed to the store, and batches it returned from.
    let (begun, done) = (counters(), counters());
    let stop = Arc::new(AtomicBool::new(false));
    let (finished_tx, finished_rx) = mpsc::channel::<Result<String, String>>();
    let mut threads = Vec::new();
    for w in 0..WRITERS {
        let (store, begun, done, stop, tx) = (
            Arc::clone(&store),
            Arc::clone(&begun),
            Arc::clone(&done),
            Arc::clone(&stop),
            finished_tx.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut k = 0u64;
            let outcome = (|| -> Result<String, String> {
                while !stop.load(Ordering::Relaxed) {
                    match k % 10 {
                        // An import of two batches: visible all at once at its commit.
                        9 => {
                            begun[w].store(k + 2, Ordering::Release);
                            store
                                .import(|imp| {
                                    imp.ingest_batch(&batch_of(w, k))?;
                                    imp.ingest_batch(&batch_of(w, k + 1))
                                })
                                .map_err(|e| format!("import: {e}"))?;
                            k += 2;
                        }
                        _ => {
                            begun[w].store(k + 1, Ordering::Release);
                            store
                                .ingest_batch(&batch_of(w, k))
                                .map_err(|e| format!("ingest: {e}"))?;
                            k += 1;
                        }
                    }
                    done[w].store(k, Ordering::Release);
                    // Most batches wait for a later flush: snapshots then hold unwritten blocks.
                    match k % 7 {
                        0 => store.checkpoint().map_err(|e| format!("checkpoint: {e}"))?,
                        3 | 5 => store.flush().map_err(|e| format!("flush: {e}"))?,
                        _ => {}
                    }
                }
                Ok(format!("writer {w}: {k} batches"))
            })();
            let _ = tx.send(outcome);
        }));
    }
    let reads = Arc::new(AtomicU64::new(0));
    for r in 0..READERS {
        let (store, begun, stop, tx, reads) = (
            Arc::clone(&store),
            Arc::clone(&begun),
            Arc::clone(&stop),
            finished_tx.clone(),
            Arc::clone(&reads),
        );
        threads.push(std::thread::spawn(move || {
            let outcome = (|| -> Result<String, String> {
                let mut last = vec![0u64; WRITERS];
                let mut round = r as u64;
                // The previous round's snapshot, held while the writers go on: what it reads
                // must not change.
                let mut held: Option<(Snapshot<'_>, Vec<u64>)> = None;
                let mut stale = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Odd rounds through `Store::read` (which retries a stale read itself),
                    // even ones on a snapshot this reader holds on to afterwards.
                    let mut taken = None;
                    let checked = if round % 2 == 1 {
                        store.read(|s| check_snapshot(s, round, &begun))
                    } else {
                        let snap = store.snapshot().map_err(|e| e.to_string())?;
                        let checked = check_snapshot(&snap, round, &begun);
                        taken = Some(snap);
                        checked
                    };
                    let seen = match checked {
                        Ok(seen) => seen,
                        // A checkpoint rewrote a set this snapshot did not hold: take another.
                        Err(StoreError::Stale) if taken.is_some() => {
                            stale += 1;
                            round += 1;
                            continue;
                        }
                        Err(e) => return Err(format!("reader {r}, round {round}: {e}")),
                    };
                    // Snapshots only move forward.
                    if seen.iter().zip(&last).any(|(now, before)| now < before) {
                        return Err(format!(
                            "inconsistent: reader {r} went back from {last:?} to {seen:?}"
                        ));
                    }
                    if let Some((old, counted)) = &held {
                        let w = round as usize % WRITERS;
                        let again = match old.events(&writer_slice(w), &TimeRange::all()) {
                            Ok(events) => events.len() as u64,
                            Err(StoreError::Query(m)) if m.contains("no events with") => 0,
                            Err(e) => return Err(format!("reader {r}: held snapshot: {e}")),
                        };
                        if again != counted[w] * BATCH {
                            return Err(format!(
                                "inconsistent: reader {r}: a held snapshot scans {again} events of writer {w}, it counted {}",
                                counted[w] * BATCH
                            ));
                        }
                    }
                    if let (0, Some(snap)) = (round % 8, taken) {
                        held = Some((snap, seen.clone()));
                    }
                    last = seen;
                    round += 1;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok(format!("reader {r}: {round} rounds, {stale} stale"))
            })();
            let _ = tx.send(outcome);
        }));
    }
    drop(finished_tx);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut failures = Vec::new();
    // Stop early on the first failure; otherwise at the deadline.
    while Instant::now() < deadline {
        match finished_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Err(e)) => {
                failures.push(e);
                break;
            }
            Ok(Ok(early)) => failures.push(format!("a thread stopped early: {early}")),
            Err(_) => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    // Every thread ends within two minutes of being told to, or something waits forever.
    let mut summaries = Vec::new();
    for _ in 0..threads.len() - failures.len().min(threads.len()) {
        match finished_rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(s)) => summaries.push(s),
            Ok(Err(e)) => failures.push(e),
            Err(_) => panic!("a thread did not finish: a deadlock ({summaries:?})"),
        }
    }
    for t in threads {
        t.join().expect("no thread panics");
    }
    assert!(failures.is_empty(), "{failures:#?}");
    eprintln!("{summaries:?}");
    assert!(
        reads.load(Ordering::Relaxed) >= READERS as u64,
        "the readers ran"
    );
    store.flush().expect("flush");
    let check_final = |store: &Store| {
        for (w, done) in done.iter().enumerate() {
            let k = done.load(Ordering::Acquire);
            assert!(k > 0, "writer {w} ingested");
            let (n, _) = store
                .count(&writer_slice(w), &TimeRange::all())
                .expect("count");
            assert_eq!(n, k * BATCH, "writer {w}");
            let scanned = store
                .events(&writer_slice(w), &TimeRange::all())
                .expect("scan")
                .len() as u64;
            assert_eq!(scanned, k * BATCH, "writer {w}, scanned");
        }
    };
    check_final(&store);
    drop(store);
    let store = Store::open(&dir).expect("reopen");
    check_final(&store);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
