//! V8's `DateParser::Parse`: the legacy parser that takes whatever the ES5 form leaves (numbers, month names, zone
//! names, AM/PM, comments, leading garbage words) and composes the broken-down date, as Safari once did and V8
//! still does.

use super::compose::{DayComposer, TimeComposer, TimeZoneComposer, NONE};
use super::es5::parse_es5_date_time;
use super::tokens::{read_milliseconds, DateStringTokenizer, InputReader, KeywordType, Tag};

/// The broken-down result of a successful parse: V8's `out` array.
pub(super) struct ParsedDate {
    pub(super) year: i32,
    /// Zero-based.
    pub(super) month: i32,
    pub(super) day: i32,
    pub(super) hour: i32,
    pub(super) minute: i32,
    pub(super) second: i32,
    pub(super) millisecond: i32,
    /// None when the string named no zone, meaning local time.
    pub(super) utc_offset_seconds: Option<i32>,
}

/// V8's `DateParser` (its static `Parse`; `ParseES5DateTime` is in `es5.rs`).
pub(super) struct DateParser;

impl DateParser {
    /// V8's `DateParser::Parse`: the broken-down date, or None where V8 returns false.
    ///
    /// First the ES5 ISO form is read as far as it goes; whatever it leaves goes to the legacy
    /// parser, which accepts roughly what Safari did: numbers, month names, zone names, AM/PM,
    /// parenthesised comments, and garbage words before the first number.
    pub(super) fn parse(str: &[u16]) -> Option<ParsedDate> {
        let mut scanner = DateStringTokenizer::new(InputReader::new(str));
        let mut tz = TimeZoneComposer::new();
        let mut time = TimeComposer::new();
        let mut day = DayComposer::new();

        let next_unhandled_token = parse_es5_date_time(&mut scanner, &mut day, &mut time, &mut tz);
        if next_unhandled_token.is_invalid() {
            return None;
        }
        let mut has_read_number = !day.is_empty();
        let mut token = next_unhandled_token;
        while !token.is_end_of_input() {
            if token.is_number() {
                has_read_number = true;
                let n = token.value;
                if scanner.skip_symbol(b':') {
                    if scanner.skip_symbol(b':') {
                        // n + "::"
                        if !time.is_empty() {
                            return None;
                        }
                        time.add(n);
                        time.add(0);
                    } else {
                        // n + ":"
                        if !time.add(n) {
                            return None;
                        }
                        if scanner.peek().is_symbol(b'.') {
                            scanner.next();
                        }
                    }
                // The '.' is consumed even when the number turns out not to be a time component.
                } else if scanner.skip_symbol(b'.') && time.is_expecting(n) {
                    time.add(n);
                    if !scanner.peek().is_number() {
                        return None;
                    }
                    let ms = read_milliseconds(scanner.next());
                    if ms < 0 {
                        return None;
                    }
                    time.add_final(ms);
                } else if tz.is_expecting(n) {
                    tz.set_absolute_minute(n);
                } else if time.is_expecting(n) {
                    time.add_final(n);
                    // A finished time must be followed by the end, white space, "Z", '+' or '-'.
                    let peek = scanner.peek();
                    if !peek.is_end_of_input()
                        && !peek.is_white_space()
                        && !peek.is_keyword_z()
                        && !peek.is_ascii_sign()
                    {
                        return None;
                    }
                } else {
                    if !day.add(n) {
                        return None;
                    }
                    scanner.skip_symbol(b'-');
                }
            } else if token.is_keyword() {
                let Tag::Keyword(kind) = token.tag else { unreachable!("is_keyword() checked the tag") };
                let value = token.value;
                if kind == KeywordType::AmPm && !time.is_empty() {
                    time.set_hour_offset(value);
                } else if kind == KeywordType::MonthName {
                    day.set_named_month(value);
                    scanner.skip_symbol(b'-');
                } else if kind == KeywordType::TimeZoneName && has_read_number {
                    tz.set(value);
                } else {
                    // Garbage words are only allowed before the first number, and must be
                    // separated from it.
                    if has_read_number {
                        return None;
                    }
                    if scanner.peek().is_number() {
                        return None;
                    }
                }
            } else if token.is_ascii_sign() && (tz.is_utc() || !time.is_empty()) {
                // A UTC offset, only after a UTC zone name or a time.
                tz.set_sign(token.ascii_sign());
                // The number may be missing.
                let mut n = 0;
                let mut length = 0;
                if scanner.peek().is_number() {
                    let next_token = scanner.next();
                    length = next_token.length;
                    n = next_token.value;
                }
                has_read_number = true;

                if scanner.peek().is_symbol(b':') {
                    tz.set_absolute_hour(n);
                    tz.set_absolute_minute(NONE);
                } else if length == 2 || length == 1 {
                    // Zones like GMT-8.
                    tz.set_absolute_hour(n);
                    tz.set_absolute_minute(0);
                } else if length == 4 || length == 3 {
                    // hhmm
                    tz.set_absolute_hour(n / 100);
                    tz.set_absolute_minute(n % 100);
                } else {
                    return None;
                }
            } else if (token.is_ascii_sign() || token.is_symbol(b')')) && has_read_number {
                // An extra sign or ')' after a number is illegal.
                return None;
            }
            // Anything else (white space, other punctuation, comments) is ignored.
            token = scanner.next();
        }

        let [year, month, day_of_month] = day.write()?;
        let [hour, minute, second, millisecond] = time.write()?;
        let utc_offset_seconds = tz.write().ok()?;
        Some(ParsedDate { year, month, day: day_of_month, hour, minute, second, millisecond, utc_offset_seconds })
    }
}
