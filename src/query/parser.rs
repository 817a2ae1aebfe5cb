//! Text to [`Statement`]: a recursive-descent parser over nom 8 token parsers.
//!
//! nom recognises the tokens (words, numbers, quoted strings, dates); the structure is plain
//! recursive descent so each failure can say, at a byte offset, what it found and what it
//! expected, and suggest the keyword a misspelling was probably meant to be.
//!
//! No text may exhaust the stack or the clock: recursion happens only where the statement nests
//! (a parenthesised group, `EXACT`, `EXPLAIN`), and a counter refuses nesting deeper than
//! [`MAX_DEPTH`], like sqlparser-rs's recursion limit; chains of one operator are read in a loop
//! into one n-ary node, so their length costs time in proportion and no stack at all; and a
//! statement longer than [`MAX_STATEMENT_BYTES`] is refused before it is read.

use super::ast::{Date, Range, SetExpr, Statement, Unit};
use nom::bytes::complete::{tag, take_while, take_while1};
use nom::character::complete::{digit1, multispace0};
use nom::IResult;

/// A syntax error: where, what was found, what would have been accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("syntax error at byte {offset}: expected {expected}, found {found}{}", suggestion.as_ref().map(|s| format!(" (did you mean {s}?)")).unwrap_or_default())]
pub struct SyntaxError {
    /// Byte offset into the statement.
    pub offset: usize,
    pub found: String,
    pub expected: String,
    pub suggestion: Option<String>,
    /// The statement as given, for [`SyntaxError::caret`].
    pub statement: String,
}

impl SyntaxError {
    /// The statement with a caret under the offending character, as a terminal shows them: the
    /// caret line is padded by display width (a CJK character or an emoji takes two columns, a
    /// combining mark none) and repeats each tab, so it reaches the same tab stop. For a
    /// statement over several lines the caret goes under the line that holds the offset.
    pub fn caret(&self) -> String {
        use unicode_width::UnicodeWidthStr;
        let s = &self.statement;
        let mut at = self.offset.min(s.len());
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        let line_start = s[..at].rfind('\n').map_or(0, |i| i + 1);
        let line_end = s[at..].find('\n').map_or(s.len(), |i| at + i);
        let pad: Vec<String> = s[line_start..at]
            .split('\t')
            .map(|part| " ".repeat(part.width()))
            .collect();
        format!("{}\n{}^{}", &s[..line_end], pad.join("\t"), &s[line_end..])
    }
}

/// Every keyword of the language, upper case (the shell completes and highlights these).
pub const KEYWORDS: &[&str] = &[
    "DISTINCT",
    "SEEN",
    "COUNT",
    "TOP",
    "SAMPLE",
    "EXACT",
    "EXPLAIN",
    "SHOW",
    "BUCKETS",
    "TAGS",
    "SKETCHES",
    "INFO",
    "HELP",
    "SET",
    "NOW",
    "ON",
    "FROM",
    "TO",
    "ALL",
    "TODAY",
    "YESTERDAY",
    "LAST",
    "DAYS",
    "HOURS",
    "DAY",
    "HOUR",
    "AND",
    "OR",
    "EXCEPT",
    "NOT",
    "PER",
];

/// The keywords a statement can start with.
pub const STATEMENTS: &[&str] = &[
    "DISTINCT", "SEEN", "COUNT", "TOP", "SAMPLE", "EXACT", "EXPLAIN", "SHOW", "INFO", "HELP", "SET",
];

/// Whether a word is a keyword of the language (any case); such values print quoted.
pub fn is_keyword(word: &str) -> bool {
    KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// The largest number accepted for `TOP`, `SAMPLE` and `LAST`.
pub const MAX_NUMBER: u64 = 1_000_000_000;

/// How deeply a statement may nest: each `(` (so each `NOT (`) and each `EXACT` or `EXPLAIN`
/// opens a level. Far beyond any query a person writes, and low enough that parsing, planning,
/// printing and dropping a statement this deep fits a 256 KiB thread stack.
pub const MAX_DEPTH: usize = 64;

/// The longest statement accepted, in bytes (256 KiB): an `OR` of a few thousand 40-hex-digit
/// tag values fits; the work a set expression costs grows in proportion to its length, so this
/// bounds it.
pub const MAX_STATEMENT_BYTES: usize = 256 * 1024;

/// The longest offending word quoted whole in an error; longer ones are cut, so an error about
/// a 100 KB word stays one readable line.
const MAX_FOUND_CHARS: usize = 40;

type R<'a, T> = IResult<&'a str, T>;

fn word_char(c: char) -> bool {
    !c.is_whitespace() && !"();'=".contains(c)
}

fn bare_word(i: &str) -> R<'_, &str> {
    take_while1(word_char)(i)
}

fn ident(i: &str) -> R<'_, &str> {
    take_while1(|c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')(i)
}

