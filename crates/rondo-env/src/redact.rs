//! Secret values replaced by `[REDACTED:NAME]` in everything a command prints, in the
//! forms a leak takes: as they are, base64 (standard and URL-safe alphabets, padded or
//! not, at each of the three alignments inside a longer stream), hex (either case),
//! percent-encoded and JSON-escaped.
//!
//! All the forms of all the values are searched in one pass by one automaton, built once.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// Values shorter than this are not redacted: replacing every `1234` or `true` in the
/// output would destroy text without protecting anything that looks like a key, and the
/// encoded forms of a short value (a base64 middle of a few characters) would match at
/// random in any long base64 or hex text.
pub const MIN_SECRET_LEN: usize = 8;

/// Up to this many bytes of patterns (all forms of all values), the matcher is a DFA of
/// at most some 6 MB; past it, a contiguous NFA.
const DFA_PATTERN_BYTES: usize = 16 * 1024;

/// A set of secret values, each with the name of the variable it came from.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The variables whose values are redacted, sorted.
    names: Vec<String>,
    /// `[REDACTED:NAME]` for each of `names`.
    markers: Vec<String>,
    /// For each pattern of the matcher, its variable (an index into `names`).
    owner: Vec<usize>,
    matcher: Option<AhoCorasick>,
    /// Length of the longest pattern: how much a stream must hold back.
    longest: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("Redactor")
            .field("names", &self.names)
            .field("patterns", &self.owner.len())
            .finish()
    }
}

impl Redactor {
    /// `(variable name, value)` pairs; values shorter than [`MIN_SECRET_LEN`] are ignored.
    /// Each value is redacted in all the forms the module's documentation lists.
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
        // Longest value first: the same text from two variables (a value and its encoding,
        // a value inside another) is named after the longest.
        pairs.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        if pairs.is_empty() {
            return Redactor::default();
        }
        let mut names: Vec<String> = pairs.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        names.dedup();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut owner = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, value) in &pairs {
            let index = names.binary_search(name).unwrap_or(0);
            for piece in pieces(value) {
                for form in forms(piece) {
                    if seen.insert(form.clone()) {
                        patterns.push(form);
                        owner.push(index);
                    }
                }
            }
        }
        // A DFA is twice as fast as the contiguous NFA the crate picks past 100 patterns
        // (a handful of keys already make 140), but costs some 350 bytes a pattern byte.
        let total: usize = patterns.iter().map(Vec::len).sum();
        let kind = if total <= DFA_PATTERN_BYTES {
            AhoCorasickKind::DFA
        } else {
            AhoCorasickKind::ContiguousNFA
        };
        // Leftmost-longest: where a whole encoding and its middle part both match, the
        // whole is replaced.
        let mut builder = AhoCorasick::builder();
        builder.match_kind(MatchKind::LeftmostLongest);
        let matcher = builder
            .kind(Some(kind))
            .build(&patterns)
            .or_else(|_| builder.kind(None).build(&patterns))
            .ok();
        Redactor {
            longest: patterns.iter().map(Vec::len).max().unwrap_or(0),
            markers: names.iter().map(|n| format!("[REDACTED:{n}]")).collect(),
            names,
            owner,
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

    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Every pattern is ASCII or a piece of a value cut at character boundaries, so
            // a match starts and ends on character boundaries and the result is UTF-8.
            Cow::Owned(bytes) => Cow::Owned(
                String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            ),
        }
    }

    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(m) = &self.matcher else {
            return Cow::Borrowed(bytes);
        };
        let mut found = m.find_iter(bytes).peekable();
        if found.peek().is_none() {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        let (last, _) = self.replace_into(&mut out, bytes, found, usize::MAX, None);
        out.extend_from_slice(&bytes[last..]);
        Cow::Owned(out)
    }

    /// Copies `bytes` into `out` up to the first match that starts at or after `stop` (or
    /// the end), each match replaced by its variable's marker: once for a run of adjacent
    /// matches of one variable (the pieces of a long value). `joined`: the variable whose
    /// marker ends what came before `bytes`, if nothing came after it. Returns where the
    /// copy stopped (the end of the last match, at most) and the variable whose marker
    /// ends `out` there.
    fn replace_into(
        &self,
        out: &mut Vec<u8>,
        bytes: &[u8],
        found: impl Iterator<Item = aho_corasick::Match>,
        stop: usize,
        mut joined: Option<usize>,
    ) -> (usize, Option<usize>) {
        let mut last = 0;
        for hit in found {
            if hit.start() >= stop {
                break;
            }
            let owner = self.owner[hit.pattern().as_usize()];
            if hit.start() > last || joined != Some(owner) {
                out.extend_from_slice(&bytes[last..hit.start()]);
                out.extend_from_slice(self.markers[owner].as_bytes());
            }
            joined = Some(owner);
            last = hit.end();
        }
        (last, joined)
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

    /// A redactor for a stream arriving in chunks: a value (in any of its forms) cut
    /// between two chunks is still replaced.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            redactor: self.clone(),
            carry: Vec::new(),
            joined: None,
        }
    }
}

