//! Answers: what a query returns, rendered for people (REPL, CLI) and as JSON (`--json`, the
//! library's serialized form), with the fields SPEC.md lists.
//!
//! Numbers are held as `f64` (estimates have fractions), but every integral number is written
//! to JSON as an integer: `1000`, not `1000.0`, so that tools comparing them (jq) see counts.
//! The rows of a list answer are kept as JSON text ([`Row`]), so what an event carried comes
//! back exactly as it was written.

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use std::fmt;

/// What kind of question an answer answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Distinct,
    Seen,
    Count,
    Top,
    Sample,
    Events,
    Explain,
    Info,
}

/// An answer's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    Text(String),
    /// The rows of `TOP`, `SAMPLE` and `SHOW`.
    List(Vec<Row>),
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Number(x) => number(x, s),
            Value::Text(t) => s.serialize_str(t),
            Value::List(rows) => s.collect_seq(rows),
        }
    }
}

/// One row of a list answer, kept as the JSON text `--json` writes.
///
/// A `SAMPLE` row is built as text with the event's extra fields spliced in as they were
/// ingested, so they come back byte for byte: every digit of a 30-digit amount, `1E5` as `1E5`,
/// the spacing inside a nested object, the fields in their order. (serde_json's
/// `arbitrary_precision` would keep digits too, but Cargo would turn it on for every crate of a
/// service that links this one, changing how its own serde_json code treats numbers.)
///
/// [`Row::json`] is that text. For convenience a row also derefs to a [`serde_json::Value`]
/// read from it (`row["wallet"]`, `row.get("count")`); in that view numbers go through
/// serde_json's own types, so digits past what `f64` holds are rounded, and a number no `f64`
/// holds (`1e400`) appears as its text in a string. Serializing with serde_json writes the text
/// itself.
#[derive(Clone, Debug)]
pub struct Row {
    text: Box<RawValue>,
    value: serde_json::Value,
}

impl Row {
    /// The row's JSON text, as `--json` writes it.
    pub fn json(&self) -> &str {
        self.text.get()
    }

    /// The row read as a `serde_json::Value` (see the type's note on numbers).
    pub fn value(&self) -> &serde_json::Value {
        &self.value
    }

    /// A row of one value (integral numbers written as integers).
    pub fn of(value: serde_json::Value) -> Row {
        let value = integral(&value);
        // A `serde_json::Value` always serializes (its keys are strings).
        let text = serde_json::value::to_raw_value(&value).unwrap_or_default();
        Row { text, value }
    }
}

impl From<serde_json::Value> for Row {
    fn from(v: serde_json::Value) -> Row {
        Row::of(v)
    }
}

impl std::ops::Deref for Row {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        &self.value
    }
}

/// The JSON text, as `serde_json::Value`'s Display writes a value.
impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        self.json() == other.json()
    }
}

/// Compares the row's `serde_json::Value` view, so tests and callers can write
/// `row == json!(...)`.
impl PartialEq<serde_json::Value> for Row {
    fn eq(&self, other: &serde_json::Value) -> bool {
        &self.value == other
    }
}

impl Serialize for Row {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

/// Builds a [`Row`] object field by field, in the order given: values made here are written as
/// serde_json writes them (integral numbers as integers), values spliced in raw as they are.
#[derive(Default)]
pub(crate) struct RowBuilder {
    text: String,
    view: serde_json::Map<String, serde_json::Value>,
}

impl RowBuilder {
    pub(crate) fn new() -> Self {
        RowBuilder::default()
    }

    /// Whether a field of this name is in the row already.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.view.contains_key(key)
    }

    fn key(&mut self, key: &str) {
        self.text.push(if self.text.is_empty() { '{' } else { ',' });
        // A string always serializes.
        self.text
            .push_str(&serde_json::to_string(key).unwrap_or_else(|_| "\"\"".into()));
        self.text.push(':');
    }

    /// A field with a value made here.
    pub(crate) fn field(mut self, key: &str, value: serde_json::Value) -> Self {
        let value = integral(&value);
        self.key(key);
        self.text.push_str(&value.to_string());
        self.view.insert(key.to_string(), value);
        self
    }

    /// A field whose value is JSON text kept as written.
    pub(crate) fn raw(&mut self, key: &str, raw: &RawValue) {
        self.key(key);
        self.text.push_str(raw.get());
        let view = serde_json::from_str(raw.get())
            .unwrap_or_else(|_| serde_json::Value::String(raw.get().to_string()));
        self.view.insert(key.to_string(), view);
    }

    pub(crate) fn finish(mut self) -> Row {
        if self.text.is_empty() {
            self.text.push('{');
        }
        self.text.push('}');
        // Every piece above is JSON, so the whole is; checked all the same, as the text is
        // what users read.
        match RawValue::from_string(self.text) {
            Ok(text) => Row {
                text,
                value: serde_json::Value::Object(self.view),
            },
            Err(_) => Row::of(serde_json::Value::Object(self.view)),
        }
    }
}

