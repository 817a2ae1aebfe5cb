//! A reader of the one shape most lines have: a flat object of scalars written without escapes.
//! It only finds where each key and value starts and ends, in two thirds of serde_json's time
//! for a chain event's line, and declines everything else (an escape, a nested value, anything
//! it is unsure of, any error) for serde_json to read: a line it accepts is one serde_json
//! accepts, split into the same keys and value texts.

/// The line is not one this reader takes; serde_json reads it instead.
#[derive(Debug, PartialEq, Eq)]
pub struct Declined;

/// The fields of `line` (without its newline) in order, duplicates included: each key without
/// its quotes and its value's JSON text (a string with its quotes), both borrowed from the line.
/// Ends with `Err(Declined)`, and nothing after it, if the line is not a flat object of scalars
/// without escapes; the fields before it are then to be forgotten.
pub fn fields(line: &str) -> Fields<'_> {
    Fields {
        line,
        at: 0,
        state: State::Start,
    }
}

pub struct Fields<'a> {
    line: &'a str,
    /// Byte offset of the next character to read.
    at: usize,
    state: State,
}

#[derive(Clone, Copy)]
enum State {
    /// Before the `{`.
    Start,
    /// After a value: a `,` or the `}` comes next.
    Between,
    /// Past the end of the object and the line, or declined.
    Done,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(&'a str, &'a str), Declined>;

    // This and the readers of a field, string and number are inlined into the caller's loop:
    // left to the compiler they stayed calls, and the reader took a third longer.
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let read = match self.state {
            State::Done => return None,
            State::Start => {
                self.skip_space();
                self.expect(b'{').and_then(|()| {
                    self.skip_space();
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                        self.end()
                    } else {
                        self.pair().map(Some)
                    }
                })
            }
            State::Between => {
                self.skip_space();
                match self.peek() {
                    Some(b',') => {
                        self.at += 1;
                        self.skip_space();
                        self.pair().map(Some)
                    }
                    Some(b'}') => {
                        self.at += 1;
                        self.end()
                    }
                    _ => Err(Declined),
                }
            }
        };
        match read {
            Ok(Some(pair)) => {
                self.state = State::Between;
                Some(Ok(pair))
            }
            Ok(None) => {
                self.state = State::Done;
                None
            }
            Err(Declined) => {
                self.state = State::Done;
                Some(Err(Declined))
            }
        }
    }
}

impl<'a> Fields<'a> {
    fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), Declined> {
        if self.peek() != Some(byte) {
            return Err(Declined);
        }
        self.at += 1;
        Ok(())
    }

    /// JSON's whitespace, which is narrower than Unicode's or ASCII's (no form feed).
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn slice(&self, from: usize) -> Result<&'a str, Declined> {
        self.line.get(from..self.at).ok_or(Declined)
    }

    /// Only whitespace may follow the object.
    fn end(&mut self) -> Result<Option<(&'a str, &'a str)>, Declined> {
        self.skip_space();
        if self.at == self.line.len() {
            Ok(None)
        } else {
            Err(Declined)
        }
    }

    #[inline(always)]
    fn pair(&mut self) -> Result<(&'a str, &'a str), Declined> {
        self.expect(b'"')?;
        let key = self.string_body()?;
        self.skip_space();
        self.expect(b':')?;
        self.skip_space();
        let start = self.at;
        match self.peek() {
            Some(b'"') => {
                self.at += 1;
                self.string_body()?;
            }
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(b't') => self.word("true")?,
            Some(b'f') => self.word("false")?,
            Some(b'n') => self.word("null")?,
            _ => return Err(Declined),
        }
        Ok((key, self.slice(start)?))
    }

    /// The rest of a string after its opening quote, up to its closing one (read past it).
    /// Declines an escape, which would need decoding, and a control character, which JSON
    /// forbids unescaped.
    #[inline(always)]
    fn string_body(&mut self) -> Result<&'a str, Declined> {
        let bytes = self.line.as_bytes();
        let start = self.at;
        // Eight bytes at a time while none can end the string or be declined: byte by byte,
        // the reader took 60% longer over chain events' 42- and 66-character hex strings.
        let mut rest = bytes.get(self.at..).unwrap_or_default();
        while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
            let special = notable(u64::from_le_bytes(*chunk));
            if special != 0 {
                self.at += (special.trailing_zeros() / 8) as usize;
                break;
            }
            self.at += 8;
            rest = tail;
        }
        loop {
            match self.peek() {
                Some(b'"') => break,
                Some(b'\\' | 0x00..=0x1f) | None => return Err(Declined),
                Some(_) => self.at += 1,
            }
        }
        let body = self.slice(start)?;
        self.at += 1;
        Ok(body)
    }

    /// RFC 8259's number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`. A digit straight
    /// after a leading zero is left for the caller to decline, as whatever follows a value must
    /// be whitespace, `,` or `}`.
    #[inline(always)]
    fn number(&mut self) -> Result<(), Declined> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits()?,
            _ => return Err(Declined),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digits()?;
        }
        Ok(())
    }

    /// One or more digits.
    fn digits(&mut self) -> Result<(), Declined> {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        if self.at == start {
            return Err(Declined);
        }
        Ok(())
    }

    fn word(&mut self, word: &str) -> Result<(), Declined> {
        let rest = self.line.as_bytes().get(self.at..).unwrap_or_default();
        if !rest.starts_with(word.as_bytes()) {
            return Err(Declined);
        }
        self.at += word.len();
        Ok(())
    }
}

