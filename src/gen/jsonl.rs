//! The synthetic streams as JSONL (the `gen` command's output) and as store events.
//!
//! One object per line, always these four keys in this order:
//! `{"time":"2026-12-01T00:00:00.086Z","wallet":"0x…40 hex…","chain":"main","kind":"bot"}`
//! (`time` is RFC 3339 UTC with milliseconds and `Z`). Lines are assembled byte by byte rather
//! than through serde_json: every value is a fixed ASCII vocabulary (digits, hex, `main`, `a`,
//! `b`, `bot`, `user`), so nothing ever needs JSON escaping.

use super::streams::{events, GenEvent, GenOptions, StreamKind};
use super::GenError;
use crate::store::Event;
use std::io::{BufWriter, Write};

const DAY_MS: i64 = 86_400_000;

/// Output buffer size: large writes keep 10 M lines to a few system calls per MiB.
const BUF_BYTES: usize = 1 << 20;

/// Writes the stream `kind` under `opts` to `out`, one JSON object per line; returns the
/// number of lines. Nothing is written for invalid options. An I/O error names the line it
/// failed on (a closed pipe, e.g. `gen | head`, arrives as `ErrorKind::BrokenPipe` in the
/// source, for the caller to treat as a normal end).
pub fn write_jsonl(
    kind: StreamKind,
    opts: &GenOptions,
    out: &mut impl Write,
) -> Result<u64, GenError> {
    let evs = events(kind, opts)?;
    let day_start = opts.day_start_ms();
    let date = opts.date.format("%Y-%m-%d").to_string();
    let mut w = BufWriter::with_capacity(BUF_BYTES, out);
    let mut line = Vec::with_capacity(128);
    let mut n = 0u64;
    for e in evs {
        line.clear();
        push_line(&mut line, &e, day_start, date.as_bytes());
        w.write_all(&line).map_err(|source| GenError::Io {
            what: format!("writing {kind} JSONL line {}", n + 1),
            source,
        })?;
        n += 1;
    }
    w.flush().map_err(|source| GenError::Io {
        what: format!("flushing {kind} JSONL output after {n} lines"),
        source,
    })?;
    Ok(n)
}

/// Appends `n` as exactly `width` decimal digits (zero-padded; `n` must fit).
fn push_digits(buf: &mut Vec<u8>, n: i64, width: u32) {
    let mut div = 10i64.pow(width - 1);
    for _ in 0..width {
        buf.push(b'0' + ((n / div) % 10) as u8);
        div /= 10;
    }
}

/// `time` in RFC 3339 UTC with milliseconds, e.g. `2026-12-01T00:00:00.086Z`. `date` is the
/// `YYYY-MM-DD` of the day starting at `day_start`; times outside it take chrono's slow path.
pub(super) fn push_time(buf: &mut Vec<u8>, time: i64, day_start: i64, date: &[u8]) {
    let ms = time - day_start;
    if (0..DAY_MS).contains(&ms) {
        buf.extend_from_slice(date);
        buf.push(b'T');
        push_digits(buf, ms / 3_600_000, 2);
        buf.push(b':');
        push_digits(buf, ms / 60_000 % 60, 2);
        buf.push(b':');
        push_digits(buf, ms / 1_000 % 60, 2);
        buf.push(b'.');
        push_digits(buf, ms % 1_000, 3);
        buf.push(b'Z');
    } else if let Some(t) = chrono::DateTime::from_timestamp_millis(time) {
        let s = t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        buf.extend_from_slice(s.as_bytes());
    }
}

fn push_line(buf: &mut Vec<u8>, e: &GenEvent, day_start: i64, date: &[u8]) {
    buf.extend_from_slice(b"{\"time\":\"");
    push_time(buf, e.time_ms, day_start, date);
    buf.extend_from_slice(b"\",\"wallet\":\"");
    buf.extend_from_slice(&e.wallet.address_bytes());
    buf.extend_from_slice(b"\",\"chain\":\"");
    buf.extend_from_slice(e.chain.as_bytes());
    buf.extend_from_slice(b"\",\"kind\":\"");
    buf.extend_from_slice(e.kind.as_bytes());
    buf.extend_from_slice(b"\"}\n");
}

