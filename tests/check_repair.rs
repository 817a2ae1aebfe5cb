//! `sketchdb check` and `sketchdb repair` driven as a user would (issue 12 item 6): a store of
//! day buckets and two chains over four days is damaged behind its back while closed (a flipped
//! byte in an HLL part, a lost chunk of a large Bloom filter, a deleted header, a truncated log
//! block); `check` must name each by bucket, tag and kind and exit 1; `repair` must rebuild what
//! the raw log can restore, so that `check` exits 0 and every answer equals an undamaged twin's,
//! and must exit non-zero naming what it cannot restore. A clean store checks clean.

use serde_json::Value;
use sketchdb::store::{keys, log, Engine, SledEngine, WriteBatch};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// 2026-12-01T00:00:00Z.
const T0: i64 = 1_796_083_200_000;
const DAY: i64 = 86_400_000;
/// Tag ids in order of first appearance: every day's first event is on chain a.
const CHAIN_A: u32 = 1;
const CHAIN_B: u32 = 2;
/// Events of the large day, each with a wallet of its own: 12,000 fingerprints (96 KB) or
/// the filter sized for `--bloom-capacity 100000` (about 120 KB) are both over the 64 KiB
/// at which a value is stored in chunks.
const BIG_DAY_EVENTS: u64 = 12_000;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    c.env_remove("SKETCHDB_DB").env("NO_COLOR", "1");
    c
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sketchdb-check-repair-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn run(db: &Path, args: &[&str]) -> Output {
    bin()
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("run sketchdb")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(db: &Path, args: &[&str]) -> String {
    let out = run(db, args);
    assert!(
        out.status.success(),
        "sketchdb {args:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn wallet(n: u64) -> String {
    format!("0x{n:040x}")
}

/// One JSONL file per day: 600 events over 400 wallets, alternating chains a and b, except
/// day `big` (if any), which has `BIG_DAY_EVENTS` events with distinct wallets.
fn write_days(dir: &Path, days: u64, big: Option<u64>) -> Vec<PathBuf> {
    (0..days)
        .map(|d| {
            let n = if Some(d) == big { BIG_DAY_EVENTS } else { 600 };
            let mut lines = String::new();
            for i in 0..n {
                let w = if Some(d) == big {
                    wallet(10_000 + i)
                } else {
                    wallet(i % 400 + d * 100)
                };
                let chain = if i % 2 == 0 { "a" } else { "b" };
                let time = T0 + d as i64 * DAY + i as i64 * 1_000;
                lines.push_str(&format!(
                    "{{\"time\":{time},\"wallet\":\"{w}\",\"chain\":\"{chain}\"}}\n"
                ));
            }
            let path = dir.join(format!("day{d}.jsonl"));
            std::fs::write(&path, lines).expect("write input");
            path
        })
        .collect()
}

/// A store made by `init` and one `ingest` per day file, so each small day is one log block.
fn build(db: &Path, files: &[PathBuf]) {
    ok(db, &["init", "--bloom-capacity", "100000"]);
    for f in files {
        ok(db, &["ingest", "-q", &f.to_string_lossy()]);
    }
}

/// The statements whose answers must survive damage and repair: per day and per slice,
/// COUNT, DISTINCT and SEEN of a wallet that is there and one that is not; and over all time.
fn statements(days: u64) -> String {
    let mut s = String::new();
    for d in 0..days {
        let day = format!("2026-12-{:02}", d + 1);
        for on in ["", " ON chain:a", " ON chain:b"] {
            let range = format!("{on} FROM {day} TO {day}");
            s.push_str(&format!("COUNT{range}\n"));
            s.push_str(&format!("DISTINCT wallets{range}\n"));
            s.push_str(&format!("SEEN {}{range}\n", wallet(d * 100 + 2)));
            s.push_str(&format!("SEEN {}{range}\n", wallet(10_002)));
            s.push_str(&format!("SEEN {}{range}\n", wallet(999_999)));
        }
    }
    s.push_str("COUNT\nDISTINCT wallets\nDISTINCT wallets ON chain:a AND chain:b\n");
    s.push_str(&format!("SEEN {}\nSEEN {}\n", wallet(3), wallet(999_999)));
    s
}

/// The JSON answer lines to [`statements`] (a failed statement's line is its error).
fn answer_lines(db: &Path, days: u64) -> (bool, Vec<String>) {
    use std::io::Write;
    let mut child = bin()
        .arg("--db")
        .arg(db)
        .args(["query", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn query");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(statements(days).as_bytes())
        .expect("write statements");
    drop(stdin);
    let out = child.wait_with_output().expect("query");
    let lines = text(&out.stdout).lines().map(str::to_string).collect();
    (out.status.success(), lines)
}

/// The answers to [`statements`], every one of which must succeed.
fn answers(db: &Path, days: u64) -> Vec<String> {
    let (ok, lines) = answer_lines(db, days);
    assert!(ok, "a query failed: {lines:#?}");
    lines
}

/// Opens the closed store's engine directly, as damage would reach it.
fn engine(db: &Path) -> SledEngine {
    SledEngine::open(db).expect("open engine").expect("a store")
}

fn apply(engine: &SledEngine, f: impl FnOnce(&mut WriteBatch)) {
    let mut batch = WriteBatch::default();
    f(&mut batch);
    engine.apply(batch).expect("apply");
    engine.sync().expect("sync");
}

/// `value` with one byte in the middle flipped.
fn flipped(mut value: Vec<u8>) -> Vec<u8> {
    let mid = value.len() / 2;
    value[mid] ^= 0xff;
    value
}

fn damaged_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("damaged: "))
        .collect()
}

/// The one line of `lines` starting with `start`.
fn line_starting<'a>(lines: &[&'a str], start: &str) -> &'a str {
    let found: Vec<&&str> = lines.iter().filter(|l| l.starts_with(start)).collect();
    assert_eq!(found.len(), 1, "one line starting {start:?} in {lines:#?}");
    found[0]
}

