//! `new Date(string)` and `Date.prototype.toISOString` as Node.js 20 (V8 11.3) computes them.
//!
//! pi sorts sessions and entries by `new Date(timestamp).getTime()` and writes timestamps back with
//! `toISOString()`. Session files are sometimes written by hand, so their timestamps are not always the
//! canonical `2025-01-02T03:04:05.678Z`: they can be `Jan 2 2025`, `2025/01/02 10:00`, RFC 2822 dates,
//! or plain garbage. ECMAScript leaves everything outside its Date Time String Format to the
//! implementation, so the only way to order and report such timestamps exactly as pi does is to
//! reproduce V8's own parser, quirks included (`"1/2"` is in 2001, `".0001234567891"` seconds is
//! 123 ms, a `\0` ends the string, and so on).
//!
//! The parser in this folder is a line-by-line port of V8's `src/date/dateparser.h`, `dateparser-inl.h` and
//! `dateparser.cc`, and of `ParseDateTimeString`, `MakeDay`, `MakeTime` and `MakeDate` in
//! `src/date/date.cc`. Names mirror V8's so the two can be read side by side. The snapshots of that
//! source the port was made from predate two changes that Node 20 (V8 11.3.244) has: white space ends
//! a word, and leading zeros do not count toward a numeral's nine significant digits. Those, the set of
//! white-space characters and the 32-bit Smi limit on time-zone offsets were confirmed against `node`
//! itself, and `tests/it/js_date.rs` keeps checking the whole module differentially.
//!
//! Cut along V8's own seams: `tokens.rs` (the string as tokens), `es5.rs` (the ISO form, read first), `legacy.rs`
//! (everything else), `compose.rs` (the numbers read, checked and defaulted), `day.rs` (calendar arithmetic); this
//! file is the API, the fast path for the one form pi writes, and `toISOString`.

mod compose;
mod day;
mod es5;
mod legacy;
mod tokens;

use compose::{is_day, is_month};
use day::{civil_from_days, make_date, make_day, make_time, MS_PER_DAY};
use legacy::DateParser;

/// ECMAScript's time range: 100,000,000 days either side of the epoch.
const MAX_TIME_IN_MS: f64 = 8.64e15;

/// V8's `DateCache::kMaxTimeBeforeUTCInMs`: a local time further out than this cannot become a valid
/// UTC time under any offset, so V8 rejects it before asking the time-zone database.
const MAX_TIME_BEFORE_UTC_IN_MS: f64 = MAX_TIME_IN_MS + 30.0 * MS_PER_DAY;

/// Milliseconds since the epoch as `Date.parse(s)` returns them in V8, or NaN.
///
/// This is also `new Date(s).getTime()`. Date-time forms without a time zone are local time, which
/// pi-sessiond takes to be UTC (see `local_offset_ms`).
pub fn parse_date(s: &str) -> f64 {
    parse_iso_utc_fast(s.as_bytes()).unwrap_or_else(|| parse_date_general(s))
}

/// `Date.parse(s)` through V8's full parser.
fn parse_date_general(s: &str) -> f64 {
    // V8 parses the UTF-16 code units of the string; a character outside the BMP is two "characters"
    // to it, which matters for word lengths.
    let units: Vec<u16> = s.encode_utf16().collect();
    let Some(out) = DateParser::parse(&units) else {
        return f64::NAN;
    };
    let day = make_day(f64::from(out.year), f64::from(out.month), f64::from(out.day));
    let time = make_time(f64::from(out.hour), f64::from(out.minute), f64::from(out.second), f64::from(out.millisecond));
    let mut date = make_date(day, time);
    match out.utc_offset_seconds {
        None => {
            if !(-MAX_TIME_BEFORE_UTC_IN_MS..=MAX_TIME_BEFORE_UTC_IN_MS).contains(&date) {
                return f64::NAN;
            }
            date -= local_offset_ms(date);
        }
        Some(offset) => date -= f64::from(offset) * 1000.0,
    }
    time_clip(date)
}

