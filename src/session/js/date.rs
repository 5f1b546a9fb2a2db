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
//! The parser below is a line-by-line port of V8's `src/date/dateparser.h`, `dateparser-inl.h` and
//! `dateparser.cc`, and of `ParseDateTimeString`, `MakeDay`, `MakeTime` and `MakeDate` in
//! `src/date/date.cc`. Names mirror V8's so the two can be read side by side. The snapshots of that
//! source the port was made from predate two changes that Node 20 (V8 11.3.244) has: white space ends
//! a word, and leading zeros do not count toward a numeral's nine significant digits. Those, the set of
//! white-space characters and the 32-bit Smi limit on time-zone offsets were confirmed against `node`
//! itself, and `tests/js_date.rs` keeps checking the whole module differentially.

/// V8's `kNone`: the marker for a component that has not been read.
const NONE: i32 = i32::MAX;

/// V8's `kMaxSignificantDigits`: digits of a numeral beyond this many are skipped, not accumulated.
const MAX_SIGNIFICANT_DIGITS: i32 = 9;

/// ECMAScript's time range: 100,000,000 days either side of the epoch.
const MAX_TIME_IN_MS: f64 = 8.64e15;

/// V8's `DateCache::kMaxTimeBeforeUTCInMs`: a local time further out than this cannot become a valid
/// UTC time under any offset, so V8 rejects it before asking the time-zone database.
const MAX_TIME_BEFORE_UTC_IN_MS: f64 = MAX_TIME_IN_MS + 30.0 * MS_PER_DAY;

const MS_PER_DAY: f64 = 86_400_000.0;
const MS_PER_HOUR: f64 = 3_600_000.0;
const MS_PER_MINUTE: f64 = 60_000.0;
const MS_PER_SECOND: f64 = 1000.0;

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

/// Year, month (1-12) and day (1-31) of a day number counted from 1970-01-01 in the proleptic
/// Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Shift the epoch to 0000-03-01 so that leap days fall at the end of a 400-year era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// V8's `MakeDay` (date.cc): day number of the given year, zero-based month and day of month.
fn make_day(year: f64, month: f64, date: f64) -> f64 {
    if !((-1_000_000.0..=1_000_000.0).contains(&year)
        && (-10_000_000.0..=10_000_000.0).contains(&month)
        && date.is_finite())
    {
        return f64::NAN;
    }
    // FastD2I truncates; both values are integral here anyway.
    let mut y = year as i64;
    let mut m = month as i64;
    y += m / 12;
    m %= 12;
    if m < 0 {
        m += 12;
        y -= 1;
    }
    // A multiple of 400 minus one, large enough that every year in range stays positive, so the
    // divisions below never round a negative number.
    const YEAR_DELTA: i64 = 399_999;
    let days_before = |y: i64| {
        let y = y + YEAR_DELTA;
        365 * y + y / 4 - y / 100 + y / 400
    };
    let mut day_from_year = days_before(y) - days_before(1970);
    const DAY_FROM_MONTH: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    const DAY_FROM_MONTH_LEAP: [i64; 12] = [0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335];
    // The index is in 0..12 after the normalisation above.
    let m = m as usize;
    if y % 4 != 0 || (y % 100 == 0 && y % 400 != 0) {
        day_from_year += DAY_FROM_MONTH[m];
    } else {
        day_from_year += DAY_FROM_MONTH_LEAP[m];
    }
    (day_from_year - 1) as f64 + date.trunc()
}

/// V8's `MakeTime` (date.cc).
fn make_time(hour: f64, min: f64, sec: f64, ms: f64) -> f64 {
    if hour.is_finite() && min.is_finite() && sec.is_finite() && ms.is_finite() {
        hour.trunc() * MS_PER_HOUR + min.trunc() * MS_PER_MINUTE + sec.trunc() * MS_PER_SECOND + ms.trunc()
    } else {
        f64::NAN
    }
}

/// V8's `MakeDate` (date.cc).
fn make_date(day: f64, time: f64) -> f64 {
    if day.is_finite() && time.is_finite() {
        time + day * MS_PER_DAY
    } else {
        f64::NAN
    }
}