/// See [`Redactor::stream`]. Holds back at most the longest pattern's length minus one
/// byte.
pub struct StreamRedactor {
    redactor: Redactor,
    carry: Vec<u8>,
    /// The variable whose marker ends what was released, if nothing was released after it.
    joined: Option<usize>,
}

impl StreamRedactor {
    /// The part of the stream that can be released after `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(m) = &self.redactor.matcher else {
            return chunk.to_vec();
        };
        self.carry.extend_from_slice(chunk);
        let data = std::mem::take(&mut self.carry);
        // A pattern that starts before `safe` would end inside `data`, so it was found.
        let safe = data.len().saturating_sub(self.redactor.longest - 1);
        let mut out = Vec::with_capacity(data.len());
        let (last, joined) =
            self.redactor
                .replace_into(&mut out, &data, m.find_iter(&data), safe, self.joined);
        let released = safe.max(last);
        out.extend_from_slice(&data[last..released]);
        self.joined = if last == released { joined } else { None };
        self.carry = data[released..].to_vec();
        out
    }

    /// The rest of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.carry);
        let Some(m) = &self.redactor.matcher else {
            return rest;
        };
        let mut out = Vec::with_capacity(rest.len());
        let (last, _) = self.redactor.replace_into(
            &mut out,
            &rest,
            m.find_iter(&rest),
            usize::MAX,
            self.joined,
        );
        out.extend_from_slice(&rest[last..]);
        out
    }
}

/// Values longer than this are redacted piece by piece, in pieces of at most this many
/// bytes (a multiple of 3, so that base64 pieces of an aligned value meet at group
/// boundaries): the longest pattern, and so what a stream holds back and scans again at
/// each chunk, stays a few hundred bytes whatever the value (a PEM key is kilobytes).
/// Inside a longer base64 text not aligned on the value, one character straddles each
/// boundary between two pieces and stays.
const MAX_PIECE: usize = 63;

/// `value` cut into pieces of at most about [`MAX_PIECE`] bytes and about equal sizes, at
/// character boundaries.
fn pieces(value: &str) -> Vec<&[u8]> {
    let count = value.len().div_ceil(MAX_PIECE);
    let size = value.len().div_ceil(count).next_multiple_of(3);
    let mut out = Vec::with_capacity(count);
    let mut start = 0;
    while start < value.len() {
        let mut end = (start + size).min(value.len());
        while !value.is_char_boundary(end) {
            end += 1;
        }
        out.push(&value.as_bytes()[start..end]);
        start = end;
    }
    // A short last piece would match everywhere: it goes with the one before.
    if out.len() > 1 && out[out.len() - 1].len() < MIN_SECRET_LEN {
        let last = out.len() - 1;
        let start = value.len() - out[last].len() - out[last - 1].len();
        out.truncate(last - 1);
        out.push(&value.as_bytes()[start..]);
    }
    out
}

/// Punctuation an encoder may leave as it is or percent-encode (each encoder its own
/// choice: Python's `quote` keeps `/`, JavaScript's `encodeURIComponent` keeps `!'()*`,
/// Java's `URLEncoder` keeps `*` and writes a space `+`, PHP's `urlencode` encodes `~`).
fn optionally_escaped(b: u8) -> bool {
    b.is_ascii_graphic() && !b.is_ascii_alphanumeric() && b != b'%'
}

/// Up to this many distinct such characters in a value, every combination of kept and
/// encoded ones is a pattern (2^4 per hex case); past it, the common encoders' choices.
const MAX_FREE_PUNCTUATION: usize = 4;

/// The text a leak of `value` may show, each at least as long as the base64 of
/// [`MIN_SECRET_LEN`] bytes (10 characters) when `value` is at least that long.
fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![value.to_vec()];
    out.push(hex::encode(value).into_bytes());
    out.push(hex::encode_upper(value).into_bytes());
    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
        out.push(engine.encode(value).into_bytes());
    }
    out.extend(base64_middles(value));
    out.extend(percent_forms(value));
    if let Ok(text) = std::str::from_utf8(value)
        && let Ok(quoted) = serde_json::to_string(text)
    {
        out.push(quoted.as_bytes()[1..quoted.len() - 1].to_vec());
    }
    out.sort();
    out.dedup();
    out
}

