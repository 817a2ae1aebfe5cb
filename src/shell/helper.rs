//! The line editor's helper: tab completion, inline hints, input highlighting, and the rule for
//! when a statement continues on the next line.
//!
//! It owns only *how the input line looks and grows*. It never parses a statement for meaning
//! and never touches the store: the words it offers (tag values, bucket dates, the item field)
//! are plain lists the shell hands it through [`Vocabulary`] and refreshes after each
//! statement, so everything here can be tested without a terminal or a store.

use crate::query::meta::HELP;
use crate::query::parser::{is_keyword, KEYWORDS, STATEMENTS};
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::{Hint, Hinter};
use rustyline::validate::Validator;
use rustyline::{Context, Helper};
use std::borrow::Cow;

const BOLD_BLUE: &str = "\x1b[1;34m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// The store-dependent words the helper may offer. Serialized for a REPL that reads through
/// the store's holder ([`super::serve`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Vocabulary {
    /// Tag values as `field:value` (`chain:a`), as `Store::tags` gives them.
    pub tags: Vec<String>,
    /// Bucket labels (`2026-12-01`, or `2026-12-01T05` for hourly stores).
    pub dates: Vec<String>,
    /// The store's item field (`wallet`); completed in its plural form, as the examples write it.
    pub item: String,
}

/// A hint shown in grey after the cursor. `completion` is what Right-arrow inserts: the rest of
/// a word for a literal hint, nothing for a syntax template (`<value>` is not text to insert).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellHint {
    pub display: String,
    pub completion: Option<String>,
}

impl Hint for ShellHint {
    fn display(&self) -> &str {
        &self.display
    }

    fn completion(&self) -> Option<&str> {
        self.completion.as_deref()
    }
}

/// The rustyline helper of the REPL.
pub struct ShellHelper {
    vocabulary: Vocabulary,
    colour: bool,
    /// `(statement keyword, syntax after it)` from the query layer's HELP, so the hints can never
    /// disagree with the documented language.
    templates: Vec<(String, String)>,
    /// The earlier lines of a statement being continued, so that a continuation line starting
    /// with `chain:` after `... AND` on the line before still completes as a tag.
    pending: String,
}

/// What kind of word the cursor is on, judged from the word before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Statement,
    Set,
    TagField,
    Date { from: bool },
    Show,
    SetClock,
    Free,
}

impl ShellHelper {
    pub fn new(vocabulary: Vocabulary, colour: bool) -> Self {
        ShellHelper {
            vocabulary,
            colour,
            templates: templates(),
            pending: String::new(),
        }
    }

    /// Replaces the store words (called after each statement: an ingest elsewhere may have
    /// added tags or buckets).
    pub fn set_vocabulary(&mut self, vocabulary: Vocabulary) {
        self.vocabulary = vocabulary;
    }

    /// Sets the statement's earlier lines, as [`join_lines`] gives them (empty at the main
    /// prompt).
    pub fn set_pending(&mut self, pending: String) {
        self.pending = pending;
    }

