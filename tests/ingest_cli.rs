//! Input read right, and an ingest that always ends: the `ingest`, `init` and `query` (stdin)
//! commands driven through the built binary with the inputs users hit (issue 11, items 4, 7,
//! 10 and 13), plus the library paths behind them.

mod support;

use serde_json::Value;
use sketchdb::store::{keys, Config, Engine, SledEngine, Store, WriteBatch};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::tempdir;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    c.env_remove("SKETCHDB_DB").env("NO_COLOR", "1");
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run sketchdb")
}

/// Runs with `input` on stdin.
fn run_with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut cmd = bin();
    cmd.args(args);
    support::output_with_stdin(cmd, input)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "sketchdb {args:?} failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure, got: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

/// A store at `dir/tx.db` made by `init` with `extra` flags; returns its path as text.
fn init(dir: &Path, extra: &[&str]) -> String {
    let db = dir.join("tx.db").to_string_lossy().into_owned();
    let mut args = vec!["--db", db.as_str(), "init"];
    args.extend_from_slice(extra);
    ok(&args);
    db
}

fn ingest_file(db: &str, dir: &Path, name: &str, content: &[u8], extra: &[&str]) -> Output {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write input");
    let path = path.to_string_lossy().into_owned();
    let mut args = vec!["--db", db, "ingest"];
    args.extend_from_slice(extra);
    args.push(&path);
    run(&args)
}

/// The raw `--json` text of one statement's answer.
fn query_text(db: &str, statement: &str) -> String {
    ok(&["--db", db, "query", "--json", "--seed", "1", statement])
}

fn query(db: &str, statement: &str) -> Value {
    let out = query_text(db, statement);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{statement}: {e}: {out}"))
}

