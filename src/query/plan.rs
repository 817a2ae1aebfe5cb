//! The planner: decides which structure answers a statement, over which slices and time range,
//! and whether only an exact answer will do. It refuses questions a structure cannot answer
//! honestly, naming queries that can. Besides the store's configuration it asks the raw event
//! log three things ([`RawLog`]): whether a range's raw events are still kept, since when, and how
//! many events a scan of it would read. With those it decides the cases where the sketches would
//! answer a different question than the one asked:
//!
//! - a range that cuts a bucket (an hour range on a day store): the sketches only know whole
//!   buckets, so the raw events answer, filtered by time, when they are kept and the scan is
//!   within the budget; otherwise the covering buckets answer and the plan says so;
//! - `COUNT <value>` over tags joined by OR: one event may carry several of them, so per-tag
//!   Count-Min figures cannot be added; the raw events answer, or the query is refused;
//! - `TOP`: the Count-Min candidates are re-counted exactly from the raw events when they can be.
//!
//! The executor runs the plan and makes no choice of its own but SPEC.md's exact fallback.

use super::ast::{Date, Range, SetExpr, Statement, Unit};
use crate::store::model::{BucketWidth, DAY_MS, HOUR_MS};
use crate::store::{ImportedSets, Slice, TimeRange};

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
    /// A reservoir filled by a scan of the raw events in the range (a range that cuts buckets).
    ScanSample,
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
            Method::Reservoir | Method::ScanSample => "reservoir",
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
    /// How the range meets the bucket grid, and what the planner made of it.
    pub fit: RangeFit,
    /// For `TOP` from Count-Min: whether its candidates are re-counted from the raw events (the
    /// events a scan reads), or why not.
    pub recount: Option<Result<u64, String>>,
    /// The planner's choices in words, for `EXPLAIN`.
    pub reasons: Vec<String>,
    /// For `DISTINCT`: how many sets read hold sketches imported from DataSketches images of
    /// the family that answers (HLL, or Theta for AND / EXCEPT / NOT). Their items are not in
    /// the raw log, so such a plan never answers from it.
    pub imported: usize,
    /// For `DISTINCT`: how many sets read hold imported sketches of the other family, which
    /// this answer does not read.
    pub imported_unread: usize,
}

impl Plan {
    /// The statement as written (with `EXACT` and `EXPLAIN`), to plan it again later.
    pub fn source(&self) -> Statement {
        let mut s = self.statement.clone();
        if self.exact {
            s = Statement::Exact(Box::new(s));
        }
        if self.explain {
            s = Statement::Explain(Box::new(s));
        }
        s
    }
}

/// How a statement's time range meets the bucket grid.
#[derive(Clone, Debug, PartialEq)]
pub enum RangeFit {
    /// All time, or whole buckets: every bucket read lies inside the range.
    Whole,
    /// The range cuts a bucket and the raw events answer, filtered by time.
    Scanned,
    /// The range cuts a bucket and the raw events cannot answer (`why`): the plan's `range` is
    /// widened to the covering buckets.
    Widened {
        /// The range as asked, and its label.
        asked: TimeRange,
        asked_label: String,
        /// The buckets wholly inside the asked range, if any.
        inner: Option<TimeRange>,
        why: String,
    },
}

/// What the planner asks of the raw event log. The store answers it in a session; [`plan`]
/// assumes a log that keeps everything.
pub trait RawLog {
    /// Whether every raw event in `range` is still kept.
    fn retained(&self, range: &TimeRange) -> bool;
    /// The time from which raw events are kept, when retention has dropped older ones.
    fn retained_from(&self) -> Option<i64>;
    /// How many events a scan of `range` reads (those of every bucket it overlaps).
    fn scan_size(&self, range: &TimeRange) -> Result<u64, String>;
    /// How many sets of `slices` in buckets overlapping `range` hold sketches imported from
    /// DataSketches images, by family: their items are in those sets' HLL or Theta, not in the
    /// raw log.
    fn imported(&self, slices: &[Slice], range: &TimeRange) -> Result<ImportedSets, String>;
}

/// What a plan depends on besides the statement.
pub struct Context<'a> {
    /// The clock, Unix milliseconds.
    pub now: i64,
    pub width: BucketWidth,
    /// The store's item field (`wallet`), accepted as written or with an `s`.
    pub item_field: &'a str,
    pub raw: &'a dyn RawLog,
    /// The most events a scan the user did not ask for may read (`Options::scan_budget`).
    pub scan_budget: u64,
    /// Whether exact figures may replace a sketch's own (`Options::exact_fallback`): off, `TOP`
    /// shows the Count-Min estimates with their bounds and no recount.
    pub exact_figures: bool,
}

