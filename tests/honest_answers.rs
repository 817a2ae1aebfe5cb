//! Issue 11, the query layer's part: answers that claimed more than they knew. Each test is built
//! from a scenario users hit (day buckets of 20,000 events spread over the hours, two tag fields,
//! a Count-Min that overestimates, retention that dropped raw events) and checks the answer
//! against a brute-force count over the same events.

use sketchdb::gen::{splitmix64, wallet_address};
use sketchdb::query::{Answer, Options, QueryError, Session, Value};
use sketchdb::sketch::SketchConfig;
use sketchdb::store::{BucketWidth, Config, Event, Slice, Store, TimeRange};
use std::collections::{HashMap, HashSet};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// 2026-10-28T00:00:00Z, 2026-10-29, 2026-10-30.
const D28: i64 = 1_793_145_600_000;
const D29: i64 = D28 + DAY;
const D30: i64 = D29 + DAY;
/// The users' clock: 2026-10-30T12.
const NOW: i64 = D30 + 12 * HOUR;

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sketchdb-honest-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(bucket: BucketWidth) -> Config {
    Config {
        bucket,
        sketches: SketchConfig {
            bloom_capacity: 50_000,
            reservoir_size: 500,
            ..SketchConfig::default()
        },
        ..Config::default()
    }
}

fn number(a: &Answer) -> f64 {
    match a.value {
        Value::Number(v) => v,
        ref other => panic!("not a number: {other:?}"),
    }
}

fn rows(a: &Answer) -> &Vec<sketchdb::Row> {
    match &a.value {
        Value::List(r) => r,
        other => panic!("not a list: {other:?}"),
    }
}

fn text(a: &Answer) -> &str {
    match &a.value {
        Value::Text(t) => t,
        other => panic!("not text: {other:?}"),
    }
}

fn json(a: &Answer) -> serde_json::Value {
    serde_json::from_str(&a.to_json()).expect("answer JSON")
}

/// The wallet that only transacts at 20:00–20:10 on 2026-10-30, and the markers at the edges of
/// `FROM 2026-10-30T05 TO 2026-10-30T07` (= [05:00, 08:00)).
fn bot() -> String {
    wallet_address(12, 0)
}
fn marker(i: u64) -> String {
    wallet_address(13, i)
}
const MARKERS: [(u64, i64); 4] = [
    (0, D30 + 5 * HOUR - 1), // 04:59:59.999: out
    (1, D30 + 5 * HOUR),     // 05:00:00.000: in (first millisecond)
    (2, D30 + 8 * HOUR - 1), // 07:59:59.999: in (last millisecond)
    (3, D30 + 8 * HOUR),     // 08:00:00.000: out (the end)
];

/// Three days of 20,000 events each, at times spread over the whole day, 6,000 wallets on
/// chains a and b; a bot with 600 events at 20:00 on the last day; the four edge markers.
fn days() -> Vec<Event> {
    let mut out = Vec::new();
    for day in 0..3i64 {
        for j in 0..20_000u64 {
            let i = day as u64 * 20_000 + j;
            let t = D28 + day * DAY + (splitmix64(i.wrapping_mul(7) + 1) % DAY as u64) as i64;
            let w = wallet_address(11, splitmix64(i) % 6_000);
            let chain = if i.is_multiple_of(3) { "b" } else { "a" };
            out.push(Event::new(t, w, &[("chain", chain)]));
        }
    }
    for j in 0..600i64 {
        out.push(Event::new(
            D30 + 20 * HOUR + j * 1_000,
            bot(),
            &[("chain", "a")],
        ));
    }
    for (i, t) in MARKERS {
        out.push(Event::new(t, marker(i), &[("chain", "a")]));
    }
    out
}

fn in_range(events: &[Event], start: i64, end: i64) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| e.time >= start && e.time < end)
        .collect()
}

fn store_with(name: &str, config: Config, events: &[Event]) -> Store {
    let store = Store::create(tempdir(name), config).expect("create");
    store.ingest_batch(events).expect("ingest");
    store
}

/// Closes a store and removes its directory (sled's final flush needs the files until then).
fn finish(store: Store) {
    let dir = store.path().to_path_buf();
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

fn session(store: &Store) -> Session<'_> {
    let mut s = Session::with_seed(store, 11);
    s.now = Some(NOW);
    s
}

