//! The planner: decides which structure answers a statement, over which slices and time range,
//! and whether only an exact answer will do. It refuses questions a structure cannot answer
//! honestly, naming the query that can. It reads nothing but the store's configuration and tag
//! names; the executor runs the plan.

use super::ast::{Date, Range, SetExpr, Statement, Unit};
use crate::store::model::{BucketWidth, DAY_MS, HOUR_MS};
use crate::store::{Slice, TimeRange};

/// Which structure answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Merged HyperLogLogs (whole stream, one tag, or a union of tags).
    Hll,
    /// Theta set operations (AND, EXCEPT, NOT).
    Theta,
    /// The all-time scalable Bloom filter.
    AllTimeBloom,
    /// The buckets' Bloom filters, with the compounded false-positive rate.
    Bloom,
    /// Merged Count-Min estimates.
    CountMin,
    /// Merged heavy-hitter candidates re-estimated on the merged Count-Min.
    TopK,
    /// The buckets' reservoirs, weighted by event counts.
    Reservoir,
    /// The exact event counts kept with each sketch set.
    EventCounts,
    /// A scan of the raw event log.
    Scan,
    /// Store metadata (SHOW, INFO, HELP, SET).
    Meta,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Hll => "hll",
            Method::Theta => "theta",
            Method::AllTimeBloom => "scalable-bloom",
            Method::Bloom => "bloom",
            Method::CountMin => "countmin",
            Method::TopK => "countmin",
            Method::Reservoir => "reservoir",
            Method::EventCounts | Method::Scan => "exact",
            Method::Meta => "meta",
        }
    }
}

/// The slices a statement reads, by shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Whole,
    /// One tag, or tags joined only by OR.
    Union(Vec<Slice>),
    /// Anything with AND, EXCEPT or NOT.
    Expr(SetExpr),
}

/// A planned statement, ready to run (and to run again: plans are reusable).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub statement: Statement,
    pub method: Method,
    pub shape: Shape,
    pub range: TimeRange,
    /// A person's words for the range (`2026-12-01 – 2026-12-02`, `all time`).
    pub range_label: String,
    /// `EXACT` was asked for.
    pub exact: bool,
    /// `EXPLAIN` was asked for: describe the plan (the approximate step is run to measure its
    /// error and buckets; SET NOW is not applied).
    pub explain: bool,
}

/// A question the planner will not answer the way it was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}; ask instead: {instead}")]
pub struct Refusal {
    pub reason: String,
    pub instead: String,
}

fn shape_of(set: &Option<SetExpr>) -> Shape {
    fn tags(e: &SetExpr, out: &mut Vec<Slice>) -> bool {
        match e {
            SetExpr::Tag { field, value } => {
                out.push(Slice::tag(field, value));
                true
            }
            SetExpr::Or(v) => v.iter().all(|e| tags(e, out)),
            _ => false,
        }
    }
    match set {
        None => Shape::Whole,
        Some(e) => {
            let mut out = Vec::new();
            if tags(e, &mut out) {
                // A set, not a scan of the list per tag: an OR of thousands of tags stays linear.
                let mut seen = std::collections::HashSet::new();
                out.retain(|s| seen.insert(s.clone()));
                Shape::Union(out)
            } else {
                Shape::Expr(e.clone())
            }
        }
    }
}

/// Milliseconds of a date (its hour if given) in UTC.
pub fn date_ms(d: &Date) -> i64 {
    let date = chrono::NaiveDate::from_ymd_opt(d.year, d.month, d.day).unwrap_or_default();
    let t = date
        .and_hms_opt(d.hour.unwrap_or(0), 0, 0)
        .unwrap_or_default();
    t.and_utc().timestamp_millis()
}

/// The time range a statement means at `now`: `FROM <date>` alone runs from that date on; `TO`
/// includes its whole day (or hour); `LAST n DAYS` is the n calendar days ending today.
pub fn resolve_range(range: &Range, now: i64, width: BucketWidth) -> (TimeRange, String) {
    let day = |t: i64| t.div_euclid(DAY_MS) * DAY_MS;
    let label = |t: i64| width.label(t);
    match range {
        Range::Unspecified | Range::All => (TimeRange::all(), "all time".into()),
        Range::Today => (
            TimeRange::between(day(now), day(now) + DAY_MS),
            format!("today ({})", BucketWidth::Day.label(day(now))),
        ),
        Range::Yesterday => {
            let y = day(now) - DAY_MS;
            (
                TimeRange::between(y, y + DAY_MS),
                format!("yesterday ({})", BucketWidth::Day.label(y)),
            )
        }
        Range::Between { from, to } => {
            let start = date_ms(from);
            match to {
                None => (
                    TimeRange {
                        start: Some(start),
                        end: None,
                    },
                    format!("from {from}"),
                ),
                Some(to) => {
                    let end = date_ms(to) + if to.hour.is_some() { HOUR_MS } else { DAY_MS };
                    (TimeRange::between(start, end), format!("{from} – {to}"))
                }
            }
        }
        Range::Last { n, unit } => {
            let (unit_ms, start_of) = match unit {
                Unit::Days => (DAY_MS, day(now)),
                Unit::Hours => (HOUR_MS, now.div_euclid(HOUR_MS) * HOUR_MS),
            };
            let n = i64::try_from(*n)
                .unwrap_or(i64::MAX / unit_ms)
                .min(i64::MAX / unit_ms / 2);
            let start = start_of - (n - 1) * unit_ms;
            let end = start_of + unit_ms;
            (
                TimeRange::between(start, end),
                format!(
                    "last {n} {} ({} – now)",
                    if *unit == Unit::Days { "days" } else { "hours" },
                    label(start)
                ),
            )
        }
    }
}

