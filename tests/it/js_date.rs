//! Differential tests of `session::js::date` against the real thing: `node` (Node.js 20) on PATH.
//!
//! The module exists to reproduce V8 bit for bit, and V8's date parser is full of behaviour that no
//! specification describes, so the only meaningful oracle is V8 itself. Each test sends node one long
//! list of inputs as JSON on stdin and compares every answer exactly. Node runs with `TZ=UTC` because
//! pi-sessiond treats local time as UTC.

use std::io::Write;
use std::process::{Command, Stdio};

use pi_sessiond::session::js::date::{parse_date, time_clip, to_iso_string};

/// Runs `script` under node with `input` on stdin and returns its stdout.
fn run_node(script: &str, input: &str) -> String {
    let mut child = match Command::new("node")
        .arg("-e")
        .arg(script)
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!(
            "these tests compare against Node.js and need `node` (version 20) on PATH, \
             but it could not be started: {e}"
        ),
    };
    let mut stdin = child.stdin.take().expect("node stdin");
    let input = input.to_owned();
    // Written from another thread so a large input cannot deadlock against node's output.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("waiting for node");
    writer.join().expect("stdin writer thread").expect("writing to node's stdin");
    assert!(output.status.success(), "node failed: {}", output.status);
    String::from_utf8(output.stdout).expect("node printed UTF-8")
}

/// A JSON string literal for `s`, escaping every non-ASCII code unit so that the exact UTF-16
/// sequence survives whatever encoding sits in between.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for unit in s.encode_utf16() {
        match unit {
            0x22 => out.push_str("\\\""),
            0x5C => out.push_str("\\\\"),
            0x20..=0x7E => out.push(char::from(unit as u8)),
            _ => out.push_str(&format!("\\u{unit:04x}")),
        }
    }
    out.push('"');
    out
}

fn json_string_array(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| json_string(s)).collect();
    format!("[{}]", parts.join(","))
}

/// The subset of JSON that node's answers use.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Number(f64),
    String(String),
    Array(Vec<Json>),
}

struct JsonReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl JsonReader<'_> {
    fn parse(text: &str) -> Json {
        let mut reader = JsonReader { bytes: text.trim().as_bytes(), pos: 0 };
        let value = reader.value();
        assert_eq!(reader.pos, reader.bytes.len(), "trailing data after JSON");
        value
    }

    fn value(&mut self) -> Json {
        match self.bytes[self.pos] {
            b'n' => {
                assert_eq!(&self.bytes[self.pos..self.pos + 4], b"null");
                self.pos += 4;
                Json::Null
            }
            b'"' => Json::String(self.string()),
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.bytes[self.pos] == b']' {
                    self.pos += 1;
                    return Json::Array(items);
                }
                loop {
                    items.push(self.value());
                    match self.bytes[self.pos] {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Json::Array(items);
                        }
                        other => panic!("unexpected {:?} in JSON array", char::from(other)),
                    }
                }
            }
            _ => {
                let start = self.pos;
                while self.pos < self.bytes.len()
                    && matches!(self.bytes[self.pos], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    self.pos += 1;
                }
                let text = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap();
                Json::Number(text.parse().unwrap_or_else(|_| panic!("bad number {text:?}")))
            }
        }
    }

    fn string(&mut self) -> String {
        self.pos += 1;
        let mut units: Vec<u16> = Vec::new();
        loop {
            let b = self.bytes[self.pos];
            self.pos += 1;
            match b {
                b'"' => return String::from_utf16(&units).expect("valid UTF-16 from node"),
                b'\\' => {
                    let e = self.bytes[self.pos];
                    self.pos += 1;
                    let unit = match e {
                        b'"' => 0x22,
                        b'\\' => 0x5C,
                        b'/' => 0x2F,
                        b'b' => 0x08,
                        b'f' => 0x0C,
                        b'n' => 0x0A,
                        b'r' => 0x0D,
                        b't' => 0x09,
                        b'u' => {
                            let hex = std::str::from_utf8(&self.bytes[self.pos..self.pos + 4]);
                            self.pos += 4;
                            u16::from_str_radix(hex.unwrap(), 16).expect("hex escape")
                        }
                        other => panic!("bad escape {:?}", char::from(other)),
                    };
                    units.push(unit);
                }
                _ => {
                    // Node's answers are ASCII apart from escapes; decode multi-byte UTF-8 anyway.
                    let start = self.pos - 1;
                    let len = match b {
                        0x00..=0x7F => 1,
                        0xC0..=0xDF => 2,
                        0xE0..=0xEF => 3,
                        _ => 4,
                    };
                    self.pos = start + len;
                    let s = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap();
                    units.extend(s.encode_utf16());
                }
            }
        }
    }
}

