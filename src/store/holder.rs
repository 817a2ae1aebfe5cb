//! The holder record: which process holds a store (pid, command line, since when, and the
//! socket it answers queries on, if any), written beside sled's files while a [`Store`] is open.
//!
//! sled's exclusive file lock is the lock; it cannot say who holds it. A second process that
//! finds the store held reads this record to name the holder ([`StoreError::Locked`]). The
//! record is advisory only: it is written after the lock is taken and removed before it is
//! released, and a record left by a process that died (kill -9) is recognised as stale by
//! checking that its pid still runs the same command, so it never blocks or misleads.
//!
//! Owns: the file's name and format, writing it atomically, removing only our own record, and
//! reading one back with whether its process still runs.
//!
//! [`Store`]: super::Store
//! [`StoreError::Locked`]: super::StoreError::Locked

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// The record's file in the store directory.
pub const HOLDER_FILE: &str = "sketchdb.holder";

/// What a holder record says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// The holder's command line, its arguments joined by spaces.
    pub command: String,
    /// When the holder opened the store, Unix milliseconds.
    pub since_ms: i64,
    /// A Unix socket on which the holder answers read-only queries, if it serves them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
}

impl Holder {
    /// The record's time as `2026-12-04 13:02:11 UTC`.
    pub fn since(&self) -> String {
        chrono::DateTime::from_timestamp_millis(self.since_ms)
            .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_else(|| format!("{} ms", self.since_ms))
    }
}

/// Who holds a store, as far as its holder record tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldBy {
    /// The record names a process that is running.
    Process(Holder),
    /// The record names a process that no longer runs (or whose pid now runs another command):
    /// it was left by a holder that died, and whoever holds the lock now wrote none.
    Stale(Holder),
    /// There is no readable record (a holder that writes none, or one that is still starting).
    Unknown,
}

impl fmt::Display for HeldBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldBy::Process(h) => write!(
                f,
                "held by pid {} (`{}`) since {}",
                h.pid,
                h.command,
                h.since()
            ),
            HeldBy::Stale(h) => write!(
                f,
                "held by another process (the holder record names pid {} (`{}`), which is no \
longer running: a stale record)",
                h.pid, h.command
            ),
            HeldBy::Unknown => write!(f, "held by another process (it left no holder record)"),
        }
    }
}

/// This process's command line as a holder record shows it.
fn command_line() -> String {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `holder` names a process that still runs the same command. Only Linux can tell
/// (through /proc); elsewhere a record is taken at its word. The command is compared, not just
/// the pid, because a pid is reused after its process ends.
fn running(holder: &Holder) -> bool {
    if holder.pid == std::process::id() {
        return true;
    }
    #[cfg(target_os = "linux")]
    {
        let proc_dir = Path::new("/proc");
        if proc_dir.join("self").exists() {
            return match std::fs::read(proc_dir.join(holder.pid.to_string()).join("cmdline")) {
                Ok(bytes) => {
                    let args: Vec<String> = bytes
                        .split(|b| *b == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect();
                    args.join(" ") == holder.command
                }
                Err(_) => false,
            };
        }
    }
    true
}

/// Reads the holder record of the store at `dir`.
pub fn read(dir: &Path) -> HeldBy {
    let Ok(bytes) = std::fs::read(dir.join(HOLDER_FILE)) else {
        return HeldBy::Unknown;
    };
    match serde_json::from_slice::<Holder>(&bytes) {
        Ok(h) if running(&h) => HeldBy::Process(h),
        Ok(h) => HeldBy::Stale(h),
        Err(_) => HeldBy::Unknown,
    }
}

/// This process's record in a store it holds; dropping it removes the file if it is still
/// ours.
pub(crate) struct HolderFile {
    path: PathBuf,
    holder: Holder,
    /// The bytes last written, to recognise our own record when removing it.
    written: Vec<u8>,
}

impl HolderFile {
    /// Writes this process's record into `dir`, whose lock the caller holds. A failure leaves
    /// no record (`None`) and is otherwise ignored: the record only names the holder to others,
    /// and the store works without it.
    pub(crate) fn write(dir: &Path) -> Option<HolderFile> {
        let mut file = HolderFile {
            path: dir.join(HOLDER_FILE),
            holder: Holder {
                pid: std::process::id(),
                command: command_line(),
                since_ms: chrono::Utc::now().timestamp_millis(),
                socket: None,
            },
            written: Vec::new(),
        };
        file.store().ok()?;
        Some(file)
    }

    /// Records (or, with `None`, clears) the socket the holder answers queries on.
    pub(crate) fn set_socket(&mut self, socket: Option<PathBuf>) -> std::io::Result<()> {
        self.holder.socket = socket;
        self.store()
    }

    /// Writes the record to a temporary file and renames it into place, so a reader sees the
    /// old record or the new one, never half of one. Not synced: after a power cut the
    /// holder is gone anyway, and a damaged record reads as no record.
    fn store(&mut self) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&self.holder).map_err(std::io::Error::other)?;
        let temp = self
            .path
            .with_file_name(format!("{HOLDER_FILE}.{}.new", self.holder.pid));
        std::fs::write(&temp, &bytes)?;
        if let Err(e) = std::fs::rename(&temp, &self.path) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        self.written = bytes;
        Ok(())
    }
}

impl Drop for HolderFile {
    /// Removes the record if it is still the one we wrote: once the lock is released another
    /// process may have written its own.
    fn drop(&mut self) {
        if std::fs::read(&self.path).is_ok_and(|b| b == self.written) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("holder-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    #[test]
    fn a_record_names_this_process_and_goes_with_its_writer() {
        let d = dir("own");
        let mut file = HolderFile::write(&d).expect("written");
        let HeldBy::Process(h) = read(&d) else {
            panic!("{:?}", read(&d))
        };
        assert_eq!(h.pid, std::process::id());
        assert_eq!(h.command, command_line());
        assert!(h.socket.is_none());
        file.set_socket(Some(d.join("s.sock"))).expect("socket");
        assert!(matches!(read(&d), HeldBy::Process(h) if h.socket == Some(d.join("s.sock"))));
        drop(file);
        assert_eq!(read(&d), HeldBy::Unknown);
        // Nothing left behind: no temporary file either.
        assert_eq!(std::fs::read_dir(&d).expect("dir").count(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn another_record_is_not_removed_and_a_dead_pid_is_stale() {
        let d = dir("other");
        let file = HolderFile::write(&d).expect("written");
        // Another process took over after us (our lock released): its record stays.
        let other = Holder {
            pid: u32::MAX - 1,
            command: "sketchdb --db elsewhere".into(),
            since_ms: 0,
            socket: None,
        };
        std::fs::write(
            d.join(HOLDER_FILE),
            serde_json::to_vec(&other).expect("json"),
        )
        .expect("write");
        drop(file);
        #[cfg(target_os = "linux")]
        {
            let held = read(&d);
            assert_eq!(held, HeldBy::Stale(other));
            assert!(held.to_string().contains("stale"), "{held}");
        }
        std::fs::write(d.join(HOLDER_FILE), b"{half a rec").expect("write");
        assert_eq!(read(&d), HeldBy::Unknown);
        let _ = std::fs::remove_dir_all(&d);
    }
}