#[test]
fn a_range_that_cuts_day_buckets_is_answered_exactly_from_the_raw_events() {
    let events = days();
    let store = store_with("cut", config(BucketWidth::Day), &events);
    let mut s = session(&store);

    // The users' query: now = 2026-10-30T12, so the last 24 hours are [10-29T13, 10-30T13).
    let last24 = in_range(&events, D29 + 13 * HOUR, D30 + 13 * HOUR);
    let a = s.query("COUNT FROM LAST 24 HOURS").expect("count");
    assert_eq!((number(&a), a.exact), (last24.len() as f64, true), "{a}");
    assert!(json(&a)["range"]
        .as_str()
        .is_some_and(|r| r.contains("2026-10-29T13")));
    let b = last24.iter().filter(|e| e.tags[0].1 == "b").count();
    let a = s
        .query("COUNT ON chain:b FROM LAST 24 HOURS")
        .expect("count b");
    assert_eq!((number(&a), a.exact), (b as f64, true), "{a}");

    // Three hours of one day: DISTINCT, SEEN, COUNT <value> and TOP answer for them alone.
    let r = "FROM 2026-10-30T05 TO 2026-10-30T07";
    let hours = in_range(&events, D30 + 5 * HOUR, D30 + 8 * HOUR);
    let distinct: HashSet<&str> = hours.iter().map(|e| e.item.as_str()).collect();
    let a = s.query(&format!("DISTINCT wallets {r}")).expect("distinct");
    assert_eq!((number(&a), a.exact), (distinct.len() as f64, true), "{a}");
    let a = s.query(&format!("SEEN {} {r}", bot())).expect("seen");
    assert_eq!(text(&a), "no", "the bot transacts at 20:00 only: {a}");
    let a = s.query(&format!("COUNT {} {r}", bot())).expect("count bot");
    assert_eq!((number(&a), a.exact), (0.0, true), "{a}");
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for e in &hours {
        *counts.entry(e.item.as_str()).or_insert(0) += 1;
    }
    let a = s.query(&format!("TOP 3 wallets {r}")).expect("top");
    let mut truth: Vec<u64> = counts.values().copied().collect();
    truth.sort_unstable_by(|x, y| y.cmp(x));
    let got: Vec<u64> = rows(&a)
        .iter()
        .map(|row| {
            let item = row["item"].as_str().expect("item");
            let count = row["count"].as_u64().expect("count");
            assert_eq!(counts.get(item), Some(&count), "{row}");
            count
        })
        .collect();
    assert_eq!(got, truth[..3].to_vec(), "{a}");
    assert!(rows(&a).iter().all(|row| row["item"] != bot().as_str()));

    // EXPLAIN says which way the planner went and why.
    let a = s
        .query("EXPLAIN COUNT FROM LAST 24 HOURS")
        .expect("explain");
    let t = text(&a);
    assert!(
        t.contains("cuts") && t.contains("raw events") && t.contains("2026-10-30"),
        "{t}"
    );
    finish(store);
}

/// The first millisecond of a range is in it, its end is out: on a day store (where the range
/// cuts the bucket) and on an hour store (where it is whole buckets).
#[test]
fn range_edges_first_millisecond_in_end_out_on_day_and_hour_stores() {
    let events = days();
    for (name, width) in [
        ("edge-day", BucketWidth::Day),
        ("edge-hour", BucketWidth::Hour),
    ] {
        let store = store_with(name, config(width), &events);
        let mut s = session(&store);
        let r = "FROM 2026-10-30T05 TO 2026-10-30T07";
        let truth = in_range(&events, D30 + 5 * HOUR, D30 + 8 * HOUR).len();
        let a = s.query(&format!("COUNT {r}")).expect("count");
        assert_eq!((number(&a), a.exact), (truth as f64, true), "{name}: {a}");
        for (i, inside) in [(0, false), (1, true), (2, true), (3, false)] {
            let seen = s.query(&format!("SEEN {} {r}", marker(i))).expect("seen");
            if inside {
                assert_ne!(text(&seen), "no", "{name}: marker {i}: {seen}");
            } else {
                assert_eq!(text(&seen), "no", "{name}: marker {i}: {seen}");
            }
            let count = s.query(&format!("COUNT {} {r}", marker(i))).expect("count");
            assert_eq!(
                (number(&count), count.exact),
                (f64::from(u8::from(inside)), true),
                "{name}: marker {i}: {count}"
            );
            let exact = s
                .query(&format!("EXACT COUNT {} {r}", marker(i)))
                .expect("exact");
            assert_eq!(number(&exact), f64::from(u8::from(inside)), "{name}");
        }
        finish(store);
    }
}