/// The event as the store ingests it: item = wallet address, one tag `("chain", chain)`, and
/// `kind` kept verbatim in `extra` as `{"kind":"bot"}` (what `SAMPLE` returns).
pub fn to_store_event(e: &GenEvent) -> Event {
    Event {
        time: e.time_ms,
        item: e.wallet.address(),
        tags: vec![("chain".to_string(), e.chain.to_string())],
        extra: format!("{{\"kind\":\"{}\"}}", e.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn at(seed: u64, scale: f64) -> GenOptions {
        GenOptions {
            seed,
            scale,
            ..GenOptions::default()
        }
    }

    fn jsonl(kind: StreamKind, opts: &GenOptions) -> Vec<u8> {
        let mut out = Vec::new();
        let n = write_jsonl(kind, opts, &mut out).expect("write to a Vec");
        assert_eq!(n as usize, out.iter().filter(|&&b| b == b'\n').count());
        out
    }

    /// A `Write` that only hashes, so a whole stream can be compared without keeping it.
    struct HashWriter(Sha256, u64);

    impl Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            self.1 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn stream_hash(kind: StreamKind, opts: &GenOptions) -> (Vec<u8>, u64, u64) {
        let mut h = HashWriter(Sha256::new(), 0);
        let n = write_jsonl(kind, opts, &mut h).expect("hashing never fails");
        (h.0.finalize().to_vec(), h.1, n)
    }

    #[test]
    fn lines_are_the_schema_exactly() {
        let opts = at(42, 0.01);
        let out = jsonl(StreamKind::StreamA, &opts);
        let text = std::str::from_utf8(&out).expect("ASCII");
        let evs = events(StreamKind::StreamA, &opts).expect("valid");
        let mut lines = 0;
        for (line, e) in text.lines().zip(evs) {
            // The slow, obviously right formatting of the same event.
            let time = chrono::DateTime::from_timestamp_millis(e.time_ms)
                .expect("in range")
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let want = format!(
                r#"{{"time":"{time}","wallet":"{}","chain":"{}","kind":"{}"}}"#,
                e.wallet.address(),
                e.chain,
                e.kind
            );
            assert_eq!(line, want);
            let v: serde_json::Value = serde_json::from_str(line).expect("valid JSON");
            let obj = v.as_object().expect("an object");
            assert_eq!(obj.len(), 4, "{line}");
            let t = obj["time"].as_str().expect("string");
            let parsed = chrono::DateTime::parse_from_rfc3339(t).expect("RFC 3339");
            assert_eq!(parsed.timestamp_millis(), e.time_ms);
            assert!(t.ends_with('Z') && t.len() == 24, "{t}");
            assert_eq!(obj["wallet"].as_str(), Some(e.wallet.address().as_str()));
            assert_eq!(obj["chain"].as_str(), Some("main"));
            assert!(matches!(obj["kind"].as_str(), Some("bot" | "user")));
            lines += 1;
        }
        assert_eq!(
            lines,
            5 * 1_800 + 1_000,
            "5 bots and 1,000 users at scale 0.01"
        );
    }

    #[test]
    fn out_of_day_times_fall_back_to_chrono() {
        let mut buf = Vec::new();
        push_time(&mut buf, 86_400_000 + 5, 0, b"1970-01-01");
        assert_eq!(buf, b"1970-01-02T00:00:00.005Z");
        buf.clear();
        push_time(&mut buf, 86_399_999, 0, b"1970-01-01");
        assert_eq!(buf, b"1970-01-01T23:59:59.999Z");
    }

    #[test]
    fn output_is_deterministic_for_a_seed() {
        let first = |seed| -> Vec<u8> {
            let out = jsonl(StreamKind::TwoChains, &at(seed, 0.001));
            out.split(|&b| b == b'\n')
                .take(1_000)
                .flatten()
                .copied()
                .collect()
        };
        assert_eq!(first(42), first(42));
        assert_ne!(first(42), first(43));

        let (h1, bytes, n) = stream_hash(StreamKind::StreamB, &at(42, 1.0));
        let (h2, _, _) = stream_hash(StreamKind::StreamB, &at(42, 1.0));
        let (h3, _, _) = stream_hash(StreamKind::StreamB, &at(1, 1.0));
        assert_eq!(n, 1_000_000);
        assert_eq!(bytes, n * 119, "every stream-b line is 119 bytes");
        assert_eq!(h1, h2);
        assert_ne!(h1, h3);
    }

    #[test]
    fn bad_options_write_nothing() {
        let mut out = Vec::new();
        assert!(write_jsonl(StreamKind::StreamA, &at(1, 0.0), &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn io_errors_name_what_failed() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "disk full",
                ))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = write_jsonl(StreamKind::StreamB, &at(1, 0.01), &mut Full).expect_err("full");
        let msg = e.to_string();
        assert!(
            msg.contains("stream-b JSONL") && msg.contains("disk full"),
            "{msg}"
        );
    }

    #[test]
    fn store_events_carry_wallet_chain_and_kind() {
        let e = events(StreamKind::StreamA, &at(42, 0.01))
            .expect("valid")
            .find(|e| e.kind == "bot")
            .expect("a bot");
        let s = to_store_event(&e);
        assert_eq!(s.time, e.time_ms);
        assert_eq!(s.item, e.wallet.address());
        assert_eq!(s.tags, vec![("chain".to_string(), "main".to_string())]);
        assert_eq!(s.extra, r#"{"kind":"bot"}"#);
        let t = events(StreamKind::TwoChains, &at(42, 0.001))
            .expect("valid")
            .next()
            .expect("an event");
        let s = to_store_event(&t);
        assert!(s.tags[0].1 == "a" || s.tags[0].1 == "b");
        assert_eq!(s.extra, r#"{"kind":"user"}"#);
    }
}