/// V8's `DateParser::Between`: `lo <= x <= hi`, computed the way V8 does (unsigned difference) so
/// that sentinel values compare exactly as they do there.
fn between(x: i32, lo: i32, hi: i32) -> bool {
    (x.wrapping_sub(lo) as u32) <= (hi.wrapping_sub(lo) as u32)
}

fn is_minute(x: i32) -> bool {
    between(x, 0, 59)
}

fn is_hour(x: i32) -> bool {
    between(x, 0, 23)
}

fn is_second(x: i32) -> bool {
    between(x, 0, 59)
}

fn is_hour12(x: i32) -> bool {
    between(x, 0, 12)
}

fn is_millisecond(x: i32) -> bool {
    between(x, 0, 999)
}

fn is_month(x: i32) -> bool {
    between(x, 1, 12)
}

fn is_day(x: i32) -> bool {
    between(x, 1, 31)
}

/// ECMAScript WhiteSpace (V8's `IsWhiteSpace`): TAB, VT, FF, ZWNBSP and the `Zs` category of the
/// Unicode version in Node 20's ICU. U+180E left `Zs` in Unicode 6.3 and is not white space there.
fn is_white_space(c: u32) -> bool {
    matches!(c, 0x09 | 0x0B | 0x0C | 0x20 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x202F | 0x205F | 0x3000 | 0xFEFF)
}

/// V8's `IsWhiteSpaceOrLineTerminator`.
fn is_white_space_or_line_terminator(c: u32) -> bool {
    is_white_space(c) || matches!(c, 0x0A | 0x0D | 0x2028 | 0x2029)
}

/// The broken-down result of a successful parse: V8's `out` array.
struct ParsedDate {
    year: i32,
    /// Zero-based.
    month: i32,
    day: i32,
    hour: i32,
    minute: i32,
    second: i32,
    millisecond: i32,
    /// None when the string named no zone, meaning local time.
    utc_offset_seconds: Option<i32>,
}

/// V8's `DateParser::InputReader`: a cursor over UTF-16 code units.
struct InputReader<'a> {
    buffer: &'a [u16],
    /// One past the current character, as in V8; only differences of positions are used.
    index: usize,
    /// The current character; 0 at the end, and, as in V8, also for a NUL inside the string, which
    /// therefore ends the input.
    ch: u32,
}

impl<'a> InputReader<'a> {
    fn new(buffer: &'a [u16]) -> Self {
        let mut reader = InputReader { buffer, index: 0, ch: 0 };
        reader.next();
        reader
    }

    fn position(&self) -> usize {
        self.index
    }

    fn next(&mut self) {
        self.ch = self.buffer.get(self.index).map_or(0, |&c| u32::from(c));
        self.index += 1;
    }

    /// Leading zeros are skipped before counting significant digits, so `"0000000000015"` is 15
    /// rather than 0; the returned token length still counts them.
    fn read_unsigned_numeral(&mut self) -> i32 {
        let mut n: i32 = 0;
        let mut i = 0;
        while self.ch == u32::from(b'0') {
            self.next();
        }
        while self.is_ascii_digit() {
            if i < MAX_SIGNIFICANT_DIGITS {
                n = n * 10 + (self.ch - u32::from(b'0')) as i32;
            }
            i += 1;
            self.next();
        }
        n
    }

    /// Reads a word (characters from 'A' up that are not white space) and returns its length,
    /// leaving its first three characters, lower-cased V8's way (`| 0x20`), in `prefix`.
    fn read_word(&mut self, prefix: &mut [u32; KEYWORD_PREFIX_LENGTH]) -> usize {
        let mut len = 0;
        while self.is_ascii_alpha_or_above() && !self.is_white_space_char() {
            if len < KEYWORD_PREFIX_LENGTH {
                prefix[len] = self.ch | 0x20;
            }
            self.next();
            len += 1;
        }
        for slot in prefix.iter_mut().skip(len) {
            *slot = 0;
        }
        len
    }

