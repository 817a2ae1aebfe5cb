//! The executor: runs a [`Plan`] against the store and builds the [`Answer`]. It makes no choice
//! of structure (the planner did) except the one SPEC.md gives it: when an approximate answer's
//! interval is too wide and the raw events are there, it answers exactly and says so.

use super::answer::{thousands, Answer, Kind, Row, RowBuilder};
use super::ast::{SetExpr, Statement};
use super::parser::{parse, SyntaxError};
use super::plan::{plan_with, Context, Method, Plan, RangeFit, RawLog, Refusal, Shape};
use crate::sketch::{HyperLogLog, Sketch, Theta};
use crate::store::log::{ItemRef, LogEvent};
use crate::store::{Event, ImportedSets, Slice, Snapshot, Store, StoreError, TimeRange};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Everything that can stop a query.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Syntax(#[from] SyntaxError),
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The session's cancel flag ([`Session::cancel_handle`]) was set while the query ran.
    #[error("cancelled")]
    Cancelled,
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

/// The store's raw event log as the planner sees it: what retention has kept is read once,
/// before planning, so the planner itself never meets a store error.
struct StoreLog<'a, 's> {
    snap: &'a Snapshot<'s>,
    from: Option<i64>,
}

impl RawLog for StoreLog<'_, '_> {
    fn retained(&self, range: &TimeRange) -> bool {
        self.from
            .is_none_or(|from| range.start.is_some_and(|s| s >= from))
    }
    fn retained_from(&self) -> Option<i64> {
        self.from
    }
    fn scan_size(&self, range: &TimeRange) -> Result<u64, String> {
        self.snap
            .count(&Slice::Whole, range)
            .map(|(n, _)| n)
            .map_err(|e| e.to_string())
    }
    fn imported(&self, slices: &[Slice], range: &TimeRange) -> Result<ImportedSets, String> {
        let mut all = ImportedSets::default();
        for s in slices {
            all += self.snap.imported_sets(s, range);
        }
        Ok(all)
    }
}

/// A conversation with a store: the clock (`SET NOW`), fallback options, the random source
/// for samples and a cancel flag. `Store::query` uses a fresh one per call.
pub struct Session<'s> {
    pub store: &'s Store,
    /// What the running statement reads: one consistent state of `store`, taken as it starts.
    snap: Snapshot<'s>,
    pub now: Option<i64>,
    pub options: Options,
    rng: StdRng,
    /// Set (by another thread or a signal handler) to stop the running query.
    cancel: Arc<AtomicBool>,
}

/// A [`Session`]'s clock, options, sample generator and cancel flag, apart from any store
/// handle ([`Session::detach`]).
pub struct SessionState {
    now: Option<i64>,
    options: Options,
    rng: StdRng,
    cancel: Arc<AtomicBool>,
}

impl Default for SessionState {
    fn default() -> Self {
        SessionState {
            now: None,
            options: Options::default(),
            rng: StdRng::from_os_rng(),
            cancel: Arc::default(),
        }
    }
}

impl SessionState {
    /// A new session's state whose samples are drawn reproducibly from `seed`, as
    /// [`Session::with_seed`].
    pub fn with_seed(seed: u64) -> Self {
        SessionState {
            rng: StdRng::seed_from_u64(seed),
            ..SessionState::default()
        }
    }

    /// Makes `flag` the session's cancel flag ([`Session::set_cancel_handle`]).
    pub fn set_cancel_handle(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = flag;
    }

    /// The session's clock ([`Session::now`] field).
    pub fn set_now(&mut self, now: Option<i64>) {
        self.now = now;
    }

    /// The session again, on `store`, going on where it left off (the same clock and the next
    /// draws of the same generator).
    pub fn attach(self, store: &Store) -> Session<'_> {
        Session {
            store,
            snap: store.last_snapshot(),
            now: self.now,
            options: self.options,
            rng: self.rng,
            cancel: self.cancel,
        }
    }
}

impl<'s> Session<'s> {
    pub fn new(store: &'s Store) -> Self {
        Session {
            store,
            snap: store.last_snapshot(),
            now: None,
            options: Options::default(),
            rng: StdRng::from_os_rng(),
            cancel: Arc::default(),
        }
    }

