//! One JSON object per line to an [`Event`], read with borrowed strings: the mapped fields
//! become the time, item and tags; every other field is kept verbatim as the event's `extra`
//! JSON.
//!
//! Two readers split a line into keys and value texts, and the same `Ctx::read_field` makes
//! the event of either's fields. The parser thread is one of the two that bound ingest speed,
//! so the `flat` reader takes the line nearly every input is made of, a flat object of scalars
//! without escapes, in two thirds of serde_json's time. It declines any other line, and any
//! line with something wrong in it, and serde_json reads that one from the start: the rest of
//! JSON and every error message stay serde_json's alone.

mod flat;

use super::time;
use super::{BadLine, Mapping};
use crate::store::Event;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// Fills `event` from one line (without its newline). On failure, says which field and why.
/// `Ok(true)` when the time had no offset and was read in the mapping's zone.
pub fn parse_line(
    line: &[u8],
    number: u64,
    map: &Mapping,
    event: &mut Event,
) -> Result<bool, BadLine> {
    read_line(line, number, map, event, true)
}

/// [`parse_line`], through the flat reader first if `flat`, else through serde_json alone.
fn read_line(
    line: &[u8],
    number: u64,
    map: &Mapping,
    event: &mut Event,
    flat: bool,
) -> Result<bool, BadLine> {
    let mut ctx = Ctx::new(map, event);
    // One check of the whole line, then readers of `&str`, which trust it: serde_json reading
    // from bytes checked each string and raw value on its own (7% of the parser's time on
    // chain events, whose lines carry a dozen fields).
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(e) => {
            return Err(BadLine {
                line: number,
                field: None,
                reason: format!(
                    "bad JSON: not UTF-8 text (byte {} of the line)",
                    e.valid_up_to() + 1
                ),
                looks_like_csv: false,
            })
        }
    };
    let parsed = if flat && read_flat(text, &mut ctx) {
        Ok(())
    } else {
        // What the flat reader took before it declined is dropped, and serde_json reads the
        // line afresh: it alone words what is wrong with a line, so every error reads the same
        // whichever reader met the line first.
        ctx = Ctx::new(map, ctx.event);
        let mut de = serde_json::Deserializer::from_str(text);
        de.deserialize_map(LineVisitor { ctx: &mut ctx })
            .and_then(|()| de.end())
    };
    let tags = ctx.tags;
    ctx.event.tags.truncate(tags);
    if let Err(e) = parsed {
        let (field, reason) = match ctx.problem.take() {
            Some(p) => (ctx.field.take(), p),
            None if e.is_syntax() || e.is_eof() => (None, format!("bad JSON: {}", describe(&e))),
            None => (ctx.field.take(), describe(&e)),
        };
        return Err(BadLine {
            line: number,
            field,
            reason,
            looks_like_csv: false,
        });
    }
    let bad = |field: &str, reason: String| BadLine {
        line: number,
        field: Some(field.to_string()),
        reason,
        looks_like_csv: false,
    };
    let Some(time) = ctx.time else {
        return Err(bad(&map.time, "missing (every event needs a time)".into()));
    };
    match ctx.item {
        Some(true) => {}
        Some(false) => return Err(bad(&map.item, "is empty".into())),
        None => return Err(bad(&map.item, "missing (every event needs one)".into())),
    }
    if !ctx.event.extra.is_empty() {
        ctx.event.extra.push('}');
    }
    ctx.event.time = time.millis;
    Ok(time.zoned)
}

/// Reads the line's fields through [`flat`]; false if it declined the line or a field was
/// refused (serde_json then reads the line again and words the error).
fn read_flat(text: &str, ctx: &mut Ctx) -> bool {
    for pair in flat::fields(text) {
        let Ok((key, raw)) = pair else {
            return false;
        };
        if ctx
            .read_field::<serde_json::Error>(Cow::Borrowed(key), raw)
            .is_err()
        {
            return false;
        }
    }
    true
}

/// serde_json's message with the position as a column (every line is its own document, so
/// "line 1" would mislead).
fn describe(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let message = match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => &text,
    };
    format!("{message} (column {})", e.column())
}

