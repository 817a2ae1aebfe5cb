//! The store driven through its library API: create, ingest, flush, reopen, the typed
//! operations, damage reports and concurrent use.

use rand::{rngs::StdRng, SeedableRng};
use sketchdb::gen::wallet_address;
use sketchdb::sketch::{Sketch, SketchConfig};
use sketchdb::store::{
    keys, BucketWidth, Config, Engine, Event, SledEngine, Slice, Store, StoreError, TimeRange,
    WriteBatch,
};
use std::sync::Arc;

const DAY: i64 = 86_400_000;
const T0: i64 = 1_764_547_200_000; // 2025-12-01T00:00:00Z

fn small_config() -> Config {
    Config {
        sketches: SketchConfig {
            bloom_capacity: 50_000,
            reservoir_size: 200,
            ..SketchConfig::default()
        },
        ..Config::default()
    }
}

/// Three days; chain a has wallets 0..6000, chain b 5000..11000 (1,000 on both); wallet 0 is a
/// bot with 3,000 extra transactions on chain a.
fn events() -> Vec<Event> {
    let mut out = Vec::new();
    for i in 0..11_000u64 {
        let day = (i % 3) as i64;
        let t = T0 + day * DAY + (i as i64 * 7_919) % DAY;
        if i < 6_000 {
            out.push(Event::new(t, wallet_address(1, i), &[("chain", "a")]));
        }
        if i >= 5_000 {
            out.push(Event::new(t + 1, wallet_address(1, i), &[("chain", "b")]));
        }
    }
    for j in 0..3_000i64 {
        out.push(Event::new(
            T0 + (j * 1_000) % (3 * DAY),
            wallet_address(1, 0),
            &[("chain", "a")],
        ));
    }
    out
}

/// Writes `value` under `key` in the (closed) store at `dir`, behind the store's back.
fn poke(dir: &std::path::Path, key: &[u8], value: Vec<u8>) {
    let engine = SledEngine::open(dir).expect("raw").expect("a store");
    let mut batch = WriteBatch::default();
    batch.put(key.to_vec(), value).expect("put");
    engine.apply(batch).expect("apply");
    engine.sync().expect("sync");
}

#[test]
fn ingest_route_flush_reopen_and_answer() {
    let dir = tempdir();
    let evs = events();
    {
        let store = Store::create(&dir, small_config()).expect("create");
        store.ingest_batch(&evs).expect("ingest");
        store.flush().expect("flush");
        check_answers(&store, evs.len() as u64);
    }
    let store = Store::open(&dir).expect("reopen");
    check_answers(&store, evs.len() as u64);
    assert_eq!(store.config(), &small_config());
}

fn check_answers(store: &Store, total: u64) {
    let all = TimeRange::all();
    let a = Slice::tag("chain", "a");
    let b = Slice::tag("chain", "b");
    assert_eq!(store.count(&Slice::Whole, &all).expect("count"), (total, 3));
    assert_eq!(store.count(&a, &all).expect("count").0, 9_000);
    assert_eq!(store.count(&b, &all).expect("count").0, 6_000);
    let buckets = store.buckets().expect("buckets");
    assert_eq!(
        buckets.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![T0, T0 + DAY, T0 + 2 * DAY]
    );
    assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), total);
    let mut tags = store.tags().expect("tags");
    tags.sort();
    assert_eq!(tags, vec!["chain:a", "chain:b"]);

    let hll = store.merged_hll(&Slice::Whole, &all).expect("hll");
    assert_eq!(hll.buckets, 3);
    let d = hll.sketch.expect("some").estimate();
    // Within 4 large-count standard errors (0.81%); the RSE at 11,000 is lower still (0.59%),
    // so a correct sketch fails this with probability below 1e-7.
    assert!((d.value / 11_000.0 - 1.0).abs() < 4.0 * 0.0081, "{d:?}");
    // One day only: wallets with i % 3 == 1.
    let day1 = TimeRange::between(T0 + DAY, T0 + 2 * DAY);
    let one = store.merged_hll(&Slice::Whole, &day1).expect("hll");
    assert_eq!(one.buckets, 1);

    let ta = store
        .merged_theta(&a, &all)
        .expect("theta")
        .sketch
        .expect("a");
    let tb = store
        .merged_theta(&b, &all)
        .expect("theta")
        .sketch
        .expect("b");
    let both = sketchdb::sketch::Theta::intersection([&ta, &tb])
        .expect("two")
        .estimate();
    assert!(both.lower <= 1_000.0 && 1_000.0 <= both.upper, "{both:?}");

    let seen = store
        .membership(&Slice::Whole, &all, &wallet_address(1, 42))
        .expect("seen");
    assert!(seen.maybe);
    assert_eq!(seen.buckets, 0, "all-time filter answers with no range");
    let in_range = store
        .membership(&b, &all, &wallet_address(1, 5_001))
        .expect("seen");
    assert!(in_range.maybe);
    assert_eq!(in_range.buckets, 3);
    // Not a statistical bound: each of the 3 filters is within its capacity, so its rate is at
    // most the 1% it was sized for and the compounded rate at most 1 − 0.99³ < 3%.
    let p = in_range.false_positive_rate;
    assert!(p > 0.0 && p < 0.03, "compounded rate {p}");
    let never = (0..200u64)
        .filter(|&i| {
            store
                .membership(&Slice::Whole, &all, &wallet_address(9, i))
                .expect("seen")
                .maybe
        })
        .count();
    // Each absent wallet is a false "maybe" with probability at most the all-time filter's 1%:
    // at most Binomial(200, 0.01) (mean 2), and 10 or more has probability 4e-5.
    assert!(never < 10, "{never} of 200 absent wallets reported maybe");

    let f = store
        .frequency(&a, &all, &wallet_address(1, 0))
        .expect("freq");
    assert!(
        f.estimate >= 3_001 && (f.estimate as f64) <= 3_001.0 + f.bound,
        "{f:?}"
    );
    assert_eq!(f.total, 9_000);
    let (top, _) = store.top(&a, &all, 5).expect("top");
    assert_eq!(top[0].item, wallet_address(1, 0).into_bytes());

    let mut rng = StdRng::seed_from_u64(1);
    let (sample, read) = store.sample(&b, &all, 150, &mut rng).expect("sample");
    assert_eq!((sample.len(), read), (150, 3));
    assert!(sample
        .iter()
        .all(|e| e.tags == vec![("chain".to_string(), "b".to_string())]));
    assert!(store.sample(&b, &all, 201, &mut rng).is_err());

    let events = store.events(&a, &day1).expect("scan");
    assert!(events
        .iter()
        .all(|e| day1.contains(e.time) && e.tags[0].1 == "a"));
    let expected = store.count(&a, &day1).expect("count").0;
    assert_eq!(events.len() as u64, expected);
}