/// `'...'` with `''` for a quote inside.
fn quoted(i: &str) -> R<'_, String> {
    let (mut rest, _) = tag("'")(i)?;
    let mut out = String::new();
    loop {
        let (r, chunk) = take_while(|c| c != '\'')(rest)?;
        out.push_str(chunk);
        let (r, _) = tag("'")(r)?;
        match tag::<_, _, nom::error::Error<&str>>("'")(r) {
            Ok((r2, _)) => {
                out.push('\'');
                rest = r2;
            }
            Err(_) => return Ok((r, out)),
        }
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest of `options` to `word`, if it is close enough to be a likely misspelling.
fn suggest(word: &str, options: &[&str]) -> Option<String> {
    // Only a word within two letters of a keyword's length can be within distance two, so a
    // long word costs no edit-distance table.
    let longest = options.iter().map(|o| o.len()).max().unwrap_or(0);
    if word.len() > 4 * (longest + 2) || word.chars().count() > longest + 2 {
        return None;
    }
    let upper = word.to_ascii_uppercase();
    options
        .iter()
        .map(|o| (levenshtein(&upper, o), *o))
        .filter(|&(d, o)| d > 0 && d <= 2 && o.len() > d + 1)
        .min_by_key(|&(d, _)| d)
        .map(|(_, o)| o.to_string())
}

/// `word`, or its first [`MAX_FOUND_CHARS`] characters and its length, quoted or not.
fn clip(word: &str, quote: &str) -> String {
    match word.char_indices().nth(MAX_FOUND_CHARS) {
        Some((cut, _)) => format!("{quote}{}…{quote} ({} bytes)", &word[..cut], word.len()),
        None => format!("{quote}{word}{quote}"),
    }
}

fn quote_found(word: &str) -> String {
    clip(word, "'")
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// Levels of nesting open at `pos` (see [`MAX_DEPTH`]).
    depth: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn advance_to(&mut self, rest: &'a str) {
        self.pos = self.src.len() - rest.len();
    }

    fn ws(&mut self) {
        if let Ok((r, _)) = multispace0::<_, nom::error::Error<&str>>(self.rest()) {
            self.advance_to(r);
        }
    }

    fn found(&self) -> String {
        match bare_word(self.rest()) {
            Ok((_, w)) => quote_found(w),
            Err(_) => match self.rest().chars().next() {
                Some(c) => format!("'{c}'"),
                None => "the end of the statement".to_string(),
            },
        }
    }

    fn error(&self, expected: impl Into<String>) -> SyntaxError {
        self.error_at(self.pos, self.found(), expected, None)
    }

    fn error_at(
        &self,
        offset: usize,
        found: String,
        expected: impl Into<String>,
        suggestion: Option<String>,
    ) -> SyntaxError {
        SyntaxError {
            offset,
            found,
            expected: expected.into(),
            suggestion,
            statement: self.src.to_string(),
        }
    }

    fn peek_word(&mut self) -> Option<&'a str> {
        self.ws();
        bare_word(self.rest()).ok().map(|(_, w)| w)
    }

    /// Consumes `kw` (any case) if it is the next whole word.
    fn keyword(&mut self, kw: &str) -> bool {
        match self.peek_word() {
            Some(w) if w.eq_ignore_ascii_case(kw) => {
                self.pos += w.len();
                true
            }
            _ => false,
        }
    }

    fn expect_keyword(&mut self, kw: &str, expected: &str) -> Result<(), SyntaxError> {
        if self.keyword(kw) {
            return Ok(());
        }
        let start = self.pos;
        let found = self.found();
        let suggestion = self.peek_word().and_then(|w| suggest(w, &[kw]));
        Err(self.error_at(start, found, expected, suggestion))
    }

    fn number(&mut self, what: &str) -> Result<u64, SyntaxError> {
        self.ws();
        let start = self.pos;
        let (r, digits) = digit1::<_, nom::error::Error<&str>>(self.rest())
            .map_err(|_| self.error(format!("a number ({what})")))?;
        let n: u64 = digits.parse().unwrap_or(u64::MAX);
        if n == 0 || n > MAX_NUMBER {
            return Err(self.error_at(
                start,
                clip(digits, ""),
                format!("{what} between 1 and {MAX_NUMBER}"),
                None,
            ));
        }
        self.advance_to(r);
        Ok(n)
    }

    fn value(&mut self, what: &str) -> Result<String, SyntaxError> {
        self.ws();
        if let Ok((r, v)) = quoted(self.rest()) {
            self.advance_to(r);
            return Ok(v);
        }
        if self.rest().starts_with('\'') {
            return Err(self.error("a closing quote (') for the quoted value"));
        }
        match bare_word(self.rest()) {
            Ok((r, w)) if !is_keyword(w) => {
                self.advance_to(r);
                Ok(w.to_string())
            }
            _ => Err(self.error(format!("{what} (quote it if it is a keyword: 'on')"))),
        }
    }

    fn item_word(&mut self) -> Result<String, SyntaxError> {
        self.ws();
        match ident(self.rest()) {
            Ok((r, w)) if !is_keyword(w) => {
                self.advance_to(r);
                Ok(w.to_string())
            }
            _ => Err(self.error("the item field, e.g. 'wallets'")),
        }
    }

    fn date(&mut self) -> Result<Date, SyntaxError> {
        self.ws();
        let start = self.pos;
        let word = bare_word(self.rest()).map(|(_, w)| w).unwrap_or("");
        let bad = |p: &Self, why: &str| {
            p.error_at(
                start,
                quote_found(word),
                format!("a date YYYY-MM-DD or YYYY-MM-DDTHH{why}"),
                None,
            )
        };
        let (date_part, hour_part) = match word.split_once(['T', 't']) {
            Some((d, h)) => (d, Some(h)),
            None => (word, None),
        };
        let parts: Vec<&str> = date_part.split('-').collect();
        let ok_shape = parts.len() == 3
            && parts[0].len() == 4
            && parts[1].len() == 2
            && parts[2].len() == 2
            && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()))
            && hour_part.is_none_or(|h| h.len() == 2 && h.chars().all(|c| c.is_ascii_digit()));
        if !ok_shape {
            return Err(bad(self, ""));
        }
        let year: i32 = parts[0].parse().map_err(|_| bad(self, ""))?;
        let month: u32 = parts[1].parse().map_err(|_| bad(self, ""))?;
        let day: u32 = parts[2].parse().map_err(|_| bad(self, ""))?;
        let hour: Option<u32> = match hour_part {
            Some(h) => Some(h.parse().map_err(|_| bad(self, ""))?),
            None => None,
        };
        let exists = chrono::NaiveDate::from_ymd_opt(year, month, day).is_some();
        if !exists {
            return Err(bad(self, &format!(": {date_part} does not exist")));
        }
        if hour.is_some_and(|h| h > 23) {
            return Err(bad(self, ": hours run 00 to 23"));
        }
        self.pos += word.len();
        Ok(Date {
            year,
            month,
            day,
            hour,
        })
    }

    fn range(&mut self) -> Result<Range, SyntaxError> {
        if !self.keyword("FROM") {
            return Ok(Range::Unspecified);
        }
        if self.keyword("ALL") {
            return Ok(Range::All);
        }
        if self.keyword("TODAY") {
            return Ok(Range::Today);
        }
        if self.keyword("YESTERDAY") {
            return Ok(Range::Yesterday);
        }
        if self.keyword("LAST") {
            let n = self.number("how many days or hours")?;
            let unit = if self.keyword("DAYS") || self.keyword("DAY") {
                Unit::Days
            } else if self.keyword("HOURS") || self.keyword("HOUR") {
                Unit::Hours
            } else {
                return Err(self.error("DAYS or HOURS"));
            };
            return Ok(Range::Last { n, unit });
        }
        if !self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            let start = self.pos;
            let found = self.found();
            let suggestion = self
                .peek_word()
                .and_then(|w| suggest(w, &["ALL", "TODAY", "YESTERDAY", "LAST"]));
            return Err(self.error_at(
                start,
                found,
                "ALL, today, yesterday, LAST n DAYS|HOURS or a date",
                suggestion,
            ));
        }
        let from = self.date()?;
        let to = if self.keyword("TO") {
            Some(self.date()?)
        } else {
            None
        };
        Ok(Range::Between { from, to })
    }

    /// Opens a level of nesting at `at` (the byte of the `(`, `EXACT` or `EXPLAIN`), or refuses.
    fn enter(&mut self, at: usize, what: &str) -> Result<(), SyntaxError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error_at(
                at,
                format!("{what} opening level {} of nesting", self.depth + 1),
                format!(
                    "at most {MAX_DEPTH} levels of nesting (each '(' and each EXACT or EXPLAIN opens one)"
                ),
                None,
            ));
        }
        self.depth += 1;
        Ok(())
    }

    /// `and_expr { OR and_expr }`, as one `Or` of all the operands.
    fn set(&mut self) -> Result<SetExpr, SyntaxError> {
        let first = self.set_and()?;
        if !self.keyword("OR") {
            return Ok(first);
        }
        let mut operands = vec![first];
        loop {
            operands.push(self.set_and()?);
            if !self.keyword("OR") {
                return Ok(SetExpr::Or(operands));
            }
        }
    }

    /// `unary { (AND | EXCEPT) unary }`, as the `And` of the first operand and every `AND`
    /// operand, minus each `EXCEPT` operand. For sets the order does not matter:
    /// `((a − b) ∩ c) − d = (a ∩ c) − b − d`, so a chain of any mix is one flat node.
    fn set_and(&mut self) -> Result<SetExpr, SyntaxError> {
        let mut and = vec![self.set_unary()?];
        let mut except = Vec::new();
        loop {
            if self.keyword("AND") {
                and.push(self.set_unary()?);
            } else if self.keyword("EXCEPT") {
                except.push(self.set_unary()?);
            } else {
                break;
            }
        }
        let base = if and.len() == 1 {
            and.remove(0)
        } else {
            SetExpr::And(and)
        };
        Ok(if except.is_empty() {
            base
        } else {
            SetExpr::Except(Box::new(base), except)
        })
    }

    fn set_unary(&mut self) -> Result<SetExpr, SyntaxError> {
        if self.keyword("NOT") {
            self.ws();
            if !self.rest().starts_with('(') {
                return Err(self.error("'(' after NOT"));
            }
            return Ok(SetExpr::Not(Box::new(self.group()?)));
        }
        self.ws();
        if self.rest().starts_with('(') {
            self.group()
        } else {
            self.tag()
        }
    }

    /// `( set )`, with the `(` next.
    fn group(&mut self) -> Result<SetExpr, SyntaxError> {
        self.enter(self.pos, "'('")?;
        self.pos += 1;
        let inner = self.set()?;
        self.ws();
        match self.rest().strip_prefix(')') {
            Some(r) => {
                self.advance_to(r);
                self.depth -= 1;
                Ok(inner)
            }
            None => Err(self.error("')' to close the group")),
        }
    }

    fn tag(&mut self) -> Result<SetExpr, SyntaxError> {
        self.ws();
        let expected = "a tag like chain:a, or a group in parentheses";
        let (r, field) = ident(self.rest()).map_err(|_| self.error(expected))?;
        if is_keyword(field) || !r.starts_with(':') {
            return Err(self.error(expected));
        }
        self.advance_to(&r[1..]);
        if self.rest().starts_with(char::is_whitespace) || self.rest().is_empty() {
            return Err(self.error(format!("a value after '{field}:'")));
        }
        let value = self.value("a tag value")?;
        Ok(SetExpr::Tag {
            field: field.to_string(),
            value,
        })
    }

    fn on(&mut self) -> Result<Option<SetExpr>, SyntaxError> {
        if self.keyword("ON") {
            Ok(Some(self.set()?))
        } else {
            Ok(None)
        }
    }

    /// `{ EXACT | EXPLAIN } statement`: the prefixes are read in a loop, each opening a level of
    /// nesting, and wrapped around the statement they lead to.
    fn statement(&mut self) -> Result<Statement, SyntaxError> {
        let mut prefixes = Vec::new();
        loop {
            self.ws();
            let at = self.pos;
            let explain = if self.keyword("EXPLAIN") {
                true
            } else if self.keyword("EXACT") {
                false
            } else {
                break;
            };
            self.enter(at, if explain { "EXPLAIN" } else { "EXACT" })?;
            prefixes.push(explain);
        }
        let mut st = self.simple_statement()?;
        for explain in prefixes.into_iter().rev() {
            st = if explain {
                Statement::Explain(Box::new(st))
            } else {
                Statement::Exact(Box::new(st))
            };
        }
        Ok(st)
    }

    /// One statement after its `EXACT` and `EXPLAIN` prefixes.
    fn simple_statement(&mut self) -> Result<Statement, SyntaxError> {
        self.ws();
        let start = self.pos;
        let Some(word) = self.peek_word() else {
            return Err(self.error("a statement (DISTINCT, SEEN, COUNT, TOP, SAMPLE, EXACT, EXPLAIN, SHOW, INFO, HELP, SET)"));
        };
        let upper = word.to_ascii_uppercase();
        if STATEMENTS.contains(&upper.as_str()) {
            self.pos += word.len();
        }
        Ok(match upper.as_str() {
            "DISTINCT" => {
                let item = self.item_word()?;
                let set = self.on()?;
                let range = self.range()?;
                Statement::Distinct { item, set, range }
            }
            "SEEN" => {
                let value = self.value("the value to look for")?;
                let set = self.on()?;
                let range = self.range()?;
                Statement::Seen { value, set, range }
            }
            "COUNT" => {
                let next = self.peek_word();
                let plain = next.is_none_or(|w| {
                    w.eq_ignore_ascii_case("ON")
                        || w.eq_ignore_ascii_case("FROM")
                        || w.starts_with(';')
                }) && !self.rest().starts_with('\'');
                if plain {
                    let set = self.on()?;
                    let range = self.range()?;
                    Statement::Count { set, range }
                } else {
                    let value = self.value("a value to count, or ON / FROM")?;
                    let set = self.on()?;
                    let range = self.range()?;
                    Statement::CountValue { value, set, range }
                }
            }
            "TOP" => {
                let n = self.number("how many")?;
                let item = self.item_word()?;
                let set = self.on()?;
                let range = self.range()?;
                Statement::Top {
                    n,
                    item,
                    set,
                    range,
                }
            }
            "SAMPLE" => {
                let n = self.number("the sample size")?;
                let set = self.on()?;
                let per = if self.keyword("PER") {
                    self.ws();
                    let (r, t) =
                        ident(self.rest()).map_err(|_| self.error("a tag field after PER"))?;
                    self.advance_to(r);
                    Some(t.to_string())
                } else {
                    None
                };
                let range = self.range()?;
                Statement::Sample { n, set, per, range }
            }
            "SHOW" => {
                if self.keyword("BUCKETS") {
                    Statement::ShowBuckets
                } else if self.keyword("TAGS") {
                    Statement::ShowTags
                } else if self.keyword("SKETCHES") {
                    Statement::ShowSketches
                } else {
                    let at = self.pos;
                    let found = self.found();
                    let s = self
                        .peek_word()
                        .and_then(|w| suggest(w, &["BUCKETS", "TAGS", "SKETCHES"]));
                    return Err(self.error_at(at, found, "BUCKETS, TAGS or SKETCHES", s));
                }
            }
            "INFO" => Statement::Info,
            "HELP" => Statement::Help,
            "SET" => {
                self.expect_keyword("NOW", "NOW")?;
                self.ws();
                match self.rest().strip_prefix('=') {
                    Some(r) => self.advance_to(r),
                    None => return Err(self.error("'=' after SET NOW")),
                }
                Statement::SetNow(self.date()?)
            }
            _ => {
                let found = quote_found(word);
                return Err(self.error_at(start, found, "a statement (DISTINCT, SEEN, COUNT, TOP, SAMPLE, EXACT, EXPLAIN, SHOW, INFO, HELP, SET)", suggest(word, STATEMENTS)));
            }
        })
    }
}

