//! CSV with a header row to [`Event`]s: the mapped columns become the time, item and tags;
//! every other column is kept as a string in the event's `extra` JSON (CSV has no types).

use super::time;
use super::{BadLine, Mapping};
use crate::store::Event;

/// Column positions of the mapped fields, found in the header.
pub(crate) struct Columns {
    time: usize,
    item: usize,
    /// (store tag field, column)
    tags: Vec<(String, usize)>,
    /// (column name as JSON, column) for the rest.
    extra: Vec<(String, usize)>,
    width: usize,
}

impl Columns {
    /// Finds the mapped fields in the header (on line `line`, 1 unless blank lines precede it).
    pub(crate) fn from_header(
        header: &::csv::ByteRecord,
        line: u64,
        map: &Mapping,
    ) -> Result<Self, BadLine> {
        let names: Vec<String> = header
            .iter()
            .map(|b| String::from_utf8_lossy(b).trim().to_string())
            .collect();
        let find = |name: &str| names.iter().position(|n| n == name);
        let missing = |field: &str, what: &str| BadLine {
            line,
            field: Some(field.to_string()),
            reason: format!(
                "the header has no {what} column '{field}' (columns: {})",
                names.join(", ")
            ),
            looks_like_csv: false,
        };
        let time = find(&map.time).ok_or_else(|| missing(&map.time, "time"))?;
        let item = find(&map.item).ok_or_else(|| missing(&map.item, "item"))?;
        let tags: Vec<(String, usize)> = map
            .tags
            .iter()
            .filter_map(|(store, source)| find(source).map(|c| (store.clone(), c)))
            .collect();
        let used = |c: usize| c == time || c == item || tags.iter().any(|t| t.1 == c);
        let extra = names
            .iter()
            .enumerate()
            .filter(|&(c, _)| !used(c))
            .map(|(c, n)| (serde_json::Value::String(n.clone()).to_string(), c))
            .collect();
        Ok(Columns {
            time,
            item,
            tags,
            extra,
            width: names.len(),
        })
    }

    /// Fills `event` from one record; `Ok(true)` when its time had no offset and was read in
    /// the mapping's zone.
    pub(crate) fn parse(
        &self,
        record: &::csv::ByteRecord,
        line: u64,
        map: &Mapping,
        event: &mut Event,
    ) -> Result<bool, BadLine> {
        let bad = |field: Option<&str>, reason: String| BadLine {
            line,
            field: field.map(str::to_string),
            reason,
            looks_like_csv: false,
        };
        if record.len() != self.width {
            return Err(bad(
                None,
                format!(
                    "has {} columns, the header has {}",
                    record.len(),
                    self.width
                ),
            ));
        }
        let text = |c: usize, field: &str| -> Result<&str, BadLine> {
            std::str::from_utf8(&record[c])
                .map(str::trim)
                .map_err(|e| bad(Some(field), format!("is not UTF-8 text ({e})")))
        };
        let t = text(self.time, &map.time)?;
        if t.is_empty() {
            return Err(bad(
                Some(&map.time),
                "is empty (every event needs a time)".into(),
            ));
        }
        let stamp =
            time::from_text_in(t, map.unit, map.zone).map_err(|r| bad(Some(&map.time), r))?;
        event.time = stamp.millis;
        let item = text(self.item, &map.item)?;
        if item.is_empty() {
            return Err(bad(Some(&map.item), "is empty".into()));
        }
        event.item.clear();
        event.item.push_str(item);
        let mut tags = 0;
        for (store_field, c) in &self.tags {
            let v = text(*c, store_field)?;
            if !v.is_empty() {
                super::set_tag(&mut event.tags, tags, store_field, v);
                tags += 1;
            }
        }
        event.tags.truncate(tags);
        event.extra.clear();
        for (name, c) in &self.extra {
            let v = text(*c, name.trim_matches('"'))?;
            event
                .extra
                .push(if event.extra.is_empty() { '{' } else { ',' });
            event.extra.push_str(name);
            event.extra.push(':');
            event
                .extra
                .push_str(&serde_json::Value::String(v.to_string()).to_string());
        }
        if !event.extra.is_empty() {
            event.extra.push('}');
        }
        Ok(stamp.zoned)
    }
}