/// Inside a longer base64 text, `value` starts at byte offset 0, 1 or 2 of a 3-byte group.
/// In each case the characters that encode only bits of `value` are the same whatever
/// surrounds it: this middle part, in each alphabet.
fn base64_middles(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for shift in 0..3usize {
        let mut shifted = vec![0u8; shift];
        shifted.extend_from_slice(value);
        // Character i holds bits 6i..6i+6; the value's bits are 8*shift..8*(shift+len).
        let first = (8 * shift).div_ceil(6);
        let end = 8 * (shift + value.len()) / 6;
        for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
            let text = engine.encode(&shifted).into_bytes();
            out.push(text[first..end].to_vec());
        }
    }
    out
}

/// `value` percent-encoded, as the common encoders write it: letters and digits kept, `%`
/// and every other byte that is not printable ASCII encoded, in either hex case; a space
/// also as `+`; every byte encoded.
fn percent_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut free: Vec<u8> = value
        .iter()
        .copied()
        .filter(|&b| optionally_escaped(b))
        .collect();
    free.sort();
    free.dedup();
    let kept_sets: Vec<Vec<u8>> = if free.len() <= MAX_FREE_PUNCTUATION {
        (0..1u32 << free.len())
            .map(|mask| {
                (0..free.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| free[i])
                    .collect()
            })
            .collect()
    } else {
        [
            &b""[..],
            b"-_.",
            b"-_.~",
            b"-_.*",
            b"-_.~/",
            b"-_.!~*'()",
            b"-_.!~*'();,/?:@&=+$#",
        ]
        .iter()
        .map(|s| s.to_vec())
        .collect()
    };
    let mut out = Vec::new();
    for kept in &kept_sets {
        for upper in [true, false] {
            for plus in [false, true] {
                if plus && !value.contains(&b' ') {
                    continue;
                }
                out.push(percent_encode(value, upper, |b| {
                    if b == b' ' && plus {
                        Some(b'+')
                    } else if b.is_ascii_alphanumeric() || kept.contains(&b) {
                        Some(b)
                    } else {
                        None
                    }
                }));
            }
        }
    }
    for upper in [true, false] {
        out.push(percent_encode(value, upper, |_| None));
    }
    out
}

/// Each byte as `literal(b)` gives it, or as `%XX` when that is `None`.
fn percent_encode(value: &[u8], upper: bool, literal: impl Fn(u8) -> Option<u8>) -> Vec<u8> {
    let digits = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Vec::with_capacity(value.len() * 3);
    for &b in value {
        match literal(b) {
            Some(c) => out.push(c),
            None => out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]),
        }
    }
    out
}

/// A variable is taken for a secret when one of its `_`-separated parts (any case) is one
/// of these: `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `MY_DB_PASSWORD`, `SOME_API_KEY`.
/// Whole parts, so `TOKENIZER_PATH` or `MONKEY_BUSINESS` are not. The words `rondo check`
/// refuses in an input's `env("...")` for the same reason.
const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "KEYS",
    "APIKEY",
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "CREDENTIAL",
    "CREDENTIALS",
];