/// Parses one statement (an optional trailing `;` is allowed). Any text gives `Ok` or `Err` in
/// time and stack bounded by [`MAX_STATEMENT_BYTES`] and [`MAX_DEPTH`].
pub fn parse(src: &str) -> Result<Statement, SyntaxError> {
    if src.len() > MAX_STATEMENT_BYTES {
        // Keep only the accepted part: the error must not hold (or print) the whole input.
        let cut = (0..=MAX_STATEMENT_BYTES)
            .rev()
            .find(|&i| src.is_char_boundary(i))
            .unwrap_or(0);
        return Err(SyntaxError {
            offset: cut,
            found: format!("a statement of {} bytes", src.len()),
            expected: format!("a statement of at most {MAX_STATEMENT_BYTES} bytes"),
            suggestion: None,
            statement: src[..cut].to_string(),
        });
    }
    let mut p = Parser {
        src,
        pos: 0,
        depth: 0,
    };
    let stmt = p.statement()?;
    p.ws();
    if let Some(r) = p.rest().strip_prefix(';') {
        p.advance_to(r);
        p.ws();
    }
    if !p.rest().is_empty() {
        // Trailing words are most often a misspelt clause keyword (`FORM today`).
        let suggestion = p
            .peek_word()
            .and_then(|w| suggest(w, &["ON", "FROM", "TO", "PER", "AND", "OR", "EXCEPT"]));
        return Err(p.error_at(p.pos, p.found(), "the end of the statement", suggestion));
    }
    Ok(stmt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(s: &str) -> Statement {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}\n{}", e.caret()))
    }

    #[test]
    fn the_examples_parse() {
        assert_eq!(
            ok("DISTINCT wallets ON chain:a AND chain:b"),
            Statement::Distinct {
                item: "wallets".into(),
                set: Some(SetExpr::And(vec![
                    SetExpr::Tag {
                        field: "chain".into(),
                        value: "a".into()
                    },
                    SetExpr::Tag {
                        field: "chain".into(),
                        value: "b".into()
                    },
                ])),
                range: Range::Unspecified,
            }
        );
        assert_eq!(
            ok("SEEN 0xabc"),
            Statement::Seen {
                value: "0xabc".into(),
                set: None,
                range: Range::Unspecified
            }
        );
        assert_eq!(
            ok("sample 1000 from TODAY;"),
            Statement::Sample {
                n: 1000,
                set: None,
                per: None,
                range: Range::Today
            }
        );
    }

    #[test]
    fn every_form_parses() {
        for s in [
            "DISTINCT wallet FROM ALL",
            "DISTINCT wallets ON chain:a OR chain:b EXCEPT chain:c FROM 2026-12-01 TO 2026-12-02",
            "DISTINCT wallets ON NOT (chain:a) FROM LAST 7 DAYS",
            "SEEN 'wallet with spaces' ON chain:a FROM yesterday",
            "COUNT 0xabc ON chain:a FROM LAST 24 HOURS",
            "COUNT",
            "COUNT ON chain:b",
            "COUNT FROM 2026-12-01T05",
            "TOP 10 wallets ON chain:'a b'",
            "SAMPLE 50 ON chain:a PER chain FROM today",
            "EXACT DISTINCT wallets ON chain:a AND chain:b",
            "EXPLAIN EXACT COUNT 0xabc",
            "SHOW BUCKETS",
            "show tags",
            "SHOW SKETCHES",
            "INFO",
            "HELP",
            "SET NOW = 2026-12-02",
            "COUNT 'on'",
        ] {
            let st = ok(s);
            assert_eq!(ok(&st.to_string()), st, "{s} printed as {st}");
        }
    }

    #[test]
    fn precedence_and_binds_tighter_than_or() {
        let st = ok("DISTINCT wallets ON chain:a OR chain:b AND chain:c");
        let Statement::Distinct {
            set: Some(SetExpr::Or(operands)),
            ..
        } = st
        else {
            panic!("{st:?}")
        };
        assert_eq!(operands.len(), 2);
        assert!(matches!(operands[1], SetExpr::And(..)));
        let grouped = ok("DISTINCT wallets ON (chain:a OR chain:b) AND chain:c");
        let Statement::Distinct {
            set: Some(SetExpr::And(operands)),
            ..
        } = grouped
        else {
            panic!()
        };
        assert!(matches!(operands[0], SetExpr::Or(..)));
    }

    #[test]
    fn errors_give_offset_found_expected_and_suggestions() {
        let e = parse("DISTINTC wallets").expect_err("misspelt");
        assert_eq!(e.offset, 0);
        assert_eq!(e.suggestion.as_deref(), Some("DISTINCT"));
        assert!(e.to_string().contains("did you mean DISTINCT"), "{e}");
        let e = parse("DISTINCT wallets ON chain:a AND").expect_err("dangling");
        assert_eq!(e.offset, 31);
        assert!(e.found.contains("end"), "{e}");
        assert_eq!(e.caret().lines().nth(1).map(str::len), Some(32));
        let e = parse("SEEN 0xabc FROM 2026-02-30").expect_err("no such day");
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert_eq!(e.offset, 16);
        let e = parse("TOP 0 wallets").expect_err("zero");
        assert!(e.to_string().contains("between 1 and"), "{e}");
        let e = parse("SAMPLE 99999999999999999999").expect_err("absurd");
        assert!(e.to_string().contains("between 1 and"), "{e}");
        let e = parse("COUNT FROM yesterdya").expect_err("typo");
        assert_eq!(e.suggestion.as_deref(), Some("YESTERDAY"));
        let e = parse("SEEN 'unterminated").expect_err("quote");
        assert!(e.to_string().contains("closing quote"), "{e}");
        assert!(parse("COUNT 0xabc extra").is_err());
        assert!(parse("").is_err());
    }

    /// Runs `f` on a thread with a 256 KiB stack, so recursion left per operand or per level
    /// of nesting shows up here (as an abort of the test binary) and not in a service.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(f)
            .expect("spawn a thread")
            .join()
            .expect("the parser does not panic")
    }

    #[test]
    fn nesting_past_the_limit_is_an_error_at_the_byte_that_passes_it() {
        on_small_stack(|| {
            let prefix = "DISTINCT wallets ON ";
            for open in ["(", "NOT ("] {
                let nest = |n: usize| format!("{prefix}{}chain:a{}", open.repeat(n), ")".repeat(n));
                // The deepest accepted statement still prints and parses back.
                let st = ok(&nest(MAX_DEPTH));
                assert_eq!(parse(&st.to_string()), Ok(st.clone()));
                // The '(' that opens level 65, whatever follows it.
                let at = prefix.len() + MAX_DEPTH * open.len() + open.len() - 1;
                for n in [MAX_DEPTH + 1, 8_000, 20_000] {
                    let e = parse(&nest(n)).expect_err("too deep");
                    assert_eq!(e.offset, at, "{open} x {n}: {e}");
                    assert!(
                        e.to_string().contains("at most 64 levels of nesting"),
                        "{e}"
                    );
                    assert!(e.found.contains("level 65"), "{e}");
                }
            }
            let e = parse(&"(".repeat(100_000)).expect_err("not a statement");
            assert_eq!(e.offset, 0, "{e}");
            let e = parse(&format!("{prefix}{}", "(".repeat(100_000))).expect_err("deep");
            assert_eq!(e.offset, prefix.len() + MAX_DEPTH, "{e}");

            // EXPLAIN and EXACT open levels too, and count with the brackets after them.
            let st = ok(&format!("{}COUNT", "EXPLAIN ".repeat(MAX_DEPTH)));
            assert_eq!(parse(&st.to_string()), Ok(st));
            for n in [MAX_DEPTH + 1, 8_000] {
                let e = parse(&format!("{}COUNT", "EXPLAIN ".repeat(n))).expect_err("deep");
                assert_eq!(e.offset, MAX_DEPTH * "EXPLAIN ".len(), "{e}");
                assert_eq!(e.found, "EXPLAIN opening level 65 of nesting");
            }
            let mixed = format!(
                "EXPLAIN EXACT {prefix}{}chain:a{}",
                "(".repeat(MAX_DEPTH - 1),
                ")".repeat(MAX_DEPTH - 1)
            );
            let e = parse(&mixed).expect_err("two prefixes and 63 brackets");
            assert_eq!(
                e.offset,
                "EXPLAIN EXACT ".len() + prefix.len() + MAX_DEPTH - 2
            );
        });
    }

    #[test]
    fn long_chains_are_one_flat_node_that_prints_back_in_time_and_stack() {
        on_small_stack(|| {
            let tag = |i: usize| SetExpr::Tag {
                field: "c".into(),
                value: (i % 10).to_string(),
            };
            let chain = |op: &str, n: usize| {
                let terms: Vec<String> = (0..n).map(|i| format!("c:{}", i % 10)).collect();
                format!("COUNT ON {}", terms.join(&format!(" {op} ")))
            };
            // 30,000 operands, 240 KB: under the size limit, so it must be read, and flat.
            let text = chain("AND", 30_000);
            let st = ok(&text);
            let Statement::Count {
                set: Some(SetExpr::And(v)),
                ..
            } = &st
            else {
                panic!("not one AND node")
            };
            assert_eq!(v.len(), 30_000);
            assert!(v.iter().enumerate().all(|(i, e)| *e == tag(i)));
            assert_eq!(st.to_string(), text);
            assert_eq!(parse(&st.to_string()), Ok(st.clone()));
            drop(st.clone());

            let st = ok(&chain("OR", 30_000));
            assert!(
                matches!(&st, Statement::Count { set: Some(SetExpr::Or(v)), .. } if v.len() == 30_000)
            );

            // AND and EXCEPT alternating: the AND operands, minus each EXCEPT operand.
            let terms: Vec<String> = (0..20_000).map(|i| format!("c:{}", i % 10)).collect();
            let mut text = format!("COUNT ON {}", terms[0]);
            for (i, t) in terms.iter().enumerate().skip(1) {
                text.push_str(if i % 2 == 1 { " EXCEPT " } else { " AND " });
                text.push_str(t);
            }
            let st = ok(&text);
            let Statement::Count {
                set: Some(SetExpr::Except(base, minus)),
                ..
            } = &st
            else {
                panic!("not one EXCEPT node")
            };
            assert!(matches!(&**base, SetExpr::And(v) if v.len() == 10_000));
            assert_eq!(minus.len(), 10_000);
            assert_eq!(parse(&st.to_string()), Ok(st.clone()));
        });
    }

    #[test]
    fn statements_past_the_size_limit_are_refused_at_the_limit() {
        let fits = format!("COUNT ON c:a{}", " ".repeat(MAX_STATEMENT_BYTES - 12));
        assert_eq!(fits.len(), MAX_STATEMENT_BYTES);
        assert!(parse(&fits).is_ok());
        let e = parse(&format!("{fits} ")).expect_err("one byte over");
        assert_eq!(e.offset, MAX_STATEMENT_BYTES);
        assert_eq!(
            e.to_string(),
            format!(
                "syntax error at byte {MAX_STATEMENT_BYTES}: expected a statement of at most \
                 {MAX_STATEMENT_BYTES} bytes, found a statement of {} bytes",
                MAX_STATEMENT_BYTES + 1
            )
        );
        assert!(e.statement.len() <= MAX_STATEMENT_BYTES);
        // Cut on a character boundary, so the caret can be drawn.
        let wide = "é".repeat(MAX_STATEMENT_BYTES / 2 + 1);
        let e = parse(&wide).expect_err("over");
        assert!(wide.is_char_boundary(e.offset) && e.offset <= MAX_STATEMENT_BYTES);
        assert!(e.caret().ends_with('^'));
    }

    #[test]
    fn a_huge_word_is_quoted_cut_in_the_error() {
        let word = "x".repeat(100_000);
        let e = parse(&word).expect_err("not a statement");
        let msg = e.to_string();
        assert!(msg.len() < 300, "{msg}");
        assert!(
            msg.contains(&format!("'{}…' (100000 bytes)", "x".repeat(40))),
            "{msg}"
        );
        let e = parse(&format!("TOP {} wallets", "9".repeat(50_000))).expect_err("too big");
        assert!(e.to_string().len() < 300, "{e}");
    }

    /// An abusive input: a printed statement with pieces repeated thousands of times inserted
    /// at random places (deep nests, long chains, stray brackets and quotes, random text), and
    /// maybe cut short, up to 100 KB.
    fn arb_abuse() -> impl Strategy<Value = String> {
        const MAX: usize = 100_000;
        let piece = prop_oneof![
            Just("(".to_string()),
            Just(")".to_string()),
            Just("NOT (".to_string()),
            Just("EXPLAIN ".to_string()),
            Just("EXACT ".to_string()),
            Just(" AND chain:a".to_string()),
            Just(" OR chain:b".to_string()),
            Just(" EXCEPT chain:c".to_string()),
            Just(" AND (chain:a OR chain:b)".to_string()),
            Just("'".to_string()),
            "\\PC{1,6}",
        ];
        let boundary = |text: &str, at: prop::sample::Index| {
            let at = at.index(text.len() + 1);
            (0..=at)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0)
        };
        (
            arb_statement(),
            proptest::collection::vec((any::<prop::sample::Index>(), piece, 1usize..25_000), 1..4),
            proptest::option::of(any::<prop::sample::Index>()),
        )
            .prop_map(move |(st, inserts, cut)| {
                let mut text = st.to_string();
                for (at, piece, n) in inserts {
                    let at = boundary(&text, at);
                    let n = n.min((MAX.saturating_sub(text.len())) / piece.len());
                    text.insert_str(at, &piece.repeat(n));
                }
                if let Some(cut) = cut {
                    let at = boundary(&text, cut);
                    text.truncate(at);
                }
                text
            })
    }

    /// Well-formed abuse: a chain of n operands inside d brackets (d may pass the limit).
    fn arb_deep_chain() -> impl Strategy<Value = String> {
        (
            0usize..(2 * MAX_DEPTH),
            1usize..8_000,
            prop_oneof![Just("AND"), Just("OR"), Just("EXCEPT")],
            any::<bool>(),
        )
            .prop_map(|(d, n, op, not)| {
                let open = if not { "NOT (" } else { "(" };
                let terms: Vec<String> = (0..n).map(|i| format!("chain:{}", i % 3)).collect();
                format!(
                    "DISTINCT wallets ON {}{}{}",
                    open.repeat(d),
                    terms.join(&format!(" {op} ")),
                    ")".repeat(d)
                )
            })
    }

    /// What any input must give: `Ok` with a statement that prints and parses back the same,
    /// or an error at a character boundary inside the input, with a one-line message.
    fn check_clean(text: String) -> Result<(), TestCaseError> {
        on_small_stack(move || {
            match parse(&text) {
                Ok(st) => {
                    let printed = st.to_string();
                    prop_assert_eq!(parse(&printed), Ok(st), "{}", printed);
                }
                Err(e) => {
                    prop_assert!(e.offset <= text.len(), "{e}");
                    prop_assert!(text.is_char_boundary(e.offset), "{e}");
                    let msg = e.to_string();
                    prop_assert!(msg.len() < 400 && !msg.contains('\n'), "{msg}");
                    prop_assert!(e.caret().ends_with('^'));
                }
            }
            Ok(())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn abusive_inputs_up_to_100_kb_give_a_clean_ok_or_err(text in arb_abuse()) {
            prop_assert!(text.len() <= 100_000);
            check_clean(text)?;
        }

        #[test]
        fn deep_nests_of_long_chains_give_a_clean_ok_or_err(text in arb_deep_chain()) {
            check_clean(text)?;
        }
    }

    fn arb_value() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z0-9]{1,8}", "0x[0-9a-f]{40}", "[ -~]{0,12}"]
    }

    fn arb_set() -> BoxedStrategy<SetExpr> {
        let field = "[a-z]{1,6}".prop_filter("not a keyword", |f| !is_keyword(f));
        let leaf = (field, arb_value()).prop_map(|(field, value)| SetExpr::Tag { field, value });
        // Any nesting of the n-ary nodes, including a chain directly inside a chain of the same
        // operator (which must print with brackets to come back the same).
        leaf.prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 2..4).prop_map(SetExpr::And),
                proptest::collection::vec(inner.clone(), 2..4).prop_map(SetExpr::Or),
                (
                    inner.clone(),
                    proptest::collection::vec(inner.clone(), 1..3)
                )
                    .prop_map(|(a, v)| SetExpr::Except(Box::new(a), v)),
                inner.prop_map(|a| SetExpr::Not(Box::new(a))),
            ]
        })
        .boxed()
    }

    fn arb_range() -> impl Strategy<Value = Range> {
        let date = (
            1970i32..2100,
            1u32..13,
            1u32..29,
            proptest::option::of(0u32..24),
        )
            .prop_map(|(year, month, day, hour)| Date {
                year,
                month,
                day,
                hour,
            });
        prop_oneof![
            Just(Range::Unspecified),
            Just(Range::All),
            Just(Range::Today),
            Just(Range::Yesterday),
            (date.clone(), proptest::option::of(date))
                .prop_map(|(from, to)| Range::Between { from, to }),
            (1u64..1000, prop_oneof![Just(Unit::Days), Just(Unit::Hours)])
                .prop_map(|(n, unit)| Range::Last { n, unit }),
        ]
    }

    fn arb_statement() -> impl Strategy<Value = Statement> {
        let set = || proptest::option::of(arb_set());
        let simple = prop_oneof![
            (set(), arb_range()).prop_map(|(set, range)| Statement::Distinct {
                item: "wallets".into(),
                set,
                range
            }),
            (arb_value(), set(), arb_range()).prop_map(|(value, set, range)| Statement::Seen {
                value,
                set,
                range
            }),
            (arb_value(), set(), arb_range())
                .prop_map(|(value, set, range)| Statement::CountValue { value, set, range }),
            (set(), arb_range()).prop_map(|(set, range)| Statement::Count { set, range }),
            (1u64..1000, set(), arb_range()).prop_map(|(n, set, range)| Statement::Top {
                n,
                item: "wallets".into(),
                set,
                range
            }),
            (
                1u64..1000,
                set(),
                proptest::option::of("[a-z]{1,6}"),
                arb_range()
            )
                .prop_map(|(n, set, per, range)| Statement::Sample {
                    n,
                    set,
                    per,
                    range
                }),
            Just(Statement::Info),
        ]
        .boxed();
        prop_oneof![
            simple.clone(),
            simple.clone().prop_map(|s| Statement::Exact(Box::new(s))),
            simple.prop_map(|s| Statement::Explain(Box::new(s))),
        ]
    }

    proptest! {
        #[test]
        fn printing_and_parsing_back_gives_the_same_ast(st in arb_statement()) {
            let text = st.to_string();
            let back = parse(&text);
            prop_assert_eq!(back, Ok(st), "{}", text);
        }

        /// Not only no panic: an error points at a character of the input (or its end), so the
        /// caret a user sees lands on it.
        #[test]
        fn random_input_never_panics(s in "\\PC{0,60}") {
            if let Err(e) = parse(&s) {
                prop_assert!(e.offset <= s.len() && s.is_char_boundary(e.offset), "{e:?}");
            }
        }

        #[test]
        fn mutated_statements_never_panic(st in arb_statement(), at in 0usize..200, c in any::<char>()) {
            let mut text = st.to_string();
            let at = at % (text.len() + 1);
            let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
            text.insert(at, c);
            for text in [text.clone(), text[..at].to_string()] {
                if let Err(e) = parse(&text) {
                    prop_assert!(
                        e.offset <= text.len() && text.is_char_boundary(e.offset),
                        "{e:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_caret_sits_under_its_character_after_wide_ones_and_tabs() {
        // What a terminal shows: 数 and 字 take two columns each, 👛 two, é as e + a combining
        // accent one; a tab goes to the next stop, which the caret line's own tab reaches too.
        for (statement, caret_line) in [
            ("SEEN 数字 FORM today", "          ^"),
            ("SEEN 👛 FORM today", "        ^"),
            ("SEEN e\u{301}e FORM today", "        ^"),
            ("SEEN\tx FORM today", "    \t  ^"),
        ] {
            let e = parse(statement).expect_err("FORM is not a clause");
            let caret = e.caret();
            let lines: Vec<&str> = caret.lines().collect();
            assert_eq!(lines, [statement, caret_line], "{statement:?}");
        }
        // Several lines: the caret follows the line with the error (`COUNT FORM` counts the
        // value FORM, so `today` is what is left over), the rest after it.
        let e = parse("COUNT\nFORM today\nFROM ALL").expect_err("today");
        assert_eq!(e.caret(), "COUNT\nFORM today\n     ^\nFROM ALL");
    }
}
