//! The executor: runs a [`Plan`] against the store and builds the [`Answer`]. It makes no choice
//! of structure (the planner did) except the one SPEC.md gives it: when an approximate answer's
//! interval is too wide and the raw events are there, it answers exactly and says so.

use super::answer::{thousands, Answer, Kind};
use super::ast::{SetExpr, Statement};
use super::parser::{parse, SyntaxError};
use super::plan::{plan, resolve_range, Method, Plan, Refusal, Shape};
use crate::sketch::{HyperLogLog, Sketch, Theta};
use crate::store::log::{ItemRef, LogEvent};
use crate::store::{Slice, Store, StoreError, TimeRange};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// Everything that can stop a query.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Syntax(#[from] SyntaxError),
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// When to replace an approximate answer by an exact one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Fall back when the 95% interval's half-width exceeds this fraction of the value.
    pub fallback_width: f64,
    /// Never scan more raw events than this for an automatic fallback.
    pub scan_budget: u64,
    /// Whether to fall back at all. Off, every answer comes from the structure the planner
    /// chose, with its bound (what the demo uses to show a sketch's own answer).
    pub exact_fallback: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fallback_width: 0.25,
            scan_budget: 50_000_000,
            exact_fallback: true,
        }
    }
}

/// A conversation with a store: the clock (`SET NOW`), fallback options and the random source
/// for samples. `Store::query` uses a fresh one per call.
pub struct Session<'s> {
    pub store: &'s Store,
    pub now: Option<i64>,
    pub options: Options,
    rng: StdRng,
}

impl<'s> Session<'s> {
    pub fn new(store: &'s Store) -> Self {
        Session {
            store,
            now: None,
            options: Options::default(),
            rng: StdRng::from_os_rng(),
        }
    }

    /// Reproducible samples.
    pub fn with_seed(store: &'s Store, seed: u64) -> Self {
        Session {
            rng: StdRng::seed_from_u64(seed),
            ..Session::new(store)
        }
    }

    pub fn now(&self) -> i64 {
        self.now
            .unwrap_or_else(|| chrono::Utc::now().timestamp_millis())
    }

    /// Parses and plans a statement, to run it later (possibly many times) with [`Session::run`].
    pub fn prepare(&self, text: &str) -> Result<Plan, QueryError> {
        let mut st = parse(text)?;
        let config = self.store.config();
        // A store that lowercases its items is asked about them lowercased too.
        let mut inner = &mut st;
        loop {
            match inner {
                Statement::Exact(s) | Statement::Explain(s) => inner = &mut **s,
                Statement::Seen { value, .. } | Statement::CountValue { value, .. } => {
                    *value = config.normalise_item(value).into_owned();
                    break;
                }
                _ => break,
            }
        }
        Ok(plan(&st, self.now(), config.bucket, &config.item_field)?)
    }

    /// Parses, plans and runs one statement.
    pub fn query(&mut self, text: &str) -> Result<Answer, QueryError> {
        let plan = self.prepare(text)?;
        self.run(&plan)
    }

    /// Runs a prepared plan.
    pub fn run(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        // Relative ranges were resolved when the plan was made; re-resolve against the current
        // clock so a prepared `FROM today` keeps meaning today.
        let mut plan = plan.clone();
        if let Some(range) = range_of(&plan.statement) {
            let (r, label) = resolve_range(range, self.now(), self.store.config().bucket);
            plan.range = r;
            plan.range_label = label;
        }
        if plan.method == Method::Scan && !self.store.raw_events_retained(&plan.range)? {
            return Err(StoreError::Query(format!(
                "raw events for part of {} have expired, so an exact answer is not possible; ask without EXACT",
                plan.range_label
            ))
            .into());
        }
        if let (true, Statement::SetNow(d)) = (plan.explain, &plan.statement) {
            return Ok(Answer::text(
                Kind::Explain,
                format!("would set the clock to {d}"),
                "meta",
                true,
                0,
            ));
        }
        let answer = match &plan.statement {
            Statement::Distinct { .. } => self.distinct(&plan)?,
            Statement::Seen { value, .. } => self.seen(&plan, value)?,
            Statement::CountValue { value, .. } => self.count_value(&plan, value)?,
            Statement::Count { .. } => self.count(&plan)?,
            Statement::Top { n, .. } => self.top(&plan, *n)?,
            Statement::Sample { n, per, .. } => self.sample(&plan, *n, per.as_deref())?,
            Statement::SetNow(d) => {
                self.now = Some(super::plan::date_ms(d));
                Answer::text(Kind::Info, format!("now = {d}"), "meta", true, 0)
            }
            other => super::meta::answer(self.store, other)?,
        };
        let width = self.store.config().bucket.millis();
        let aligned = |t: Option<i64>| t.is_none_or(|t| t.rem_euclid(width) == 0);
        let whole_buckets = aligned(plan.range.start) && aligned(plan.range.end);
        let answer = if !answer.exact && !whole_buckets {
            answer.note("the range does not fall on bucket boundaries: sketches of every overlapping bucket were read whole")
        } else {
            answer
        };
        Ok(if plan.explain {
            explain(&plan, &answer)
        } else {
            answer
        })
    }