/// The largest magnitude written as an integer: beyond 2^63 an `i64` cannot hold it.
const INTEGER_LIMIT: f64 = 9.223_372_036_854_775e18;

/// `x` as an `i64` when it is a whole number an `i64` holds.
fn as_integer(x: f64) -> Option<i64> {
    (x.is_finite() && x.fract() == 0.0 && x.abs() < INTEGER_LIMIT).then_some(x as i64)
}

fn number<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    match as_integer(*x) {
        Some(i) => s.serialize_i64(i),
        None => s.serialize_f64(*x),
    }
}

fn optional_number<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => number(x, s),
        None => s.serialize_none(),
    }
}

/// A JSON value with every integral float (`4984.0`) turned into an integer, at any depth.
pub(crate) fn integral(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        J::Number(n) if n.is_f64() => n
            .as_f64()
            .and_then(as_integer)
            .map_or_else(|| v.clone(), J::from),
        J::Array(a) => J::Array(a.iter().map(integral).collect()),
        J::Object(o) => J::Object(o.iter().map(|(k, v)| (k.clone(), integral(v))).collect()),
        other => other.clone(),
    }
}

/// One statement's answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    pub kind: Kind,
    pub value: Value,
    /// 95% bounds where the method is approximate (Count-Min: at 1 - delta); equal to the value
    /// when exact; absent for answers that are not numbers (SEEN reports its false-positive
    /// rate in `notes` instead).
    #[serde(serialize_with = "optional_number")]
    pub lower: Option<f64>,
    #[serde(serialize_with = "optional_number")]
    pub upper: Option<f64>,
    /// On a `SEEN` "maybe" from a Bloom filter: the probability that a never-seen item would
    /// also be answered "maybe" (compounded over the buckets read). Serialized as `fpr`.
    #[serde(rename = "fpr", skip_serializing_if = "Option::is_none")]
    pub false_positive_rate: Option<f64>,
    /// Which structure answered: hll, theta, bloom, scalable-bloom, countmin, reservoir, exact.
    pub method: String,
    pub exact: bool,
    /// Buckets read.
    pub buckets: usize,
    /// The time range the answer is for, in words (`since 2026-10-01`, `last 24 hours, …`);
    /// when a range had to be widened to whole buckets, the wider one. Absent for statements
    /// about the store rather than the stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// Fallbacks taken, refusals explained, saturation warnings.
    pub notes: Vec<String>,
    /// For people: the method's parameters, e.g. `hll p=14`.
    #[serde(skip)]
    pub detail: String,
    /// Sketch bytes the answer read (shown by EXPLAIN).
    #[serde(skip)]
    pub bytes_read: usize,
    /// The confidence of `lower`..`upper`: 0.95, or 1 - delta for Count-Min.
    #[serde(skip)]
    pub confidence: f64,
}

impl Answer {
    /// The fields every answer shares; the constructors below differ only in `value` and bounds.
    fn new(kind: Kind, value: Value, method: &str, exact: bool, buckets: usize) -> Self {
        Answer {
            kind,
            value,
            lower: None,
            upper: None,
            false_positive_rate: None,
            method: method.into(),
            exact,
            buckets,
            range: None,
            notes: Vec::new(),
            detail: method.into(),
            bytes_read: 0,
            confidence: 0.95,
        }
    }

    pub(crate) fn number(
        kind: Kind,
        value: f64,
        lower: f64,
        upper: f64,
        method: &str,
        exact: bool,
        buckets: usize,
    ) -> Self {
        Answer {
            lower: Some(lower),
            upper: Some(upper),
            ..Answer::new(kind, Value::Number(value), method, exact, buckets)
        }
    }

    /// An exactly known number: its bounds are itself.
    pub(crate) fn exact(kind: Kind, value: f64, buckets: usize) -> Self {
        Answer::number(kind, value, value, value, "exact", true, buckets)
    }

    pub(crate) fn text(
        kind: Kind,
        value: impl Into<String>,
        method: &str,
        exact: bool,
        buckets: usize,
    ) -> Self {
        Answer::new(kind, Value::Text(value.into()), method, exact, buckets)
    }

    pub(crate) fn list(
        kind: Kind,
        rows: Vec<Row>,
        method: &str,
        exact: bool,
        buckets: usize,
    ) -> Self {
        Answer::new(kind, Value::List(rows), method, exact, buckets)
    }

    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// How sure `lower`..`upper` is, in words: `95% CI`, `99%` (Count-Min), or `bounds` when
    /// they are certain.
    pub(crate) fn level(&self) -> &'static str {
        if self.confidence >= 1.0 {
            "bounds"
        } else if self.method == "countmin" {
            "99%"
        } else {
            "95% CI"
        }
    }

    /// The machine form: one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// The range label of an answer over all time (left out of the human form).
pub const ALL_TIME: &str = "all time";