struct Ctx<'a> {
    map: &'a Mapping,
    /// The field that failed, named in the error (set only on failure).
    field: Option<String>,
    /// Our own reason, when the failure is about meaning rather than syntax.
    problem: Option<String>,
    time: Option<time::Stamp>,
    /// Whether the item was present and non-empty.
    item: Option<bool>,
    /// Tags set so far: the first `tags` of `event.tags` (the rest are a recycled event's).
    tags: usize,
    event: &'a mut Event,
}

impl<'a> Ctx<'a> {
    fn new(map: &'a Mapping, event: &'a mut Event) -> Self {
        event.extra.clear();
        Ctx {
            map,
            field: None,
            problem: None,
            time: None,
            item: None,
            tags: 0,
            event,
        }
    }

    fn fail<E: de::Error>(&mut self, field: &str, problem: String) -> E {
        self.field = Some(field.to_string());
        self.problem = Some(problem.clone());
        E::custom(problem)
    }

    /// One field of the line: its key (borrowed when it was written without escapes) and its
    /// value's JSON text as written. A failure names the field.
    fn read_field<E: de::Error>(&mut self, key: Cow<'_, str>, raw: &str) -> Result<(), E> {
        // The name is copied only when it is needed: copying it for every field of every line
        // in case one failed was a tenth of the per-field work.
        let read = self.read_value(&key, matches!(key, Cow::Borrowed(_)), raw);
        if read.is_err() && self.problem.is_none() {
            self.field = Some(key.into_owned());
        }
        read
    }

    /// [`Ctx::read_field`] but for naming the field; `plain` if the key had no escapes.
    fn read_value<E: de::Error>(&mut self, key: &str, plain: bool, raw: &str) -> Result<(), E> {
        let map = self.map;
        if names(key, &map.time) {
            if self.time.is_some() {
                return Err(self.fail(key, "appears twice".into()));
            }
            let absolute = |millis| time::Stamp {
                millis,
                zoned: false,
            };
            let parsed = match TimeValue::of(raw)? {
                TimeValue::Int(i) => time::from_integer(i, map.unit).map(absolute),
                TimeValue::Float(x) => time::from_number(x, map.unit).map(absolute),
                TimeValue::Text(s) => time::from_text_in(&s, map.unit, map.zone),
            };
            match parsed {
                Ok(ms) => self.time = Some(ms),
                Err(reason) => return Err(self.fail(key, reason)),
            }
        } else if names(key, &map.item) {
            if self.item.is_some() {
                return Err(self.fail(key, "appears twice".into()));
            }
            match Scalar::of(raw)?.text() {
                Ok(Some(s)) => {
                    self.event.item.clear();
                    self.event.item.push_str(&s);
                    self.item = Some(!s.is_empty());
                }
                Ok(None) => self.item = Some(false),
                Err(kind) => {
                    return Err(self.fail(
                        key,
                        format!("is {kind}; the item must be a string or a number"),
                    ))
                }
            }
        } else if let Some((store_field, _)) =
            map.tags.iter().find(|(_, source)| names(key, source))
        {
            match Scalar::of(raw)?.text() {
                // An empty or null tag is no tag: the event still counts in the whole stream.
                Ok(Some(s)) if !s.is_empty() => {
                    let set = &self.event.tags[..self.tags.min(self.event.tags.len())];
                    if set.iter().any(|(f, _)| f == store_field) {
                        return Err(self.fail(key, "appears twice".into()));
                    }
                    super::set_tag(&mut self.event.tags, self.tags, store_field, &s);
                    self.tags += 1;
                }
                Ok(_) => {}
                Err(kind) => {
                    return Err(self.fail(
                        key,
                        format!("is {kind}; a tag must be a string or a number"),
                    ))
                }
            }
        } else {
            let extra = &mut self.event.extra;
            extra.push(if extra.is_empty() { '{' } else { ',' });
            // A key that held escapes is re-encoded; one without is written back as it came
            // (JSON forbids raw control characters in a string, so it needs none). The value is
            // kept as written.
            if plain {
                extra.push('"');
                extra.push_str(key);
                extra.push('"');
            } else {
                extra.push_str(&serde_json::to_string(key).map_err(E::custom)?);
            }
            extra.push(':');
            extra.push_str(raw);
        }
        Ok(())
    }
}

/// Whether a line's key is the field name `name`. Every key of every line is held against the
/// mapping's names, and most have another's length but not its first byte (`hash` and `time`,
/// `value` and `chain`): comparing those first leaves the call to `memcmp`, which `==` makes
/// whenever lengths agree (a tenth of the parser's time on chain lines), to the keys that match.
#[inline]
fn names(key: &str, name: &str) -> bool {
    key.len() == name.len() && key.as_bytes().first() == name.as_bytes().first() && key == name
}