/// A tiny deterministic generator (xorshift64*), so the inputs are the same on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Hand-picked inputs: every ISO precision, legacy formats seen in the wild, and edge cases of V8's
/// rules.
fn handwritten_inputs() -> Vec<String> {
    let list: &[&str] = &[
        // ISO, all precisions.
        "2025",
        "2025-01",
        "2025-01-02",
        "2025-01-02T03:04",
        "2025-01-02T03:04:05",
        "2025-01-02T03:04:05.6",
        "2025-01-02T03:04:05.67",
        "2025-01-02T03:04:05.678",
        "2025-01-02T03:04:05.6789",
        "2025-01-02T03:04:05.678901234",
        "2025-01-02T03:04:05.6789012345678",
        "2025-01-02T03:04:05.0001234567891Z",
        "2025-01-02T03:04:05.000000001Z",
        "2025-01-02T03:04:05.999999999Z",
        "2025-01-02T03:04Z",
        "2025-01-02T03:04:05Z",
        "2025-01-02T03:04:05.678Z",
        "2025-01-02T03:04:05.678+01:00",
        "2025-01-02T03:04:05.678-01:00",
        "2025-01-02T03:04:05.678+0530",
        "2025-01-02T03:04:05.678-0800",
        "2025-01-02T03:04:05.678+23:59",
        "2025-01-02T03:04:05.678+24:00",
        "2025-01-02T03:04:05.678+00:60",
        "2025-01-02T03:04:05.678+1:00",
        "2025-01-02T03:04:05.678+01",
        "2025-01-02T03:04:05.678+01:0",
        "2025-01-02T03:04:05.678+2400",
        "2025-01-02T03:04:05.678+0160",
        "2025-01-02T03:04:05.678+001",
        "2025-01-02T03:04:05.678+00001",
        "2025-01-02t03:04:05.678z",
        "2025-01-02T03:04:05.678ZZ",
        "2025-01-02T03:04:05.678 Z",
        "2025-01-02T03:04:05.678Zulu",
        "2025-01-02T03:04:05.678UTC",
        "2025-01-02T03:04:05.678 UTC",
        "2025-01-02T03:04:05.678GMT",
        "2025-01-02T03:04:05.",
        "2025-01-02T03:04:05.Z",
        "2025-01-02T03:04:5",
        "2025-01-02T03:4:05",
        "2025-01-02T3:04:05",
        "2025-01-02T03",
        "2025-01-02T",
        "2025-01-02TZ",
        "2025-01-02T03:04:05:06",
        "2025-01-02T03:04:05.678.9",
        "2025-01-02Tab",
        "2025-01-02 T03:04",
        "2025-01-02T 03:04",
        "2025-01-02T24:00",
        "2025-01-02T24:00:00",
        "2025-01-02T24:00:00.000",
        "2025-01-02T24:00:00.000Z",
        "2025-01-02T24:00:00.001Z",
        "2025-01-02T24:01Z",
        "2025-01-02T24:00:01Z",
        "2025-01-02T25:00Z",
        "2025-01-02T23:60Z",
        "2025-01-02T23:59:60Z",
        "2025-01-02T00:00:00.000Z",
        "2025-02-28",
        "2025-02-29",
        "2025-02-30",
        "2025-02-31",
        "2024-02-29",
        "2024-02-30",
        "2000-02-29",
        "1900-02-29",
        "2100-02-29",
        "2025-04-31",
        "2025-01-32",
        "2025-01-00",
        "2025-00-01",
        "2025-13-01",
        "2025-12-31T23:59:59.999Z",
        "2025-1-2",
        "2025-01-2",
        "2025-001-02",
        "25-01-02",
        "02025-01-02",
        "0000-01-01",
        "0000-01-01T00:00:00Z",
        "0001-01-01",
        "0049-01-01",
        "0050-01-01",
        "0099-12-31",
        "9999-12-31T23:59:59.999Z",
        "1970-01-01T00:00:00.000Z",
        "1969-12-31T23:59:59.999Z",
        "+002025-01-02",
        "+002025-01-02T03:04:05.678Z",
        "-002025-01-02T03:04:05.678Z",
        "+010000-01-01T00:00:00Z",
        "+275760-09-13T00:00:00.000Z",
        "+275760-09-13T00:00:00.001Z",
        "+275760-09-12T23:59:59.999-00:01",
        "+275760-09-13T00:00:00.000+00:01",
        "-271821-04-20T00:00:00.000Z",
        "-271821-04-19T23:59:59.999Z",
        "-271821-04-20T00:00:00.000+00:01",
        "-271821-04-19T23:59:59.999-00:01",
        "+275760-09-13",
        "+275760-09-14",
        "-271821-04-19",
        "-271821-04-20",
        "+275760-09-13T00:00:00",
        "+275760-09-13T00:00:01",
        "-271821-04-20T00:00:00",
        "+999999-12-31",
        "-999999-01-01",
        "+000000-01-01",
        "-000000-01-01",
        "-000000",
        "+000000",
        "-000001",
        "+00002025",
        "+02025",
        "-02025",
        "+2025-01-02",
        "-2025-01-02",
        "2025-01-02T03:04:05+01:00 ",
        "2025-01-02T03:04:05 +01:00",
        // Legacy formats.
        "Jan 2 2025",
        "Jan 2, 2025",
        "January 2, 2025",
        "2 Jan 2025",
        "2 January 2025",
        "2025 Jan 2",
        "Jan 2025 2",
        "Jan 2",
        "Jan",
        "January",
        "Janfoo 2 2025",
        "Ja 2 2025",
        "Jan-2-2025",
        "2-Jan-2025",
        "2025-Jan-02",
        "Thu, 01 Jan 1970 00:00:00 GMT",
        "Thu, 01 Jan 1970 00:00:00 GMT+0100",
        "Thu, 01 Jan 1970 00:00:00 GMT-0130",
        "Thu, 01 Jan 1970 00:00:00 +0000",
        "Thu, 01 Jan 1970 00:00:00 -0800",
        "Thu, 01 Jan 1970 00:00:00 UT",
        "Thu, 01 Jan 1970 00:00:00 UTC",
        "Thu, 01 Jan 1970 00:00:00 Z",
        "Thu, 01 Jan 1970 00:00:00 z",
        "Thu, 01 Jan 1970 00:00:00 EST",
        "Thu, 01 Jan 1970 00:00:00 EDT",
        "Thu, 01 Jan 1970 00:00:00 CST",
        "Thu, 01 Jan 1970 00:00:00 CDT",
        "Thu, 01 Jan 1970 00:00:00 MST",
        "Thu, 01 Jan 1970 00:00:00 MDT",
        "Thu, 01 Jan 1970 00:00:00 PST",
        "Thu, 01 Jan 1970 00:00:00 PDT",
        "Thu, 01 Jan 1970 00:00:00 CET",
        "Thu, 01 Jan 1970 00:00:00 BST",
        "Thu, 01 Jan 1970 00:00:00 GMTX",
        "Thu, 01 Jan 1970 00:00:00 UTC+1",
        "Thu, 01 Jan 1970 00:00:00 UTC+01",
        "Thu, 01 Jan 1970 00:00:00 UTC+011",
        "Thu, 01 Jan 1970 00:00:00 UTC+0130",
        "Thu, 01 Jan 1970 00:00:00 UTC+01300",
        "Thu, 01 Jan 1970 00:00:00 UTC+01:30",
        "Thu, 01 Jan 1970 00:00:00 UTC+",
        "Thu, 01 Jan 1970 00:00:00 UTC-",
        "Thu, 01 Jan 1970 00:00:00 GMT+01:",
        "Thu, 01 Jan 1970 00:00:00 GMT+300000:",
        "Thu, 01 Jan 1970 00:00:00 GMT+600000:",
        "Thu, 01 Jan 1970 00:00:00 GMT+1193047:",
        "Thu, 01 Jan 1970 00:00:00 GMT+1193046:59",
        "Thu, 01 Jan 1970 00:00:00 GMT+596523:14",
        "Thu, 01 Jan 1970 00:00:00 GMT+596523:15",
        "Thu, 01 Jan 1970 00:00:00 GMT+999999999:",
        "Thu Jan 01 1970 00:00:00 GMT+0100 (Central European Standard Time)",
        "Thu Jan 01 1970 00:00:00 GMT+0100 (CET",
        "Thu Jan 01 1970 00:00:00 GMT+0100 ((nested) comment)",
        "Thu Jan 01 1970 00:00:00 GMT+0100 )",
        "(comment) Jan 2 2025",
        "Jan (comment) 2 2025",
        "Jan 2 (comment) 2025",
        "Jan 2 2025 (comment",
        "Jan 2 2025 10:00 (PST)",
        "1/2/2025",
        "01/02/2025",
        "1/2/25",
        "1/2/49",
        "1/2/50",
        "1/2/99",
        "1/2/100",
        "1/2/0",
        "1/2",
        "1",
        "13/2/2025",
        "2/30/2025",
        "1/32/2025",
        "2025/01/02",
        "2025/1/2",
        "2025/01/02 10:00",
        "2025/01/02 10:00:00",
        "2025/01/02 10:00:00.5",
        "2025/01/02 10:00:00.123456",
        "2025/01/02 10:00 PM",
        "2025/01/02 10:00 pm",
        "2025/01/02 10:00 AM",
        "2025/01/02 12:00 AM",
        "2025/01/02 12:00 PM",
        "2025/01/02 13:00 PM",
        "2025/01/02 0:00 PM",
        "2025/01/02 10 PM",
        "2025/01/02 10PM",
        "2025/01/02 10:00PM",
        "2025/01/02 10:00:00PM",
        "2025/01/02 PM 10:00",
        "2025/01/02 10:00 PM PM",
        "2025/01/02 10:00 AMT",
        "2025/01/02 10:00 GMT",
        "2025/01/02 10:00 GMT+2",
        "2025/01/02 10:00 +2",
        "2025/01/02 10:00 +0200",
        "2025/01/02 10:00 -02:00",
        "2025/01/02 10:00Z",
        "2025/01/02 10:00z",
        "2025/01/02 10:00X",
        "2025/01/02 10:00,",
        "2025/01/02 10:00/",
        "2025-01-02 10:00",
        "2025-01-02 10:00:00",
        "2025-01-02 10:00:00Z",
        "2025-01-02 10:00:00.123Z",
        "2025-01-02 10:00:00 +01:00",
        "2025-01-02 10:00:00+01:00",
        "2025-01-02 24:00",
        "2025-01-02 24:00:00",
        "2025-01-02 24:00:01",
        "2025-01-02 25:00",
        "2025-01-02 10:60",
        "2025-01-02 10:00:60",
        "2025-01-02 10::",
        "2025-01-02 10::00",
        "2025-01-02 10:00::",
        "2025-01-02 10:",
        "2025-01-02 10:.5",
        "2025-01-02 10:00.5",
        "2025-01-02 10:00:00.",
        "2025-01-02 10:00:00:00",
        "2025-01-02 10:00:00:00:00",
        "2025-01-02 10.00",
        "2025-01-02 10 00",
        "10:00 2025-01-02",
        "10:00 Jan 2 2025",
        "Jan 2 2025 10:00",
        "Jan 2 2025 10:00:00",
        "Jan 2 2025 10:00:00.123",
        "Jan 2 2025 10:00:00 GMT",
        "Jan 2 2025 10:00:00 GMT+0100",
        "Jan 2 2025 10:00:00 GMT-8",
        "Jan 2 2025 10:00:00 UTC -8",
        "Jan 2 2025 10:00:00 -8",
        "Jan 2 2025 -8",
        "Jan 2 2025 GMT",
        "Jan 2 2025 GMT+1",
        "GMT Jan 2 2025",
        "2025-01-02T10:00:00 GMT",
        "2025-01-02 GMT",
        "2025-01-02 UTC+0100",
        "2025.01.02",
        "2025.1.2",
        "02.01.2025",
        "2.1.2025",
        "2025 01 02",
        "2025,01,02",
        "2025_01_02",
        "20250102",
        "20250102T100000Z",
        "12345",
        "123456",
        "1234567890",
        "12345678901234567890",
        "0",
        "00",
        "000",
        "0000",
        "00000",
        "1",
        "12",
        "31",
        "32",
        "49",
        "50",
        "99",
        "100",
        "999",
        "2025",
        "-1",
        "+1",
        "-2025",
        "+2025",
        "1e3",
        "0x10",
        "Infinity",
        "NaN",
        "null",
        "undefined",
        "true",
        "now",
        "today",
        "Tue",
        "Tue 2025",
        "Tuesday, January 2, 2025",
        "foo 2025",
        "foo2025",
        "foo 2025 bar",
        "foo bar 1/2/2025",
        "x1/2/2025",
        "1/2/2025x",
        "1/2/2025 x",
        "1/2/2025 10:00 x",
        "T 2025",
        "2025 T",
        "Z 2025",
        "2025 Z",
        "2025 UTC",
        "UTC 2025",
        "am 2025",
        "10 am 2025",
        "2025 10 am",
        "Jan Feb 2 2025",
        "2 3 4 5",
        "1 2 3",
        "Jan 1 2 3",
        "32 Jan 2025",
        "Jan 32 2025",
        "Jan 0 2025",
        "Jan 2 0",
        "Jan 2 49",
        "Jan 2 50",
        "Jan 2 100",
        "Jan 2 1000000",
        "Jan 2 999999",
        "Jan 2 275760",
        "Sep 13 275760",
        "Sep 14 275760",
        "Apr 19 -271821",
        "Sep 13 275760 00:00 GMT+0000",
        "Sep 13 275760 00:00",
        "Sep 13 275760 00:01",
        "Sep 13 275760 00:00 GMT-0001",
        "Sep 12 275760 23:59 GMT+0001",
        "Jan 0000000000015 2025",
        "Jan 15 0000000002025",
        "Jan 15 000000000000000000002025",
        "Jan 15 2025 0000000000010:00",
        "Jan 15 2025 10:00:00.00000000000000000001",
        "   2025-01-01  ",
        "  2025-01-01",
        "2025-01-01  ",
        "\t2025-01-01",
        "\n2025-01-01\n",
        "\r\n2025-01-01",
        "2025-01-01\u{0}garbage",
        "\u{0}2025-01-01",
        "2025\u{0}-01-01",
        "Jan 2 2025 10:00\u{0}x",
        "(Jan 2 2025\u{0})",
        "\u{a0}2025-01-01",
        "2025-01-01\u{a0}",
        "Jan\u{a0}2\u{a0}2025",
        "Jan 2 2025 10:00\u{a0}",
        "Jan 2 2025 10:00\u{feff}",
        "Jan 2 2025 10:00\u{3000}",
        "Jan 2 2025 10:00\u{1680}",
        "Jan 2 2025 10:00\u{2000}",
        "Jan 2 2025 10:00\u{200a}",
        "Jan 2 2025 10:00\u{200b}",
        "Jan 2 2025 10:00\u{202f}",
        "Jan 2 2025 10:00\u{205f}",
        "Jan 2 2025 10:00\u{180e}",
        "Jan 2 2025 10:00\u{85}",
        "Jan 2 2025 10:00\u{2028}",
        "Jan 2 2025 10:00\u{2029}",
        "Jan 2 2025 10:00\u{b}",
        "Jan 2 2025 10:00\u{c}",
        "Jan 2 2025 10:00\u{1c}",
        "Jan 2 2025 10:00\u{1f}",
        "Jan 2 2025 10:00\u{7f}",
        "Jan 2 2025 10:00é",
        "Jan 2 2025 10:00 é",
        "é Jan 2 2025",
        "é2 Jan 2025",
        "😀 Jan 2 2025",
        "Jan 2 2025 😀",
        "J😀 2 2025",
        "Jän 2 2025",
        "JAN 2 2025",
        "jAn 2 2025",
        "DECEMBER 17, 1995 03:24:00",
        "December 17, 1995 03:24:00",
        "1995-12-17T03:24:00",
        "Mon, 25 Dec 1995 13:30:00 +0430",
        "Mon, 25 Dec 1995 13:30:00 +04:30",
        "Mon, 25 Dec 1995 13:30:00 GMT+04:30",
        "Mon, 25 Dec 1995 13:30 GMT",
        "Mon, 25 Dec 1995 13:30:00.5 GMT",
        "25 Dec 1995 13:30:00 GMT",
        "Dec 25 1995 1:30 PM EST",
        "Dec 25 1995 1:30 PM EST foo",
        "Dec 25 1995 1:30:00 PM (Eastern Standard Time)",
        "1995-12-25 1:30 PM",
        "",
        " ",
        "  ",
        "\t",
        "abc",
        "-",
        "+",
        ":",
        ".",
        "T",
        "Z",
        "()",
        ")",
        "(",
        "2025-",
        "2025-01-",
        "2025--01",
        "2025-01--02",
        "2025-01-02-",
        "2025-01-02-03",
        "2025-01-02 -03",
        "2025-01-02 +03",
        "2025-01-02 10:00 -",
        "2025-01-02 10:00 +",
        "2025-01-02 10:00 --1",
        "2025-01-02 10:00 ++1",
        "2025-01-02 10:00 +1 +2",
        "2025-01-02 10:00 +01:00:00",
        "2025-01-02 10:00 +01:00 +02:00",
        "2025-01-02 10:00 GMT PST",
        "2025-01-02 10:00 PST GMT",
        "2025-01-02 10:00 GMT+01 PST",
        "2025-01-02 10:00 UT",
        "2025-01-02 10:00 UTC",
        "2025-01-02 10:00 Z+1",
        "2025-01-02 10:00 Z-0130",
        "2025-01-02 10:00 Z 5",
        "2025-01-02 10:00 GMT+01 30",
        "2025-01-02 10:00 GMT+01: 30",
        "2025-01-02 10:00 GMT+01:30:30",
        "1:2:3",
        "1:2:3:4",
        "1:2:3.4",
        "1:2:3.4.5",
        "1 1:2:3",
        "1/1 1:2:3.4567",
        "1/1/1 1:2:3:4",
        "1/1/1 1::",
        "1/1/1 1::2",
        "1/1/1 1:.",
        "1/1/1 1:2.3",
        "1/1/1 1.2",
        "1/1/1 1.2.3",
        "1/1/1 12:34.",
        "1/1/1 12:34.567",
        "1/1/1 12:34:56.",
        "1/1/1 12:34:56.7",
        "1/1/1 12:34:56.78",
        "1/1/1 12:34:56.789",
        "1/1/1 12:34:56.7890",
        "1/1/1 12:34:56 .789",
        "2025-01-02T10:00:00.000+01:00 (comment)",
        "2025-01-02 (comment) 10:00",
        "-2025-01-02",
        "2025-01-02 - 10:00",
        "1/2/2025 - 10:00",
        "- 1/2/2025",
        "+ 1/2/2025",
        "--1/2/2025",
        ") 1/2/2025",
        "1/2/2025 )",
    ];
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Every combination of a few interesting values for each field of the ISO form.
fn iso_grid_inputs() -> Vec<String> {
    let years = [
        "0000", "0001", "1970", "2024", "2025", "9999", "+275760", "-271821", "+000000", "-000000", "+012345",
        "-000001", "20250",
    ];
    let months = ["", "-00", "-01", "-02", "-12", "-13", "-1"];
    let days = ["", "-00", "-01", "-28", "-29", "-30", "-31", "-32"];
    let times =
        ["", "T00:00", "T23:59:59.999", "T24:00", "T24:00:00.000", "T24:00:00.001", "T12:60", "t12:34:56.7", " 12:34"];
    let zones = ["", "Z", "+01:00", "-0130", "+24:00", "-23:59", " GMT"];
    let mut out = Vec::new();
    for y in years {
        for m in months {
            for d in days {
                if m.is_empty() && !d.is_empty() {
                    continue;
                }
                for t in times {
                    for z in zones {
                        out.push(format!("{y}{m}{d}{t}{z}"));
                    }
                }
            }
        }
    }
    out
}

/// Valid timestamps of many shapes, mutated: characters dropped, duplicated, replaced, inserted and
/// swapped, as a hand-edited file might have them.
fn mutated_inputs(rng: &mut XorShift, count: usize) -> Vec<String> {
    let seeds: &[&str] = &[
        "2025-01-02T03:04:05.678Z",
        "2025-01-02T03:04:05Z",
        "2025-01-02T03:04Z",
        "2025-01-02T03:04:05",
        "2025-01-02",
        "2025-01",
        "+002025-01-02T03:04:05.678+05:30",
        "-000001-12-31T23:59:59.999-0800",
        "2025-01-02T24:00:00Z",
        "2025-01-02 03:04:05",
        "2025/01/02 10:00",
        "1/2/2025",
        "01/02/2025 10:00:00 PM",
        "Jan 2 2025",
        "2 January 2025 10:00 am EST",
        "Thu, 02 Jan 2025 03:04:05 GMT",
        "Thu Jan 02 2025 03:04:05 GMT+0100 (Central European Standard Time)",
        "December 17, 1995 03:24:00",
        "Mon, 25 Dec 1995 13:30:00 +0430",
        "1995-12-17T03:24:00.123456789+01:00",
        "12345",
        "2025.01.02 10:00:00.5 UTC",
    ];
    let alphabet: Vec<char> = "0123456789-+:.TZtz /,()APMapmGMTUTCESTPDjanFebOctDec\t\n"
        .chars()
        .chain(['\u{a0}', '\u{2028}', 'é', '\u{0}', '\u{3000}', '😀', '\u{1c}'])
        .collect();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut chars: Vec<char> = rng.pick(seeds).chars().collect();
        let edits = 1 + rng.below(3);
        for _ in 0..edits {
            let len = chars.len();
            match rng.below(5) {
                0 if len > 0 => {
                    chars.remove(rng.below(len));
                }
                1 if len > 0 => {
                    let i = rng.below(len);
                    chars.insert(i, chars[i]);
                }
                2 if len > 0 => {
                    let i = rng.below(len);
                    chars[i] = *rng.pick(&alphabet);
                }
                3 if len > 1 => {
                    let i = rng.below(len - 1);
                    chars.swap(i, i + 1);
                }
                _ => {
                    let i = rng.below(len + 1);
                    chars.insert(i, *rng.pick(&alphabet));
                }
            }
        }
        out.push(chars.into_iter().collect());
    }
    out
}