/// SAMPLE over a cut range draws from the raw events of the range, uniformly. The check: split
/// the range's events into 10 groups by the order they were ingested (a reservoir biased to
/// early or late events would show there) and draw 200 samples of 20 with a fixed seed. Under
/// uniform sampling each group expects 400 of the 4,000 draws and the chi-square statistic over
/// the groups follows chi-square with 9 degrees of freedom (the without-replacement correction
/// (N - n)/(N - 1) = 0.99 is negligible); its 0.1% and 99.9% quantiles are 1.15 and 27.88, so
/// a sampler that is too even (stratified or deterministic) fails as well as a biased one.
#[test]
fn a_sample_of_a_cut_range_is_uniform_over_its_raw_events() {
    let events = days();
    let store = store_with("sample", config(BucketWidth::Day), &events);
    let mut s = session(&store);
    let (start, end) = (D30 + 5 * HOUR, D30 + 8 * HOUR);
    let index: HashMap<(i64, &str), usize> = events
        .iter()
        .filter(|e| e.time >= start && e.time < end)
        .enumerate()
        .map(|(k, e)| ((e.time, e.item.as_str()), k))
        .collect();
    let n_range = index.len();
    let groups = 10;
    let mut hits = vec![0u64; groups];
    let trials = 200;
    for trial in 0..trials {
        let a = s
            .query("SAMPLE 20 FROM 2026-10-30T05 TO 2026-10-30T07")
            .expect("sample");
        if trial == 0 {
            assert!(a.to_string().contains("uniform over the"), "{a}");
        }
        let r = rows(&a);
        assert_eq!(r.len(), 20, "{a}");
        let mut picked = HashSet::new();
        for row in r {
            let time = chrono::DateTime::parse_from_rfc3339(row["time"].as_str().expect("time"))
                .expect("rfc 3339")
                .timestamp_millis();
            let item = row["wallet"].as_str().expect("wallet");
            let k = *index
                .get(&(time, item))
                .unwrap_or_else(|| panic!("a row outside the range: {row}"));
            assert!(picked.insert(k), "drawn twice: {row}");
            hits[k * groups / n_range] += 1;
        }
    }
    let draws = (trials * 20) as f64;
    let chi2: f64 = (0..groups)
        .map(|g| {
            let size = (0..n_range).filter(|k| k * groups / n_range == g).count() as f64;
            let expected = draws * size / n_range as f64;
            (hits[g] as f64 - expected).powi(2) / expected
        })
        .sum();
    assert!((1.15..27.88).contains(&chi2), "chi2 = {chi2}, {hits:?}");

    // PER: each stratum's rows are inside the range and carry the stratum's tag.
    let a = s
        .query("SAMPLE 10 PER chain FROM 2026-10-30T05 TO 2026-10-30T07")
        .expect("per");
    assert_eq!(rows(&a).len(), 20, "{a}");
    for row in rows(&a) {
        let time = chrono::DateTime::parse_from_rfc3339(row["time"].as_str().expect("time"))
            .expect("rfc 3339")
            .timestamp_millis();
        assert!((start..end).contains(&time), "{row}");
        assert_eq!(
            row["stratum"].as_str(),
            Some(format!("chain:{}", row["chain"].as_str().expect("chain")).as_str())
        );
    }
    finish(store);
}

/// Retention keeps one day of raw events: the log loses 10-28 and 10-29, the sketches stay.
fn retained_store(name: &str, events: &[Event]) -> Store {
    let store = Store::create(
        tempdir(name),
        Config {
            retention_ms: Some(DAY),
            checkpoint_every: 5_000,
            ..config(BucketWidth::Day)
        },
    )
    .expect("create");
    let mut by_day: Vec<&Event> = events.iter().collect();
    by_day.sort_by_key(|e| e.time);
    let by_day: Vec<Event> = by_day.into_iter().cloned().collect();
    for chunk in by_day.chunks(4_000) {
        store.ingest_batch(chunk).expect("ingest");
    }
    store.checkpoint().expect("checkpoint");
    store
}

