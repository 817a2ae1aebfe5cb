//! `sketchdb merge` as a user runs it: a stream split across three worker stores by the CLI,
//! merged, and asked the questions one store that ingested it all answers; the refusals; and
//! the worked example of `docs/SCALING.md`, run exactly as written there.

mod support;

use sketchdb::store::Store;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::tempdir;

const BIN: &str = env!("CARGO_BIN_EXE_sketchdb");

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run sketchdb")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Two days of `gen chains` dealt round-robin to three workers (so every worker covers both
/// days), each ingested into its own store, and the whole stream into `one.db`.
fn workers(dir: &Path) -> Vec<String> {
    let stream = ok(
        dir,
        &["gen", "chains", "--days", "2", "--events-per-day", "9000"],
    );
    let mut parts = vec![String::new(); 3];
    for (i, line) in stream.lines().enumerate() {
        parts[i % 3].push_str(line);
        parts[i % 3].push('\n');
    }
    std::fs::write(dir.join("all.jsonl"), &stream).expect("write");
    let mut names = Vec::new();
    for (w, part) in parts.iter().enumerate() {
        let name = format!("w{w}");
        std::fs::write(dir.join(format!("{name}.jsonl")), part).expect("write");
        ok(
            dir,
            &["--db", &format!("{name}.db"), "init", "--tag", "chain"],
        );
        ok(
            dir,
            &[
                "--db",
                &format!("{name}.db"),
                "ingest",
                "--quiet",
                &format!("{name}.jsonl"),
            ],
        );
        names.push(format!("{name}.db"));
    }
    ok(dir, &["--db", "one.db", "init", "--tag", "chain"]);
    ok(dir, &["--db", "one.db", "ingest", "--quiet", "all.jsonl"]);
    names
}

/// Statements whose answers are exact or deterministic, with one wallet of the stream.
fn statements(dir: &Path) -> Vec<String> {
    let stream = std::fs::read_to_string(dir.join("all.jsonl")).expect("read");
    let first: serde_json::Value =
        serde_json::from_str(stream.lines().next().expect("a line")).expect("json");
    let wallet = first["wallet"].as_str().expect("wallet").to_string();
    [
        "COUNT",
        "COUNT ON chain:base",
        "DISTINCT wallets",
        "DISTINCT wallets ON chain:ethereum",
        "DISTINCT wallets ON chain:base OR chain:arbitrum",
        "DISTINCT wallets ON chain:base AND chain:ethereum",
        "DISTINCT wallets ON chain:ethereum EXCEPT chain:base",
        "TOP 5 wallets",
        "SEEN 0x0000000000000000000000000000000000000001 FROM 2026-12-01",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("SEEN {wallet}"),
        format!("SEEN {wallet} FROM 2026-12-01"),
        format!("COUNT {wallet}"),
        format!("COUNT {wallet} ON chain:base"),
    ])
    .collect()
}

fn answers(dir: &Path, db: &str, statements: &[String]) -> Vec<String> {
    statements
        .iter()
        .map(|s| ok(dir, &["--db", db, "query", "--json", s]))
        .collect()
}

/// Issue 14, item 5, through the binary: the merged store answers every exact and
/// deterministic statement as the single store does, byte for byte; samples come from the
/// merged log; the store checks clean.
#[test]
fn workers_merged_by_the_cli_answer_like_one_store() {
    let dir = tempdir("answers");
    let w = workers(&dir);
    let said = ok(&dir, &["merge", "--seed", "3", "m.db", &w[0], &w[1], &w[2]]);
    assert!(
        said.starts_with("merged 3 stores into m.db (new): 18,000 events"),
        "{said}"
    );
    let statements = statements(&dir);
    let merged = answers(&dir, "m.db", &statements);
    let one = answers(&dir, "one.db", &statements);
    for ((s, m), o) in statements.iter().zip(&merged).zip(&one) {
        assert_eq!(m, o, "{s}");
    }
    let sample = ok(&dir, &["--db", "m.db", "query", "--seed", "1", "SAMPLE 20"]);
    assert!(sample.contains("\"hash\""), "{sample}");
    ok(&dir, &["--db", "m.db", "check"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A configuration mismatch, the same input twice, OUT among the inputs and an input held by
/// another process are refused with what is wrong, and OUT answers as before.
#[test]
fn refused_merges_name_the_problem_and_leave_out_unchanged() {
    let dir = tempdir("refused");
    let w = workers(&dir);
    ok(&dir, &["merge", "m.db", &w[0]]);
    let count = |dir: &Path| ok(dir, &["--db", "m.db", "query", "--json", "COUNT"]);
    let before = count(&dir);
    ok(
        &dir,
        &["--db", "odd.db", "init", "--tag", "chain", "--hll-p", "12"],
    );
    let err = fails(&dir, &["merge", "m.db", &w[1], "odd.db"]);
    assert!(err.contains("hll precision differs"), "{err}");
    let err = fails(&dir, &["merge", "m.db", "odd.db"]);
    assert!(
        err.contains("hll precision differs (12 in odd.db, 14 in m.db)"),
        "{err}"
    );
    let err = fails(&dir, &["merge", "m.db", &w[1], &w[1]]);
    assert!(err.contains("given twice"), "{err}");
    let err = fails(&dir, &["merge", "m.db", "m.db"]);
    assert!(err.contains("merged into itself"), "{err}");
    let held = Store::open(dir.join(&w[2])).expect("hold");
    let err = fails(&dir, &["merge", "m.db", &w[1], &w[2]]);
    assert!(
        err.contains(&format!("held by pid {}", std::process::id())),
        "{err}"
    );
    drop(held);
    // A new OUT whose merge is refused is not left behind.
    let err = fails(&dir, &["merge", "new.db", &w[1], "odd.db"]);
    assert!(err.contains("differs"), "{err}");
    assert!(!dir.join("new.db").exists());
    assert_eq!(count(&dir), before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fenced `sh` block of `docs/SCALING.md` that starts with `# worked example`.
fn worked_example() -> String {
    let doc =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/SCALING.md"))
            .expect("read SCALING.md");
    let start = doc
        .find("```sh\n# worked example\n")
        .expect("the worked example block");
    let body = &doc[start + "```sh\n".len()..];
    body[..body.find("```").expect("the block's end")].to_string()
}

/// `docs/SCALING.md`'s worked example, run as written with this build's binary first on the
/// PATH: every command succeeds (`diff` among them: the merged answers are the single store's)
/// and the exported image is one line of base64.
#[test]
fn the_scaling_guides_worked_example_runs_as_written() {
    let dir = tempdir("example");
    let bin_dir = Path::new(BIN).parent().expect("bin dir");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &worked_example()])
        .current_dir(&dir)
        .env("PATH", path)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = std::fs::read_to_string(dir.join("merged.txt")).expect("merged answers");
    assert_eq!(merged.lines().count(), 2, "{merged}");
    assert!(merged.contains("12000"), "{merged}");
    let image = std::fs::read_to_string(dir.join("base.hll.b64")).expect("image");
    assert_eq!(image.lines().count(), 1);
    assert!(image.trim().len() > 10, "{image}");
    let _ = std::fs::remove_dir_all(&dir);
}
