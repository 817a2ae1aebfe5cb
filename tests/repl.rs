//! The REPL as a person uses it: the real binary in a pseudo-terminal, driven by keystrokes.
//! Each test builds its own small store in a fresh temp dir.

use rexpect::process::WaitStatus;
use rexpect::session::{spawn_command, PtySession};
use sketchdb::store::{Config, Event, Store};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TIMEOUT_MS: u64 = 10_000;
const DAY: i64 = 86_400_000;
/// 2026-12-01T00:00:00Z.
const DEC_1: i64 = 1_796_083_200_000;
const PROMPT: &str = "store.db> ";

/// A fresh directory holding `store.db` with three events: two on chain:a (one each day), one
/// on chain:b.
fn fixture(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-repl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store = Store::create(dir.join("store.db"), Config::default()).expect("create store");
    for e in [
        Event::new(DEC_1 + 3_600_000, "0xa", &[("chain", "a")]),
        Event::new(DEC_1 + 7_200_000, "0xb", &[("chain", "b")]),
        Event::new(DEC_1 - DAY + 3_600_000, "0xa", &[("chain", "a")]),
    ] {
        store.ingest(&e).expect("ingest");
    }
    store.flush().expect("flush");
    dir
}

fn spawn(dir: &Path, envs: &[(&str, &str)]) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sketchdb"));
    cmd.arg("--db")
        .arg(dir.join("store.db"))
        .env("SKETCHDB_HISTORY", dir.join("history"))
        .env("NO_COLOR", "1")
        .env("TERM", "xterm");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut p = spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawn the binary");
    p.exp_string(PROMPT).expect("first prompt");
    p
}

/// Waits for a fresh prompt and returns what came before it. The editor redraws the prompt
/// with each key while a line is edited, but only a finished line is followed by a newline, so
/// this cannot match a redraw; keys sent before readline returns may be dropped with the line.
fn prompt(p: &mut PtySession, what: &str) -> String {
    let (before, prompt) = p
        .exp_regex(r"\n[^\n]*store\.db> ")
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    before + &prompt
}

/// Sends Ctrl-D at an empty prompt and checks a clean exit with status 0.
fn quit(mut p: PtySession) -> String {
    p.send_control('d').expect("ctrl-d");
    let rest = p.exp_eof().expect("exit on ctrl-d");
    match p.process().wait() {
        Ok(WaitStatus::Exited(_, code)) => assert_eq!(code, 0, "exit status"),
        other => panic!("unexpected end: {other:?}"),
    }
    rest
}

/// Checks what the user saw (the pieces a test read, collected) for colour escapes.
fn no_colour(seen: &str) {
    // SGR ("\x1b[...m") sequences are colour and style; the line editor's cursor moves are not.
    let mut rest = seen;
    while let Some(i) = rest.find("\x1b[") {
        let tail = &rest[i + 2..];
        let end = tail
            .find(|c: char| !(c.is_ascii_digit() || c == ';'))
            .unwrap_or(tail.len());
        assert_ne!(
            tail.as_bytes().get(end),
            Some(&b'm'),
            "colour escape in output: {seen:?}"
        );
        rest = &tail[end..];
    }
}