/// Random sequences of the tokens V8's legacy parser knows about, to reach its rarer paths.
fn token_soup_inputs(rng: &mut XorShift, count: usize) -> Vec<String> {
    let words = [
        "Jan", "feb", "MARCH", "May", "Sept", "Dec", "Tue", "Thursday", "am", "PM", "UT", "UTC", "GMT", "Z", "z",
        "EST", "PDT", "T", "t", "CET", "foo",
    ];
    let separators = [" ", " ", " ", "-", "/", ":", "::", ".", ",", "+", "-", "(x)", ")", "(", "\t", "\u{a0}", ""];
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut s = String::new();
        let tokens = 1 + rng.below(8);
        for _ in 0..tokens {
            match rng.below(3) {
                0 => s.push_str(rng.pick::<&str>(&words)),
                1 => {
                    let digits = 1 + rng.below(7);
                    for _ in 0..digits {
                        s.push(char::from(b'0' + rng.below(10) as u8));
                    }
                }
                _ => {
                    let n = rng.below(60);
                    s.push_str(&n.to_string());
                }
            }
            s.push_str(rng.pick::<&str>(&separators));
        }
        out.push(s);
    }
    out
}

/// A time value as ours and node's `[getTime(), toISOString()]` pair, NaN as null.
fn ours_for_time(t: f64) -> Json {
    if t.is_nan() {
        Json::Array(vec![Json::Null, Json::Null])
    } else {
        let iso = to_iso_string(t).map_or(Json::Null, Json::String);
        Json::Array(vec![Json::Number(t), iso])
    }
}