/// A raw log that keeps every event, of any size.
struct KeepsAll;

impl RawLog for KeepsAll {
    fn retained(&self, _: &TimeRange) -> bool {
        true
    }
    fn retained_from(&self) -> Option<i64> {
        None
    }
    fn scan_size(&self, _: &TimeRange) -> Result<u64, String> {
        Ok(0)
    }
    fn imported(&self, _: &[Slice], _: &TimeRange) -> Result<ImportedSets, String> {
        Ok(ImportedSets::default())
    }
}

/// A question the planner will not answer the way it was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}; ask instead: {instead}")]
pub struct Refusal {
    pub reason: String,
    pub instead: String,
}

/// The slices a plan of `shape` reads sketches of, once each: an expression's tags, and the
/// whole stream if it has a NOT (which subtracts from it).
fn slices_read(shape: &Shape) -> Vec<Slice> {
    fn tags(e: &SetExpr, out: &mut Vec<Slice>) {
        match e {
            SetExpr::Tag { field, value } => out.push(Slice::tag(field, value)),
            SetExpr::Or(v) | SetExpr::And(v) => v.iter().for_each(|e| tags(e, out)),
            SetExpr::Except(a, rest) => {
                tags(a, out);
                rest.iter().for_each(|e| tags(e, out));
            }
            SetExpr::Not(a) => tags(a, out),
        }
    }
    match shape {
        Shape::Whole => vec![Slice::Whole],
        Shape::Union(v) => v.clone(),
        Shape::Expr(e) => {
            fn has_not(e: &SetExpr) -> bool {
                match e {
                    SetExpr::Tag { .. } => false,
                    SetExpr::Not(_) => true,
                    SetExpr::Or(v) | SetExpr::And(v) => v.iter().any(has_not),
                    SetExpr::Except(a, rest) => has_not(a) || rest.iter().any(has_not),
                }
            }
            let mut out = Vec::new();
            if has_not(e) {
                out.push(Slice::Whole);
            }
            tags(e, &mut out);
            let mut seen = std::collections::HashSet::new();
            out.retain(|s| seen.insert(s.clone()));
            out
        }
    }
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

/// The time range a statement means at `now`, and its label: `FROM <date>` alone runs from that
/// date on ("since"); `TO` includes its whole day (or hour); `LAST n DAYS` is the n calendar
/// days ending today, `LAST n HOURS` the n clock hours ending with the current one.
pub fn resolve_range(range: &Range, now: i64) -> (TimeRange, String) {
    let day = |t: i64| t.div_euclid(DAY_MS) * DAY_MS;
    match range {
        Range::Unspecified | Range::All => (TimeRange::all(), super::answer::ALL_TIME.into()),
        Range::Today => (
            TimeRange::between(day(now), day(now) + DAY_MS),
            format!("today, {}", BucketWidth::Day.label(day(now))),
        ),
        Range::Yesterday => {
            let y = day(now) - DAY_MS;
            (
                TimeRange::between(y, y + DAY_MS),
                format!("yesterday, {}", BucketWidth::Day.label(y)),
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
                    format!("since {from}"),
                ),
                Some(to) => {
                    let end = date_ms(to) + if to.hour.is_some() { HOUR_MS } else { DAY_MS };
                    let label = if from == to {
                        from.to_string()
                    } else {
                        format!("{from} – {to}")
                    };
                    (TimeRange::between(start, end), label)
                }
            }
        }
        Range::Last { n, unit } => {
            let (unit_ms, start_of, width) = match unit {
                Unit::Days => (DAY_MS, day(now), BucketWidth::Day),
                Unit::Hours => (
                    HOUR_MS,
                    now.div_euclid(HOUR_MS) * HOUR_MS,
                    BucketWidth::Hour,
                ),
            };
            let n = i64::try_from(*n)
                .unwrap_or(i64::MAX / unit_ms)
                .min(i64::MAX / unit_ms / 2);
            let start = start_of - (n - 1) * unit_ms;
            let end = start_of + unit_ms;
            (
                TimeRange::between(start, end),
                format!(
                    "last {n} {}, {} – {}",
                    if *unit == Unit::Days { "days" } else { "hours" },
                    width.label(start),
                    width.label(start_of)
                ),
            )
        }
    }
}

