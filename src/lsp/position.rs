//! Byte offsets (what every span of the checker is) and LSP positions (a line and a
//! column counted in UTF-16 code units, what the protocol's default encoding says).

use lsp_types::{Position, Range};

use crate::source::Span;

/// Where each line of a text starts, to convert both ways without rescanning the text.
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex {
            starts,
            len: text.len(),
        }
    }

    /// The position of a byte offset; an offset inside a character counts from its start,
    /// one past the end is the end.
    pub fn position(&self, text: &str, offset: usize) -> Position {
        let mut offset = offset.min(self.len).min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts[line];
        let character: usize = text[start..offset].chars().map(char::len_utf16).sum();
        Position::new(line as u32, character as u32)
    }

    /// The 0-based line holding a byte offset, and where that line starts.
    pub fn line_of(&self, offset: usize) -> (usize, usize) {
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        (line, self.starts[line])
    }

    pub fn range(&self, text: &str, span: Span) -> Range {
        Range::new(
            self.position(text, span.start),
            self.position(text, span.end.max(span.start)),
        )
    }

    /// The byte offset of a position. A column past the line's end is its end (before its
    /// `\r\n` or `\n`), a line past the last one is the end of the text; a column that falls
    /// inside a character pair (half of a surrogate pair) is that character's start.
    pub fn offset(&self, text: &str, position: Position) -> usize {
        let line = position.line as usize;
        let Some(&start) = self.starts.get(line) else {
            return text.len();
        };
        let end = self.starts.get(line + 1).copied().unwrap_or(text.len());
        let line_text = &text[start..end];
        let content = line_text
            .strip_suffix('\n')
            .map_or(line_text, |t| t.strip_suffix('\r').unwrap_or(t));
        let mut units = 0usize;
        for (i, c) in content.char_indices() {
            let next = units + c.len_utf16();
            if next > position.character as usize {
                return start + i;
            }
            units = next;
        }
        start + content.len()
    }

    pub fn span(&self, text: &str, range: Range) -> Span {
        let start = self.offset(text, range.start);
        let end = self.offset(text, range.end).max(start);
        Span::new(start, end)
    }
}

/// `text` with the change of `range` to `new` applied (an incremental `didChange`).
pub fn apply_change(text: &mut String, range: Range, new: &str) {
    let index = LineIndex::new(text);
    let span = index.span(text, range);
    text.replace_range(span.start..span.end, new);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_utf16_code_units() {
        // `é` is 2 bytes and 1 unit; `𝄞` (U+1D11E) is 4 bytes and 2 units.
        let text = "a\né𝄞x\r\nlast";
        let index = LineIndex::new(text);
        let x = text.find('x').unwrap();
        assert_eq!(index.position(text, x), Position::new(1, 3));
        assert_eq!(index.offset(text, Position::new(1, 3)), x);
        // Inside the surrogate pair: the character's start.
        let clef = text.find('𝄞').unwrap();
        assert_eq!(index.offset(text, Position::new(1, 2)), clef);
        // Past the end of the line: before its `\r\n`.
        assert_eq!(index.offset(text, Position::new(1, 99)), x + 1);
        assert_eq!(index.offset(text, Position::new(9, 0)), text.len());
        assert_eq!(index.position(text, text.len()), Position::new(2, 4));
        // An offset inside a character counts from its start.
        assert_eq!(index.position(text, clef + 1), Position::new(1, 1));
    }

    #[test]
    fn an_incremental_change_replaces_its_range() {
        let mut text = "role a: llm {\n  é = 1\n}\n".to_string();
        apply_change(
            &mut text,
            Range::new(Position::new(1, 2), Position::new(1, 3)),
            "prompt",
        );
        assert_eq!(text, "role a: llm {\n  prompt = 1\n}\n");
    }
}
