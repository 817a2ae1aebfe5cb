//! How the shell prints what the query layer returned: answers (human form with optional
//! styling, or JSON lines), errors and timings. It restyles the query layer's own text; it never
//! computes or changes a value, a bound or a method.

use crate::query::{Answer, QueryError, Value};
use std::time::Duration;

const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// The human form of an answer: `Answer`'s Display, with (when `colour`) the value bold, the
/// method and bounds dim and the notes yellow.
pub fn human(answer: &Answer, colour: bool) -> String {
    // Lists end in a newline of their own; the shell adds one per answer.
    let text = answer.to_string().trim_end_matches('\n').to_string();
    if !colour {
        return text;
    }
    let (main, notes) = match text.find("\n  note: ") {
        Some(i) => (&text[..i], &text[i..]),
        None => (text.as_str(), ""),
    };
    let mut out = match &answer.value {
        Value::Number(_) | Value::List(_) => {
            let (first, rest) = main.split_once('\n').unwrap_or((main, ""));
            let mut s = split_styled(first, first.find("  ("), true);
            if !rest.is_empty() {
                s.push('\n');
                s.push_str(rest);
            }
            s
        }
        // Long texts (HELP, INFO) stay plain; a one-word answer (`no`, `maybe`) is the value.
        Value::Text(_) => split_styled(main, main.rfind("  ("), !main.contains('\n')),
    };
    for line in notes.split('\n').filter(|l| !l.is_empty()) {
        out.push_str(&format!("\n{YELLOW}{line}{RESET}"));
    }
    out
}

fn split_styled(text: &str, at: Option<usize>, bold_head: bool) -> String {
    let (head, tail) = at.map_or((text, ""), |i| text.split_at(i));
    let head = if bold_head {
        format!("{BOLD}{head}{RESET}")
    } else {
        head.to_string()
    };
    if tail.is_empty() {
        head
    } else {
        format!("{head}{DIM}{tail}{RESET}")
    }
}

/// The machine form: exactly what `sketchdb query --json` prints for the same answer (same
/// keys in the same order, same numbers), so a line copied from the REPL and one from a script
/// compare equal. The timing is left out for that reason.
pub fn json(answer: &Answer) -> String {
    answer.to_json()
}

/// A query stopped by Ctrl-C, and when.
pub fn cancelled(took: Duration, colour: bool) -> String {
    let text = format!("cancelled {}", timing(took, false));
    if colour {
        format!("{YELLOW}{text}{RESET}")
    } else {
        text
    }
}

/// An error: a syntax error as the statement with a caret under the offending place and then the
/// message; anything else as one line.
pub fn error(e: &QueryError, colour: bool) -> String {
    let message = one_line(&e.to_string());
    let message = if colour {
        format!("{RED}error: {message}{RESET}")
    } else {
        format!("error: {message}")
    };
    match e {
        QueryError::Syntax(s) => format!("{}\n{message}", s.caret()),
        _ => message,
    }
}

/// An error in JSON-lines mode, shaped like the CLI's `query --json` errors: `kind` first, as
/// in an answer, then the message (the CLI adds the input's `line` after it).
pub fn json_error(e: &QueryError) -> String {
    let message = serde_json::Value::String(one_line(&e.to_string()));
    format!("{{\"kind\":\"error\",\"error\":{message}}}")
}

/// `(0.14 ms)`, or `(1.52 s)` past a second.
pub fn timing(took: Duration, colour: bool) -> String {
    let ms = millis(took);
    let text = if ms < 1000.0 {
        format!("({ms:.2} ms)")
    } else {
        format!("({:.2} s)", ms / 1000.0)
    };
    if colour {
        format!("{DIM}{text}{RESET}")
    } else {
        text
    }
}

/// Text in the shell's dim style (warnings about the shell itself, not about answers).
pub fn dim(text: &str, colour: bool) -> String {
    if colour {
        format!("{DIM}{text}{RESET}")
    } else {
        text.to_string()
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::parse;

    fn answer(value: Value, exact: bool, notes: &[&str]) -> Answer {
        Answer {
            kind: crate::query::Kind::Distinct,
            value,
            lower: Some(98_880.0),
            upper: Some(102_150.0),
            false_positive_rate: None,
            method: "hll".into(),
            exact,
            buckets: 1,
            range: None,
            notes: notes.iter().map(|s| s.to_string()).collect(),
            detail: "hll p=14".into(),
            bytes_read: 0,
            confidence: 0.95,
        }
    }

    #[test]
    fn shell_human_form_is_display_without_colour() {
        let a = answer(Value::Number(100_512.0), false, &["a note"]);
        assert_eq!(human(&a, false), a.to_string());
        assert!(!human(&a, false).contains('\x1b'));
        let list = answer(
            Value::List(vec![crate::query::Row::of(serde_json::json!("chain:a"))]),
            true,
            &[],
        );
        assert_eq!(human(&list, false), list.to_string().trim_end());
    }

    #[test]
    fn shell_colour_styles_value_bounds_and_notes() {
        let a = answer(Value::Number(100_512.0), false, &["a note"]);
        assert_eq!(
            human(&a, true),
            "\x1b[1m≈ 100,512\x1b[0m\x1b[2m  (95% CI 98,880 – 102,150, hll p=14, 1 bucket)\x1b[0m\n\x1b[33m  note: a note\x1b[0m"
        );
        let seen = answer(Value::Text("maybe".into()), false, &[]);
        assert!(human(&seen, true).starts_with("\x1b[1mmaybe\x1b[0m"));
    }

    #[test]
    fn shell_errors_show_the_caret_then_one_line() {
        let e = QueryError::Syntax(parse("COUNT FROM yesterdya").expect_err("typo"));
        let text = error(&e, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "COUNT FROM yesterdya");
        assert_eq!(lines[1], "           ^");
        assert!(lines[2].starts_with("error: syntax error"), "{text}");
        assert_eq!(lines.len(), 3);
        assert!(!text.contains('\x1b'));
        assert!(error(&e, true).contains("\x1b[31merror:"));
        let j: serde_json::Value = serde_json::from_str(&json_error(&e)).expect("json");
        assert_eq!(j["kind"], "error");
    }

    #[test]
    fn shell_timing_and_json_lines() {
        assert_eq!(timing(Duration::from_micros(140), false), "(0.14 ms)");
        assert_eq!(timing(Duration::from_millis(1520), false), "(1.52 s)");
        assert_eq!(
            cancelled(Duration::from_millis(1520), false),
            "cancelled (1.52 s)"
        );
        let a = answer(Value::Number(3.0), true, &[]);
        assert_eq!(json(&a), a.to_json());
    }
}