/// Whether `t` (a range end; `None` is unbounded) falls on a bucket boundary.
fn on_grid(t: Option<i64>, width: BucketWidth) -> bool {
    t.is_none_or(|t| t.rem_euclid(width.millis()) == 0)
}

/// A range's label in bucket terms: `2026-10-29 – 2026-10-30`, `since 2026-10-29`.
fn bucket_label(r: &TimeRange, width: BucketWidth) -> String {
    let last = |e: i64| width.label(width.bucket_of(e - 1));
    match (r.start, r.end) {
        (None, None) => super::answer::ALL_TIME.into(),
        (Some(s), None) => format!("since {}", width.label(s)),
        (None, Some(e)) => format!("until {}", last(e)),
        (Some(s), Some(e)) if width.bucket_of(e - 1) <= s => width.label(s),
        (Some(s), Some(e)) => format!("{} – {}", width.label(s), last(e)),
    }
}

/// The buckets that cover a range, and those wholly inside it (`None` if there are none).
fn covering(r: &TimeRange, width: BucketWidth) -> (TimeRange, Option<TimeRange>) {
    let ceil = |t: i64| {
        width.bucket_of(t)
            + if on_grid(Some(t), width) {
                0
            } else {
                width.millis()
            }
    };
    let covering = TimeRange {
        start: r.start.map(|s| width.bucket_of(s)),
        end: r.end.map(&ceil),
    };
    let inside = TimeRange {
        start: r.start.map(&ceil),
        end: r.end.map(|e| width.bucket_of(e)),
    };
    let inside = match (inside.start, inside.end) {
        (Some(s), Some(e)) if s >= e => None,
        _ => Some(inside),
    };
    (covering, inside)
}

/// The buckets a cut range cuts, in words (`2026-10-29 and 2026-10-30`).
fn cut_buckets(r: &TimeRange, width: BucketWidth) -> String {
    let mut cut: Vec<i64> = Vec::new();
    for t in [r.start, r.end].into_iter().flatten() {
        if !on_grid(Some(t), width) && !cut.contains(&width.bucket_of(t)) {
            cut.push(width.bucket_of(t));
        }
    }
    let labels: Vec<String> = cut.iter().map(|&b| width.label(b)).collect();
    format!(
        "bucket{} {}",
        if labels.len() == 1 { "" } else { "s" },
        labels.join(" and ")
    )
}

/// A time as people write it: to the hour when it is one, else to the second.
fn time_label(t: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(t) {
        Some(d) if t.rem_euclid(HOUR_MS) == 0 => d.format("%Y-%m-%dT%H").to_string(),
        Some(d) => d.format("%Y-%m-%dT%H:%M:%S UTC").to_string(),
        None => format!("@{t}ms"),
    }
}

/// The `Date` of an hour-aligned time: a day when it starts one (unless `hour` is asked), else
/// its hour.
fn date_of(t: i64, hour: bool) -> Option<Date> {
    use chrono::{Datelike, Timelike};
    let d = chrono::DateTime::from_timestamp_millis(t)?;
    Some(Date {
        year: d.year(),
        month: d.month(),
        day: d.day(),
        hour: (hour || t.rem_euclid(DAY_MS) != 0).then_some(d.hour()),
    })
}

/// `s` with its `ON` set replaced.
fn with_set(s: &Statement, e: SetExpr) -> Statement {
    let mut s = s.clone();
    match &mut s {
        Statement::Distinct { set, .. }
        | Statement::Seen { set, .. }
        | Statement::CountValue { set, .. }
        | Statement::Count { set, .. }
        | Statement::Top { set, .. }
        | Statement::Sample { set, .. } => *set = Some(e),
        _ => {}
    }
    s
}

/// `s` with its range replaced.
fn with_range(s: &Statement, r: Range) -> Statement {
    let mut s = s.clone();
    match &mut s {
        Statement::Distinct { range, .. }
        | Statement::Seen { range, .. }
        | Statement::CountValue { range, .. }
        | Statement::Count { range, .. }
        | Statement::Top { range, .. }
        | Statement::Sample { range, .. } => *range = r,
        _ => {}
    }
    s
}

