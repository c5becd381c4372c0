//! Sizes in bytes: `4MB`, `4 MiB`, `512k`, `1g`, `100`; multiples are binary.

/// A size in bytes, or `None` for text that is not one or does not fit 64 bits.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits].parse().ok()?;
    let shift = match t[digits..].trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// `#[serde(with = "rondo_config::size::serde_option")]`: a size text or a number of bytes.
pub mod serde_option {
    use std::fmt;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer>(n: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match n {
            Some(n) => s.serialize_u64(*n),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(SizeVisitor).map(Some)
    }

    struct SizeVisitor;

    impl Visitor<'_> for SizeVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size such as `4MB`, `512KB` or a number of bytes")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("`{v}` is not a size")))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            super::parse_size(v).ok_or_else(|| {
                E::custom(format!(
                    "`{v}` is not a size (write e.g. `4MB`, `512KB` or a number of bytes)"
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("4MB"), Some(4 << 20));
        assert_eq!(parse_size("4 MiB"), Some(4 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("512mb"), Some(512 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        for junk in ["", "MB", "-1", "1.5MB", "4 TB", "4e3"] {
            assert_eq!(parse_size(junk), None, "{junk}");
        }
        assert_eq!(parse_size(&format!("{}g", u64::MAX)), None, "overflow");
    }
}
