//! Timestamps: RFC 3339 parsing and formatting, hand-written (no date library).
//!
//! Decoders turn the times the data planes print (`2021-06-16T16:52:13.136834446Z`,
//! `2026-08-03T15:47:26.637407Z`, `…+02:00`) into [`Timestamp`]s; the leader formats them
//! back for Kubernetes `metav1.Time` fields (second precision, [`format_rfc3339`]) and
//! for logs ([`format_rfc3339_nanos`]).

use std::fmt::Write as _;
use std::str::FromStr;

use crate::flow::Timestamp;

/// Why a string is not an RFC 3339 timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// The text does not have the RFC 3339 shape.
    #[error("expected {expected} at byte {at}")]
    Syntax { expected: &'static str, at: usize },
    /// A component is outside its calendar range (month 13, February 30, hour 24, ...).
    #[error("{0} out of range")]
    Range(&'static str),
    /// More than nine fraction digits (finer than nanoseconds).
    #[error("more than 9 fraction digits")]
    FractionTooLong,
    /// The instant does not fit in an `i64` of nanoseconds (years 1678 to 2262).
    #[error("timestamp outside the representable range (years 1678 to 2262)")]
    Overflow,
}

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(year) => 29,
        _ => 28,
    }
}

/// A tiny cursor over the ASCII bytes of a timestamp.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, n: usize, expected: &'static str) -> Result<u32, TimeError> {
        let mut v = 0u32;
        for _ in 0..n {
            match self.b.get(self.at) {
                Some(c) if c.is_ascii_digit() => v = v * 10 + u32::from(c - b'0'),
                _ => {
                    return Err(TimeError::Syntax {
                        expected,
                        at: self.at,
                    });
                }
            }
            self.at += 1;
        }
        Ok(v)
    }

    fn byte(&mut self, accept: &[u8], expected: &'static str) -> Result<u8, TimeError> {
        match self.b.get(self.at) {
            Some(c) if accept.contains(c) => {
                self.at += 1;
                Ok(*c)
            }
            _ => Err(TimeError::Syntax {
                expected,
                at: self.at,
            }),
        }
    }
}

/// Parses an RFC 3339 timestamp: `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`. `t`/space are
/// accepted for `T` and `z` for `Z`; a leap second (`:60`) counts as the next second.
pub fn parse_rfc3339(s: &str) -> Result<Timestamp, TimeError> {
    let mut c = Cursor {
        b: s.as_bytes(),
        at: 0,
    };
    let year = i64::from(c.digits(4, "a 4-digit year")?);
    c.byte(b"-", "'-'")?;
    let month = c.digits(2, "a 2-digit month")?;
    c.byte(b"-", "'-'")?;
    let day = c.digits(2, "a 2-digit day")?;
    c.byte(b"Tt ", "'T'")?;
    let hour = c.digits(2, "a 2-digit hour")?;
    c.byte(b":", "':'")?;
    let minute = c.digits(2, "2-digit minutes")?;
    c.byte(b":", "':'")?;
    let second = c.digits(2, "2-digit seconds")?;
    let mut nanos = 0u32;
    if c.b.get(c.at) == Some(&b'.') {
        c.at += 1;
        let start = c.at;
        while c.b.get(c.at).is_some_and(u8::is_ascii_digit) {
            c.at += 1;
        }
        let n = c.at - start;
        if n == 0 {
            return Err(TimeError::Syntax {
                expected: "fraction digits",
                at: start,
            });
        }
        if n > 9 {
            return Err(TimeError::FractionTooLong);
        }
        let mut frac = 0u32;
        for &d in &c.b[start..c.at] {
            frac = frac * 10 + u32::from(d - b'0');
        }
        nanos = frac * 10u32.pow(9 - n as u32);
    }
    let offset_secs = match c.byte(b"Zz+-", "'Z' or a '+HH:MM' offset")? {
        b'Z' | b'z' => 0,
        sign => {
            let oh = c.digits(2, "a 2-digit offset hour")?;
            c.byte(b":", "':'")?;
            let om = c.digits(2, "2-digit offset minutes")?;
            if oh > 23 || om > 59 {
                return Err(TimeError::Range("offset"));
            }
            let v = i64::from(oh * 3600 + om * 60);
            if sign == b'-' { -v } else { v }
        }
    };
    if c.at != c.b.len() {
        return Err(TimeError::Syntax {
            expected: "end of timestamp",
            at: c.at,
        });
    }
    if !(1..=12).contains(&month) {
        return Err(TimeError::Range("month"));
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err(TimeError::Range("day"));
    }
    if hour > 23 {
        return Err(TimeError::Range("hour"));
    }
    if minute > 59 {
        return Err(TimeError::Range("minute"));
    }
    if second > 60 {
        return Err(TimeError::Range("second"));
    }
    let secs = days_from_civil(year, month, day) * SECS_PER_DAY
        + i64::from(hour * 3600 + minute * 60 + second)
        - offset_secs;
    secs.checked_mul(NANOS_PER_SEC)
        .and_then(|n| n.checked_add(i64::from(nanos)))
        .map(Timestamp)
        .ok_or(TimeError::Overflow)
}