/// The one format pi writes (`Date.prototype.toISOString`: `YYYY-MM-DDTHH:MM:SS.sssZ`), parsed without the
/// general parser: every entry of every session has such a timestamp, so this is a visible part of opening a
/// large file. Components are range-checked as V8's ISO path checks them, and the time is made with the same
/// arithmetic, so the result is the general parser's; anything else returns None and takes the general path.
fn parse_iso_utc_fast(b: &[u8]) -> Option<f64> {
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i32> {
        b[r].iter().try_fold(0i32, |acc, &c| c.is_ascii_digit().then(|| acc * 10 + i32::from(c - b'0')))
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second, milli) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !is_month(month) || !is_day(day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let day = make_day(f64::from(year), f64::from(month - 1), f64::from(day));
    let time = make_time(f64::from(hour), f64::from(minute), f64::from(second), f64::from(milli));
    Some(time_clip(make_date(day, time)))
}

/// `TimeClip` of ECMAScript: NaN if not finite or |t| > 8.64e15, else truncated toward zero (+0 for -0).
pub fn time_clip(t: f64) -> f64 {
    if t.is_nan() || t.abs() > MAX_TIME_IN_MS {
        return f64::NAN;
    }
    // Adding +0 turns -0 (from -0 itself or from truncating -0.5) into +0, as ToIntegerOrInfinity does.
    t.trunc() + 0.0
}

/// `new Date(ms).toISOString()`; None for an invalid time (where JS throws / `toJSON` gives null).
/// Years outside 0..=9999 use the expanded form `+YYYYYY` / `-YYYYYY`.
///
/// `ms` goes through [`time_clip`] first, as the `Date` constructor does, so fractions are truncated.
pub fn to_iso_string(ms: f64) -> Option<String> {
    let t = time_clip(ms);
    if t.is_nan() {
        return None;
    }
    // |t| <= 8.64e15 and integral, so the conversion is exact.
    let t = t as i64;
    let days = t.div_euclid(86_400_000);
    let ms_in_day = t.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let hour = ms_in_day / 3_600_000;
    let minute = ms_in_day / 60_000 % 60;
    let second = ms_in_day / 1000 % 60;
    let milli = ms_in_day % 1000;
    // Written by hand: listings format two dates per session, thousands at a time.
    let mut out = String::with_capacity(27);
    let digits = |out: &mut String, v: i64, width: usize| {
        // v >= 0 here; at most 6 digits.
        let mut buf = [b'0'; 20];
        let (mut n, mut i) = (v, buf.len());
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for _ in buf.len() - i..width {
            out.push('0');
        }
        out.push_str(std::str::from_utf8(&buf[i..]).expect("ASCII digits"));
    };
    if (0..=9999).contains(&year) {
        digits(&mut out, year, 4);
    } else {
        out.push(if year < 0 { '-' } else { '+' });
        digits(&mut out, year.abs(), 6);
    }
    for (sep, v, w) in
        [('-', month, 2), ('-', day, 2), ('T', hour, 2), (':', minute, 2), (':', second, 2), ('.', milli, 3)]
    {
        out.push(sep);
        digits(&mut out, v, w);
    }
    out.push('Z');
    Some(out)
}

/// The offset of local time from UTC, in milliseconds, for a time given in local time.
///
/// pi-sessiond, like the pi processes it serves, runs with `TZ` unset, so local time is UTC and the
/// offset is always 0. This is the single place that assumption lives: ISO date-time strings without
/// an offset and legacy strings without a zone are local time, and go through here.
fn local_offset_ms(_local_ms: f64) -> f64 {
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_iso_fast_path_gives_what_the_general_parser_gives() {
        let mut next = crate::session::draws_below(0x9E37_79B9u32);
        let mut fast = 0;
        for _ in 0..20_000 {
            let s = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                next(10_000),
                next(14),
                next(33),
                next(26),
                next(61),
                next(61),
                next(1000)
            );
            if let Some(t) = parse_iso_utc_fast(s.as_bytes()) {
                fast += 1;
                let g = parse_date_general(&s);
                assert!(t == g || (t.is_nan() && g.is_nan()), "{s}: fast {t}, general {g}");
            }
        }
        assert!(fast > 10_000, "the fast path took {fast} of 20000");
    }

    #[test]
    fn parses_the_canonical_iso_form_as_utc() {
        assert_eq!(parse_date("2025-01-02T03:04:05.678Z"), 1_735_787_045_678.0);
        assert_eq!(parse_date("1970-01-01"), 0.0);
    }

    #[test]
    fn reproduces_v8_legacy_quirks() {
        assert_eq!(parse_date("1/2"), 978_393_600_000.0);
        assert_eq!(parse_date("Jan 2"), 978_393_600_000.0);
        assert_eq!(parse_date("2025\u{0}garbage"), 1_735_689_600_000.0);
        assert!(parse_date("abc").is_nan());
    }

    #[test]
    fn formats_expanded_years() {
        assert_eq!(to_iso_string(8.64e15).as_deref(), Some("+275760-09-13T00:00:00.000Z"));
        assert_eq!(to_iso_string(-8.64e15).as_deref(), Some("-271821-04-20T00:00:00.000Z"));
        assert_eq!(to_iso_string(-1.0).as_deref(), Some("1969-12-31T23:59:59.999Z"));
        assert_eq!(to_iso_string(f64::NAN), None);
    }
}
