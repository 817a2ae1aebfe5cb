//! The store driven through its library API: create, ingest, flush, reopen, the typed
//! operations, damage reports and concurrent use.

use rand::{rngs::StdRng, SeedableRng};
use sketchdb::gen::wallet_address;
use sketchdb::sketch::{Sketch, SketchConfig};
use sketchdb::store::{keys, BucketWidth, Config, Event, Slice, Store, StoreError, TimeRange};
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
    let mut tags = store.tags();
    tags.sort();
    assert_eq!(tags, vec!["chain:a", "chain:b"]);

    let hll = store.merged_hll(&Slice::Whole, &all).expect("hll");
    assert_eq!(hll.buckets, 3);
    let d = hll.sketch.expect("some").estimate();
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
        let db = sled::Config::new()
            .path(&dir)
            .segment_size(sketchdb::store::SEGMENT_BYTES)
            .open()
            .expect("raw");
        let blob = sketchdb::codec::encode(sketchdb::store::META_KIND, &99u32).expect("encode");
        db.insert(keys::meta("format"), blob).expect("insert");
        db.flush().expect("flush");
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
    let raw = || {
        sled::Config::new()
            .path(&dir)
            .segment_size(sketchdb::store::SEGMENT_BYTES)
            .open()
            .expect("raw")
    };
    let old = sketchdb::codec::encode(sketchdb::store::META_KIND, &1u32).expect("encode");
    {
        let db = raw();
        db.insert(keys::meta("format"), old.clone())
            .expect("insert");
        db.flush().expect("flush");
    }
    let err = Store::open(&dir).err().expect("version 1 refused");
    assert!(
        matches!(
            err,
            StoreError::UnsupportedVersion {
                found: 1,
                supported: 2,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("version 1")
            && msg.contains("version 2")
            && msg.contains(&dir.display().to_string()),
        "{msg}"
    );
    let db = raw();
    assert_eq!(
        db.get(keys::meta("format")).expect("get").as_deref(),
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
    assert_eq!(store.tags(), vec!["chain:a".to_string()]);
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
        let db = sled::Config::new()
            .path(&dir)
            .segment_size(sketchdb::store::SEGMENT_BYTES)
            .open()
            .expect("raw");
        // Tag 1 is chain:a (first seen); damage its HLL of the second day.
        let key = keys::sketch(keys::Part::Hll, 1, T0 + DAY);
        let mut v = db.get(key).expect("get").expect("present").to_vec();
        let mid = v.len() / 2;
        v[mid] ^= 0xff;
        db.insert(key, v).expect("insert");
        db.flush().expect("flush");
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
    assert!(!store.tags().contains(&"chain:z".to_string()));
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
    assert!(!store.raw_events_retained(&all));
    assert!(store.raw_events_retained(&TimeRange::between(T0 + 4 * DAY, T0 + 5 * DAY)));
    assert!(store
        .merged_hll(&Slice::Whole, &TimeRange::between(T0, T0 + DAY))
        .expect("hll")
        .sketch
        .is_some());
}

#[test]
fn memory_budget_evicts_and_answers_stay_the_same() {
    let dir = tempdir();
    let config = Config {
        memory_budget: 2 << 20,
        bucket: BucketWidth::Hour,
        ..small_config()
    };
    let store = Store::create(&dir, config).expect("create");
    let batch: Vec<Event> = (0..20_000u64)
        .map(|i| {
            Event::new(
                T0 + (i as i64 % 48) * 3_600_000,
                wallet_address(3, i % 5_000),
                &[("chain", "a")],
            )
        })
        .collect();
    for chunk in batch.chunks(1_000) {
        store.ingest_batch(chunk).expect("ingest");
    }
    let all = TimeRange::all();
    assert_eq!(
        store.count(&Slice::Whole, &all).expect("count"),
        (20_000, 48)
    );
    let d = store
        .merged_hll(&Slice::Whole, &all)
        .expect("hll")
        .sketch
        .expect("some")
        .estimate();
    assert!((d.value / 5_000.0 - 1.0).abs() < 0.01, "{d:?}");
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
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..50 {
                    let (n, _) = s.count(&Slice::Whole, &TimeRange::all()).unwrap_or((0, 0));
                    assert!(
                        n >= last && n % 1_000 == 0,
                        "count {n} after {last}: a batch is applied whole"
                    );
                    last = n;
                    if let Ok(m) = s.merged_hll(&Slice::Whole, &TimeRange::all()) {
                        if let Some(h) = m.sketch {
                            h.validate().expect("consistent sketch");
                        }
                    }
                }
            })
        })
        .collect();
    for t in writers.into_iter().chain(readers) {
        t.join().expect("thread");
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
    let before = (whole(&store), distinct(&store), store.tags());

    let failed: Result<(), StoreError> = store.import(|imp| {
        imp.ingest_batch(rest)?;
        imp.ingest_batch(&[Event::new(1, "0xnew", &[("chain", "brand-new")])])?;
        Err(StoreError::Query("the input had a bad line".into()))
    });
    assert!(failed.is_err());
    assert_eq!((whole(&store), distinct(&store), store.tags()), before);

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<(), StoreError> = store.import(|imp| {
            imp.ingest_batch(rest)?;
            panic!("a bug in the caller");
        });
    }));
    assert!(panicked.is_err());
    drop(store); // the drop's checkpoint must not write the half-done import
    let store = Store::open(&dir).expect("reopen");
    assert_eq!((whole(&store), distinct(&store), store.tags()), before);

    store.import(|imp| imp.ingest_batch(rest)).expect("import");
    assert_eq!(whole(&store), evs.len() as u64);
    assert!(distinct(&store) > before.1);
    drop(store);
    let store = Store::open(&dir).expect("reopen");
    assert_eq!(whole(&store), evs.len() as u64);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