#[test]
fn repl_session_answers_completes_continues_and_recovers() {
    let dir = fixture("session");
    let mut p = spawn(&dir, &[]);
    let mut seen = String::new();

    // A statement and its exact answer, then its timing.
    p.send_line("COUNT").expect("send");
    seen += &p
        .exp_string("3  (exact, event counts, 2 buckets)")
        .expect("count answer");
    let (before, timing) = p.exp_regex(r"\(\d+\.\d\d ms\)").expect("timing");
    seen += &before;
    seen += &timing;
    seen += &prompt(&mut p, "prompt after COUNT");

    // A statement over two lines: the open parenthesis continues it.
    p.send_line("DISTINCT wallets ON (chain:a").expect("send");
    seen += &p.exp_string("...> ").expect("continuation prompt");
    p.send_line("OR chain:b)").expect("send");
    // (rexpect reads bytes one by one as chars, so needles stay ASCII: no "≈" or "–".)
    seen += &p.exp_string(" 2  (95% CI 2 ").expect("distinct answer");
    seen += &p.exp_string(" 2, hll p=14, ").expect("distinct bounds");
    seen += &prompt(&mut p, "prompt");

    // A backslash continues too.
    p.send_line("COUNT \\").expect("send");
    seen += &p.exp_string("...> ").expect("continuation prompt");
    p.send_line("ON chain:a").expect("send");
    seen += &p.exp_string("2  (exact").expect("count on chain:a");
    seen += &prompt(&mut p, "prompt");

    // Tab completes a tag field (the grey hint alone would not be entered: Enter runs what
    // was typed, so a right answer proves the completion).
    p.send("COUNT ON ch\tb\r").expect("send");
    p.flush().expect("flush");
    seen += &p
        .exp_string("1  (exact")
        .expect("count on the completed chain:b");
    seen += &prompt(&mut p, "prompt");
    p.send("DISTINCT wallets ON ch\t").expect("send");
    p.flush().expect("flush");
    seen += &p.exp_string("chain:").expect("completed tag field echoed");

    // Ctrl-C drops the half-typed statement and gives the prompt back.
    p.send_control('c').expect("ctrl-c");
    seen += &prompt(&mut p, "prompt after ctrl-c");
    p.send_line("SHOW TAGS").expect("send");
    seen += &p.exp_string("2 rows").expect("show tags after ctrl-c");
    seen += &p.exp_string("chain:b").expect("tag row");
    seen += &prompt(&mut p, "prompt");

    // HELP: the language with examples, and the shell's own keys.
    p.send_line("HELP").expect("send");
    seen += &p
        .exp_string("examples: DISTINCT wallets ON chain:a AND chain:b")
        .expect("help example");
    seen += &p.exp_string("Ctrl-D").expect("shell help");
    seen += &prompt(&mut p, "prompt");

    // A syntax error shows the caret and the message, and the session goes on.
    p.send_line("COUNT FROM yesterdya").expect("send");
    seen += &p
        .exp_string("COUNT FROM yesterdya\r\n           ^\r\nerror: syntax error")
        .expect("caret");
    seen += &p.exp_string("did you mean YESTERDAY?").expect("suggestion");
    seen += &prompt(&mut p, "prompt after error");

    // The clock set by SET NOW persists to the next statement.
    p.send_line("SET NOW = 2026-12-01").expect("send");
    seen += &prompt(&mut p, "prompt");
    // Tab completes a keyword in the case it was typed.
    p.send("count from yest\t\r").expect("send");
    p.flush().expect("flush");
    seen += &p
        .exp_string("count from yesterday")
        .expect("completion echoed");
    seen += &p.exp_string("1  (exact").expect("yesterday = Nov 30");
    seen += &prompt(&mut p, "prompt");
    // The last statement, for the next run's history (one that needs no clock).
    p.send_line("SHOW BUCKETS").expect("send");
    seen += &p.exp_string("2026-11-30").expect("bucket list");
    seen += &prompt(&mut p, "prompt");

    seen += &quit(p);
    no_colour(&seen);

    // A second run finds the history: Up brings back the last statement.
    let mut p = spawn(&dir, &[]);
    p.send("\x1b[A").expect("up arrow");
    p.flush().expect("flush");
    p.exp_string("SHOW BUCKETS").expect("history recalled");
    p.send("\r").expect("enter");
    p.flush().expect("flush");
    p.exp_string("2 rows").expect("recalled statement runs");
    prompt(&mut p, "prompt");
    p.send_line("exit").expect("exit");
    p.exp_eof().expect("exit command ends the session");

    let history = std::fs::read_to_string(dir.join("history")).expect("history file");
    for statement in [
        "COUNT",
        "DISTINCT wallets ON (chain:a OR chain:b)",
        "COUNT ON chain:a",
        "COUNT ON chain:b",
        "COUNT FROM yesterdya",
        "count from yesterday",
        "SHOW BUCKETS",
    ] {
        assert!(
            history.lines().any(|l| l == statement),
            "{statement:?} not in history:\n{history}"
        );
    }
    assert!(!history.contains("exit"), "{history}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn repl_unwritable_history_warns_once_and_goes_on() {
    let dir = fixture("nohistory");
    // A file in a directory that does not exist cannot be written.
    let history = dir
        .join("no-such-dir")
        .join("history")
        .to_string_lossy()
        .into_owned();
    let mut p = spawn(&dir, &[("SKETCHDB_HISTORY", &history)]);
    p.send_line("COUNT").expect("send");
    p.exp_string("warning: ").expect("one warning");
    prompt(&mut p, "prompt");
    p.send_line("COUNT ON chain:a").expect("send");
    let (between, _) = p.exp_regex(r"2  \(exact").expect("answer");
    assert!(!between.contains("warning"), "warned twice: {between:?}");
    prompt(&mut p, "prompt");
    quit(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `sketchdb query --json` prints for `statement` on the fixture (the REPL must not be
/// running on it: the store takes one process at a time).
fn cli_json(dir: &Path, statement: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sketchdb"))
        .arg("--db")
        .arg(dir.join("store.db"))
        .args(["query", "--json", statement])
        .output()
        .expect("run sketchdb query");
    assert!(out.status.success(), "{statement}: {out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim_end()
        .to_string()
}

/// What `sketchdb query --json` prints for statements given on its standard input (errors
/// included: it goes on past them).
fn cli_json_lines(dir: &Path, input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sketchdb"))
        .arg("--db")
        .arg(dir.join("store.db"))
        .args(["query", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sketchdb query");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim_end()
        .to_string()
}

#[test]
fn repl_json_lines_are_the_query_json_form_and_a_dumb_terminal_carries_no_escapes() {
    let dir = fixture("json");
    // Statements whose answers do not depend on the clock or on chance (the one event of
    // 2026-11-30 is the only row SAMPLE can give).
    let statements = [
        "COUNT",
        "DISTINCT wallets FROM ALL",
        "TOP 2 wallets",
        "SAMPLE 1 FROM 2026-11-30 TO 2026-11-30",
        "SHOW TAGS",
        "SEEN 0xa FROM 2026-12-01",
    ];
    let expected: Vec<String> = statements.iter().map(|s| cli_json(&dir, s)).collect();
    // TERM=dumb: no line editing, so not even cursor movement; output must be escape-free.
    let mut p = spawn(&dir, &[("TERM", "dumb")]);
    let mut seen = String::new();
    p.send_line("\\json").expect("send");
    seen += &p.exp_string("JSON answers on").expect("toggle");
    for (statement, want) in statements.iter().zip(&expected) {
        p.send_line(statement).expect("send");
        // The line as `query --json` prints it, byte for byte (keys in its order, its numbers).
        let (before, line) = p
            .exp_regex(r#"\{"kind":[^\r\n]*\}"#)
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        seen += &before;
        seen += &line;
        assert_eq!(&line, want, "{statement}");
    }
    p.send_line("COUNT FROM nowhere").expect("send");
    let (before, line) = p
        .exp_regex(r#"\{"kind":"error"[^\r\n]*\}"#)
        .expect("json error");
    seen += &before;
    seen += &line;
    seen += &prompt(&mut p, "prompt");
    seen += &quit(p);
    assert!(!seen.contains('\x1b'), "escape in output: {seen:?}");
    // The error is the CLI's error line for the same statement, less the input line number
    // that only a script of statements has.
    let cli = cli_json_lines(&dir, "COUNT FROM nowhere\n");
    assert_eq!(
        cli.strip_suffix(",\"line\":1}"),
        line.strip_suffix('}'),
        "{cli}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several statements on one line, a paste of several lines (bracketed, as a terminal sends
/// it), and lines typed ahead in one burst each run, in order, each with its answer.
#[test]
fn repl_runs_every_statement_of_a_line_a_paste_and_typed_ahead_lines_in_order() {
    let dir = fixture("paste");
    let mut p = spawn(&dir, &[]);

    // One line, three statements, with and without `;`.
    p.send_line("COUNT ON chain:a; COUNT ON chain:b;COUNT")
        .expect("send");
    p.exp_string("2  (exact").expect("first: chain:a");
    p.exp_string("1  (exact").expect("second: chain:b");
    p.exp_string("3  (exact").expect("third: all");
    prompt(&mut p, "prompt after three");

    // A bracketed paste of three lines (the last without `;`), then Enter.
    p.send("\x1b[200~COUNT ON chain:b;\nSHOW TAGS\nCOUNT ON chain:a\n\x1b[201~")
        .expect("paste");
    p.send("\r").expect("enter");
    p.flush().expect("flush");
    p.exp_string("1  (exact").expect("pasted: chain:b");
    p.exp_string("2 rows").expect("pasted: show tags");
    p.exp_string("2  (exact").expect("pasted: chain:a");
    prompt(&mut p, "prompt after the paste");

    // Lines typed ahead in one burst (a paste without bracketed paste, or keys typed while a
    // query ran): the editor reads them together; none may be dropped.
    p.send("COUNT ON chain:b\rDISTINCT wallets ON chain:a FROM ALL\rCOUNT\r")
        .expect("burst");
    p.flush().expect("flush");
    p.exp_string("1  (exact").expect("typed ahead: chain:b");
    p.exp_string("1  (95% CI")
        .expect("typed ahead: distinct on chain:a");
    p.exp_string("3  (exact").expect("typed ahead: count");
    prompt(&mut p, "prompt after the burst");
    quit(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The caret sits under the offending character as the terminal shows the line: after a CJK
/// value (two columns a character) and after a tab (the caret line repeats it).
#[test]
fn repl_caret_sits_under_the_error_after_wide_characters_and_tabs() {
    let dir = fixture("caret");
    let mut p = spawn(&dir, &[]);
    // (rexpect reads bytes as chars, so the needles are the ASCII parts.)
    p.send_line("SEEN '数字' FORM today").expect("send");
    // "SEEN '数字' " is 12 columns: S E E N, space, quote, 2 + 2, quote, space.
    p.exp_string(" FORM today\r\n            ^\r\nerror: syntax error")
        .expect("caret after CJK");
    prompt(&mut p, "prompt");
    // A tab typed at the prompt asks for completion, so it arrives in a (bracketed) paste.
    p.send("\x1b[200~SEEN\t0xa FORM today\x1b[201~")
        .expect("paste");
    p.send("\r").expect("enter");
    p.flush().expect("flush");
    p.exp_string("FORM today\r\n    \t    ^\r\nerror: syntax error")
        .expect("caret after a tab");
    prompt(&mut p, "prompt");
    quit(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store big enough that an exact distinct count scans for seconds: `n` events from `n`
/// wallets over 30 days.
fn big_fixture(name: &str, n: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-repl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store = Store::create(dir.join("store.db"), Config::default()).expect("create store");
    let mut batch = Vec::with_capacity(16_384);
    for i in 0..n {
        let t = DEC_1 + (i as i64 * 7_919) % (30 * DAY);
        batch.push(Event::new(
            t,
            sketchdb::gen::wallet_address(5, i),
            &[("chain", "a")],
        ));
        if batch.len() == batch.capacity() {
            store.ingest_batch(&batch).expect("ingest");
            batch.clear();
        }
    }
    store.ingest_batch(&batch).expect("ingest");
    store.flush().expect("flush");
    dir
}

/// `(1.52 s)` or `(820.13 ms)` as a duration.
fn timing_of(text: &str) -> Duration {
    let (number, unit) = text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split_once(' ')
        .unwrap_or_else(|| panic!("not a timing: {text}"));
    let x: f64 = number.parse().expect("timing number");
    Duration::from_secs_f64(if unit == "s" { x } else { x / 1000.0 })
}

/// Ctrl-C while a long query runs cancels the query, not the REPL: "cancelled" comes back
/// within a fraction of a second, and the next statement runs.
#[test]
fn repl_ctrl_c_cancels_a_running_query_and_the_session_goes_on() {
    let dir = big_fixture("cancel", 4_000_000);
    let mut p = spawn(&dir, &[]);
    let statement = "EXACT DISTINCT wallets FROM ALL";

    // Once to its end, for scale.
    p.send_line(statement).expect("send");
    p.exp_string("4,000,000  (exact").expect("the full answer");
    let (_, took) = p.exp_regex(r"\(\d+\.\d\d m?s\)").expect("timing");
    let whole = timing_of(&took);
    assert!(
        whole >= Duration::from_millis(800),
        "the scan took only {whole:?}: too short to tell a cancel from the end"
    );
    prompt(&mut p, "prompt after the full query");

    // Again, and Ctrl-C an eighth of the way in.
    p.send_line(statement).expect("send");
    std::thread::sleep(whole / 8);
    let pressed = Instant::now();
    p.send_control('c').expect("ctrl-c");
    let (_, took) = p
        .exp_regex(r"cancelled \(\d+\.\d\d m?s\)")
        .expect("cancelled, not ended");
    let seen_after = pressed.elapsed();
    let ran = timing_of(took.trim_start_matches("cancelled "));
    assert!(
        ran < whole / 2,
        "ran {ran:?} of a {whole:?} query before stopping"
    );
    // The scan stops within a log block; what is left is the pty and the test's own reading.
    assert!(
        seen_after < Duration::from_millis(500),
        "'cancelled' came {seen_after:?} after Ctrl-C"
    );
    prompt(&mut p, "prompt after cancel");

    // The session goes on: the next statements answer.
    p.send_line("COUNT").expect("send");
    p.exp_string("4,000,000  (exact")
        .expect("count after cancel");
    prompt(&mut p, "prompt");
    quit(p);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn repl_colour_styles_the_value_keywords_and_errors() {
    let dir = fixture("colour");
    // An empty NO_COLOR counts as unset, so on a terminal the binary turns colour on.
    let mut p = spawn(&dir, &[("NO_COLOR", "")]);
    p.send_line("COUNT").expect("send");
    // The typed keyword is highlighted, the value bold, the method dim.
    p.exp_string("\x1b[1;34mCOUNT\x1b[0m")
        .expect("keyword highlighted");
    p.exp_string("\x1b[1m3\x1b[0m\x1b[2m  (exact, event counts, 2 buckets)\x1b[0m")
        .expect("styled answer");
    prompt(&mut p, "prompt");
    p.send_line("COUNT FROM nowhere").expect("send");
    p.exp_string("\x1b[31merror: ").expect("red error");
    prompt(&mut p, "prompt");
    quit(p);
    let _ = std::fs::remove_dir_all(&dir);
}
