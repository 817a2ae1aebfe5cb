//! Power-cut safety as the kernel sees it (issue 12, requirement 5): `sketchdb init` and three
//! `sketchdb ingest`s run under `strace -f`, and the log must show that every file the process
//! wrote under the store, and every directory whose entries it changed, was fsynced after its
//! last change and before the process printed its success line.
//!
//! A SIGKILL (`tests/crash.rs`) leaves the page cache alone, so it cannot catch a missing fsync;
//! only a power cut does, and we cannot cut the power in a test. What we can do is check the
//! precondition for surviving one: the order of the system calls. `sync_file_range` (what sled
//! 0.34 uses) does not count, since it neither commits metadata (a grown file's size) nor
//! flushes the device cache.
//!
//! Ordering comes from the log's line order: strace prints a call's entry before the kernel
//! runs it and its exit after, so a call whose exit line precedes another's entry line finished
//! before the other began, whatever thread made it.
//!
//! Needs `strace` and permission to ptrace; without them the test fails, saying so.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What the traced process may do to a file or directory, as strace names it. Reads are left
/// out to keep the log small; `%file` brings every call taking a path (open, create, rename,
/// unlink, mkdir, link, truncate, ...). `mmap` and `io_uring_setup` are traced because writes
/// through a shared mapping or io_uring would not appear as calls, and must fail the check
/// rather than pass unseen. `sync` and `syncfs` are traced only to show up in a log being read
/// by hand: they do not count, the rule being an fsync of the changed file or directory itself.
const TRACED: &str = "%file,write,pwrite64,writev,pwritev,pwritev2,ftruncate,fallocate,\
copy_file_range,sendfile,splice,fsync,fdatasync,sync_file_range,sync,syncfs,mmap,io_uring_setup";

// ---- the checker ---------------------------------------------------------------------------

/// One system call, put back together if strace split it around another thread's.
#[derive(Debug, Clone)]
struct Call {
    name: String,
    args: Vec<String>,
    /// The text after ` = `; empty for a call that never returned.
    ret: String,
    /// Log lines (from 1) of its entry and of its return; `usize::MAX` if it never returned.
    start: usize,
    end: usize,
}

impl Call {
    fn ok(&self) -> bool {
        !self.ret.is_empty() && !self.ret.starts_with('-') && !self.ret.starts_with('?')
    }

    fn arg(&self, i: usize) -> &str {
        self.args.get(i).map_or("", String::as_str)
    }

    fn lines(&self) -> String {
        if self.start == self.end {
            format!("line {}", self.start)
        } else if self.end == usize::MAX {
            format!("line {} (never returned)", self.start)
        } else {
            format!("lines {}-{}", self.start, self.end)
        }
    }
}

/// Splits `name(a, b, ...) = ret` into its parts, respecting quotes, brackets and strace's
/// `<path>` decorations. `None` if the text is not a call.
fn split_call(text: &str) -> Option<(String, Vec<String>, String)> {
    let open = text.find('(')?;
    let name = &text[..open];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let mut args = Vec::new();
    let mut depth = 0usize;
    let mut quoted = false;
    let mut escaped = false;
    let mut current = String::new();
    let mut close = None;
    for (i, c) in text[open + 1..].char_indices() {
        if quoted {
            current.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            }
            continue;
        }
        match c {
            '"' => {
                quoted = true;
                current.push(c);
            }
            '(' | '[' | '{' | '<' => {
                depth += 1;
                current.push(c);
            }
            ')' if depth == 0 => {
                close = Some(open + 1 + i);
                break;
            }
            ')' | ']' | '}' | '>' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            ',' if depth == 0 => args.push(std::mem::take(&mut current).trim().to_string()),
            _ => current.push(c),
        }
    }
    let close = close?;
    let last = current.trim();
    if !last.is_empty() {
        args.push(last.to_string());
    }
    let rest = &text[close + 1..];
    let ret = rest
        .find(" = ")
        .map_or("", |at| rest[at + 3..].trim())
        .to_string();
    Some((name.to_string(), args, ret))
}