#[test]
fn without_raw_events_a_cut_range_is_answered_for_the_covering_buckets_and_says_so() {
    let events = days();
    let store = retained_store("covering", &events);
    assert!(!store
        .raw_events_retained(&TimeRange::between(D29 + 5 * HOUR, D29 + 8 * HOUR))
        .expect("retained"));
    let mut s = session(&store);

    let r = "FROM 2026-10-29T05 TO 2026-10-29T07";
    let truth = in_range(&events, D29 + 5 * HOUR, D29 + 8 * HOUR).len() as f64;
    let a = s.query(&format!("COUNT {r}")).expect("count");
    assert!(!a.exact && a.method != "exact", "{a}");
    assert!(
        a.lower.unwrap() <= truth && truth <= a.upper.unwrap(),
        "{truth}: {a}"
    );
    let j = json(&a);
    let range = j["range"].as_str().expect("range label");
    assert!(
        range.contains("2026-10-29") && range.contains("whole"),
        "{range}"
    );
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("covering") && n.contains("expired")),
        "{:?}",
        a.notes
    );
    let e = s.query(&format!("EXPLAIN COUNT {r}")).expect("explain");
    assert!(
        text(&e).contains("covering") && text(&e).contains("expired"),
        "{}",
        text(&e)
    );

    // DISTINCT and SEEN over the covering day: never exact, and the interval still holds the
    // truth of the asked hours.
    let hours = in_range(&events, D29 + 5 * HOUR, D29 + 8 * HOUR);
    let distinct: HashSet<&str> = hours.iter().map(|e| e.item.as_str()).collect();
    let a = s.query(&format!("DISTINCT wallets {r}")).expect("distinct");
    let d = distinct.len() as f64;
    assert!(
        !a.exact && a.lower.unwrap() <= d && d <= a.upper.unwrap(),
        "{d}: {a}"
    );
    let a = s
        .query(&format!("SEEN {} {r}", hours[0].item))
        .expect("seen");
    assert!(!a.exact && text(&a) == "maybe", "{a}");

    // The sample of the covering day's reservoir keeps only the rows inside the asked hours.
    let a = s.query(&format!("SAMPLE 200 {r}")).expect("sample");
    assert!(!rows(&a).is_empty(), "{a}");
    for row in rows(&a) {
        let t = chrono::DateTime::parse_from_rfc3339(row["time"].as_str().expect("time"))
            .expect("time")
            .timestamp_millis();
        assert!((D29 + 5 * HOUR..D29 + 8 * HOUR).contains(&t), "{row}");
    }

    // The day whose raw events are kept is still answered exactly.
    let kept = in_range(&events, D30 + 5 * HOUR, D30 + 8 * HOUR).len() as f64;
    let a = s
        .query("COUNT FROM 2026-10-30T05 TO 2026-10-30T07")
        .expect("kept");
    assert_eq!((number(&a), a.exact), (kept, true), "{a}");

    // Over the scan budget: the covering buckets answer, and the answer says why.
    s.options = Options {
        scan_budget: 1_000,
        ..Options::default()
    };
    let a = s
        .query("COUNT FROM 2026-10-30T05 TO 2026-10-30T07")
        .expect("budget");
    assert!(
        !a.exact && a.lower.unwrap() <= kept && kept <= a.upper.unwrap(),
        "{a}"
    );
    assert!(
        a.notes.iter().any(|n| n.contains("budget")),
        "{:?}",
        a.notes
    );
    finish(store);
}

/// The retention advice names queries that work: each suggestion runs.
#[test]
fn after_retention_the_advice_names_queries_that_work() {
    let events = days();
    let store = retained_store("advice", &events);
    let mut s = session(&store);
    let w = &in_range(&events, D29, D30)[0].item;
    for q in [
        format!("EXACT SEEN {w} ON chain:a AND chain:b FROM 2026-10-29"),
        format!("EXACT SEEN {w} ON chain:a AND chain:b FROM 2026-10-28 TO 2026-10-29"),
        "EXACT COUNT FROM 2026-10-28 TO 2026-10-29".to_string(),
        "EXACT DISTINCT wallets ON chain:a EXCEPT chain:b FROM yesterday".to_string(),
    ] {
        let e = s.query(&q).expect_err("raw events expired");
        let QueryError::Refused(r) = &e else {
            panic!("{q}: not a refusal with advice: {e}");
        };
        assert!(!r.instead.contains("without EXACT"), "{e}");
        for suggestion in r.instead.split(", or ") {
            s.query(suggestion)
                .unwrap_or_else(|e| panic!("{q} suggested {suggestion}, which fails: {e}"));
        }
    }
    finish(store);
}

