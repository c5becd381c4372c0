//! What the syntax tree leaves out and the formatter needs: the comments, and where the
//! braces of a block are. One pass over the text, reading strings and comments the way
//! `grammar/rondo.pest` does, so a `//` inside a string is no comment and a `}` inside
//! a comment closes nothing.

use crate::source::Span;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub span: Span,
    /// As written, `//` or `/*` included; a line comment without its trailing blanks.
    pub text: String,
}

#[derive(Debug, Default)]
pub struct Scan {
    pub comments: Vec<Comment>,
    /// Every `{` of the code with the position of its `}` (the end of the text when it
    /// has none), in the order of the text.
    braces: Vec<(usize, usize)>,
    /// How many blocks hold each of `braces`.
    depths: Vec<usize>,
    /// Every string literal of the code, `"..."` or `"""..."""`, in the order of the text.
    strings: Vec<Span>,
    /// Each token of the code, in order: a word, a string, or one character.
    tokens: Vec<Span>,
}

pub fn scan(text: &str) -> Scan {
    let bytes = text.as_bytes();
    let mut scan = Scan::default();
    let mut open = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        match bytes[at] {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C => at += 1,
            b'/' if rest.starts_with(b"//") => {
                let end = find_from(bytes, at, b"\n").unwrap_or(bytes.len());
                scan.comment(text, at, end, true);
                at = end;
            }
            b'/' if rest.starts_with(b"/*") => {
                let end = find_from(bytes, at + 2, b"*/").map_or(bytes.len(), |e| e + 2);
                scan.comment(text, at, end, false);
                at = end;
            }
            b'"' => {
                let end = if rest.starts_with(b"\"\"\"") {
                    find_from(bytes, at + 3, b"\"\"\"").map_or(bytes.len(), |e| e + 3)
                } else {
                    quoted_end(bytes, at, b'"')
                };
                scan.tokens.push(Span::new(at, end));
                scan.strings.push(Span::new(at, end));
                at = end;
            }
            b'\'' => {
                let end = quoted_end(bytes, at, b'\'');
                scan.tokens.push(Span::new(at, end));
                at = end;
            }
            c if c == b'_' || c.is_ascii_alphanumeric() => {
                let start = at;
                while at < bytes.len() && (bytes[at] == b'_' || bytes[at].is_ascii_alphanumeric()) {
                    at += 1;
                }
                scan.tokens.push(Span::new(start, at));
            }
            c => {
                let len = text[at..].chars().next().map_or(1, char::len_utf8);
                scan.tokens.push(Span::new(at, at + len));
                if c == b'{' {
                    scan.depths.push(open.len());
                    open.push(scan.braces.len());
                    scan.braces.push((at, bytes.len()));
                } else if c == b'}'
                    && let Some(index) = open.pop()
                {
                    scan.braces[index].1 = at;
                }
                at += len;
            }
        }
    }
    scan
}

fn find_from(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The end of a `"..."` or `'...'` literal starting at `at`: after its closing quote, or
/// at the end of its line when it has none.
fn quoted_end(bytes: &[u8], at: usize, quote: u8) -> usize {
    let mut i = at + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

impl Scan {
    fn comment(&mut self, text: &str, start: usize, end: usize, line: bool) {
        let written = &text[start..end];
        let written = if line { written.trim_end() } else { written };
        self.comments.push(Comment {
            span: Span::new(start, end),
            text: written.to_string(),
        });
    }

    /// The block whose `{` is the first token at or after `at`: from its `{` to its `}`.
    pub fn block_at(&self, at: usize) -> Option<Span> {
        let token = self
            .tokens
            .get(self.tokens.partition_point(|t| t.start < at))?;
        let index = self.braces.partition_point(|&(open, _)| open < token.start);
        match self.braces.get(index) {
            Some(&(open, close)) if open == token.start => Some(Span::new(open, close)),
            _ => None,
        }
    }

    /// The blocks `word { ... }` inside `within`, held by `depth` blocks: where `word`
    /// starts, and the block from its `{` to its `}`.
    pub fn blocks_after_word(
        &self,
        text: &str,
        within: Span,
        word: &str,
        depth: usize,
    ) -> Vec<(usize, Span)> {
        let first = self
            .braces
            .partition_point(|&(open, _)| open < within.start);
        let mut found = Vec::new();
        for (index, &(open, close)) in self.braces.iter().enumerate().skip(first) {
            if open >= within.end {
                break;
            }
            let token = self.tokens.partition_point(|t| t.start < open);
            let Some(before) = token.checked_sub(1).map(|t| self.tokens[t]) else {
                continue;
            };
            if self.depths[index] == depth && &text[before.start..before.end] == word {
                found.push((before.start, Span::new(open, close)));
            }
        }
        found
    }

    /// The string literals inside `within`, in order.
    pub fn strings_in(&self, within: Span) -> &[Span] {
        let first = self.strings.partition_point(|s| s.start < within.start);
        let last = self.strings.partition_point(|s| s.start < within.end);
        &self.strings[first..last.max(first)]
    }
}
