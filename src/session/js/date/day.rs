//! The calendar arithmetic of V8's `date.cc` (`MakeDay`, `MakeTime`, `MakeDate`) and its inverse for
//! `toISOString`: kept apart from the parser because both the parser and the fast ISO path build times with it,
//! and it must be the same arithmetic for both to give the same milliseconds.

pub(super) const MS_PER_DAY: f64 = 86_400_000.0;
pub(super) const MS_PER_HOUR: f64 = 3_600_000.0;
pub(super) const MS_PER_MINUTE: f64 = 60_000.0;
pub(super) const MS_PER_SECOND: f64 = 1000.0;

/// Year, month (1-12) and day (1-31) of a day number counted from 1970-01-01 in the proleptic
/// Gregorian calendar.
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
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
pub(super) fn make_day(year: f64, month: f64, date: f64) -> f64 {
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
pub(super) fn make_time(hour: f64, min: f64, sec: f64, ms: f64) -> f64 {
    if hour.is_finite() && min.is_finite() && sec.is_finite() && ms.is_finite() {
        hour.trunc() * MS_PER_HOUR + min.trunc() * MS_PER_MINUTE + sec.trunc() * MS_PER_SECOND + ms.trunc()
    } else {
        f64::NAN
    }
}

/// V8's `MakeDate` (date.cc).
pub(super) fn make_date(day: f64, time: f64) -> f64 {
    if day.is_finite() && time.is_finite() {
        time + day * MS_PER_DAY
    } else {
        f64::NAN
    }
}