/// 177k-wallet scenario in small: a coarse Count-Min (ε = 0.05: 59 columns) overestimates
/// every wallet, so the sketch's own counts are wrong; the recount over the kept raw events
/// gives each candidate its true count and ranks by it.
#[test]
fn top_recounts_its_candidates_exactly_even_when_count_min_overestimates() {
    let mut events = Vec::new();
    let mut truth: HashMap<String, u64> = HashMap::new();
    // 15 heavy wallets, 2,000 + 100·i events; 30,000 light wallets with 1 or 2 events.
    for i in 0..15u64 {
        for _ in 0..2_000 + 100 * i {
            events.push(wallet_address(21, i));
        }
    }
    for i in 0..30_000u64 {
        for _ in 0..1 + i % 2 {
            events.push(wallet_address(22, i));
        }
    }
    let mut keyed: Vec<(u64, String)> = events
        .into_iter()
        .enumerate()
        .map(|(k, w)| (splitmix64(k as u64 ^ 0xabc), w))
        .collect();
    keyed.sort_unstable();
    let events: Vec<Event> = keyed
        .into_iter()
        .enumerate()
        .map(|(k, (_, w))| {
            *truth.entry(w.clone()).or_insert(0) += 1;
            Event::new(D30 + (k as i64 * 997) % DAY, w, &[("chain", "a")])
        })
        .collect();
    let mut cfg = config(BucketWidth::Day);
    cfg.sketches.cms_epsilon = 0.05;
    // Room for every heavy wallet among the candidates even when light wallets that share all
    // their counters with a heavy one rank above it.
    cfg.sketches.top_k = 500;
    let store = store_with("top", cfg, &events);

    // The precondition: the sketch's own estimates are too high.
    let day = TimeRange::between(D30, D30 + DAY);
    let (cands, _) = store.top(&Slice::Whole, &day, 500).expect("top");
    assert!(
        cands
            .iter()
            .any(|c| c.estimate > truth[&String::from_utf8_lossy(&c.item).to_string()]),
        "the coarse sketch overestimates"
    );

    let mut s = session(&store);
    let a = s
        .query("TOP 12 wallets FROM 2026-10-30 TO 2026-10-30")
        .expect("top");
    let got: Vec<(String, u64)> = rows(&a)
        .iter()
        .map(|row| {
            let item = row["item"].as_str().expect("item").to_string();
            let count = row["count"].as_u64().expect("integer count");
            assert_eq!(count, truth[&item], "not the true count: {row}");
            assert_eq!(row["exact"], true, "{row}");
            (item, count)
        })
        .collect();
    let want: Vec<(String, u64)> = (3..15u64)
        .rev()
        .map(|i| (wallet_address(21, i), 2_000 + 100 * i))
        .collect();
    assert_eq!(got, want, "{a}");
    assert!(
        !a.exact,
        "candidates from a sketch are not provably the top 12: {a}"
    );
    assert!(
        a.notes.iter().any(|n| n.contains("re-counted")),
        "{:?}",
        a.notes
    );

    // Over the scan budget there is no recount: every row carries its bound, which holds.
    s.options.scan_budget = 1_000;
    let a = s
        .query("TOP 12 wallets FROM 2026-10-30 TO 2026-10-30")
        .expect("top");
    for row in rows(&a) {
        let t = truth[row["item"].as_str().expect("item")] as f64;
        let (lo, hi) = (
            row["lower"].as_f64().expect("lower"),
            row["count"].as_f64().expect("count"),
        );
        assert!(lo <= t && t <= hi, "{t} outside {row}");
        assert_eq!(row["exact"], false, "{row}");
    }
    assert!(
        a.notes.iter().any(|n| n.contains("budget")),
        "{:?}",
        a.notes
    );
    finish(store);
}