    fn events_in(&self, range: &TimeRange) -> Result<u64, QueryError> {
        Ok(self.store.count(&Slice::Whole, range)?.0)
    }

    /// Whether an exact scan may replace an approximate answer, or why not.
    fn may_scan(&self, range: &TimeRange) -> Result<Result<u64, String>, QueryError> {
        if !self.store.raw_events_retained(range)? {
            return Ok(Err("raw events for part of the range have expired".into()));
        }
        let n = self.events_in(range)?;
        if n > self.options.scan_budget {
            return Ok(Err(format!(
                "an exact scan would read {} events, over the budget of {}",
                thousands(n as f64),
                thousands(self.options.scan_budget as f64)
            )));
        }
        Ok(Ok(n))
    }

    fn too_wide(&self, value: f64, lower: f64, upper: f64) -> bool {
        lower <= 0.0 || (upper - lower) / 2.0 > self.options.fallback_width * value.abs()
    }

    /// Takes the exact answer instead when the approximate one is too wide, or says why not.
    fn maybe_fallback(
        &mut self,
        plan: &Plan,
        approx: Answer,
        exact: impl FnOnce(&mut Self) -> Result<Answer, QueryError>,
    ) -> Result<Answer, QueryError> {
        let (Some(lo), Some(hi)) = (approx.lower, approx.upper) else {
            return Ok(approx);
        };
        let super::answer::Value::Number(v) = approx.value else {
            return Ok(approx);
        };
        if approx.exact || !self.options.exact_fallback || !self.too_wide(v, lo, hi) {
            return Ok(approx);
        }
        let width = if v > 0.0 {
            format!("±{:.0}%", (hi - lo) / 2.0 / v * 100.0)
        } else {
            "from zero".into()
        };
        match self.may_scan(&plan.range)? {
            Ok(n) => {
                let a = exact(self)?;
                Ok(a.note(format!(
                    "answered exactly from {} raw events: the {} {:.0}% interval was {width}, wider than ±{:.0}%",
                    thousands(n as f64),
                    approx.method,
                    approx.confidence * 100.0,
                    self.options.fallback_width * 100.0
                )))
            }
            Err(why) => Ok(approx.note(format!(
                "the interval is {width}, but no exact fallback: {why}"
            ))),
        }
    }

    fn merged_hll(
        &self,
        slices: &[Slice],
        range: &TimeRange,
    ) -> Result<(Option<HyperLogLog>, usize, usize), QueryError> {
        let mut acc: Option<HyperLogLog> = None;
        let (mut buckets, mut bytes) = (0, 0);
        for s in slices {
            let m = self.store.merged_hll(s, range)?;
            buckets += m.buckets;
            bytes += m.bytes;
            if let Some(h) = m.sketch {
                match &mut acc {
                    None => acc = Some(h),
                    Some(a) => a.merge(&h).map_err(|e| StoreError::Query(e.to_string()))?,
                }
            }
        }
        Ok((acc, buckets, bytes))
    }

    fn empty_theta(&self) -> Result<Theta, QueryError> {
        Theta::new(self.store.config().sketches.theta_nominal_entries)
            .map_err(|e| StoreError::Query(e.to_string()).into())
    }

    /// A slice's Theta sketch merged over the range, read from the store only the first time
    /// the statement names the slice.
    fn theta_leaf(
        &self,
        slice: &Slice,
        range: &TimeRange,
        reads: &mut ThetaReads,
    ) -> Result<Theta, QueryError> {
        if let Some(t) = reads.merged.get(slice) {
            return Ok(t.clone());
        }
        let m = self.store.merged_theta(slice, range)?;
        reads.buckets += m.buckets;
        reads.bytes += m.bytes;
        let t = match m.sketch {
            Some(t) => t,
            None => self.empty_theta()?,
        };
        reads.merged.insert(slice.clone(), t.clone());
        Ok(t)
    }

