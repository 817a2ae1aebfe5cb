//! The REPL as a person uses it: the real binary in a pseudo-terminal, driven by keystrokes.
//! Each test builds its own small store in a fresh temp dir.

use rexpect::process::WaitStatus;
use rexpect::session::{spawn_command, PtySession};
use sketchdb::store::{Config, Event, Store};
use std::path::{Path, PathBuf};
use std::process::Command;

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

#[test]
fn repl_json_lines_and_a_dumb_terminal_carry_no_escapes() {
    let dir = fixture("json");
    // TERM=dumb: no line editing, so not even cursor movement; output must be escape-free.
    let mut p = spawn(&dir, &[("TERM", "dumb")]);
    let mut seen = String::new();
    p.send_line("\\json").expect("send");
    seen += &p.exp_string("JSON answers on").expect("toggle");
    p.send_line("COUNT").expect("send");
    let (before, line) = p
        .exp_regex(r#"\{"buckets":2,"elapsed_ms":[0-9.]+,"exact":true,"kind":"count"[^\r\n]*\}"#)
        .expect("json answer");
    seen += &before;
    seen += &line;
    let json: serde_json::Value = serde_json::from_str(&line).expect("valid json");
    assert_eq!(json["value"], 3.0);
    p.send_line("COUNT FROM nowhere").expect("send");
    seen += &p.exp_string(r#"{"error":"#).expect("json error");
    seen += &prompt(&mut p, "prompt");
    seen += &quit(p);
    assert!(!seen.contains('\x1b'), "escape in output: {seen:?}");
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