    fn skip(&mut self, c: u8) -> bool {
        if self.ch == u32::from(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn skip_white_space(&mut self) -> bool {
        if is_white_space_or_line_terminator(self.ch) {
            self.next();
            true
        } else {
            false
        }
    }

    /// Skips a parenthesised comment, nested or unterminated.
    fn skip_parentheses(&mut self) -> bool {
        if self.ch != u32::from(b'(') {
            return false;
        }
        let mut balance = 0;
        loop {
            if self.ch == u32::from(b')') {
                balance -= 1;
            } else if self.ch == u32::from(b'(') {
                balance += 1;
            }
            self.next();
            if !(balance > 0 && self.ch != 0) {
                break;
            }
        }
        true
    }

    fn is_end(&self) -> bool {
        self.ch == 0
    }

    fn is_ascii_digit(&self) -> bool {
        (u32::from(b'0')..=u32::from(b'9')).contains(&self.ch)
    }

    fn is_ascii_alpha_or_above(&self) -> bool {
        self.ch >= u32::from(b'A')
    }

    fn is_white_space_char(&self) -> bool {
        is_white_space(self.ch)
    }
}

/// V8's `DateParser::KeywordType`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KeywordType {
    Invalid,
    MonthName,
    TimeZoneName,
    TimeSeparator,
    AmPm,
}

/// The tag of a [`DateToken`]. Every word is a keyword, including unknown ones
/// (`Keyword(KeywordType::Invalid)`), which is why garbage words take the keyword path in `parse`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tag {
    Invalid,
    Unknown,
    WhiteSpace,
    Number,
    Symbol,
    EndOfInput,
    Keyword(KeywordType),
}

/// V8's `DateParser::DateToken`.
#[derive(Clone, Copy, Debug)]
struct DateToken {
    tag: Tag,
    /// Number of characters.
    length: usize,
    value: i32,
}

impl DateToken {
    fn keyword(kind: KeywordType, value: i32, length: usize) -> Self {
        DateToken { tag: Tag::Keyword(kind), length, value }
    }

    fn number(value: i32, length: usize) -> Self {
        DateToken { tag: Tag::Number, length, value }
    }

    fn symbol(symbol: u8) -> Self {
        DateToken { tag: Tag::Symbol, length: 1, value: i32::from(symbol) }
    }

    fn end_of_input() -> Self {
        DateToken { tag: Tag::EndOfInput, length: 0, value: -1 }
    }

    fn white_space(length: usize) -> Self {
        DateToken { tag: Tag::WhiteSpace, length, value: -1 }
    }

    fn unknown() -> Self {
        DateToken { tag: Tag::Unknown, length: 1, value: -1 }
    }

    fn invalid() -> Self {
        DateToken { tag: Tag::Invalid, length: 0, value: -1 }
    }

    fn is_invalid(&self) -> bool {
        self.tag == Tag::Invalid
    }

    fn is_number(&self) -> bool {
        self.tag == Tag::Number
    }

    fn is_white_space(&self) -> bool {
        self.tag == Tag::WhiteSpace
    }

    fn is_end_of_input(&self) -> bool {
        self.tag == Tag::EndOfInput
    }

    fn is_keyword(&self) -> bool {
        matches!(self.tag, Tag::Keyword(_))
    }

    fn is_symbol(&self, symbol: u8) -> bool {
        self.tag == Tag::Symbol && self.value == i32::from(symbol)
    }

    fn is_keyword_type(&self, kind: KeywordType) -> bool {
        self.tag == Tag::Keyword(kind)
    }

    fn is_fixed_length_number(&self, length: usize) -> bool {
        self.is_number() && self.length == length
    }

    fn is_ascii_sign(&self) -> bool {
        self.is_symbol(b'-') || self.is_symbol(b'+')
    }

    /// 1 for '+', -1 for '-' (V8 computes `44 - c`).
    fn ascii_sign(&self) -> i32 {
        44 - self.value
    }

    /// Only a lone "z" (any case) is the UTC designator of the ISO form.
    fn is_keyword_z(&self) -> bool {
        self.is_keyword_type(KeywordType::TimeZoneName) && self.length == 1 && self.value == 0
    }
}

/// V8's `DateParser::DateStringTokenizer`: one token of look-ahead over an [`InputReader`].
struct DateStringTokenizer<'a> {
    input: InputReader<'a>,
    next: DateToken,
}

impl<'a> DateStringTokenizer<'a> {
    fn new(input: InputReader<'a>) -> Self {
        let mut tokenizer = DateStringTokenizer { input, next: DateToken::end_of_input() };
        tokenizer.next = tokenizer.scan();
        tokenizer
    }