    /// The expression's Theta sketch: one set operation per distinct operand of each node, so a
    /// chain costs in proportion to its length, and recursion only as deep as its brackets.
    fn theta_of(
        &self,
        e: &SetExpr,
        range: &TimeRange,
        reads: &mut ThetaReads,
    ) -> Result<Theta, QueryError> {
        // Intersection, union and difference are idempotent (also on sketches: θ and the kept
        // values do not change when the same operand comes again), so a repeat is skipped.
        fn distinct(v: &[SetExpr]) -> Vec<&SetExpr> {
            let mut seen = std::collections::HashSet::new();
            v.iter().filter(|e| seen.insert(*e)).collect()
        }
        let fold = |v: &[SetExpr],
                    reads: &mut ThetaReads,
                    op: fn(&Theta, &Theta) -> Option<Theta>|
         -> Result<Theta, QueryError> {
            let mut acc: Option<Theta> = None;
            for x in distinct(v) {
                let t = self.theta_of(x, range, reads)?;
                acc = Some(match acc {
                    None => t,
                    Some(a) => match op(&a, &t) {
                        Some(r) => r,
                        None => self.empty_theta()?,
                    },
                });
            }
            acc.map_or_else(|| self.empty_theta(), Ok)
        };
        Ok(match e {
            SetExpr::Tag { field, value } => {
                self.theta_leaf(&Slice::tag(field, value), range, reads)?
            }
            SetExpr::And(v) => fold(v, reads, |a, b| Theta::intersection([a, b]))?,
            SetExpr::Or(v) => fold(v, reads, |a, b| Theta::union([a, b]))?,
            SetExpr::Except(base, minus) => {
                let mut acc = self.theta_of(base, range, reads)?;
                for x in distinct(minus) {
                    acc = acc.difference(&self.theta_of(x, range, reads)?);
                }
                acc
            }
            SetExpr::Not(a) => {
                let whole = self.theta_leaf(&Slice::Whole, range, reads)?;
                whole.difference(&self.theta_of(a, range, reads)?)
            }
        })
    }

    fn distinct(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        if plan.method == Method::Scan {
            return self.exact_distinct(plan);
        }
        let approx = match &plan.shape {
            Shape::Expr(e) => {
                let mut theta_reads = ThetaReads::default();
                let t = self.theta_of(e, &plan.range, &mut theta_reads)?;
                let reads = (theta_reads.buckets, theta_reads.bytes);
                let est = t.estimate();
                let mut a = Answer::number(
                    Kind::Distinct,
                    est.value,
                    est.lower,
                    est.upper,
                    "theta",
                    est.exact,
                    reads.0,
                )
                .with_detail(format!(
                    "theta k={}, {} retained",
                    t.nominal_entries(),
                    t.retained()
                ));
                a.bytes_read = reads.1;
                if reads.0 == 0 {
                    return Ok(no_buckets(Kind::Distinct, "theta", &plan.range_label));
                }
                if est.exact {
                    a.with_detail(format!("theta k={}, below k so exact", t.nominal_entries()))
                } else {
                    a
                }
            }
            shape => {
                let slices = match shape {
                    Shape::Union(v) => v.clone(),
                    _ => vec![Slice::Whole],
                };
                let (h, buckets, bytes) = self.merged_hll(&slices, &plan.range)?;
                match h {
                    None => return Ok(no_buckets(Kind::Distinct, "hll", &plan.range_label)),
                    Some(h) => {
                        let est = h.estimate();
                        let mut a = Answer::number(
                            Kind::Distinct,
                            est.value,
                            est.lower,
                            est.upper,
                            "hll",
                            false,
                            buckets,
                        )
                        .with_detail(format!("hll p={}", h.precision()));
                        a.bytes_read = bytes;
                        a
                    }
                }
            }
        };
        self.maybe_fallback(plan, approx, |s| s.exact_distinct(plan))
    }

    /// Scans the range once, tracking per item which of the expression's tags it was seen with.
    /// Wallets (the common case) are keyed by their 20 bytes inline, so a scan of millions of
    /// events allocates once per distinct raw item at most.
    fn exact_distinct(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        let eval = SetEval::new(self.store, &plan.shape)?;
        let mut wallets: FxHashMap<[u8; 20], u64> = FxHashMap::default();
        let mut raw: FxHashMap<Box<[u8]>, u64> = FxHashMap::default();
        let decoded = self.store.scan(&Slice::Whole, &plan.range, |ev| {
            let mask = eval.mask(ev);
            match ev.item {
                ItemRef::Wallet(b) => {
                    let key: [u8; 20] = b.try_into().unwrap_or([0; 20]);
                    *wallets.entry(key).or_insert(0) |= mask;
                }
                ItemRef::Raw(b) => match raw.get_mut(b) {
                    Some(m) => *m |= mask,
                    None => {
                        raw.insert(b.into(), mask);
                    }
                },
            }
        })?;
        let n = wallets
            .values()
            .chain(raw.values())
            .filter(|&&m| eval.holds(m))
            .count() as f64;
        let buckets = self.store.count(&Slice::Whole, &plan.range)?.1;
        Ok(Answer::exact(Kind::Distinct, n, buckets)
            .with_detail(format!("scan of {} events", thousands(decoded as f64))))
    }