fn value(db: &str, statement: &str) -> f64 {
    let a = query(db, statement);
    a["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("{statement}: {a}"))
}

// ---- item 4: JSON numbers keep every digit ------------------------------------------------

#[test]
fn json_numbers_keep_every_digit_as_items_tags_and_extra_fields() {
    let dir = tempdir("digits");
    let db = init(&dir, &[]);
    // Two wallet ids above u64 that are one number as f64, a tag that is a long number, and
    // extra fields whose text f64 would change.
    let input = concat!(
        r#"{"time":"2026-12-01T10:00:00Z","wallet":123456789012345678901234567890,"chain":12345678901234567890123,"value":123456789012345678901234567890,"fee":1.50,"tiny":1e-400,"neg":-0}"#,
        "\n",
        r#"{"time":"2026-12-01T11:00:00Z","wallet":123456789012345678901234567891,"chain":"a","value":98765432109876543210.000001}"#,
        "\n",
    );
    let out = ingest_file(&db, &dir, "big.jsonl", input.as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Two wallets, not one merged through f64.
    assert_eq!(value(&db, "EXACT DISTINCT wallets"), 2.0);
    assert_eq!(
        value(&db, "EXACT COUNT 123456789012345678901234567890"),
        1.0
    );
    assert_eq!(
        value(&db, "EXACT COUNT 123456789012345678901234567891"),
        1.0
    );
    let tags = query_text(&db, "SHOW TAGS");
    assert!(tags.contains("chain:12345678901234567890123"), "{tags}");

    // SAMPLE gives the extra fields back as written, digit for digit, in its JSON.
    let sample = query_text(&db, "SAMPLE 10");
    for written in [
        r#""value":123456789012345678901234567890"#,
        r#""value":98765432109876543210.000001"#,
        r#""fee":1.50"#,
        r#""tiny":1e-400"#,
        r#""neg":-0"#,
        r#""wallet":"123456789012345678901234567890""#,
        r#""wallet":"123456789012345678901234567891""#,
    ] {
        assert!(sample.contains(written), "{written} not in {sample}");
    }
    // And the JSON is still JSON a reader without arbitrary precision can take.
    let parsed: Value = serde_json::from_str(sample.trim()).expect("valid JSON");
    assert_eq!(parsed["value"].as_array().map(Vec::len), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- item 7: a store failure mid-file ends the ingest --------------------------------------

const DAY_MS: i64 = 86_400_000;
/// 2026-12-01T00:00:00Z
const D1: i64 = 1_796_083_200_000;

fn lines(from: u64, n: u64, day: i64) -> String {
    let mut s = String::with_capacity(n as usize * 80);
    for i in from..from + n {
        s.push_str(&format!(
            "{{\"time\":{},\"wallet\":\"0x{:x}\",\"chain\":\"{}\"}}\n",
            D1 + day * DAY_MS + (i as i64 % DAY_MS),
            i % 50_000,
            if i % 2 == 0 { "a" } else { "b" }
        ));
    }
    s
}

/// Waits for `child` at most `limit`; kills it and fails the test if it is still running.
fn wait_or_kill(mut child: std::process::Child, limit: Duration) -> Output {
    let started = Instant::now();
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if started.elapsed() > limit => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "the ingest hung for {limit:?} after the store failed: {}",
                    text(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[test]
fn a_store_failure_mid_file_ends_the_ingest_with_its_error_and_the_store_unchanged() {
    let dir = tempdir("midfile");
    let db = init(&dir, &[]);
    // Day 2 is in the store; then its whole-stream HLL is damaged on disk, so the store fails
    // when the next input reaches day 2.
    let out = ingest_file(&db, &dir, "day2.jsonl", lines(0, 1_000, 1).as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    {
        let raw = SledEngine::open(Path::new(&db))
            .expect("open sled")
            .expect("a store");
        let key = keys::sketch(keys::Part::Hll, keys::WHOLE, D1 + DAY_MS);
        let mut v = raw.get(&key).expect("get").expect("day 2 hll stored");
        let mid = v.len() / 2;
        v[mid] ^= 0xff;
        let mut batch = WriteBatch::default();
        batch.put(key.to_vec(), v).expect("put");
        raw.apply(batch).expect("apply");
        raw.sync().expect("sync");
    }
    // 50,000 lines of day 1 (three batches), then 250,000 of day 2: the store fails on the
    // fourth batch while the parser still has a dozen to send into a channel of four.
    let mut input = lines(0, 50_000, 0);
    input.push_str(&lines(50_000, 250_000, 1));
    let path = dir.join("two-days.jsonl");
    std::fs::write(&path, input).expect("write");
    let started = Instant::now();
    let child = bin()
        .args(["--db", &db, "ingest", &path.to_string_lossy()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = wait_or_kill(child, Duration::from_secs(120));
    let err = failed(&out);
    assert!(
        err.contains("damaged") && err.contains("hll") && err.contains("unchanged"),
        "{err}"
    );
    eprintln!("the failed ingest ended after {:?}", started.elapsed());
    assert_eq!(value(&db, "COUNT"), 1_000.0, "nothing of the failed input");
    assert_eq!(value(&db, "COUNT FROM 2026-12-01 TO 2026-12-01"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- item 10: stdin statements go on past a line that is not UTF-8 -------------------------

#[test]
fn stdin_queries_answer_a_line_that_is_not_utf8_with_an_error_and_go_on() {
    let dir = tempdir("utf8");
    let db = init(&dir, &[]);
    let out = ingest_file(&db, &dir, "a.jsonl", lines(0, 10, 0).as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let statements = b"COUNT\nSEEN \xff\xfe0x1\nCOUNT ON chain:a\n";
    let out = run_with_stdin(&["--db", &db, "query", "--json"], statements);
    assert_eq!(out.status.code(), Some(1), "one statement failed");
    let answers: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers[0]["value"].as_f64(), Some(10.0));
    assert_eq!(answers[1]["kind"], "error");
    assert_eq!(answers[1]["line"].as_u64(), Some(2));
    assert!(
        answers[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not UTF-8") && e.contains("column 6")),
        "{}",
        answers[1]
    );
    assert_eq!(answers[2]["value"].as_f64(), Some(5.0));
    // Without --json the error goes to stderr with its line, and the answers still come.
    let out = run_with_stdin(&["--db", &db, "query"], statements);
    assert_eq!(
        text(&out.stdout).lines().count(),
        2,
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("line 2:"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- item 13: what users trip over ----------------------------------------------------------

#[test]
fn a_byte_order_mark_is_skipped_in_jsonl_and_csv() {
    let dir = tempdir("bom");
    let db = init(&dir, &[]);
    let jsonl = "\u{feff}{\"time\":\"2026-12-01T10:00:00Z\",\"wallet\":\"0xa\",\"chain\":\"a\"}\n";
    let out = ingest_file(&db, &dir, "bom.jsonl", jsonl.as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = "\u{feff}time,wallet,chain\r\n2026-12-01T11:00:00Z,0xb,b\r\n";
    let out = ingest_file(&db, &dir, "bom.csv", csv.as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(value(&db, "COUNT"), 2.0);
    assert_eq!(value(&db, "COUNT ON chain:b"), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn csv_errors_name_the_physical_line_with_crlf_blank_lines_and_quoted_newlines() {
    let dir = tempdir("csvlines");
    let db = init(&dir, &[]);
    let good = "2026-12-01T10:00:00Z,0xa,a,1";
    // Line 1 header, 2 good, 3 blank, 4-5 one record with a newline in a quoted field, 6 blank
    // (a CRLF line with nothing on it), 7 bad.
    for eol in ["\n", "\r\n"] {
        let csv = [
            "time,wallet,chain,memo",
            good,
            "",
            "2026-12-01T10:00:01Z,0xb,b,\"two",
            "lines\"",
            "",
            "2026-12-01T10:00:02Z,0xc",
            "",
        ]
        .join(eol);
        let out = ingest_file(&db, &dir, "lines.csv", csv.as_bytes(), &[]);
        let err = failed(&out);
        assert!(
            err.contains("line 7: has 2 columns, the header has 4"),
            "{eol:?}: {err}"
        );
        // A bad record over several lines says where it starts and ends.
        let csv = [
            "time,wallet,chain,memo",
            good,
            "noon,0xb,b,\"two",
            "lines\"",
        ]
        .join(eol);
        let out = ingest_file(&db, &dir, "multi.csv", csv.as_bytes(), &[]);
        let err = failed(&out);
        assert!(
            err.contains("line 3: field 'time'") && err.contains("spans 2 lines, to line 4"),
            "{eol:?}: {err}"
        );
    }
    assert_eq!(value(&db, "COUNT"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_summary_accounts_for_every_line() {
    let dir = tempdir("summary");
    let db = init(&dir, &[]);
    let good = |i: u32| format!("{{\"time\":\"2026-12-01T10:00:0{i}Z\",\"wallet\":\"0x{i}\"}}");
    // 7 lines: 4 events, 2 blank (one of spaces), 1 bad; no newline after the last.
    let jsonl = [
        good(1),
        String::new(),
        good(2),
        "{oops".into(),
        "   ".into(),
        good(3),
        good(4),
    ]
    .join("\n");
    let out = ingest_file(&db, &dir, "s.jsonl", jsonl.as_bytes(), &["--skip-bad"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("ingested 4 events from 7 lines (2 blank, 1 skipped)"),
        "{stdout}"
    );
    // The same shape as CSV with CRLF, a header, and a record over two lines.
    let csv = [
        "time,wallet,memo",
        "2026-12-01T11:00:01Z,0xc1,x",
        "",
        "2026-12-01T11:00:02Z,0xc2,\"a",
        "b\"",
        "bad,0xc3,y",
        "2026-12-01T11:00:04Z,0xc4,z",
        "",
    ]
    .join("\r\n");
    let out = ingest_file(&db, &dir, "s.csv", csv.as_bytes(), &["--skip-bad"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "ingested 3 events from 7 lines (1 header, 1 blank, 1 skipped, 1 inside quoted fields)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("line 6: field 'time'"), "{stdout}");
    assert_eq!(value(&db, "COUNT"), 7.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tab_delimiter_is_given_as_an_escape_or_by_name() {
    let dir = tempdir("tab");
    let db = init(&dir, &[]);
    let tsv = "time\twallet\tchain\n2026-12-01T10:00:00Z\t0xa\ta\n";
    for flag in ["\\t", "tab", "\t"] {
        let out = ingest_file(
            &db,
            &dir,
            "t.tsv",
            tsv.as_bytes(),
            &["--format", "csv", "--delimiter", flag],
        );
        assert!(out.status.success(), "{flag:?}: {}", text(&out.stderr));
    }
    assert_eq!(value(&db, "COUNT ON chain:a"), 3.0);
    let out = ingest_file(&db, &dir, "t.tsv", tsv.as_bytes(), &["--delimiter", "ab"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(text(&out.stderr).contains("'ab' is not a delimiter"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The time of the one sampled event, as SAMPLE writes it.
fn sampled_time(db: &str) -> String {
    let s = query(db, "SAMPLE 1");
    s["value"][0]["time"].as_str().expect("time").to_string()
}

#[test]
fn times_without_an_offset_are_read_in_the_stated_zone_utc_by_default() {
    let cases: [(&[&str], &str, &str); 5] = [
        (&[], "2026-09-02T05:00:00.000Z", "read as UTC"),
        (
            &["--timezone", "+02:00"],
            "2026-09-02T03:00:00.000Z",
            "read as +02:00",
        ),
        (
            &["--timezone", "-0530"],
            "2026-09-02T10:30:00.000Z",
            "read as -05:30",
        ),
        // Summer time in Berlin: two hours ahead of UTC.
        (
            &["--timezone", "Europe/Berlin"],
            "2026-09-02T03:00:00.000Z",
            "read as Europe/Berlin",
        ),
        (&["--timezone", "utc"], "2026-09-02T05:00:00.000Z", "UTC"),
    ];
    for (flags, expected, said) in cases {
        for (name, content) in [
            (
                "t.jsonl",
                "{\"time\":\"2026-09-02 05:00:00\",\"wallet\":\"0xa\"}\n",
            ),
            ("t.csv", "time,wallet\n2026-09-02T05:00,0xa\n"),
        ] {
            let dir = tempdir("zone");
            let db = init(&dir, &[]);
            let out = ingest_file(&db, &dir, name, content.as_bytes(), flags);
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{flags:?}: {}", text(&out.stderr));
            assert!(
                stdout.contains("1 time without an offset") && stdout.contains(said),
                "{flags:?}: {stdout}"
            );
            assert_eq!(sampled_time(&db), expected, "{flags:?} {name}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    // Times with an offset do not depend on --timezone, and the summary says nothing of it.
    let dir = tempdir("zone-abs");
    let db = init(&dir, &[]);
    let out = ingest_file(
        &db,
        &dir,
        "abs.jsonl",
        b"{\"time\":\"2026-09-02 05:00:00+01:00\",\"wallet\":\"0xa\"}\n",
        &["--timezone", "Asia/Tokyo"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("without an offset"));
    assert_eq!(sampled_time(&db), "2026-09-02T04:00:00.000Z");
    // A time that clocks skip, and a zone that does not exist, are refused by name.
    let out = ingest_file(
        &db,
        &dir,
        "gap.jsonl",
        b"{\"time\":\"2026-03-29 02:30:00\",\"wallet\":\"0xa\"}\n",
        &["--timezone", "Europe/Berlin"],
    );
    let err = failed(&out);
    assert!(
        err.contains("line 1") && err.contains("does not exist in Europe/Berlin"),
        "{err}"
    );
    let out = ingest_file(&db, &dir, "x.jsonl", b"", &["--timezone", "Mars/Olympus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown time zone 'Mars/Olympus'"));
    let help = ok(&["ingest", "--help"]);
    assert!(
        help.contains("--timezone") && help.contains("[default: UTC]"),
        "{help}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn csv_read_as_jsonl_gets_a_hint_to_pass_format_csv() {
    let dir = tempdir("hint");
    let db = init(&dir, &[]);
    let csv = b"time,wallet,chain\n2026-12-01T10:00:00Z,0xa,a\n";
    let out = run_with_stdin(&["--db", &db, "ingest", "-"], csv);
    let err = failed(&out);
    assert!(
        err.contains("line 1: bad JSON") && err.contains("pass --format csv"),
        "{err}"
    );
    let out = ingest_file(&db, &dir, "data.txt", csv, &["--format", "jsonl"]);
    assert!(failed(&out).contains("pass --format csv"));
    // Under --skip-bad every line is skipped; the hint comes with the report.
    let out = run_with_stdin(&["--db", &db, "ingest", "--skip-bad", "-"], csv);
    assert!(
        text(&out.stdout).contains("pass --format csv"),
        "{}",
        text(&out.stdout)
    );
    // A JSONL file with one broken line gets no such hint.
    let out = run_with_stdin(&["--db", &db, "ingest", "-"], b"{\"time\":1,\n");
    assert!(!failed(&out).contains("--format"));
    let out = run_with_stdin(&["--db", &db, "ingest", "--format", "csv", "-"], csv);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn init_refuses_a_non_empty_directory_that_is_not_a_store() {
    let dir = tempdir("initdir");
    let target = dir.join("photos");
    std::fs::create_dir_all(target.join("2024")).expect("dir");
    std::fs::write(target.join("cat.jpg"), b"meow").expect("file");
    let t = target.to_string_lossy().into_owned();
    let err = failed(&run(&["--db", &t, "init"]));
    assert!(
        err.contains("not empty and not a sketchdb store") && err.contains("2024/, cat.jpg"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&target).expect("dir").count(),
        2,
        "nothing was added"
    );
    // An empty directory, and a new one, are fine; a store is refused as a store.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    ok(&["--db", &empty.to_string_lossy(), "init"]);
    let err = failed(&run(&["--db", &empty.to_string_lossy(), "init"]));
    assert!(err.contains("a store already exists"), "{err}");
    ok(&["--db", &dir.join("new").to_string_lossy(), "init"]);
    let file = dir.join("file");
    std::fs::write(&file, b"x").expect("file");
    assert!(failed(&run(&["--db", &file.to_string_lossy(), "init"])).contains("is a file"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lowercase_items_makes_one_wallet_of_its_cases_in_ingest_and_queries() {
    let dir = tempdir("lower");
    let db = init(&dir, &["--lowercase-items"]);
    let input = concat!(
        "{\"time\":\"2026-12-01T10:00:00Z\",\"wallet\":\"0xABCdef\",\"chain\":\"a\"}\n",
        "{\"time\":\"2026-12-01T10:00:01Z\",\"wallet\":\"0xabcdef\",\"chain\":\"a\"}\n",
    );
    let out = ingest_file(&db, &dir, "l.jsonl", input.as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = "time,wallet,chain\n2026-12-01T10:00:02Z,0XABCDEF,b\n";
    let out = ingest_file(&db, &dir, "l.csv", csv.as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(value(&db, "EXACT DISTINCT wallets"), 1.0);
    // The sketch's estimate of one item, not two: one coupon in the sparse HLL, which linear
    // counting over 2^26 addresses turns into 2^26·ln(2^26/(2^26 − 1)) = 1.00000001 (two would
    // give 2.00000003), not a statistical tolerance.
    assert!((value(&db, "DISTINCT wallets") - 1.0).abs() < 0.01);
    assert_eq!(value(&db, "COUNT 0xAbCdEf"), 3.0);
    assert_eq!(value(&db, "EXACT COUNT 0XABCDEF"), 3.0);
    assert_ne!(query(&db, "SEEN 0xABCDEF")["value"], "no");
    assert_ne!(query(&db, "SEEN 0xABCDEF FROM 2026-12-01")["value"], "no");
    let top = query(&db, "TOP 1 wallets");
    assert!(top.to_string().contains("0xabcdef"), "{top}");
    // Through the library as well: the store lowercases what a service ingests itself.
    {
        let store = Store::open(&db).expect("open");
        assert!(store.config().lowercase_items);
        store
            .ingest(&sketchdb::store::Event::new(
                1_796_090_000_000,
                "0xFEED",
                &[("chain", "a")],
            ))
            .expect("ingest");
        store.flush().expect("flush");
        let a = store.query("EXACT COUNT 0xfeed").expect("query");
        assert_eq!(a.value, sketchdb::query::answer::Value::Number(1.0));
    }
    // A store made without the flag keeps case apart, as before.
    let dir2 = tempdir("lower-off");
    let db2 = init(&dir2, &[]);
    let out = ingest_file(&db2, &dir2, "l.jsonl", input.as_bytes(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(value(&db2, "EXACT DISTINCT wallets"), 2.0);
    assert_eq!(value(&db2, "EXACT COUNT 0xABCdef"), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

/// The configuration as stores written before `lowercase_items` hold it.
#[derive(serde::Serialize)]
struct ConfigBefore {
    item_field: String,
    tag_fields: Vec<String>,
    bucket: sketchdb::store::BucketWidth,
    sketches: sketchdb::SketchConfig,
    retention_ms: Option<i64>,
    memory_budget: usize,
    checkpoint_every: u64,
    cache_bytes: usize,
}

#[test]
fn a_store_written_before_lowercase_items_still_opens() {
    let dir = tempdir("oldconfig");
    let path = dir.join("old.db");
    let c = Config {
        tag_fields: vec!["chain".into(), "token".into()],
        ..Config::default()
    };
    drop(Store::create(&path, c.clone()).expect("create"));
    {
        let raw = SledEngine::open(&path)
            .expect("open sled")
            .expect("a store");
        let old = ConfigBefore {
            item_field: c.item_field.clone(),
            tag_fields: c.tag_fields.clone(),
            bucket: c.bucket,
            sketches: c.sketches.clone(),
            retention_ms: c.retention_ms,
            memory_budget: c.memory_budget,
            checkpoint_every: c.checkpoint_every,
            cache_bytes: c.cache_bytes,
        };
        let blob = sketchdb::codec::encode(sketchdb::store::META_KIND, &old).expect("encode");
        let mut batch = WriteBatch::default();
        batch.put(keys::meta("config"), blob).expect("put");
        raw.apply(batch).expect("apply");
        raw.sync().expect("sync");
    }
    let store = Store::open(&path).expect("an old store opens");
    assert_eq!(store.config(), &c);
    assert!(!store.config().lowercase_items);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- issue 12 item 2: small ingests do not grow the store ----------------------------------

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// A cron job ingesting 10 lines at a time: each ingest rewrites the sets it touches, and the
/// space of the versions it replaces must be reused, not piled up (it was 49 MB after the first
/// of 60 such ingests and 497 MB after the last, mostly in blob files sled never reclaims).
#[test]
fn sixty_ingests_of_ten_lines_leave_the_store_at_most_half_again_its_first_size() {
    let dir = tempdir("sixty");
    let db = init(&dir, &[]);
    let mut first = 0;
    for i in 0..60u64 {
        let out = ingest_file(
            &db,
            &dir,
            "ten.jsonl",
            lines(i * 10, 10, (i % 3) as i64).as_bytes(),
            &[],
        );
        assert!(out.status.success(), "ingest {i}: {}", failed(&out));
        if i == 0 {
            first = dir_bytes(Path::new(&db));
        }
    }
    let last = dir_bytes(Path::new(&db));
    assert!(
        last as f64 <= 1.5 * first as f64,
        "{first} bytes after the first ingest, {last} after the 60th"
    );
    assert_eq!(value(&db, "COUNT FROM ALL"), 600.0);
    let blobs = Path::new(&db).join("blobs");
    assert_eq!(std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