/// Compares node's answers with ours and fails with the first 20 differences.
fn assert_all_equal(what: &str, inputs: &[String], node: &Json, ours: &[Json]) {
    let Json::Array(node) = node else {
        panic!("node did not answer with an array: {node:?}");
    };
    assert_eq!(node.len(), inputs.len(), "node answered a different number of inputs");
    let mismatches: Vec<String> = inputs
        .iter()
        .zip(node)
        .zip(ours)
        .filter(|((_, n), o)| n != o)
        .map(|((input, n), o)| format!("  input {input:?}\n    node {n:?}\n    ours {o:?}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{what}: {} of {} inputs differ from node; the first 20:\n{}",
        mismatches.len(),
        inputs.len(),
        mismatches.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

const PARSE_SCRIPT: &str = r#"
let data = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { data += chunk; });
process.stdin.on('end', () => {
  const list = JSON.parse(data);
  const out = list.map((s) => {
    const t = new Date(s).getTime();
    return Number.isNaN(t) ? [null, null] : [t, new Date(t).toISOString()];
  });
  process.stdout.write(JSON.stringify(out));
});
"#;

#[test]
fn parse_date_matches_v8_on_iso_legacy_and_mutated_inputs() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut inputs = handwritten_inputs();
    inputs.extend(iso_grid_inputs());
    let mutated = mutated_inputs(&mut rng, 8000);
    assert!(mutated.len() >= 5000);
    inputs.extend(mutated);
    inputs.extend(token_soup_inputs(&mut rng, 4000));

    let node = JsonReader::parse(&run_node(PARSE_SCRIPT, &json_string_array(&inputs)));
    let ours: Vec<Json> = inputs.iter().map(|s| ours_for_time(parse_date(s))).collect();
    assert_all_equal("new Date(string)", &inputs, &node, &ours);
}

const TIME_SCRIPT: &str = r#"
let data = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { data += chunk; });
process.stdin.on('end', () => {
  const list = JSON.parse(data);
  const out = list.map((s) => {
    const d = new Date(Number(s));
    const t = d.getTime();
    return Number.isNaN(t) ? [null, null] : [t, d.toISOString()];
  });
  process.stdout.write(JSON.stringify(out));
});
"#;