    fn seen(&mut self, plan: &Plan, value: &str) -> Result<Answer, QueryError> {
        if plan.method == Method::Scan {
            let eval = SetEval::new(self.store, &plan.shape)?;
            let mut want = Vec::new();
            let mut b = [0u8; 20];
            item_key(&Store::item_key(value, &mut b), &mut want);
            let mut buf = Vec::with_capacity(64);
            let mut found = false;
            let mut mask = 0;
            self.store.scan(&Slice::Whole, &plan.range, |ev| {
                item_key(&ev.item, &mut buf);
                if buf == want {
                    mask |= eval.mask(ev);
                    found = true;
                }
            })?;
            let yes = found && eval.holds(mask);
            let buckets = self.store.count(&Slice::Whole, &plan.range)?.1;
            return Ok(Answer::text(
                Kind::Seen,
                if yes { "yes" } else { "no" },
                "exact",
                true,
                buckets,
            )
            .with_detail("scan"));
        }
        let slices = match &plan.shape {
            Shape::Union(v) => v.clone(),
            _ => vec![Slice::Whole],
        };
        let mut maybe = false;
        let mut clear = 1.0;
        let mut buckets = 0;
        let mut bytes = 0;
        let mut saturated = false;
        for s in &slices {
            let m = self.store.membership(s, &plan.range, value)?;
            maybe |= m.maybe;
            clear *= 1.0 - m.false_positive_rate;
            buckets += m.buckets;
            bytes += m.bytes;
            saturated |= m.saturated;
        }
        let fpr = 1.0 - clear;
        let method = plan.method.name();
        let mut a = if maybe {
            let mut a = Answer::text(Kind::Seen, "maybe", method, false, buckets);
            a.false_positive_rate = Some(fpr);
            a.with_detail(format!("{method}, false-positive rate {}", percent(fpr)))
                .note(format!(
                    "'maybe': an item never seen would also be reported so with probability {}{}",
                    percent(fpr),
                    if buckets > 1 {
                        format!(", compounded over {buckets} buckets as 1 - Π(1 - fpr_i)")
                    } else {
                        String::new()
                    }
                ))
        } else {
            Answer::text(Kind::Seen, "no", method, false, buckets)
                .with_detail(format!("{method}: 'no' is certain"))
        };
        a.bytes_read = bytes;
        if saturated {
            a = a.note("a Bloom filter read is loaded past its capacity: its false-positive rate is above what it was sized for");
        }
        if buckets == 0 && plan.method == Method::Bloom {
            a = a.note(format!("no buckets in {}", plan.range_label));
        }
        Ok(a)
    }

    fn count_value(&mut self, plan: &Plan, value: &str) -> Result<Answer, QueryError> {
        if plan.method == Method::Scan {
            return self.exact_count_value(plan, value);
        }
        let slices = match &plan.shape {
            Shape::Union(v) => v.clone(),
            _ => vec![Slice::Whole],
        };
        let (mut est, mut bound, mut buckets, mut bytes) = (0u64, 0.0, 0, 0);
        let mut delta = 0.0;
        for s in &slices {
            let f = self.store.frequency(s, &plan.range, value)?;
            est += f.estimate;
            bound += f.bound;
            buckets += f.buckets;
            bytes += f.bytes;
            delta = f.delta;
        }
        if buckets == 0 {
            return Ok(no_buckets(Kind::Count, "countmin", &plan.range_label));
        }
        let e = est as f64;
        let mut approx = Answer::number(
            Kind::Count,
            e,
            (e - bound).max(0.0),
            e,
            "countmin",
            false,
            buckets,
        )
        .with_detail(format!(
            "countmin, never below the truth, over by at most {} with probability {:.0}%",
            thousands(bound),
            (1.0 - delta) * 100.0
        ));
        approx.bytes_read = bytes;
        approx.confidence = 1.0 - delta;
        let value = value.to_string();
        self.maybe_fallback(plan, approx, move |s| s.exact_count_value(plan, &value))
    }

    fn exact_count_value(&mut self, plan: &Plan, value: &str) -> Result<Answer, QueryError> {
        let eval = SetEval::new(self.store, &plan.shape)?;
        let mut want = Vec::new();
        let mut b = [0u8; 20];
        item_key(&Store::item_key(value, &mut b), &mut want);
        let mut buf = Vec::with_capacity(64);
        let mut n = 0u64;
        let decoded = self.store.scan(&Slice::Whole, &plan.range, |ev| {
            item_key(&ev.item, &mut buf);
            if buf == want && eval.holds(eval.mask(ev)) {
                n += 1;
            }
        })?;
        let buckets = self.store.count(&Slice::Whole, &plan.range)?.1;
        Ok(Answer::exact(Kind::Count, n as f64, buckets)
            .with_detail(format!("scan of {} events", thousands(decoded as f64))))
    }