#[test]
fn opening_errors_name_the_path_and_never_create_an_empty_store() {
    let dir = tempdir();
    let err = Store::open(&dir).err().expect("not a store");
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err}");
    assert!(err.to_string().contains(&dir.display().to_string()));
    assert!(
        std::fs::read_dir(&dir).expect("dir").next().is_none(),
        "nothing created"
    );

    let store = Store::create(&dir, small_config()).expect("create");
    let err = Store::open(&dir).err().expect("locked");
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    drop(store);
    let err = Store::create(&dir, small_config()).err().expect("exists");
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");

    // A future format version is refused, not misread.
    {
        let blob = sketchdb::codec::encode(sketchdb::store::META_KIND, &99u32).expect("encode");
        poke(&dir, &keys::meta("format"), blob);
    }
    let err = Store::open(&dir).err().expect("version");
    assert!(
        matches!(err, StoreError::UnsupportedVersion { found: 99, .. }),
        "{err}"
    );

    let bad = Config {
        tag_fields: vec!["a:b".into()],
        ..small_config()
    };
    assert!(Store::create(tempdir(), bad).is_err());
}

/// A store written before Count-Min rows were hashed independently (format 1) holds tables whose
/// columns this build would misread; opening it must fail, naming both versions, and change
/// nothing. The store is built by this build with its format record set back to 1, which is
/// exactly what a version-1 build wrote there.
#[test]
fn a_format_1_store_is_refused_by_name_not_misread() {
    let dir = tempdir();
    {
        let store = Store::create(&dir, small_config()).expect("create");
        store.ingest_batch(&events()[..100]).expect("ingest");
        store.flush().expect("flush");
    }
    let old = sketchdb::codec::encode(sketchdb::store::META_KIND, &1u32).expect("encode");
    poke(&dir, &keys::meta("format"), old.clone());
    let err = Store::open(&dir).err().expect("version 1 refused");
    assert!(
        matches!(
            err,
            StoreError::UnsupportedVersion {
                found: 1,
                oldest: 3,
                supported: 9,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("version 1")
            && msg.contains("versions 3 to 9")
            && msg.contains(&dir.display().to_string()),
        "{msg}"
    );
    let db = SledEngine::open(&dir).expect("raw").expect("a store");
    assert_eq!(
        db.get(&keys::meta("format")).expect("get").as_deref(),
        Some(old.as_slice()),
        "the refused store is left as it was"
    );
}

#[test]
fn a_bad_event_rejects_the_whole_batch() {
    let dir = tempdir();
    let store = Store::create(&dir, small_config()).expect("create");
    store.ingest_batch(&events()[..100]).expect("ingest");
    let mut batch: Vec<Event> = events()[100..200].to_vec();
    batch[50] = Event::new(T0, "0xabc", &[("colour", "red")]);
    let err = store.ingest_batch(&batch).expect_err("rejected");
    assert!(err.to_string().contains("event 50"), "{err}");
    assert!(err.to_string().contains("colour"), "{err}");
    batch[50] = Event::new(T0, "", &[]);
    assert!(store.ingest_batch(&batch).is_err());
    batch[50] = Event::new(T0, "0xabc", &[("chain", "c"), ("chain", "c")]);
    let err = store.ingest_batch(&batch).expect_err("duplicate tag");
    assert!(err.to_string().contains("chain:c appears twice"), "{err}");
    assert_eq!(
        store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count")
            .0,
        100
    );
    assert_eq!(store.tags().expect("tags"), vec!["chain:a".to_string()]);
}

#[test]
fn a_damaged_sketch_is_named_and_the_rest_stays_usable() {
    let dir = tempdir();
    {
        let store = Store::create(&dir, small_config()).expect("create");
        store.ingest_batch(&events()).expect("ingest");
        store.flush().expect("flush");
    }
    {
        let engine = SledEngine::open(&dir).expect("raw").expect("a store");
        // Tag 1 is chain:a (first seen); damage its HLL of the second day.
        let key = keys::sketch(keys::Part::Hll, 1, T0 + DAY);
        let mut v = engine.get(&key).expect("get").expect("present");
        let mid = v.len() / 2;
        v[mid] ^= 0xff;
        drop(engine);
        poke(&dir, &key, v);
    }
    let store = Store::open(&dir).expect("open");
    let err = store
        .merged_hll(&Slice::tag("chain", "a"), &TimeRange::all())
        .expect_err("damaged");
    let msg = err.to_string();
    assert!(
        msg.contains("hll") && msg.contains("2025-12-02") && msg.contains("chain:a"),
        "{msg}"
    );
    // Other kinds, other tags, other buckets still answer.
    store
        .merged_hll(&Slice::tag("chain", "b"), &TimeRange::all())
        .expect("b fine");
    store
        .merged_theta(&Slice::tag("chain", "a"), &TimeRange::all())
        .expect("theta fine");
    store
        .merged_hll(&Slice::tag("chain", "a"), &TimeRange::between(T0, T0 + DAY))
        .expect("day 1 fine");
    assert_eq!(
        store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count")
            .0,
        events().len() as u64
    );
    // A batch that needs the damaged set is refused whole, and the sets it loaded or created
    // before hitting the damage (a new day, a new tag) are not left behind.
    let before = store.buckets().expect("buckets");
    let batch = vec![
        Event::new(T0 + 9 * DAY, wallet_address(5, 1), &[("chain", "z")]),
        Event::new(T0 + DAY + 5, wallet_address(5, 2), &[("chain", "a")]),
    ];
    let err = store
        .ingest_batch(&batch)
        .expect_err("touches the damaged set");
    assert!(err.to_string().contains("chain:a"), "{err}");
    assert_eq!(store.buckets().expect("buckets"), before);
    assert!(!store.tags().expect("tags").contains(&"chain:z".to_string()));
}

#[test]
fn retention_drops_old_raw_events_but_never_sketches() {
    let dir = tempdir();
    let config = Config {
        retention_ms: Some(DAY),
        checkpoint_every: 1_000,
        ..small_config()
    };
    let store = Store::create(&dir, config).expect("create");
    for day in 0..5i64 {
        let batch: Vec<Event> = (0..2_000u64)
            .map(|i| {
                Event::new(
                    T0 + day * DAY + i as i64,
                    wallet_address(2, i),
                    &[("chain", "a")],
                )
            })
            .collect();
        store.ingest_batch(&batch).expect("ingest");
    }
    store.checkpoint().expect("checkpoint");
    let all = TimeRange::all();
    assert_eq!(store.count(&Slice::Whole, &all).expect("count").0, 10_000);
    let raw = store.events(&Slice::Whole, &all).expect("scan").len();
    assert!(raw < 10_000, "old raw events expired ({raw} left)");
    assert!(!store.raw_events_retained(&all).expect("retained"));
    assert!(store
        .raw_events_retained(&TimeRange::between(T0 + 4 * DAY, T0 + 5 * DAY))
        .expect("retained"));
    assert!(store
        .merged_hll(&Slice::Whole, &TimeRange::between(T0, T0 + DAY))
        .expect("hll")
        .sketch
        .is_some());
}

/// 48 hour buckets of two sets each (the whole stream and chain:a), each set far larger than
/// the 2 MiB budget allows for all 96: ingest must evict (what is held after a checkpoint is
/// within the budget, and less than all the sets) and every answer must stay what a store that
/// never evicts gives: the same counts, the same merged HLL and Theta sketches, bit for bit.
#[test]
fn memory_budget_evicts_and_answers_stay_the_same() {
    let bounded = Config {
        memory_budget: 2 << 20,
        bucket: BucketWidth::Hour,
        ..small_config()
    };
    let unbounded = Config {
        memory_budget: 1 << 30,
        ..bounded.clone()
    };
    let per_set = sketchdb::sketch::SketchSet::<Event>::largest_size_bytes(&bounded.sketches)
        .expect("size") as usize;
    assert!(
        96 * per_set > 4 * bounded.memory_budget,
        "the sets must not all fit: {per_set} bytes a set"
    );
    let batch: Vec<Event> = (0..20_000u64)
        .map(|i| {
            Event::new(
                T0 + (i as i64 % 48) * 3_600_000,
                wallet_address(3, i % 5_000),
                &[("chain", "a")],
            )
        })
        .collect();
    let evicting = Store::create(tempdir(), bounded.clone()).expect("create");
    let keeping = Store::create(tempdir(), unbounded).expect("create");
    for store in [&evicting, &keeping] {
        for chunk in batch.chunks(1_000) {
            store.ingest_batch(chunk).expect("ingest");
        }
        store.checkpoint().expect("checkpoint");
    }
    // What the evicting store holds: within its budget, so sets were dropped; the other one
    // still holds every set it built.
    let held = evicting.memory_use().expect("memory").sets;
    let all = keeping.memory_use().expect("memory").sets;
    assert!(
        held <= bounded.memory_budget,
        "{held} bytes of sets held over a budget of {}",
        bounded.memory_budget
    );
    assert!(
        all > 4 * held,
        "nothing was evicted: {held} held, {all} in all"
    );

    let range = TimeRange::all();
    let a = Slice::tag("chain", "a");
    for slice in [&Slice::Whole, &a] {
        assert_eq!(evicting.count(slice, &range).expect("count"), (20_000, 48));
        let got = evicting.merged_hll(slice, &range).expect("hll");
        let want = keeping.merged_hll(slice, &range).expect("hll");
        assert_eq!(got.buckets, 48);
        assert!(got.sketch == want.sketch, "the evicted sets' HLL differs");
        let got = evicting.merged_theta(slice, &range).expect("theta");
        let want = keeping.merged_theta(slice, &range).expect("theta");
        assert!(got.sketch == want.sketch, "the evicted sets' Theta differs");
        for h in [0i64, 23, 47] {
            let t = T0 + h * 3_600_000;
            let got = evicting.sketch_set(slice, t).expect("read").expect("set");
            let want = keeping.sketch_set(slice, t).expect("read").expect("set");
            assert!(
                got.bloom == want.bloom && got.cms == want.cms && got.events == want.events,
                "hour {h}: a reloaded set differs from the one never evicted"
            );
        }
    }
    // 5,000 distinct wallets: the estimate within 4 of its own standard errors (the interval's
    // half-width / 1.96), which a correct HLL leaves with probability 6e-5.
    let d = evicting
        .merged_hll(&Slice::Whole, &range)
        .expect("hll")
        .sketch
        .expect("some")
        .estimate();
    let se = (d.upper - d.lower) / (2.0 * 1.959_964);
    assert!((d.value - 5_000.0).abs() <= 4.0 * se, "{d:?}");
}

#[test]
fn concurrent_ingest_and_queries() {
    let dir = tempdir();
    let store = Arc::new(Store::create(&dir, small_config()).expect("create"));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                for b in 0..10u64 {
                    let batch: Vec<Event> = (0..1_000u64)
                        .map(|i| {
                            Event::new(
                                T0 + (i as i64) * 10_000,
                                wallet_address(10 + w, b * 1_000 + i),
                                &[("chain", "a")],
                            )
                        })
                        .collect();
                    s.ingest_batch(&batch).expect("ingest");
                }
            })
        })
        .collect();
    // Readers query while the writers run: every call must succeed (an error is a failure, not
    // something to skip), every count is whole batches and never goes back, and every merged
    // HLL is a valid sketch whose estimate is consistent with the count it was read with.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut last = 0;
                let mut sketches = 0;
                for _ in 0..50 {
                    let (n, _) = s
                        .count(&Slice::Whole, &TimeRange::all())
                        .expect("count while writers run");
                    assert!(
                        n >= last && n % 1_000 == 0,
                        "count {n} after {last}: a batch is applied whole"
                    );
                    last = n;
                    let m = s
                        .merged_hll(&Slice::Whole, &TimeRange::all())
                        .expect("merged HLL while writers run");
                    if let Some(h) = m.sketch {
                        h.validate().expect("consistent sketch");
                        // Read after the count, so at least that many distinct wallets (every
                        // event here has its own) are in it, give or take 5 standard errors.
                        let e = h.estimate();
                        let se = (e.upper - e.lower) / (2.0 * 1.959_964);
                        assert!(e.value + 5.0 * se >= n as f64, "{e:?} after a count of {n}");
                        sketches += 1;
                    } else {
                        assert_eq!(n, 0, "a count of {n} but no sketch");
                    }
                }
                (last, sketches)
            })
        })
        .collect();
    for t in writers {
        t.join().expect("writer");
    }
    for t in readers {
        let (last, _) = t.join().expect("reader");
        assert!(last <= 40_000);
    }
    let (n, _) = store
        .count(&Slice::Whole, &TimeRange::all())
        .expect("count");
    assert_eq!(n, 40_000);
    let d = store
        .merged_hll(&Slice::Whole, &TimeRange::all())
        .expect("hll")
        .sketch
        .expect("some")
        .estimate();
    assert!(d.lower <= 40_000.0 && 40_000.0 <= d.upper, "{d:?}");
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sketchdb-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Sampling across buckets follows the buckets' event counts: a day with 9,000 events and one
/// with 1,000 should give 90% and 10% of a sample. Over 400 samples of 100 the count from the
/// small day is hypergeometric-ish with mean 4,000 and sd ≈ sqrt(40,000·0.1·0.9) = 60; the
/// band ±300 is 5 sd, so only a real bias (such as splitting evenly per bucket) fails it.
#[test]
fn samples_across_buckets_follow_their_event_counts() {
    let dir = tempdir();
    let store = Store::create(&dir, small_config()).expect("create");
    let mut batch: Vec<Event> = (0..9_000u64)
        .map(|i| Event::new(T0 + i as i64, wallet_address(6, i), &[("chain", "a")]))
        .collect();
    batch.extend(
        (0..1_000u64)
            .map(|i| Event::new(T0 + DAY + i as i64, wallet_address(7, i), &[("chain", "a")])),
    );
    store.ingest_batch(&batch).expect("ingest");
    let mut rng = StdRng::seed_from_u64(11);
    let mut small_day = 0;
    for _ in 0..400 {
        let (sample, buckets) = store
            .sample(&Slice::Whole, &TimeRange::all(), 100, &mut rng)
            .expect("sample");
        assert_eq!((sample.len(), buckets), (100, 2));
        small_day += sample.iter().filter(|e| e.time >= T0 + DAY).count();
    }
    assert!(
        (3_700..=4_300).contains(&small_day),
        "{small_day} of 40,000 from the small day"
    );
}

