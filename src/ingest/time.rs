//! Timestamps as they appear in input: RFC 3339 strings, date-times without an offset (read in
//! a stated [`Zone`], UTC unless told otherwise), or integer (or fractional) Unix seconds or
//! milliseconds.

use chrono::{LocalResult, NaiveDateTime, TimeZone};
use std::fmt;

/// How to read a numeric timestamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeUnit {
    /// Seconds below 10^11 (before the year 5138), milliseconds above (after March 1973). The
    /// two ranges overlap only for millisecond times before 1973 and second times after 5138,
    /// neither of which occurs in a transaction stream; `Seconds`/`Millis` force one reading.
    #[default]
    Auto,
    Seconds,
    Millis,
}

impl std::str::FromStr for TimeUnit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(TimeUnit::Auto),
            "s" | "sec" | "secs" | "seconds" => Ok(TimeUnit::Seconds),
            "ms" | "millis" | "milliseconds" => Ok(TimeUnit::Millis),
            _ => Err(format!("unknown time unit '{s}' (expected auto, s or ms)")),
        }
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeUnit::Auto => "auto",
            TimeUnit::Seconds => "s",
            TimeUnit::Millis => "ms",
        })
    }
}

const SECONDS_LIMIT: f64 = 1e11;

/// The reason a timestamp was not understood, for the bad-line report.
pub const EXPECTED: &str = "expected an RFC 3339 time (2026-12-01T13:45:00Z), a date and time \
without an offset (2026-12-01 13:45:00, read in the ingest's time zone) or Unix seconds or \
milliseconds";

/// The time zone that times written without an offset are read in. Times with an offset (or
/// `Z`) and numeric times are absolute and never depend on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Zone {
    #[default]
    Utc,
    /// A fixed offset from UTC, e.g. `+02:00`.
    Fixed(chrono::FixedOffset),
    /// An IANA zone, e.g. `Europe/Berlin`, with its daylight-saving rules.
    Named(chrono_tz::Tz),
}

impl std::str::FromStr for Zone {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if ["utc", "z", "gmt", "etc/utc"].contains(&t.to_ascii_lowercase().as_str()) {
            return Ok(Zone::Utc);
        }
        if let Some(offset) = parse_offset(t) {
            return Ok(Zone::Fixed(offset));
        }
        let named = t.parse::<chrono_tz::Tz>().ok().or_else(|| {
            chrono_tz::TZ_VARIANTS
                .iter()
                .find(|tz| tz.name().eq_ignore_ascii_case(t))
                .copied()
        });
        named.map(Zone::Named).ok_or_else(|| {
            format!(
                "unknown time zone '{s}' (expected UTC, an offset such as +02:00 or -0530, or an \
IANA name such as Europe/Berlin)"
            )
        })
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Utc => f.write_str("UTC"),
            Zone::Fixed(o) => write!(f, "{o}"),
            Zone::Named(tz) => f.write_str(tz.name()),
        }
    }
}

/// `+HH:MM`, `+HHMM` or `+HH` (or `-`), below 24 hours.
fn parse_offset(t: &str) -> Option<chrono::FixedOffset> {
    let (sign, rest) = match t.as_bytes().first()? {
        b'+' => (1, &t[1..]),
        b'-' => (-1, &t[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|&c| c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit())
        || !matches!(digits.len(), 2 | 4)
        || (rest.contains(':') && rest.len() != 5)
    {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = if digits.len() == 4 {
        digits[2..].parse().ok()?
    } else {
        0
    };
    if hours > 23 || minutes > 59 {
        return None;
    }
    chrono::FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))
}

impl Zone {
    /// The instant a wall-clock time in this zone names. A time that occurs twice (when clocks
    /// go back) is read as the first of the two; one that never occurs (when they go forward)
    /// is refused.
    fn resolve(self, local: NaiveDateTime) -> Result<i64, String> {
        let found = match self {
            Zone::Utc => return Ok(local.and_utc().timestamp_millis()),
            Zone::Fixed(o) => o.from_local_datetime(&local).map(|t| t.timestamp_millis()),
            Zone::Named(tz) => tz.from_local_datetime(&local).map(|t| t.timestamp_millis()),
        };
        match found {
            LocalResult::Single(ms) | LocalResult::Ambiguous(ms, _) => Ok(ms),
            LocalResult::None => Err(format!(
                "{local} does not exist in {self} (the clocks skip it)"
            )),
        }
    }
}

/// A time read from input, in Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub millis: i64,
    /// The text had no offset and was read in the ingest's [`Zone`].
    pub zoned: bool,
}

/// A numeric timestamp in Unix milliseconds.
pub fn from_number(x: f64, unit: TimeUnit) -> Result<i64, String> {
    if !x.is_finite() {
        return Err(format!("{x} is not a time; {EXPECTED}"));
    }
    let millis = match unit {
        TimeUnit::Millis => x,
        TimeUnit::Seconds => x * 1000.0,
        TimeUnit::Auto if x.abs() < SECONDS_LIMIT => x * 1000.0,
        TimeUnit::Auto => x,
    };
    // chrono's range, so every accepted time can be labelled and queried.
    if !(-8.2e15..=8.2e15).contains(&millis) {
        return Err(format!("{x} is out of range for a time; {EXPECTED}"));
    }
    Ok(millis.floor() as i64)
}

