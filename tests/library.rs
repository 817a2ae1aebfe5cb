//! The library as a service meets it: the main types at the crate root, a running query
//! cancelled from another thread, and errors in the library's own words (no CLI flags).

use sketchdb::gen::wallet_address;
use sketchdb::{Config, Event, IngestError, QueryError, Session, Store};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// 2026-12-01T00:00:00Z.
const DEC_1: i64 = 1_796_083_200_000;

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-lib-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A store of `n` events from `n` distinct wallets over 30 days, so that an exact distinct
/// count scans every event and keeps every wallet.
fn big_store(name: &str, n: u64) -> (std::path::PathBuf, Store) {
    let dir = tempdir(name);
    let store = Store::create(&dir, Config::default()).expect("create");
    let mut batch = Vec::with_capacity(16_384);
    for i in 0..n {
        let t = DEC_1 + (i as i64 * 7_919) % (30 * 86_400_000);
        batch.push(Event::new(t, wallet_address(3, i), &[("chain", "a")]));
        if batch.len() == batch.capacity() {
            store.ingest_batch(&batch).expect("ingest");
            batch.clear();
        }
    }
    store.ingest_batch(&batch).expect("ingest");
    store.flush().expect("flush");
    (dir, store)
}

/// The REPL's Ctrl-C, as a library caller has it: the session's cancel flag, set from another
/// thread while an exact scan of millions of events runs, stops it within a fraction of a
/// second with `QueryError::Cancelled`, and the session and store go on.
#[test]
fn a_running_query_is_cancelled_through_the_session_flag_and_the_session_goes_on() {
    let n = 3_000_000;
    let (dir, store) = big_store("cancel", n);
    let statement = "EXACT DISTINCT wallets FROM ALL";
    let mut session = Session::new(&store);

    // The whole scan, for scale: the cancel below must come well before it would end.
    let started = Instant::now();
    let full = session.query(statement).expect("the uncancelled query");
    let whole = started.elapsed();
    assert_eq!(full.value, sketchdb::Value::Number(n as f64));
    assert!(
        whole >= Duration::from_millis(400),
        "the scan took only {whole:?}: too short to tell a cancel from the end"
    );

    // A flag set before a query belongs to no query: the next one clears it and runs.
    let flag = session.cancel_handle();
    flag.store(true, Ordering::Relaxed);
    let count = session
        .query("COUNT")
        .expect("a query after a stale cancel");
    assert_eq!(count.value, sketchdb::Value::Number(n as f64));

    let delay = whole / 8;
    let (result, cancelled_at, returned_at) = std::thread::scope(|scope| {
        let flag = session.cancel_handle();
        let canceller = scope.spawn(move || {
            std::thread::sleep(delay);
            flag.store(true, Ordering::Relaxed);
            Instant::now()
        });
        let result = session.query(statement);
        let returned_at = Instant::now();
        (
            result,
            canceller.join().expect("canceller thread"),
            returned_at,
        )
    });
    assert!(
        matches!(result, Err(QueryError::Cancelled)),
        "expected Cancelled, got {result:?}"
    );
    assert_eq!(
        QueryError::Cancelled.to_string(),
        "cancelled",
        "what a front end prints"
    );
    // The scan stops at the next log block of 4,096 events: microseconds, far inside 250 ms
    // (and a quarter of the whole scan at most, however fast the machine).
    let latency = returned_at.saturating_duration_since(cancelled_at);
    assert!(
        latency < Duration::from_millis(250).min(whole / 4),
        "returned {latency:?} after the cancel (the whole scan takes {whole:?})"
    );

    // The session and the store go on: the same statement runs to its end again.
    let again = session.query(statement).expect("the query after a cancel");
    assert_eq!(again, full);
    drop(session);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bad line's error names the library's option, not the CLI's flag (the CLI maps it to
/// `--skip-bad`: tests/cli.rs).
#[test]
fn library_errors_name_options_not_cli_flags() {
    let dir = tempdir("flags");
    let store = Store::create(&dir, Config::default()).expect("create");
    let input = "{\"time\":\"2026-12-01T00:00:00Z\",\"wallet\":\"0xa\"}\n{\"time\":\"noon\",\"wallet\":\"0xb\"}\n";
    let e = sketchdb::ingest::ingest(
        &store,
        input.as_bytes(),
        &sketchdb::ingest::Options::default(),
        &mut |_| {},
    )
    .expect_err("a bad time");
    assert!(matches!(e, IngestError::Bad(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("line 2"), "{text}");
    assert!(
        text.contains("Options::skip_bad ingests the good lines"),
        "{text}"
    );
    assert!(
        !text.contains("--"),
        "a CLI flag in a library error: {text}"
    );

    // The demo refuses a directory it did not make, in words that fit any caller.
    let precious = tempdir("flags-precious");
    std::fs::create_dir_all(&precious).expect("mkdir");
    std::fs::write(precious.join("notes.txt"), "keep").expect("write");
    let e = sketchdb::demo::run(
        &precious,
        &sketchdb::demo::DemoOptions {
            scale: 0.02,
            ..Default::default()
        },
        &mut Vec::new(),
        &mut |_| {},
    )
    .expect_err("not a demo store");
    let text = e.to_string();
    assert!(text.contains("is not a demo store"), "{text}");
    assert!(
        !text.contains("--"),
        "a CLI flag in a library error: {text}"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&precious);
}
