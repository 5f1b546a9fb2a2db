//! V8's `DateParser::ParseES5DateTime`: the ECMAScript Date Time String Format, read first; whatever it does not
//! take is handed to the legacy parser (`legacy.rs`) with what it has read so far.

use super::compose::{
    between, is_day, is_hour, is_minute, is_month, is_second, DayComposer, TimeComposer, TimeZoneComposer,
};
use super::tokens::{read_milliseconds, DateStringTokenizer, DateToken, KeywordType};

/// V8's `DateParser::ParseES5DateTime`:
/// `[('-'|'+')yy]yyyy[-MM[-DD]][THH:mm[:ss[.sss]][Z|(+|-)hh:mm]]`, with any number of fraction
/// digits and `hhmm` offsets.
///
/// Returns the end-of-input token when the whole string was an ISO date, an invalid token when
/// the string cannot be a date at all (a malformed time after 'T'), or else the next token for
/// the legacy parser, which continues with whatever was read so far.
pub(super) fn parse_es5_date_time(
    scanner: &mut DateStringTokenizer<'_>,
    day: &mut DayComposer,
    time: &mut TimeComposer,
    tz: &mut TimeZoneComposer,
) -> DateToken {
    // Mandatory year.
    if scanner.peek().is_ascii_sign() {
        // The sign goes back to the legacy parser if no expanded year follows it.
        let sign_token = scanner.next();
        if !scanner.peek().is_fixed_length_number(6) {
            return sign_token;
        }
        let sign = sign_token.ascii_sign();
        let year = scanner.next().value;
        // -000000 is invalid; its number has been consumed, and V8 drops it.
        if sign < 0 && year == 0 {
            return sign_token;
        }
        day.add(sign * year);
    } else if scanner.peek().is_fixed_length_number(4) {
        day.add(scanner.next().value);
    } else {
        return scanner.next();
    }
    if scanner.skip_symbol(b'-') {
        if !scanner.peek().is_fixed_length_number(2) || !is_month(scanner.peek().value) {
            return scanner.next();
        }
        day.add(scanner.next().value);
        if scanner.skip_symbol(b'-') {
            if !scanner.peek().is_fixed_length_number(2) || !is_day(scanner.peek().value) {
                return scanner.next();
            }
            day.add(scanner.next().value);
        }
    }
    // Optional time.
    if !scanner.peek().is_keyword_type(KeywordType::TimeSeparator) {
        if !scanner.peek().is_end_of_input() {
            return scanner.next();
        }
    } else {
        scanner.next();
        if !scanner.peek().is_fixed_length_number(2) || !between(scanner.peek().value, 0, 24) {
            return DateToken::invalid();
        }
        // 24:00[:00[.000]] is allowed, no other time in hour 24.
        let hour_is_24 = scanner.peek().value == 24;
        time.add(scanner.next().value);
        if !scanner.skip_symbol(b':') {
            return DateToken::invalid();
        }
        if !scanner.peek().is_fixed_length_number(2)
            || !is_minute(scanner.peek().value)
            || (hour_is_24 && scanner.peek().value > 0)
        {
            return DateToken::invalid();
        }
        time.add(scanner.next().value);
        if scanner.skip_symbol(b':') {
            if !scanner.peek().is_fixed_length_number(2)
                || !is_second(scanner.peek().value)
                || (hour_is_24 && scanner.peek().value > 0)
            {
                return DateToken::invalid();
            }
            time.add(scanner.next().value);
            if scanner.skip_symbol(b'.') {
                if !scanner.peek().is_number() || (hour_is_24 && scanner.peek().value > 0) {
                    return DateToken::invalid();
                }
                time.add(read_milliseconds(scanner.next()));
            }
        }
        // Optional zone: 'Z' | ('+'|'-')hh':'mm | ('+'|'-')hhmm
        if scanner.peek().is_keyword_z() {
            scanner.next();
            tz.set(0);
        } else if scanner.peek().is_ascii_sign() {
            tz.set_sign(scanner.next().ascii_sign());
            if scanner.peek().is_fixed_length_number(4) {
                let hourmin = scanner.next().value;
                let hour = hourmin / 100;
                let min = hourmin % 100;
                if !is_hour(hour) || !is_minute(min) {
                    return DateToken::invalid();
                }
                tz.set_absolute_hour(hour);
                tz.set_absolute_minute(min);
            } else {
                if !scanner.peek().is_fixed_length_number(2) || !is_hour(scanner.peek().value) {
                    return DateToken::invalid();
                }
                tz.set_absolute_hour(scanner.next().value);
                if !scanner.skip_symbol(b':') {
                    return DateToken::invalid();
                }
                if !scanner.peek().is_fixed_length_number(2) || !is_minute(scanner.peek().value) {
                    return DateToken::invalid();
                }
                tz.set_absolute_minute(scanner.next().value);
            }
        }
        if !scanner.peek().is_end_of_input() {
            return DateToken::invalid();
        }
    }
    // ES#sec-date-time-string-format: without an offset, date-only forms are UTC and
    // date-time forms are local time.
    if tz.is_empty() && time.is_empty() {
        tz.set(0);
    }
    day.set_iso_date();
    DateToken::end_of_input()
}