#[test]
fn damage_is_named_by_check_and_repair_restores_the_answers_of_an_undamaged_twin() {
    let dir = tempdir("sets");
    let files = write_days(&dir, 4, Some(2));
    let (db, twin) = (dir.join("damaged.db"), dir.join("twin.db"));
    build(&db, &files);
    build(&twin, &files);

    // Both sides of a clean store: check exits 0 and says so, repair has nothing to do.
    for store in [&db, &twin] {
        let out = ok(store, &["check"]);
        assert!(
            out.contains("clean; checked 3 metadata records, 2 tags"),
            "{out}"
        );
        assert!(out.contains("(13800 events)"), "{out}");
    }
    let json: Value = serde_json::from_str(&ok(&db, &["check", "--json"])).expect("json");
    assert_eq!(json["clean"], true);
    assert_eq!(json["damaged"].as_array().map(Vec::len), Some(0));
    let out = ok(&twin, &["repair"]);
    assert!(
        out.contains("nothing to repair; the store checks clean"),
        "{out}"
    );
    let expected = answers(&twin, 4);

    {
        let e = engine(&db);
        let hll = keys::sketch(keys::Part::Hll, CHAIN_A, T0 + DAY);
        let value = e.get(&hll).expect("get").expect("hll stored");
        let bloom = keys::sketch(keys::Part::Bloom, keys::WHOLE, T0 + 2 * DAY);
        let lost_chunk = keys::chunk(&bloom, 1);
        assert!(
            e.get(&lost_chunk).expect("get").is_some(),
            "the large day's Bloom filter is stored in chunks"
        );
        let header = keys::sketch(keys::Part::Header, CHAIN_B, T0 + 3 * DAY);
        assert!(e.get(&header).expect("get").is_some());
        apply(&e, |b| {
            b.put(hll.to_vec(), flipped(value)).expect("put");
            b.delete(lost_chunk);
            b.delete(header.to_vec());
        });
    }

    let out = run(&db, &["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    let lines = damaged_lines(&stdout);
    assert_eq!(lines.len(), 3, "{stdout}");
    let hll = line_starting(
        &lines,
        "damaged: hll sketch of bucket 2026-12-02, chain:a: ",
    );
    let bloom = line_starting(
        &lines,
        "damaged: bloom sketch of bucket 2026-12-03, whole stream: chunk 1 of its ",
    );
    let header = line_starting(
        &lines,
        "damaged: header sketch of bucket 2026-12-04, chain:b: missing",
    );
    for line in [hll, bloom, header] {
        assert!(
            line.ends_with("[sketch; repair rebuilds it from the raw log]"),
            "{line}"
        );
    }
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{}: 3 damaged values (3 repairable", db.display())),
        "{stderr}"
    );

    let out = run(&db, &["check", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: Value = serde_json::from_str(&text(&out.stdout)).expect("json");
    assert_eq!(json["clean"], false);
    let mut named: Vec<(String, String, String)> = json["damaged"]
        .as_array()
        .expect("damaged")
        .iter()
        .map(|d| {
            assert_eq!(d["kind"], "sketch");
            assert_eq!(d["recovery"]["action"], "rebuild");
            let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
            (s("bucket"), s("tag"), s("part"))
        })
        .collect();
    named.sort();
    let expect = |b: &str, t: &str, p: &str| (b.to_string(), t.to_string(), p.to_string());
    assert_eq!(
        named,
        vec![
            expect("2026-12-02", "chain:a", "hll"),
            expect("2026-12-03", "whole stream", "bloom"),
            expect("2026-12-04", "chain:b", "header"),
        ]
    );

    let out = ok(&db, &["repair"]);
    for set in [
        "rebuilt: sketch set of bucket 2026-12-02, chain:a (300 events)",
        "rebuilt: sketch set of bucket 2026-12-03, whole stream (12000 events)",
        "rebuilt: sketch set of bucket 2026-12-04, chain:b (300 events)",
    ] {
        assert!(out.contains(set), "{set} in {out}");
    }
    assert!(out.contains("repaired: 3 sets rebuilt"), "{out}");
    let out = ok(&db, &["check"]);
    assert!(out.contains("clean"), "{out}");
    assert_eq!(answers(&db, 4), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_log_block_is_named_and_repair_says_what_it_cannot_recover() {
    let dir = tempdir("log");
    let files = write_days(&dir, 2, None);
    let (db, twin) = (dir.join("damaged.db"), dir.join("twin.db"));
    build(&db, &files);
    build(&twin, &files);
    let expected = answers(&twin, 2);
    {
        let e = engine(&db);
        // Day 1's 600 events are the first block, at the start of the first log file; its
        // last 100 bytes are zeroed, as a torn write leaves them.
        let index = e.get(&keys::index(0)).expect("get").expect("indexed");
        let info = log::BlockInfo::decode(&index).expect("an index entry");
        let place = info.place.expect("in a log file");
        assert!(place.len > 200, "a block of {} bytes", place.len);
        let path = db.join("log").join(log::file_name(place.file));
        let mut bytes = std::fs::read(&path).expect("read the log file");
        let end = (place.offset + u64::from(place.len)) as usize;
        bytes[end - 100..end].fill(0);
        std::fs::write(&path, bytes).expect("damage the log file");
        let hll_day1 = keys::sketch(keys::Part::Hll, CHAIN_A, T0);
        let hll_day2 = keys::sketch(keys::Part::Hll, CHAIN_B, T0 + DAY);
        let (v1, v2) = (
            e.get(&hll_day1).expect("get").expect("stored"),
            e.get(&hll_day2).expect("get").expect("stored"),
        );
        apply(&e, |b| {
            b.put(hll_day1.to_vec(), flipped(v1)).expect("put");
            b.put(hll_day2.to_vec(), flipped(v2)).expect("put");
        });
    }

    let out = run(&db, &["check"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let lines = damaged_lines(&stdout);
    assert_eq!(lines.len(), 3, "{stdout}");
    let block = line_starting(
        &lines,
        "damaged: log block at event 0 (600 events, 2026-12-01T00:00:00Z to 2026-12-01T00:09:59Z, \
in log/00000000000000000000.log bytes 0..",
    );
    assert!(block.contains("[log block; cannot be recovered"), "{block}");
    let lost = line_starting(
        &lines,
        "damaged: hll sketch of bucket 2026-12-01, chain:a: ",
    );
    assert!(
        lost.contains("cannot be recovered: log block at event 0 (600 events"),
        "{lost}"
    );
    let fixable = line_starting(
        &lines,
        "damaged: hll sketch of bucket 2026-12-02, chain:b: ",
    );
    assert!(fixable.contains("repair rebuilds it"), "{fixable}");
    assert!(
        text(&out.stderr).contains("3 damaged values (1 repairable"),
        "{}",
        text(&out.stderr)
    );

    let out = run(&db, &["repair"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("rebuilt: sketch set of bucket 2026-12-02, chain:b (300 events)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("not recovered: log block at event 0 (600 events"),
        "{stdout}"
    );
    assert!(
        stdout.contains("not recovered: hll sketch of bucket 2026-12-01, chain:a: "),
        "{stdout}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&db.display().to_string())
            && stderr.contains("2 damaged values cannot be recovered"),
        "{stderr}"
    );
    // What could not be recovered is left as it was, and still reported.
    let out = run(&db, &["check"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(damaged_lines(&text(&out.stdout)).len(), 2);
    // The rebuilt day answers as the twin does; the day whose raw log is damaged still fails
    // by name, never with a smaller answer.
    let (all_ok, lines) = answer_lines(&db, 2);
    assert!(!all_ok);
    assert_eq!(lines[15..30], expected[15..30]);
    assert!(
        lines[6].contains("damaged hll sketch of bucket 2026-12-01, chain:a"),
        "{}",
        lines[6]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_store_that_damage_keeps_from_opening_is_still_checked_in_full() {
    let dir = tempdir("unopenable");
    let files = write_days(&dir, 2, None);
    let db = dir.join("damaged.db");
    build(&db, &files);
    {
        let e = engine(&db);
        let tag = keys::tag(CHAIN_B);
        let value = e.get(&tag).expect("get").expect("tag stored");
        let hll = keys::sketch(keys::Part::Hll, CHAIN_A, T0 + DAY);
        let v = e.get(&hll).expect("get").expect("stored");
        apply(&e, |b| {
            b.put(tag.to_vec(), flipped(value)).expect("put");
            b.put(keys::ALL_TIME.to_vec(), b"garbage".to_vec())
                .expect("put");
            b.put(hll.to_vec(), flipped(v)).expect("put");
        });
    }
    let out = run(&db, &["check"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let lines = damaged_lines(&stdout);
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with(&format!(
            "damaged: {}: cannot be opened: damaged tag dictionary entry",
            db.display()
        )),
        "{stdout}"
    );
    line_starting(&lines, "damaged: tag dictionary entry 2: ");
    line_starting(&lines, "damaged: all-time bloom filter: ");
    let hll = line_starting(
        &lines,
        "damaged: hll sketch of bucket 2026-12-02, chain:a: ",
    );
    assert!(
        hll.contains("repair cannot run while the store does not open"),
        "{hll}"
    );
    let out = run(&db, &["repair"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot repair {}: damaged tag dictionary entry",
            db.display()
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_and_repair_explain_themselves_and_name_the_store_they_cannot_open() {
    let dir = tempdir("none");
    let db = dir.join("nothing.db");
    for cmd in ["check", "repair"] {
        let help = ok(&db, &[cmd, "--help"]);
        assert!(
            help.contains("Exit status") && help.contains(&format!("sketchdb --db tx.db {cmd}")),
            "{help}"
        );
        let out = run(&db, &[cmd]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("cannot {cmd}: no store at {}", db.display())),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