/// `Store::import` is all or nothing: an error or a panic inside it leaves the store as it was,
/// in memory and on disk; a success is durable without a flush.
#[test]
fn an_import_commits_whole_or_rolls_back() {
    let dir = tempdir();
    let store = Store::create(&dir, small_config()).expect("create");
    let evs = events();
    let (half, rest) = evs.split_at(evs.len() / 2);
    store.ingest_batch(half).expect("ingest");
    let whole = |s: &Store| s.count(&Slice::Whole, &TimeRange::all()).expect("count").0;
    let distinct = |s: &Store| {
        s.merged_hll(&Slice::Whole, &TimeRange::all())
            .expect("hll")
            .sketch
            .map_or(0.0, |h| h.estimate().value)
    };
    let before = (whole(&store), distinct(&store), store.tags().expect("tags"));

    let failed: Result<(), StoreError> = store.import(|imp| {
        imp.ingest_batch(rest)?;
        imp.ingest_batch(&[Event::new(1, "0xnew", &[("chain", "brand-new")])])?;
        Err(StoreError::Query("the input had a bad line".into()))
    });
    assert!(failed.is_err());
    assert_eq!(
        (whole(&store), distinct(&store), store.tags().expect("tags")),
        before
    );

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(rest)?;
            panic!("a bug in the caller");
        });
    }));
    assert!(panicked.is_err());
    drop(store); // the drop's checkpoint must not write the half-done import
    let store = Store::open(&dir).expect("reopen");
    assert_eq!(
        (whole(&store), distinct(&store), store.tags().expect("tags")),
        before
    );

    store.import(|imp| imp.ingest_batch(rest)).expect("import");
    assert_eq!(whole(&store), evs.len() as u64);
    assert!(distinct(&store) > before.1);
    drop(store);
    let store = Store::open(&dir).expect("reopen");
    assert_eq!(whole(&store), evs.len() as u64);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11, item 7: a configuration is checked in full at creation, so a store never exists that
