//! End to end through the built binary, as a user runs it: gen → ingest → query with `--json`
//! checked against the truth counted from the generated file itself; bad input; a killed
//! ingest; syntax errors; help and exit codes.

mod support;

use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use support::tempdir;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    c.env_remove("SKETCHDB_DB").env("NO_COLOR", "1");
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run sketchdb")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "sketchdb {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn gen_file(dir: &Path, stream: &str, date: &str, scale: &str) -> PathBuf {
    let path = dir.join(format!("{stream}.jsonl"));
    let text = ok(&[
        "gen", stream, "--seed", "7", "--date", date, "--scale", scale,
    ]);
    std::fs::write(&path, text).expect("write gen output");
    path
}

fn query_json(db: &Path, statement: &str) -> Value {
    let out = ok(&[
        "--db",
        &db.to_string_lossy(),
        "query",
        "--json",
        "--seed",
        "1",
        statement,
    ]);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{statement}: {e}: {out}"))
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// The truth, counted from the JSONL lines themselves.
struct Truth {
    events: u64,
    per_wallet: HashMap<String, u64>,
    chains: HashMap<String, HashSet<String>>,
    bots: HashSet<String>,
}

fn truth(path: &Path) -> Truth {
    let text = std::fs::read_to_string(path).expect("read");
    let mut t = Truth {
        events: 0,
        per_wallet: HashMap::new(),
        chains: HashMap::new(),
        bots: HashSet::new(),
    };
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("gen writes JSON");
        let w = v["wallet"].as_str().expect("wallet").to_string();
        t.events += 1;
        *t.per_wallet.entry(w.clone()).or_default() += 1;
        let chain = v["chain"].as_str().expect("chain").to_string();
        t.chains.entry(chain).or_default().insert(w.clone());
        if v["kind"] == "bot" {
            t.bots.insert(w);
        }
    }
    t
}

/// An exact answer must equal the truth. An estimate must lie within 4 of the standard errors
/// its own 95% interval states (half-width / 1.96, on the truth's side) of it: a correct
/// sketch fails that with probability 6e-5, where "the interval covers the truth" would fail a
/// correct sketch once in 20 seeds (five such checks: once in 4). Whether the intervals are 95%
/// ones, neither wider nor narrower, is tested over hundreds of sketches in the unit tests.
fn assert_near_truth(v: &Value, truth: f64, what: &str) {
    let (value, lo, hi) = (num(v, "value"), num(v, "lower"), num(v, "upper"));
    if v["exact"] == true {
        assert_eq!(value, truth, "{what}: {v}");
        return;
    }
    let half = if truth > value {
        hi - value
    } else {
        value - lo
    };
    assert!(
        (value - truth).abs() <= 4.0 * half / 1.959_964,
        "{what}: {truth} more than 4 standard errors from {value} [{lo}, {hi}]: {v}"
    );
}

#[test]
fn gen_ingest_and_every_statement_form_against_the_truth() {
    let dir = tempdir("forms");
    let db = dir.join("tx.db");
    let dbs = db.to_string_lossy().to_string();
    ok(&["--db", &dbs, "init"]);
    let a = gen_file(&dir, "stream-a", "2026-11-28", "0.1");
    let two = gen_file(&dir, "two-chains", "2026-11-30", "0.01");
    let ta = truth(&a);
    let tt = truth(&two);
    assert_eq!(
        (ta.events, ta.per_wallet.len(), ta.bots.len()),
        (100_000, 10_050, 50)
    );
    assert_eq!(tt.events, 100_000);
    for file in [&a, &two] {
        let summary = ok(&["--db", &dbs, "ingest", &file.to_string_lossy()]);
        assert!(
            summary.contains("ingested 100,000 events from 100,000 lines into 1 bucket"),
            "{summary}"
        );
    }
    let on_a = &tt.chains["a"];
    let on_b = &tt.chains["b"];
    let both = on_a.intersection(on_b).count() as f64;
    assert_eq!(both, 100.0);

    // DISTINCT: HLL for a plain slice, Theta or an exact fallback for AND / EXCEPT.
    let d = query_json(&db, "DISTINCT wallets FROM 2026-11-28 TO 2026-11-28");
    assert_eq!(
        (d["kind"].as_str(), d["method"].as_str()),
        (Some("distinct"), Some("hll"))
    );
    assert_near_truth(&d, 10_050.0, "distinct stream A");
    let d = query_json(
        &db,
        "DISTINCT wallets ON chain:a OR chain:b FROM 2026-11-30 TO 2026-11-30",
    );
    assert_near_truth(&d, on_a.union(on_b).count() as f64, "union");
    let d = query_json(
        &db,
        "DISTINCT wallets ON chain:a AND chain:b FROM 2026-11-30 TO 2026-11-30",
    );
    assert_near_truth(&d, both, "intersection");
    let d = query_json(
        &db,
        "DISTINCT wallets ON chain:a EXCEPT chain:b FROM 2026-11-30 TO 2026-11-30",
    );
    assert_near_truth(&d, on_a.difference(on_b).count() as f64, "difference");
    let d = query_json(&db, "EXACT DISTINCT wallets FROM 2026-11-28 TO 2026-11-28");
    assert_eq!(
        (num(&d, "value"), d["exact"].as_bool()),
        (10_050.0, Some(true))
    );

    // SEEN: a bot is never "no" (no false negatives); the day's 10,050 wallets are under the
    // Bloom filter's exact-form limit, so its fingerprint answers "yes", exactly (issue 12). An
    // absent wallet is "no" here.
    let bot = ta.bots.iter().next().expect("a bot").clone();
    let s = query_json(&db, &format!("SEEN {bot} FROM 2026-11-28 TO 2026-11-28"));
    assert_eq!(
        (&s["value"], &s["method"], &s["exact"]),
        (
            &serde_json::json!("yes"),
            &serde_json::json!("bloom-exact"),
            &serde_json::json!(true)
        ),
        "{s}"
    );
    let s = query_json(&db, &format!("SEEN {bot} FROM 2026-11-30 TO 2026-11-30"));
    assert_eq!(
        s["value"], "no",
        "a stream-A bot never sent on 2026-11-30: {s}"
    );

    // COUNT <value>: never under (certain); over by at most the stated εN with probability
    // at least 1 − δ = 99% (the Count-Min guarantee, on this fixed seed).
    let c = query_json(&db, &format!("COUNT {bot} FROM 2026-11-28 TO 2026-11-28"));
    assert!(num(&c, "value") >= 1800.0, "{c}");
    assert!(
        num(&c, "lower") <= 1800.0 && num(&c, "value") - num(&c, "lower") <= 0.001 * 100_000.0,
        "count of a bot: {c}"
    );
    // COUNT: exact.
    let c = query_json(&db, "COUNT FROM 2026-11-28 TO 2026-11-28");
    assert_eq!(
        (num(&c, "value"), c["exact"].as_bool()),
        (100_000.0, Some(true))
    );
    let c = query_json(&db, "COUNT ON chain:a");
    assert_eq!(num(&c, "value"), on_a.len() as f64);

    // TOP: the five loudest of stream A are bots.
    let t = query_json(&db, "TOP 5 wallets FROM 2026-11-28 TO 2026-11-28");
    let top = t["value"].as_array().expect("list");
    assert_eq!(top.len(), 5);
    for row in top {
        let w = row["item"].as_str().expect("item");
        assert!(ta.bots.contains(w), "{w} is not a bot: {t}");
    }

    // SAMPLE: n events of the range, each one that was ingested, with its extra fields.
    let s = query_json(&db, "SAMPLE 50 FROM 2026-11-28 TO 2026-11-28");
    let rows = s["value"].as_array().expect("list");
    assert_eq!(rows.len(), 50);
    for r in rows {
        let w = r["wallet"].as_str().expect("wallet");
        assert!(ta.per_wallet.contains_key(w), "{r}");
        assert!(r["kind"] == "bot" || r["kind"] == "user", "{r}");
    }
    let s = query_json(&db, "SAMPLE 10 PER chain FROM 2026-11-30 TO 2026-11-30");
    assert_eq!(s["value"].as_array().map(Vec::len), Some(20), "{s}");

    // Meta statements.
    assert_eq!(
        query_json(&db, "EXPLAIN DISTINCT wallets")["kind"],
        "explain"
    );
    let b = query_json(&db, "SHOW BUCKETS");
    assert_eq!(b["value"].as_array().map(Vec::len), Some(2), "{b}");
    assert_eq!(query_json(&db, "INFO")["kind"], "info");

    // Statements from stdin: one answer per line, the clock set by --now.
    let mut child = bin()
        .args(["--db", &dbs, "query", "--json", "--now", "2026-11-28"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"COUNT FROM today\n\n-- a comment\nCOUNT FROM yesterday;\nCOUNT ON chain:b\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let values: Vec<f64> = answers.iter().map(|a| num(a, "value")).collect();
    assert_eq!(values, vec![100_000.0, 0.0, on_b.len() as f64]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_line_rejects_the_file_and_leaves_the_count_unchanged() {
    let dir = tempdir("bad");
    let db = dir.join("tx.db");
    let dbs = db.to_string_lossy().to_string();
    ok(&["--db", &dbs, "init"]);
    let b = gen_file(&dir, "stream-b", "2026-11-29", "0.01");
    let text = std::fs::read_to_string(&b).expect("read");
    let lines: Vec<&str> = text.lines().take(10_000).collect();
    assert_eq!(lines.len(), 10_000);
    let first = dir.join("first.jsonl");
    std::fs::write(&first, lines[..1000].join("\n")).expect("write");
    ok(&["--db", &dbs, "ingest", &first.to_string_lossy()]);

    let mut bad_lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    bad_lines[4999] = bad_lines[4999].replace("\"time\":\"", "\"time\":\"noon ");
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, bad_lines.join("\n") + "\n").expect("write");
    let out = run(&["--db", &dbs, "ingest", &bad.to_string_lossy()]);
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("line 5000") && err.contains("'time'"), "{err}");
    assert!(err.contains("unchanged"), "{err}");
    // The CLI names its flag where the library names its option (tests/library.rs).
    assert!(err.contains("--skip-bad ingests the good lines"), "{err}");
    assert!(!err.contains("Options::skip_bad"), "{err}");
    let c = query_json(&db, "COUNT");
    assert_eq!(num(&c, "value"), 1000.0, "nothing of the bad file went in");

    // Truncated JSON and a missing item field are reported the same way.
    bad_lines[4999] = lines[4999][..30].to_string();
    std::fs::write(&bad, bad_lines.join("\n") + "\n").expect("write");
    let out = run(&["--db", &dbs, "ingest", &bad.to_string_lossy()]);
    assert!(
        stderr_of(&out).contains("line 5000: bad JSON"),
        "{}",
        stderr_of(&out)
    );
    bad_lines[4999] = r#"{"time":"2026-11-29T10:00:00Z","chain":"main"}"#.to_string();
    std::fs::write(&bad, bad_lines.join("\n") + "\n").expect("write");
    let out = run(&["--db", &dbs, "ingest", &bad.to_string_lossy()]);
    assert!(
        stderr_of(&out).contains("line 5000: field 'wallet' missing"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(num(&query_json(&db, "COUNT"), "value"), 1000.0);

    // --skip-bad takes the other 9,999 and says what it skipped.
    let out = ok(&["--db", &dbs, "ingest", "--skip-bad", &bad.to_string_lossy()]);
    assert!(out.contains("ingested 9,999 events"), "{out}");
    assert!(
        out.contains("skipped 1 bad line") && out.contains("line 5000"),
        "{out}"
    );
    assert_eq!(num(&query_json(&db, "COUNT"), "value"), 10_999.0);

    // CSV with mapped fields, from stdin, and a wrong column count.
    let csv = "ts,from,network\n2026-11-29T01:00:00Z,0xaa,a\n1796000000,0xbb,b\n";
    let mut child = bin()
        .args([
            "--db",
            &dbs,
            "ingest",
            "--format",
            "csv",
            "--time-field",
            "ts",
        ])
        .args(["--field", "wallet=from", "--field", "chain=network", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(csv.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(num(&query_json(&db, "COUNT ON chain:b"), "value"), 1.0);
    let short = dir.join("short.csv");
    std::fs::write(&short, "time,wallet,chain\n2026-11-29T01:00:00Z,0xaa\n").expect("write");
    let out = run(&["--db", &dbs, "ingest", &short.to_string_lossy()]);
    assert!(
        stderr_of(&out).contains("line 2: has 2 columns, the header has 3"),
        "{}",
        stderr_of(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_ingest_leaves_a_store_that_opens_with_all_or_nothing_of_it() {
    let dir = tempdir("kill");
    let db = dir.join("tx.db");
    let dbs = db.to_string_lossy().to_string();
    ok(&["--db", &dbs, "init"]);
    let small = gen_file(&dir, "stream-b", "2026-11-29", "0.01");
    ok(&["--db", &dbs, "ingest", &small.to_string_lossy()]);
    let big = gen_file(&dir, "two-chains", "2026-11-30", "0.2");
    let before = num(&query_json(&db, "COUNT"), "value");
    assert_eq!(before, 10_000.0);
    for delay_ms in [300u64, 1200] {
        let mut child = bin()
            .args(["--db", &dbs, "ingest", &big.to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        child.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix
        let status = child.wait().expect("wait");
        let count = num(&query_json(&db, "COUNT"), "value");
        if status.success() {
            // Finished before the kill: all of it.
            assert_eq!(count, before + 2_000_000.0);
            return;
        }
        assert_eq!(count, before, "killed after {delay_ms} ms: none of it");
        let d = query_json(&db, "EXACT DISTINCT wallets");
        assert_eq!(num(&d, "value"), 200.0);
    }
    // And the store takes the whole file afterwards.
    ok(&["--db", &dbs, "ingest", &big.to_string_lossy()]);
    assert_eq!(
        num(&query_json(&db, "COUNT"), "value"),
        before + 2_000_000.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn syntax_errors_and_usage_errors_exit_non_zero_with_one_line() {
    let dir = tempdir("syntax");
    let db = dir.join("tx.db");
    let dbs = db.to_string_lossy().to_string();
    ok(&["--db", &dbs, "init"]);
    let out = run(&["--db", &dbs, "query", "DISTINCT wallets FORM today"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("syntax error at byte 17") && err.contains("did you mean FROM?"),
        "{err}"
    );
    let out = run(&["--db", &dbs, "query", "SEEN"]);
    assert!(stderr_of(&out).contains("at byte 4"), "{}", stderr_of(&out));
    let out = run(&["--db", &dbs, "query", "--now", "tomorrow", "COUNT"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("--now 'tomorrow'"),
        "{}",
        stderr_of(&out)
    );

    // No store, an existing store, unknown commands and flags.
    let missing = dir.join("missing.db");
    let out = run(&["--db", &missing.to_string_lossy(), "query", "COUNT"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("init"), "{}", stderr_of(&out));
    assert!(!missing.exists(), "a query never creates a store");
    let out = run(&["--db", &dbs, "init"]);
    assert!(
        stderr_of(&out).contains("already exists"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(run(&["gen", "stream-z"]).status.code(), Some(2));
    let out = run(&["gen", "stream-a", "--scale", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr_of(&out).contains("panicked"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_has_an_example_for_every_command_and_gen_is_deterministic() {
    for cmd in ["init", "ingest", "query", "gen", "demo"] {
        let out = ok(&[cmd, "--help"]);
        assert!(out.contains("Example"), "{cmd} --help: {out}");
    }
    assert!(ok(&["--help"]).contains("Examples"));
    let a = ok(&["gen", "stream-b", "--seed", "3", "--scale", "0.01"]);
    let b = ok(&["gen", "stream-b", "--seed", "3", "--scale", "0.01"]);
    let c = ok(&["gen", "stream-b", "--seed", "4", "--scale", "0.01"]);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.lines().count(), 10_000);
    // A reader that stops early is not an error.
    let mut child = bin()
        .args(["gen", "two-chains"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 4096];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("read");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn demo_builds_its_store_reports_against_the_truth_and_guards_other_directories() {
    let dir = tempdir("demo");
    let db = dir.join("demo.db");
    let db_arg = db.to_string_lossy().into_owned();
    // Scale 0.02: two-chains has 100,000 wallets a chain, 200 on both (streams A and B are
    // always full size).
    let report = ok(&["--db", &db_arg, "demo", "--scale", "0.02"]);
    for heading in [
        "1. How many distinct wallets?",
        "2. Why not count the wallets in a sample and scale up?",
        "3. Have we seen wallet X?",
        "4. How often does wallet X transact?",
        "5. How many wallets used both chains?",
        "6. What if slightly wrong is not good enough?",
        "Summary",
    ] {
        assert!(
            report.contains(heading),
            "missing '{heading}' in:\n{report}"
        );
    }
    // The counter-examples are shown and marked, and the engine's own answer is exact.
    assert!(
        report.contains("The sample ranks the streams backwards"),
        "{report}"
    );
    assert!(report.contains("|a| + |b| − |a ∪ b| = "), "{report}");
    let both = report
        .lines()
        .find(|l| l.trim_start().starts_with("wallets on both chains  "))
        .unwrap_or_else(|| panic!("no exact intersection row in:\n{report}"));
    assert!(
        both.contains("exact") && both.contains("✓ exact"),
        "the intersection must be answered exactly: {both}"
    );
    assert_eq!(
        both.matches(" 200 ").count(),
        2,
        "answer and truth are both 200: {both}"
    );
    assert!(
        report.contains("sketchdb's 22 answers") || report.contains("All 22 of sketchdb's answers"),
        "{report}"
    );
    // A list cut short says "more rows" only after rows it shows.
    let lines: Vec<&str> = report.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains(" more rows") {
            assert!(
                lines[i - 1].trim_start().starts_with('{'),
                "'{line}' after no row:\n{}",
                lines[i - 1]
            );
        }
    }
    assert!(report.contains("rows not shown)"), "{report}");

    // The store stays and answers queries; a second run replaces it in place.
    let count = query_json(&db, "COUNT FROM ALL");
    assert_eq!(num(&count, "value"), 2_200_000.0);
    assert!(db.join("sketchdb-demo").is_file());
    let again = ok(&["--db", &db_arg, "demo", "--scale", "0.02"]);
    assert_eq!(
        num(&query_json(&db, "COUNT FROM ALL"), "value"),
        2_200_000.0
    );
    // The seed (42 unless given) decides the whole report, samples included: once timings are
    // masked, two runs print the same bytes, and another seed prints other samples.
    assert_eq!(
        masked_timings(&again),
        masked_timings(&report),
        "two runs with one seed differ"
    );
    let other = ok(&["--db", &db_arg, "demo", "--scale", "0.02", "--seed", "43"]);
    let sample_lines = |r: &str| -> Vec<String> {
        r.lines()
            .filter(|l| l.trim_start().starts_with("{\"time\""))
            .map(str::to_string)
            .collect()
    };
    assert!(!sample_lines(&report).is_empty(), "{report}");
    assert_ne!(sample_lines(&other), sample_lines(&report), "{other}");
    assert_ne!(masked_timings(&other), masked_timings(&report));

    // A directory the demo did not make is never touched.
    let precious = dir.join("precious");
    std::fs::create_dir_all(&precious).expect("mkdir");
    std::fs::write(precious.join("notes.txt"), "keep").expect("write");
    let out = run(&[
        "--db",
        &precious.to_string_lossy(),
        "demo",
        "--scale",
        "0.02",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("is not a demo store"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert_eq!(
        std::fs::read_to_string(precious.join("notes.txt"))
            .ok()
            .as_deref(),
        Some("keep")
    );
    assert_eq!(
        std::fs::read_dir(&precious).map(|d| d.count()).ok(),
        Some(1)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The report with every timing replaced by `#` (and a time unit by `t`): a number followed by a unit of time (`µs`,
/// `ms`, `s`) or a rate (`events/s`).
fn masked_timings(report: &str) -> String {
    report
        .lines()
        .map(|line| {
            let mut words: Vec<String> = line.split(' ').map(str::to_string).collect();
            for i in 1..words.len() {
                let unit = words[i]
                    .trim_start_matches('(')
                    .trim_end_matches([')', '.', ',', ';'])
                    .to_string();
                let number = words[i - 1].trim_start_matches('(').replace(',', "");
                if matches!(unit.as_str(), "µs" | "ms" | "s" | "events/s")
                    && number.parse::<f64>().is_ok()
                {
                    words[i - 1] = "#".into();
                    // The unit too: one run's 998 µs is another's 1.02 ms.
                    if unit != "events/s" {
                        words[i] = words[i].replacen(&unit, "t", 1);
                    }
                }
            }
            words.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `sketchdb::Answer` serializes (serde) to exactly the line `query --json` prints, for every
/// kind of answer; a SAMPLE row gives the extra fields back byte for byte (`1E5`, the spacing
/// inside an object, a 30-digit number), without serde_json's `arbitrary_precision`.
#[test]
fn answers_serialize_as_the_cli_prints_them_and_sample_rows_keep_extra_fields_byte_for_byte() {
    let dir = tempdir("serialize");
    let db = dir.join("tx.db");
    let dbs = db.to_string_lossy().to_string();
    ok(&["--db", &dbs, "init"]);
    let extra = r#""amount": 1E5, "meta": {"a": 1,  "b": [2.50, -0]}, "big":123456789012345678901234567890"#;
    let lines = [
        format!(r#"{{"time":"2026-12-01T10:00:00Z","wallet":"0xaa","chain":"a",{extra}}}"#),
        r#"{"time":"2026-12-01T11:00:00Z","wallet":"0xbb","chain":"b"}"#.to_string(),
        r#"{"time":"2026-12-01T12:00:00Z","wallet":"0xaa","chain":"b"}"#.to_string(),
    ];
    let file = dir.join("x.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    ok(&["--db", &dbs, "ingest", &file.to_string_lossy()]);

    let cli = |statement: &str| {
        ok(&["--db", &dbs, "query", "--json", "--seed", "5", statement])
            .trim_end()
            .to_string()
    };
    let sample = cli("SAMPLE 1 ON chain:a");
    // Spliced in as ingested: the key re-encoded, each value's text as it was written.
    for written in [
        r#""amount":1E5"#,
        r#""meta":{"a": 1,  "b": [2.50, -0]}"#,
        r#""big":123456789012345678901234567890"#,
    ] {
        assert!(sample.contains(written), "{written} not in {sample}");
    }
    // The row's own fields first, in a fixed order, then the extra fields in theirs.
    assert!(
        sample.contains(
            r#"[{"time":"2026-12-01T10:00:00.000Z","wallet":"0xaa","chain":"a","amount":1E5,"#
        ),
        "{sample}"
    );

    let statements = [
        "COUNT",
        "DISTINCT wallets",
        "SEEN 0xaa",
        "COUNT 0xaa",
        "TOP 2 wallets",
        "SAMPLE 1 ON chain:a",
        "SHOW TAGS",
        "EXPLAIN COUNT ON chain:b",
    ];
    // The CLI first: the store takes one process at a time.
    let printed: Vec<String> = statements.iter().map(|s| cli(s)).collect();
    let store = sketchdb::Store::open(&db).expect("open");
    for (statement, printed) in statements.iter().zip(&printed) {
        let mut session = sketchdb::Session::with_seed(&store, 5);
        let answer: sketchdb::Answer = session.query(statement).expect(statement);
        let serialized = serde_json::to_string(&answer).expect("serialize");
        assert_eq!(&serialized, printed, "{statement}");
        assert_eq!(serialized, answer.to_json(), "{statement}");
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gen chains` as a user runs it: its flags reach the generator, it is deterministic, a flag
/// of the other streams is a usage error, and its lines ingest into a store tagged by chain
/// and contract with the counts the file holds.
#[test]
fn gen_chains_writes_what_its_flags_say_and_ingests_with_contract_tags() {
    let args = [
        "gen",
        "chains",
        "--days",
        "2",
        "--events-per-day",
        "300",
        "--contracts",
        "4",
        "--chains",
        "2",
        "--time-format",
        "ms",
        "--date",
        "2026-11-20",
    ];
    let text = ok(&args);
    assert_eq!(text, ok(&args), "deterministic");
    assert_ne!(text, ok(&[&args[..], &["--seed", "1"]].concat()));
    let mut contracts = HashSet::new();
    let mut chains = HashMap::<String, u64>::new();
    let day0 = 1_795_132_800_000i64; // 2026-11-20T00:00:00Z
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("gen writes JSON");
        let t = v["time"].as_i64().expect("ms time");
        assert!((day0 - 3 * 3_600_000..day0 + 2 * 86_400_000).contains(&t));
        contracts.insert(v["contract"].as_str().expect("contract").to_string());
        *chains
            .entry(v["chain"].as_str().expect("chain").to_string())
            .or_default() += 1;
    }
    assert_eq!(text.lines().count(), 600);
    assert_eq!(contracts.len(), 4);
    assert_eq!(chains.len(), 2);
    let iso = ok(&["gen", "chains", "--events-per-day", "20000"]);
    let mean = iso.len() as f64 / iso.lines().count() as f64;
    assert!((350.0..=410.0).contains(&mean), "{mean}");

    // Flags of the other kind of stream, and bad values, are refused with the flag named.
    for (bad, code, says) in [
        (&["gen", "chains", "--scale", "0.5"][..], 2, "--scale"),
        (&["gen", "stream-a", "--days", "2"][..], 2, "--days"),
        (
            &["gen", "chains", "--time-format", "h"][..],
            2,
            "iso, ms or s",
        ),
        (&["gen", "chains", "--chains", "0"][..], 1, "chains must be"),
        (&["gen", "chainz"][..], 2, "chains"),
    ] {
        let out = run(bad);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{bad:?}: {}",
            stderr_of(&out)
        );
        assert!(
            stderr_of(&out).contains(says),
            "{bad:?}: {}",
            stderr_of(&out)
        );
        assert!(out.stdout.is_empty());
    }

    let dir = tempdir("gen-chains");
    let file = dir.join("chains.jsonl");
    std::fs::write(&file, &text).expect("write");
    let db = dir.join("tx.db");
    let dbs = db.to_string_lossy().into_owned();
    ok(&["--db", &dbs, "init", "--tag", "chain", "--tag", "contract"]);
    ok(&["--db", &dbs, "ingest", &file.to_string_lossy()]);
    assert_eq!(num(&query_json(&db, "COUNT"), "value"), 600.0);
    for (chain, n) in &chains {
        let v = query_json(&db, &format!("COUNT ON chain:{chain}"));
        assert_eq!(num(&v, "value"), *n as f64, "{chain}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