/// The calls in a `strace -f` log, in order of their entry line. Calls split as
/// `<unfinished ...>` / `<... resumed>` are joined; a call still unfinished at the end of the
/// log is kept with `end = usize::MAX`. Signal and exit lines are skipped.
fn parse_log(log: &str) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut pending: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (i, line) in log.lines().enumerate() {
        let n = i + 1;
        let (pid, rest) = match line.split_once(' ') {
            Some((p, r)) if p.chars().all(|c| c.is_ascii_digit()) => (p.to_string(), r.trim()),
            _ => (String::new(), line.trim()),
        };
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        let (text, start) = if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            let Some((head, start)) = pending.remove(&pid) else {
                continue;
            };
            (format!("{head}{tail}"), start)
        } else if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            pending.insert(pid, (head.trim_end().to_string(), n));
            continue;
        } else {
            (rest.to_string(), n)
        };
        if let Some((name, args, ret)) = split_call(&text) {
            calls.push(Call {
                name,
                args,
                ret,
                start,
                end: n,
            });
        }
    }
    for (head, start) in pending.into_values() {
        // An unfinished call has no closing parenthesis yet.
        if let Some((name, args, _)) = split_call(&format!("{head})")) {
            calls.push(Call {
                name,
                args,
                ret: String::new(),
                start,
                end: usize::MAX,
            });
        }
    }
    calls.sort_by_key(|c| c.start);
    calls
}

/// The C string strace printed, unescaped (paths only need `\\`, `\"` and octal/hex bytes).
fn unquote(arg: &str) -> String {
    let inner = arg
        .trim_end_matches("...")
        .trim_start_matches('"')
        .trim_end_matches('"');
    let mut out = Vec::new();
    let bytes = inner.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            let c = bytes[i + 1];
            match c {
                b'x' if i + 3 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).unwrap_or("");
                    out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                    i += 4;
                }
                b'0'..=b'7' => {
                    let mut j = i + 1;
                    let mut v = 0u32;
                    while j < bytes.len() && j < i + 4 && (b'0'..=b'7').contains(&bytes[j]) {
                        v = v * 8 + u32::from(bytes[j] - b'0');
                        j += 1;
                    }
                    out.push(v as u8);
                    i = j;
                }
                b'n' => {
                    out.push(b'\n');
                    i += 2;
                }
                b't' => {
                    out.push(b'\t');
                    i += 2;
                }
                other => {
                    out.push(other);
                    i += 2;
                }
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path strace's `-yy` attached to a descriptor (`3</a/b>`, `AT_FDCWD</a>`), and whether
/// the file was already deleted. `None` for descriptors that are not files (pipes, sockets).
fn fd_path(arg: &str) -> Option<(String, bool)> {
    let open = arg.find('<')?;
    let path = arg[open + 1..].strip_suffix('>')?;
    if !path.starts_with('/') {
        return None;
    }
    match path.strip_suffix(" (deleted)") {
        Some(p) => Some((p.to_string(), true)),
        None => Some((path.to_string(), false)),
    }
}

/// Lexically normalized absolute path of `name` relative to the directory descriptor `dirfd`
/// (or the cwd strace attached to `AT_FDCWD`).
fn resolve(dirfd: Option<&str>, name: &str) -> Option<String> {
    let joined = if name.starts_with('/') {
        PathBuf::from(name)
    } else {
        let (dir, _) = fd_path(dirfd?)?;
        Path::new(&dir).join(name)
    };
    let mut parts: Vec<String> = Vec::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    Some(format!("/{}", parts.join("/")))
}

fn parent(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_string(),
        Some(at) => path[..at].to_string(),
    }
}

/// A change to a file or directory that a later fsync of it must cover.
#[derive(Debug, Clone)]
struct Change {
    what: String,
    /// Whether the change is to a directory (so its fix is an fsync of the directory).
    dir: bool,
    /// Log line by which the change had certainly happened (its call's return).
    done: usize,
}

/// The outcome of checking one traced run.
#[derive(Debug, Default)]
struct Report {
    /// Each a sentence naming the file or directory, the log lines and the missing step.
    violations: Vec<String>,
    /// Log line of the success report.
    success: usize,
    /// Data-changing calls (writes, truncations, allocations, mkdir) on paths under the store.
    writes: usize,
    /// Directory entry changes (create, rename, unlink, mkdir) under the store.
    entry_changes: usize,
    /// fsync/fdatasync calls on the store's files and directories (and on the directory
    /// holding the store) that returned before success.
    fsyncs: usize,
    sync_file_ranges: usize,
    /// Every path changed before success.
    changed: Vec<String>,
}