/// later refuses events (or its own sketches) for a reason the configuration already implied.
#[test]
fn config_validation_refuses_what_the_store_would_trip_over_later() {
    let fields = |n: usize| (0..n).map(|i| format!("tag{i}")).collect::<Vec<_>>();
    // 17 tag fields: an event carrying all of them would be refused (16 tags per event).
    let seventeen = Config {
        tag_fields: fields(17),
        ..small_config()
    };
    let err = Store::create(tempdir(), seventeen)
        .err()
        .expect("17 tag fields refused");
    assert!(
        err.to_string().contains("17") && err.to_string().contains("16"),
        "{err}"
    );
    // 16 are fine, and an event with a value for every one of them is accepted.
    let sixteen = Config {
        tag_fields: fields(16),
        ..small_config()
    };
    let store = Store::create(tempdir(), sixteen).expect("16 tag fields");
    let names = fields(16);
    let tags: Vec<(&str, &str)> = names.iter().map(|f| (f.as_str(), "v")).collect();
    store
        .ingest(&Event::new(T0, "0xabc", &tags))
        .expect("an event with every tag field");

    let refused = |c: Config, needle: &str| {
        let err = Store::create(tempdir(), c.clone())
            .err()
            .unwrap_or_else(|| panic!("accepted {c:?}"));
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    };
    let sk = |s: SketchConfig| Config {
        sketches: s,
        ..small_config()
    };
    let base = small_config().sketches;
    refused(
        Config {
            tag_fields: vec!["chain".into(), "chain".into()],
            ..small_config()
        },
        "twice",
    );
    // A tag field the query language cannot name (`ON <field>:<value>`).
    refused(
        Config {
            tag_fields: vec!["my chain".into()],
            ..small_config()
        },
        "my chain",
    );
    refused(
        Config {
            item_field: "a:b".into(),
            ..small_config()
        },
        "a:b",
    );
    // Sketch sizes.
    refused(
        sk(SketchConfig {
            reservoir_size: usize::MAX,
            ..base.clone()
        }),
        "reservoir",
    );
    refused(
        sk(SketchConfig {
            top_k: usize::MAX,
            ..base.clone()
        }),
        "top",
    );
    // 1e-30 needs about 100 probes per item, more than a stored filter may have: the store
    // would later report its own filters as damaged.
    refused(
        sk(SketchConfig {
            bloom_fpr: 1e-30,
            ..base.clone()
        }),
        "false-positive rate",
    );
    // Theta at 2^20 holds up to 2^21 hashes (16 MiB): past the largest sketch a set may hold.
    refused(
        sk(SketchConfig {
            theta_nominal_entries: 1 << 20,
            ..base.clone()
        }),
        "theta",
    );
    refused(
        sk(SketchConfig {
            cms_epsilon: 1e-6,
            ..base.clone()
        }),
        "count-min",
    );
    // A budget smaller than the sets one event touches can never be met.
    refused(
        Config {
            memory_budget: 1_000,
            ..small_config()
        },
        "memory budget",
    );
    refused(
        Config {
            retention_ms: Some(i64::MAX),
            ..small_config()
        },
        "retention",
    );
}

