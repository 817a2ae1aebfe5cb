//! The query language's syntax tree: plain data, no behaviour beyond printing itself back as
//! text (so that `parse(print(ast)) == ast`, which the property tests check).
//!
//! Chains of one operator are n-ary nodes, not left-deep binary trees: `a AND b AND c ...` is
//! one `And` with all its operands, so a statement's tree is only as deep as its parentheses
//! (which the parser limits), and printing, cloning, dropping and evaluating it never recurse
//! once per operand of a long chain.

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
///
/// The parser builds `And` and `Or` with two or more operands and `Except` with at least one
/// subtracted operand; a chain mixing `AND` and `EXCEPT` becomes the `And` of its `AND` operands
/// minus each `EXCEPT` operand (`a EXCEPT b AND c` is `Except(And[a, c], [b])`, the same set).
/// An `And` or `Or` with no operands, which the parser never builds, selects nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SetExpr {
    Tag {
        field: String,
        value: String,
    },
    /// In every operand.
    And(Vec<SetExpr>),
    /// In any operand.
    Or(Vec<SetExpr>),
    /// In the first, and in none of the rest.
    Except(Box<SetExpr>, Vec<SetExpr>),
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

    /// Prints an operand, bracketed unless `bare`. An operand that is itself a chain of the
    /// same precedence keeps its brackets, or it would parse back merged into its parent's chain.
    fn fmt_operand(&self, f: &mut fmt::Formatter<'_>, bare: bool) -> fmt::Result {
        if bare {
            write!(f, "{self}")
        } else {
            write!(f, "({self})")
        }
    }

    fn fmt_chain(
        f: &mut fmt::Formatter<'_>,
        operands: &[SetExpr],
        op: &str,
        tighter_than: u8,
    ) -> fmt::Result {
        for (i, e) in operands.iter().enumerate() {
            if i > 0 {
                write!(f, " {op} ")?;
            }
            e.fmt_operand(f, e.precedence() > tighter_than)?;
        }
        Ok(())
    }
}

impl fmt::Display for SetExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetExpr::Tag { field, value } => write!(f, "{}:{}", field, quote(value)),
            SetExpr::Or(v) => SetExpr::fmt_chain(f, v, "OR", 1),
            SetExpr::And(v) => SetExpr::fmt_chain(f, v, "AND", 2),
            SetExpr::Except(base, minus) => {
                // A bare AND chain in front parses back as this node's base.
                let bare =
                    base.precedence() > 2 || matches!(**base, SetExpr::And(ref v) if v.len() > 1);
                base.fmt_operand(f, bare)?;
                for e in minus {
                    f.write_str(" EXCEPT ")?;
                    e.fmt_operand(f, e.precedence() > 2)?;
                }
                Ok(())
            }
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
