//! V8's `DateParser` composers (`DayComposer`, `TimeComposer`, `TimeZoneComposer`) and its range checks: where
//! the numbers both parsers read are collected, defaulted and checked, so the ISO form and the legacy forms end in
//! one set of rules for what a valid date is.

/// V8's `kNone`: the marker for a component that has not been read.
pub(super) const NONE: i32 = i32::MAX;

/// V8's `DateParser::Between`: `lo <= x <= hi`, computed the way V8 does (unsigned difference) so
/// that sentinel values compare exactly as they do there.
pub(super) fn between(x: i32, lo: i32, hi: i32) -> bool {
    (x.wrapping_sub(lo) as u32) <= (hi.wrapping_sub(lo) as u32)
}

pub(super) fn is_minute(x: i32) -> bool {
    between(x, 0, 59)
}

pub(super) fn is_hour(x: i32) -> bool {
    between(x, 0, 23)
}

pub(super) fn is_second(x: i32) -> bool {
    between(x, 0, 59)
}

pub(super) fn is_hour12(x: i32) -> bool {
    between(x, 0, 12)
}

pub(super) fn is_millisecond(x: i32) -> bool {
    between(x, 0, 999)
}

pub(super) fn is_month(x: i32) -> bool {
    between(x, 1, 12)
}

pub(super) fn is_day(x: i32) -> bool {
    between(x, 1, 31)
}

/// V8's `DateParser::TimeZoneComposer`.
pub(super) struct TimeZoneComposer {
    sign: i32,
    hour: i32,
    minute: i32,
}

impl TimeZoneComposer {
    pub(super) fn new() -> Self {
        TimeZoneComposer { sign: NONE, hour: NONE, minute: NONE }
    }

    pub(super) fn set(&mut self, offset_in_hours: i32) {
        self.sign = if offset_in_hours < 0 { -1 } else { 1 };
        self.hour = offset_in_hours * self.sign;
        self.minute = 0;
    }

    pub(super) fn set_sign(&mut self, sign: i32) {
        self.sign = if sign < 0 { -1 } else { 1 };
    }

    pub(super) fn set_absolute_hour(&mut self, hour: i32) {
        self.hour = hour;
    }

    pub(super) fn set_absolute_minute(&mut self, minute: i32) {
        self.minute = minute;
    }

    pub(super) fn is_expecting(&self, n: i32) -> bool {
        self.hour != NONE && self.minute == NONE && is_minute(n)
    }

    pub(super) fn is_utc(&self) -> bool {
        self.hour == 0 && self.minute == 0
    }

    pub(super) fn is_empty(&self) -> bool {
        self.hour == NONE
    }

    /// The offset in seconds (None for local time), or Err when it does not fit.
    pub(super) fn write(&mut self) -> Result<Option<i32>, ()> {
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
pub(super) struct TimeComposer {
    comp: [i32; 4],
    index: usize,
    hour_offset: i32,
}

impl TimeComposer {
    pub(super) fn new() -> Self {
        TimeComposer { comp: [0; 4], index: 0, hour_offset: NONE }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index == 0
    }

    pub(super) fn is_expecting(&self, n: i32) -> bool {
        (self.index == 1 && is_minute(n)) || (self.index == 2 && is_second(n)) || (self.index == 3 && is_millisecond(n))
    }

    pub(super) fn add(&mut self, n: i32) -> bool {
        if self.index < self.comp.len() {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn add_final(&mut self, n: i32) -> bool {
        if !self.add(n) {
            return false;
        }
        while self.index < self.comp.len() {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        true
    }

    pub(super) fn set_hour_offset(&mut self, n: i32) {
        self.hour_offset = n;
    }

    /// Hour, minute, second and millisecond, or None when out of range.
    pub(super) fn write(&mut self) -> Option<[i32; 4]> {
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
pub(super) struct DayComposer {
    comp: [i32; 3],
    index: usize,
    named_month: i32,
    /// Set when the ISO path succeeded: the numbers are then year, month, day in that order.
    is_iso_date: bool,
}

impl DayComposer {
    pub(super) fn new() -> Self {
        DayComposer { comp: [0; 3], index: 0, named_month: NONE, is_iso_date: false }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index == 0
    }

    pub(super) fn add(&mut self, n: i32) -> bool {
        if self.index < self.comp.len() {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn set_named_month(&mut self, n: i32) {
        self.named_month = n;
    }

    pub(super) fn set_iso_date(&mut self) {
        self.is_iso_date = true;
    }

    /// Year, zero-based month and day, or None when there is no date or it is out of range.
    pub(super) fn write(&mut self) -> Option<[i32; 3]> {
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
