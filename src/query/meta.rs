//! Statements about the store rather than the stream: SHOW BUCKETS, SHOW TAGS, SHOW SKETCHES,
//! INFO and HELP.

use super::answer::{thousands, Answer, Kind, Row, RowBuilder};
use super::ast::Statement;
use super::exec::QueryError;
use crate::sketch::{BloomFilter, CountMin, Sketch};
use crate::store::{Slice, Snapshot};

pub const HELP: &str = "\
DISTINCT wallets [ON <set>] [<range>]        how many distinct (HLL; Theta for AND / EXCEPT / NOT)
SEEN <value> [ON <set>] [<range>]            have we seen it? ('no' is certain; 'maybe' has its FPR)
COUNT <value> [ON <set>] [<range>]           how often (Count-Min: never under, over by ≤ ε·N)
COUNT [ON <set>] [<range>]                   exact number of events
TOP <n> wallets [ON <tag>] [<range>]         heaviest wallets
SAMPLE <n> [ON <tag>] [PER <tag>] [<range>]  uniform (or stratified) sample of events
EXACT <query>                                answer from the raw event log
EXPLAIN <query>                              the plan: structure, buckets, error, fallback
SHOW BUCKETS | SHOW TAGS | SHOW SKETCHES | INFO | HELP | SET NOW = <date>
<set>   := chain:a | <set> AND <set> | <set> OR <set> | <set> EXCEPT <set> | NOT (<set>)
<range> := FROM ALL | FROM today | FROM yesterday | FROM <date> [TO <date>] | FROM LAST <n> DAYS|HOURS
           FROM <date> alone: since that date; TO includes its whole day or hour; <date> is
           YYYY-MM-DD or YYYY-MM-DDTHH (UTC). A range that cuts a bucket is answered from the
           raw events when they are kept, else for the whole buckets covering it (it says so).
examples: DISTINCT wallets ON chain:a AND chain:b   SEEN 0xabc   SAMPLE 1000 FROM today";

pub fn answer(store: &Snapshot<'_>, statement: &Statement) -> Result<Answer, QueryError> {
    let width = store.config().bucket;
    Ok(match statement {
        Statement::ShowBuckets => {
            let buckets = store.buckets()?;
            let rows = buckets
                .iter()
                .map(|(b, n)| {
                    RowBuilder::new()
                        .field("bucket", width.label(*b).into())
                        .field("events", (*n).into())
                        .finish()
                })
                .collect::<Vec<_>>();
            let n = rows.len();
            Answer::list(Kind::Info, rows, "meta", true, n)
                .with_detail("buckets of the whole stream")
        }
        Statement::ShowTags => {
            let mut tags = store.tags();
            tags.sort();
            let rows = tags
                .into_iter()
                .map(|t| Row::of(serde_json::Value::String(t)))
                .collect();
            Answer::list(Kind::Info, rows, "meta", true, 0).with_detail("tag values")
        }
        Statement::ShowSketches | Statement::Info => {
            let c = store.config();
            let s = &c.sketches;
            let (m, k) = BloomFilter::optimal_size(s.bloom_capacity, s.bloom_fpr)
                .map_err(|e| crate::store::StoreError::Query(e.to_string()))?;
            let (w, d) = CountMin::dimensions(s.cms_epsilon, s.cms_delta)
                .map_err(|e| crate::store::StoreError::Query(e.to_string()))?;
            let buckets = store.buckets()?;
            let events: u64 = buckets.iter().map(|b| b.1).sum();
            let mut lines = vec![
                format!("store: {}", store.path().display()),
                format!(
                    "item field: {}; tag fields: {}; buckets: {:?}",
                    c.item_field,
                    c.tag_fields.join(", "),
                    c.bucket
                ),
                format!(
                    "events: {}; buckets: {}; tag values: {}",
                    thousands(events as f64),
                    buckets.len(),
                    store.tags().len()
                ),
                format!(
                    "bloom: {} items at {}% per set: m = {} bits, k = {}, {} bytes",
                    thousands(s.bloom_capacity as f64),
                    s.bloom_fpr * 100.0,
                    thousands(m as f64),
                    k,
                    thousands(m.div_ceil(8) as f64)
                ),
                format!(
                    "hll: p = {} ({} bytes dense)",
                    s.hll_precision,
                    thousands(((1usize << s.hll_precision) * 6 / 8) as f64)
                ),
                format!("theta: k = {}", s.theta_nominal_entries),
                format!(
                    "count-min: ε = {}, δ = {}: {} × {} counters ({} bytes), top-{}",
                    s.cms_epsilon,
                    s.cms_delta,
                    d,
                    w,
                    thousands((w * u64::from(d) * 8) as f64),
                    s.top_k
                ),
                format!("reservoir: {} events per set", s.reservoir_size),
            ];
            let mut notes = Vec::new();
            if matches!(statement, Statement::ShowSketches) {
                for (b, _) in &buckets {
                    if let Some(set) = store.sketch_set(&Slice::Whole, *b)? {
                        let f = &set.bloom;
                        let bloom = match f.fingerprints() {
                            Some(n) => {
                                format!("bloom exact ({} fingerprints)", thousands(n as f64))
                            }
                            None => format!(
                                "bloom fill {:.1}%, predicted FPR {:.3}%",
                                f.fill_ratio() * 100.0,
                                f.predicted_fpr() * 100.0
                            ),
                        };
                        lines.push(format!(
                            "{}: {} events; {bloom}{}; bytes: bloom {}, hll {}, theta {}, countmin {}, reservoir {}",
                            width.label(*b),
                            thousands(set.events as f64),
                            if set.cms.is_exact() { ", countmin exact" } else { "" },
                            thousands(set.bloom.size_bytes() as f64),
                            thousands(set.hll.size_bytes() as f64),
                            thousands(set.theta.size_bytes() as f64),
                            thousands(set.cms.size_bytes() as f64),
                            thousands(set.reservoir.size_bytes() as f64),
                        ));
                        if f.is_overfull() {
                            notes.push(format!("bucket {}: Bloom filter loaded past its capacity ({} inserted, sized for {})", width.label(*b), thousands(f.inserted() as f64), thousands(f.capacity() as f64)));
                        }
                    }
                }
            }
            let mut a = Answer::text(Kind::Info, lines.join("\n"), "meta", true, buckets.len())
                .with_detail("store");
            a.notes = notes;
            a
        }
        _ => Answer::text(Kind::Info, HELP, "meta", true, 0).with_detail("help"),
    })
}
