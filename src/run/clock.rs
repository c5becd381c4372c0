//! Wall-clock timestamps (UTC, RFC 3339) without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn now_rfc3339() -> String {
    rfc3339(unix_ms())
}

/// [`rfc3339`] written to `w` without formatting machinery (every journal line has one).
pub fn write_rfc3339(w: &mut impl std::io::Write, ms: u64) -> std::io::Result<()> {
    let (year, month, day) = civil(ms);
    let rem = (ms / 1000) % 86_400;
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year.clamp(0, 9999) as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, rem / 3600);
    put(14, 2, (rem % 3600) / 60);
    put(17, 2, rem % 60);
    put(20, 3, ms % 1000);
    w.write_all(&out)
}

/// Year, month and day of `ms` after the epoch, from days since 1970-01-01 (Howard
/// Hinnant's algorithm).
fn civil(ms: u64) -> (i64, i64, i64) {
    let days = (ms / 1000 / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

pub fn rfc3339(ms: u64) -> String {
    let mut out = Vec::with_capacity(24);
    // Writing to a Vec cannot fail, and the text is ASCII.
    let _ = write_rfc3339(&mut out, ms);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            super::rfc3339(1_795_305_600_000),
            "2026-11-22T00:00:00.000Z"
        );
        assert_eq!(
            super::rfc3339(4_102_444_800_001),
            "2100-01-01T00:00:00.001Z"
        );
        assert_eq!(
            super::rfc3339(1_795_343_999_999),
            "2026-11-22T10:39:59.999Z"
        );
    }
}
