//! `sketchdb import-sketch` and `Store::import_sketch` as users meet them: images the official
//! `datasketches` crate builds, and images one store exports, imported into another and merged
//! there with native sketches; what queries then say; bad input leaving the store unchanged.

mod support;

use datasketches::hash::value::raw_bytes;
use datasketches::hll::{HllSketch, HllType, HllUnion};
use datasketches::theta::ThetaSketchBuilder;
use sketchdb::gen::wallet_address;
use sketchdb::hash::murmur;
use sketchdb::query::Value;
use sketchdb::sketch::HyperLogLog;
use sketchdb::store::{Config, Event, Slice, Store, TimeRange};
use std::path::Path;
use std::process::Command;
use support::{ok_on as ok, run_on as run};
use support::{output_with_stdin, tempdir};

const BIN: &str = env!("CARGO_BIN_EXE_sketchdb");
const DAY0: i64 = 1_796_083_200_000; // 2026-12-01T00:00:00Z

fn wallets(stream: u64, range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|i| wallet_address(stream, i)).collect()
}

fn ours_hll(p: u8, items: &[String]) -> HyperLogLog {
    let mut h = HyperLogLog::new(p).expect("p");
    for w in items {
        h.update_murmur(murmur(w.as_bytes()));
    }
    h
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => *n,
        other => panic!("not a number: {other:?}"),
    }
}