    /// The flag that cancels this session's running query: store `true` in it (from another
    /// thread, a timer, or a signal handler such as `signal_hook::flag::register`) and the
    /// query returns [`QueryError::Cancelled`] within a fraction of a second: it is checked
    /// between log blocks of a scan (a few thousand events) and between the sketches a query
    /// merges. Each query clears the flag as it starts, so a cancel meant for one query never
    /// stops the next, and the session goes on as before.
    pub fn cancel_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Makes `flag` this session's cancel flag (to share one flag among sessions, or one
    /// registered with a signal handler before the session was made).
    pub fn set_cancel_handle(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = flag;
    }

    /// `Err(Cancelled)` once the cancel flag is set.
    fn check(&self) -> Result<(), QueryError> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(QueryError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// [`Store::scan_until`] stopped by the cancel flag.
    fn scan(
        &self,
        slice: &Slice,
        range: &TimeRange,
        each: impl FnMut(&LogEvent<'_>),
    ) -> Result<u64, QueryError> {
        let cancel = &self.cancel;
        self.snap
            .scan_until(slice, range, &|| cancel.load(Ordering::Relaxed), each)?
            .ok_or(QueryError::Cancelled)
    }

    /// The session's state without its store: to keep it across statements while the store
    /// may be closed and opened again (a REPL that lets a writer have the store between its
    /// statements), and [`SessionState::attach`] it to the handle there is then.
    pub fn detach(self) -> SessionState {
        SessionState {
            now: self.now,
            options: self.options,
            rng: self.rng,
            cancel: self.cancel,
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
        // A store that lowercases its items is asked about them lowercased too.
        let mut inner = &mut st;
        loop {
            match inner {
                Statement::Exact(s) | Statement::Explain(s) => inner = &mut **s,
                Statement::Seen { value, .. } | Statement::CountValue { value, .. } => {
                    *value = self.store.config().normalise_item(value).into_owned();
                    break;
                }
                _ => break,
            }
        }
        self.plan(&st)
    }

    /// Plans a statement at the session's clock against what the raw event log holds now.
    fn plan(&self, st: &Statement) -> Result<Plan, QueryError> {
        let config = self.store.config();
        let raw = StoreLog {
            snap: &self.snap,
            from: self.snap.raw_events_retained_from(),
        };
        let ctx = Context {
            now: self.now(),
            width: config.bucket,
            item_field: &config.item_field,
            raw: &raw,
            scan_budget: self.options.scan_budget,
            exact_figures: self.options.exact_fallback,
        };
        Ok(plan_with(st, &ctx)?)
    }

    /// Parses, plans and runs one statement.
    pub fn query(&mut self, text: &str) -> Result<Answer, QueryError> {
        self.cancel.store(false, Ordering::Relaxed);
        let plan = self.prepare(text)?;
        self.run_plan(&plan)
    }

    /// Runs a prepared plan. It is planned again first: a relative range (`FROM today`) is
    /// resolved against the current clock, and what the raw log holds may have changed.
    pub fn run(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        self.cancel.store(false, Ordering::Relaxed);
        self.run_plan(plan)
    }

    /// Runs a plan on a snapshot taken now; again on a fresh one if a checkpoint rewrote a
    /// set it read since the snapshot was published (see [`Store::read`]).
    fn run_plan(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        self.snap = self.store.snapshot()?;
        for _ in 0..crate::store::STALE_RETRIES {
            match self.run_on_snapshot(plan) {
                Err(QueryError::Store(StoreError::Stale)) => {
                    self.snap = self.store.newer_snapshot(&self.snap)?;
                }
                other => return other,
            }
        }
        self.run_on_snapshot(plan).map_err(|e| match e {
            QueryError::Store(StoreError::Stale) => StoreError::stale_too_often().into(),
            e => e,
        })
    }

    fn run_on_snapshot(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        let plan = self.plan(&plan.source())?;
        let scans = matches!(plan.method, Method::Scan | Method::ScanSample);
        if scans && !self.snap.raw_events_retained(&plan.range)? {
            // Retention ran between planning and now.
            return Err(StoreError::Query(format!(
                "raw events of {} expired while the query was planned; ask again",
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
            other => super::meta::answer(&self.snap, other)?,
        };
        let mut answer = answer;
        if plan.method != Method::Meta && answer.range.is_none() {
            answer.range = Some(plan.range_label.clone());
        }
        if let RangeFit::Widened { .. } = plan.fit {
            answer = self.widened(&plan, answer)?;
        }
        Ok(if plan.explain {
            explain(&plan, &answer)
        } else {
            answer
        })
    }

    /// Why a sketch found nothing: "no buckets" only when nothing at all was ingested in the
    /// range; otherwise the events of the slices read were not there.
    fn nothing_in(&self, plan: &Plan) -> Result<String, QueryError> {
        let label = &plan.range_label;
        if self.snap.count(&Slice::Whole, &plan.range)?.1 == 0 {
            return Ok(format!("no buckets in {label}: nothing was ingested there"));
        }
        let what = match &plan.shape {
            Shape::Whole => "events".to_string(),
            Shape::Union(v) => {
                let names: Vec<String> = v.iter().map(Slice::name).collect();
                format!("{} events", names.join(" or "))
            }
            Shape::Expr(e) => format!("events of {e}"),
        };
        Ok(format!("no {what} in {label}"))
    }

    /// An answer for the covering buckets of a range that cuts them (the planner could not have
    /// the raw events answer): never exact; a note says which buckets answered and why, and a
    /// number's bounds hold for the range as asked (the lower one from the buckets wholly inside
    /// it for COUNT, else 0).
    fn widened(&self, plan: &Plan, mut a: Answer) -> Result<Answer, QueryError> {
        let RangeFit::Widened {
            asked_label,
            inner,
            why,
            ..
        } = &plan.fit
        else {
            return Ok(a);
        };
        if matches!(plan.statement, Statement::Sample { .. }) {
            // sample() kept only the rows inside the asked range and said so.
            return Ok(a);
        }
        a.exact = false;
        if plan.method == Method::EventCounts {
            a.method = "bucket-counts".into();
            a.detail = "event counts of whole buckets".into();
            // Both bounds below are counts, not estimates.
            a.confidence = 1.0;
        }
        let head = format!(
            "{asked_label} cuts buckets the sketches only know whole, and {why}: this answers for the covering buckets, {}",
            plan.range_label
        );
        let note = match a.value {
            super::answer::Value::Number(v) => {
                let lower = match (&plan.statement, inner) {
                    (Statement::Count { .. }, Some(r)) => {
                        self.snap.count(&one_slice(&plan.shape), r)?.0 as f64
                    }
                    _ => 0.0,
                };
                let upper = a.upper.unwrap_or(v).max(v);
                a.lower = Some(lower);
                a.upper = Some(upper);
                format!(
                    "{head}; for {asked_label} the value lies between {} and {}",
                    thousands(lower),
                    thousands(upper)
                )
            }
            super::answer::Value::Text(ref t) if t == "no" => {
                format!("{head}; 'no' holds for {asked_label} too")
            }
            super::answer::Value::Text(ref t) if t == "yes" => {
                // An exact form holds the item for the covering buckets, which says nothing
                // certain about the part of them that was asked.
                a.value = super::answer::Value::Text("maybe".into());
                format!("{head}; the covering buckets hold the item, so it may or may not occur in {asked_label}")
            }
            super::answer::Value::List(ref mut rows) => {
                // Counts of the covering buckets (exact ones too): for the asked part of them an
                // item's count lies between 0 and that.
                for row in rows.iter_mut() {
                    let mut v = row.value().clone();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("exact".into(), serde_json::json!(false));
                        o.insert("lower".into(), serde_json::json!(0));
                        *row = Row::of(v);
                    }
                }
                format!("{head}; for {asked_label} each count lies between 0 and the one given")
            }
            _ => head,
        };
        Ok(a.note(note))
    }

    fn events_in(&self, range: &TimeRange) -> Result<u64, QueryError> {
        Ok(self.snap.count(&Slice::Whole, range)?.0)
    }

    /// Whether an exact scan may replace an approximate answer, or why not.
    fn may_scan(&self, range: &TimeRange) -> Result<Result<u64, String>, QueryError> {
        if !self.snap.raw_events_retained(range)? {
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
            self.check()?;
            let m = self.snap.merged_hll(s, range)?;
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
        self.check()?;
        let m = self.snap.merged_theta(slice, range)?;
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
                    let note = self.nothing_in(plan)?;
                    return Ok(empty(Kind::Distinct, "theta", note));
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
                    None => {
                        let note = self.nothing_in(plan)?;
                        return Ok(empty(Kind::Distinct, "hll", note));
                    }
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
        let sets = |n: usize| {
            if n == 1 {
                "a set".to_string()
            } else {
                format!("{n} sets")
            }
        };
        let approx = if plan.imported_unread > 0 {
            let (family, reader) = if plan.method == Method::Theta {
                ("HLL", "DISTINCT of one tag or of tags joined by OR")
            } else {
                ("Theta", "DISTINCT with AND, EXCEPT or NOT")
            };
            approx.note(format!(
                "{} of the range also hold{} imported {family} sketches, which only {reader} reads",
                sets(plan.imported_unread),
                if plan.imported_unread == 1 { "s" } else { "" }
            ))
        } else {
            approx
        };
        if plan.imported > 0 {
            // The raw events lack the imported items: no exact fallback may replace this.
            let n = plan.imported;
            return Ok(approx.note(format!(
                "includes sketches imported from DataSketches images into {} of the range; \
                 COUNT, SEEN, TOP and SAMPLE know nothing of their items, nor does an exact \
                 answer from the raw events",
                if n == 1 {
                    "a set".to_string()
                } else {
                    format!("{n} sets")
                }
            )));
        }
        self.maybe_fallback(plan, approx, |s| s.exact_distinct(plan))
    }

    /// Scans the range once, tracking per item which of the expression's tags it was seen with.
    /// Wallets (the common case) are keyed by their 20 bytes inline, so a scan of millions of
    /// events allocates once per distinct raw item at most.
    fn exact_distinct(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        let eval = SetEval::new(&self.snap, &plan.shape)?;
        let mut wallets: FxHashMap<[u8; 20], u64> = FxHashMap::default();
        let mut raw: FxHashMap<Box<[u8]>, u64> = FxHashMap::default();
        let decoded = self.scan(&Slice::Whole, &plan.range, |ev| {
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
        let buckets = self.snap.count(&Slice::Whole, &plan.range)?.1;
        Ok(Answer::exact(Kind::Distinct, n, buckets)
            .with_detail(format!("scan of {} events", thousands(decoded as f64))))
    }

    fn seen(&mut self, plan: &Plan, value: &str) -> Result<Answer, QueryError> {
        if plan.method == Method::Scan {
            let eval = SetEval::new(&self.snap, &plan.shape)?;
            let mut want = Vec::new();
            let mut b = [0u8; 20];
            item_key(&Store::item_key(value, &mut b), &mut want);
            let mut buf = Vec::with_capacity(64);
            let mut found = false;
            let mut mask = 0;
            self.scan(&Slice::Whole, &plan.range, |ev| {
                item_key(&ev.item, &mut buf);
                if buf == want {
                    mask |= eval.mask(ev);
                    found = true;
                }
            })?;
            let yes = found && eval.holds(mask);
            let buckets = self.snap.count(&Slice::Whole, &plan.range)?.1;
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
        let mut present = false;
        let mut all_exact = true;
        let mut fingerprints = 0u64;
        let mut clear = 1.0;
        let mut buckets = 0;
        let mut bytes = 0;
        let mut saturated = false;
        for s in &slices {
            self.check()?;
            let m = self.snap.membership(s, &plan.range, value)?;
            maybe |= m.maybe;
            present |= m.present;
            all_exact &= m.all_exact;
            fingerprints += m.fingerprints;
            clear *= 1.0 - m.false_positive_rate;
            buckets += m.buckets;
            bytes += m.bytes;
            saturated |= m.saturated;
        }
        let fpr = 1.0 - clear;
        let method = plan.method.name();
        // The filters' exact forms (item fingerprints) answer "yes" for certain, short of a
        // 64-bit fingerprint collision.
        let exact_method = format!("{method}-exact");
        let collision = fingerprints as f64 / 2f64.powi(64);
        let mut a = if present {
            let mut a = Answer::text(Kind::Seen, "yes", &exact_method, true, buckets);
            a.false_positive_rate = Some(collision);
            a.with_detail(format!(
                "{exact_method}: the item's fingerprint is held, collision chance {collision:.1e}"
            ))
            .note(format!(
                "'yes' from the exact form (item fingerprints): an item never seen would be answered 'yes' only if its 64-bit fingerprint equalled one of the {} held, probability at most {collision:.1e}",
                thousands(fingerprints as f64)
            ))
        } else if maybe {
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
        } else if all_exact {
            Answer::text(Kind::Seen, "no", &exact_method, true, buckets)
                .with_detail(format!("{exact_method}: 'no' is certain"))
        } else {
            Answer::text(Kind::Seen, "no", method, false, buckets)
                .with_detail(format!("{method}: 'no' is certain"))
        };
        a.bytes_read = bytes;
        if saturated {
            a = a.note("a Bloom filter read is loaded past its capacity: its false-positive rate is above what it was sized for");
        }
        if buckets == 0 && plan.method == Method::Bloom {
            let note = self.nothing_in(plan)?;
            a = a.note(note);
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
        let mut exact = true;
        for s in &slices {
            self.check()?;
            let f = self.snap.frequency(s, &plan.range, value)?;
            est += f.estimate;
            bound += f.bound;
            buckets += f.buckets;
            bytes += f.bytes;
            delta = f.delta;
            exact &= f.exact;
        }
        if buckets == 0 {
            let note = self.nothing_in(plan)?;
            return Ok(empty(Kind::Count, "countmin", note));
        }
        let e = est as f64;
        if exact {
            // Every bucket's Count-Min (and their merge) still holds exact counts.
            let mut a = Answer::number(Kind::Count, e, e, e, "countmin-exact", true, buckets)
                .with_detail("countmin-exact: the exact count kept while the set is small");
            a.bytes_read = bytes;
            return Ok(a);
        }
        let mut approx = Answer::number(
            Kind::Count,
            e,
            // Counts are whole numbers, so the truth is at least the next one up.
            (e - bound).max(0.0).ceil(),
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
        let eval = SetEval::new(&self.snap, &plan.shape)?;
        let mut want = Vec::new();
        let mut b = [0u8; 20];
        item_key(&Store::item_key(value, &mut b), &mut want);
        let mut buf = Vec::with_capacity(64);
        let mut n = 0u64;
        let decoded = self.scan(&Slice::Whole, &plan.range, |ev| {
            item_key(&ev.item, &mut buf);
            if buf == want && eval.holds(eval.mask(ev)) {
                n += 1;
            }
        })?;
        let buckets = self.snap.count(&Slice::Whole, &plan.range)?.1;
        Ok(Answer::exact(Kind::Count, n as f64, buckets)
            .with_detail(format!("scan of {} events", thousands(decoded as f64))))
    }

    fn count(&mut self, plan: &Plan) -> Result<Answer, QueryError> {
        if plan.method == Method::EventCounts {
            let slice = match &plan.shape {
                Shape::Union(v) if v.len() == 1 => v[0].clone(),
                _ => Slice::Whole,
            };
            let (n, buckets) = self.snap.count(&slice, &plan.range)?;
            let a = Answer::exact(Kind::Count, n as f64, buckets).with_detail("event counts");
            return Ok(if buckets == 0 {
                let note = self.nothing_in(plan)?;
                a.note(note)
            } else {
                a
            });
        }
        // The planner checked that the raw events are there (and, unless EXACT was asked, that
        // the scan fits the budget).
        let eval = SetEval::new(&self.snap, &plan.shape)?;
        let mut n = 0u64;
        let decoded = self.scan(&Slice::Whole, &plan.range, |ev| {
            if eval.holds(eval.mask(ev)) {
                n += 1;
            }
        })?;
        let buckets = self.snap.count(&Slice::Whole, &plan.range)?.1;
        Ok(Answer::exact(Kind::Count, n as f64, buckets)
            .with_detail(format!("scan of {} events", thousands(decoded as f64))))
    }

    fn top(&mut self, plan: &Plan, n: u64) -> Result<Answer, QueryError> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if plan.method == Method::Scan {
            let eval = SetEval::new(&self.snap, &plan.shape)?;
            let mut counts: HashMap<String, u64> = HashMap::new();
            self.scan(&Slice::Whole, &plan.range, |ev| {
                if eval.holds(eval.mask(ev)) {
                    *counts.entry(ev.item.to_text()).or_insert(0) += 1;
                }
            })?;
            let mut v: Vec<(String, u64)> = counts.into_iter().collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(n);
            let buckets = self.snap.count(&Slice::Whole, &plan.range)?.1;
            let rows = v
                .into_iter()
                .map(|(item, count)| {
                    RowBuilder::new()
                        .field("item", item.into())
                        .field("count", count.into())
                        .field("exact", true.into())
                        .finish()
                })
                .collect();
            return Ok(Answer::list(Kind::Top, rows, "exact", true, buckets).with_detail("scan"));
        }
        let slice = one_slice(&plan.shape);
        let k = self.store.config().sketches.top_k;
        let recount = matches!(plan.recount, Some(Ok(_)));
        let (top, merged) =
            self.snap
                .top(&slice, &plan.range, if recount { k.max(n) } else { n })?;
        let bound = merged.sketch.as_ref().map_or(0.0, |c| c.error_bound());
        if let Some(c) = merged.sketch.as_ref().filter(|c| c.is_exact()) {
            // The merged Count-Min holds every item's exact count: rank them all, no recount.
            let rows = c
                .top(n)
                .into_iter()
                .map(|e| {
                    RowBuilder::new()
                        .field("item", String::from_utf8_lossy(&e.item).into())
                        .field("count", e.estimate.into())
                        .field("lower", e.estimate.into())
                        .field("exact", true.into())
                        .finish()
                })
                .collect();
            let mut a = Answer::list(Kind::Top, rows, "countmin-exact", true, merged.buckets)
                .with_detail(format!(
                    "countmin-exact: the exact counts of all {} items, kept while the set is small",
                    thousands(c.exact_items().unwrap_or(0) as f64)
                ));
            a.bytes_read = merged.bytes;
            return Ok(a);
        }
        let mut a = if recount {
            // Count-Min may rank a quiet item high (all its counters shared with heavy ones), so
            // every candidate is counted again from the raw events and ranked by that count.
            let mut index: FxHashMap<Vec<u8>, usize> = FxHashMap::default();
            let mut key = Vec::with_capacity(64);
            for (i, e) in top.iter().enumerate() {
                let text = String::from_utf8_lossy(&e.item);
                let mut b = [0u8; 20];
                item_key(&Store::item_key(&text, &mut b), &mut key);
                index.insert(key.clone(), i);
            }
            let mut exact = vec![0u64; top.len()];
            let decoded = self.scan(&slice, &plan.range, |ev| {
                item_key(&ev.item, &mut key);
                if let Some(&i) = index.get(&key) {
                    exact[i] += 1;
                }
            })?;
            let mut order: Vec<usize> = (0..top.len()).collect();
            order.sort_by(|&x, &y| {
                exact[y]
                    .cmp(&exact[x])
                    .then_with(|| top[x].item.cmp(&top[y].item))
            });
            order.truncate(n);
            let rows = order
                .into_iter()
                .map(|i| {
                    RowBuilder::new()
                        .field("item", String::from_utf8_lossy(&top[i].item).into())
                        .field("count", exact[i].into())
                        .field("lower", exact[i].into())
                        .field("exact", true.into())
                        .field("estimate", top[i].estimate.into())
                        .finish()
                })
                .collect();
            let item = match &plan.statement {
                Statement::Top { item, .. } => item.as_str(),
                _ => "wallets",
            };
            Answer::list(Kind::Top, rows, "countmin", false, merged.buckets)
                .with_detail(format!(
                    "countmin top-{k} candidates, re-counted exactly from {} raw events",
                    thousands(decoded as f64)
                ))
                .note(format!(
                    "each count is exact, re-counted from the raw events; the candidates are those Count-Min kept, so an item it did not keep could be missing (EXACT TOP {n} {item} counts every event)"
                ))
        } else {
            let rows = top
                .iter()
                .map(|e| {
                    RowBuilder::new()
                        .field("item", String::from_utf8_lossy(&e.item).into())
                        .field("count", e.estimate.into())
                        .field("lower", (e.estimate as f64 - bound).max(0.0).ceil().into())
                        .field("exact", false.into())
                        .finish()
                })
                .collect();
            let a = Answer::list(Kind::Top, rows, "countmin", false, merged.buckets).with_detail(
                format!(
                    "countmin top-{k} candidates, each over by at most {}",
                    thousands(bound)
                ),
            );
            match &plan.recount {
                Some(Err(why)) => a.note(format!(
                    "the counts are Count-Min estimates, never below the truth and over by at most {} each with probability {:.0}%; not re-counted: {why}",
                    thousands(bound),
                    merged.sketch.as_ref().map_or(1.0, |c| 1.0 - c.delta()) * 100.0
                )),
                _ => a,
            }
        };
        a.bytes_read = merged.bytes;
        if n > k {
            a = a.note(format!(
                "only the {k} heaviest candidates are kept per bucket; asked for {n}"
            ));
        }
        Ok(a)
    }

    /// The strata a sample draws from: the plan's one slice, or each value of the `PER` field
    /// (narrowed to the `ON` values), in name order.
    fn strata(&self, plan: &Plan, per: Option<&str>) -> Result<Vec<Slice>, QueryError> {
        let Some(field) = per else {
            return Ok(vec![one_slice(&plan.shape)]);
        };
        let mut names = self.snap.tags();
        names.sort();
        let values: Vec<Slice> = names
            .into_iter()
            .filter_map(|t| {
                t.split_once(':')
                    .map(|(f, v)| (f.to_string(), v.to_string()))
            })
            .filter(|(f, _)| f == field)
            .map(|(f, v)| Slice::tag(&f, &v))
            // `ON` with `PER` narrows the strata to the named values (the planner has checked
            // they are values of the same field).
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
        Ok(values)
    }

    /// A sample row: the event's time (RFC 3339, the form ingest reads back), item, tags, its
    /// stratum under `PER`, then its extra fields spliced in as they were ingested (byte for
    /// byte, in their order). An extra field named like one of the row's own is kept under
    /// `extra.<name>`; extra text that is not a JSON object (a library caller may store any)
    /// comes back whole as the string `extra`.
    fn row_of(&self, e: &Event, stratum: Option<&Slice>) -> Row {
        let time = chrono::DateTime::from_timestamp_millis(e.time).map_or_else(
            || serde_json::json!(e.time),
            |t| serde_json::json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()),
        );
        let mut row = RowBuilder::new()
            .field("time", time)
            .field(&self.store.config().item_field, e.item.clone().into());
        for (f, v) in &e.tags {
            if !row.has(f) {
                row = row.field(f, v.clone().into());
            }
        }
        if let Some(s) = stratum {
            row = row.field("stratum", s.name().into());
        }
        if !e.extra.is_empty() {
            match serde_json::from_str::<RawFields<'_>>(&e.extra) {
                Ok(RawFields(fields)) => {
                    for (k, v) in fields {
                        let key = if row.has(&k) { format!("extra.{k}") } else { k };
                        if !row.has(&key) {
                            row.raw(&key, v);
                        }
                    }
                }
                Err(_) => {
                    let key = if row.has("extra") {
                        "extra.extra"
                    } else {
                        "extra"
                    };
                    row = row.field(key, e.extra.clone().into());
                }
            }
        }
        row.finish()
    }

    fn sample(&mut self, plan: &Plan, n: u64, per: Option<&str>) -> Result<Answer, QueryError> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let k = self.store.config().sketches.reservoir_size;
        if n > k {
            return Err(StoreError::Query(format!(
                "a sample of {n} exceeds the reservoir size {k} of this store; ask for at most {k}"
            ))
            .into());
        }
        let strata = self.strata(plan, per)?;
        let asked = match &plan.fit {
            RangeFit::Widened { asked, .. } => Some(*asked),
            _ => None,
        };
        let (drawn, buckets, how) = if plan.method == Method::ScanSample {
            self.scan_sample(plan, &strata, n)?
        } else {
            // The covering buckets' reservoirs also hold events outside an asked range that cuts
            // them: draw as many as they allow (a uniform sample of the covering events), keep
            // those inside (uniform over the range's events, given how many), then n of those.
            let draw = if asked.is_some() { k } else { n };
            let mut drawn = Vec::new();
            let mut buckets = 0;
            for s in &strata {
                self.check()?;
                let (events, b) = self.snap.sample(s, &plan.range, draw, &mut self.rng)?;
                buckets = buckets.max(b);
                drawn.push(events);
            }
            (drawn, buckets, "reservoir, uniform over events".to_string())
        };
        let mut rows = Vec::new();
        let (mut inside, mut drew) = (0, 0);
        for (s, events) in strata.iter().zip(drawn) {
            drew += events.len();
            let mut events: Vec<Event> = match asked {
                Some(r) => events.into_iter().filter(|e| r.contains(e.time)).collect(),
                None => events,
            };
            inside += events.len();
            if events.len() > n {
                let keep = rand::seq::index::sample(&mut self.rng, events.len(), n);
                let mut keep: Vec<usize> = keep.into_iter().collect();
                keep.sort_unstable();
                events = keep.into_iter().map(|i| events[i].clone()).collect();
            }
            for e in &events {
                rows.push(self.row_of(e, per.map(|_| s)));
            }
        }
        let got = rows.len();
        let mut a = Answer::list(Kind::Sample, rows, plan.method.name(), false, buckets)
            .with_detail(format!(
                "{how}{}",
                if per.is_some() {
                    " within each stratum"
                } else {
                    ""
                }
            ));
        if let RangeFit::Widened {
            asked_label, why, ..
        } = &plan.fit
        {
            a.range = Some(asked_label.clone());
            a = a.note(format!(
                "{asked_label} cuts buckets the sketches only know whole, and {why}: {} events were drawn from the reservoirs of the covering buckets ({}) and the {inside} inside {asked_label} kept{}; the rows are a uniform sample of its events",
                thousands(drew as f64),
                plan.range_label,
                if got < inside { format!(", {got} of them at random") } else { String::new() }
            ));
            if got < n {
                a = a.note(format!("{got} rows, fewer than the {n} asked: the reservoirs hold few events of {asked_label}"));
            }
        } else if per.is_none() && got < n {
            a = a.note(format!("only {got} events in {}", plan.range_label));
        }
        a = a.note("a sample answers questions about events; it cannot count distinct items (use DISTINCT)");
        Ok(a)
    }

    /// Fills one reservoir of `n` per stratum with a single scan of the range's raw events
    /// (Vitter's algorithm R with the session's random source): each subset of `n` of a
    /// stratum's events in the range is equally likely.
    fn scan_sample(
        &mut self,
        plan: &Plan,
        strata: &[Slice],
        n: usize,
    ) -> Result<(Vec<Vec<Event>>, usize, String), QueryError> {
        let ids: Vec<Option<u32>> = strata
            .iter()
            .map(|s| match s {
                Slice::Whole => Ok(None),
                tag => self.snap.tag_id_of(tag).map(Some),
            })
            .collect::<Result<_, _>>()?;
        let mut reservoirs: Vec<(Vec<Event>, u64)> = vec![(Vec::new(), 0); strata.len()];
        let rng = &mut self.rng;
        let cancel = &self.cancel;
        let decoded = self
            .store
            .scan_events_until(
                &Slice::Whole,
                &plan.range,
                &|| cancel.load(Ordering::Relaxed),
                |ev, make| {
                    for (id, (kept, seen)) in ids.iter().zip(reservoirs.iter_mut()) {
                        if id.is_some_and(|id| !ev.tag_ids().contains(&id)) {
                            continue;
                        }
                        *seen += 1;
                        if kept.len() < n {
                            kept.push(make(ev));
                        } else {
                            let j = rng.random_range(0..*seen);
                            if let Some(slot) =
                                usize::try_from(j).ok().and_then(|j| kept.get_mut(j))
                            {
                                *slot = make(ev);
                            }
                        }
                    }
                },
            )?
            .ok_or(QueryError::Cancelled)?;
        let buckets = self.snap.count(&Slice::Whole, &plan.range)?.1;
        let how = format!(
            "reservoir filled by a scan of {} raw events, uniform over the events in {}",
            thousands(decoded as f64),
            plan.range_label
        );
        Ok((
            reservoirs.into_iter().map(|(kept, _)| kept).collect(),
            buckets,
            how,
        ))
    }
}

/// A JSON object's fields in their order, each value as its text.
struct RawFields<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawFields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = RawFields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Self::Value, M::Error> {
                let mut fields = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    fields.push((k, m.next_value::<&'a RawValue>()?));
                }
                Ok(RawFields(fields))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The exact zero of a sketch that has nothing in the range.
fn empty(kind: Kind, method: &str, note: String) -> Answer {
    Answer::number(kind, 0.0, 0.0, 0.0, method, true, 0).note(note)
}

/// The one slice a plan of the whole stream or a single tag reads.
fn one_slice(shape: &Shape) -> Slice {
    match shape {
        Shape::Union(v) if v.len() == 1 => v[0].clone(),
        _ => Slice::Whole,
    }
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
    fn new(store: &Snapshot<'_>, shape: &Shape) -> Result<Self, QueryError> {
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
    ];
    if let RangeFit::Widened { asked_label, .. } = &plan.fit {
        lines.push(format!("asked range: {asked_label}"));
    }
    for r in &plan.reasons {
        lines.push(format!("choice: {r}"));
    }
    lines.extend([
        format!("buckets read: {}", answer.buckets),
        format!("sketch bytes read: {}", thousands(answer.bytes_read as f64)),
    ]);
    if let (Some(lo), Some(hi), super::answer::Value::Number(v)) =
        (answer.lower, answer.upper, &answer.value)
    {
        if !answer.exact && *v > 0.0 {
            lines.push(format!(
                "expected error: {} interval ±{:.1}% of the value",
                match answer.level() {
                    "bounds" => "certain",
                    "99%" => "99%",
                    _ => "95%",
                },
                (hi - lo) / 2.0 / v * 100.0
            ));
        } else if answer.exact {
            lines.push("expected error: none (exact)".into());
        }
    }
    // The notes maybe_fallback writes: taken, or declined and why.
    let fallback = answer
        .notes
        .iter()
        .find(|n| n.starts_with("answered exactly") || n.contains("no exact fallback"));
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