    fn count(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        if plan.method == Method::EventCounts {
            let slice = match &plan.shape {
                Shape::Union(v) if v.len() == 1 => v[0].clone(),
                _ => Slice::Whole,
            };
            let (n, buckets) = self.store.count(&slice, &plan.range)?;
            let a = Answer::exact(Kind::Count, n as f64, buckets).with_detail("event counts");
            return Ok(if buckets == 0 {
                a.note(format!("no buckets in {}", plan.range_label))
            } else {
                a
            });
        }
        let eval = SetEval::new(self.store, &plan.shape)?;
        if let Err(why) = self.may_scan(&plan.range)? {
            return Err(StoreError::Query(format!(
                "COUNT over a set expression needs a scan of the raw events, but {why}"
            ))
            .into());
        }
        let mut n = 0u64;
        self.store.scan(&Slice::Whole, &plan.range, |ev| {
            if eval.holds(eval.mask(ev)) {
                n += 1;
            }
        })?;
        let buckets = self.store.count(&Slice::Whole, &plan.range)?.1;
        Ok(Answer::exact(Kind::Count, n as f64, buckets).with_detail("scan"))
    }

    fn top(&mut self, plan: &Plan, n: u64) -> Result<Answer, QueryError> {
        let n = n as usize;
        if plan.method == Method::Scan {
            let eval = SetEval::new(self.store, &plan.shape)?;
            let mut counts: HashMap<String, u64> = HashMap::new();
            self.store.scan(&Slice::Whole, &plan.range, |ev| {
                if eval.holds(eval.mask(ev)) {
                    *counts.entry(ev.item.to_text()).or_insert(0) += 1;
                }
            })?;
            let mut v: Vec<(String, u64)> = counts.into_iter().collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(n);
            let buckets = self.store.count(&Slice::Whole, &plan.range)?.1;
            let rows = v
                .into_iter()
                .map(|(item, count)| serde_json::json!({"item": item, "count": count}))
                .collect();
            return Ok(Answer::list(Kind::Top, rows, "exact", true, buckets).with_detail("scan"));
        }
        let slice = match &plan.shape {
            Shape::Union(v) if v.len() == 1 => v[0].clone(),
            _ => Slice::Whole,
        };
        let k = self.store.config().sketches.top_k;
        let (top, merged) = self.store.top(&slice, &plan.range, n)?;
        let bound = merged.sketch.as_ref().map_or(0.0, |c| c.error_bound());
        let rows = top
            .iter()
            .map(|e| {
                serde_json::json!({
                    "item": String::from_utf8_lossy(&e.item),
                    "count": e.estimate,
                    "lower": (e.estimate as f64 - bound).max(0.0),
                })
            })
            .collect();
        let mut a =
            Answer::list(Kind::Top, rows, "countmin", false, merged.buckets).with_detail(format!(
                "countmin top-{k} candidates, each over by at most {}",
                thousands(bound)
            ));
        a.bytes_read = merged.bytes;
        if n > k {
            a = a.note(format!(
                "only the {k} heaviest candidates are kept per bucket; asked for {n}"
            ));
        }
        Ok(a)
    }

