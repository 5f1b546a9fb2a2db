//! V8's date tokenizer (`DateParser::InputReader`, `DateToken`, `DateStringTokenizer`, `KeywordTable`): the
//! string as V8 cuts it into numbers, words, symbols and white space, with V8's own idea of white space and of
//! which words are month names, zones and AM/PM. Both the ES5 parser and the legacy parser read through it.

/// V8's `kMaxSignificantDigits`: digits of a numeral beyond this many are skipped, not accumulated.
pub(super) const MAX_SIGNIFICANT_DIGITS: i32 = 9;

/// ECMAScript WhiteSpace (V8's `IsWhiteSpace`): TAB, VT, FF, ZWNBSP and the `Zs` category of the
/// Unicode version in Node 20's ICU. U+180E left `Zs` in Unicode 6.3 and is not white space there.
pub(super) fn is_white_space(c: u32) -> bool {
    matches!(c, 0x09 | 0x0B | 0x0C | 0x20 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x202F | 0x205F | 0x3000 | 0xFEFF)
}

/// V8's `IsWhiteSpaceOrLineTerminator`.
pub(super) fn is_white_space_or_line_terminator(c: u32) -> bool {
    is_white_space(c) || matches!(c, 0x0A | 0x0D | 0x2028 | 0x2029)
}

/// V8's `DateParser::InputReader`: a cursor over UTF-16 code units.
pub(super) struct InputReader<'a> {
    buffer: &'a [u16],
    /// One past the current character, as in V8; only differences of positions are used.
    index: usize,
    /// The current character; 0 at the end, and, as in V8, also for a NUL inside the string, which
    /// therefore ends the input.
    ch: u32,
}

impl<'a> InputReader<'a> {
    pub(super) fn new(buffer: &'a [u16]) -> Self {
        let mut reader = InputReader { buffer, index: 0, ch: 0 };
        reader.next();
        reader
    }

    pub(super) fn position(&self) -> usize {
        self.index
    }

    pub(super) fn next(&mut self) {
        self.ch = self.buffer.get(self.index).map_or(0, |&c| u32::from(c));
        self.index += 1;
    }