/// `1234567.0` → `1,234,567`; non-integers keep one decimal.
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return if x > 0.0 { "∞".into() } else { "-∞".into() };
    }
    let rounded = x.round();
    let negative = rounded < 0.0;
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if negative {
        format!("-{out}")
    } else {
        out
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buckets = match self.buckets {
            0 => String::new(),
            1 => ", 1 bucket".into(),
            n => format!(", {n} buckets"),
        };
        if let Some(r) = self.range.as_deref().filter(|r| *r != ALL_TIME) {
            buckets.push_str("; ");
            buckets.push_str(r);
        }
        match &self.value {
            Value::Number(v) => {
                if self.exact {
                    write!(f, "{}  (exact, {}{buckets})", thousands(*v), self.detail)?;
                } else {
                    let (lo, hi) = (self.lower.unwrap_or(*v), self.upper.unwrap_or(*v));
                    let level = self.level();
                    write!(
                        f,
                        "≈ {}  ({level} {} – {}, {}{buckets})",
                        thousands(*v),
                        thousands(lo),
                        thousands(hi),
                        self.detail
                    )?;
                }
            }
            Value::Text(t) => write!(f, "{t}  ({}{buckets})", self.detail)?,
            Value::List(items) => {
                writeln!(
                    f,
                    "{} rows  ({}{buckets})",
                    thousands(items.len() as f64),
                    self.detail
                )?;
                for row in items {
                    match row.value() {
                        serde_json::Value::String(s) => writeln!(f, "  {s}")?,
                        _ => writeln!(f, "  {}", row.json())?,
                    }
                }
            }
        }
        for n in &self.notes {
            write!(f, "\n  note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_and_json_forms() {
        assert_eq!(thousands(100_512.4), "100,512");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1_234.0), "-1,234");
        let a = Answer::number(
            Kind::Distinct,
            100_512.0,
            98_880.0,
            102_150.0,
            "hll",
            false,
            1,
        )
        .with_detail("hll p=14");
        assert_eq!(
            a.to_string(),
            "≈ 100,512  (95% CI 98,880 – 102,150, hll p=14, 1 bucket)"
        );
        let json: serde_json::Value = serde_json::from_str(&a.to_json()).expect("json");
        for field in [
            "kind", "value", "lower", "upper", "method", "exact", "buckets", "notes",
        ] {
            assert!(json.get(field).is_some(), "missing {field}");
        }
        assert_eq!(json["kind"], "distinct");
        assert_eq!(json["value"], 100_512.0);
        let seen = Answer::text(Kind::Seen, "maybe", "bloom", false, 3)
            .note("compounded false-positive rate 2.9%");
        let json: serde_json::Value = serde_json::from_str(&seen.to_json()).expect("json");
        assert_eq!(json["value"], "maybe");
        assert_eq!(json["notes"][0], "compounded false-positive rate 2.9%");
    }

    #[test]
    fn integral_numbers_are_written_as_integers() {
        let a = Answer::exact(Kind::Count, 1_000.0, 2);
        assert_eq!(
            a.to_json(),
            r#"{"kind":"count","value":1000,"lower":1000,"upper":1000,"method":"exact","exact":true,"buckets":2,"notes":[]}"#
        );
        let a = Answer::number(Kind::Distinct, 10.5, -3.0, 1e300, "hll", false, 1);
        let json = a.to_json();
        assert!(
            json.contains(r#""value":10.5,"lower":-3,"upper":1e+300"#),
            "{json}"
        );
        let rows = vec![Row::of(
            serde_json::json!({"count": 7, "lower": 4984.0, "nested": [2.0, 2.5]}),
        )];
        let a = Answer::list(Kind::Top, rows, "countmin", false, 1);
        assert!(
            a.to_json()
                .contains(r#"[{"count":7,"lower":4984,"nested":[2,2.5]}]"#),
            "{}",
            a.to_json()
        );
        assert!(a.to_string().contains(r#""lower":4984,"#), "{a}");
    }

    #[test]
    fn rows_keep_spliced_text_byte_for_byte_in_their_order() {
        let extra: Box<RawValue> =
            serde_json::from_str(r#"{"b": [1E5,  2.50], "a": 123456789012345678901234567890}"#)
                .expect("raw");
        let mut b = RowBuilder::new().field("z", serde_json::json!(4984.0));
        b.raw("x", &extra);
        let huge: Box<RawValue> = serde_json::from_str("1e400").expect("raw");
        b.raw("huge", &huge);
        let row = b.finish();
        let text = r#"{"z":4984,"x":{"b": [1E5,  2.50], "a": 123456789012345678901234567890},"huge":1e400}"#;
        assert_eq!(row.json(), text);
        assert_eq!(serde_json::to_string(&row).expect("json"), text);
        // The view: keys readable, a number no f64 holds kept as its text.
        assert_eq!(row["z"], 4984);
        assert_eq!(row["x"]["b"][1], 2.5);
        assert_eq!(row["huge"], "1e400");
        let a = Answer::list(Kind::Sample, vec![row.clone()], "reservoir", false, 1);
        assert!(
            a.to_json().contains(&format!("\"value\":[{text}]")),
            "{}",
            a.to_json()
        );
        assert!(a.to_string().contains(&format!("\n  {text}\n")), "{a}");
        assert_eq!(RowBuilder::new().finish().json(), "{}");
    }
}