/// Two tag fields: 1,000 events carry both chain:a and token:t. `COUNT w ON chain:a OR
/// token:t` is the number of events in the union, 1,000, not 2,000.
#[test]
fn count_of_a_value_over_tags_of_two_fields_counts_each_event_once() {
    let w = wallet_address(31, 0);
    let mut events = Vec::new();
    for j in 0..1_000i64 {
        events.push(Event::new(
            D30 + j * 60_000,
            w.clone(),
            &[("chain", "a"), ("token", "t")],
        ));
    }
    for j in 0..300i64 {
        events.push(Event::new(D30 + j * 50_000, w.clone(), &[("token", "u")]));
    }
    for j in 0..20_000u64 {
        let chain = if j.is_multiple_of(2) { "a" } else { "b" };
        let token = if j.is_multiple_of(3) { "t" } else { "u" };
        events.push(Event::new(
            D30 + (splitmix64(j) % DAY as u64) as i64,
            wallet_address(32, j % 5_000),
            &[("chain", chain), ("token", token)],
        ));
    }
    let store = store_with(
        "union",
        Config {
            tag_fields: vec!["chain".into(), "token".into()],
            ..config(BucketWidth::Day)
        },
        &events,
    );
    let mut s = session(&store);
    let q = format!("COUNT {w} ON chain:a OR token:t");
    let a = s.query(&q).expect("count");
    assert!(
        a.lower.unwrap() <= 1_000.0 && 1_000.0 <= a.upper.unwrap(),
        "the interval excludes the truth: {a}"
    );
    assert_eq!((number(&a), a.exact), (1_000.0, true), "{a}");

    // When the scan may not run, the engine refuses and names queries that answer.
    s.options.scan_budget = 1_000;
    let e = s.query(&q).expect_err("refused");
    let QueryError::Refused(r) = &e else {
        panic!("{e}")
    };
    assert!(r.instead.contains("EXACT COUNT"), "{e}");
    for suggestion in r.instead.split(", or ") {
        s.query(suggestion)
            .unwrap_or_else(|e| panic!("suggested {suggestion}, which fails: {e}"));
    }
    finish(store);
}