    /// The store words in use.
    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocabulary
    }

    fn item_word(&self) -> String {
        let item = if self.vocabulary.item.is_empty() {
            "wallet"
        } else {
            &self.vocabulary.item
        };
        format!("{item}s")
    }

    /// The completion candidates for the word ending at `pos`: where that word starts and the
    /// replacements, in the case the user is typing for keywords.
    pub fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let before = line.get(..pos).unwrap_or(line);
        let start = before
            .char_indices()
            .rev()
            .find(|&(_, c)| c.is_whitespace() || c == '(' || c == ')')
            .map_or(0, |(i, c)| i + c.len_utf8());
        let prefix = &before[start..];
        // Inside a quoted value there is nothing to offer.
        if prefix.starts_with('\'') {
            return (start, Vec::new());
        }
        let slot = if self.pending.is_empty() {
            slot(&before[..start])
        } else {
            slot(&format!("{} {}", self.pending, &before[..start]))
        };
        let keywords = |words: &[&str]| -> Vec<String> {
            words
                .iter()
                .filter(|w| starts_with_ignore_case(w, prefix))
                .map(|w| in_case_of(prefix, w))
                .collect()
        };
        let data = |words: &mut dyn Iterator<Item = &String>| -> Vec<String> {
            words
                .filter(|w| starts_with_ignore_case(w, prefix))
                .cloned()
                .collect()
        };
        let mut out = match slot {
            Slot::Statement => keywords(STATEMENTS),
            Slot::Set => {
                let mut out = if prefix.contains(':') {
                    data(&mut self.vocabulary.tags.iter())
                } else {
                    let fields = self.tag_fields();
                    data(
                        &mut fields
                            .iter()
                            .map(|f| format!("{f}:"))
                            .collect::<Vec<_>>()
                            .iter(),
                    )
                };
                out.extend(keywords(&["NOT"]));
                out
            }
            Slot::TagField => data(&mut self.tag_fields().iter()),
            Slot::Date { from } => {
                let mut out = keywords(if from {
                    &["today", "yesterday", "ALL", "LAST"]
                } else {
                    &["today", "yesterday"]
                });
                out.extend(data(&mut self.vocabulary.dates.iter()));
                out
            }
            Slot::Show => keywords(&["BUCKETS", "TAGS", "SKETCHES"]),
            Slot::SetClock => keywords(&["NOW"]),
            Slot::Free => {
                if prefix.is_empty() {
                    Vec::new()
                } else {
                    let item = self.item_word();
                    let mut out = keywords(&[item.as_str()]);
                    out.extend(keywords(KEYWORDS));
                    out
                }
            }
        };
        out.dedup();
        (start, out)
    }

    /// Tag field names (`chain`), from the tag values.
    fn tag_fields(&self) -> Vec<String> {
        let mut fields: Vec<String> = self
            .vocabulary
            .tags
            .iter()
            .filter_map(|t| t.split_once(':').map(|(f, _)| f.to_string()))
            .collect();
        fields.sort();
        fields.dedup();
        fields
    }

    /// The inline hint for the line with the cursor at `pos`, if any.
    pub fn hint_for(&self, line: &str, pos: usize) -> Option<ShellHint> {
        if pos < line.len() || line.trim().is_empty() {
            return None;
        }
        if line.ends_with(char::is_whitespace) {
            // A bare statement keyword (optionally after EXACT / EXPLAIN): show its syntax.
            let words: Vec<&str> = line.split_whitespace().collect();
            let words: Vec<&str> = words
                .iter()
                .copied()
                .skip_while(|w| {
                    w.eq_ignore_ascii_case("EXACT") || w.eq_ignore_ascii_case("EXPLAIN")
                })
                .collect();
            if let [keyword] = words.as_slice() {
                let (_, syntax) = self.template(keyword)?;
                return (!syntax.is_empty()).then_some(ShellHint {
                    display: syntax,
                    completion: None,
                });
            }
            return None;
        }
        let (start, candidates) = self.candidates(line, pos);
        let prefix = &line[start..pos];
        let [only] = candidates.as_slice() else {
            return None;
        };
        let mut rest = only.get(prefix.len()..)?.to_string();
        // A statement keyword brings the literal words that always follow it
        // (`DIST` → `INCT wallets`), so the hint reads as the start of a real statement.
        if self.pending.is_empty() && slot(&line[..start]) == Slot::Statement {
            if let Some((literal, _)) = self.template(only) {
                if !literal.is_empty() {
                    rest.push(' ');
                    // Keywords follow the user's case; the item field is a name, kept as is.
                    let words: Vec<String> = literal
                        .split(' ')
                        .map(|w| {
                            if is_keyword(w) {
                                in_case_of(prefix, w)
                            } else {
                                w.to_string()
                            }
                        })
                        .collect();
                    rest.push_str(&words.join(" "));
                }
            }
        }
        (!rest.is_empty()).then(|| ShellHint {
            display: rest.clone(),
            completion: Some(rest),
        })
    }

    /// For a statement keyword: the literal words always following it, and the syntax after the
    /// keyword, from HELP, with the store's item field in place of `wallets`.
    fn template(&self, keyword: &str) -> Option<(String, String)> {
        // A keyword with two forms (`COUNT <value> ...`, `COUNT ...`) shows both.
        let forms: Vec<&str> = self
            .templates
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(keyword))
            .map(|(_, syntax)| syntax.as_str())
            .collect();
        if forms.is_empty() {
            return None;
        }
        let syntax = forms.join(" | ").replace("wallets", &self.item_word());
        let literal: Vec<&str> = syntax
            .split_whitespace()
            .take_while(|w| !w.starts_with(['[', '<', '|']))
            .collect();
        Some((literal.join(" "), syntax))
    }

    /// The input line with keywords, tags and quoted values coloured (same display width).
    pub fn paint(&self, line: &str) -> String {
        let mut out = String::with_capacity(line.len() * 2);
        let mut rest = line;
        while let Some(c) = rest.chars().next() {
            if c == '\'' {
                let end = rest[1..].find('\'').map_or(rest.len(), |i| i + 2);
                out.push_str(YELLOW);
                out.push_str(&rest[..end]);
                out.push_str(RESET);
                rest = &rest[end..];
            } else if c.is_whitespace() || "();=".contains(c) {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            } else {
                let end = rest
                    .find(|c: char| c.is_whitespace() || "();='".contains(c))
                    .unwrap_or(rest.len());
                let word = &rest[..end];
                let style = if is_keyword(word) {
                    Some(BOLD_BLUE)
                } else if word.contains(':') {
                    Some(GREEN)
                } else {
                    None
                };
                match style {
                    Some(s) => {
                        out.push_str(s);
                        out.push_str(word);
                        out.push_str(RESET);
                    }
                    None => out.push_str(word),
                }
                rest = &rest[end..];
            }
        }
        out
    }
}

