//! No query text can crash or hang the process: through the library on a small stack (where a
//! remaining recursion would abort the test binary), and through the real binary's stdin mode,
//! where an abusive line must give an error object and the next line its answer.

use sketchdb::gen::wallet_address;
use sketchdb::query::{Kind, QueryError, Value};
use sketchdb::sketch::SketchConfig;
use sketchdb::store::{Config, Event, Store};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const DAY: i64 = 86_400_000;
const T0: i64 = 1_764_547_200_000; // 2025-12-01

/// The events of the store below: 3,000 on chain:a, 1,000 on b, 1,500 on c.
const EVENTS: f64 = 5_500.0;

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sketchdb-limits-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Two day buckets; chain a: wallets 0..3,000; b: 1,000..2,000; c: 2,500..4,000. So
/// a − b − c has 1,500 wallets, every tag's set is below Theta's k (exact), and each tag has
/// 2 buckets.
fn store(dir: &Path) -> Store {
    let config = Config {
        sketches: SketchConfig {
            bloom_capacity: 10_000,
            reservoir_size: 100,
            ..SketchConfig::default()
        },
        ..Config::default()
    };
    let store = Store::create(dir, config).expect("create");
    let mut events = Vec::new();
    let mut add = |range: std::ops::Range<u64>, chain: &str| {
        for i in range {
            let t = T0 + (i as i64 % 2) * DAY + i as i64;
            events.push(Event::new(t, wallet_address(3, i), &[("chain", chain)]));
        }
    };
    add(0..3_000, "a");
    add(1_000..2_000, "b");
    add(2_500..4_000, "c");
    store.ingest_batch(&events).expect("ingest");
    store.flush().expect("flush");
    store
}

fn number(a: &sketchdb::query::Answer) -> f64 {
    match a.value {
        Value::Number(v) => v,
        ref other => panic!("not a number: {other:?}"),
    }
}

/// Runs `f` with the store on a thread with a 256 KiB stack, giving up after a minute (a hang
/// guard only: the work done is asserted on, not the time).
fn on_small_stack<T: Send + 'static>(
    store: &std::sync::Arc<Store>,
    f: impl FnOnce(&Store) -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let store = std::sync::Arc::clone(store);
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let _ = tx.send(f(&store));
        })
        .expect("spawn");
    let out = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("an answer within the hang guard");
    handle.join().expect("no panic");
    out
}