/// The written range for the part of `r` whose raw events are kept (those from `kept_from` on),
/// or for everything since `kept_from` when `r` ends before it.
fn kept_part(r: &TimeRange, kept_from: i64) -> Option<Range> {
    let ceil_hour =
        |t: i64| t.div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS * i64::from(t.rem_euclid(HOUR_MS) != 0);
    let kept = ceil_hour(kept_from);
    let start = r.start.map_or(kept, |s| ceil_hour(s).max(kept));
    let to = match r.end {
        None => None,
        Some(e) if e <= start => {
            return Some(Range::Between {
                from: date_of(kept, false)?,
                to: None,
            })
        }
        // `TO` includes its whole day or hour.
        Some(e) if e.rem_euclid(DAY_MS) == 0 => Some(date_of(e - DAY_MS, false)?),
        Some(e) => Some(date_of(e - HOUR_MS, true)?),
    };
    Some(Range::Between {
        from: date_of(start, false)?,
        to,
    })
}

fn exact_of(s: &Statement) -> String {
    format!("EXACT {s}")
}

/// Plans a statement as if every raw event were kept and any scan fitted the budget (a store
/// without retention, and no budget). `item_field` is the store's item field (`wallet`),
/// accepted as written or with an `s`. A session plans with [`plan_with`] and the store's facts.
pub fn plan(
    statement: &Statement,
    now: i64,
    width: BucketWidth,
    item_field: &str,
) -> Result<Plan, Refusal> {
    plan_with(
        statement,
        &Context {
            now,
            width,
            item_field,
            raw: &KeepsAll,
            scan_budget: u64::MAX,
            exact_figures: true,
        },
    )
}

/// Plans a statement against what the raw event log holds (see the module's documentation).
pub fn plan_with(statement: &Statement, ctx: &Context<'_>) -> Result<Plan, Refusal> {
    plan_inner(statement, ctx, true)
}

/// Whether a scan of `range` may run without `EXACT`: its events (how many) or why not.
fn may_scan(ctx: &Context<'_>, range: &TimeRange) -> Result<u64, String> {
    if !ctx.raw.retained(range) {
        return Err(match ctx.raw.retained_from() {
            Some(t) => format!("raw events before {} have expired", time_label(t)),
            None => "raw events of the range have expired".into(),
        });
    }
    let n = ctx
        .raw
        .scan_size(range)
        .map_err(|e| format!("the size of the scan is unknown ({e})"))?;
    if n > ctx.scan_budget {
        return Err(format!(
            "a scan would read {} events, over the budget of {}",
            super::answer::thousands(n as f64),
            super::answer::thousands(ctx.scan_budget as f64)
        ));
    }
    Ok(n)
}

