//! What the demo found, question by question: each answer next to the truth, with a verdict
//! computed from the two (never assumed), and the closing summary table.

use crate::query::answer::thousands;
use std::fmt;

/// How an answer compares with the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An exact answer equal to the truth.
    Exact,
    /// An estimate whose stated bound holds the truth.
    Within,
    /// An answer from the right structure that missed: the truth is outside its stated bound
    /// (a 95% interval misses about one time in twenty), or an exact answer that differs.
    Outside,
    /// A deliberately wrong method (a distinct count from a sample, an intersection by HLL
    /// inclusion–exclusion), shown because it is what people try. It is never what sketchdb
    /// answers.
    WrongTool,
}

impl Verdict {
    /// The mark shown beside the answer.
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Exact => "✓ exact",
            Verdict::Within => "✓ in bound",
            Verdict::Outside => "✗ out of bound",
            Verdict::WrongTool => "✗ wrong tool",
        }
    }

    /// An estimate's verdict: whether `truth` lies in `[lower, upper]`.
    pub fn of_bound(truth: f64, lower: f64, upper: f64) -> Verdict {
        if (lower..=upper).contains(&truth) {
            Verdict::Within
        } else {
            Verdict::Outside
        }
    }
}

/// One checked answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// The question in a few words, e.g. "distinct wallets, 2026-11-29".
    pub question: String,
    /// The structure (or wrong method) that gave the answer, e.g. `hll`, `exact`.
    pub method: String,
    /// The answer, short: `≈ 100,793` or `maybe`.
    pub answer: String,
    /// The true value, short.
    pub truth: String,
    pub verdict: Verdict,
}

/// Everything the demo checked, in the order it was asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn count(&self, verdict: Verdict) -> usize {
        self.findings
            .iter()
            .filter(|f| f.verdict == verdict)
            .count()
    }

    /// Answers sketchdb itself gives (everything but the wrong-tool examples).
    pub fn ours(&self) -> usize {
        self.findings.len() - self.count(Verdict::WrongTool)
    }

    /// The closing sentence: how many of our answers held, and what the counter-examples did.
    pub fn conclusion(&self) -> String {
        let held = self.count(Verdict::Exact) + self.count(Verdict::Within);
        let ours = self.ours();
        let mut s = if held == ours {
            format!("All {ours} of sketchdb's answers were exact or held the truth within their stated bounds.")
        } else {
            format!(
                "{held} of sketchdb's {ours} answers were exact or held the truth within their stated bounds; \
{} fell outside (a 95% interval misses about one time in twenty).",
                ours - held
            )
        };
        let wrong = self.count(Verdict::WrongTool);
        if wrong > 0 {
            let which = if wrong == 1 {
                "The answer marked 'wrong tool' is what sketchdb refuses to do; it is".to_string()
            } else {
                format!("The {wrong} answers marked 'wrong tool' are what sketchdb refuses to do; they are")
            };
            s.push_str(&format!(
                "\n{which} shown because people try {}.",
                if wrong == 1 { "it" } else { "them" }
            ));
        }
        s
    }
}

impl fmt::Display for Report {
    /// The summary table, one row per finding, columns sized to their contents.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header = ["question", "method", "answer", "truth", ""];
        let rows: Vec<[&str; 5]> = self
            .findings
            .iter()
            .map(|x| {
                [
                    x.question.as_str(),
                    x.method.as_str(),
                    x.answer.as_str(),
                    x.truth.as_str(),
                    x.verdict.mark(),
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::from("  ");
            for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(w - cell.chars().count() + 2));
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// A number as the answers show it: thousands separators.
pub fn num(x: f64) -> String {
    thousands(x)
}

/// A signed relative error, `+0.29%`.
pub fn rel_error(estimate: f64, truth: f64) -> String {
    if truth == 0.0 {
        return "n/a".into();
    }
    format!("{:+.2}%", (estimate - truth) / truth * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(verdict: Verdict) -> Finding {
        Finding {
            question: "q".into(),
            method: "hll".into(),
            answer: "≈ 1".into(),
            truth: "1".into(),
            verdict,
        }
    }

    #[test]
    fn verdicts_come_from_the_numbers() {
        assert_eq!(Verdict::of_bound(5.0, 4.0, 6.0), Verdict::Within);
        assert_eq!(Verdict::of_bound(4.0, 4.0, 6.0), Verdict::Within);
        assert_eq!(Verdict::of_bound(7.0, 4.0, 6.0), Verdict::Outside);
        assert_eq!(Verdict::of_bound(f64::NAN, 4.0, 6.0), Verdict::Outside);
    }

    #[test]
    fn the_conclusion_admits_misses() {
        let mut r = Report {
            findings: vec![finding(Verdict::Within), finding(Verdict::Exact)],
        };
        assert!(r.conclusion().starts_with("All 2 "), "{}", r.conclusion());
        r.findings.push(finding(Verdict::Outside));
        r.findings.push(finding(Verdict::WrongTool));
        let c = r.conclusion();
        assert!(c.starts_with("2 of sketchdb's 3 answers"), "{c}");
        assert!(c.contains("1 fell outside"), "{c}");
        assert!(c.contains("The answer marked 'wrong tool' is"), "{c}");
    }

    #[test]
    fn the_table_aligns_its_columns() {
        let mut long = finding(Verdict::Within);
        long.question = "a much longer question".into();
        let r = Report {
            findings: vec![finding(Verdict::Exact), long],
        };
        let text = r.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = |l: &str| l.find("hll").expect("method column");
        assert_eq!(col(lines[1]), col(lines[2]));
        assert!(lines[0].contains("question") && lines[0].contains("truth"));
    }

    #[test]
    fn relative_errors_carry_their_sign() {
        assert_eq!(rel_error(100_793.0, 100_500.0), "+0.29%");
        assert_eq!(rel_error(99.0, 100.0), "-1.00%");
        assert_eq!(rel_error(1.0, 0.0), "n/a");
    }
}