/// `x` as a string that JavaScript's `Number()` reads back as exactly `x`.
fn js_number_text(x: f64) -> String {
    if x == f64::INFINITY {
        "Infinity".to_owned()
    } else if x == f64::NEG_INFINITY {
        "-Infinity".to_owned()
    } else {
        // Rust prints the shortest round-tripping digits without an exponent, and NaN as "NaN".
        format!("{x}")
    }
}

#[test]
fn time_clip_and_to_iso_string_match_v8() {
    let mut values: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        0.999,
        -0.999,
        1.5,
        -1.5,
        999.9,
        -999.9,
        1_735_787_045_678.0,
        1_735_787_045_678.9,
        -1_735_787_045_678.9,
        8.64e15,
        -8.64e15,
        8.64e15 + 1.0,
        -8.64e15 - 1.0,
        8.64e15 - 1.0,
        -8.64e15 + 1.0,
        8.64e15 - 0.5,
        -8.64e15 + 0.5,
        // Year boundaries: 0000, 9999, 10000, -0001.
        -62_167_219_200_000.0,
        -62_167_219_200_001.0,
        253_402_300_799_999.0,
        253_402_300_800_000.0,
        -62_198_755_200_000.0,
        -62_198_755_199_999.0,
        951_782_400_000.0,
        951_868_800_000.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        5e-324,
        1e21,
        -1e21,
    ];
    let mut rng = XorShift(0x1234_5678_9ABC_DEF1);
    for _ in 0..3000 {
        let unit = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        let t = (unit * 2.0 - 1.0) * 8.7e15;
        values.push(t);
        values.push(t.trunc());
        // Small values around the epoch and within a few years of it.
        values.push((unit * 2.0 - 1.0) * 1e11);
        values.push(((unit * 2.0 - 1.0) * 1e5).trunc() * 86_400_000.0);
    }
    for _ in 0..500 {
        values.push(f64::from_bits(rng.next()));
    }

    let inputs: Vec<String> = values.iter().map(|&x| js_number_text(x)).collect();
    let node = JsonReader::parse(&run_node(TIME_SCRIPT, &json_string_array(&inputs)));
    let ours: Vec<Json> = values.iter().map(|&x| ours_for_time(time_clip(x))).collect();
    assert_all_equal("new Date(number)", &inputs, &node, &ours);
}
