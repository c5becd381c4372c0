//! Durations: digits, an optional fraction, and a unit (`500ms`, `1.5s`, `2m`, `1h`).
//! The workflow language, provider profiles and tool specs all read them here.

use std::time::Duration;

/// The longest duration: its milliseconds fit 64 bits, as the interpreter counts them.
pub const MAX: Duration = Duration::from_millis(u64::MAX);

const NANOS_PER_SEC: u128 = 1_000_000_000;
/// Fraction digits past this many cannot change a nanosecond count of any unit here.
const MAX_FRACTION_DIGITS: usize = 15;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not a duration (write e.g. `500ms`, `1.5s`, `2m` or `1h`)")]
    Invalid(String),
    #[error("`{0}` has no unit (write e.g. `{0}s`; units: ms, s, m, h)")]
    NoUnit(String),
    #[error("`{0}` is too long a duration (at most 2^64 milliseconds)")]
    TooLarge(String),
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// `500ms`, `1.5s`, `2m`, `1h`: digits, an optional `.digits` fraction, and a unit.
/// Surrounding whitespace is ignored; anything else (a sign, an exponent, a space before
/// the unit, a unit such as `sec`) is an error, never a silent default.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let invalid = || DurationError::Invalid(t.to_string());
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return Err(invalid());
    }
    let per_unit = match unit_nanos(unit) {
        Some(n) => n,
        None if unit.is_empty() => return Err(DurationError::NoUnit(t.to_string())),
        None => return Err(invalid()),
    };
    let too_large = || DurationError::TooLarge(t.to_string());
    // Only digits are left, so a failed parse is an overflow.
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    let mut nanos = whole.checked_mul(per_unit).ok_or_else(too_large)?;
    if let Some(f) = fraction {
        let f = &f[..f.len().min(MAX_FRACTION_DIGITS)];
        let scale = 10u128.pow(f.len() as u32);
        let value: u128 = f.parse().map_err(|_| invalid())?;
        nanos = nanos
            .checked_add(value * per_unit / scale)
            .ok_or_else(too_large)?;
    }
    from_nanos(nanos).ok_or_else(too_large)
}

/// A number of seconds (YAML `timeout: 60`, `timeout: 1.5`).
pub fn duration_from_secs(seconds: f64) -> Result<Duration, DurationError> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(DurationError::Invalid(seconds.to_string()));
    }
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| *d <= MAX)
        .ok_or_else(|| DurationError::TooLarge(seconds.to_string()))
}

fn from_nanos(nanos: u128) -> Option<Duration> {
    if nanos > MAX.as_nanos() {
        return None;
    }
    let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
    Some(Duration::new(secs, (nanos % NANOS_PER_SEC) as u32))
}

/// The text [`parse_duration`] reads back to the same duration (`2s`, `250ms`, `0.0000015s`).
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        let text = format!("{}.{:09}", d.as_secs(), d.subsec_nanos());
        format!("{}s", text.trim_end_matches('0'))
    }
}

/// `#[serde(with = "rondo_config::duration::serde")]`: a duration text or a number of
/// seconds in, a duration text out.
pub mod serde {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as `500ms`, `1.5s`, `2m` or a number of seconds")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            super::parse_duration(v).map_err(E::custom)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            self.visit_f64(v as f64)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            self.visit_f64(v as f64)
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
            super::duration_from_secs(v).map_err(E::custom)
        }
    }

    /// The same for an `Option<Duration>` field (use with `#[serde(default)]`).
    pub mod option {
        use std::time::Duration;

        use serde::{Deserializer, Serializer};

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u128 {
        parse_duration(text).expect(text).as_millis()
    }

    #[test]
    fn units_and_fractions() {
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("1.5s"), 1_500);
        assert_eq!(ms("2m"), 120_000);
        assert_eq!(ms("1h"), 3_600_000);
        assert_eq!(ms(" 30s "), 30_000);
        assert_eq!(ms("0s"), 0);
        assert_eq!(ms("0.25m"), 15_000);
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1_500)
        );
        assert_eq!(
            parse_duration("0.1234567890123456789s").unwrap(),
            Duration::from_nanos(123_456_789)
        );
    }

    #[test]
    fn junk_is_an_error_not_a_default() {
        for junk in [
            "",
            "s",
            "ms",
            "1",
            "1.5",
            "-1s",
            "+1s",
            "1e3s",
            "1 s",
            "1sec",
            "1M",
            "5 minutes",
            ".5s",
            "1.s",
            "1.5.2s",
            "1,5s",
            "1h30m",
            "１s",
            "NaNs",
        ] {
            assert!(parse_duration(junk).is_err(), "`{junk}` was accepted");
        }
        assert!(matches!(
            parse_duration("30"),
            Err(DurationError::NoUnit(_))
        ));
        assert!(matches!(
            parse_duration("30sec"),
            Err(DurationError::Invalid(_))
        ));
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let max_ms = u64::MAX.to_string();
        assert_eq!(parse_duration(&format!("{max_ms}ms")).unwrap(), MAX);
        for big in [
            format!("{}ms", u128::from(u64::MAX) + 1),
            format!("{}h", u64::MAX),
            format!("{}s", "9".repeat(60)),
            "18446744073709551615.5ms".to_string(),
        ] {
            assert!(
                matches!(parse_duration(&big), Err(DurationError::TooLarge(_))),
                "{big}"
            );
        }
        assert!(duration_from_secs(1e300).is_err());
        assert!(duration_from_secs(-1.0).is_err());
        assert!(duration_from_secs(f64::NAN).is_err());
        assert_eq!(
            duration_from_secs(1.5).unwrap(),
            Duration::from_millis(1_500)
        );
    }

    #[test]
    fn formatting_reads_back() {
        for d in [
            Duration::from_secs(2),
            Duration::from_millis(250),
            Duration::from_micros(1_500),
            Duration::from_nanos(1),
            MAX,
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{d:?}");
        }
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1500ms");
    }
}