/// Issue 11, item 8: a panic inside `import` rolls the import back and leaves the store fully
/// usable: what is ingested and flushed afterwards survives a reopen.
#[test]
fn a_panic_inside_import_rolls_back_and_later_flushes_persist() {
    let dir = tempdir();
    let store = Store::create(&dir, small_config()).expect("create");
    let evs = events();
    store.ingest_batch(&evs[..500]).expect("ingest");
    store.flush().expect("flush");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(&evs[500..1_500])?;
            panic!("a bug in the caller");
        });
    }));
    assert!(panicked.is_err(), "the panic reaches the caller");
    let whole = |s: &Store| s.count(&Slice::Whole, &TimeRange::all()).expect("count").0;
    assert_eq!(whole(&store), 500, "the import was rolled back");
    store
        .ingest_batch(&evs[1_500..2_500])
        .expect("ingest after");
    store.flush().expect("flush after");
    drop(store);
    let store = Store::open(&dir).expect("reopen");
    assert_eq!(whole(&store), 1_500);
    let logged = store
        .events(&Slice::Whole, &TimeRange::all())
        .expect("scan")
        .len();
    assert_eq!(logged, 1_500, "every flushed event is in the log");
}

/// Issue 11, item 9: times at the ends of `i64` are refused with an error naming the value, never
/// a panic or a silently wrapped bucket; the supported span's own ends work.
#[test]
fn extreme_times_are_errors_naming_the_value() {
    let config = Config {
        retention_ms: Some(DAY),
        ..small_config()
    };
    let store = Store::create(tempdir(), config).expect("create");
    for t in [i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1] {
        let err = store
            .ingest(&Event::new(t, "0xabc", &[]))
            .expect_err("refused");
        assert!(err.to_string().contains(&t.to_string()), "{err}");
    }
    // 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z are the supported span's ends.
    let (first, last) = (-62_167_219_200_000i64, 253_402_300_799_999i64);
    for t in [first - 1, last + 1] {
        let err = store
            .ingest(&Event::new(t, "0xabc", &[]))
            .expect_err("just outside");
        assert!(err.to_string().contains(&t.to_string()), "{err}");
    }
    store
        .ingest_batch(&[
            Event::new(first, "0xfirst", &[("chain", "a")]),
            Event::new(last, "0xlast", &[("chain", "a")]),
        ])
        .expect("the span's ends");
    store.flush().expect("flush");
    store.checkpoint().expect("checkpoint with retention");
    let all = TimeRange::all();
    assert_eq!(store.count(&Slice::Whole, &all).expect("count").0, 2);
    assert!(store
        .sketch_set(&Slice::Whole, last)
        .expect("last bucket")
        .is_some());
    assert!(store
        .sketch_set(&Slice::Whole, first)
        .expect("first bucket")
        .is_some());

    let wide = TimeRange::between(i64::MIN, i64::MAX);
    let err = store
        .count(&Slice::Whole, &wide)
        .expect_err("extreme range");
    assert!(err.to_string().contains(&i64::MIN.to_string()), "{err}");
    let open_end = TimeRange {
        start: None,
        end: Some(i64::MAX),
    };
    let err = store
        .merged_hll(&Slice::Whole, &open_end)
        .expect_err("extreme end");
    assert!(err.to_string().contains(&i64::MAX.to_string()), "{err}");
    let err = store
        .sketch_set(&Slice::Whole, i64::MIN)
        .expect_err("extreme bucket");
    assert!(err.to_string().contains(&i64::MIN.to_string()), "{err}");
    let mut rng = StdRng::seed_from_u64(3);
    let err = store
        .sample(&Slice::Whole, &all, usize::MAX, &mut rng)
        .expect_err("sample size");
    assert!(err.to_string().contains(&usize::MAX.to_string()), "{err}");
    // The store is still whole.
    assert_eq!(store.count(&Slice::Whole, &all).expect("count").0, 2);
}

