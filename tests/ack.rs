//! The acknowledgement record on the real engine (issue 12, items 5 and 6): sled recovers a
//! prefix of its log, so damage to its files can roll a store back to an earlier state without
//! a word. The record (`sketchdb-ack`, beside sled's files) says how far the log was
//! acknowledged; opening a store whose log ends before that is refused, naming both counts,
//! and a store that lost nothing opens as before, with exact counts.

use sketchdb::gen::wallet_address;
use sketchdb::sketch::SketchConfig;
use sketchdb::store::{Config, Event, Slice, Store, StoreError, TimeRange};
use std::path::{Path, PathBuf};
use std::process::Command;

const T0: i64 = 1_764_547_200_000;

fn config() -> Config {
    Config {
        sketches: SketchConfig {
            bloom_capacity: 20_000,
            reservoir_size: 50,
            ..SketchConfig::default()
        },
        ..Config::default()
    }
}

fn events(first: u64, n: u64) -> Vec<Event> {
    (first..first + n)
        .map(|i| {
            let chain = if i % 2 == 0 { "a" } else { "b" };
            Event::new(
                T0 + (i as i64 % 3) * 86_400_000 + i as i64,
                wallet_address(5, i),
                &[("chain", chain)],
            )
        })
        .collect()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-ack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn count(store: &Store) -> u64 {
    store
        .count(&Slice::Whole, &TimeRange::all())
        .expect("count")
        .0
}

/// Copies every file and directory under `from` into `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Whether `name` is one of sled's own files (its log, its config, its snapshots, its blobs).
fn is_sleds(name: &str) -> bool {
    name == "db" || name == "conf" || name == "blobs" || name.starts_with("snap.")
}

/// Puts sled's files in `dir` back to those in `old`, keeping everything else (the
/// acknowledgement record): what sled does when it recovers an earlier state from a damaged
/// or truncated log.
fn roll_back_sled(dir: &Path, old: &Path) {
    for entry in std::fs::read_dir(dir).expect("list") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_sleds(&name) {
            let path = entry.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("rm dir");
            } else {
                std::fs::remove_file(&path).expect("rm");
            }
        }
    }
    for entry in std::fs::read_dir(old).expect("list") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_sleds(&name) {
            let target = dir.join(&name);
            if entry.path().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).expect("copy");
            }
        }
    }
}

