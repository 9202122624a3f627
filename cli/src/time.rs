//! Event times as RFC 3339 text: UTC, always nine fraction digits, `Z`
//! (`2024-05-01T12:00:00.123456789Z`).
//!
//! The conversion is Howard Hinnant's `civil_from_days` (proleptic
//! Gregorian calendar), written out here because it is twenty lines and a
//! date crate would be the CLI's largest dependency. Every `i64` of Unix
//! nanoseconds falls between 1677 and 2262, inside RFC 3339's four-digit
//! years.

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// `at_unix_nanos` (nanoseconds since 1970-01-01T00:00:00Z, negative
/// before it) as RFC 3339 with nanoseconds.
pub fn rfc3339_nanos(at_unix_nanos: i64) -> String {
    let seconds = at_unix_nanos.div_euclid(NANOS_PER_SECOND);
    let nanos = at_unix_nanos.rem_euclid(NANOS_PER_SECOND);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
    );
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{nanos:09}Z")
}

/// The (year, month, day) of the day `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Shift the epoch to 0000-03-01, so a leap day is the last of its
    // "year", then count 400-year eras of 146097 days.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(at_unix_nanos: i64, expected: &str) {
        assert_eq!(
            rfc3339_nanos(at_unix_nanos),
            expected,
            "at {at_unix_nanos} ns"
        );
    }

    #[test]
    fn known_instants() {
        check(0, "1970-01-01T00:00:00.000000000Z");
        check(1, "1970-01-01T00:00:00.000000001Z");
        check(-1, "1969-12-31T23:59:59.999999999Z");
        check(
            951_782_400 * NANOS_PER_SECOND,
            "2000-02-29T00:00:00.000000000Z",
        );
        check(
            1_709_164_800 * NANOS_PER_SECOND,
            "2024-02-29T00:00:00.000000000Z",
        );
        check(1_714_564_800_123_456_789, "2024-05-01T12:00:00.123456789Z");
        // 2100 is not a leap year: February 28 is followed by March 1.
        check(
            4_107_456_000 * NANOS_PER_SECOND,
            "2100-02-28T00:00:00.000000000Z",
        );
        check(
            4_107_542_400 * NANOS_PER_SECOND,
            "2100-03-01T00:00:00.000000000Z",
        );
        check(i64::MAX, "2262-04-11T23:47:16.854775807Z");
        check(i64::MIN, "1677-09-21T00:12:43.145224192Z");
    }

    #[test]
    fn consecutive_days_step_through_the_calendar() {
        // Walk every day from 1677 to 2262 and check it follows the previous
        // one by the calendar's own rules.
        let days_in_month = |year: i64, month: i64| match month {
            2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let first = i64::MIN / NANOS_PER_SECOND / SECONDS_PER_DAY;
        let last = i64::MAX / NANOS_PER_SECOND / SECONDS_PER_DAY;
        let mut previous = civil_from_days(first);
        for days in first + 1..=last {
            let (year, month, day) = previous;
            let expected = if day < days_in_month(year, month) {
                (year, month, day + 1)
            } else if month < 12 {
                (year, month + 1, 1)
            } else {
                (year + 1, 1, 1)
            };
            previous = civil_from_days(days);
            assert_eq!(previous, expected, "day {days}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
    }
}