mod extreme_inputs {
    //! Issue 11, item 9: every public `Store` method fed extreme values (times and range ends at
    //! the ends of `i64` and of the supported span, sizes at the ends of `usize`, empty and odd
    //! strings) returns a result, never panics (tests are built with overflow checks on), and
    //! every call that reports success did its work: the store's count is exactly the events
    //! whose ingest returned `Ok`.
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    const FIRST: i64 = -62_167_219_200_000; // 0000-01-01T00:00:00Z
    const LAST: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z

    fn time() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MIN + 1),
            Just(i64::MAX),
            Just(i64::MAX - 1),
            Just(FIRST),
            Just(FIRST - 1),
            Just(LAST),
            Just(LAST + 1),
            Just(0),
            any::<i64>(),
            (T0..T0 + 10 * DAY),
        ]
    }

    fn size() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0usize),
            Just(1),
            Just(usize::MAX),
            Just(usize::MAX / 2),
            0..500usize,
            any::<usize>()
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "0x[0-9a-f]{40}",
            "[a-c:]{1,3}",
            ".{0,12}",
        ]
    }

    fn event() -> impl Strategy<Value = Event> {
        let field = prop_oneof![
            Just("chain".to_string()),
            Just("token".to_string()),
            Just(String::new()),
            Just("x:y".to_string()),
        ];
        (
            time(),
            text(),
            prop::collection::vec((field, text()), 0..20),
            ".{0,8}",
        )
            .prop_map(|(time, item, tags, extra)| Event {
                time,
                item,
                tags,
                extra,
            })
    }

    struct Shared {
        store: Store,
        accepted: AtomicU64,
    }

    fn shared() -> &'static Shared {
        static SHARED: OnceLock<Shared> = OnceLock::new();
        SHARED.get_or_init(|| {
            let config = Config {
                tag_fields: vec!["chain".into(), "token".into()],
                bucket: BucketWidth::Hour,
                retention_ms: Some(DAY),
                checkpoint_every: 7,
                ..small_config()
            };
            Shared {
                store: Store::create(tempdir(), config).expect("create"),
                accepted: AtomicU64::new(0),
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn no_public_store_method_panics_or_reports_work_it_did_not_do(
            one in event(),
            batch in prop::collection::vec(event(), 0..4),
            start in prop::option::of(time()),
            end in prop::option::of(time()),
            n in size(),
            bucket in time(),
            item in text(),
            seed in any::<u64>(),
        ) {
            let s = shared();
            let store = &s.store;
            if store.ingest(&one).is_ok() {
                s.accepted.fetch_add(1, Ordering::SeqCst);
            }
            if !(FIRST..=LAST).contains(&one.time) {
                prop_assert!(store.ingest(&one).is_err(), "time {} accepted", one.time);
            }
            if store.ingest_batch(&batch).is_ok() {
                s.accepted.fetch_add(batch.len() as u64, Ordering::SeqCst);
            }
            if store.import(|imp| imp.ingest_batch(&batch)).is_ok() {
                s.accepted.fetch_add(batch.len() as u64, Ordering::SeqCst);
            }
            let range = TimeRange { start, end };
            let mut rng = StdRng::seed_from_u64(seed);
            let mut slices = vec![Slice::Whole, Slice::tag("chain", "a"), Slice::tag("nope", "x")];
            slices.extend(one.tags.iter().map(|(f, v)| Slice::tag(f, v)));
            for slice in &slices {
                let _ = store.tag_id_of(slice);
                let _ = store.count(slice, &range);
                let _ = store.merged_hll(slice, &range);
                let _ = store.merged_theta(slice, &range);
                let _ = store.merged_countmin(slice, &range);
                let _ = store.membership(slice, &range, &item);
                let _ = store.frequency(slice, &range, &item);
                let _ = store.top(slice, &range, n);
                let _ = store.sample(slice, &range, n, &mut rng);
                let _ = store.scan(slice, &range, |_| {});
                let _ = store.events(slice, &range);
                let _ = store.sketch_set(slice, bucket);
            }
            let _ = store.raw_events_retained(&range);
            let _ = store.memory_use();
            let _ = store.buckets();
            let _ = store.tags();
            let _ = store.query("SHOW SKETCHES");
            let mut buf = [0u8; 20];
            let _ = Store::item_key(&item, &mut buf);
            prop_assert!(store.flush().is_ok());
            prop_assert!(store.checkpoint().is_ok());
            let (count, _) = store.count(&Slice::Whole, &TimeRange::all()).expect("count");
            prop_assert_eq!(count, s.accepted.load(Ordering::SeqCst));
        }
    }
}

/// Issue 11, item 11: reads (typed `sketch_set`, `SHOW SKETCHES`, merged sketches, samples,
/// membership) never grow the sketch sets held in memory past the budget, however many buckets
/// they read.
#[test]
fn reads_never_grow_memory_past_the_budget() {
    let sketches = SketchConfig {
        bloom_capacity: 2_000,
        theta_nominal_entries: 256,
        hll_precision: 10,
        cms_epsilon: 0.01,
        top_k: 20,
        reservoir_size: 20,
        ..SketchConfig::default()
    };
    let per_set =
        sketchdb::sketch::SketchSet::<Event>::largest_size_bytes(&sketches).expect("size") as usize;
    // Room for 8 sets at their largest; the store below holds 400 (200 hours, 2 per hour).
    let budget = 8 * per_set;
    let config = Config {
        bucket: BucketWidth::Hour,
        memory_budget: budget,
        sketches,
        ..small_config()
    };
    let store = Store::create(tempdir(), config).expect("create");
    let hours = 200i64;
    for h in 0..hours {
        let batch: Vec<Event> = (0..30u64)
            .map(|i| {
                Event::new(
                    T0 + h * 3_600_000 + i as i64,
                    wallet_address(4, h as u64 * 30 + i),
                    &[("chain", "a")],
                )
            })
            .collect();
        store.ingest_batch(&batch).expect("ingest");
    }
    store.flush().expect("flush");
    let within = |what: &str| {
        let used = store.memory_use().expect("memory").sets;
        assert!(
            used <= budget,
            "after {what}: {used} bytes of sketch sets held, budget {budget}"
        );
    };
    within("ingest");
    let a = Slice::tag("chain", "a");
    for h in 0..hours {
        let t = T0 + h * 3_600_000;
        for slice in [&Slice::Whole, &a] {
            let set = store.sketch_set(slice, t).expect("read").expect("present");
            assert_eq!(set.events, 30);
        }
    }
    within("sketch_set over every bucket");
    for _ in 0..3 {
        let answer = store.query("SHOW SKETCHES").expect("show sketches");
        assert_eq!(answer.buckets, hours as usize);
    }
    within("SHOW SKETCHES");
    let all = TimeRange::all();
    let mut rng = StdRng::seed_from_u64(5);
    for slice in [&Slice::Whole, &a] {
        store.merged_hll(slice, &all).expect("hll");
        store.merged_theta(slice, &all).expect("theta");
        store.top(slice, &all, 5).expect("top");
        store.sample(slice, &all, 20, &mut rng).expect("sample");
        let range = TimeRange::between(T0 + 3_600_000, T0 + 190 * 3_600_000);
        store
            .membership(slice, &range, &wallet_address(4, 7))
            .expect("seen");
        store.count(slice, &all).expect("count");
        store.events(slice, &range).expect("events");
    }
    within("merges, samples, membership and scans");
    // And the answers did not suffer: every event is still counted.
    assert_eq!(
        store.count(&Slice::Whole, &all).expect("count").0,
        30 * hours as u64
    );
}

/// A panic in the caller's `scan` callback reaches the caller and leaves the store usable (the
/// callback runs while the store's state is held, but changes nothing of it).
#[test]
fn a_panicking_scan_callback_leaves_the_store_usable() {
    let store = Store::create(tempdir(), small_config()).expect("create");
    store.ingest_batch(&events()[..100]).expect("ingest");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = store.scan(&Slice::Whole, &TimeRange::all(), |_| panic!("caller's bug"));
    }));
    assert!(panicked.is_err());
    store.ingest_batch(&events()[100..200]).expect("ingest");
    store.flush().expect("flush");
    assert_eq!(
        store
            .count(&Slice::Whole, &TimeRange::all())
            .expect("count")
            .0,
        200
    );
}

