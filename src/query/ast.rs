//! The query language's syntax tree: plain data, no behaviour beyond printing itself back as
//! text (so that `parse(print(ast)) == ast`, which the property tests check).

use std::fmt;

/// One statement of the language (see `docs/QUERY.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Statement {
    /// `DISTINCT <item> [ON set] [range]`
    Distinct {
        item: String,
        set: Option<SetExpr>,
        range: Range,
    },
    /// `SEEN <value> [ON set] [range]`
    Seen {
        value: String,
        set: Option<SetExpr>,
        range: Range,
    },
    /// `COUNT <value> [ON set] [range]`
    CountValue {
        value: String,
        set: Option<SetExpr>,
        range: Range,
    },
    /// `COUNT [ON set] [range]`
    Count {
        set: Option<SetExpr>,
        range: Range,
    },
    /// `TOP <n> <item> [ON set] [range]`
    Top {
        n: u64,
        item: String,
        set: Option<SetExpr>,
        range: Range,
    },
    /// `SAMPLE <n> [ON set] [PER tag] [range]`
    Sample {
        n: u64,
        set: Option<SetExpr>,
        per: Option<String>,
        range: Range,
    },
    /// `EXACT <statement>`
    Exact(Box<Statement>),
    /// `EXPLAIN <statement>`
    Explain(Box<Statement>),
    ShowBuckets,
    ShowTags,
    ShowSketches,
    Info,
    Help,
    /// `SET NOW = <date>`
    SetNow(Date),
}

/// A set of events selected by tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetExpr {
    Tag { field: String, value: String },
    And(Box<SetExpr>, Box<SetExpr>),
    Or(Box<SetExpr>, Box<SetExpr>),
    Except(Box<SetExpr>, Box<SetExpr>),
    Not(Box<SetExpr>),
}

/// A time range. `None` (no `FROM`) means all time, like `FROM ALL`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Range {
    #[default]
    Unspecified,
    All,
    Today,
    Yesterday,
    Between {
        from: Date,
        to: Option<Date>,
    },
    Last {
        n: u64,
        unit: Unit,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Days,
    Hours,
}

/// A calendar date, optionally with an hour (`YYYY-MM-DD` or `YYYY-MM-DDTHH`), UTC. Validity
/// (month 1–12, the day exists) is checked by the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: Option<u32>,
}

fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| !c.is_whitespace() && !"();'=".contains(c))
        && !super::parser::is_keyword(value);
    if bare {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', "''"))
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)?;
        if let Some(h) = self.hour {
            write!(f, "T{h:02}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Range::Unspecified => Ok(()),
            Range::All => f.write_str(" FROM ALL"),
            Range::Today => f.write_str(" FROM today"),
            Range::Yesterday => f.write_str(" FROM yesterday"),
            Range::Between { from, to: None } => write!(f, " FROM {from}"),
            Range::Between { from, to: Some(to) } => write!(f, " FROM {from} TO {to}"),
            Range::Last { n, unit } => write!(
                f,
                " FROM LAST {n} {}",
                match unit {
                    Unit::Days => "DAYS",
                    Unit::Hours => "HOURS",
                }
            ),
        }
    }
}

impl SetExpr {
    fn precedence(&self) -> u8 {
        match self {
            SetExpr::Or(..) => 1,
            SetExpr::And(..) | SetExpr::Except(..) => 2,
            SetExpr::Tag { .. } | SetExpr::Not(_) => 3,
        }
    }

    fn fmt_child(&self, f: &mut fmt::Formatter<'_>, parent: u8, right: bool) -> fmt::Result {
        // Operators are left-associative: a right operand of equal precedence needs brackets.
        let p = self.precedence();
        if p < parent || (right && p == parent && p < 3) {
            write!(f, "({self})")
        } else {
            write!(f, "{self}")
        }
    }
}

impl fmt::Display for SetExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let binary = |f: &mut fmt::Formatter<'_>, a: &SetExpr, op: &str, b: &SetExpr, p: u8| {
            a.fmt_child(f, p, false)?;
            write!(f, " {op} ")?;
            b.fmt_child(f, p, true)
        };
        match self {
            SetExpr::Tag { field, value } => write!(f, "{}:{}", field, quote(value)),
            SetExpr::And(a, b) => binary(f, a, "AND", b, 2),
            SetExpr::Except(a, b) => binary(f, a, "EXCEPT", b, 2),
            SetExpr::Or(a, b) => binary(f, a, "OR", b, 1),
            SetExpr::Not(a) => write!(f, "NOT ({a})"),
        }
    }
}

fn on(set: &Option<SetExpr>) -> String {
    set.as_ref().map(|s| format!(" ON {s}")).unwrap_or_default()
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Distinct { item, set, range } => {
                write!(f, "DISTINCT {item}{}{range}", on(set))
            }
            Statement::Seen { value, set, range } => {
                write!(f, "SEEN {}{}{range}", quote(value), on(set))
            }
            Statement::CountValue { value, set, range } => {
                write!(f, "COUNT {}{}{range}", quote(value), on(set))
            }
            Statement::Count { set, range } => write!(f, "COUNT{}{range}", on(set)),
            Statement::Top {
                n,
                item,
                set,
                range,
            } => write!(f, "TOP {n} {item}{}{range}", on(set)),
            Statement::Sample { n, set, per, range } => {
                write!(f, "SAMPLE {n}{}", on(set))?;
                if let Some(p) = per {
                    write!(f, " PER {p}")?;
                }
                write!(f, "{range}")
            }
            Statement::Exact(s) => write!(f, "EXACT {s}"),
            Statement::Explain(s) => write!(f, "EXPLAIN {s}"),
            Statement::ShowBuckets => f.write_str("SHOW BUCKETS"),
            Statement::ShowTags => f.write_str("SHOW TAGS"),
            Statement::ShowSketches => f.write_str("SHOW SKETCHES"),
            Statement::Info => f.write_str("INFO"),
            Statement::Help => f.write_str("HELP"),
            Statement::SetNow(d) => write!(f, "SET NOW = {d}"),
        }
    }
}