fn syntax(r: Result<sketchdb::query::Answer, QueryError>) -> sketchdb::query::SyntaxError {
    match r {
        Err(QueryError::Syntax(e)) => e,
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn abusive_queries_through_the_library_answer_or_fail_cleanly_on_a_small_stack() {
    let dir = tempdir("library");
    let store = std::sync::Arc::new(store(&dir));
    let prefix = "DISTINCT wallets ON ";

    on_small_stack(&store, move |store| {
        // 8,000 of each nesting: refused at the '(' or keyword that opens level 65.
        let e = syntax(store.query(&format!(
            "{prefix}{}chain:a{}",
            "(".repeat(8_000),
            ")".repeat(8_000)
        )));
        assert_eq!(e.offset, prefix.len() + 64, "{e}");
        assert!(
            e.to_string().contains("at most 64 levels of nesting"),
            "{e}"
        );
        let e = syntax(store.query(&format!(
            "{prefix}{}chain:a{}",
            "NOT (".repeat(8_000),
            ")".repeat(8_000)
        )));
        assert_eq!(e.offset, prefix.len() + 64 * 5 + 4, "{e}");
        let e = syntax(store.query(&format!("{}COUNT", "EXPLAIN ".repeat(8_000))));
        assert_eq!(e.offset, 64 * 8, "{e}");
        // 30,000 chained ANDs of chain:a are 360 KB: over the size limit.
        let e = syntax(store.query(&format!("{prefix}chain:a{}", " AND chain:a".repeat(30_000))));
        assert_eq!(
            e.offset,
            sketchdb::query::parser::MAX_STATEMENT_BYTES,
            "{e}"
        );

        // At the limits the statements are answered, and rightly.
        // 64 NOTs: NOT (NOT (x)) is x for wallets with events in the range.
        let a = store
            .query(&format!(
                "{prefix}{}chain:b{}",
                "NOT (".repeat(64),
                ")".repeat(64)
            ))
            .expect("64 levels are allowed");
        assert_eq!((number(&a), a.exact), (1_000.0, true), "{a}");
        let a = store
            .query(&format!("{}COUNT", "EXPLAIN ".repeat(64)))
            .expect("64 EXPLAINs");
        assert_eq!(a.kind, Kind::Explain);
        // 20,000 chained ANDs (240 KB) of one tag are that tag.
        let a = store
            .query(&format!("{prefix}chain:a{}", " AND chain:a".repeat(19_999)))
            .expect("under the size limit");
        assert_eq!((number(&a), a.method.as_str()), (3_000.0, "theta"), "{a}");
        assert_eq!(a.buckets, 2, "chain:a is read once: {a}");
        let a = store
            .query(&format!(
                "COUNT ON chain:a{}",
                " OR chain:b OR chain:c".repeat(10_000)
            ))
            .expect("a long OR");
        assert_eq!(number(&a), EVENTS, "{a}");
    });
}

#[test]
fn five_thousand_chained_excepts_read_each_tag_once_and_answer_rightly() {
    let dir = tempdir("excepts");
    let store = std::sync::Arc::new(store(&dir));
    on_small_stack(&store, |store| {
        let chain: String = (0..5_000)
            .map(|i| {
                if i % 2 == 0 {
                    " EXCEPT chain:b"
                } else {
                    " EXCEPT chain:c"
                }
            })
            .collect();
        // Theta: each tag's merged sketch read once, 2 buckets each (the old evaluation read
        // chain:b and chain:c once per operand: 10,002 buckets).
        let a = store
            .query(&format!("DISTINCT wallets ON chain:a{chain}"))
            .expect("distinct");
        assert_eq!(
            (number(&a), a.exact, a.method.as_str(), a.buckets),
            (1_500.0, true, "theta", 6),
            "{a}"
        );
        // The same through the scans: per wallet, and per event.
        let a = store
            .query(&format!("EXACT DISTINCT wallets ON chain:a{chain}"))
            .expect("exact distinct");
        assert_eq!((number(&a), a.method.as_str()), (1_500.0, "exact"), "{a}");
        let a = store
            .query(&format!("COUNT ON chain:a{chain}"))
            .expect("count");
        assert_eq!(number(&a), 3_000.0, "{a}");
        // AND and EXCEPT alternating, 5,000 operands: a ∩ a ∩ ... − b − c − ...
        let mixed: String = (0..5_000)
            .map(|i| {
                if i % 2 == 0 {
                    " AND chain:a"
                } else {
                    " EXCEPT chain:b"
                }
            })
            .collect();
        let a = store
            .query(&format!("DISTINCT wallets ON chain:a{mixed}"))
            .expect("mixed");
        assert_eq!((number(&a), a.buckets), (2_000.0, 4), "{a}");
    });
}

/// In stdin mode, each abusive line is answered by an error object naming its line, and the
/// good line after it by its answer; the exit status is 1, as for any failed statement.
#[test]
fn the_binary_answers_the_line_after_a_100_kb_abusive_one() {
    let dir = tempdir("cli");
    drop(store(&dir));
    let abusive = [
        format!("DISTINCT wallets ON {}", "(".repeat(100_000)),
        format!("{}COUNT", "EXPLAIN ".repeat(12_500)),
        format!("COUNT ON chain:a{}", " AND (chain:b".repeat(7_000)),
        format!("COUNT ON chain:a{}", " AND chain:a".repeat(30_000)),
    ];
    let mut input = String::new();
    for line in &abusive {
        input.push_str(line);
        input.push('\n');
    }
    input.push_str("COUNT\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sketchdb"))
        .env_remove("SKETCHDB_DB")
        .args(["--db", &dir.to_string_lossy(), "query", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sketchdb");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    // A process that died early closes the pipe; what it printed and its status say why.
    let _ = writer.join().expect("writer thread");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(
        lines.len(),
        5,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expect = [
        "at byte 84: expected at most 64 levels of nesting",
        "at byte 512: expected at most 64 levels of nesting",
        "levels of nesting",
        "expected a statement of at most 262144 bytes, found a statement of 360016 bytes",
    ];
    for (i, want) in expect.iter().enumerate() {
        assert_eq!(lines[i]["kind"], "error", "{}", lines[i]);
        assert_eq!(lines[i]["line"], i + 1);
        let msg = lines[i]["error"].as_str().expect("message");
        assert!(msg.contains(want), "line {}: {msg}", i + 1);
        assert!(msg.len() < 400, "one short line: {msg}");
    }
    assert_eq!(lines[4]["kind"], "count", "{}", lines[4]);
    assert_eq!(lines[4]["value"].as_f64(), Some(EVENTS));
    assert_eq!(out.status.code(), Some(1), "exit status as documented");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("4 statements failed"), "{stderr}");
}