/// The changes not yet covered by an fsync, per path.
struct Pending {
    root: String,
    changes: BTreeMap<String, Vec<Change>>,
    changed: std::collections::BTreeSet<String>,
    writes: usize,
    entry_changes: usize,
}

impl Pending {
    fn under(&self, path: &str) -> bool {
        path == self.root
            || path
                .strip_prefix(self.root.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// A change to the contents of `path` (ignored outside the store).
    fn write(&mut self, path: &str, what: String, call: &Call) {
        if !self.under(path) {
            return;
        }
        self.writes += 1;
        let dir = call.name.starts_with("mkdir");
        self.add(path, what, call.end, dir);
    }

    /// A change to the entry `path` in its directory, which must then be fsynced. Counts for
    /// entries under the store, and for the store directory's own entry in its parent.
    fn entry(&mut self, path: &str, how: &str, call: &Call) {
        if !self.under(path) {
            return;
        }
        self.entry_changes += 1;
        let name = path.rsplit('/').next().unwrap_or(path);
        let what = format!("entry `{name}` {how} by {} at {}", call.name, call.lines());
        self.add(&parent(path), what, call.end, true);
    }

    fn add(&mut self, path: &str, what: String, done: usize, dir: bool) {
        self.changed.insert(path.to_string());
        self.changes
            .entry(path.to_string())
            .or_default()
            .push(Change { what, done, dir });
    }

    /// What was written to a removed file cannot be found after a crash, so its contents need
    /// no fsync any more (its directory's entry still does).
    fn forget(&mut self, path: &str) {
        let inside = format!("{path}/");
        self.changes
            .retain(|p, _| p != path && !p.starts_with(&inside));
    }

    /// Unsynced contents travel with a renamed file (or directory) to its new name.
    fn rename(&mut self, from: &str, to: &str) {
        let inside = format!("{from}/");
        let moved: Vec<String> = self
            .changes
            .keys()
            .filter(|p| *p == from || p.starts_with(&inside))
            .cloned()
            .collect();
        for old in moved {
            let changes = self.changes.remove(&old).unwrap_or_default();
            let new = format!("{to}{}", &old[from.len()..]);
            self.changes.entry(new).or_default().extend(changes);
        }
    }

    /// An fsync of `path` that began at log line `began` covers every change done before.
    fn synced(&mut self, path: &str, began: usize) {
        if let Some(changes) = self.changes.get_mut(path) {
            changes.retain(|c| c.done >= began);
        }
    }
}

/// Checks a `strace -f -yy` log of a process that worked on the store at `root` and reported
/// success by writing a line starting with `marker` to its stdout: every change under the
/// store made before that write must be covered by an fsync of the changed file or directory
/// that began after the change and returned before the write began.
fn check(log: &str, root: &str, marker: &str) -> Report {
    let calls = parse_log(log);
    let mut report = Report::default();
    let quoted_marker = format!("\"{marker}");
    let successes: Vec<&Call> = calls
        .iter()
        .filter(|c| {
            matches!(c.name.as_str(), "write" | "writev")
                && (c.arg(0) == "1" || c.arg(0).starts_with("1<"))
                && c.args
                    .iter()
                    .any(|a| a.trim_start_matches(['[', '{']).contains(&quoted_marker))
        })
        .collect();
    let success = match successes.as_slice() {
        [one] => one.start,
        [] => {
            report.violations.push(format!(
                "no write of the success line ({marker:?}...) to stdout: the process did not \
report success, or strace did not record it"
            ));
            return report;
        }
        many => {
            report.violations.push(format!(
                "{} writes of the success line ({marker:?}...), at lines {:?}: cannot tell \
when success was reported",
                many.len(),
                many.iter().map(|c| c.start).collect::<Vec<_>>()
            ));
            return report;
        }
    };
    report.success = success;

    let mut pending = Pending {
        root: root.to_string(),
        changes: BTreeMap::new(),
        changed: Default::default(),
        writes: 0,
        entry_changes: 0,
    };
    let root_parent = parent(root);
    let mut fsyncs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut ranges: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for call in calls.iter().filter(|c| c.start < success) {
        // A failed call changed nothing; one that never returned may have.
        if !call.ok() && call.end != usize::MAX {
            continue;
        }
        let name = call.name.as_str();
        match name {
            "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" | "ftruncate"
            | "fallocate" | "sendfile" | "copy_file_range" | "splice" => {
                let fd = if matches!(name, "copy_file_range" | "splice") {
                    call.arg(2)
                } else {
                    call.arg(0)
                };
                // A deleted file's contents can no longer be found after a crash.
                if let Some((path, false)) = fd_path(fd) {
                    pending.write(&path, format!("{name} at {}", call.lines()), call);
                }
            }
            "truncate" => {
                if let Some(path) = resolve(None, &unquote(call.arg(0))) {
                    pending.write(&path, format!("truncate at {}", call.lines()), call);
                }
            }
            "open" | "openat" | "openat2" | "creat" => {
                let Some((path, _)) = fd_path(&call.ret) else {
                    continue;
                };
                let flags = call.args.join(",");
                let creat = name == "creat";
                // Whether O_CREAT made the file cannot be told from the log, so it is taken
                // as made: the stricter reading.
                if creat || flags.contains("O_CREAT") {
                    pending.entry(&path, "created", call);
                }
                if creat || flags.contains("O_TRUNC") {
                    pending.write(&path, format!("{name} O_TRUNC at {}", call.lines()), call);
                }
            }
            "mkdir" | "mkdirat" | "mknod" | "mknodat" | "symlink" | "symlinkat" | "link"
            | "linkat" => {
                let (dirfd, path_arg) = match name {
                    "mkdir" | "mknod" => (None, call.arg(0)),
                    "mkdirat" | "mknodat" => (Some(call.arg(0)), call.arg(1)),
                    "symlink" | "link" => (None, call.arg(1)),
                    "symlinkat" => (Some(call.arg(1)), call.arg(2)),
                    _ => (Some(call.arg(2)), call.arg(3)),
                };
                if let Some(path) = resolve(dirfd, &unquote(path_arg)) {
                    pending.entry(&path, "created", call);
                    if name.starts_with("mkdir") {
                        // The new directory's own entries ("." and "..") are written too.
                        pending.write(&path, format!("{name} at {}", call.lines()), call);
                    }
                }
            }
            "unlink" | "unlinkat" | "rmdir" => {
                let (dirfd, path_arg) = match name {
                    "unlinkat" => (Some(call.arg(0)), call.arg(1)),
                    _ => (None, call.arg(0)),
                };
                if let Some(path) = resolve(dirfd, &unquote(path_arg)) {
                    pending.entry(&path, "removed", call);
                    pending.forget(&path);
                }
            }
            "rename" | "renameat" | "renameat2" => {
                let (from, to) = if name == "rename" {
                    (
                        resolve(None, &unquote(call.arg(0))),
                        resolve(None, &unquote(call.arg(1))),
                    )
                } else {
                    (
                        resolve(Some(call.arg(0)), &unquote(call.arg(1))),
                        resolve(Some(call.arg(2)), &unquote(call.arg(3))),
                    )
                };
                let (Some(from), Some(to)) = (from, to) else {
                    continue;
                };
                pending.entry(&from, "renamed away", call);
                pending.entry(&to, "renamed into place", call);
                pending.rename(&from, &to);
            }
            "fsync" | "fdatasync" | "sync_file_range" => {
                let Some((path, _)) = fd_path(call.arg(0)) else {
                    continue;
                };
                if !pending.under(&path) && path != root_parent {
                    continue;
                }
                if name == "sync_file_range" {
                    report.sync_file_ranges += 1;
                    ranges.entry(path).or_default().push(call.start);
                } else if call.end < success {
                    report.fsyncs += 1;
                    fsyncs.entry(path.clone()).or_default().push(call.start);
                    pending.synced(&path, call.start);
                }
            }
            "mmap" => {
                if let Some((path, _)) = fd_path(call.arg(4)) {
                    if pending.under(&path)
                        && call.arg(2).contains("PROT_WRITE")
                        && call.arg(3).contains("MAP_SHARED")
                    {
                        report.violations.push(format!(
                            "{path}: mapped shared and writable at {}; writes through the \
mapping are invisible to strace, so this check cannot vouch for it",
                            call.lines()
                        ));
                    }
                }
            }
            "io_uring_setup" => report.violations.push(format!(
                "io_uring set up at {}; its writes and syncs are invisible to strace, so this \
check cannot vouch for the store",
                call.lines()
            )),
            _ => {}
        }
    }

    // fsyncs that returned only after success, to name them in the violation.
    let mut late: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for call in calls.iter().filter(|c| c.end >= success) {
        if matches!(call.name.as_str(), "fsync" | "fdatasync") {
            if let Some((path, _)) = fd_path(call.arg(0)) {
                late.entry(path).or_default().push(call.start);
            }
        }
    }
    for (path, changes) in &pending.changes {
        let Some(last) = changes.iter().max_by_key(|c| c.done) else {
            continue;
        };
        let step = if changes.iter().any(|c| c.dir) {
            "fsync of the directory"
        } else {
            "fsync/fdatasync of the file"
        };
        let done = if last.done == usize::MAX {
            "it never returned".to_string()
        } else {
            format!("done by line {}", last.done)
        };
        let mut v = format!(
            "{path}: {} unsynced change(s), the last {} ({done}); missing: an {step} \
beginning after it and returning before success (line {success})",
            changes.len(),
            last.what
        );
        let after = |lines: Option<&Vec<usize>>| -> Vec<usize> {
            lines.map_or(Vec::new(), |l| {
                l.iter().copied().filter(|&s| s > last.done).collect()
            })
        };
        let only_ranges: Vec<usize> = after(ranges.get(path))
            .into_iter()
            .filter(|&s| s < success)
            .collect();
        if !only_ranges.is_empty() {
            v.push_str(&format!(
                "; only sync_file_range, which is no fsync, at lines {only_ranges:?}"
            ));
        }
        let too_late = after(late.get(path));
        if !too_late.is_empty() {
            v.push_str(&format!("; fsync at lines {too_late:?}, after success"));
        }
        if let Some(before) = fsyncs.get(path) {
            let before: Vec<usize> = before.iter().copied().filter(|&s| s <= last.done).collect();
            if !before.is_empty() {
                v.push_str(&format!(
                    "; fsync only before the change was done, at lines {before:?}"
                ));
            }
        }
        report.violations.push(v);
    }
    report.writes = pending.writes;
    report.entry_changes = pending.entry_changes;
    report.changed = pending.changed.into_iter().collect();
    report
}

// ---- the real engine -----------------------------------------------------------------------

fn tempdir(name: &str) -> PathBuf {
    // Paths in the log are the kernel's (symlinks resolved); the store's must match them.
    support::tempdir(name)
        .canonicalize()
        .expect("canonical temp dir")
}

/// `count` JSONL events from number `first` on, over `days` days, three chains and a pool of
/// 2,000 wallets (so Count-Min and Top-K see repeats).
fn events(first: u64, count: u64, days: u64) -> String {
    events_with(first, count, days, false)
}

/// [`events`], each with a transaction hash of 64 pseudo-random hex digits when `hashed`: what
/// users' lines carry, and what compression cannot take out of the log, so the third ingest
/// grows sled's file past its first segment.
fn events_with(first: u64, count: u64, days: u64, hashed: bool) -> String {
    let mut out = String::new();
    for n in first..first + count {
        let day = 1 + (n * 7_919) % days;
        let second = (n * 104_729) % 86_400;
        let hash = if hashed {
            let word = |k: u64| {
                // SplitMix64's finaliser: a fixed, well-mixed word per (event, k).
                let mut z = (n * 4 + k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            };
            format!(
                ",\"hash\":\"0x{:016x}{:016x}{:016x}{:016x}\"",
                word(0),
                word(1),
                word(2),
                word(3)
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{{\"time\":\"2026-10-{day:02}T{:02}:{:02}:{:02}Z\",\"wallet\":\"0x{:040x}\",\"chain\":\"{}\"{hash}}}\n",
            second / 3_600,
            second / 60 % 60,
            second % 60,
            n % 2_000,
            ["a", "b", "c"][(n % 3) as usize]
        ));
    }
    out
}

/// One traced run of `sketchdb args`, checked against the store at `root`.
struct Run {
    what: &'static str,
    report: Report,
    log_lines: usize,
    seconds: f64,
}

fn traced(dir: &Path, root: &Path, what: &'static str, args: &[&str], marker: &str) -> Run {
    let log = dir.join(format!("{}.strace", what.replace(' ', "-")));
    let started = Instant::now();
    let out = Command::new("strace")
        .arg("-f")
        .arg("-yy")
        // Long enough to see the success line's first words in the log.
        .args(["-s", "48"])
        // Stops only at the traced calls, which keeps the run fast.
        .arg("--seccomp-bpf")
        .arg("-e")
        .arg(format!("trace={TRACED}"))
        .arg("-o")
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_sketchdb"))
        .args(args)
        .current_dir(dir)
        .env_remove("SKETCHDB_DB")
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run strace ({e}): this test records the ingest's system calls with \
strace and must not pass without it; install it (apt-get install strace)"
            )
        });
    let seconds = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("ptrace") && !stderr.contains("Operation not permitted"),
        "strace cannot trace here (ptrace not permitted?), so the power-cut check cannot run: \
{stderr}"
    );
    assert!(
        out.status.success(),
        "sketchdb {args:?} under strace failed ({}): {stderr}",
        out.status
    );
    let text = std::fs::read_to_string(&log).expect("read the strace log");
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains("execve(") && l.contains("sketchdb")),
        "the strace log does not start with sketchdb's execve: {}",
        text.lines().next().unwrap_or("(empty)")
    );
    let report = check(&text, &root.to_string_lossy(), marker);
    Run {
        what,
        report,
        log_lines: text.lines().count(),
        seconds,
    }
}

