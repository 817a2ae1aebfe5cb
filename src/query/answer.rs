//! Answers: what a query returns, rendered for people (REPL, CLI) and as JSON (`--json`, the
//! library's serialized form), with the fields SPEC.md lists.

use serde::Serialize;
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
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Number(f64),
    Text(String),
    List(Vec<serde_json::Value>),
}

/// One statement's answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    pub kind: Kind,
    pub value: Value,
    /// 95% bounds where the method is approximate (Count-Min: at 1 - delta); equal to the value
    /// when exact; absent for answers that are not numbers (SEEN reports its false-positive
    /// rate in `notes` instead).
    pub lower: Option<f64>,
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
        items: Vec<serde_json::Value>,
        method: &str,
        exact: bool,
        buckets: usize,
    ) -> Self {
        Answer::new(kind, Value::List(items), method, exact, buckets)
    }

    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// The machine form: one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

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
        let buckets = match self.buckets {
            0 => String::new(),
            1 => ", 1 bucket".into(),
            n => format!(", {n} buckets"),
        };
        match &self.value {
            Value::Number(v) => {
                if self.exact {
                    write!(f, "{}  (exact, {}{buckets})", thousands(*v), self.detail)?;
                } else {
                    let (lo, hi) = (self.lower.unwrap_or(*v), self.upper.unwrap_or(*v));
                    let level = if self.method == "countmin" {
                        "99%"
                    } else {
                        "95% CI"
                    };
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
                for item in items {
                    match item {
                        serde_json::Value::String(s) => writeln!(f, "  {s}")?,
                        other => writeln!(f, "  {other}")?,
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
}