struct LineVisitor<'a, 'b> {
    ctx: &'a mut Ctx<'b>,
}

impl<'de> Visitor<'de> for LineVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(Text(key)) = m.next_key::<Text<'de>>()? {
            let raw = m.next_value::<&'de RawValue>()?;
            self.ctx.read_field(key, raw.get())?;
        }
        Ok(())
    }
}

/// A string borrowed from the line when it has no escapes, owned otherwise.
struct Text<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A value as written on the line, told apart by its first character. Numbers keep their exact
/// text: a 30-digit wallet id stays itself instead of passing through `f64` (which would merge
/// ids that differ past the 17th digit). Read from the value's text (a [`RawValue`] on
/// serde_json's path) rather than through a visitor's `visit_u64`/`visit_f64` for that reason; it
/// also behaves the same whether or not some other crate of the build turns on serde_json's
/// `arbitrary_precision` (which hands numbers to `deserialize_any` visitors as a private
/// one-entry map).
enum Scalar<'r> {
    Text(Cow<'r, str>),
    /// A JSON number, as written.
    Number(&'r str),
    Null,
    Other(&'static str),
}

impl<'r> Scalar<'r> {
    /// A value's JSON text, already checked by the reader.
    fn of<E: de::Error>(raw: &'r str) -> Result<Self, E> {
        Ok(match raw.as_bytes().first() {
            Some(b'"') => Scalar::Text(unquote(raw).map_err(E::custom)?),
            Some(b'-' | b'0'..=b'9') => Scalar::Number(raw),
            Some(b'n') => Scalar::Null,
            Some(b't' | b'f') => Scalar::Other("a boolean"),
            Some(b'{') => Scalar::Other("an object"),
            Some(b'[') => Scalar::Other("an array"),
            _ => Scalar::Other("not a JSON value"),
        })
    }

    /// The text of a string or a number; `None` for null.
    fn text(self) -> Result<Option<Cow<'r, str>>, &'static str> {
        match self {
            Scalar::Text(s) => Ok(Some(s)),
            Scalar::Number(n) => Ok(Some(Cow::Borrowed(n))),
            Scalar::Null => Ok(None),
            Scalar::Other(kind) => Err(kind),
        }
    }
}

/// The contents of a JSON string literal (already checked by the line's reader): borrowed when
/// it has no escapes, unescaped otherwise.
fn unquote(raw: &str) -> Result<Cow<'_, str>, serde_json::Error> {
    let inner = &raw[1..raw.len() - 1];
    if inner.contains('\\') {
        serde_json::from_str::<String>(raw).map(Cow::Owned)
    } else {
        Ok(Cow::Borrowed(inner))
    }
}

/// A time value as written: integer, fractional number or text.
enum TimeValue<'r> {
    Int(i64),
    Float(f64),
    Text(Cow<'r, str>),
}

impl<'r> TimeValue<'r> {
    /// A value's JSON text, already checked by the reader.
    fn of<E: de::Error>(raw: &'r str) -> Result<Self, E> {
        let expected = || E::custom(time::EXPECTED);
        match Scalar::of(raw)? {
            Scalar::Text(s) => Ok(TimeValue::Text(s)),
            Scalar::Number(n) if !n.contains(['.', 'e', 'E']) => match n.parse::<i64>() {
                Ok(i) => Ok(TimeValue::Int(i)),
                Err(_) => Err(E::custom(format!(
                    "{} is out of range for a time",
                    time::shorten(n)
                ))),
            },
            Scalar::Number(n) => n
                .parse::<f64>()
                .map(TimeValue::Float)
                .map_err(|_| expected()),
            Scalar::Null | Scalar::Other(_) => Err(expected()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::TimeUnit;

    fn map() -> Mapping {
        Mapping {
            time: "time".into(),
            item: "wallet".into(),
            tags: vec![("chain".into(), "chain".into())],
            unit: TimeUnit::Auto,
            zone: crate::ingest::Zone::Utc,
        }
    }

    fn parse(line: &str) -> Result<Event, BadLine> {
        let mut e = Event::new(0, "", &[]);
        parse_line(line.as_bytes(), 7, &map(), &mut e).map(|_| e)
    }

    #[test]
    fn a_recycled_event_keeps_nothing_of_its_last_line() {
        let two_tags = Mapping {
            tags: vec![
                ("chain".into(), "chain".into()),
                ("kind".into(), "kind".into()),
            ],
            ..map()
        };
        let mut e = Event::new(0, "", &[]);
        let mut read =
            |line: &str| parse_line(line.as_bytes(), 1, &two_tags, &mut e).map(|_| e.clone());
        let first =
            read(r#"{"time":1,"wallet":"0xa","chain":"a","kind":"bot","fee":1}"#).expect("valid");
        assert_eq!(first.tags.len(), 2);
        let second = read(r#"{"time":2,"wallet":"0xb","kind":"user"}"#).expect("valid");
        assert_eq!(second.tags, vec![("kind".to_string(), "user".to_string())]);
        assert_eq!(second.extra, "");
        let third = read(r#"{"time":3,"wallet":"0xc"}"#).expect("valid");
        assert!(third.tags.is_empty(), "{:?}", third.tags);
        // A tag repeated on one line is still caught with recycled slots around.
        let bad = read(r#"{"time":4,"wallet":"0xd","chain":"a","chain":"b"}"#).expect_err("twice");
        assert_eq!(bad.field.as_deref(), Some("chain"));
    }

    #[test]
    fn reads_the_gen_schema_and_keeps_other_fields_verbatim() {
        let e = parse(r#"{"time":"2026-12-01T00:00:00.086Z","wallet":"0xab","chain":"main","kind":"bot","fee":1.50}"#)
            .expect("valid");
        assert_eq!(e.time, 1_796_083_200_086); // 2026-12-01T00:00:00.086Z
        assert_eq!(e.item, "0xab");
        assert_eq!(e.tags, vec![("chain".to_string(), "main".to_string())]);
        assert_eq!(e.extra, r#"{"kind":"bot","fee":1.50}"#);
        let e = parse(r#"{"wallet":"0x\u0041","time":1764547200}"#).expect("valid");
        assert_eq!(
            (e.item.as_str(), e.time, e.extra.as_str()),
            ("0xA", 1_764_547_200_000, "")
        );
        assert!(e.tags.is_empty());
        let e = parse(r#"{"wallet":12345,"time":1764547200000,"chain":null}"#).expect("valid");
        assert_eq!(e.item, "12345");
        assert!(e.tags.is_empty());
    }

    #[test]
    fn keys_of_other_fields_are_written_back_as_json_and_bad_utf8_is_named() {
        let e = parse(r#"{"time":1,"wallet":"0xa","plain key":1,"t\u0061b\tx":[1, 2]}"#)
            .expect("valid");
        assert_eq!(e.extra, r#"{"plain key":1,"tab\tx":[1, 2]}"#);
        let reread: serde_json::Value = serde_json::from_str(&e.extra).expect("extra is JSON");
        assert_eq!(reread["tab\tx"], serde_json::json!([1, 2]));
        let mut bytes = br#"{"time":1,"wallet":"0x"#.to_vec();
        bytes.extend_from_slice(b"\xff\"}");
        let mut e = Event::new(0, "", &[]);
        let bad = parse_line(&bytes, 3, &map(), &mut e).expect_err("not UTF-8");
        assert!(
            bad.reason.contains("not UTF-8") && bad.reason.contains("byte 23"),
            "{bad}"
        );
    }

    #[test]
    fn numbers_as_items_and_tags_keep_their_text() {
        let e = parse(r#"{"time":1,"wallet":123456789012345678901234567890,"chain":1.50}"#)
            .expect("valid");
        assert_eq!(e.item, "123456789012345678901234567890");
        assert_eq!(e.tags, vec![("chain".to_string(), "1.50".to_string())]);
        let e = parse(r#"{"time":1,"wallet":-1E+3}"#).expect("valid");
        assert_eq!(e.item, "-1E+3");
        // Escapes in a string are still decoded; times still read as numbers.
        let e = parse(r#"{"time":1764547200.5,"wallet":"a\"b\\c"}"#).expect("valid");
        assert_eq!((e.item.as_str(), e.time), ("a\"b\\c", 1_764_547_200_500));
        let e = parse(r#"{"time":99999999999999999999,"wallet":"0xa"}"#).expect_err("range");
        assert_eq!(e.field.as_deref(), Some("time"));
        assert!(e.reason.contains("out of range"), "{e}");
    }

    #[test]
    fn every_bad_line_names_its_line_field_and_reason() {
        let cases = [
            (
                r#"{"time":"2026-12-01T00:00:00Z","wallet":"0xab""#,
                None,
                "bad JSON",
            ),
            (r#"not json"#, None, "bad JSON"),
            (
                r#"{"time":"2026-12-01T00:00:00Z"}"#,
                Some("wallet"),
                "missing",
            ),
            (r#"{"wallet":"0xab"}"#, Some("time"), "missing"),
            (
                r#"{"time":"noon","wallet":"0xab"}"#,
                Some("time"),
                "RFC 3339",
            ),
            (r#"{"time":true,"wallet":"0xab"}"#, Some("time"), "RFC 3339"),
            (r#"{"time":1,"wallet":""}"#, Some("wallet"), "empty"),
            (r#"{"time":1,"wallet":["0xab"]}"#, Some("wallet"), "array"),
            (
                r#"{"time":1,"time":2,"wallet":"0xab"}"#,
                Some("time"),
                "twice",
            ),
            (
                r#"{"time":1,"wallet":"0xab","chain":{"x":1}}"#,
                Some("chain"),
                "object",
            ),
            (r#"{"time":1,"wallet":"0xab"} trailing"#, None, "bad JSON"),
            (r#"[1,2]"#, None, "object"),
        ];
        for (line, field, reason) in cases {
            let e = parse(line).expect_err(line);
            assert_eq!(e.line, 7, "{line}");
            assert_eq!(e.field.as_deref(), field, "{line}: {e}");
            assert!(e.reason.contains(reason), "{line}: {e}");
        }
    }

    /// A line read by both readers (the flat one first, as ingest does, and serde_json alone)
    /// from the same recycled event, so a decline part-way must leave no trace of the fields
    /// read before it.
    fn both_ways(line: &str) -> [Result<(bool, Event), BadLine>; 2] {
        let map = Mapping {
            tags: vec![
                ("chain".into(), "chain".into()),
                ("kind".into(), "kind".into()),
            ],
            ..map()
        };
        [true, false].map(|flat| {
            let mut e = Event::new(5, "old", &[("kind", "old"), ("chain", "old")]);
            e.extra.push_str(r#"{"old":1}"#);
            read_line(line.as_bytes(), 7, &map, &mut e, flat).map(|zoned| (zoned, e))
        })
    }

    /// The keys and value texts serde_json reads from a line, as the visitor sees them.
    fn serde_fields(line: &str) -> Result<Vec<(String, String)>, serde_json::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Vec<(String, String)>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(Text(key)) = m.next_key::<Text<'de>>()? {
                    let raw = m.next_value::<&'de RawValue>()?;
                    fields.push((key.into_owned(), raw.get().to_string()));
                }
                Ok(fields)
            }
        }
        let mut de = serde_json::Deserializer::from_str(line);
        let fields = de.deserialize_map(Fields)?;
        de.end()?;
        Ok(fields)
    }

    /// Whatever the flat reader takes, serde_json takes too and splits into the same fields,
    /// and the event or error is the same either way.
    fn check_readers_agree(line: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        use proptest::prelude::*;
        if let Ok(fields) = flat::fields(line).collect::<Result<Vec<_>, _>>() {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
                // A `Value` holds a number as an `f64`, so it refuses 1e400; the raw text that
                // ingest keeps is valid JSON all the same.
                prop_assert!(
                    e.to_string().starts_with("number out of range"),
                    "{line:?}: {e}"
                );
            }
            let fields: Vec<_> = fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            prop_assert_eq!(serde_fields(line).ok(), Some(fields), "{:?}", line);
        }
        let [flat, serde] = both_ways(line);
        prop_assert_eq!(flat, serde, "{:?}", line);
        Ok(())
    }

    mod readers_agree {
        use super::*;
        use proptest::prelude::*;

        fn space() -> impl Strategy<Value = String> {
            prop_oneof![8 => Just(String::new()), 2 => "[ \t\r\n]{1,3}"]
        }

        /// Text for inside a string, unicode included, without what the flat reader declines.
        fn plain_text(max: usize) -> impl Strategy<Value = String> {
            let regex = |r: String| proptest::string::string_regex(&r).expect("a valid regex");
            prop_oneof![
                regex(format!("[a-z_]{{0,{max}}}")),
                regex(format!("\\PC{{0,{max}}}")).prop_map(|s| s.replace(['"', '\\'], "")),
            ]
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                1 => prop::sample::select(vec!["time", "wallet", "chain", "kind"])
                    .prop_map(String::from),
                8 => plain_text(8),
            ]
        }

        /// The inside of a string with escapes (now and then a lone surrogate, which serde_json
        /// refuses to decode).
        fn escaped_text() -> impl Strategy<Value = String> {
            "([a-zé]|\\\\[\"\\\\/bfnrt]|\\\\u00[0-9a-fA-F]{2}|\\\\u[1-9a-c][0-9a-f]{3}|\\\\ud83d\\\\ude00|\\\\ud800){1,5}"
        }

        /// Valid JSON values the flat reader declines.
        fn not_flat_value() -> impl Strategy<Value = String> {
            prop_oneof![
                escaped_text().prop_map(|s| format!("\"{s}\"")),
                "(\\[\\]|\\{\\}|\\[1, *\"a\", *null\\]|\\{\"a\": *\\{\"b\" *: *\\[true\\]\\}\\})",
            ]
        }

        fn number() -> impl Strategy<Value = String> {
            prop_oneof![
                "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,3})?",
                any::<i64>().prop_map(|n| n.to_string()),
                any::<f64>().prop_map(|x| x.to_string()),
            ]
        }

        fn time_value() -> impl Strategy<Value = String> {
            prop_oneof![
                (-1_000_000_000_000i64..4_000_000_000_000).prop_map(|n| n.to_string()),
                "\"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]0[0-9]:[0-5][0-9])?\"",
                "-?(0|[1-9][0-9]{0,9})\\.[0-9]{1,3}",
                number(),
            ]
        }

        fn scalar() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => plain_text(12).prop_map(|s| format!("\"{s}\"")),
                1 => "\"0x[0-9a-f]{40}\"",
                3 => number(),
                1 => time_value(),
                1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(String::from),
            ]
        }

        /// A flat object of scalars as ingest sees most lines, with JSON's whitespace anywhere;
        /// if `rich`, now and then with a value or key the flat reader declines.
        fn json_line(rich: bool) -> impl Strategy<Value = String> {
            let item = prop_oneof![
                3 => plain_text(12).prop_map(|s| format!("\"{s}\"")),
                1 => number(),
                1 => scalar(),
            ];
            let (mut key, mut value, mut time, mut item) = (
                key().boxed(),
                scalar().boxed(),
                time_value().boxed(),
                item.boxed(),
            );
            if rich {
                let escaped = || escaped_text().prop_map(|s| format!("\"{s}\""));
                key = prop_oneof![8 => key, 1 => escaped_text()].boxed();
                value = prop_oneof![8 => value, 1 => not_flat_value()].boxed();
                time = prop_oneof![
                    8 => time,
                    1 => Just(r#""2026\u002d11-01T00:00:00\u005a""#.to_string()),
                ]
                .boxed();
                item = prop_oneof![8 => item, 1 => escaped()].boxed();
            }
            let field = (key, value, space(), space(), space(), space());
            (
                prop::option::weighted(0.9, time),
                prop::option::weighted(0.9, item),
                prop::collection::vec(field, 0..8),
                space(),
                space(),
                space(),
            )
                .prop_flat_map(|(time, item, rest, s1, s2, s3)| {
                    let mut fields: Vec<_> = rest
                        .into_iter()
                        .map(|(k, v, a, b, c, d)| format!("{a}\"{k}\"{b}:{c}{v}{d}"))
                        .collect();
                    fields.extend(time.map(|t| format!("\"time\":{t}")));
                    fields.extend(item.map(|i| format!("\"wallet\":{i}")));
                    Just(fields)
                        .prop_shuffle()
                        .prop_map(move |f| format!("{s1}{{{s2}{}}}{s3}", f.join(",")))
                })
        }

        fn flat_line() -> impl Strategy<Value = String> {
            json_line(false)
        }

        /// Almost the flat shape: each piece sometimes broken, escaped or nested.
        fn near_flat_line() -> impl Strategy<Value = String> {
            let key = prop_oneof![
                8 => key().prop_map(|k| format!("\"{k}\"")),
                1 => "\"([a-z]|\\\\[\"\\\\/bfnrtu]|\\\\u[0-9a-fA-F]{0,4}|[\\x00-\\x1f]){0,4}\"",
                1 => "[a-z'\"]{0,3}",
            ];
            let value = prop_oneof![
                8 => scalar(),
                2 => "[+-]?[0-9]{0,3}(\\.[0-9]{0,2})?([eE][+-]?[0-9]{0,2})?",
                1 => "(tru|true|truee|True|fals|false|nul|null|nulll|NaN|Infinity|undefined)",
                1 => "\"([a-z]|\\\\[\"\\\\/bfnrtu]|\\\\u[0-9a-fA-F]{0,4}|\\\\u[dD][89abAB][0-9a-f]{2}|[\\x00-\\x1f])*\"",
                1 => "(\\{\\}|\\[\\]|\\[1, *\"a\"\\]|\\{\"a\": *1\\}|'a'|\"a)",
            ];
            let colon =
                prop_oneof![16 => Just(":"), 1 => Just(""), 1 => Just("::"), 1 => Just(" : ")];
            let comma =
                prop_oneof![16 => Just(","), 1 => Just(""), 1 => Just(",,"), 1 => Just(" , ")];
            let field = (key, colon, value, comma);
            (
                prop::collection::vec(field, 0..6),
                prop_oneof![8 => Just("{"), 1 => Just(""), 1 => Just("[")],
                prop_oneof![8 => Just("}"), 1 => Just(""), 1 => Just(",}"), 1 => Just("]")],
                prop_oneof![
                    8 => Just("".to_string()),
                    1 => "[ \t\r\n]{1,2}",
                    1 => "[ \u{b}\u{c}\u{a0}\u{feff}x,}{]"
                ],
            )
                .prop_map(|(fields, open, close, after)| {
                    let mut line = open.to_string();
                    for (i, (k, colon, v, comma)) in fields.iter().enumerate() {
                        if i > 0 {
                            line.push_str(comma);
                        }
                        line.push_str(&format!("{k}{colon}{v}"));
                    }
                    format!("{line}{close}{after}")
                })
        }

        /// A flat line with a few characters inserted, deleted or replaced.
        fn mutated_line() -> impl Strategy<Value = String> {
            let c = prop_oneof![
                3 => prop::sample::select(
                    "{}[]\",: \t\r\n\\0123456789-+.eEtrufalsn\u{0}\u{1f}\u{7f}\u{a0}é😀"
                        .chars()
                        .collect::<Vec<_>>()
                ),
                1 => any::<char>(),
            ];
            let edit = (any::<prop::sample::Index>(), 0..3u8, c);
            (flat_line(), prop::collection::vec(edit, 1..4)).prop_map(|(line, edits)| {
                let mut chars: Vec<char> = line.chars().collect();
                for (at, how, c) in edits {
                    let i = at.index(chars.len() + 1);
                    match how {
                        0 => chars.insert(i, c),
                        1 if i < chars.len() => {
                            chars.remove(i);
                        }
                        _ if i < chars.len() => chars[i] = c,
                        _ => chars.push(c),
                    }
                }
                chars.into_iter().collect()
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            #[test]
            fn the_flat_reader_takes_flat_lines_and_reads_them_as_serde_json_does(
                line in flat_line()
            ) {
                prop_assert!(
                    flat::fields(&line).all(|f| f.is_ok()),
                    "declined {:?}", line
                );
                check_readers_agree(&line)?;
            }

            #[test]
            fn lines_with_escapes_and_nested_values_are_read_alike_by_both_readers(
                line in json_line(true)
            ) {
                check_readers_agree(&line)?;
            }

            #[test]
            fn lines_nearly_flat_are_read_alike_by_both_readers(line in near_flat_line()) {
                check_readers_agree(&line)?;
            }

            #[test]
            fn mutated_lines_are_read_alike_by_both_readers(line in mutated_line()) {
                check_readers_agree(&line)?;
            }

            #[test]
            fn any_text_is_read_alike_by_both_readers(
                line in prop_oneof!["\\PC{0,40}", "[{}\\[\\]\",:0-9a-z .eE+\\-\\\\ \t]{0,40}"]
            ) {
                check_readers_agree(&line)?;
            }
        }
    }
}