/// An integer timestamp in Unix milliseconds (exact: no float rounding for large values).
pub fn from_integer(x: i64, unit: TimeUnit) -> Result<i64, String> {
    let seconds = match unit {
        TimeUnit::Seconds => true,
        TimeUnit::Millis => false,
        TimeUnit::Auto => (x.unsigned_abs() as f64) < SECONDS_LIMIT,
    };
    let millis = if seconds {
        x.checked_mul(1000)
    } else {
        Some(x)
    };
    match millis {
        Some(m) if (-8_200_000_000_000_000..=8_200_000_000_000_000).contains(&m) => Ok(m),
        _ => Err(format!("{x} is out of range for a time; {EXPECTED}")),
    }
}

/// A textual timestamp in UTC (see [`from_text_in`]).
pub fn from_text(s: &str, unit: TimeUnit) -> Result<i64, String> {
    from_text_in(s, unit, Zone::Utc).map(|t| t.millis)
}

/// A textual timestamp: RFC 3339 (`T` or a space between date and time), a date and time
/// without an offset (read in `zone`), or digits (Unix seconds or milliseconds, as for numbers).
pub fn from_text_in(s: &str, unit: TimeUnit, zone: Zone) -> Result<Stamp, String> {
    let t = s.trim();
    let absolute = |millis| Stamp {
        millis,
        zoned: false,
    };
    if let Some(ms) = fast_rfc3339_utc(t.as_bytes()) {
        return Ok(absolute(ms));
    }
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(absolute(d.timestamp_millis()));
    }
    if let Ok(i) = t.parse::<i64>() {
        return from_integer(i, unit).map(absolute);
    }
    if let Ok(x) = t.parse::<f64>() {
        if t.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            return from_number(x, unit).map(absolute);
        }
    }
    if let Some(local) = naive(t) {
        return zone
            .resolve(local)
            .map(|millis| Stamp {
                millis,
                zoned: true,
            })
            .map_err(|e| format!("\"{}\": {e}", shorten(s)));
    }
    Err(format!(
        "cannot read \"{}\" as a time; {EXPECTED}",
        shorten(s)
    ))
}

/// `YYYY-MM-DD HH:MM[:SS[.fff]]` (or with `T`), without an offset.
fn naive(t: &str) -> Option<NaiveDateTime> {
    const FORMATS: [&str; 4] = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ];
    // chrono's `%Y` takes any number of digits and a sign; input dates have four.
    if t.len() < 16 || !t.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
        return None;
    }
    FORMATS
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
}