#[test]
fn sled_rolled_back_past_an_acknowledged_flush_is_refused_naming_the_counts() {
    let dir = tempdir("rolled-back");
    let aside = tempdir("rolled-back-aside");
    let store = Store::create(&dir, config()).expect("create");
    store.ingest_batch(&events(0, 1_000)).expect("ingest");
    store.flush().expect("flush");
    drop(store);
    copy_dir(&dir, &aside);
    // The second acknowledged ingest, which the rollback will take away.
    let store = Store::open(&dir).expect("open");
    store.ingest_batch(&events(1_000, 500)).expect("ingest");
    store.flush().expect("flush");
    drop(store);
    assert!(dir.join("sketchdb-ack").exists());
    roll_back_sled(&dir, &aside);

    let err = Store::open(&dir)
        .err()
        .expect("an open that would hold 1,000 of 1,500 acknowledged events is refused");
    assert!(
        matches!(
            err,
            StoreError::AcknowledgedLost {
                acknowledged: 1_500,
                log_end: 1_000,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    for part in [
        dir.to_string_lossy().as_ref(),
        "lost acknowledged events",
        "acknowledged up to event 1500",
        "ends at event 1000",
        "500 lost",
        "backup",
        "sketchdb check",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    // The refusal wrote nothing: the same again, and sled's files are still the old ones.
    assert!(matches!(
        Store::open(&dir),
        Err(StoreError::AcknowledgedLost { .. })
    ));

    // Through the binary: `check` reports the loss first and exits non-zero.
    let out = Command::new(env!("CARGO_BIN_EXE_sketchdb"))
        .env_remove("SKETCHDB_DB")
        .env("NO_COLOR", "1")
        .args(["--db", &dir.to_string_lossy(), "check"])
        .output()
        .expect("run sketchdb");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "exit 0: {said}");
    assert!(said.contains("lost acknowledged events"), "{said}");
    // `check` walks what is left, and says so.
    assert!(said.contains("(1000 events)"), "{said}");

    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&aside);
}

#[test]
fn a_damaged_acknowledgement_record_is_named_and_a_missing_one_is_no_record() {
    let dir = tempdir("damaged-record");
    let store = Store::create(&dir, config()).expect("create");
    store.ingest_batch(&events(0, 300)).expect("ingest");
    store.flush().expect("flush");
    drop(store);
    let path = dir.join("sketchdb-ack");
    let good = std::fs::read(&path).expect("the record");
    let mut bad = good.clone();
    let last = bad.len() - 6;
    bad[last] ^= 0x10;
    std::fs::write(&path, &bad).expect("flip a bit");
    let err = Store::open(&dir)
        .err()
        .expect("a damaged record is refused");
    let msg = err.to_string();
    assert!(msg.contains("acknowledgement record"), "{msg}");
    assert!(msg.contains("checksum"), "{msg}");
    std::fs::write(&path, &good[..good.len() / 2]).expect("truncate");
    let msg = Store::open(&dir).err().expect("refused").to_string();
    assert!(msg.contains("acknowledgement record"), "{msg}");

    // A store made before the record existed has none: it opens as it always did, and the
    // next flush writes one.
    std::fs::remove_file(&path).expect("rm");
    let store = Store::open(&dir).expect("opens without a record");
    assert_eq!(count(&store), 300);
    store.ingest_batch(&events(300, 10)).expect("ingest");
    store.flush().expect("flush");
    drop(store);
    assert!(path.exists());
    let store = Store::open(&dir).expect("opens");
    assert_eq!(count(&store), 310);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// No false alarms: flushes, imports, checkpoints, a failed import and reopens, each reopen
/// with exact counts.
#[test]
fn ordinary_flushes_imports_and_reopens_open_with_exact_counts() {
    let dir = tempdir("no-false-alarm");
    let mut total = 0u64;
    let store = Store::create(&dir, config()).expect("create");
    for round in 0..4u64 {
        for _ in 0..3 {
            store.ingest_batch(&events(total, 200)).expect("ingest");
            total += 200;
            store.flush().expect("flush");
        }
        store
            .import(|imp| imp.ingest_batch(&events(total, 700)))
            .expect("import");
        total += 700;
        let failed: Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(&events(total, 300))?;
            Err(StoreError::Query("a bad line".into()))
        });
        assert!(failed.is_err());
        if round % 2 == 0 {
            store.checkpoint().expect("checkpoint");
        }
        store.ingest_batch(&events(total, 50)).expect("ingest");
        total += 50;
        store.flush().expect("flush");
        assert_eq!(count(&store), total);
    }
    drop(store);
    for _ in 0..3 {
        let store = Store::open(&dir).expect("reopen: nothing was lost");
        assert_eq!(count(&store), total);
        store.ingest_batch(&events(total, 100)).expect("ingest");
        total += 100;
        // Closed without a flush: the drop's checkpoint makes it durable and acknowledges it.
        drop(store);
    }
    let store = Store::open(&dir).expect("reopen");
    assert_eq!(count(&store), total);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The measurement, on sled itself: the tail of `db` cut off (back to its length after
/// the first of two acknowledged flushes, and shorter) after a clean close. sled recovers what
/// it can read, silently; the store refuses to open with less than was acknowledged. (With the
/// cut at the first flush's length sled recovers the first flush; any shorter, it recovers
/// nothing, not even the store's metadata, which the record turns from "not a store" into the
/// same refusal.)
#[test]
fn a_truncated_sled_log_is_refused_not_opened_smaller() {
    for cut in [0u64, 1, 4096] {
        let dir = tempdir(&format!("truncated-{cut}"));
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 1_000)).expect("ingest");
        store.flush().expect("flush");
        let first = std::fs::metadata(dir.join("db")).expect("db").len();
        store.ingest_batch(&events(1_000, 500)).expect("ingest");
        store.flush().expect("flush");
        drop(store);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("db"))
            .expect("open db");
        file.set_len(first.saturating_sub(cut)).expect("truncate");
        drop(file);
        match Store::open(&dir) {
            Err(StoreError::AcknowledgedLost {
                acknowledged: 1_500,
                log_end,
                ..
            }) if log_end < 1_500 => {}
            Ok(store) => panic!("cut {cut}: opened, counting {}", count(&store)),
            Err(e) => panic!("cut {cut}: {e}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A flipped bit in what the second of two acknowledged flushes appended to `db`: never an
/// open with fewer events than acknowledged.
#[test]
fn a_bit_flip_in_the_last_acknowledged_write_is_refused_not_opened_smaller() {
    for at in [0u64, 1, 2, 3] {
        let dir = tempdir(&format!("flipped-{at}"));
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 1_000)).expect("ingest");
        store.flush().expect("flush");
        let first = std::fs::metadata(dir.join("db")).expect("db").len();
        store.ingest_batch(&events(1_000, 500)).expect("ingest");
        store.flush().expect("flush");
        let second = std::fs::metadata(dir.join("db")).expect("db").len();
        drop(store);
        let mut db = std::fs::read(dir.join("db")).expect("db");
        let offset = (first + (second - first) * at / 4) as usize;
        db[offset] ^= 0x04;
        std::fs::write(dir.join("db"), &db).expect("write db");
        // Measured: each of these four flips made sled recover the first flush alone, and the
        // open was refused naming 1,500 and 1,000. sled reporting the damage itself would do
        // too; opening with fewer than 1,500 events would not.
        match Store::open(&dir) {
            Ok(store) => assert_eq!(count(&store), 1_500, "flip at {offset}: opened smaller"),
            Err(StoreError::AcknowledgedLost {
                acknowledged: 1_500,
                log_end,
                ..
            }) if log_end < 1_500 => {}
            Err(StoreError::Engine { .. }) => {}
            Err(e) => panic!("flip at {offset}: {e}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The flipped-bit trial over the whole of `db`, not only its last write: a flipped
/// bit anywhere in what two acknowledged flushes wrote either leaves every acknowledged event
/// readable (and `check` names any value it hit), or is an error that names what it hit. Never
/// a smaller count, never a panic.
#[test]
fn a_bit_flip_anywhere_in_sleds_file_never_opens_smaller() {
    const TRIALS: u64 = 24;
    let (mut opened, mut named_by_check, mut refused) = (0, 0, 0);
    for trial in 0..TRIALS {
        let dir = tempdir(&format!("flip-anywhere-{trial}"));
        let store = Store::create(&dir, config()).expect("create");
        store.ingest_batch(&events(0, 1_000)).expect("ingest");
        store.flush().expect("flush");
        store.ingest_batch(&events(1_000, 500)).expect("ingest");
        store.flush().expect("flush");
        drop(store);
        let mut db = std::fs::read(dir.join("db")).expect("db");
        // Spread over the bytes written, past the zeroed tail of the preallocated segment.
        let written = db.iter().rposition(|&b| b != 0).map_or(db.len(), |p| p + 1);
        let offset = (written as u64 * (2 * trial + 1) / (2 * TRIALS)) as usize;
        db[offset] ^= 0x10;
        std::fs::write(dir.join("db"), &db).expect("write db");
        let outcome = std::panic::catch_unwind(|| match Store::open(&dir) {
            Ok(store) => {
                let n = count(&store);
                assert_eq!(
                    n, 1_500,
                    "flip at {offset} of {written}: opened with {n} events"
                );
                // The flip may sit in a value only a query reads: `check` reads them all.
                let report = store.check().expect("check runs");
                Ok(report.damaged.len())
            }
            Err(e) => Err(e.to_string()),
        });
        match outcome {
            Ok(Ok(0)) => opened += 1,
            Ok(Ok(_)) => named_by_check += 1,
            Ok(Err(message)) => {
                refused += 1;
                let names_it = message.contains(&dir.display().to_string())
                    || message.contains("sketch")
                    || message.contains("log")
                    || message.contains("acknowledged");
                assert!(
                    names_it,
                    "flip at {offset}: an error naming nothing: {message}"
                );
            }
            Err(_) => panic!("flip at {offset} of {written}: opening panicked"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!(
        "{TRIALS} flips: {opened} opened clean with every event, {named_by_check} opened with \
the damage named by check, {refused} refused by name"
    );
    assert_eq!(opened + named_by_check + refused, TRIALS);
}