    fn next(&mut self) -> DateToken {
        let result = self.next;
        self.next = self.scan();
        result
    }

    fn peek(&self) -> DateToken {
        self.next
    }

    fn skip_symbol(&mut self, symbol: u8) -> bool {
        if self.next.is_symbol(symbol) {
            self.next = self.scan();
            true
        } else {
            false
        }
    }

    fn scan(&mut self) -> DateToken {
        let pre_pos = self.input.position();
        if self.input.is_end() {
            return DateToken::end_of_input();
        }
        if self.input.is_ascii_digit() {
            let n = self.input.read_unsigned_numeral();
            let length = self.input.position() - pre_pos;
            return DateToken::number(n, length);
        }
        for symbol in [b':', b'-', b'+', b'.', b')'] {
            if self.input.skip(symbol) {
                return DateToken::symbol(symbol);
            }
        }
        if self.input.is_ascii_alpha_or_above() && !self.input.is_white_space_char() {
            let mut buffer = [0u32; KEYWORD_PREFIX_LENGTH];
            let length = self.input.read_word(&mut buffer);
            let (kind, value) = keyword_lookup(&buffer, length);
            return DateToken::keyword(kind, value, length);
        }
        if self.input.skip_white_space() {
            return DateToken::white_space(self.input.position() - pre_pos);
        }
        if self.input.skip_parentheses() {
            return DateToken::unknown();
        }
        self.input.next();
        DateToken::unknown()
    }
}

/// V8's `KeywordTable::kPrefixLength`: words are recognised by their first three characters.
const KEYWORD_PREFIX_LENGTH: usize = 3;

/// V8's `KeywordTable::array`, in V8's order (the first match wins). A zero pads a shorter keyword.
/// Time-zone values are hours east of UTC.
const KEYWORDS: [([u8; KEYWORD_PREFIX_LENGTH], KeywordType, i32); 27] = [
    (*b"jan", KeywordType::MonthName, 1),
    (*b"feb", KeywordType::MonthName, 2),
    (*b"mar", KeywordType::MonthName, 3),
    (*b"apr", KeywordType::MonthName, 4),
    (*b"may", KeywordType::MonthName, 5),
    (*b"jun", KeywordType::MonthName, 6),
    (*b"jul", KeywordType::MonthName, 7),
    (*b"aug", KeywordType::MonthName, 8),
    (*b"sep", KeywordType::MonthName, 9),
    (*b"oct", KeywordType::MonthName, 10),
    (*b"nov", KeywordType::MonthName, 11),
    (*b"dec", KeywordType::MonthName, 12),
    (*b"am\0", KeywordType::AmPm, 0),
    (*b"pm\0", KeywordType::AmPm, 12),
    (*b"ut\0", KeywordType::TimeZoneName, 0),
    (*b"utc", KeywordType::TimeZoneName, 0),
    (*b"z\0\0", KeywordType::TimeZoneName, 0),
    (*b"gmt", KeywordType::TimeZoneName, 0),
    (*b"cdt", KeywordType::TimeZoneName, -5),
    (*b"cst", KeywordType::TimeZoneName, -6),
    (*b"edt", KeywordType::TimeZoneName, -4),
    (*b"est", KeywordType::TimeZoneName, -5),
    (*b"mdt", KeywordType::TimeZoneName, -6),
    (*b"mst", KeywordType::TimeZoneName, -7),
    (*b"pdt", KeywordType::TimeZoneName, -7),
    (*b"pst", KeywordType::TimeZoneName, -8),
    (*b"t\0\0", KeywordType::TimeSeparator, 0),
];

/// V8's `KeywordTable::Lookup`. A word longer than three characters only matches a month name, so
/// "January" and "Marchxyz" are months while "UTCX" and "Tue" are unknown words.
fn keyword_lookup(prefix: &[u32; KEYWORD_PREFIX_LENGTH], len: usize) -> (KeywordType, i32) {
    for (name, kind, value) in KEYWORDS {
        let matches = prefix.iter().zip(name).all(|(&p, n)| p == u32::from(n));
        if matches && (len <= KEYWORD_PREFIX_LENGTH || kind == KeywordType::MonthName) {
            return (kind, value);
        }
    }
    (KeywordType::Invalid, 0)
}