    /// Leading zeros are skipped before counting significant digits, so `"0000000000015"` is 15
    /// rather than 0; the returned token length still counts them.
    pub(super) fn read_unsigned_numeral(&mut self) -> i32 {
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
    pub(super) fn read_word(&mut self, prefix: &mut [u32; KEYWORD_PREFIX_LENGTH]) -> usize {
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

    pub(super) fn skip(&mut self, c: u8) -> bool {
        if self.ch == u32::from(c) {
            self.next();
            true
        } else {
            false
        }
    }

    pub(super) fn skip_white_space(&mut self) -> bool {
        if is_white_space_or_line_terminator(self.ch) {
            self.next();
            true
        } else {
            false
        }
    }

    /// Skips a parenthesised comment, nested or unterminated.
    pub(super) fn skip_parentheses(&mut self) -> bool {
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

    pub(super) fn is_end(&self) -> bool {
        self.ch == 0
    }

    pub(super) fn is_ascii_digit(&self) -> bool {
        (u32::from(b'0')..=u32::from(b'9')).contains(&self.ch)
    }

    pub(super) fn is_ascii_alpha_or_above(&self) -> bool {
        self.ch >= u32::from(b'A')
    }

    pub(super) fn is_white_space_char(&self) -> bool {
        is_white_space(self.ch)
    }
}

/// V8's `DateParser::KeywordType`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum KeywordType {
    Invalid,
    MonthName,
    TimeZoneName,
    TimeSeparator,
    AmPm,
}

/// The tag of a [`DateToken`]. Every word is a keyword, including unknown ones
/// (`Keyword(KeywordType::Invalid)`), which is why garbage words take the keyword path in `parse`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Tag {
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
pub(super) struct DateToken {
    pub(super) tag: Tag,
    /// Number of characters.
    pub(super) length: usize,
    pub(super) value: i32,
}

impl DateToken {
    pub(super) fn keyword(kind: KeywordType, value: i32, length: usize) -> Self {
        DateToken { tag: Tag::Keyword(kind), length, value }
    }

    pub(super) fn number(value: i32, length: usize) -> Self {
        DateToken { tag: Tag::Number, length, value }
    }

    pub(super) fn symbol(symbol: u8) -> Self {
        DateToken { tag: Tag::Symbol, length: 1, value: i32::from(symbol) }
    }

    pub(super) fn end_of_input() -> Self {
        DateToken { tag: Tag::EndOfInput, length: 0, value: -1 }
    }

    pub(super) fn white_space(length: usize) -> Self {
        DateToken { tag: Tag::WhiteSpace, length, value: -1 }
    }

    pub(super) fn unknown() -> Self {
        DateToken { tag: Tag::Unknown, length: 1, value: -1 }
    }

    pub(super) fn invalid() -> Self {
        DateToken { tag: Tag::Invalid, length: 0, value: -1 }
    }

    pub(super) fn is_invalid(&self) -> bool {
        self.tag == Tag::Invalid
    }

    pub(super) fn is_number(&self) -> bool {
        self.tag == Tag::Number
    }

    pub(super) fn is_white_space(&self) -> bool {
        self.tag == Tag::WhiteSpace
    }

    pub(super) fn is_end_of_input(&self) -> bool {
        self.tag == Tag::EndOfInput
    }

    pub(super) fn is_keyword(&self) -> bool {
        matches!(self.tag, Tag::Keyword(_))
    }

    pub(super) fn is_symbol(&self, symbol: u8) -> bool {
        self.tag == Tag::Symbol && self.value == i32::from(symbol)
    }

    pub(super) fn is_keyword_type(&self, kind: KeywordType) -> bool {
        self.tag == Tag::Keyword(kind)
    }

    pub(super) fn is_fixed_length_number(&self, length: usize) -> bool {
        self.is_number() && self.length == length
    }

    pub(super) fn is_ascii_sign(&self) -> bool {
        self.is_symbol(b'-') || self.is_symbol(b'+')
    }

    /// 1 for '+', -1 for '-' (V8 computes `44 - c`).
    pub(super) fn ascii_sign(&self) -> i32 {
        44 - self.value
    }

    /// Only a lone "z" (any case) is the UTC designator of the ISO form.
    pub(super) fn is_keyword_z(&self) -> bool {
        self.is_keyword_type(KeywordType::TimeZoneName) && self.length == 1 && self.value == 0
    }
}

/// V8's `DateParser::DateStringTokenizer`: one token of look-ahead over an [`InputReader`].
pub(super) struct DateStringTokenizer<'a> {
    input: InputReader<'a>,
    next: DateToken,
}

impl<'a> DateStringTokenizer<'a> {
    pub(super) fn new(input: InputReader<'a>) -> Self {
        let mut tokenizer = DateStringTokenizer { input, next: DateToken::end_of_input() };
        tokenizer.next = tokenizer.scan();
        tokenizer
    }

    pub(super) fn next(&mut self) -> DateToken {
        let result = self.next;
        self.next = self.scan();
        result
    }

    pub(super) fn peek(&self) -> DateToken {
        self.next
    }

    pub(super) fn skip_symbol(&mut self, symbol: u8) -> bool {
        if self.next.is_symbol(symbol) {
            self.next = self.scan();
            true
        } else {
            false
        }
    }

    pub(super) fn scan(&mut self) -> DateToken {
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
pub(super) const KEYWORD_PREFIX_LENGTH: usize = 3;

/// V8's `KeywordTable::array`, in V8's order (the first match wins). A zero pads a shorter keyword.
/// Time-zone values are hours east of UTC.
pub(super) const KEYWORDS: [([u8; KEYWORD_PREFIX_LENGTH], KeywordType, i32); 27] = [
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
pub(super) fn keyword_lookup(prefix: &[u32; KEYWORD_PREFIX_LENGTH], len: usize) -> (KeywordType, i32) {
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
pub(super) fn read_milliseconds(token: DateToken) -> i32 {
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