fn exact_of(s: &Statement) -> String {
    format!("EXACT {s}")
}

/// Plans a statement. `item_field` is the store's item field (`wallet`), accepted as written or
/// with an `s`.
pub fn plan(
    statement: &Statement,
    now: i64,
    width: BucketWidth,
    item_field: &str,
) -> Result<Plan, Refusal> {
    let mut exact = false;
    let mut explain = false;
    let mut inner = statement;
    loop {
        match inner {
            Statement::Explain(s) => {
                explain = true;
                inner = s;
            }
            Statement::Exact(s) => {
                exact = true;
                inner = s;
            }
            _ => break,
        }
    }
    let check_item = |item: &str| -> Result<(), Refusal> {
        let plural = format!("{item_field}s");
        if item.eq_ignore_ascii_case(item_field) || item.eq_ignore_ascii_case(&plural) {
            Ok(())
        } else {
            let mut fixed = inner.clone();
            if let Statement::Distinct { item, .. } | Statement::Top { item, .. } = &mut fixed {
                *item = plural.clone();
            }
            Err(Refusal {
                reason: format!("this store counts '{item_field}', not '{item}'"),
                instead: fixed.to_string(),
            })
        }
    };
    let (set, range) = match inner {
        Statement::Distinct { set, range, .. }
        | Statement::Seen { set, range, .. }
        | Statement::CountValue { set, range, .. }
        | Statement::Count { set, range }
        | Statement::Top { set, range, .. }
        | Statement::Sample { set, range, .. } => (set.clone(), range.clone()),
        _ => (None, Range::Unspecified),
    };
    let shape = shape_of(&set);
    if let Range::Between { from, to: Some(to) } = &range {
        if date_ms(to) < date_ms(from) {
            return Err(Refusal {
                reason: format!("the range ends ({to}) before it starts ({from})"),
                instead: format!("FROM {to} TO {from}"),
            });
        }
    }
    let (time, range_label) = resolve_range(&range, now, width);
    let single_or_whole =
        matches!(&shape, Shape::Whole) || matches!(&shape, Shape::Union(v) if v.len() == 1);
    let method = match inner {
        Statement::Distinct { item, .. } => {
            check_item(item)?;
            match (&shape, exact) {
                (_, true) => Method::Scan,
                (Shape::Expr(_), false) => Method::Theta,
                _ => Method::Hll,
            }
        }
        Statement::Seen { .. } => match (&shape, exact) {
            (_, true) => Method::Scan,
            (Shape::Whole, false) if time.is_all() => Method::AllTimeBloom,
            (Shape::Expr(_), false) => {
                return Err(Refusal {
                    reason: "Bloom filters cannot be combined with AND, EXCEPT or NOT without losing their one-sided guarantee".into(),
                    instead: exact_of(inner),
                })
            }
            _ => Method::Bloom,
        },
        Statement::CountValue { .. } => match (&shape, exact) {
            (_, true) => Method::Scan,
            (Shape::Expr(_), false) => {
                return Err(Refusal {
                    reason: "Count-Min sketches count per tag; they cannot subtract or intersect".into(),
                    instead: exact_of(inner),
                })
            }
            _ => Method::CountMin,
        },
        Statement::Count { .. } => {
            if single_or_whole && !exact {
                Method::EventCounts
            } else {
                Method::Scan
            }
        }
        Statement::Top { item, .. } => {
            check_item(item)?;
            match (single_or_whole, exact) {
                (_, true) => Method::Scan,
                (true, false) => Method::TopK,
                (false, false) => {
                    return Err(Refusal {
                        reason: "heavy hitters are kept per tag; across a set expression they would be double-counted or wrong".into(),
                        instead: exact_of(inner),
                    })
                }
            }
        }
        Statement::Sample { per: Some(field), .. } if matches!(&shape, Shape::Union(v) if v.iter().any(|s| !matches!(s, Slice::Tag { field: f, .. } if f == field))) => {
            return Err(Refusal {
                reason: format!("PER {field} stratifies by {field}; ON may only narrow it to values of {field}"),
                instead: format!("SAMPLE <n> PER {field}, or SAMPLE <n> ON <tag> without PER"),
            })
        }
        Statement::Sample { .. } => {
            if exact {
                return Err(Refusal {
                    reason: "a sample is random by definition; EXACT has nothing to add".into(),
                    instead: inner.to_string(),
                });
            }
            if !single_or_whole {
                return Err(Refusal {
                    reason: "samples are kept per tag; a sample of a set expression would not be uniform".into(),
                    instead: "SAMPLE <n> ON <tag>:<value> (or PER <tag>)".into(),
                });
            }
            Method::Reservoir
        }
        _ => Method::Meta,
    };
    Ok(Plan {
        statement: inner.clone(),
        method,
        shape,
        range: time,
        range_label,
        exact,
        explain,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::parse;

    fn p(s: &str) -> Result<Plan, Refusal> {
        plan(
            &parse(s).expect("parses"),
            1_764_633_600_000 + 5 * HOUR_MS,
            BucketWidth::Day,
            "wallet",
        )
    }

    #[test]
    fn the_right_structure_answers() {
        assert_eq!(p("DISTINCT wallets").map(|x| x.method), Ok(Method::Hll));
        assert_eq!(
            p("DISTINCT wallets ON chain:a OR chain:b").map(|x| x.method),
            Ok(Method::Hll)
        );
        assert_eq!(
            p("DISTINCT wallets ON chain:a AND chain:b").map(|x| x.method),
            Ok(Method::Theta)
        );
        assert_eq!(
            p("DISTINCT wallets ON chain:a EXCEPT chain:b").map(|x| x.method),
            Ok(Method::Theta)
        );
        assert_eq!(
            p("DISTINCT wallets ON NOT (chain:a)").map(|x| x.method),
            Ok(Method::Theta)
        );
        assert_eq!(p("SEEN 0xabc").map(|x| x.method), Ok(Method::AllTimeBloom));
        assert_eq!(
            p("SEEN 0xabc FROM today").map(|x| x.method),
            Ok(Method::Bloom)
        );
        assert_eq!(p("COUNT 0xabc").map(|x| x.method), Ok(Method::CountMin));
        assert_eq!(
            p("COUNT ON chain:a").map(|x| x.method),
            Ok(Method::EventCounts)
        );
        assert_eq!(p("TOP 5 wallets").map(|x| x.method), Ok(Method::TopK));
        assert_eq!(
            p("SAMPLE 10 PER chain").map(|x| x.method),
            Ok(Method::Reservoir)
        );
        assert_eq!(
            p("EXACT DISTINCT wallets ON chain:a AND chain:b").map(|x| (x.method, x.exact)),
            Ok((Method::Scan, true))
        );
        assert!(p("EXPLAIN DISTINCT wallets").expect("plan").explain);
    }

    #[test]
    fn wrong_questions_are_refused_with_the_right_query() {
        let r = p("SEEN 0xabc ON chain:a AND chain:b").expect_err("refused");
        assert_eq!(r.instead, "EXACT SEEN 0xabc ON chain:a AND chain:b");
        assert!(p("TOP 3 wallets ON chain:a OR chain:b").is_err());
        assert!(p("EXACT SAMPLE 3").is_err());
        let r = p("DISTINCT users").expect_err("wrong item");
        assert!(r.to_string().contains("'wallet'"), "{r}");
    }

    #[test]
    fn ranges_resolve_against_now() {
        let now = 1_764_633_600_000 + 5 * HOUR_MS; // 2025-12-02T05
        let day0 = 1_764_633_600_000;
        let (t, _) = resolve_range(&Range::Today, now, BucketWidth::Day);
        assert_eq!(t, TimeRange::between(day0, day0 + DAY_MS));
        let (t, _) = resolve_range(&Range::Yesterday, now, BucketWidth::Day);
        assert_eq!(t, TimeRange::between(day0 - DAY_MS, day0));
        let (t, _) = resolve_range(
            &Range::Last {
                n: 7,
                unit: Unit::Days,
            },
            now,
            BucketWidth::Day,
        );
        assert_eq!(t, TimeRange::between(day0 - 6 * DAY_MS, day0 + DAY_MS));
        let d = |day| Date {
            year: 2025,
            month: 12,
            day,
            hour: None,
        };
        let (t, _) = resolve_range(
            &Range::Between {
                from: d(1),
                to: Some(d(2)),
            },
            now,
            BucketWidth::Day,
        );
        assert_eq!(t, TimeRange::between(day0 - DAY_MS, day0 + DAY_MS));
    }
}