/// V8's `DateParser::ReadMilliseconds`: the first three significant digits of a fraction, inferred
/// from its value and digit count. Because the value skips leading zeros but the count does not, a
/// fraction with more than nine digits can come out wrong (".0001234567891" gives 123); V8 does
/// exactly that, so this does too.
fn read_milliseconds(token: DateToken) -> i32 {
    let mut number = token.value;
    let mut length = token.length;
    if length < 3 {
        if length == 1 {
            number *= 100;
        } else if length == 2 {
            number *= 10;
        }
    } else if length > 3 {
        length = length.min(MAX_SIGNIFICANT_DIGITS as usize);
        let mut factor = 1;
        loop {
            factor *= 10;
            length -= 1;
            if length <= 3 {
                break;
            }
        }
        number /= factor;
    }
    number
}

/// V8's `DateParser::TimeZoneComposer`.
struct TimeZoneComposer {
    sign: i32,
    hour: i32,
    minute: i32,
}

impl TimeZoneComposer {
    fn new() -> Self {
        TimeZoneComposer { sign: NONE, hour: NONE, minute: NONE }
    }

    fn set(&mut self, offset_in_hours: i32) {
        self.sign = if offset_in_hours < 0 { -1 } else { 1 };
        self.hour = offset_in_hours * self.sign;
        self.minute = 0;
    }

    fn set_sign(&mut self, sign: i32) {
        self.sign = if sign < 0 { -1 } else { 1 };
    }

    fn set_absolute_hour(&mut self, hour: i32) {
        self.hour = hour;
    }

    fn set_absolute_minute(&mut self, minute: i32) {
        self.minute = minute;
    }

    fn is_expecting(&self, n: i32) -> bool {
        self.hour != NONE && self.minute == NONE && is_minute(n)
    }

    fn is_utc(&self) -> bool {
        self.hour == 0 && self.minute == 0
    }

    fn is_empty(&self) -> bool {
        self.hour == NONE
    }

    /// The offset in seconds (None for local time), or Err when it does not fit.
    fn write(&mut self) -> Result<Option<i32>, ()> {
        if self.sign == NONE {
            return Ok(None);
        }
        if self.hour == NONE {
            self.hour = 0;
        }
        if self.minute == NONE {
            self.minute = 0;
        }
        // V8 computes in 32-bit unsigned arithmetic, which wraps for absurd hours such as
        // "+1193047:", and then rejects anything above Smi::kMaxValue. Node 20 on 64-bit hosts has
        // no pointer compression, so Smis are 32-bit and the limit is i32::MAX.
        let total = (self.hour as u32).wrapping_mul(3600).wrapping_add((self.minute as u32).wrapping_mul(60));
        if total > i32::MAX as u32 {
            return Err(());
        }
        let total = total as i32;
        Ok(Some(if self.sign < 0 { -total } else { total }))
    }
}

/// V8's `DateParser::TimeComposer`: hour, minute, second, millisecond in the order read.
struct TimeComposer {
    comp: [i32; 4],
    index: usize,
    hour_offset: i32,
}

impl TimeComposer {
    fn new() -> Self {
        TimeComposer { comp: [0; 4], index: 0, hour_offset: NONE }
    }

    fn is_empty(&self) -> bool {
        self.index == 0
    }

    fn is_expecting(&self, n: i32) -> bool {
        (self.index == 1 && is_minute(n)) || (self.index == 2 && is_second(n)) || (self.index == 3 && is_millisecond(n))
    }

