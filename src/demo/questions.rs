//! The questions of the report, in the reference's cheat-sheet order: each section asks its
//! queries through [`Demo::ask`], checks each answer against the truth and records a
//! [`Finding`]. The wording lives here; the mechanics of asking and checking live in the parent.

use super::report::{num, rel_error};
use super::{
    bytes, ingest_stream, never_seen, on, pct, short, Demo, DemoError, Finding, Result, Stage,
    Verdict, Wallets, PROBES, Z95, Z999,
};
use crate::gen::{GenOptions, StreamKind};
use crate::query::{Answer, Value};
use chrono::NaiveDate;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

impl Demo<'_> {
    pub(super) fn intro(&mut self, path: &Path) -> Result<()> {
        self.say("sketchdb demo: start from the question")?;
        self.say("══════════════════════════════════════")?;
        self.say(
            "sketchdb keeps small probabilistic summaries (sketches) of a stream of transactions, one
set per day and per chain, next to the raw events, and answers each question with the
structure made for it: a HyperLogLog for \"how many distinct?\", a Bloom filter for \"have we
seen it?\", a Theta sketch for \"how many in both?\", a Count-Min sketch for \"how often?\", a
reservoir for \"show me some\". Every answer says which structure gave it and how wrong it may
be, and where a sketch cannot answer well the engine counts exactly from the raw events.

Below, each question is asked in sketchdb's query language of a store built from synthetic
streams whose true answers are known by construction: the query, sketchdb's answer with its
bound and method, and the truth, with a verdict computed from the two.",
        )?;
        self.say(format!(
            "\nBuilding the store {} from three synthetic streams (seed {}):",
            path.display(),
            self.seed
        ))
    }

    pub(super) fn build(
        &mut self,
        kind: StreamKind,
        opts: &GenOptions,
        stage: &mut dyn FnMut(Stage<'_>),
    ) -> Result<()> {
        let t = self.truth(kind).clone();
        let what = match kind {
            StreamKind::StreamA => format!(
                "stream A: {} bots send {} transactions each; {} wallets send one",
                num(t.bots as f64),
                num(t.events_per_bot as f64),
                num(t.users as f64)
            ),
            StreamKind::StreamB => format!(
                "stream B: {} wallets send {} transactions each",
                num(t.users as f64),
                num(t.events_per_user.unwrap_or(0) as f64)
            ),
            StreamKind::TwoChains => {
                let per_chain = t.chains.first().map_or(0, |c| c.distinct_wallets);
                format!(
                    "two chains: {} wallets on chain a, {} on chain b, {} of them on both",
                    num(per_chain as f64),
                    num(per_chain as f64),
                    num(t.on_both_chains.unwrap_or(0) as f64)
                )
            }
        };
        self.say(format!("  {}  {what}", opts.date))?;
        let store = self.session.store;
        let s = ingest_stream(store, kind, opts, stage)?;
        self.say(format!(
            "              {} events, {} distinct wallets; ingested as JSONL in {:.2} s ({} events/s)",
            num(s.events as f64),
            num(t.distinct_wallets as f64),
            s.elapsed.as_secs_f64(),
            num(s.events_per_second())
        ))
    }

    pub(super) fn set_now(&mut self, today: NaiveDate) -> Result<()> {
        self.quietly(&format!("SET NOW = {today}"))?;
        self.say(format!(
            "  The clock is set to {today} (SET NOW = {today}), so \"today\" is the two-chains day."
        ))
    }

    /// HyperLogLog: distinct wallets per day and over all days.
    pub(super) fn distinct(&mut self) -> Result<()> {
        self.heading("1. How many distinct wallets?  HyperLogLog")?;
        let (registers, size) = (self.sizes.hll_registers, self.sizes.hll_bytes);
        self.say(format!(
            "  A HyperLogLog sees every wallet but keeps only {} small registers ({} a day).
  A wallet that sends 1,800 transactions counts once. The 95% interval comes with the answer.\n",
            num(registers as f64),
            bytes(size)
        ))?;
        for kind in [StreamKind::StreamA, StreamKind::StreamB] {
            let truth = self.truth(kind).distinct_wallets as f64;
            let q = format!("DISTINCT wallets {}", on(kind));
            let label = format!(
                "distinct wallets, stream {}",
                if kind == StreamKind::StreamA {
                    "A"
                } else {
                    "B"
                }
            );
            self.ask_number(&label, &q, truth)?;
        }
        self.say("  Days merge for free (a union of HyperLogLogs is a register-wise max):")?;
        let all: u64 = self.truths.iter().map(|t| t.distinct_wallets).sum();
        self.ask_number(
            "distinct wallets, all days",
            "DISTINCT wallets FROM ALL",
            all as f64,
        )?;
        Ok(())
    }

    /// The reservoir, and why a distinct count must not come from it.
    pub(super) fn sample_trap(&mut self) -> Result<()> {
        self.heading("2. Why not count the wallets in a sample and scale up?  (the wrong tool)")?;
        let k = num(self.sizes.reservoir as f64);
        self.say(format!(
            "  Each day keeps a uniform sample of {k} of its transactions (a reservoir). Counting the
  distinct wallets in it and multiplying by (transactions / {k}) is the shortcut people try.\n",
        ))?;
        let mut naive = Vec::new();
        let mut bot_share = None;
        for (kind, name) in [(StreamKind::StreamA, "A"), (StreamKind::StreamB, "B")] {
            let q = format!("SAMPLE {} {}", self.sizes.reservoir, on(kind));
            let a = self.ask(&q, if kind == StreamKind::StreamA { 2 } else { 0 })?;
            let Value::List(rows) = &a.value else {
                return Err(DemoError::Unexpected {
                    statement: q,
                    answer: a.to_string(),
                });
            };
            let t = self.truth(kind).clone();
            let distinct: HashSet<&str> = rows
                .iter()
                .filter_map(|r| r.get("wallet").and_then(|w| w.as_str()))
                .collect();
            let scale = t.events as f64 / rows.len().max(1) as f64;
            let estimate = distinct.len() as f64 * scale;
            self.say(format!(
                "    {} distinct wallets in {} transactions, × {} = {}",
                num(distinct.len() as f64),
                num(rows.len() as f64),
                num(scale),
                num(estimate)
            ))?;
            self.record(
                Finding {
                    question: format!("distinct wallets, stream {name}, from a sample"),
                    method: "reservoir ×".to_string() + &num(scale),
                    answer: num(estimate),
                    truth: num(t.distinct_wallets as f64),
                    verdict: Verdict::WrongTool,
                },
                format!(
                    "{} distinct wallets: the estimate is off by {}",
                    num(t.distinct_wallets as f64),
                    rel_error(estimate, t.distinct_wallets as f64)
                ),
            )?;
            naive.push((estimate, t.distinct_wallets as f64));
            if kind == StreamKind::StreamA {
                let bots = rows
                    .iter()
                    .filter(|r| r.get("kind").and_then(|k| k.as_str()) == Some("bot"))
                    .count();
                bot_share = Some((bots, rows.len(), t.bot_share()));
            }
        }
        if let [(est_a, true_a), (est_b, true_b)] = naive[..] {
            let backwards = (est_a < est_b) != (true_a < true_b);
            let verdict = if backwards {
                format!(
                    "  The sample ranks the streams backwards: stream A has {:.1}× as many wallets as B, but the\n  scaled-up sample says {:.2}×.",
                    true_a / true_b,
                    est_a / est_b
                )
            } else {
                format!(
                    "  This sample happens to rank the streams the right way round, but still says {:.2}× where\n  the truth is {:.1}×.",
                    est_a / est_b,
                    true_a / true_b
                )
            };
            self.say(verdict)?;
            self.say(
                "  In stream A, 90% of transactions come from 500 bots, so the one-time wallets that make up\n  almost all of its distinct wallets are only about 100 of the 1,000 sampled: the sample cannot\n  tell a long tail of quiet wallets from none. sketchdb never answers DISTINCT from a sample\n  (a SAMPLE answer says so); section 1 is how it counts.",
            )?;
        }
        if let Some((bots, n, truth)) = bot_share {
            // The share of bot transactions in a uniform sample of n is Binomial(n, p)/n; its 95%
            // normal interval is p̂ ± 1.96·√(p̂(1 − p̂)/n).
            let p = bots as f64 / n.max(1) as f64;
            let half = Z95 * (p * (1.0 - p) / n.max(1) as f64).sqrt();
            self.say("\n  What the sample is good for: questions about transactions.")?;
            self.say(format!(
                "    bot transactions in stream A's sample: {} of {} = {} (95% CI {} – {})",
                num(bots as f64),
                num(n as f64),
                pct(p),
                pct(p - half),
                pct(p + half)
            ))?;
            self.record(
                Finding {
                    question: "share of bot transactions, stream A".into(),
                    method: "reservoir".into(),
                    answer: pct(p),
                    truth: pct(truth),
                    verdict: Verdict::of_bound(truth, p - half, p + half),
                },
                pct(truth),
            )?;
        }
        Ok(())
    }

    /// Asks `PROBES` never-seen wallets and compares the "maybe" rate with the stated one.
    fn probe(&mut self, range: &str, (stated, method): (f64, String), label: &str) -> Result<()> {
        let mut maybes = 0u64;
        for i in 1..=PROBES {
            let q = format!("SEEN {} {range}", never_seen(i));
            let a = self.quietly(&q)?;
            if a.value == Value::Text("maybe".into()) {
                maybes += 1;
            }
        }
        // The count of false "maybe"s is Binomial(PROBES, fpr): accept it within 3.29 standard
        // deviations (99.9%) of PROBES·fpr.
        let n = PROBES as f64;
        let expected = n * stated;
        let sd = (n * stated * (1.0 - stated)).sqrt();
        let verdict = if (maybes as f64 - expected).abs() <= Z999 * sd + 0.5 {
            Verdict::Within
        } else {
            Verdict::Outside
        };
        self.say(format!(
            "    asked about {} wallets that never transacted: {} answered \"maybe\" ({})",
            num(n),
            num(maybes as f64),
            pct(maybes as f64 / n)
        ))?;
        self.record(
            Finding {
                question: format!("false 'maybe' rate, {label}"),
                method,
                answer: pct(maybes as f64 / n),
                truth: format!("{} stated", pct(stated)),
                verdict,
            },
            format!(
                "the stated rate is {}, so about {} of {} are expected (99.9%: ±{})",
                pct(stated),
                num(expected),
                num(n),
                num(Z999 * sd)
            ),
        )
    }

    /// Asks SEEN about a wallet that did transact: "maybe" is right, "no" would be a false
    /// negative, which a Bloom filter never gives. Returns the stated false-positive rate and
    /// the structure that answered.
    fn seen_present(&mut self, question: &str, statement: &str) -> Result<(f64, String)> {
        let a = self.ask(statement, 0)?;
        let maybe = a.value == Value::Text("maybe".into());
        self.record(
            Finding {
                question: question.to_string(),
                method: a.method.clone(),
                answer: short(&a),
                truth: "yes".into(),
                verdict: if maybe {
                    Verdict::Within
                } else {
                    Verdict::Outside
                },
            },
            "yes (it did transact; a Bloom filter never says \"no\" to a wallet it holds)".into(),
        )?;
        Ok((a.false_positive_rate.unwrap_or(0.0), a.method))
    }

    /// Bloom filters: "no" is certain, "maybe" carries its false-positive rate.
    pub(super) fn seen(&mut self, w: &Wallets) -> Result<()> {
        self.heading("3. Have we seen wallet X?  Bloom filter")?;
        self.say(format!(
            "  A Bloom filter per day ({}, sized for {} wallets at {}) answers \"no\", which is\n  certain, or \"maybe\", with the chance that a wallet never seen would get \"maybe\" too.\n",
            bytes(self.sizes.bloom_bytes),
            num(self.sizes.bloom_capacity as f64),
            pct(self.sizes.bloom_fpr).replace(".00", "")
        ))?;
        let a_day = on(StreamKind::StreamA);
        self.seen_present(
            "seen: a bot of stream A",
            &format!("SEEN {} {a_day}", w.a_bot),
        )?;
        let q = format!("SEEN {} {a_day}", never_seen(0));
        let a = self.ask(&q, 0)?;
        let no = a.value == Value::Text("no".into());
        self.record(
            Finding {
                question: "seen: a wallet that never transacted".into(),
                method: a.method.clone(),
                answer: short(&a),
                truth: "no".into(),
                // A "maybe" here is a false positive, which the stated rate allows.
                verdict: if no { Verdict::Exact } else { Verdict::Within },
            },
            "no".into(),
        )?;

        let t = self.truth(StreamKind::TwoChains).distinct_wallets;
        let capacity = self.sizes.bloom_capacity;
        self.say(if t > capacity {
            format!(
                "\n  A filter loaded past its size says so. Today's holds {} wallets, sized for {}:",
                num(t as f64),
                num(capacity as f64)
            )
        } else {
            format!(
                "\n  Today's filter holds {} wallets, within the {} it was sized for:",
                num(t as f64),
                num(capacity as f64)
            )
        })?;
        let stated = self.seen_present(
            "seen: a wallet of chain a, today",
            &format!("SEEN {} FROM today", w.chain_a),
        )?;
        let label = if t > capacity {
            "today's overfull filter"
        } else {
            "today's filter"
        };
        self.probe("FROM today", stated, label)?;

        self.say(
            "\n  With no range, the all-time scalable Bloom filter answers; it adds a layer as it fills:",
        )?;
        let stated = self.seen_present(
            "seen: a bot of stream A, all time",
            &format!("SEEN {}", w.a_bot),
        )?;
        self.probe("", stated, "the all-time filter")?;
        Ok(())
    }

    /// Count-Min with Top-K, and the exact fallback for quiet wallets.
    pub(super) fn frequency(&mut self, w: &Wallets) -> Result<()> {
        self.heading("4. How often does wallet X transact?  Count-Min sketch with Top-K")?;
        let t = self.truth(StreamKind::StreamA).clone();
        let eps = self.session.store.config().sketches.cms_epsilon;
        let bound = eps * t.events as f64;
        self.say(format!(
            "  A Count-Min sketch ({} × {} counters, {} a day) never counts too few, and counts too\n  many by more than ε·N = {} (N = {} transactions that day) with probability at most {}.\n  A heap beside it keeps the {} loudest.\n",
            self.sizes.cms_depth,
            num(self.sizes.cms_width as f64),
            bytes(self.sizes.cms_bytes),
            num(bound),
            num(t.events as f64),
            pct(self.session.store.config().sketches.cms_delta).replace(".00", ""),
            self.sizes.top_k
        ))?;
        let q = format!("TOP 5 wallets {}", on(StreamKind::StreamA));
        let a = self.ask(&q, 5)?;
        let Value::List(rows) = &a.value else {
            return Err(DemoError::Unexpected {
                statement: q,
                answer: a.to_string(),
            });
        };
        let per_bot = t.events_per_bot as f64;
        let counts: Vec<(bool, f64)> = rows
            .iter()
            .map(|r| {
                let item = r.get("item").and_then(|v| v.as_str()).unwrap_or("");
                let count = r.get("count").and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
                (w.bots.contains(item), count)
            })
            .collect();
        let all_bots = counts.iter().all(|&(bot, _)| bot);
        let in_bound = counts
            .iter()
            .all(|&(_, c)| c >= per_bot && c - per_bot <= bound);
        let (lo, hi) = counts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, c)| {
                (lo.min(c), hi.max(c))
            });
        self.record(
            Finding {
                question: "top 5 wallets, stream A".into(),
                method: a.method.clone(),
                answer: format!("{} bots, {}–{}", counts.iter().filter(|c| c.0).count(), num(lo), num(hi)),
                truth: format!("bots, {} each", num(per_bot)),
                verdict: if all_bots && in_bound && counts.len() == rows.len() && !rows.is_empty() {
                    Verdict::Within
                } else {
                    Verdict::Outside
                },
            },
            format!(
                "{} of the 5 are bots, which send {} each; every count is at least that and at most {} over",
                counts.iter().filter(|c| c.0).count(),
                num(per_bot),
                num(bound)
            ),
        )?;

        self.say("\n  One wallet's count, from the sketch alone (the engine's exact fallback turned off):")?;
        let a_day = on(StreamKind::StreamA);
        let q = format!("COUNT {} {a_day}", w.a_bot);
        let a = self.ask_sketch_only(&q, 0)?;
        self.check_number("transactions of a bot, Count-Min", &q, &a, per_bot)?;
        let per_user = t.events_per_user.unwrap_or(1) as f64;
        let q = format!("COUNT {} {a_day}", w.a_user);
        let a = self.ask_sketch_only(&q, 0)?;
        self.check_number(
            "transactions of a one-time wallet, Count-Min",
            &q,
            &a,
            per_user,
        )?;
        let over = self.number(&q, &a)? - per_user;
        self.say(format!(
            "  Over by {}: nothing next to a bot's 1,800, but {}× the truth for a one-time wallet.",
            num(over),
            num((over + per_user) / per_user)
        ))?;
        self.say(
            "  With the fallback on (the default), the engine sees that the interval is wider than ±25% of\n  the answer and, since the raw events are kept, counts exactly instead, and says so:",
        )?;
        self.ask_number("transactions of a one-time wallet", &q, per_user)?;
        Ok(())
    }

    /// Two sets: union by HLL, intersection by Theta or the raw events, never by inclusion–exclusion.
    pub(super) fn two_sets(&mut self) -> Result<()> {
        self.heading("5. How many wallets used both chains?  Theta sketch, or the raw events")?;
        let t = self.truth(StreamKind::TwoChains).clone();
        let per_chain = t.chains.first().map_or(0, |c| c.distinct_wallets) as f64;
        let both = t.on_both_chains.unwrap_or(0) as f64;
        self.say(format!(
            "  Today {} wallets used chain a and {} used chain b; only {} used both.\n  A union is HyperLogLog's job:\n",
            num(per_chain),
            num(per_chain),
            num(both)
        ))?;
        let union = self.ask_number(
            "wallets on chain a or b, today",
            "DISTINCT wallets ON chain:a OR chain:b FROM today",
            t.distinct_wallets as f64,
        )?;
        self.say(
            "\n  The usual trick for the intersection is |a| + |b| − |a ∪ b| on HyperLogLogs (what a Redis\n  user computes from PFCOUNT):",
        )?;
        let a = self.ask_number(
            "wallets on chain a, today",
            "DISTINCT wallets ON chain:a FROM today",
            per_chain,
        )?;
        let b = self.ask_number(
            "wallets on chain b, today",
            "DISTINCT wallets ON chain:b FROM today",
            per_chain,
        )?;
        let value = |x: &Answer| match x.value {
            Value::Number(v) => v,
            _ => f64::NAN,
        };
        let half = |x: &Answer| (x.upper.unwrap_or(0.0) - x.lower.unwrap_or(0.0)) / 2.0;
        let ie = value(&a) + value(&b) - value(&union);
        self.say(format!(
            "    |a| + |b| − |a ∪ b| = {} + {} − {} = {}",
            num(value(&a)),
            num(value(&b)),
            num(value(&union)),
            num(ie)
        ))?;
        self.record(
            Finding {
                question: "wallets on both chains, by |a|+|b|−|a∪b|".into(),
                method: "hll incl.–excl.".into(),
                answer: num(ie),
                truth: num(both),
                verdict: Verdict::WrongTool,
            },
            format!("{}: off by {}", num(both), rel_error(ie, both)),
        )?;
        self.say(format!(
            "  Each count is good to about ±{:.1}%, but that is ±{}, ±{} and ±{} wallets (95%): the\n  subtraction turns errors that are small next to {} into errors far larger than {}.\n  sketchdb never answers an intersection this way.\n",
            half(&a) / value(&a) * 100.0,
            num(half(&a)),
            num(half(&b)),
            num(half(&union)),
            num(per_chain),
            num(both)
        ))?;
        let q = "DISTINCT wallets ON chain:a AND chain:b FROM today";
        self.say("  A Theta sketch keeps hash values, so it can intersect; alone (fallback off) it says:")?;
        let theta = self.ask_sketch_only(q, 0)?;
        self.check_number("wallets on both chains, Theta", q, &theta, both)?;
        self.say(
            "  That interval is honest but wide: a small overlap is hard for any sketch. So the engine, as it\n  does by default, answers exactly from the raw events:",
        )?;
        self.ask_number("wallets on both chains", q, both)?;
        self.say("\n  A difference is Theta's job too:")?;
        self.ask_number(
            "wallets on chain a but not b, today",
            "DISTINCT wallets ON chain:a EXCEPT chain:b FROM today",
            per_chain - both,
        )?;
        Ok(())
    }

    /// Exact answers: event counts, and EXACT when slightly wrong is not good enough.
    pub(super) fn exact(&mut self) -> Result<()> {
        self.heading("6. What if slightly wrong is not good enough?  Exact answers")?;
        self.say("  Event counts are kept exactly per day and chain:")?;
        let events: u64 = self.truths.iter().map(|t| t.events).sum();
        self.ask_number("transactions, all days", "COUNT FROM ALL", events as f64)?;
        self.say(
            "  And EXACT answers any question from the raw events, at the cost of reading them (compare the\n  time with section 1's):",
        )?;
        let truth = self.truth(StreamKind::StreamA).distinct_wallets as f64;
        self.ask_number(
            "distinct wallets, stream A, exact",
            &format!("EXACT DISTINCT wallets {}", on(StreamKind::StreamA)),
            truth,
        )?;
        Ok(())
    }

    pub(super) fn close(&mut self, path: &Path, took: Duration) -> Result<()> {
        self.heading("Summary")?;
        let table = self.report.to_string();
        self.say(table.trim_end())?;
        self.say(format!("\n{}", self.report.conclusion()))?;
        self.say(format!(
            "\nThe demo took {:.1} s. The store stays in {}; explore it in the REPL:\n  sketchdb --db {}\n(try HELP, EXPLAIN DISTINCT wallets ON chain:a AND chain:b FROM today, SHOW SKETCHES).",
            took.as_secs_f64(),
            path.display(),
            path.display()
        ))
    }
}