/// The configuration as stores written before `engine_cache_bytes` hold it.
#[derive(serde::Serialize)]
struct ConfigBeforeEngineCache {
    item_field: String,
    tag_fields: Vec<String>,
    bucket: BucketWidth,
    sketches: SketchConfig,
    retention_ms: Option<i64>,
    memory_budget: usize,
    checkpoint_every: u64,
    cache_bytes: usize,
    lowercase_items: bool,
}

/// A store made before the engine's cache was configurable opens with the default bound and
/// keeps its other settings (`lowercase_items` included, which the older fallback would drop).
#[test]
fn a_store_written_before_engine_cache_bytes_still_opens() {
    let dir = tempdir();
    let c = Config {
        lowercase_items: true,
        ..small_config()
    };
    drop(Store::create(&dir, c.clone()).expect("create"));
    let old = ConfigBeforeEngineCache {
        item_field: c.item_field.clone(),
        tag_fields: c.tag_fields.clone(),
        bucket: c.bucket,
        sketches: c.sketches.clone(),
        retention_ms: c.retention_ms,
        memory_budget: c.memory_budget,
        checkpoint_every: c.checkpoint_every,
        cache_bytes: c.cache_bytes,
        lowercase_items: c.lowercase_items,
    };
    let blob = sketchdb::codec::encode(sketchdb::store::META_KIND, &old).expect("encode");
    poke(&dir, &keys::meta("config"), blob);
    let store = Store::open(&dir).expect("an old store opens");
    assert_eq!(store.config(), &c);
    assert!(store.config().lowercase_items);
    assert_eq!(
        store.config().engine_cache_bytes,
        sketchdb::store::model::DEFAULT_ENGINE_CACHE_BYTES
    );
}

