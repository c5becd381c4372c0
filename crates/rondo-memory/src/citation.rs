//! Code references in a thought: `text[n](path:line)`.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// One `[n](path:line)` reference found in a thought.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Citation {
    /// The `n` of `[n]`.
    pub index: u32,
    /// The path as written (normalized later against the workspace).
    pub path: String,
    /// 1-based line number.
    pub line: usize,
}

static CITATION: LazyLock<Regex> = LazyLock::new(|| {
    // The path may be wrapped in backticks; it holds no spaces, parentheses or colons.
    Regex::new(r"\[(\d+)\]\(\s*`?([^\s()`:]+)`?:(\d+)\s*\)").expect("static regex")
});

/// Every well-formed citation of `text`, in order. Malformed ones (no line
/// number, non-numeric index, overflowing numbers) are not citations and are ignored.
pub fn parse_citations(text: &str) -> Vec<Citation> {
    CITATION
        .captures_iter(text)
        .filter_map(|c| {
            Some(Citation {
                index: c[1].parse().ok()?,
                path: c[2].to_string(),
                line: c[3].parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let t = "The decoder fails here[1](json/decoder.py:345) because of \
                 `raw_decode`[2](`json/decoder.py`:332); see [x](a.py:1), [3](a.py), \
                 [4](b.py:99999999999999999999999) and [5]( lib/x.py:7 ).";
        let got = parse_citations(t);
        assert_eq!(
            got,
            vec![
                Citation {
                    index: 1,
                    path: "json/decoder.py".into(),
                    line: 345
                },
                Citation {
                    index: 2,
                    path: "json/decoder.py".into(),
                    line: 332
                },
                Citation {
                    index: 5,
                    path: "lib/x.py".into(),
                    line: 7
                },
            ]
        );
    }
}