/// Whether the text typed so far needs another line: it ends in `\`, or a parenthesis is still
/// open (outside quotes). A final `;` always ends the statement, balanced or not, so the user
/// can get out and see the parser's error instead of being stuck at the continuation prompt.
pub fn needs_more(text: &str) -> bool {
    let t = text.trim_end();
    if t.ends_with(';') {
        return false;
    }
    if t.ends_with('\\') {
        return true;
    }
    let mut depth = 0i64;
    let mut quoted = false;
    for c in t.chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            _ => {}
        }
    }
    depth > 0
}

/// The lines of one statement as the single line the query layer (and the history) gets: a
/// trailing `\` is dropped and lines are joined by one space.
pub fn join_lines(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| {
            let t = l.trim();
            t.strip_suffix('\\').unwrap_or(t).trim()
        })
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The statements of one finished input, split at each `;` outside a quoted value, trimmed, empty
/// ones left out: `COUNT; SHOW TAGS;` is two statements, run in order.
pub fn statements(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut quoted = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            // A quote inside a value is written twice, which toggles twice.
            '\'' => quoted = !quoted,
            ';' if !quoted => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Judges the slot of the next word from the text before it.
fn slot(before: &str) -> Slot {
    let trimmed = before.trim_end();
    if trimmed.ends_with('(') {
        return Slot::Set;
    }
    let words: Vec<&str> = trimmed.split_whitespace().collect();
    let Some(last) = words.last() else {
        return Slot::Statement;
    };
    match last.to_ascii_uppercase().as_str() {
        "EXACT" | "EXPLAIN" if words.iter().all(|w| is_prefix_keyword(w)) => Slot::Statement,
        "ON" | "AND" | "OR" | "EXCEPT" | "NOT" => Slot::Set,
        "PER" => Slot::TagField,
        "FROM" => Slot::Date { from: true },
        "TO" => Slot::Date { from: false },
        "SHOW" => Slot::Show,
        "SET" => Slot::SetClock,
        _ => Slot::Free,
    }
}

fn is_prefix_keyword(w: &str) -> bool {
    w.eq_ignore_ascii_case("EXACT") || w.eq_ignore_ascii_case("EXPLAIN")
}

fn starts_with_ignore_case(word: &str, prefix: &str) -> bool {
    word.len() >= prefix.len()
        && word
            .get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// `word` in the case of what the user typed: all lower if they typed lower case, all upper if
/// upper; as written (`DISTINCT`, `today`) when they typed no letter yet or mixed case.
fn in_case_of(typed: &str, word: &str) -> String {
    let lower = typed.chars().any(|c| c.is_lowercase());
    let upper = typed.chars().any(|c| c.is_uppercase());
    match (lower, upper) {
        (true, false) => word.to_lowercase(),
        (false, true) => word.to_uppercase(),
        _ => word.to_string(),
    }
}

/// `(keyword, syntax after it)` for each statement line of HELP: the text before the
/// two-space gap that starts the explanation.
fn templates() -> Vec<(String, String)> {
    HELP.lines()
        .filter_map(|l| {
            let syntax = l.split("  ").next()?.trim();
            let (keyword, rest) = syntax.split_once(' ').unwrap_or((syntax, ""));
            STATEMENTS
                .contains(&keyword)
                .then(|| (keyword.to_string(), rest.trim().to_string()))
        })
        .collect()
}

impl Completer for ShellHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, words) = self.candidates(line, pos);
        Ok((
            start,
            words
                .into_iter()
                .map(|w| Pair {
                    display: w.clone(),
                    replacement: w,
                })
                .collect(),
        ))
    }
}