/// Queries to ask instead of `inner` (under `EXACT` if `exact`) when its raw events cannot be
/// scanned: each one is planned here and kept only if the planner accepts it.
fn advice(inner: &Statement, exact: bool, time: &TimeRange, ctx: &Context<'_>) -> Vec<String> {
    let exact_st = |s: Statement| {
        if exact {
            Statement::Exact(Box::new(s))
        } else {
            s
        }
    };
    let mut candidates: Vec<Statement> = Vec::new();
    // The sketches' answer for the same range, where the planner takes one.
    if exact {
        candidates.push(inner.clone());
    }
    if ctx.raw.retained(time) {
        // Kept but over the budget: EXACT scans whatever the budget.
        if !exact {
            candidates.push(Statement::Exact(Box::new(inner.clone())));
        }
    } else if let Some(r) = ctx.raw.retained_from().and_then(|f| kept_part(time, f)) {
        candidates.push(exact_st(with_range(inner, r)));
    }
    // A count over an OR of tags: each tag's count (the union lies between the largest and
    // their sum).
    if let (Statement::CountValue { .. } | Statement::Count { .. }, Shape::Union(tags)) =
        (inner, shape_of(&range_set(inner)))
    {
        if tags.len() > 1 {
            for t in tags {
                if let Slice::Tag { field, value } = t {
                    candidates.push(with_set(inner, SetExpr::Tag { field, value }));
                }
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for c in candidates {
        if plan_inner(&c, ctx, false).is_ok() && !out.contains(&c.to_string()) {
            out.push(c.to_string());
        }
    }
    out
}

/// The `ON` set of a data statement.
fn range_set(s: &Statement) -> Option<SetExpr> {
    match s {
        Statement::Distinct { set, .. }
        | Statement::Seen { set, .. }
        | Statement::CountValue { set, .. }
        | Statement::Count { set, .. }
        | Statement::Top { set, .. }
        | Statement::Sample { set, .. } => set.clone(),
        _ => None,
    }
}

/// A refusal for a question only the raw events answer, naming what can be asked instead.
fn scan_refusal(
    reason: String,
    inner: &Statement,
    exact: bool,
    time: &TimeRange,
    ctx: &Context<'_>,
    advise: bool,
) -> Refusal {
    let ideas = if advise {
        advice(inner, exact, time, ctx)
    } else {
        Vec::new()
    };
    Refusal {
        reason,
        instead: if ideas.is_empty() {
            "nothing else answers it: the sketches cannot, and the raw events are not there".into()
        } else {
            ideas.join(", or ")
        },
    }
}

fn plan_inner(statement: &Statement, ctx: &Context<'_>, advise: bool) -> Result<Plan, Refusal> {
    let (now, width, item_field) = (ctx.now, ctx.width, ctx.item_field);
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
    let (time, range_label) = resolve_range(&range, now);
    if let (Range::Between { from, to: Some(to) }, Some(s), Some(e)) =
        (&range, time.start, time.end)
    {
        // `TO` includes its day or hour: `FROM 2026-10-30T05 TO 2026-10-30` is 05:00 to midnight.
        if e <= s {
            return Err(Refusal {
                reason: format!("the range ends ({to}) before it starts ({from})"),
                instead: format!("FROM {to} TO {from}"),
            });
        }
    }
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
    let mut plan = Plan {
        statement: inner.clone(),
        method,
        shape,
        range: time,
        range_label,
        exact,
        explain,
        fit: RangeFit::Whole,
        recount: None,
        reasons: Vec::new(),
        imported: 0,
        imported_unread: 0,
    };
    if method == Method::Meta {
        return Ok(plan);
    }
    if let Statement::Distinct { .. } = inner {
        // Unknown counts as present: the raw log must not answer alone when it may lack items.
        let sets = ctx
            .raw
            .imported(&slices_read(&plan.shape), &time)
            .unwrap_or(ImportedSets { hll: 1, theta: 1 });
        (plan.imported, plan.imported_unread) = match plan.method {
            Method::Theta => (sets.theta, sets.hll),
            _ => (sets.hll, sets.theta),
        };
    }
    let imported_why = (plan.imported > 0).then(|| {
        let n = plan.imported;
        format!(
            "{} in {} hold{} sketches imported from DataSketches images, whose items are not in the raw events",
            if n == 1 { "a set".to_string() } else { format!("{n} sets") },
            plan.range_label,
            if n == 1 { "s" } else { "" }
        )
    });
    let cuts = !on_grid(time.start, width) || !on_grid(time.end, width);
    let asked_label = plan.range_label.clone();
    let cut_words = || format!("the range {asked_label} cuts {}", cut_buckets(&time, width));
    if exact {
        if let Some(why) = imported_why {
            return Err(Refusal {
                reason: format!("{why}, so EXACT from the raw events would leave them out"),
                instead: inner.to_string(),
            });
        }
        // Asked for: the raw events answer whatever the budget, if they are there.
        if !ctx.raw.retained(&time) {
            let why = may_scan(ctx, &time).err().unwrap_or_default();
            return Err(scan_refusal(
                format!("{why}, so EXACT cannot answer ({})", plan.range_label),
                inner,
                true,
                &time,
                ctx,
                advise,
            ));
        }
        if cuts {
            plan.fit = RangeFit::Scanned;
            plan.reasons.push(format!(
                "{}: the raw events are filtered by time",
                cut_words()
            ));
        }
        return Ok(plan);
    }
    // Questions only the raw events answer.
    let only_raw = match (inner, &plan.shape) {
        (Statement::Count { .. }, _) if method == Method::Scan => {
            Some("COUNT over several tags is counted event by event from the raw events".to_string())
        }
        (Statement::CountValue { .. }, Shape::Union(tags)) if tags.len() > 1 => Some(
            "one event may carry several of these tags, and Count-Min counts per tag, so adding \
             the tags' counts would count it once per tag: the union is counted from the raw events"
                .to_string(),
        ),
        _ => None,
    };
    if let Some(what) = only_raw {
        return match may_scan(ctx, &time) {
            Ok(n) => {
                plan.method = Method::Scan;
                plan.reasons.push(format!(
                    "{what} (a scan of {} events)",
                    super::answer::thousands(n as f64)
                ));
                if cuts {
                    plan.fit = RangeFit::Scanned;
                }
                Ok(plan)
            }
            Err(why) => Err(scan_refusal(
                format!(
                    "{what}, but {why}{}",
                    match &plan.shape {
                        Shape::Union(tags) if tags.len() > 1 => "; each tag's count alone can be answered, and the union lies between the largest of them and their sum",
                        _ => "",
                    }
                ),
                inner,
                false,
                &time,
                ctx,
                advise,
            )),
        };
    }
    if let Some(why) = &imported_why {
        plan.reasons.push(format!(
            "{why}: the sketches answer, with them, and no exact answer from the raw events replaces theirs"
        ));
    }
    if cuts {
        let scan = match &imported_why {
            Some(why) => Err(why.clone()),
            None => may_scan(ctx, &time),
        };
        match scan {
            Ok(n) => {
                plan.method = if method == Method::Reservoir {
                    Method::ScanSample
                } else {
                    Method::Scan
                };
                plan.fit = RangeFit::Scanned;
                plan.reasons.push(format!(
                    "{}, which the sketches only know whole: answered from the raw events, filtered by time (a scan of {} events, within the budget of {})",
                    cut_words(),
                    super::answer::thousands(n as f64),
                    super::answer::thousands(ctx.scan_budget as f64)
                ));
            }
            Err(why) => {
                let (covering, inner_range) = covering(&time, width);
                let unit = if width == BucketWidth::Day {
                    "days"
                } else {
                    "hours"
                };
                let covering_label = format!(
                    "{}, the whole {unit} covering {}",
                    bucket_label(&covering, width),
                    plan.range_label
                );
                plan.reasons.push(format!(
                    "{}, and {why}: the covering buckets answer, {}",
                    cut_words(),
                    bucket_label(&covering, width)
                ));
                plan.fit = RangeFit::Widened {
                    asked: time,
                    asked_label: std::mem::replace(&mut plan.range_label, covering_label),
                    inner: inner_range,
                    why,
                };
                plan.range = covering;
            }
        }
    }
    if plan.method == Method::TopK {
        let recount = if ctx.exact_figures {
            may_scan(ctx, &plan.range)
        } else {
            Err("the exact fallback is off".into())
        };
        plan.reasons.push(match &recount {
            Ok(n) => format!(
                "the Count-Min candidates are re-counted exactly from the raw events (a scan of {} events)",
                super::answer::thousands(*n as f64)
            ),
            Err(why) => format!("no exact recount of the candidates: {why}"),
        });
        plan.recount = Some(recount);
    }
    Ok(plan)
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

    /// A raw log that keeps events from `from` on; a scan of any range reads `size` events.
    struct Log {
        from: Option<i64>,
        size: u64,
        /// Sets with imported sketches (of both families) in any range asked about.
        imported: usize,
    }

    impl RawLog for Log {
        fn retained(&self, r: &TimeRange) -> bool {
            self.from.is_none_or(|f| r.start.is_some_and(|s| s >= f))
        }
        fn retained_from(&self) -> Option<i64> {
            self.from
        }
        fn scan_size(&self, _: &TimeRange) -> Result<u64, String> {
            Ok(self.size)
        }
        fn imported(&self, _: &[Slice], _: &TimeRange) -> Result<ImportedSets, String> {
            Ok(ImportedSets {
                hll: self.imported,
                theta: self.imported,
            })
        }
    }

    const DAY0: i64 = 1_764_633_600_000; // 2025-12-02

    fn with(log: &Log, width: BucketWidth, s: &str) -> Result<Plan, Refusal> {
        plan_with(
            &parse(s).expect("parses"),
            &Context {
                now: DAY0 + 5 * HOUR_MS,
                width,
                item_field: "wallet",
                raw: log,
                scan_budget: 1_000,
                exact_figures: true,
            },
        )
    }

    #[test]
    fn distinct_over_imported_sketches_is_never_answered_from_the_raw_events() {
        let log = Log {
            from: None,
            size: 10,
            imported: 2,
        };
        let day = BucketWidth::Day;
        let r = with(&log, day, "EXACT DISTINCT wallets FROM 2025-12-01")
            .expect_err("the raw events lack the imported items");
        assert!(
            r.reason.contains("2 sets") && r.reason.contains("imported"),
            "{r}"
        );
        assert_eq!(r.instead, "DISTINCT wallets FROM 2025-12-01");
        // A range cutting a bucket is widened to whole buckets instead of scanned.
        let plan = with(
            &log,
            day,
            "DISTINCT wallets FROM 2025-12-01T05 TO 2025-12-01T07",
        )
        .expect("planned");
        assert_eq!(plan.method, Method::Hll);
        assert_eq!(plan.imported, 2);
        assert!(
            matches!(plan.fit, RangeFit::Widened { .. }),
            "{:?}",
            plan.fit
        );
        // Without imports the same range is scanned; other questions are not affected.
        let none = Log { imported: 0, ..log };
        let plan = with(
            &none,
            day,
            "DISTINCT wallets FROM 2025-12-01T05 TO 2025-12-01T07",
        )
        .expect("planned");
        assert_eq!(plan.method, Method::Scan);
        let plan = with(&log, day, "COUNT FROM 2025-12-01T05 TO 2025-12-01T07").expect("planned");
        assert_eq!((plan.method, plan.imported), (Method::Scan, 0));
    }

    #[test]
    fn a_range_that_cuts_buckets_scans_the_raw_events_or_widens_and_says_why() {
        let kept = Log {
            from: None,
            size: 10,
            imported: 0,
        };
        let q = "COUNT FROM 2025-12-02T05 TO 2025-12-02T07";
        let p = with(&kept, BucketWidth::Day, q).expect("plan");
        assert_eq!((p.method, &p.fit), (Method::Scan, &RangeFit::Scanned));
        assert_eq!(
            p.range,
            TimeRange::between(DAY0 + 5 * HOUR_MS, DAY0 + 8 * HOUR_MS)
        );
        assert!(p.reasons[0].contains("cuts bucket 2025-12-02"), "{p:?}");
        let p = with(&kept, BucketWidth::Day, "SAMPLE 5 FROM LAST 3 HOURS").expect("plan");
        assert_eq!(p.method, Method::ScanSample);
        // The same hours are whole buckets on an hour store.
        let p = with(&kept, BucketWidth::Hour, q).expect("plan");
        assert_eq!((p.method, &p.fit), (Method::EventCounts, &RangeFit::Whole));
        // Over the budget, or expired: the covering day answers, and the plan says why.
        let big = Log {
            from: None,
            size: 1_001,
            imported: 0,
        };
        let expired = Log {
            from: Some(DAY0 + DAY_MS),
            size: 10,
            imported: 0,
        };
        for (log, why) in [(&big, "budget"), (&expired, "expired")] {
            let p = with(log, BucketWidth::Day, q).expect("plan");
            assert_eq!(p.method, Method::EventCounts);
            assert_eq!(p.range, TimeRange::between(DAY0, DAY0 + DAY_MS));
            let RangeFit::Widened { asked, inner, .. } = &p.fit else {
                panic!("{p:?}")
            };
            assert_eq!(
                (*asked, *inner),
                (
                    TimeRange::between(DAY0 + 5 * HOUR_MS, DAY0 + 8 * HOUR_MS),
                    None
                )
            );
            assert!(p.range_label.contains("whole days"), "{}", p.range_label);
            assert!(p.reasons[0].contains(why), "{:?}", p.reasons);
        }
        // A day and a half: the whole day inside is what a widened COUNT is bounded below by.
        let p = with(
            &big,
            BucketWidth::Day,
            "COUNT FROM 2025-11-30T12 TO 2025-12-01",
        )
        .expect("plan");
        let RangeFit::Widened { inner, .. } = &p.fit else {
            panic!("{p:?}")
        };
        assert_eq!(*inner, Some(TimeRange::between(DAY0 - DAY_MS, DAY0)));
    }

    #[test]
    fn a_count_over_an_or_of_tags_is_a_scan_or_refused_with_queries_that_answer() {
        let kept = Log {
            from: None,
            size: 10,
            imported: 0,
        };
        let q = "COUNT 0xabc ON chain:a OR token:t";
        assert_eq!(
            with(&kept, BucketWidth::Day, q).map(|p| p.method),
            Ok(Method::Scan)
        );
        assert_eq!(
            with(&kept, BucketWidth::Day, "COUNT 0xabc ON chain:a").map(|p| p.method),
            Ok(Method::CountMin)
        );
        let big = Log {
            from: None,
            size: 1_001,
            imported: 0,
        };
        let r = with(&big, BucketWidth::Day, q).expect_err("over the budget");
        assert_eq!(
            r.instead,
            "EXACT COUNT 0xabc ON chain:a OR token:t, or COUNT 0xabc ON chain:a, or COUNT 0xabc ON token:t"
        );
    }

    #[test]
    fn top_recounts_when_the_raw_events_allow() {
        let kept = Log {
            from: None,
            size: 10,
            imported: 0,
        };
        let p = with(&kept, BucketWidth::Day, "TOP 5 wallets").expect("plan");
        assert_eq!((p.method, p.recount), (Method::TopK, Some(Ok(10))));
        let big = Log {
            from: None,
            size: 1_001,
            imported: 0,
        };
        let p = with(&big, BucketWidth::Day, "TOP 5 wallets").expect("plan");
        assert!(matches!(p.recount, Some(Err(ref why)) if why.contains("budget")));
    }

    #[test]
    fn exact_over_expired_raw_events_names_queries_the_planner_takes() {
        // Raw events kept from 2025-12-02T05:30.
        let log = Log {
            from: Some(DAY0 + 5 * HOUR_MS + 1_800_000),
            size: 10,
            imported: 0,
        };
        let r = with(
            &log,
            BucketWidth::Day,
            "EXACT SEEN 0xabc ON chain:a AND chain:b FROM 2025-12-01",
        )
        .expect_err("expired");
        assert_eq!(
            r.instead,
            "EXACT SEEN 0xabc ON chain:a AND chain:b FROM 2025-12-02T06"
        );
        let r = with(&log, BucketWidth::Day, "EXACT COUNT FROM yesterday").expect_err("expired");
        assert_eq!(
            r.instead,
            "COUNT FROM yesterday, or EXACT COUNT FROM 2025-12-02T06"
        );
        let r = with(
            &log,
            BucketWidth::Day,
            "EXACT DISTINCT wallets FROM LAST 3 DAYS",
        )
        .expect_err("expired");
        assert_eq!(
            r.instead,
            "DISTINCT wallets FROM LAST 3 DAYS, or EXACT DISTINCT wallets FROM 2025-12-02T06 TO 2025-12-02"
        );
    }

    #[test]
    fn to_includes_its_day_so_a_range_ends_before_it_starts_only_when_empty() {
        let range = |s: &str| p(s).expect(s).range;
        assert_eq!(
            range("COUNT FROM 2025-12-02T05 TO 2025-12-02"),
            TimeRange::between(DAY0 + 5 * HOUR_MS, DAY0 + DAY_MS)
        );
        assert_eq!(
            range("COUNT FROM 2025-12-02T05 TO 2025-12-02T05"),
            TimeRange::between(DAY0 + 5 * HOUR_MS, DAY0 + 6 * HOUR_MS)
        );
        assert!(p("COUNT FROM 2025-12-02T05 TO 2025-12-02T04").is_err());
        assert!(p("COUNT FROM 2025-12-02 TO 2025-12-01").is_err());
    }

    #[test]
    fn ranges_resolve_against_now() {
        let now = 1_764_633_600_000 + 5 * HOUR_MS; // 2025-12-02T05
        let day0 = 1_764_633_600_000;
        let (t, _) = resolve_range(&Range::Today, now);
        assert_eq!(t, TimeRange::between(day0, day0 + DAY_MS));
        let (t, _) = resolve_range(&Range::Yesterday, now);
        assert_eq!(t, TimeRange::between(day0 - DAY_MS, day0));
        let (t, _) = resolve_range(
            &Range::Last {
                n: 7,
                unit: Unit::Days,
            },
            now,
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
        );
        assert_eq!(t, TimeRange::between(day0 - DAY_MS, day0 + DAY_MS));
        // The labels say what the range is: an open end is "since".
        let (t, label) = resolve_range(
            &Range::Between {
                from: d(1),
                to: None,
            },
            now,
        );
        assert_eq!((t.end, label.as_str()), (None, "since 2025-12-01"));
        let (t, label) = resolve_range(
            &Range::Last {
                n: 24,
                unit: Unit::Hours,
            },
            now,
        );
        assert_eq!(
            (t, label.as_str()),
            (
                TimeRange::between(day0 - 18 * HOUR_MS, day0 + 6 * HOUR_MS),
                "last 24 hours, 2025-12-01T06 – 2025-12-02T05"
            )
        );
    }
}
