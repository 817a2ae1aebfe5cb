//! Issue 13, requirement 4: a second process, end to end with the real binary. A REPL holds a
//! store and `sketchdb query` (and a second REPL) read it through the REPL's socket, with the
//! same output as once the REPL has gone; a holder that serves nothing is named in the error;
//! `--wait` waits for it; a holder killed with -9 leaves nothing that blocks or misleads.

mod support;

use rexpect::process::{Signal, WaitStatus};
use rexpect::session::{spawn_command, PtySession};
use sketchdb::store::holder::{self, HeldBy, HOLDER_FILE};
use sketchdb::store::{Config, Event, Store};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT_MS: u64 = 15_000;
/// 2026-12-01T00:00:00Z.
const DEC_1: i64 = 1_796_083_200_000;
const PROMPT: &str = "store.db> ";
const SOCKET: &str = "sketchdb.sock";

/// A fresh directory holding `store.db` with a few hundred events on two chains and two days.
fn fixture(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-holder-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store = Store::create(dir.join("store.db"), Config::default()).expect("create store");
    let events: Vec<Event> = (0..600)
        .map(|i| {
            let chain = if i % 3 == 0 { "b" } else { "a" };
            Event::new(
                DEC_1 + (i % 2) * 86_400_000 + i,
                format!("0x{:x}", i % 250),
                &[("chain", chain)],
            )
        })
        .collect();
    store.ingest_batch(&events).expect("ingest");
    store.flush().expect("flush");
    drop(store);
    dir
}

fn db(dir: &Path) -> PathBuf {
    dir.join("store.db")
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    c.env_remove("SKETCHDB_DB").env("NO_COLOR", "1");
    c
}

/// `sketchdb --db <store> <args>` with `stdin` fed in.
fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut cmd = bin();
    cmd.arg("--db").arg(db(dir)).args(args);
    support::output_with_stdin(cmd, stdin.as_bytes())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The REPL on the fixture's store, at its first prompt.
fn repl(dir: &Path) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    cmd.arg("--db")
        .arg(db(dir))
        .env("SKETCHDB_HISTORY", dir.join("history"))
        .env("NO_COLOR", "1")
        .env("TERM", "xterm");
    let mut p = spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawn the REPL");
    p.exp_string(PROMPT).expect("first prompt");
    p
}

fn quit(mut p: PtySession) {
    p.send_control('d').expect("ctrl-d");
    p.exp_eof().expect("exit on ctrl-d");
    match p.process().wait() {
        Ok(WaitStatus::Exited(_, 0)) => {}
        other => panic!("unexpected end: {other:?}"),
    }
}

/// The holder record's process, which must be a running one.
fn holder_pid(dir: &Path) -> u32 {
    match holder::read(&db(dir)) {
        HeldBy::Process(h) => h.pid,
        other => panic!("no running holder: {other:?}"),
    }
}

/// Every way `query` prints: one statement as text and as JSON, statements from stdin (with
/// `--now`, a bad line among them), and a syntax error's message and exit code.
fn answers(dir: &Path) -> Vec<(String, String, Option<i32>)> {
    let one = |args: &[&str], stdin: &str| {
        let out = run(dir, args, stdin);
        (text(&out.stdout), text(&out.stderr), out.status.code())
    };
    vec![
        one(&["query", "DISTINCT wallets ON chain:a OR chain:b"], ""),
        one(&["query", "--json", "COUNT ON chain:a FROM 2026-12-01"], ""),
        one(
            &["query", "--json", "--seed", "3", "SAMPLE 2 ON chain:b"],
            "",
        ),
        one(
            &["query", "--json", "--now", "2026-12-02"],
            "COUNT FROM today\nTOP 2 wallets\nCOUNT FROM yesterdya\nSEEN 0x1 FROM yesterday\n",
        ),
        one(&["query", "COUNT FROM yesterdya"], ""),
        one(&["query", "SHOW TAGS"], ""),
    ]
}

