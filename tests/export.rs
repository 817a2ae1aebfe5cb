//! `sketchdb export` as a user runs it: a store built by the CLI, its sketches written as
//! Apache DataSketches images, read back by the official `datasketches` crate and compared with
//! the same sketches read through the library.

mod support;

use datasketches::hash::value::raw_bytes;
use datasketches::hll::{HllSketch, HllType, HllUnion};
use datasketches::theta::CompactThetaSketch;
use sketchdb::sketch::Sketch;
use sketchdb::store::{Slice, Store, TimeRange};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::tempdir;
use support::{ok_on as ok, run_on as run};

const BIN: &str = env!("CARGO_BIN_EXE_sketchdb");
const DAY0: i64 = 1_796_083_200_000; // 2026-12-01T00:00:00Z

/// Three days of `gen chains` in day buckets, tagged by chain.
fn store(dir: &Path) -> PathBuf {
    let db = dir.join("tx.db");
    let input = dir.join("in.jsonl");
    let gen = Command::new(BIN)
        .args(["gen", "chains", "--days", "3", "--events-per-day", "20000"])
        .output()
        .expect("gen");
    assert!(gen.status.success());
    std::fs::write(&input, &gen.stdout).expect("write input");
    ok(&db, &["init", "--bucket", "day", "--tag", "chain"]);
    ok(&db, &["ingest", "--quiet", input.to_str().expect("utf-8")]);
    db
}

#[test]
fn exported_images_read_in_datasketches_as_the_stores_own_sketches() {
    let dir = tempdir("images");
    let db = store(&dir);
    let theta_file = dir.join("base.theta");
    let out = ok(
        &db,
        &[
            "export",
            "--sketch",
            "theta",
            "--tag",
            "chain:base",
            "--from",
            "2026-12-01",
            "--to",
            "2026-12-03",
            "--out",
            theta_file.to_str().expect("utf-8"),
        ],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("over 2 buckets"), "{said}");
    let hll8 = ok(&db, &["export", "--sketch", "hll"]).stdout;
    let hll6 = ok(
        &db,
        &["export", "--sketch", "hll", "--hll-bits", "6", "--base64"],
    )
    .stdout;
    let hll4 = ok(&db, &["export", "--sketch", "hll", "--hll-bits", "4"]).stdout;

    let store = Store::open(&db).expect("open");
    let range = TimeRange::between(DAY0, DAY0 + 2 * 86_400_000);
    let ours = store
        .merged_theta(&Slice::tag("chain", "base"), &range)
        .expect("theta")
        .sketch
        .expect("events");
    let read = CompactThetaSketch::deserialize(&std::fs::read(&theta_file).expect("read"))
        .expect("DataSketches reads the Theta image");
    assert_eq!(read.theta64(), ours.theta64());
    let mut entries: Vec<u64> = read.iter().map(|e| e.hash()).collect();
    entries.sort_unstable();
    assert_eq!(entries, ours.retained_hashes());

    let ours = store
        .merged_hll(&Slice::Whole, &TimeRange::all())
        .expect("hll")
        .sketch
        .expect("events");
    let read8 = HllSketch::deserialize(&hll8).expect("DataSketches reads the HLL_8 image");
    let text = String::from_utf8(hll6).expect("base64 is text");
    let raw6 = sketchdb::sketch::datasketches::from_base64(text.as_bytes()).expect("base64");
    let read6 = HllSketch::deserialize(&raw6).expect("DataSketches reads the HLL_6 image");
    let read4 = HllSketch::deserialize(&hll4).expect("DataSketches reads the HLL_4 image");
    assert_eq!(read8.estimate().to_bits(), read6.estimate().to_bits());
    assert_eq!(read8.estimate().to_bits(), read4.estimate().to_bits());
    // DataSketches' own sketch of the same wallets: the same registers, so exactly the same
    // composite estimate; and a union there with a sketch built there is the union of that
    // twin with it, byte for byte.
    let input = std::fs::read_to_string(dir.join("in.jsonl")).expect("input");
    let mut twin = HllSketch::new(14, HllType::Hll8).expect("lg_k");
    for line in input.lines() {
        let event: serde_json::Value = serde_json::from_str(line).expect("json");
        twin.update(raw_bytes::from_str(
            event["wallet"].as_str().expect("wallet"),
        ));
    }
    let union = |sketches: &[&HllSketch]| {
        let mut u = HllUnion::new(14).expect("lg_k");
        for s in sketches {
            u.update(s);
        }
        u.to_sketch(HllType::Hll8)
    };
    let twin = union(&[&twin]);
    // Byte for byte but for how each was made: ours, a merge of buckets, carries DataSketches'
    // out-of-order flag (0x10 in byte 5) and no HIP accumulator (bytes 8..16), where the twin,
    // a copy of one sketch, keeps its HIP. The preamble's KxQ sums, the count at the current
    // minimum and the registers are the same.
    let (a, b) = (read8.serialize(), twin.serialize());
    assert_eq!(a[..5], b[..5]);
    assert_eq!(a[5], b[5] | 0x10, "flags {:02x} against {:02x}", a[5], b[5]);
    assert_eq!(a[6..8], b[6..8]);
    assert_eq!(a[8..16], [0u8; 8]);
    assert_eq!(a[16..], b[16..]);
    assert_eq!(
        read8.estimate().to_bits(),
        twin.composite_estimate().to_bits()
    );
    let mut elsewhere = HllSketch::new(12, HllType::Hll4).expect("lg_k");
    for i in 0..30_000u32 {
        elsewhere.update(raw_bytes::from_str(&format!("0x{i:040x}")));
    }
    let (got, want) = (union(&[&read8, &elsewhere]), union(&[&twin, &elsewhere]));
    assert_eq!(got.serialize(), want.serialize());
    assert!(got.estimate() > twin.estimate() + 25_000.0);
    // Ours answers from the same registers with its own estimator (Ertl's): within the
    // sketch's standard error (1.04/√16384 = 0.8%) of DataSketches' composite one.
    let (there, here) = (read8.estimate(), ours.estimate().value);
    assert!(
        (there - here).abs() <= 0.008 * here,
        "{there} there against {here} here"
    );
    drop(store);

    // Bad input: named, nothing written.
    let out = run(&db, &["export", "--sketch", "hll", "--tag", "chain"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("FIELD:VALUE"));
    let out = run(&db, &["export", "--sketch", "hll", "--hll-bits", "5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected 4, 6 or 8"));
    let out = run(
        &db,
        &["export", "--sketch", "theta", "--from", "2030-01-01"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to export"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