    fn sample(&mut self, plan: &Plan, n: u64, per: Option<&str>) -> Result<Answer, QueryError> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let base = match &plan.shape {
            Shape::Union(v) if v.len() == 1 => v[0].clone(),
            _ => Slice::Whole,
        };
        let slices: Vec<Slice> = match per {
            None => vec![base],
            Some(field) => {
                let values: Vec<Slice> = self
                    .store
                    .tags()?
                    .into_iter()
                    .filter_map(|t| {
                        t.split_once(':')
                            .map(|(f, v)| (f.to_string(), v.to_string()))
                    })
                    .filter(|(f, _)| f == field)
                    .map(|(f, v)| Slice::tag(&f, &v))
                    // `ON` with `PER` narrows the strata to the named values (the planner has
                    // checked they are values of the same field).
                    .filter(|s| match &plan.shape {
                        Shape::Union(on) => on.contains(s),
                        _ => true,
                    })
                    .collect();
                if values.is_empty() {
                    return Err(StoreError::Query(format!(
                        "no tag values for '{field}' (tag fields: {})",
                        self.store.config().tag_fields.join(", ")
                    ))
                    .into());
                }
                values
            }
        };
        let mut rows = Vec::new();
        let mut buckets = 0;
        for s in &slices {
            let (events, b) = self.store.sample(s, &plan.range, n, &mut self.rng)?;
            buckets = buckets.max(b);
            for e in events {
                // Times as RFC 3339, the form ingest reads back, rather than bare milliseconds.
                let time = chrono::DateTime::from_timestamp_millis(e.time).map_or_else(
                    || serde_json::json!(e.time),
                    |t| serde_json::json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()),
                );
                let mut row = serde_json::json!({"time": time, self.store.config().item_field.clone(): e.item});
                for (f, v) in &e.tags {
                    row[f] = serde_json::Value::String(v.clone());
                }
                if !e.extra.is_empty() {
                    // serde_json's arbitrary_precision (Cargo.toml) keeps each number's text
                    // here: an amount of 30 digits comes back as written, not through f64.
                    if let Ok(serde_json::Value::Object(extra)) =
                        serde_json::from_str::<serde_json::Value>(&e.extra)
                    {
                        for (k, v) in extra {
                            row[k] = v;
                        }
                    }
                }
                if per.is_some() {
                    row["stratum"] = serde_json::Value::String(s.name());
                }
                rows.push(row);
            }
        }
        let got = rows.len();
        let mut a =
            Answer::list(Kind::Sample, rows, "reservoir", false, buckets).with_detail(format!(
                "reservoir, uniform over events{}",
                if per.is_some() {
                    " within each stratum"
                } else {
                    ""
                }
            ));
        if per.is_none() && got < n {
            a = a.note(format!("only {got} events in {}", plan.range_label));
        }
        a = a.note("a sample answers questions about events; it cannot count distinct items (use DISTINCT)");
        Ok(a)
    }
}

fn range_of(s: &Statement) -> Option<&super::ast::Range> {
    match s {
        Statement::Distinct { range, .. }
        | Statement::Seen { range, .. }
        | Statement::CountValue { range, .. }
        | Statement::Count { range, .. }
        | Statement::Top { range, .. }
        | Statement::Sample { range, .. } => Some(range),
        _ => None,
    }
}

fn no_buckets(kind: Kind, method: &str, label: &str) -> Answer {
    Answer::number(kind, 0.0, 0.0, 0.0, method, true, 0)
        .note(format!("no buckets in {label}: nothing was ingested there"))
}

/// A compact, unambiguous key for an item (form byte + bytes).
fn item_key(item: &ItemRef<'_>, out: &mut Vec<u8>) {
    out.clear();
    match item {
        ItemRef::Wallet(b) => {
            out.push(0);
            out.extend_from_slice(b);
        }
        ItemRef::Raw(b) => {
            out.push(1);
            out.extend_from_slice(b);
        }
    }
}

/// The Theta sketches one statement has read, by slice, and what reading them cost.
#[derive(Default)]
struct ThetaReads {
    merged: FxHashMap<Slice, Theta>,
    buckets: usize,
    bytes: usize,
}

/// Evaluates a set shape on events: each referenced tag is a bit; bit 0 is "in the stream".
///
/// The shape is compiled once into tests on those bits, the tags of a chain folded into one
/// mask, so `a AND b AND ...` costs one comparison per event however long it is; a test with
/// groups remembers its answer per mask (events carry few tag combinations).
struct SetEval {
    /// (tag id, bit) for matching events' tags.
    ids: Vec<(u32, u64)>,
    test: Test,
    /// Whether `test` is worth remembering per mask (it has groups to walk).
    memoise: bool,
    memo: std::cell::RefCell<FxHashMap<u64, bool>>,
}

/// A set shape compiled to bit tests on an event's (or a wallet's) tag mask.
enum Test {
    /// Every bit of the mask set, and every sub-test true (`AND`; a tag alone; the whole stream).
    All(u64, Vec<Test>),
    /// Some bit of the mask set, or some sub-test true (`OR`).
    Any(u64, Vec<Test>),
    /// The first true and the second false (`EXCEPT`).
    Minus(Box<Test>, Box<Test>),
    /// In the stream and the test false (`NOT`).
    Not(Box<Test>),
}

impl Test {
    fn holds(&self, mask: u64) -> bool {
        match self {
            Test::All(bits, subs) => mask & bits == *bits && subs.iter().all(|t| t.holds(mask)),
            Test::Any(bits, subs) => mask & bits != 0 || subs.iter().any(|t| t.holds(mask)),
            Test::Minus(a, b) => a.holds(mask) && !b.holds(mask),
            Test::Not(a) => mask & 1 != 0 && !a.holds(mask),
        }
    }