impl FromStr for Timestamp {
    type Err = TimeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_rfc3339(s)
    }
}

/// Whole seconds and nanoseconds (always `0..1e9`) of a timestamp.
pub fn split(t: Timestamp) -> (i64, u32) {
    (
        t.0.div_euclid(NANOS_PER_SEC),
        t.0.rem_euclid(NANOS_PER_SEC) as u32,
    )
}

/// A timestamp from protobuf-style seconds and nanos; saturates outside the `i64` range.
pub fn from_secs_nanos(secs: i64, nanos: i64) -> Timestamp {
    Timestamp(secs.saturating_mul(NANOS_PER_SEC).saturating_add(nanos))
}

fn write_date_time(out: &mut String, secs: i64) {
    let (year, month, day) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let sod = secs.rem_euclid(SECS_PER_DAY);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    );
}

/// `YYYY-MM-DDTHH:MM:SSZ`, truncated to the second: the form Kubernetes `metav1.Time`
/// serialises to.
pub fn format_rfc3339(t: Timestamp) -> String {
    let mut out = String::with_capacity(20);
    write_date_time(&mut out, split(t).0);
    out.push('Z');
    out
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`, always nine fraction digits.
pub fn format_rfc3339_nanos(t: Timestamp) -> String {
    let (secs, nanos) = split(t);
    let mut out = String::with_capacity(30);
    write_date_time(&mut out, secs);
    let _ = write!(out, ".{nanos:09}Z");
    out
}

/// Parses `250ms`, `1s`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 250ms, 1s, 2m)"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?} (ms, s, m or h)")),
    };
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_hubble_and_ztunnel_times() {
        // 2021-06-16T16:52:13Z = 1623862333 (checked with `date -u -d @1623862333`).
        assert_eq!(
            parse_rfc3339("2021-06-16T16:52:13.136834446Z"),
            Ok(Timestamp(1_623_862_333_136_834_446))
        );
        assert_eq!(
            parse_rfc3339("2021-06-16T16:52:13.1368Z"),
            Ok(Timestamp(1_623_862_333_136_800_000))
        );
        assert_eq!(
            parse_rfc3339("2021-06-16T16:52:13Z"),
            Ok(Timestamp::from_secs(1_623_862_333))
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(Timestamp(0)));
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59.5Z"),
            Ok(Timestamp(-500_000_000))
        );
        // Goldmane startTime 1764970845 is 2025-12-05 (testdata/real/ORIGINS.md).
        assert_eq!(
            parse_rfc3339("2025-12-05T21:40:45Z"),
            Ok(Timestamp::from_secs(1_764_970_845))
        );
    }

    #[test]
    fn applies_offsets_and_lenient_separators() {
        let utc = parse_rfc3339("2024-02-29T10:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2024-02-29T12:30:00+02:30"), Ok(utc));
        assert_eq!(parse_rfc3339("2024-02-29T07:00:00-03:00"), Ok(utc));
        assert_eq!(parse_rfc3339("2024-02-29T10:00:00+00:00"), Ok(utc));
        assert_eq!(parse_rfc3339("2024-02-29t10:00:00z"), Ok(utc));
        assert_eq!(parse_rfc3339("2024-02-29 10:00:00Z"), Ok(utc));
        // A leap second is the next second.
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60Z"),
            parse_rfc3339("2017-01-01T00:00:00Z")
        );
    }

    #[test]
    fn rejects_malformed_and_out_of_range() {
        use TimeError::*;
        let cases: &[(&str, TimeError)] = &[
            (
                "",
                Syntax {
                    expected: "a 4-digit year",
                    at: 0,
                },
            ),
            (
                "2021-06-16",
                Syntax {
                    expected: "'T'",
                    at: 10,
                },
            ),
            (
                "2021-06-16T16:52:13",
                Syntax {
                    expected: "'Z' or a '+HH:MM' offset",
                    at: 19,
                },
            ),
            (
                "2021-06-16T16:52:13.Z",
                Syntax {
                    expected: "fraction digits",
                    at: 20,
                },
            ),
            ("2021-06-16T16:52:13.1234567890Z", FractionTooLong),
            (
                "2021-06-16T16:52:13Zjunk",
                Syntax {
                    expected: "end of timestamp",
                    at: 20,
                },
            ),
            (
                "2021-6-16T16:52:13Z",
                Syntax {
                    expected: "a 2-digit month",
                    at: 6,
                },
            ),
            ("2021-13-01T00:00:00Z", Range("month")),
            ("2023-02-29T00:00:00Z", Range("day")),
            ("2021-04-31T00:00:00Z", Range("day")),
            ("2021-01-00T00:00:00Z", Range("day")),
            ("2021-01-01T24:00:00Z", Range("hour")),
            ("2021-01-01T00:60:00Z", Range("minute")),
            ("2021-01-01T00:00:61Z", Range("second")),
            ("2021-01-01T00:00:00+24:00", Range("offset")),
            (
                "2021-01-01T00:00:00+0100",
                Syntax {
                    expected: "':'",
                    at: 22,
                },
            ),
            ("9999-12-31T23:59:59Z", Overflow),
            ("0001-01-01T00:00:00Z", Overflow),
            (
                "２021-01-01T00:00:00Z",
                Syntax {
                    expected: "a 4-digit year",
                    at: 0,
                },
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_rfc3339(input), Err(*want), "{input:?}");
        }
    }

    #[test]
    fn formats_second_and_nano_precision() {
        let t = Timestamp(1_623_862_333_136_834_446);
        assert_eq!(format_rfc3339(t), "2021-06-16T16:52:13Z");
        assert_eq!(format_rfc3339_nanos(t), "2021-06-16T16:52:13.136834446Z");
        assert_eq!(format_rfc3339(Timestamp(-1)), "1969-12-31T23:59:59Z");
        assert_eq!(
            format_rfc3339_nanos(Timestamp(-1)),
            "1969-12-31T23:59:59.999999999Z"
        );
        assert_eq!(format_rfc3339(Timestamp(i64::MAX)), "2262-04-11T23:47:16Z");
        assert_eq!(format_rfc3339(Timestamp(i64::MIN)), "1677-09-21T00:12:43Z");
        assert_eq!(
            "2024-02-29T23:59:59.000000001Z"
                .parse::<Timestamp>()
                .map(format_rfc3339_nanos)
                .as_deref(),
            Ok("2024-02-29T23:59:59.000000001Z")
        );
    }

    #[test]
    fn protobuf_parts() {
        assert_eq!(split(Timestamp(-1)), (-1, 999_999_999));
        assert_eq!(from_secs_nanos(1, 5), Timestamp(1_000_000_005));
        assert_eq!(from_secs_nanos(i64::MAX, 0), Timestamp(i64::MAX));
    }

    proptest! {
        #[test]
        fn nanos_round_trip(n in any::<i64>()) {
            let t = Timestamp(n);
            prop_assert_eq!(parse_rfc3339(&format_rfc3339_nanos(t)), Ok(t));
            // Second precision truncates towards the past; the minimum instant's whole
            // second lies just outside the representable range.
            let want = split(t).0.checked_mul(NANOS_PER_SEC).map(Timestamp).ok_or(TimeError::Overflow);
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(t)), want);
        }

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,40}") {
            let _ = parse_rfc3339(&s);
        }
    }
}
