//! What the end-to-end tests share. Each file in `tests/` is a crate of its own and takes this
//! module with `mod support;`, using what it needs of it.
#![allow(dead_code)]

use std::path::PathBuf;

/// A new, empty directory under the system's temp dir, named for the test crate, `name`, the
/// process and the moment, so that neither two tests nor two runs ever share one.
pub fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sketchdb-{}-{name}-{}-{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Runs `cmd` with `input` on its stdin, capturing stdout and stderr, and waits for it.
pub fn output_with_stdin(mut cmd: std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sketchdb");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).expect("write stdin");
    drop(stdin);
    child.wait_with_output().expect("wait for sketchdb")
}

/// Runs the `sketchdb` binary on the store at `db` with `args`, capturing its output.
pub fn run_on(db: &std::path::Path, args: &[&str]) -> std::process::Output {
    // `option_env!`: a test crate built without the `cli` feature has no binary, and may still
    // use the rest of this module.
    let Some(bin) = option_env!("CARGO_BIN_EXE_sketchdb") else {
        panic!("this test needs the sketchdb binary (feature cli)");
    };
    std::process::Command::new(bin)
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("run sketchdb")
}

/// [`run_on`], asserting that it succeeded (the failure shows its stderr).
pub fn ok_on(db: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = run_on(db, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