    fn add(&mut self, n: i32) -> bool {
        if self.index < self.comp.len() {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }

    fn add_final(&mut self, n: i32) -> bool {
        if !self.add(n) {
            return false;
        }
        while self.index < self.comp.len() {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        true
    }

    fn set_hour_offset(&mut self, n: i32) {
        self.hour_offset = n;
    }

    /// Hour, minute, second and millisecond, or None when out of range.
    fn write(&mut self) -> Option<[i32; 4]> {
        while self.index < self.comp.len() {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        let [mut hour, minute, second, millisecond] = self.comp;
        if self.hour_offset != NONE {
            if !is_hour12(hour) {
                return None;
            }
            hour %= 12;
            hour += self.hour_offset;
        }
        if !is_hour(hour) || !is_minute(minute) || !is_second(second) || !is_millisecond(millisecond) {
            // 24:00:00.000 is the end of the day, and the only valid time with hour 24.
            if hour != 24 || minute != 0 || second != 0 || millisecond != 0 {
                return None;
            }
        }
        Some([hour, minute, second, millisecond])
    }
}

/// V8's `DateParser::DayComposer`: up to three numbers plus an optional month name.
struct DayComposer {
    comp: [i32; 3],
    index: usize,
    named_month: i32,
    /// Set when the ISO path succeeded: the numbers are then year, month, day in that order.
    is_iso_date: bool,
}

impl DayComposer {
    fn new() -> Self {
        DayComposer { comp: [0; 3], index: 0, named_month: NONE, is_iso_date: false }
    }

    fn is_empty(&self) -> bool {
        self.index == 0
    }

    fn add(&mut self, n: i32) -> bool {
        if self.index < self.comp.len() {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }

    fn set_named_month(&mut self, n: i32) {
        self.named_month = n;
    }

    fn set_iso_date(&mut self) {
        self.is_iso_date = true;
    }

    /// Year, zero-based month and day, or None when there is no date or it is out of range.
    fn write(&mut self) -> Option<[i32; 3]> {
        if self.index < 1 {
            return None;
        }
        // Missing components default to 1. V8 pads before it looks at how many were read, so its
        // later `index_ == 3` tests are always true: "1/2" gets year 1 (2001), and "Jan 2" is
        // read as day 2 of year 1, not as a month-day pair.
        while self.index < self.comp.len() {
            self.comp[self.index] = 1;
            self.index += 1;
        }
        let year;
        let month;
        let day;
        if self.named_month == NONE {
            if self.is_iso_date || !is_day(self.comp[0]) {
                // YMD
                year = self.comp[0];
                month = self.comp[1];
                day = self.comp[2];
            } else {
                // MDY
                month = self.comp[0];
                day = self.comp[1];
                year = self.comp[2];
            }
        } else {
            month = self.named_month;
            if !is_day(self.comp[0]) {
                // YMD, MYD, or YDM
                year = self.comp[0];
                day = self.comp[1];
            } else {
                // DMY, MDY, or DYM
                day = self.comp[0];
                year = self.comp[1];
            }
        }
        let mut year = year;
        if !self.is_iso_date {
            if between(year, 0, 49) {
                year += 2000;
            } else if between(year, 50, 99) {
                year += 1900;
            }
        }
        // V8 also requires a Smi year; numerals stop at nine digits, so every year read is one.
        if !is_month(month) || !is_day(day) {
            return None;
        }
        Some([year, month - 1, day])
    }
}

/// V8's `DateParser` (the static `Parse` and `ParseES5DateTime`).
struct DateParser;

impl DateParser {
    /// V8's `DateParser::Parse`: the broken-down date, or None where V8 returns false.
    ///
    /// First the ES5 ISO form is read as far as it goes; whatever it leaves goes to the legacy
    /// parser, which accepts roughly what Safari did: numbers, month names, zone names, AM/PM,
    /// parenthesised comments, and garbage words before the first number.
    fn parse(str: &[u16]) -> Option<ParsedDate> {
        let mut scanner = DateStringTokenizer::new(InputReader::new(str));
        let mut tz = TimeZoneComposer::new();
        let mut time = TimeComposer::new();
        let mut day = DayComposer::new();

        let next_unhandled_token = Self::parse_es5_date_time(&mut scanner, &mut day, &mut time, &mut tz);
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

    /// V8's `DateParser::ParseES5DateTime`:
    /// `[('-'|'+')yy]yyyy[-MM[-DD]][THH:mm[:ss[.sss]][Z|(+|-)hh:mm]]`, with any number of fraction
    /// digits and `hhmm` offsets.
    ///
    /// Returns the end-of-input token when the whole string was an ISO date, an invalid token when
    /// the string cannot be a date at all (a malformed time after 'T'), or else the next token for
    /// the legacy parser, which continues with whatever was read so far.
    fn parse_es5_date_time(
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_iso_fast_path_gives_what_the_general_parser_gives() {
        let mut seed = 0x9E37_79B9u32;
        let mut next = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed % n
        };
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