/// (a) A REPL holds the store; `query` answers through it exactly as it does once the REPL
/// has gone and it opens the store itself.
#[test]
fn query_reads_through_the_repl_holding_the_store() {
    let dir = fixture("through");
    let p = repl(&dir);
    assert!(db(&dir).join(SOCKET).exists(), "the REPL serves");
    let pid = holder_pid(&dir);
    let started = Instant::now();
    let through = answers(&dir);
    let took = started.elapsed();
    // Still held: nothing above opened the store.
    assert_eq!(holder_pid(&dir), pid);
    quit(p);
    assert!(!db(&dir).join(SOCKET).exists(), "socket removed");
    assert!(
        !db(&dir).join(HOLDER_FILE).exists(),
        "holder record removed"
    );
    let local = answers(&dir);
    assert_eq!(through, local);
    // The answers are real ones, and the bad statement failed both ways.
    assert!(local[0].0.contains("250"), "{:?}", local[0]);
    assert_eq!(local[4].2, Some(1));
    assert!(local[4].1.contains("syntax error"), "{:?}", local[4]);
    assert_eq!(local[3].2, Some(1));
    eprintln!(
        "6 query runs through the holder took {:.0} ms",
        took.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// (a) A second REPL on a held store reads through the first, printing what the first prints.
#[test]
fn a_second_repl_reads_through_the_first() {
    let dir = fixture("two-repls");
    let mut first = repl(&dir);
    let mut second = repl(&dir);
    for statement in ["DISTINCT wallets ON chain:b", "COUNT FROM yesterdya"] {
        let mut seen = Vec::new();
        for p in [&mut first, &mut second] {
            p.send_line(statement).expect("send");
            let (before, _) = p.exp_regex(r"\n[^\n]*store\.db> ").expect("prompt");
            // Timings differ; the rest is the same.
            let shown: Vec<String> = before
                .lines()
                .map(|l| l.trim_end_matches('\r').to_string())
                .filter(|l| !(l.starts_with('(') && l.ends_with(" ms)")))
                .collect();
            seen.push(shown);
        }
        assert_eq!(seen[0], seen[1], "{statement}");
    }
    // The second REPL holds nothing: the first's record still stands.
    quit(second);
    assert!(matches!(holder::read(&db(&dir)), HeldBy::Process(_)));
    quit(first);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (b) A holder that serves no queries (a service linking the library: here, this test) is
/// named by pid and command.
#[test]
fn a_holder_without_a_server_is_named() {
    let dir = fixture("named");
    let store = Store::open(db(&dir)).expect("hold");
    let out = run(&dir, &["query", "COUNT"], "");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    let me = std::env::args().next().expect("argv[0]");
    assert!(
        err.contains(&format!("held by pid {} (`{me}", std::process::id())),
        "{err}"
    );
    assert!(err.contains("--wait SECONDS"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Every command that opens the store says the same.
    for args in [&["ingest", "-"][..], &["repair"], &["check"]] {
        let out = run(&dir, args, "");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains(&format!("held by pid {}", std::process::id())),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (c) `--wait 5` gets the store once its holder lets go within that time; `--wait 1` gives up
/// after about a second, naming the holder.
#[test]
fn wait_waits_for_the_holder() {
    let dir = fixture("wait");
    let store = Store::open(db(&dir)).expect("hold");
    let started = Instant::now();
    let out = run(&dir, &["--wait", "1", "query", "COUNT"], "");
    let gave_up = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("held by pid {}", std::process::id())),
        "{err}"
    );
    assert!(err.contains("waited 1 s"), "{err}");
    assert!(
        gave_up >= Duration::from_millis(1000) && gave_up < Duration::from_millis(3000),
        "{gave_up:?}"
    );

    let waiting = bin()
        .arg("--db")
        .arg(db(&dir))
        .args(["--wait", "5", "query", "COUNT"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    drop(store);
    let out = waiting.wait_with_output().expect("wait");
    let took = started.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "600  (exact, event counts, 2 buckets)"
    );
    assert!(took < Duration::from_millis(4000), "{took:?}");
    eprintln!(
        "--wait 1 gave up after {:.2} s; --wait 5 got the store {:.2} s after the test began \
waiting (held for 1.5 s)",
        gave_up.as_secs_f64(),
        took.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// (d) A REPL killed with -9 leaves its record and socket behind: the next `query` opens the
/// store at once, the next REPL serves on a fresh socket, and a stale record under another
/// holder is called stale rather than named as the holder.
#[test]
fn a_killed_holder_neither_blocks_nor_misleads() {
    let dir = fixture("killed");
    let mut p = repl(&dir);
    let pid = holder_pid(&dir);
    p.process_mut().signal(Signal::SIGKILL).expect("kill -9");
    let _ = p.process().wait();
    assert!(db(&dir).join(SOCKET).exists() && db(&dir).join(HOLDER_FILE).exists());
    assert!(matches!(holder::read(&db(&dir)), HeldBy::Stale(h) if h.pid == pid));

    let started = Instant::now();
    let out = run(&dir, &["query", "COUNT"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "600  (exact, event counts, 2 buckets)"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        !db(&dir).join(HOLDER_FILE).exists(),
        "the query's own record is gone"
    );

    // A new REPL replaces the dead one's socket and serves on it.
    std::fs::write(
        db(&dir).join(HOLDER_FILE),
        format!(
            "{{\"pid\":{pid},\"command\":\"sketchdb --db x\",\"since_ms\":0,\"socket\":\"{}\"}}",
            db(&dir).join(SOCKET).display()
        ),
    )
    .expect("put the stale record back");
    let p = repl(&dir);
    let out = run(&dir, &["query", "COUNT"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_ne!(holder_pid(&dir), pid);
    quit(p);

    // A stale record while someone else (writing none) holds the lock: called stale.
    let store = Store::open(db(&dir)).expect("hold");
    std::fs::write(
        db(&dir).join(HOLDER_FILE),
        format!("{{\"pid\":{pid},\"command\":\"sketchdb --db x\",\"since_ms\":0}}"),
    )
    .expect("stale record");
    let out = run(&dir, &["query", "COUNT"], "");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("names pid {pid}")) && err.contains("stale"),
        "{err}"
    );
    assert!(!err.contains("held by pid"), "{err}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `n` JSONL events on 2026-12-03 (a day the fixture has none of).
fn more_events(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"time\":\"2026-12-03T00:00:{:02}Z\",\"wallet\":\"0xnew{i}\",\"chain\":\"a\"}}\n",
                i % 60
            )
        })
        .collect()
}

/// An analyst keeps the REPL open while a cron job ingests: the ingest asks the REPL to let
/// the store go and gets it; the REPL's next statement opens it again (and sees the new
/// events), serving `query` again; a statement typed while an ingest runs waits for it.
#[test]
fn an_ingest_gets_the_store_from_an_open_repl() {
    let dir = fixture("cron");
    let mut p = repl(&dir);
    let repl_pid = holder_pid(&dir);
    let started = Instant::now();
    let out = run(&dir, &["ingest", "-"], &more_events(300));
    let took = started.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("ingested 300 events"),
        "{}",
        text(&out.stdout)
    );
    assert!(!db(&dir).join(SOCKET).exists(), "the REPL stopped serving");

    p.send_line("COUNT").expect("send");
    p.exp_string("the store was let go to pid").expect("note");
    p.exp_string("ingest -`); opening it again").expect("note");
    p.exp_string("900  (exact, event counts, 3 buckets)")
        .expect("the new count");
    p.exp_regex(r"\n[^\n]*store\.db> ").expect("prompt");
    assert_eq!(holder_pid(&dir), repl_pid, "the REPL holds it again");
    let out = run(&dir, &["query", "COUNT"], "");
    assert_eq!(
        text(&out.stdout).trim(),
        "900  (exact, event counts, 3 buckets)"
    );

    // An ingest still reading its input holds the store; the REPL's statement waits for it.
    let mut ingest = bin()
        .arg("--db")
        .arg(db(&dir))
        .args(["ingest", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ingest");
    let mut input = ingest.stdin.take().expect("stdin");
    {
        use std::io::Write;
        input.write_all(more_events(100).as_bytes()).expect("write");
        input.flush().expect("flush");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(holder::read(&db(&dir)), HeldBy::Process(h) if h.command.contains("ingest")) {
        assert!(Instant::now() < deadline, "the ingest never held the store");
        std::thread::sleep(Duration::from_millis(20));
    }
    p.send_line("COUNT").expect("send");
    p.exp_string("waiting for the store: it is held by pid")
        .expect("waiting");
    std::thread::sleep(Duration::from_millis(500));
    drop(input);
    let out = ingest.wait_with_output().expect("ingest");
    assert!(out.status.success(), "{}", text(&out.stderr));
    p.exp_string("1,000  (exact, event counts, 3 buckets)")
        .expect("the count after the second ingest");
    p.exp_regex(r"\n[^\n]*store\.db> ").expect("prompt");
    quit(p);
    eprintln!(
        "an ingest of 300 events into a store a REPL held took {:.0} ms, letting go included",
        took.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A REPL started with a relative `--db` is reached from another working directory, and a
/// relative `--db` reaches a REPL started with an absolute one.
#[test]
fn relative_and_absolute_paths_reach_the_same_holder() {
    let dir = fixture("relative");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    cmd.current_dir(&dir)
        .args(["--db", "store.db"])
        .env("SKETCHDB_HISTORY", dir.join("history"))
        .env("NO_COLOR", "1")
        .env("TERM", "xterm");
    let mut p = spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawn the REPL");
    p.exp_string(PROMPT).expect("first prompt");
    let pid = holder_pid(&dir);
    let record = std::fs::read_to_string(db(&dir).join(HOLDER_FILE)).expect("record");
    assert!(
        record.contains(&db(&dir).join(SOCKET).display().to_string()),
        "{record}"
    );
    let out = run(&dir, &["query", "COUNT"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "600  (exact, event counts, 2 buckets)"
    );
    let out = bin()
        .current_dir(&dir)
        .args(["--db", "store.db", "query", "COUNT"])
        .output()
        .expect("query");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(holder_pid(&dir), pid, "both read through the REPL");
    quit(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two REPLs, the second reading through the first, and a cron ingest: the first lets the
/// store go to the ingest; the second, refused by the first, opens the store itself; the first,
/// finding the second serving it, reads through the second. Then the second goes away and the
/// first holds the store again. Every step is a statement typed, no restart.
#[test]
fn repls_find_the_store_again_when_their_holder_changes() {
    let dir = fixture("repls-change");
    let mut first = repl(&dir);
    let first_pid = holder_pid(&dir);
    let mut second = repl(&dir);
    let out = run(&dir, &["ingest", "-"], &more_events(300));
    assert!(out.status.success(), "{}", text(&out.stderr));

    second.send_line("COUNT").expect("send");
    second
        .exp_string("has let it go to pid")
        .expect("the first let go");
    second.exp_string(PROMPT).expect("a new prompt");
    let second_pid = holder_pid(&dir);
    assert_ne!(second_pid, first_pid, "the second holds the store now");
    second.send_line("COUNT").expect("send");
    second
        .exp_string("900  (exact, event counts, 3 buckets)")
        .expect("the second's own answer");

    first.send_line("COUNT").expect("send");
    first
        .exp_string("reading through it (the statement did not run)")
        .expect("the first finds the second");
    first.exp_string(PROMPT).expect("a new prompt");
    first.send_line("COUNT").expect("send");
    first
        .exp_string("900  (exact, event counts, 3 buckets)")
        .expect("the answer through the second");
    assert_eq!(holder_pid(&dir), second_pid);

    quit(second);
    first.send_line("COUNT").expect("send");
    first
        .exp_regex(r"closed the connection \([^\n]*\); opening the store again")
        .expect("the second went away");
    first.exp_string(PROMPT).expect("a new prompt");
    first.send_line("SHOW TAGS").expect("send");
    first.exp_string("chain:a").expect("answered");
    assert_eq!(holder_pid(&dir), first_pid, "the first holds it again");
    quit(first);
    let _ = std::fs::remove_dir_all(&dir);
}
