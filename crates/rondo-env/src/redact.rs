//! Secret values replaced by `[REDACTED:NAME]` in everything a command prints.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};

/// Values shorter than this are not redacted: replacing every `1234` or `true` in the
/// output would destroy text without protecting anything that looks like a key.
pub const MIN_SECRET_LEN: usize = 8;

/// A set of secret values, each with the name of the variable it came from.
#[derive(Clone, Default)]
pub struct Redactor {
    names: Vec<String>,
    matcher: Option<AhoCorasick>,
    /// Length of the longest value: how much a stream must hold back.
    longest: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("Redactor")
            .field("names", &self.names)
            .finish()
    }
}

impl Redactor {
    /// `(variable name, value)` pairs; values shorter than [`MIN_SECRET_LEN`] are ignored.
    pub fn new<I, N, V>(secrets: I) -> Self
    where
        I: IntoIterator<Item = (N, V)>,
        N: Into<String>,
        V: Into<String>,
    {
        let mut pairs: Vec<(String, String)> = secrets
            .into_iter()
            .map(|(n, v)| (n.into(), v.into()))
            .filter(|(_, v)| v.len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so that a value containing another is replaced whole.
        pairs.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        pairs.dedup_by(|a, b| a.1 == b.1);
        if pairs.is_empty() {
            return Redactor::default();
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(pairs.iter().map(|(_, v)| v.as_bytes()))
            .ok();
        Redactor {
            longest: pairs.iter().map(|(_, v)| v.len()).max().unwrap_or(0),
            names: pairs.into_iter().map(|(n, _)| n).collect(),
            matcher,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// The variables whose values are redacted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn marker(&self, pattern: usize) -> String {
        format!("[REDACTED:{}]", self.names[pattern])
    }

    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(m) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        if !m.is_match(text) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for found in m.find_iter(text) {
            out.push_str(&text[last..found.start()]);
            out.push_str(&self.marker(found.pattern().as_usize()));
            last = found.end();
        }
        out.push_str(&text[last..]);
        Cow::Owned(out)
    }

    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(m) = &self.matcher else {
            return Cow::Borrowed(bytes);
        };
        if !m.is_match(bytes) {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut last = 0;
        for found in m.find_iter(bytes) {
            out.extend_from_slice(&bytes[last..found.start()]);
            out.extend_from_slice(self.marker(found.pattern().as_usize()).as_bytes());
            last = found.end();
        }
        out.extend_from_slice(&bytes[last..]);
        Cow::Owned(out)
    }

    /// Every string in `value` (object keys included), in place.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(r) = self.redact(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let dirty_keys = map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_)));
                if dirty_keys {
                    let entries = std::mem::take(map);
                    for (k, mut v) in entries {
                        self.redact_json(&mut v);
                        map.insert(self.redact(&k).into_owned(), v);
                    }
                } else {
                    map.values_mut().for_each(|v| self.redact_json(v));
                }
            }
            _ => {}
        }
    }

    /// A redactor for a stream arriving in chunks: a value cut between two chunks is
    /// still replaced.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            redactor: self.clone(),
            carry: Vec::new(),
        }
    }
}

/// See [`Redactor::stream`]. Holds back at most the longest value's length minus one byte.
pub struct StreamRedactor {
    redactor: Redactor,
    carry: Vec<u8>,
}

impl StreamRedactor {
    /// The part of the stream that can be released after `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(m) = &self.redactor.matcher else {
            return chunk.to_vec();
        };
        self.carry.extend_from_slice(chunk);
        let data = std::mem::take(&mut self.carry);
        // A value that starts before `safe` would end inside `data`, so it was found.
        let mut safe = data.len().saturating_sub(self.redactor.longest - 1);
        let mut out = Vec::with_capacity(data.len());
        let mut last = 0;
        for found in m.find_iter(&data) {
            if found.start() >= safe {
                break;
            }
            out.extend_from_slice(&data[last..found.start()]);
            out.extend_from_slice(self.redactor.marker(found.pattern().as_usize()).as_bytes());
            last = found.end();
            safe = safe.max(last);
        }
        out.extend_from_slice(&data[last..safe]);
        self.carry = data[safe..].to_vec();
        out
    }

    /// The rest of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.carry);
        self.redactor.redact_bytes(&rest).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_values_and_skips_short_ones() {
        let r = Redactor::new([("KEY", "sk-secret-123456"), ("PIN", "1234")]);
        assert_eq!(
            r.redact("key=sk-secret-123456 pin=1234"),
            "key=[REDACTED:KEY] pin=1234"
        );
        assert_eq!(r.names(), ["KEY"]);
        let mut v = serde_json::json!({"a": ["x sk-secret-123456"], "sk-secret-123456": 1});
        r.redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": ["x [REDACTED:KEY]"], "[REDACTED:KEY]": 1})
        );
    }

    #[test]
    fn a_value_split_across_chunks_is_replaced() {
        let r = Redactor::new([("KEY", "abcdefghij"), ("OTHER", "0123456789xyz")]);
        let text = b"..abcdefghij..0123456789xyz..abcdefgh";
        for size in 1..text.len() {
            let mut s = r.stream();
            let mut out = Vec::new();
            for chunk in text.chunks(size) {
                out.extend(s.push(chunk));
            }
            out.extend(s.finish());
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "..[REDACTED:KEY]..[REDACTED:OTHER]..abcdefgh",
                "chunk size {size}"
            );
        }
    }
}