/// Whether a line that failed as JSON looks like a CSV header instead: it does not open a JSON
/// value, and it has at least two names separated by a comma, semicolon or tab.
pub(crate) fn looks_like_header(line: &[u8]) -> bool {
    let text = line.trim_ascii();
    if matches!(text.first(), None | Some(b'{' | b'[' | b'"')) {
        return false;
    }
    [b',', b';', b'\t'].iter().any(|&d| {
        let names: Vec<&[u8]> = text.split(|&b| b == d).collect();
        names.len() >= 2 && names.iter().all(|n| !n.trim_ascii().is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::time::TimeUnit;

    fn map() -> Mapping {
        Mapping {
            time: "ts".into(),
            item: "from".into(),
            tags: vec![("chain".into(), "network".into())],
            unit: TimeUnit::Auto,
            zone: crate::ingest::Zone::Utc,
        }
    }

    #[test]
    fn maps_columns_and_keeps_the_rest_as_strings() {
        let header = ::csv::ByteRecord::from(vec!["ts", "from", "network", "fee"]);
        let cols = Columns::from_header(&header, 1, &map()).expect("header");
        let mut e = Event::new(0, "", &[]);
        let rec = ::csv::ByteRecord::from(vec!["1764547200", "0xab", "a", "1.5"]);
        cols.parse(&rec, 2, &map(), &mut e).expect("row");
        assert_eq!(e.time, 1_764_547_200_000);
        assert_eq!(e.item, "0xab");
        assert_eq!(e.tags, vec![("chain".to_string(), "a".to_string())]);
        assert_eq!(e.extra, r#"{"fee":"1.5"}"#);
        // The same (recycled) event for a row with an empty tag keeps no tag of the last row.
        let rec = ::csv::ByteRecord::from(vec!["1764547201", "0xcd", "", "2"]);
        cols.parse(&rec, 3, &map(), &mut e).expect("row");
        assert_eq!((e.item.as_str(), e.tags.len()), ("0xcd", 0));
        let rec = ::csv::ByteRecord::from(vec!["1764547202", "0xef", "b", "3"]);
        cols.parse(&rec, 4, &map(), &mut e).expect("row");
        assert_eq!(e.tags, vec![("chain".to_string(), "b".to_string())]);
    }

    #[test]
    fn bad_rows_and_headers_say_where_and_why() {
        let header = ::csv::ByteRecord::from(vec!["ts", "wallet"]);
        let e = Columns::from_header(&header, 1, &map())
            .err()
            .expect("no 'from' column");
        assert_eq!((e.line, e.field.as_deref()), (1, Some("from")));
        assert!(e.reason.contains("columns: ts, wallet"), "{e}");

        let header = ::csv::ByteRecord::from(vec!["ts", "from", "network"]);
        let cols = Columns::from_header(&header, 1, &map()).expect("header");
        let mut ev = Event::new(0, "", &[]);
        let short = ::csv::ByteRecord::from(vec!["1", "0xab"]);
        let e = cols.parse(&short, 9, &map(), &mut ev).expect_err("short");
        assert_eq!(e.line, 9);
        assert!(e.reason.contains("2 columns, the header has 3"), "{e}");
        let bad_time = ::csv::ByteRecord::from(vec!["soon", "0xab", "a"]);
        let e = cols
            .parse(&bad_time, 10, &map(), &mut ev)
            .expect_err("time");
        assert_eq!(e.field.as_deref(), Some("ts"));
        let no_item = ::csv::ByteRecord::from(vec!["1", "", "a"]);
        let e = cols.parse(&no_item, 11, &map(), &mut ev).expect_err("item");
        assert_eq!(e.field.as_deref(), Some("from"));
    }
}