/// Whether an environment variable's name says it holds a secret (see [`SECRET_NAME_PARTS`]).
pub fn name_looks_secret(var: &str) -> bool {
    var.split('_').any(|part| {
        SECRET_NAME_PARTS
            .iter()
            .any(|w| part.eq_ignore_ascii_case(w))
    })
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
            assert_eq!(
                streamed(&r, text, size),
                "..[REDACTED:KEY]..[REDACTED:OTHER]..abcdefgh",
                "chunk size {size}"
            );
        }
    }

    /// Written out by Python (`base64`, `bytes.hex`, `urllib.parse.quote`, `json.dumps`)
    /// and JavaScript (`encodeURIComponent`), not by the code under test.
    const AWS: &str = r#"wJa/K7+bP x"Y~\k!??>>Z"#;
    const AWS_FORMS: &[&str] = &[
        r#"wJa/K7+bP x"Y~\k!??>>Z"#,
        "d0phL0s3K2JQIHgiWX5cayE/Pz4+Wg==",
        "d0phL0s3K2JQIHgiWX5cayE/Pz4+Wg",
        "d0phL0s3K2JQIHgiWX5cayE_Pz4-Wg==",
        "d0phL0s3K2JQIHgiWX5cayE_Pz4-Wg",
        "774a612f4b372b6250207822597e5c6b213f3f3e3e5a",
        "774A612F4B372B6250207822597E5C6B213F3F3E3E5A",
        // quote(s), quote(s, safe=''), quote_plus(s), encodeURIComponent(s)
        "wJa/K7%2BbP%20x%22Y~%5Ck%21%3F%3F%3E%3EZ",
        "wJa%2FK7%2BbP%20x%22Y~%5Ck%21%3F%3F%3E%3EZ",
        "wJa%2FK7%2BbP+x%22Y~%5Ck%21%3F%3F%3E%3EZ",
        "wJa%2FK7%2BbP%20x%22Y~%5Ck!%3F%3F%3E%3EZ",
        "wJa%2fK7%2bbP%20x%22Y~%5ck%21%3f%3f%3e%3eZ",
        "%77%4A%61%2F%4B%37%2B%62%50%20%78%22%59%7E%5C%6B%21%3F%3F%3E%3E%5A",
        r#"wJa/K7+bP x\"Y~\\k!??>>Z"#,
    ];
    const GITHUB: &str = "ghp_a/b+c~d!e-f12345";
    const GITHUB_FORMS: &[&str] = &[
        "ghp_a/b+c~d!e-f12345",
        "Z2hwX2EvYitjfmQhZS1mMTIzNDU=",
        "Z2hwX2EvYitjfmQhZS1mMTIzNDU",
        "6768705f612f622b637e6421652d663132333435",
        "6768705F612F622B637E6421652D663132333435",
        "ghp_a/b%2Bc~d%21e-f12345",
        "ghp_a%2Fb%2Bc~d%21e-f12345",
        "ghp_a%2Fb%2Bc~d!e-f12345",
        // Java's URLEncoder, PHP's urlencode; lower-case hex (.NET's HttpUtility)
        "ghp_a%2Fb%2Bc%7Ed%21e-f12345",
        "ghp_a%2fb%2bc~d%21e-f12345",
        "%67%68%70%5F%61%2F%62%2B%63%7E%64%21%65%2D%66%31%32%33%34%35",
    ];

    fn two_secrets() -> Redactor {
        Redactor::new([("AWS_SECRET_ACCESS_KEY", AWS), ("GITHUB_TOKEN", GITHUB)])
    }

    #[test]
    fn each_encoding_of_a_value_is_replaced_whole() {
        let r = two_secrets();
        for (name, forms) in [
            ("AWS_SECRET_ACCESS_KEY", AWS_FORMS),
            ("GITHUB_TOKEN", GITHUB_FORMS),
        ] {
            for form in forms {
                assert_eq!(
                    r.redact(&format!("<{form}>")),
                    format!("<[REDACTED:{name}]>"),
                    "{form}"
                );
            }
        }
    }

    /// A value inside a longer base64 text starts at byte 0, 1 or 2 of a 3-byte group. The
    /// characters holding only its bits are replaced; those holding bits of the
    /// neighbouring bytes too are left.
    #[test]
    fn base64_of_a_longer_text_loses_the_value_at_every_alignment() {
        for secret in [AWS, GITHUB, "12345678", "123456789", "1234567890"] {
            let r = Redactor::new([("S", secret)]);
            for prefix in 0..6usize {
                for suffix in [&b""[..], b"~tail", b"\xff"] {
                    let mut stream = vec![0xfbu8; prefix];
                    stream.extend_from_slice(secret.as_bytes());
                    stream.extend_from_slice(suffix);
                    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
                        let encoded = engine.encode(&stream);
                        let first = (8 * prefix).div_ceil(6);
                        // Aligned and last: the value's own encoding, padding and all.
                        let end = if prefix % 3 == 0 && suffix.is_empty() {
                            encoded.len()
                        } else {
                            8 * (prefix + secret.len()) / 6
                        };
                        let expected =
                            format!("{}[REDACTED:S]{}", &encoded[..first], &encoded[end..]);
                        assert_eq!(
                            r.redact(&encoded),
                            expected,
                            "{secret:?} after {prefix} bytes, {encoded}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn hex_and_percent_encodings_inside_longer_texts() {
        let r = two_secrets();
        let hex = format!("00ff{}ab", "6768705f612f622b637e6421652d663132333435");
        assert_eq!(r.redact(&hex), "00ff[REDACTED:GITHUB_TOKEN]ab");
        let url = "https://h.example/cb?token=ghp_a%2Fb%2Bc~d%21e-f12345&next=1";
        assert_eq!(
            r.redact(url),
            "https://h.example/cb?token=[REDACTED:GITHUB_TOKEN]&next=1"
        );
        // A value with few punctuation characters: any of them kept, the others encoded.
        let r = Redactor::new([("T", "tok/en+val:ue12")]);
        for form in [
            "tok%2Fen%2Bval:ue12",
            "tok/en%2bval%3aue12",
            "tok%2Fen+val%3Aue12",
        ] {
            assert_eq!(r.redact(&format!("={form}&")), "=[REDACTED:T]&", "{form}");
        }
    }

    /// Every form of both values, one a line, in a stream cut at every size: what comes out
    /// is what the whole text gives, and no form is left.
    #[test]
    fn encoded_values_split_across_chunks_are_replaced() {
        let r = two_secrets();
        let mut text = String::new();
        for form in AWS_FORMS.iter().chain(GITHUB_FORMS) {
            text.push_str(&format!("x {form} y\n"));
        }
        for prefix in 1..3 {
            let mut stream = vec![b'.'; prefix];
            stream.extend_from_slice(AWS.as_bytes());
            stream.extend_from_slice(b"...");
            text.push_str(&STANDARD.encode(&stream));
            text.push('\n');
        }
        let whole = r.redact(&text).into_owned();
        assert_eq!(
            whole.matches("[REDACTED:").count(),
            AWS_FORMS.len() + GITHUB_FORMS.len() + 2
        );
        for size in [1, 2, 3, 5, 7, 16, 63, 64, 65, 100, 1000] {
            let out = streamed(&r, text.as_bytes(), size);
            assert_eq!(out, whole, "chunk size {size}");
        }
        for form in AWS_FORMS.iter().chain(GITHUB_FORMS) {
            assert!(!whole.contains(form), "{form} in {whole}");
        }
    }

    #[test]
    fn names_once_each_in_order() {
        let r = Redactor::new([
            ("B_TOKEN", "same-value-1"),
            ("A_KEY", "other-value"),
            ("C_KEY", "same-value-1"),
        ]);
        assert_eq!(r.names(), ["A_KEY", "B_TOKEN", "C_KEY"]);
        assert_eq!(r.redact("same-value-1"), "[REDACTED:B_TOKEN]");
        assert!(!format!("{r:?}").contains("value"));
    }

    /// A PEM key (kilobytes, several lines), the bytes from a fixed xorshift.
    fn pem_key() -> String {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let der: Vec<u8> = (0..1200)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let body = STANDARD.encode(der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----",
            lines.join("\n")
        )
    }

    /// Replaced piece by piece, a long value still gives one marker in each form, and a
    /// stream holds back a few hundred bytes, not three times the value.
    #[test]
    fn a_long_value_gives_one_marker_in_each_form() {
        let key = pem_key();
        let r = Redactor::new([("SSH_KEY", key.as_str())]);
        assert!(
            r.longest <= 3 * (MAX_PIECE + MIN_SECRET_LEN),
            "{}",
            r.longest
        );
        let every_byte: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
        for form in [
            key.clone(),
            hex::encode(&key),
            hex::encode_upper(&key),
            STANDARD.encode(&key),
            URL_SAFE_NO_PAD.encode(&key),
            every_byte,
            serde_json::to_string(&key)
                .unwrap()
                .trim_matches('"')
                .to_string(),
        ] {
            let text = format!("<{form}>");
            assert_eq!(r.redact(&text), "<[REDACTED:SSH_KEY]>", "{form}");
            for size in [1, 7, 64, 200, 4096] {
                assert_eq!(streamed(&r, text.as_bytes(), size), "<[REDACTED:SSH_KEY]>");
            }
        }
        // Not aligned inside a longer base64 text: a character between two pieces stays.
        let pieces = key.len().div_ceil(MAX_PIECE);
        for prefix in 1..3 {
            let mut stream = vec![0xfbu8; prefix];
            stream.extend_from_slice(key.as_bytes());
            stream.extend_from_slice(b"~tail");
            let encoded = STANDARD.encode(&stream);
            let first = (8 * prefix).div_ceil(6);
            let end = 8 * (prefix + key.len()) / 6;
            let out = r.redact(&encoded);
            let middle = out
                .strip_prefix(&encoded[..first])
                .and_then(|o| o.strip_suffix(&encoded[end..]))
                .unwrap_or_else(|| panic!("{out}"));
            let left = middle.replace("[REDACTED:SSH_KEY]", "");
            assert!(left.len() < pieces, "{middle}");
        }
    }

    fn streamed(r: &Redactor, text: &[u8], size: usize) -> String {
        let mut s = r.stream();
        let mut out = Vec::new();
        for chunk in text.chunks(size) {
            out.extend(s.push(chunk));
        }
        out.extend(s.finish());
        String::from_utf8(out).unwrap()
    }
}