#[test]
fn every_file_and_directory_an_ingest_changes_is_fsynced_before_it_reports_success() {
    let dir = tempdir("ingest");
    let root = dir.join("tx.db");
    let db = root.to_string_lossy().into_owned();
    let input = |name: &str, content: String| {
        let path = dir.join(name);
        std::fs::write(&path, content).expect("write input");
        path.to_string_lossy().into_owned()
    };
    let first = input("first.jsonl", events(0, 3_000, 5));
    let second = input("second.jsonl", events(3_000, 3_000, 5));
    // Thirty days in hour buckets make some 2,000 new sketch sets, which grow sled's file past its
    // first segment (the raw log, in its own files since format 6, no longer does).
    let third = input("third.jsonl", events_with(6_000, 300_000, 30, true));

    let mut runs = vec![traced(
        &dir,
        &root,
        "init",
        &["--db", &db, "init", "--bucket", "hour"],
        "created ",
    )];
    runs.push(traced(
        &dir,
        &root,
        "ingest into a new store",
        &["--db", &db, "ingest", &first],
        "ingested ",
    ));
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let log_size = || -> u64 {
        std::fs::read_dir(root.join("log"))
            .map(|d| d.flatten().map(|e| size(&e.path())).sum())
            .unwrap_or(0)
    };
    let before = size(&root.join("db"));
    runs.push(traced(
        &dir,
        &root,
        "ingest into an existing store",
        &["--db", &db, "ingest", &second],
        "ingested ",
    ));
    let log_before = log_size();
    runs.push(traced(
        &dir,
        &root,
        "ingest of thirty days",
        &["--db", &db, "ingest", &third],
        "ingested ",
    ));
    let after = size(&root.join("db"));
    let log_after = log_size();

    let mut violations = Vec::new();
    for run in &runs {
        let r = &run.report;
        eprintln!(
            "{}: {:.2} s, {} log lines, success at line {}; {} writes, {} entry changes, {} \
fsyncs, {} sync_file_range, changed: {:?}",
            run.what,
            run.seconds,
            run.log_lines,
            r.success,
            r.writes,
            r.entry_changes,
            r.fsyncs,
            r.sync_file_ranges,
            r.changed
        );
        violations.extend(r.violations.iter().map(|v| format!("{}: {v}", run.what)));
    }
    // Guards against a check that passes by attributing nothing to the store.
    for run in &runs {
        assert!(
            run.report.writes > 0 && run.report.fsyncs > 0,
            "{}: no writes or no fsyncs attributed to the store; the log was not understood",
            run.what
        );
        assert!(
            run.report.changed.iter().any(|p| p.ends_with("/tx.db/db")),
            "{}: sled's file `db` was not seen written: {:?}",
            run.what,
            run.report.changed
        );
    }
    // The raw log lives in its own files since format 6: the ingests must be seen writing them.
    for run in &runs[1..] {
        assert!(
            run.report
                .changed
                .iter()
                .any(|p| p.contains("/tx.db/log/") && p.ends_with(".log")),
            "{}: no log file seen written: {:?}",
            run.what,
            run.report.changed
        );
    }
    assert!(
        runs[0].report.entry_changes > 0,
        "init created no directory entries under the store; the log was not understood"
    );
    assert!(
        after > before,
        "sled's file did not grow ({before} -> {after} bytes); the ingests are too small to \
exercise a growing file"
    );
    assert!(
        log_after > log_before,
        "the log files did not grow ({log_before} -> {log_after} bytes)"
    );
    assert!(
        violations.is_empty(),
        "changes not fsynced before success was reported:\n{}",
        violations.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the checker on hand-written logs --------------------------------------------------------

const ROOT: &str = "/s/tx.db";

/// A run that does everything right: a new file written and fsynced, sled's file written by
/// another thread (split around the first thread's calls) and fsynced after it, the directory
/// fsynced after the file's creation, then the success line, then more writes (not covered by
/// this success, so not checked).
const GOOD: &[&str] = &[
    r#"100 execve("/b/sketchdb", ["/b/sketchdb", "--db", "/s/tx.db", "ingest"], 0x7ffd /* 3 vars */) = 0"#,
    r#"100 openat(AT_FDCWD</s>, "/s/tx.db/conf", O_WRONLY|O_CREAT|O_CLOEXEC, 0666) = 3</s/tx.db/conf>"#,
    r#"100 write(3</s/tx.db/conf>, "segment_size: 16777216\nuse_compr"..., 120) = 120"#,
    r#"101 pwrite64(4</s/tx.db/db>, "\1\0\0\0"..., 4096, 8192 <unfinished ...>"#,
    r#"100 fsync(3</s/tx.db/conf>) = 0"#,
    r#"101 <... pwrite64 resumed>) = 4096"#,
    r#"101 sync_file_range(4</s/tx.db/db>, 8192, 4096, SYNC_FILE_RANGE_WAIT_BEFORE|SYNC_FILE_RANGE_WRITE|SYNC_FILE_RANGE_WAIT_AFTER) = 0"#,
    r#"100 openat(AT_FDCWD</s>, "/s/tx.db/db", O_RDONLY|O_CLOEXEC) = 5</s/tx.db/db>"#,
    r#"100 fsync(5</s/tx.db/db>) = 0"#,
    r#"100 openat(AT_FDCWD</s>, "/s/tx.db", O_RDONLY|O_CLOEXEC) = 6</s/tx.db>"#,
    r#"100 fsync(6</s/tx.db>) = 0"#,
    r#"100 write(1<pipe:[77]>, "ingested 3,000 events from 3,000 lines into 5 bu"..., 140) = 140"#,
    r#"100 pwrite64(4</s/tx.db/db>, "\2\0\0\0"..., 4096, 12288) = 4096"#,
    "100 +++ exited with 0 +++",
];

fn log_of(lines: &[&str]) -> String {
    lines.join("\n")
}

/// `GOOD` with the lines starting with each of `drop` left out.
fn without(drop: &[&str]) -> String {
    log_of(
        &GOOD
            .iter()
            .copied()
            .filter(|l| !drop.iter().any(|d| l.starts_with(d)))
            .collect::<Vec<_>>(),
    )
}

fn violations(log: &str) -> Vec<String> {
    check(log, ROOT, "ingested ").violations
}

#[test]
fn the_checker_passes_a_run_that_syncs_everything_before_success() {
    let r = check(&log_of(GOOD), ROOT, "ingested ");
    assert_eq!(r.violations, Vec::<String>::new());
    assert_eq!(r.success, 12);
    // conf's write, db's pwrite (the one after success does not count), conf's O_CREAT entry.
    assert_eq!((r.writes, r.entry_changes, r.fsyncs), (2, 1, 3));
    assert_eq!(r.sync_file_ranges, 1);
    assert_eq!(r.changed, ["/s/tx.db", "/s/tx.db/conf", "/s/tx.db/db"]);
}

#[test]
fn the_checker_fails_a_write_never_fsynced() {
    let v = violations(&without(&["100 fsync(3<"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("/s/tx.db/conf: "), "{v:?}");
    assert!(v[0].contains("write at line 3"), "{v:?}");
    assert!(v[0].contains("fsync/fdatasync of the file"), "{v:?}");
}

#[test]
fn the_checker_fails_a_created_file_whose_directory_is_not_fsynced() {
    let v = violations(&without(&["100 fsync(6<"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("/s/tx.db: "), "{v:?}");
    assert!(
        v[0].contains("entry `conf` created by openat at line 2"),
        "{v:?}"
    );
    assert!(v[0].contains("fsync of the directory"), "{v:?}");
}

#[test]
fn the_checker_fails_a_file_synced_only_with_sync_file_range() {
    let v = violations(&without(&["100 fsync(5<"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("/s/tx.db/db: "), "{v:?}");
    assert!(v[0].contains("pwrite64 at lines 4-6"), "{v:?}");
    assert!(
        v[0].contains("only sync_file_range, which is no fsync, at lines [7]"),
        "{v:?}"
    );
}

#[test]
fn the_checker_fails_an_fsync_that_comes_after_success() {
    let mut lines: Vec<&str> = GOOD.to_vec();
    let fsync = lines.remove(8);
    assert!(fsync.starts_with("100 fsync(5<"));
    // After the success line, now at index 10.
    lines.insert(11, fsync);
    let v = violations(&log_of(&lines));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("/s/tx.db/db: "), "{v:?}");
    assert!(v[0].contains("before success (line 11)"), "{v:?}");
    assert!(v[0].contains("fsync at lines [12], after success"), "{v:?}");
}

#[test]
fn the_checker_fails_an_fsync_that_began_before_the_write_returned() {
    // The fsync of sled's file moved up to run while the other thread's pwrite is in flight.
    let mut lines: Vec<&str> = GOOD.to_vec();
    let fsync = lines.remove(8);
    lines.insert(4, fsync);
    let v = violations(&log_of(&lines));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("/s/tx.db/db: "), "{v:?}");
    assert!(
        v[0].contains("fsync only before the change was done, at lines [5]"),
        "{v:?}"
    );
}

#[test]
fn the_checker_fails_a_rename_whose_directory_is_not_fsynced_again() {
    // sled's snapshot: written, fsynced, renamed into place; the directory's fsync precedes
    // the rename, so the new name is not durable.
    let mut lines: Vec<&str> = GOOD.to_vec();
    lines.splice(
        11..11,
        [
            r#"102 openat(AT_FDCWD</s>, "/s/tx.db/snap.00000000000000A0.generating", O_WRONLY|O_CREAT|O_CLOEXEC, 0666) = 7</s/tx.db/snap.00000000000000A0.generating>"#,
            r#"102 write(7</s/tx.db/snap.00000000000000A0.generating>, "\0\0", 2) = 2"#,
            r#"102 fsync(7</s/tx.db/snap.00000000000000A0.generating>) = 0"#,
            r#"102 rename("/s/tx.db/snap.00000000000000A0.generating", "/s/tx.db/snap.00000000000000A0") = 0"#,
            r#"102 unlink("/s/tx.db/snap.0000000000000010") = 0"#,
        ],
    );
    let v = violations(&log_of(&lines));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with("/s/tx.db: 4 unsynced change(s)"), "{v:?}");
    assert!(
        v[0].contains("entry `snap.0000000000000010` removed by unlink at line 16"),
        "{v:?}"
    );
    // The snapshot's own contents were synced before the rename and moved with it.
    assert!(
        !v.iter().any(|v| v.contains("/snap.00000000000000A0:")),
        "{v:?}"
    );
}

#[test]
fn the_checker_fails_without_a_success_line_and_with_two() {
    let v = violations(&without(&["100 write(1<"]));
    assert!(v[0].starts_with("no write of the success line"), "{v:?}");
    let mut lines: Vec<&str> = GOOD.to_vec();
    lines.push(GOOD[11]);
    let v = violations(&log_of(&lines));
    assert!(v[0].starts_with("2 writes of the success line"), "{v:?}");
}

#[test]
fn the_checker_follows_directory_descriptors_and_shared_mappings() {
    let log = log_of(&[
        r#"100 mkdirat(3</s/tx.db>, "blobs", 0777) = 0"#,
        r#"100 mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, 4</s/tx.db/db>, 0) = 0x7f00"#,
        r#"100 write(1</dev/pts/0>, "ingested 1 event", 16) = 16"#,
    ]);
    let v = violations(&log);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(
        v[0].contains("mapped shared and writable at line 2"),
        "{v:?}"
    );
    assert!(
        v[1].starts_with("/s/tx.db: ") && v[1].contains("entry `blobs` created"),
        "{v:?}"
    );
    assert!(
        v[2].starts_with("/s/tx.db/blobs: ")
            && v[2].contains("mkdirat")
            && v[2].contains("fsync of the directory"),
        "{v:?}"
    );
}