/// The input text, cut to a length that fits an error message.
pub fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        return s.to_string();
    }
    let cut: String = s.chars().take(MAX).collect();
    format!("{cut}…")
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z`, the form `gen` writes and most exporters use, parsed without
/// chrono's general machinery (it is on the ingest hot path). Anything else returns `None` and
/// goes to chrono.
fn fast_rfc3339_utc(b: &[u8]) -> Option<i64> {
    if b.len() < 20 || *b.last()? != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let mut v = 0i64;
        for &c in b.get(r)? {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + i64::from(c - b'0');
        }
        Some(v)
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(sep(4, b'-')
        && sep(7, b'-')
        && (sep(10, b'T') || sep(10, b't'))
        && sep(13, b':')
        && sep(16, b':'))
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let frac_ms = match b.len() - 1 {
        19 => 0,
        n if b[19] == b'.' && n > 20 && n <= 29 => {
            let digits = &b[20..n];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let mut ms = 0i64;
            for i in 0..3 {
                ms = ms * 10 + digits.get(i).map_or(0, |&c| i64::from(c - b'0'));
            }
            ms
        }
        _ => return None,
    };
    if !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let date = chrono::NaiveDate::from_ymd_opt(year as i32, month as u32, day as u32)?;
    let days = i64::from(date.num_days_from_ce()) - 719_163; // days from 0001-01-01 to 1970-01-01
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + frac_ms)
}

use chrono::Datelike;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_documented_form() {
        let t = 1_764_633_600_000; // 2025-12-02T00:00:00Z
        assert_eq!(from_text("2025-12-02T00:00:00Z", TimeUnit::Auto), Ok(t));
        assert_eq!(
            from_text("2025-12-02T00:00:00.125Z", TimeUnit::Auto),
            Ok(t + 125)
        );
        assert_eq!(
            from_text("2025-12-02T00:00:00.1Z", TimeUnit::Auto),
            Ok(t + 100)
        );
        assert_eq!(
            from_text("2025-12-02T01:00:00+01:00", TimeUnit::Auto),
            Ok(t)
        );
        assert_eq!(from_text("1764633600", TimeUnit::Auto), Ok(t));
        assert_eq!(from_text("1764633600000", TimeUnit::Auto), Ok(t));
        assert_eq!(from_integer(1_764_633_600, TimeUnit::Auto), Ok(t));
        assert_eq!(from_integer(1_764_633_600_000, TimeUnit::Auto), Ok(t));
        assert_eq!(
            from_integer(1_764_633_600, TimeUnit::Millis),
            Ok(1_764_633_600)
        );
        assert_eq!(from_number(1_764_633_600.5, TimeUnit::Auto), Ok(t + 500));
        assert_eq!(from_integer(5, TimeUnit::Seconds), Ok(5000));
    }

    #[test]
    fn the_fast_path_agrees_with_chrono() {
        // Every day boundary of several years, odd times of day, and leap days.
        let mut checked = 0;
        for day in (-800..20_000).step_by(7) {
            for &(h, m, sec, ms) in &[(0, 0, 0, 0), (23, 59, 59, 999), (12, 34, 56, 7)] {
                let millis = ((day * 24 + h) * 60 + m) * 60_000 + sec * 1000 + ms;
                let text = chrono::DateTime::from_timestamp_millis(millis)
                    .expect("in range")
                    .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                    .to_string();
                assert_eq!(fast_rfc3339_utc(text.as_bytes()), Some(millis), "{text}");
                checked += 1;
            }
        }
        assert_eq!(checked, 2_972 * 3, "every sampled day and time was checked");
        assert_eq!(
            fast_rfc3339_utc(b"2024-02-29T00:00:00Z"),
            Some(1_709_164_800_000)
        );
        assert_eq!(fast_rfc3339_utc(b"2023-02-29T00:00:00Z"), None);
    }

    #[test]
    fn times_without_an_offset_are_read_in_the_zone_and_say_so() {
        let utc = 1_788_325_200_000; // 2026-09-02T05:00:00Z
        let read = |s: &str, z: &str| from_text_in(s, TimeUnit::Auto, z.parse().expect(z));
        for text in [
            "2026-09-02 05:00:00",
            "2026-09-02T05:00:00",
            "2026-09-02 05:00",
            "2026-09-02T05:00:00.000",
        ] {
            assert_eq!(
                read(text, "UTC"),
                Ok(Stamp {
                    millis: utc,
                    zoned: true
                }),
                "{text}"
            );
        }
        let hour = 3_600_000;
        assert_eq!(
            read("2026-09-02 05:00:00", "+02:00").map(|t| t.millis),
            Ok(utc - 2 * hour)
        );
        assert_eq!(
            read("2026-09-02 05:00:00", "-0530").map(|t| t.millis),
            Ok(utc + 11 * hour / 2)
        );
        // Berlin: summer time (+2) in September, standard time (+1) in January.
        assert_eq!(
            read("2026-09-02 05:00:00", "europe/berlin").map(|t| t.millis),
            Ok(utc - 2 * hour)
        );
        assert_eq!(
            read("2026-01-15 12:00:00", "Europe/Berlin").map(|t| t.millis),
            Ok(1_768_478_400_000 - hour) // 2026-01-15T12:00:00Z minus one hour
        );
        // When the clocks go back, 02:30 happens twice: the first (summer time) is taken.
        assert_eq!(
            read("2026-10-25 02:30:00", "Europe/Berlin").map(|t| t.millis),
            Ok(1_792_895_400_000 - 2 * hour) // 2026-10-25T02:30:00Z minus two hours
        );
        assert!(read("2026-03-29 02:30:00", "Europe/Berlin")
            .expect_err("skipped")
            .contains("does not exist in Europe/Berlin"));
        // An offset in the text wins over the zone; so do numbers.
        for (text, millis) in [
            ("2026-09-02 05:00:00Z", utc),
            ("2026-09-02 07:00:00+02:00", utc),
            ("1788325200", utc),
        ] {
            assert_eq!(
                read(text, "Asia/Tokyo"),
                Ok(Stamp {
                    millis,
                    zoned: false
                }),
                "{text}"
            );
        }
        for bad in ["Mars/Olympus", "+24:00", "+2", "0200", "+02:0"] {
            assert!(bad.parse::<Zone>().is_err(), "{bad}");
        }
        assert_eq!("Z".parse::<Zone>(), Ok(Zone::Utc));
        assert_eq!(
            "+02".parse::<Zone>().map(|z| z.to_string()),
            Ok("+02:00".into())
        );
    }

    #[test]
    fn rejects_what_is_not_a_time_and_says_why() {
        for bad in ["yesterday", "2025-13-01T00:00:00Z", "12:00", "", "0x1f"] {
            let e = from_text(bad, TimeUnit::Auto).expect_err(bad);
            assert!(e.contains("RFC 3339"), "{e}");
        }
        assert!(from_number(f64::NAN, TimeUnit::Auto).is_err());
        assert!(from_integer(i64::MAX, TimeUnit::Seconds).is_err());
        assert!("fortnights".parse::<TimeUnit>().is_err());
    }
}