/// A store with native events on chain:a and chain:b (day 0), a crate-built HLL_4 image at
/// lg_k 16 imported into chain:a and an unordered compact Theta image into chain:b. The HLL of
/// chain:a is then exactly the sketch of its native and imported items (HLL union is
/// lossless, and folding lg_k 16 to p = 14 by register max is what a p = 14 sketch keeps), so
/// DISTINCT answers that sketch's estimate to the bit; the crate's own union of the same
/// sketches reads the same registers with its estimator and lands inside our 95% interval.
/// chain:b's Theta retains exactly the hashes of its native and imported items below the
/// image's θ. DISTINCT says it includes imported sketches, never answers from the raw events,
/// and AND (Theta) counts the imported items.
#[test]
fn imported_images_merge_with_native_sketches_in_queries() {
    let dir = tempdir("library");
    let store = Store::create(dir.join("db"), Config::default()).expect("create");
    let native_a = wallets(1, 0..3_000);
    let native_b = wallets(3, 0..1_500);
    let mut events: Vec<Event> = native_a
        .iter()
        .enumerate()
        .map(|(i, w)| Event::new(DAY0 + i as i64, w.clone(), &[("chain", "a")]))
        .collect();
    events.extend(
        native_b
            .iter()
            .map(|w| Event::new(DAY0 + 7, w.clone(), &[("chain", "b")])),
    );
    store.ingest_batch(&events).expect("ingest");
    store.flush().expect("flush");

    // Imported into chain:a: 20,000 new wallets and 1,000 of chain:a's own.
    let imported_a: Vec<String> = wallets(2, 0..20_000)
        .into_iter()
        .chain(wallets(1, 0..1_000))
        .collect();
    let mut theirs_a = HllSketch::new(16, HllType::Hll4).expect("lg_k");
    for w in &imported_a {
        theirs_a.update(raw_bytes::from_str(w));
    }
    let done = store
        .import_sketch(
            &Slice::tag("chain", "a"),
            DAY0 + 3_600_000,
            &theirs_a.serialize(),
        )
        .expect("import the HLL image");
    assert!(
        done.image
            .contains("HLL_4 registers, lg_k 16 folded to p = 14"),
        "{}",
        done.image
    );
    let all_a: Vec<String> = native_a.iter().chain(&imported_a).cloned().collect();
    let want = ours_hll(14, &all_a);
    let got = store
        .merged_hll(&Slice::tag("chain", "a"), &TimeRange::all())
        .expect("hll")
        .sketch
        .expect("chain:a");
    assert_eq!(got.register_values(), want.register_values());

    let answer = store
        .query("DISTINCT wallets ON chain:a")
        .expect("distinct");
    assert_eq!(answer.method, "hll");
    // An import is a merge: the set answers from its registers, as `want` does from its own
    // (not from the HIP accumulator a sketch built by updates keeps).
    assert_eq!(
        number(&answer.value).to_bits(),
        want.register_estimate().value.to_bits()
    );
    assert!(
        answer
            .notes
            .iter()
            .any(|n| n.contains("imported from DataSketches")),
        "{:?}",
        answer.notes
    );
    let mut their_union = HllUnion::new(14).expect("lg_k");
    let mut their_native = HllSketch::new(14, HllType::Hll8).expect("lg_k");
    for w in &native_a {
        their_native.update(raw_bytes::from_str(w));
    }
    their_union.update(&their_native);
    their_union.update(&theirs_a);
    let (lo, hi) = (answer.lower.expect("lower"), answer.upper.expect("upper"));
    let theirs = their_union.estimate();
    assert!(
        lo <= theirs && theirs <= hi,
        "{theirs} outside [{lo}, {hi}]"
    );
    // The truth (23,000 distinct: 3,000 native, 21,000 imported, 1,000 of them native) too.
    assert!(lo <= 23_000.0 && 23_000.0 <= hi, "[{lo}, {hi}]");

    // Never from the raw events, which lack the imported items.
    let refused = store
        .query("EXACT DISTINCT wallets ON chain:a")
        .expect_err("the raw events lack the imported items");
    assert!(refused.to_string().contains("imported"), "{refused}");
    let cut = store
        .query("DISTINCT wallets ON chain:a FROM 2026-12-01T05 TO 2026-12-01T07")
        .expect("a cut range");
    assert_eq!(cut.method, "hll");
    assert_eq!(
        number(&cut.value).to_bits(),
        want.register_estimate().value.to_bits()
    );

    // Imported into chain:b: a compact, unordered Theta image of 20,000 wallets, 2,000 of
    // them chain:a's.
    let imported_b: Vec<String> = wallets(4, 0..20_000)
        .into_iter()
        .chain(wallets(1, 0..2_000))
        .collect();
    let mut theirs_b = ThetaSketchBuilder::default()
        .lg_k(12)
        .build()
        .expect("lg_k");
    for w in &imported_b {
        theirs_b.update(raw_bytes::from_str(w));
    }
    let image = theirs_b.compact(false).serialize();
    store
        .import_sketch(&Slice::tag("chain", "b"), DAY0, &image)
        .expect("import the Theta image");
    // The crate's sketch holds more than k = 4096 hashes; the import keeps the k smallest
    // with θ the next one.
    let mut image_hashes: Vec<u64> = theirs_b.iter().map(|e| e.hash()).collect();
    image_hashes.sort_unstable();
    assert!(image_hashes.len() > 4096);
    let theta = image_hashes[4096];
    let mut want: Vec<u64> = native_b
        .iter()
        .chain(&imported_b)
        .map(|w| murmur(w.as_bytes())[0] >> 1)
        .filter(|&h| h < theta)
        .collect();
    want.sort_unstable();
    want.dedup();
    let got = store
        .merged_theta(&Slice::tag("chain", "b"), &TimeRange::all())
        .expect("theta")
        .sketch
        .expect("chain:b");
    assert_eq!(got.theta64(), theta);
    assert_eq!(got.retained_hashes(), want);

    // chain:a AND chain:b: the 2,000 wallets of chain:a the Theta image brought to chain:b.
    // chain:a has no imported Theta (its import was an HLL), so its Theta is its native items;
    // 2,000 of those are in chain:b's imported sketch.
    let both = store
        .query("DISTINCT wallets ON chain:a AND chain:b")
        .expect("and");
    assert_eq!(both.method, "theta");
    let (lo, hi) = (both.lower.expect("lower"), both.upper.expect("upper"));
    assert!(lo <= 2_000.0 && 2_000.0 <= hi, "[{lo}, {hi}]");
    assert!(
        both.notes
            .iter()
            .any(|n| n.contains("imported from DataSketches")),
        "{:?}",
        both.notes
    );
    // DISTINCT of chain:b alone reads HLL, which the Theta import did not feed: it says so.
    let b = store.query("DISTINCT wallets ON chain:b").expect("b");
    assert!(
        b.notes
            .iter()
            .any(|n| n.contains("imported Theta sketches")),
        "{:?}",
        b.notes
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

fn distinct(db: &Path, statement: &str) -> serde_json::Value {
    let out = ok(db, &["query", "--json", statement]);
    serde_json::from_slice(&out.stdout).expect("json")
}

/// One worker's store exports its HLL (HLL_4, raw, to a file) and its chain:base Theta
/// (base64, through a pipe); another store imports both. Its DISTINCT answers the first
/// store's to the bit (the same registers), and AND over chain:base reads the imported
/// Theta. A crate-built image imports through the CLI too. Bad images fail naming what is
/// wrong and leave the second store answering as before.
#[test]
fn export_from_one_store_and_import_into_another() {
    let dir = tempdir("cli");
    let one = dir.join("one.db");
    let two = dir.join("two.db");
    let gen = Command::new(BIN)
        .args(["gen", "chains", "--days", "2", "--events-per-day", "10000"])
        .output()
        .expect("gen");
    assert!(gen.status.success());
    let input = dir.join("in.jsonl");
    std::fs::write(&input, &gen.stdout).expect("write input");
    ok(&one, &["init", "--bucket", "day", "--tag", "chain"]);
    ok(&one, &["ingest", "--quiet", input.to_str().expect("utf-8")]);
    ok(&two, &["init", "--bucket", "day", "--tag", "chain"]);

    let hll_file = dir.join("one.hll");
    ok(
        &one,
        &[
            "export",
            "--sketch",
            "hll",
            "--hll-bits",
            "4",
            "--out",
            hll_file.to_str().expect("utf-8"),
        ],
    );
    let theta_text = ok(
        &one,
        &[
            "export",
            "--sketch",
            "theta",
            "--tag",
            "chain:base",
            "--base64",
        ],
    )
    .stdout;
    let out = ok(
        &two,
        &[
            "import-sketch",
            "--at",
            "2026-12-01",
            hll_file.to_str().expect("utf-8"),
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("into whole stream, bucket 2026-12-01"),
        "{said}"
    );
    let mut cmd = Command::new(BIN);
    cmd.arg("--db").arg(&two).args([
        "import-sketch",
        "--tag",
        "chain:base",
        "--at",
        "2026-12-01T12:00:00Z",
        "-",
    ]);
    let out = output_with_stdin(cmd, &theta_text);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let theirs = distinct(&one, "DISTINCT wallets");
    let ours = distinct(&two, "DISTINCT wallets");
    assert_eq!(ours["value"], theirs["value"], "{ours} against {theirs}");
    assert!(ours["notes"].to_string().contains("imported"), "{ours}");
    // chain:base's Theta came over, trimmed to k = 4096: the first store holds its 4,494
    // hashes exactly (it rebuilds only past 15k/8), the image keeps the 4,096 smallest with θ
    // the next, so AND with itself (Theta) estimates what the first store counts exactly.
    let base_one = distinct(&one, "DISTINCT wallets ON chain:base AND chain:base");
    let base_two = distinct(&two, "DISTINCT wallets ON chain:base AND chain:base");
    let exact = base_one["value"].as_f64().expect("number");
    assert_eq!(base_one["exact"], true);
    let (lo, hi) = (
        base_two["lower"].as_f64().expect("lower"),
        base_two["upper"].as_f64().expect("upper"),
    );
    assert!(lo <= exact && exact <= hi, "{exact} outside [{lo}, {hi}]");
    assert!(
        base_two["notes"]
            .to_string()
            .contains("into a set of the range"),
        "{base_two}"
    );

    // A crate-built HLL_8 image at lg_k 15 into chain:base, day 2.
    let mut crate_hll = HllSketch::new(15, HllType::Hll8).expect("lg_k");
    for w in wallets(11, 0..5_000) {
        crate_hll.update(raw_bytes::from_str(&w));
    }
    let crate_file = dir.join("crate.hll");
    std::fs::write(&crate_file, crate_hll.serialize()).expect("write");
    ok(
        &two,
        &[
            "import-sketch",
            "--tag",
            "chain:base",
            "--at",
            "2026-12-02",
            crate_file.to_str().expect("utf-8"),
        ],
    );
    let day2 = distinct(
        &two,
        "DISTINCT wallets ON chain:base FROM 2026-12-02 TO 2026-12-02",
    );
    let got = day2["value"].as_f64().expect("number");
    let (lo, hi) = (
        day2["lower"].as_f64().expect("lower"),
        day2["upper"].as_f64().expect("upper"),
    );
    assert!(lo <= 5_000.0 && 5_000.0 <= hi, "{got} in [{lo}, {hi}]");

    // Bad images: refused, named, and nothing changed.
    let before = distinct(&two, "DISTINCT wallets");
    let image = std::fs::read(&hll_file).expect("read");
    let truncated = dir.join("truncated.hll");
    std::fs::write(&truncated, &image[..image.len() - 10]).expect("write");
    let coarse = dir.join("coarse.hll");
    std::fs::write(
        &coarse,
        HllSketch::new(12, HllType::Hll8).expect("lg_k").serialize(),
    )
    .expect("write");
    let mut other_seed = ThetaSketchBuilder::default().seed(7).build().expect("seed");
    other_seed.update(raw_bytes::from_str("0xabc"));
    let seeded = dir.join("seeded.theta");
    std::fs::write(&seeded, other_seed.compact(true).serialize()).expect("write");
    for (file, says) in [
        (&truncated, "the image ends at byte"),
        (&coarse, "lg_k 12, below this store's HLL precision p = 14"),
        (&seeded, "seed hash"),
    ] {
        let out = run(
            &two,
            &[
                "import-sketch",
                "--at",
                "2026-12-01",
                file.to_str().expect("utf-8"),
            ],
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
    let out = run(
        &two,
        &["import-sketch", "--at", "2026-12-01", "--tag", "chain", "-"],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("FIELD:VALUE"));
    assert_eq!(distinct(&two, "DISTINCT wallets"), before);
    let check = ok(&two, &["check"]);
    assert!(check.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Images Apache DataSketches C++ 5.2 wrote (`tests/fixtures/datasketches-cpp`, items
/// `w<stream>-<i>`), imported through the CLI as a user would, from a file and as base64
/// through a pipe, beside native events: DISTINCT over the whole store answers our own sketch
/// of every item to the bit (an import is a merge of registers: the registers' estimate), and
/// the Theta image's items count in AND with the native ones.
#[test]
fn images_written_by_datasketches_cpp_import_through_the_cli() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datasketches-cpp");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("manifest.json")).expect("manifest"))
            .expect("json");
    // The stream and item count C++ fed the sketch in `file`.
    let fed = |file: &str| -> (u64, u64) {
        let entry = manifest["cpp"]
            .as_array()
            .expect("entries")
            .iter()
            .find(|e| e["file"] == file)
            .unwrap_or_else(|| panic!("{file} in the manifest"));
        let pair = &entry["streams"][0];
        (
            pair[0].as_u64().expect("stream"),
            pair[1].as_u64().expect("n"),
        )
    };
    let dir = tempdir("cpp");
    let db = dir.join("db");
    let input = dir.join("native.jsonl");
    ok(&db, &["init", "--bucket", "day", "--tag", "chain"]);
    let ingest = |stream: u64, n: u64, chain: &str| {
        let lines: String = (0..n)
            .map(|i| {
                format!(
                    "{{\"time\":\"2026-12-01T00:00:{:02}Z\",\"wallet\":\"w{stream}-{i}\",\"chain\":\"{chain}\"}}\n",
                    i % 60
                )
            })
            .collect();
        std::fs::write(&input, lines).expect("write");
        ok(&db, &["ingest", "--quiet", input.to_str().expect("utf-8")]);
    };

    // The HLL_4 image in HLL mode at lg_k 14, and 5,000 of its items arriving natively.
    let file = "hll-14-hll-HLL_4-compact.bin";
    let (stream, n) = fed(file);
    ingest(stream, 5_000, "a");
    let path = fixtures.join("cpp").join(file);
    let out = ok(
        &db,
        &[
            "import-sketch",
            "--at",
            "2026-12-01",
            path.to_str().expect("utf-8"),
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("HLL_4"), "{said}");
    let all: Vec<String> = (0..n).map(|i| format!("w{stream}-{i}")).collect();
    let want = ours_hll(14, &all).register_estimate().value;
    let got = distinct(&db, "DISTINCT wallets");
    assert_eq!(
        got["value"].as_f64().map(f64::to_bits),
        Some(want.to_bits()),
        "{got}"
    );

    // The compressed compact Theta image of 3,000 items (exact) into chain:b through a pipe as
    // base64; 1,000 of them also arrive natively on chain:a.
    let file = "theta-12-3000-compressed.bin";
    let (stream, n) = fed(file);
    assert_eq!(n, 3_000);
    ingest(stream, 1_000, "a");
    let image = std::fs::read(fixtures.join("cpp").join(file)).expect("image");
    let mut cmd = Command::new(BIN);
    cmd.arg("--db").arg(&db).args([
        "import-sketch",
        "--tag",
        "chain:b",
        "--at",
        "2026-12-01",
        "-",
    ]);
    let text = sketchdb::sketch::datasketches::base64(&image);
    let out = output_with_stdin(cmd, text.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let both = distinct(&db, "DISTINCT wallets ON chain:a AND chain:b");
    assert_eq!(both["value"].as_f64(), Some(1_000.0), "{both}");
    assert_eq!(both["exact"], true, "{both}");
}