/// jq users compare numbers: every integral number in an answer's JSON is an integer.
#[test]
fn integral_numbers_in_json_are_integers() {
    let events = days();
    let store = store_with("json", config(BucketWidth::Day), &events);
    let mut s = session(&store);
    let a = s.query("COUNT").expect("count");
    let j = json(&a);
    for f in ["value", "lower", "upper"] {
        assert!(j[f].is_u64(), "{f}: {}", a.to_json());
    }
    assert!(a
        .to_json()
        .contains(&format!("\"value\":{},", events.len())));
    let a = s.query(&format!("COUNT {}", bot())).expect("count bot");
    let j = json(&a);
    assert!(
        j["value"].is_u64() && j["lower"].is_u64(),
        "{}",
        a.to_json()
    );
    s.options.exact_fallback = false;
    let a = s.query("TOP 3 wallets").expect("top");
    let j = json(&a);
    for row in j["value"].as_array().expect("rows") {
        for f in ["count", "lower"] {
            assert!(row[f].is_u64(), "{f}: {}", a.to_json());
        }
    }
    assert!(!a.to_string().contains(".0"), "{a}");
    finish(store);

    // The same through the CLI, as jq users see it.
    let dir = tempdir("json-cli");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("events.jsonl");
    let lines: String = (0..1_000)
        .map(|i| {
            format!(
                "{{\"time\":{},\"wallet\":\"{}\",\"chain\":\"a\"}}\n",
                1_793_318_400 + i,
                wallet_address(41, i as u64 % 10)
            )
        })
        .collect();
    std::fs::write(&file, lines).expect("write");
    let db = dir.join("db");
    let db = db.to_string_lossy();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sketchdb"))
            .env_remove("SKETCHDB_DB")
            .args(args)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["--db", &db, "init"]);
    run(&["--db", &db, "ingest", &file.to_string_lossy()]);
    let out = run(&["--db", &db, "query", "--json", "COUNT"]);
    assert!(
        out.contains("\"value\":1000,") && out.contains("\"lower\":1000,"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `FROM <date>` without `TO` is "since that date", in the answer and in HELP.
#[test]
fn from_a_date_alone_reads_since_that_date() {
    let events = days();
    let store = store_with("since", config(BucketWidth::Day), &events);
    let mut s = session(&store);
    let a = s.query("COUNT FROM 2026-10-29").expect("since");
    assert_eq!(number(&a), in_range(&events, D29, i64::MAX).len() as f64);
    assert!(
        json(&a)["range"]
            .as_str()
            .is_some_and(|r| r.contains("since 2026-10-29")),
        "{}",
        a.to_json()
    );
    assert!(a.to_string().contains("since 2026-10-29"), "{a}");
    let help = s.query("HELP").expect("help");
    assert!(
        text(&help).contains("FROM <date> alone: since that date"),
        "{}",
        text(&help)
    );
    finish(store);
}

/// "no buckets in …" only when nothing at all was ingested there; a tag with no events there,
/// or an hour with no events in a day bucket, says what is really empty.
#[test]
fn no_buckets_is_said_only_when_there_are_none() {
    let mut events = Vec::new();
    for j in 0..1_000i64 {
        events.push(Event::new(
            D28 + 5 * HOUR + j,
            wallet_address(51, 0),
            &[("chain", "a")],
        ));
        events.push(Event::new(
            D29 + 5 * HOUR + j,
            wallet_address(51, 1),
            &[("chain", "b")],
        ));
    }
    let store = store_with("empty", config(BucketWidth::Day), &events);
    let mut s = session(&store);
    for q in [
        "COUNT ON chain:b FROM 2026-10-28 TO 2026-10-28",
        "DISTINCT wallets ON chain:b FROM 2026-10-28 TO 2026-10-28",
        "COUNT ON chain:a FROM 2026-10-28T03 TO 2026-10-28T03",
        "COUNT FROM 2026-10-28T03 TO 2026-10-28T03",
    ] {
        let a = s.query(q).expect(q);
        assert_eq!(number(&a), 0.0, "{q}: {a}");
        assert!(
            a.notes.iter().all(|n| !n.contains("no buckets")),
            "{q}: {:?}",
            a.notes
        );
    }
    let a = s
        .query("COUNT ON chain:b FROM 2026-10-28 TO 2026-10-28")
        .expect("tag");
    assert!(
        a.notes.iter().any(|n| n.contains("no chain:b events")),
        "{:?}",
        a.notes
    );
    let a = s
        .query("COUNT FROM 2020-01-01 TO 2020-01-02")
        .expect("none");
    assert!(
        a.notes.iter().any(|n| n.contains("no buckets")),
        "{:?}",
        a.notes
    );
    finish(store);
}

#[test]
fn show_tags_is_sorted() {
    let events: Vec<Event> = ["z", "a", "m", "b"]
        .iter()
        .enumerate()
        .map(|(i, c)| Event::new(D30 + i as i64, wallet_address(61, 0), &[("chain", c)]))
        .collect();
    let store = store_with("tags", config(BucketWidth::Day), &events);
    let a = store.query("SHOW TAGS").expect("tags");
    let got: Vec<&str> = rows(&a).iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(got, ["chain:a", "chain:b", "chain:m", "chain:z"]);
    finish(store);
}

/// Issue 12: a covering day whose sets still hold exact forms (fingerprints, exact counts) knows
/// the day, not the asked hours. A wallet seen that day only at 20:00 is "maybe" for 05:00-08:00,
/// never an exact "yes"; its count and its TOP row are not exact and may be as low as 0.
#[test]
fn a_cut_range_over_exact_forms_is_not_exact() {
    let mut events = Vec::new();
    for day in 0..3i64 {
        // Enough events to fill several log blocks (retention drops whole blocks), from 5
        // wallets, so every set stays in its exact forms.
        for i in 0..5_000u64 {
            events.push(Event::new(
                D28 + day * DAY + 20 * HOUR + i as i64 * 100,
                wallet_address(14, i % 5),
                &[("chain", "a")],
            ));
        }
    }
    let store = retained_store("cut-exact", &events);
    let mut s = session(&store);
    // Retention keeps a day of raw events: 10-28's are gone, its sets remain.
    let r = "FROM 2026-10-28T05 TO 2026-10-28T07";
    let w = wallet_address(14, 0);
    let a = s.query(&format!("SEEN {w} {r}")).expect("seen");
    assert!(!a.exact && text(&a) == "maybe", "{a}");
    // The whole day is answered exactly from its fingerprints: the form is exact.
    let a = s.query(&format!("SEEN {w} FROM 2026-10-28")).expect("seen");
    assert!(a.exact && text(&a) == "yes", "{a}");
    let a = s.query(&format!("COUNT {w} {r}")).expect("count");
    assert!(
        !a.exact && a.lower == Some(0.0) && a.upper == Some(1_000.0),
        "{a}"
    );
    let a = s.query(&format!("TOP 2 wallets {r}")).expect("top");
    assert!(!a.exact, "{a}");
    for row in rows(&a) {
        assert_eq!(
            (&row["exact"], &row["lower"]),
            (&serde_json::json!(false), &serde_json::json!(0)),
            "{row}"
        );
    }
    finish(store);
}