    /// Compiles `e`; `groups` counts the nodes that are more than a mask comparison.
    fn of(e: &SetExpr, bits: &FxHashMap<Slice, u64>, groups: &mut usize) -> Test {
        let bit = |field: &str, value: &str| bits.get(&Slice::tag(field, value)).copied();
        let split = |v: &[SetExpr], groups: &mut usize| {
            let (mut mask, mut subs) = (0, Vec::new());
            for x in v {
                match x {
                    SetExpr::Tag { field, value } => match bit(field, value) {
                        Some(b) => mask |= b,
                        None => subs.push(Test::Any(0, Vec::new())),
                    },
                    other => subs.push(Test::of(other, bits, groups)),
                }
            }
            (mask, subs)
        };
        let t = match e {
            SetExpr::Tag { field, value } => match bit(field, value) {
                Some(b) => Test::All(b, Vec::new()),
                None => Test::Any(0, Vec::new()),
            },
            // Nothing to intersect: documented (ast.rs) as selecting nothing.
            SetExpr::And(v) if v.is_empty() => Test::Any(0, Vec::new()),
            SetExpr::And(v) => {
                let (m, subs) = split(v, groups);
                Test::All(m, subs)
            }
            SetExpr::Or(v) => {
                let (m, subs) = split(v, groups);
                Test::Any(m, subs)
            }
            SetExpr::Except(base, minus) => {
                let base = Test::of(base, bits, groups);
                let (m, subs) = split(minus, groups);
                Test::Minus(Box::new(base), Box::new(Test::Any(m, subs)))
            }
            SetExpr::Not(a) => Test::Not(Box::new(Test::of(a, bits, groups))),
        };
        if !matches!(&t, Test::All(_, s) | Test::Any(_, s) if s.is_empty()) {
            *groups += 1;
        }
        t
    }
}

/// Masks remembered per `SetEval`; past this many, the rest are evaluated each time.
const MEMO_LIMIT: usize = 1 << 16;

impl SetEval {
    fn new(store: &Store, shape: &Shape) -> Result<Self, QueryError> {
        fn collect(e: &SetExpr, out: &mut Vec<Slice>) {
            match e {
                SetExpr::Tag { field, value } => out.push(Slice::tag(field, value)),
                SetExpr::And(v) | SetExpr::Or(v) => v.iter().for_each(|e| collect(e, out)),
                SetExpr::Except(a, v) => {
                    collect(a, out);
                    v.iter().for_each(|e| collect(e, out));
                }
                SetExpr::Not(a) => collect(a, out),
            }
        }
        let mut slices = Vec::new();
        match shape {
            Shape::Whole => {}
            Shape::Union(v) => slices.extend(v.iter().cloned()),
            Shape::Expr(e) => collect(e, &mut slices),
        }
        let mut ids = Vec::new();
        let mut bits: FxHashMap<Slice, u64> = FxHashMap::default();
        for s in slices {
            if bits.contains_key(&s) {
                continue;
            }
            if bits.len() == 63 {
                return Err(StoreError::Query(
                    "a set expression may name at most 63 distinct tags".into(),
                )
                .into());
            }
            let bit = 1u64 << (bits.len() + 1);
            ids.push((store.tag_id_of(&s)?, bit));
            bits.insert(s, bit);
        }
        let mut groups = 0;
        let test = match shape {
            Shape::Whole => Test::All(1, Vec::new()),
            Shape::Union(_) => Test::Any(ids.iter().fold(0, |m, &(_, b)| m | b), Vec::new()),
            Shape::Expr(e) => Test::of(e, &bits, &mut groups),
        };
        Ok(SetEval {
            ids,
            test,
            memoise: groups > 2,
            memo: Default::default(),
        })
    }

    fn mask(&self, ev: &LogEvent<'_>) -> u64 {
        let mut m = 1;
        for &t in ev.tag_ids() {
            for &(id, bit) in &self.ids {
                if id == t {
                    m |= bit;
                }
            }
        }
        m
    }

    fn holds(&self, mask: u64) -> bool {
        if !self.memoise {
            return self.test.holds(mask);
        }
        let Ok(mut memo) = self.memo.try_borrow_mut() else {
            return self.test.holds(mask);
        };
        if let Some(&h) = memo.get(&mask) {
            return h;
        }
        let h = self.test.holds(mask);
        if memo.len() < MEMO_LIMIT {
            memo.insert(mask, h);
        }
        h
    }
}

fn explain(plan: &Plan, answer: &Answer) -> Answer {
    let mut lines = vec![
        format!("statement: {}", plan.statement),
        format!(
            "structure: {}{}",
            answer.detail,
            if plan.exact { " (EXACT requested)" } else { "" }
        ),
        format!("range: {}", plan.range_label),
        format!("buckets read: {}", answer.buckets),
        format!("sketch bytes read: {}", thousands(answer.bytes_read as f64)),
    ];
    if let (Some(lo), Some(hi), super::answer::Value::Number(v)) =
        (answer.lower, answer.upper, &answer.value)
    {
        if !answer.exact && *v > 0.0 {
            lines.push(format!(
                "expected error: 95% interval ±{:.1}% of the value",
                (hi - lo) / 2.0 / v * 100.0
            ));
        } else if answer.exact {
            lines.push("expected error: none (exact)".into());
        }
    }
    let fallback = answer.notes.iter().find(|n| n.contains("exact"));
    lines.push(format!(
        "exact fallback: {}",
        fallback.map_or("not needed".to_string(), |n| n.clone())
    ));
    let mut a = Answer::text(
        Kind::Explain,
        lines.join("\n"),
        &answer.method,
        answer.exact,
        answer.buckets,
    );
    a.detail = "plan".into();
    a
}