/// The high bit of each byte of `word` (little-endian) that is a `"`, a `\` or a control
/// character, and perhaps of bytes after the first such byte; zero if there is none. Each test is
/// the usual "has a zero byte" one, whose borrows can only mark bytes above a true match, so the
/// lowest mark is always a true one.
fn notable(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quote = word ^ (ONES * b'"' as u64);
    let backslash = word ^ (ONES * b'\\' as u64);
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    (zero(quote) | zero(backslash) | control) & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Result<Vec<(&str, &str)>, Declined> {
        fields(line).collect()
    }

    #[test]
    fn takes_flat_objects_of_scalars() {
        let line =
            r#"{"time":"2026-11-01T00:00:00.202Z","wallet":"0x50b1","gas":279486,"status":1}"#;
        assert_eq!(
            read(line),
            Ok(vec![
                ("time", r#""2026-11-01T00:00:00.202Z""#),
                ("wallet", r#""0x50b1""#),
                ("gas", "279486"),
                ("status", "1"),
            ])
        );
        assert_eq!(read("{}"), Ok(vec![]));
        assert_eq!(read(" \t{ \r\n} \n"), Ok(vec![]));
        // JSON's whitespace anywhere between tokens; values come without it.
        assert_eq!(
            read(" {\t\"a\" :\n1 ,\r\"b\": true , \"c\":false,\"d\":null } "),
            Ok(vec![
                ("a", "1"),
                ("b", "true"),
                ("c", "false"),
                ("d", "null")
            ])
        );
        // Numbers in every form RFC 8259 has.
        for n in [
            "0",
            "-0",
            "7",
            "-12",
            "0.5",
            "-0.0",
            "10.25",
            "1e5",
            "1E+5",
            "2e-07",
            "-0.5E-3",
            "123456789012345678901234567890",
            "1e400",
        ] {
            assert_eq!(read(&format!("{{\"n\":{n}}}")), Ok(vec![("n", n)]), "{n}");
        }
        // Duplicates are kept (the field logic refuses those that matter), empty and unicode
        // keys and strings too.
        assert_eq!(
            read(r#"{"a":1,"a":"2","":"","é ✓ 😀":"日本","x":"'/"}"#),
            Ok(vec![
                ("a", "1"),
                ("a", "\"2\""),
                ("", "\"\""),
                ("é ✓ 😀", "\"日本\""),
                ("x", "\"'/\""),
            ])
        );
    }

    #[test]
    fn declines_all_else() {
        let declined = [
            // Escapes, in keys and in values.
            r#"{"a\"b":1}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":"x\\"}"#,
            r#"{"a":"x\n"}"#,
            // Nested values.
            r#"{"a":{}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":1,"b":{"c":2}}"#,
            // Numbers outside RFC 8259.
            r#"{"a":01}"#,
            r#"{"a":-01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":1e}"#,
            r#"{"a":1e+}"#,
            r#"{"a":+1}"#,
            r#"{"a":1.5.2}"#,
            r#"{"a":0x10}"#,
            r#"{"a":NaN}"#,
            r#"{"a":Infinity}"#,
            r#"{"a":-Infinity}"#,
            r#"{"a":1 2}"#,
            // Control characters in strings, raw.
            "{\"a\":\"x\ty\"}",
            "{\"a\":\"x\u{0}\"}",
            "{\"a\nb\":1}",
            "{\"a\":\"\u{1f}\"}",
            // Literals other than true, false and null.
            r#"{"a":tru}"#,
            r#"{"a":truex}"#,
            r#"{"a":True}"#,
            r#"{"a":nul}"#,
            r#"{"a":fals}"#,
            r#"{"a":undefined}"#,
            // Broken structure.
            "",
            "   ",
            "{",
            "}",
            r#"{"a":1"#,
            r#"{"a":1,"#,
            r#"{"a""#,
            r#"{"a"#,
            r#"{"a":"b"#,
            r#"{"a" 1}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a":1,}"#,
            r#"{,"a":1}"#,
            r#"{"a":1,,"b":2}"#,
            r#"{"a":}"#,
            r#"{a:1}"#,
            r#"{'a':1}"#,
            r#"{"a":'b'}"#,
            r#"{"a"::1}"#,
            r#"[1]"#,
            r#""a""#,
            "1",
            "null",
            // Anything but whitespace after the object, and whitespace JSON lacks.
            r#"{"a":1} x"#,
            r#"{"a":1}}"#,
            r#"{"a":1}{}"#,
            r#"{"a":1},"#,
            "{\"a\":1}\u{c}",
            "\u{feff}{\"a\":1}",
            "{\u{a0}\"a\":1}",
            "{\"a\":1\u{b}}",
        ];
        for line in declined {
            assert_eq!(read(line), Err(Declined), "{line:?}");
            let mut it = fields(line);
            while let Some(Ok(_)) = it.next() {}
            assert_eq!(it.next(), None, "nothing after a decline: {line:?}");
        }
    }

    #[test]
    fn a_decline_follows_the_fields_read_before_it() {
        let mut it = fields(r#"{"a":1,"b":[2]}"#);
        assert_eq!(it.next(), Some(Ok(("a", "1"))));
        assert_eq!(it.next(), Some(Err(Declined)));
        assert_eq!(it.next(), None);
    }

    #[test]
    fn the_eight_byte_scan_finds_the_first_notable_byte_at_every_offset() {
        for len in 0..20 {
            let plain = "x".repeat(len);
            let line = format!("{{\"{plain}\":\"{plain}é\"}}");
            assert_eq!(
                read(&line),
                Ok(vec![(plain.as_str(), format!("\"{plain}é\"").as_str())])
            );
            for bad in ['\\', '\u{1}', '\u{1f}'] {
                let line = format!("{{\"k\":\"{plain}{bad}{plain}\"}}");
                assert_eq!(read(&line), Err(Declined), "{line:?}");
            }
        }
        // Bytes just past the notable ones in the ASCII table are ordinary.
        assert_eq!(
            read("{\" !#[]\u{7f}\":\"\u{80}\"}"),
            Ok(vec![(" !#[]\u{7f}", "\"\u{80}\"")])
        );
        for b in 0u8..=0x7f {
            let c = char::from(b);
            let line = format!("{{\"k\":\"abcdefgh{c}ijklmnop\"}}");
            let taken = read(&line).is_ok();
            assert_eq!(taken, !(c == '"' || c == '\\' || b < 0x20), "{b:#x}");
        }
    }
}