impl Hinter for ShellHelper {
    type Hint = ShellHint;

    fn hint(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> Option<ShellHint> {
        // Unstyled, a hint looks exactly like typed text (a template would read as if the user
        // had typed `<value>`), so hints are only shown when they can be dimmed.
        if self.colour {
            self.hint_for(line, pos)
        } else {
            None
        }
    }
}

impl Highlighter for ShellHelper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        if self.colour {
            Cow::Owned(self.paint(line))
        } else {
            Cow::Borrowed(line)
        }
    }

    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        if self.colour {
            Cow::Owned(format!("{DIM}{hint}{RESET}"))
        } else {
            Cow::Borrowed(hint)
        }
    }

    fn highlight_char(&self, _line: &str, _pos: usize, _kind: CmdKind) -> bool {
        // Any typed character can turn a word into a keyword; lines are short, so repaint.
        self.colour
    }
}

/// Continuation is decided by [`needs_more`] in the shell's loop rather than here, so that each
/// continued line gets its own `...>` prompt (rustyline's own multi-line mode has no
/// continuation prompt); every line is therefore valid as far as rustyline is concerned.
impl Validator for ShellHelper {}

impl Helper for ShellHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper() -> ShellHelper {
        ShellHelper::new(
            Vocabulary {
                tags: vec!["chain:a".into(), "chain:b".into(), "region:eu".into()],
                dates: vec!["2026-11-30".into(), "2026-12-01".into()],
                item: "wallet".into(),
            },
            false,
        )
    }

    fn complete(line: &str) -> (usize, Vec<String>) {
        helper().candidates(line, line.len())
    }

    #[test]
    fn shell_completes_keywords_in_the_typed_case() {
        assert_eq!(complete("DIS"), (0, vec!["DISTINCT".to_string()]));
        assert_eq!(complete("dis"), (0, vec!["distinct".to_string()]));
        assert_eq!(complete("Dis"), (0, vec!["DISTINCT".to_string()]));
        assert_eq!(complete("s").1, vec!["seen", "sample", "show", "set"]);
        assert_eq!(complete("SHOW T"), (5, vec!["TAGS".to_string()]));
        assert_eq!(complete("set n").1, vec!["now"]);
        assert_eq!(complete("EXPLAIN DIST").1, vec!["DISTINCT"]);
        assert_eq!(complete("DISTINCT wal").1, vec!["wallets"]);
        assert_eq!(complete("DISTINCT wallets fr").1, vec!["from"]);
        // A value after SEEN is the user's; nothing to offer for an empty word.
        assert!(complete("SEEN ").1.is_empty());
        assert!(complete("SEEN 'ab").1.is_empty());
    }

    #[test]
    fn shell_completes_tags_after_set_operators() {
        assert_eq!(complete("DISTINCT wallets ON ch").1, vec!["chain:"]);
        assert_eq!(
            complete("DISTINCT wallets ON chain:").1,
            vec!["chain:a", "chain:b"]
        );
        assert_eq!(
            complete("DISTINCT wallets ON chain:a AND chain:b"),
            (32, vec!["chain:b".to_string()])
        );
        assert_eq!(complete("COUNT ON chain:a OR r").1, vec!["region:"]);
        assert_eq!(
            complete("COUNT ON chain:a EXCEPT region:").1,
            vec!["region:eu"]
        );
        assert_eq!(
            complete("COUNT ON NOT (ch"),
            (14, vec!["chain:".to_string()])
        );
        assert_eq!(
            complete("COUNT ON (chain:a"),
            (10, vec!["chain:a".to_string()])
        );
        assert_eq!(complete("COUNT ON n").1, vec!["not"]);
        assert_eq!(complete("SAMPLE 5 PER c").1, vec!["chain"]);
    }

    #[test]
    fn shell_completes_on_a_continuation_line_from_the_lines_before() {
        let mut h = helper();
        assert_eq!(h.candidates("ch", 2).1, Vec::<String>::new());
        h.set_pending("DISTINCT wallets ON chain:a AND".into());
        assert_eq!(h.candidates("ch", 2).1, vec!["chain:"]);
        assert_eq!(h.candidates("chain:a FROM y", 14).1, vec!["yesterday"]);
        h.set_pending(String::new());
        assert_eq!(h.candidates("DIS", 3).1, vec!["DISTINCT"]);
    }

    #[test]
    fn shell_completes_dates_after_from_and_to() {
        assert_eq!(complete("COUNT FROM to").1, vec!["today"]);
        assert_eq!(complete("COUNT FROM TO").1, vec!["TODAY"]);
        assert_eq!(complete("COUNT FROM y").1, vec!["yesterday"]);
        assert_eq!(complete("COUNT FROM 2026-12").1, vec!["2026-12-01"]);
        assert_eq!(
            complete("COUNT FROM 2026-11-30 TO 2026").1,
            vec!["2026-11-30", "2026-12-01"]
        );
        assert_eq!(
            complete("COUNT FROM ").1,
            vec![
                "today",
                "yesterday",
                "ALL",
                "LAST",
                "2026-11-30",
                "2026-12-01"
            ]
        );
        // TO takes a date, not ALL or LAST.
        assert_eq!(
            complete("COUNT FROM 2026-11-30 TO ").1,
            vec!["today", "yesterday", "2026-11-30", "2026-12-01"]
        );
    }

    #[test]
    fn shell_vocabulary_refresh_changes_candidates() {
        let mut h = helper();
        assert!(h.candidates("COUNT ON chain:c", 16).1.is_empty());
        h.set_vocabulary(Vocabulary {
            tags: vec!["chain:c".into()],
            dates: vec![],
            item: "account".into(),
        });
        assert_eq!(h.candidates("COUNT ON chain:c", 16).1, vec!["chain:c"]);
        assert_eq!(h.candidates("TOP 3 acc", 9).1, vec!["accounts"]);
    }

    #[test]
    fn shell_hints_the_rest_of_a_keyword_and_the_syntax() {
        let h = helper();
        let hint = |line: &str| h.hint_for(line, line.len());
        assert_eq!(
            hint("DIST"),
            Some(ShellHint {
                display: "INCT wallets".into(),
                completion: Some("INCT wallets".into())
            })
        );
        assert_eq!(
            hint("dist").and_then(|x| x.completion),
            Some("inct wallets".into())
        );
        assert_eq!(
            hint("SEEN "),
            Some(ShellHint {
                display: "<value> [ON <set>] [<range>]".into(),
                completion: None
            })
        );
        assert_eq!(
            hint("explain TOP ").map(|x| x.display),
            Some("<n> wallets [ON <tag>] [<range>]".into())
        );
        assert_eq!(
            hint("COUNT ").map(|x| x.display),
            Some("<value> [ON <set>] [<range>] | [ON <set>] [<range>]".into())
        );
        assert_eq!(
            hint("COUNT FROM yest").and_then(|x| x.completion),
            Some("erday".into())
        );
        // Ambiguous, complete, or cursor not at the end: no hint.
        assert_eq!(hint("S"), None);
        assert_eq!(hint("COUNT"), None);
        assert_eq!(h.hint_for("DIST", 2), None);
        assert_eq!(hint(""), None);
    }

    #[test]
    fn shell_hints_only_when_they_can_be_dimmed() {
        let history = rustyline::history::MemHistory::new();
        let ctx = Context::new(&history);
        assert_eq!(helper().hint("DIST", 4, &ctx), None);
        let coloured = ShellHelper::new(Vocabulary::default(), true);
        assert_eq!(
            coloured.hint("DIST", 4, &ctx).map(|h| h.display),
            Some("INCT wallets".into())
        );
    }

    #[test]
    fn shell_templates_come_from_help() {
        let t = templates();
        for k in [
            "DISTINCT", "SEEN", "COUNT", "TOP", "SAMPLE", "EXACT", "EXPLAIN", "SHOW",
        ] {
            assert!(t.iter().any(|(kw, _)| kw == k), "no template for {k}");
        }
    }

    #[test]
    fn shell_continues_on_backslash_and_open_parenthesis() {
        assert!(!needs_more("COUNT"));
        assert!(needs_more("DISTINCT wallets \\"));
        assert!(needs_more("DISTINCT wallets ON (chain:a"));
        assert!(needs_more("DISTINCT wallets ON (chain:a\nOR (chain:b)"));
        assert!(!needs_more("DISTINCT wallets ON (chain:a\nOR chain:b)"));
        assert!(!needs_more("DISTINCT wallets ON (chain:a;"));
        assert!(!needs_more("SEEN '('"));
        assert_eq!(
            statements("COUNT; SHOW TAGS;;  SEEN 'a;b' ; SEEN 'it''s;'"),
            ["COUNT", "SHOW TAGS", "SEEN 'a;b'", "SEEN 'it''s;'"]
        );
        assert_eq!(statements(" ; "), Vec::<&str>::new());
        assert_eq!(
            join_lines(&["DISTINCT wallets \\".into(), "  ON chain:a".into()]),
            "DISTINCT wallets ON chain:a"
        );
        assert_eq!(
            join_lines(&["COUNT ON (chain:a".into(), "".into(), "OR chain:b)".into()]),
            "COUNT ON (chain:a OR chain:b)"
        );
    }

    #[test]
    fn shell_paints_keywords_only_with_colour() {
        let plain = helper();
        assert_eq!(plain.highlight("COUNT ON chain:a", 0), "COUNT ON chain:a");
        assert_eq!(plain.highlight_hint("INCT"), "INCT");
        let coloured = ShellHelper::new(Vocabulary::default(), true);
        let painted = coloured.paint("count ON chain:a 'x y'");
        assert!(painted.contains("\x1b[1;34mcount\x1b[0m"), "{painted:?}");
        assert!(painted.contains("\x1b[32mchain:a\x1b[0m"), "{painted:?}");
        assert!(painted.contains("\x1b[33m'x y'\x1b[0m"), "{painted:?}");
        // Stripping the escapes gives back the line: the display width is unchanged.
        let stripped = strip(&painted);
        assert_eq!(stripped, "count ON chain:a 'x y'");
    }

    fn strip(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for d in chars.by_ref() {
                    if d == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