/// A probability as a percentage with three significant digits, so a lightly filled filter's
/// tiny rate reads as 0.000114%, not 0.000%.
fn percent(p: f64) -> String {
    let pct = p * 100.0;
    if pct <= 0.0 || !pct.is_finite() {
        return format!("{pct}%");
    }
    let decimals = (2 - pct.log10().floor() as i32).clamp(0, 12) as usize;
    format!("{pct:.decimals$}%")
}

#[cfg(test)]
mod tests {
    use super::{SetExpr, Slice, Test};
    use proptest::prelude::*;
    use rustc_hash::FxHashMap;

    fn tag(v: &str) -> SetExpr {
        SetExpr::Tag {
            field: "chain".into(),
            value: v.into(),
        }
    }

    /// Bits 1, 2, 3 for chain:a, chain:b, chain:c (bit 0 is "in the stream").
    fn bits() -> FxHashMap<Slice, u64> {
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, v)| (Slice::tag("chain", v), 2u64 << i))
            .collect()
    }

    #[test]
    fn a_flat_chain_compiles_to_one_mask_test_per_side() {
        // 10,000 ANDs minus 5,000 EXCEPTs: two mask comparisons per event, not 15,000.
        let e = SetExpr::Except(
            Box::new(SetExpr::And(vec![tag("a"); 10_000])),
            (0..5_000)
                .map(|i| tag(if i % 2 == 0 { "b" } else { "c" }))
                .collect(),
        );
        let mut groups = 0;
        let t = Test::of(&e, &bits(), &mut groups);
        assert_eq!(groups, 1);
        let Test::Minus(base, minus) = &t else {
            panic!("not a difference")
        };
        assert!(matches!(&**base, Test::All(2, s) if s.is_empty()));
        assert!(matches!(&**minus, Test::Any(12, s) if s.is_empty()));
        assert!(t.holds(1 | 2));
        assert!(!t.holds(1 | 2 | 4) && !t.holds(1 | 2 | 8) && !t.holds(1 | 4));
    }

    /// The meaning of an expression on a mask, straight from its definition.
    fn meaning(e: &SetExpr, mask: u64) -> bool {
        let bit = |v: &str| 2u64 << (v.as_bytes()[0] - b'a');
        match e {
            SetExpr::Tag { value, .. } => mask & bit(value) != 0,
            SetExpr::And(v) => !v.is_empty() && v.iter().all(|e| meaning(e, mask)),
            SetExpr::Or(v) => v.iter().any(|e| meaning(e, mask)),
            SetExpr::Except(a, v) => meaning(a, mask) && !v.iter().any(|e| meaning(e, mask)),
            SetExpr::Not(a) => mask & 1 != 0 && !meaning(a, mask),
        }
    }

    fn arb_expr() -> impl Strategy<Value = SetExpr> {
        prop_oneof![Just(tag("a")), Just(tag("b")), Just(tag("c"))].prop_recursive(
            4,
            32,
            4,
            |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..5).prop_map(SetExpr::And),
                    proptest::collection::vec(inner.clone(), 0..5).prop_map(SetExpr::Or),
                    (
                        inner.clone(),
                        proptest::collection::vec(inner.clone(), 0..4)
                    )
                        .prop_map(|(a, v)| SetExpr::Except(Box::new(a), v)),
                    inner.prop_map(|a| SetExpr::Not(Box::new(a))),
                ]
            },
        )
    }

    proptest! {
        #[test]
        fn compiled_tests_mean_what_the_expression_means(e in arb_expr()) {
            let mut groups = 0;
            let t = Test::of(&e, &bits(), &mut groups);
            for mask in 0..16u64 {
                prop_assert_eq!(t.holds(mask), meaning(&e, mask), "{:?} on {:b}", e, mask);
            }
        }
    }

    #[test]
    fn percentages_keep_three_significant_digits() {
        assert_eq!(super::percent(0.01), "1.00%");
        assert_eq!(super::percent(0.000_114_2), "0.0114%");
        assert_eq!(super::percent(0.5), "50.0%");
        assert_eq!(super::percent(0.0), "0%");
    }
}