/// sled 0.34 writes any value over a quarter segment to a file of its own under `blobs/`, which
/// it never fsyncs and never reclaims. Default sizes (a Bloom filter of 1.2 MB), a tag with many
/// values, a 100 KB event field and the all-time filter must all reach sled in pieces small
/// enough that it keeps them in its segment log.
#[test]
fn no_value_reaches_sleds_blob_files() {
    let dir = tempdir();
    let config = Config {
        tag_fields: vec!["chain".into(), "contract".into()],
        ..Config::default()
    };
    let store = Store::create(&dir, config).expect("create");
    let mut batch = Vec::new();
    for i in 0..60_000u64 {
        let t = T0 + (i as i64 * 4_337) % (3 * DAY);
        let chain = ["a", "b", "c"][(i % 3) as usize];
        let contract = format!("0xc{:03}", i % 40);
        batch.push(Event::new(
            t,
            wallet_address(3, i),
            &[("chain", chain), ("contract", contract.as_str())],
        ));
        if batch.len() == 10_000 {
            store.ingest_batch(&batch).expect("ingest");
            batch.clear();
        }
    }
    let mut big = Event::new(T0 + 5, wallet_address(3, 0), &[("chain", "a")]);
    big.extra = format!("{{\"memo\":\"{}\"}}", "x".repeat(100_000));
    store.ingest_batch(&[big]).expect("a 100 KB field");
    store.flush().expect("flush");
    drop(store);

    let store = Store::open(&dir).expect("reopen");
    let (count, _) = store
        .count(&Slice::Whole, &TimeRange::all())
        .expect("count");
    assert_eq!(count, 60_001);
    let mut memo = 0;
    store
        .scan(&Slice::Whole, &TimeRange::all(), |e| {
            if e.extra.len() > 100_000 {
                memo += 1;
            }
        })
        .expect("scan");
    assert_eq!(memo, 1, "the 100 KB field comes back whole");
    drop(store);

    let blobs: Vec<_> = std::fs::read_dir(dir.join("blobs"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(blobs.is_empty(), "sled blob files: {blobs:?}");
    let engine = SledEngine::open(&dir).expect("raw").expect("a store");
    let (mut values, mut chunks, mut largest) = (0, 0, 0);
    for entry in engine.range(&[], None) {
        let (key, value) = entry.expect("scan");
        values += 1;
        chunks += usize::from(key[0] == keys::CHUNK);
        largest = largest.max(value.len());
    }
    assert!(
        largest <= sketchdb::store::VALUE_MAX,
        "{largest} bytes in one value"
    );
    // Without chunks the test would prove nothing: the large values must have been there.
    assert!(chunks >= 20, "{chunks} chunks among {values} values");

    // A lost chunk is damage named like any other: the first day's whole-stream Bloom filter.
    let bloom = keys::sketch(keys::Part::Bloom, keys::WHOLE, T0);
    let lost = keys::chunk(&bloom, 1);
    assert!(engine.get(&lost).expect("get").is_some(), "chunk 1 stored");
    let mut batch = WriteBatch::default();
    batch.delete(lost);
    engine.apply(batch).expect("apply");
    engine.sync().expect("sync");
    drop(engine);
    let store = Store::open(&dir).expect("reopen");
    let err = store
        .membership(&Slice::Whole, &TimeRange::between(T0, T0 + DAY), "0x1")
        .expect_err("a chunk of the filter is gone");
    let msg = err.to_string();
    assert!(
        msg.contains("bloom") && msg.contains("2025-12-01") && msg.contains("whole stream"),
        "{msg}"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
