//! Semantic tokens: the words of a workflow file by what they name (a role, a memory, a
//! type...), found by the index, and its comments, strings, numbers and keywords, found
//! by a scan of the text.

use std::collections::HashMap;

use lsp_types::{SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokensLegend};

use super::index::{BUILTIN_ROOTS, BUILTIN_TYPES, Index, Kind};
use super::position::LineIndex;

pub const TYPES: &[SemanticTokenType] = &[
    SemanticTokenType::KEYWORD,
    SemanticTokenType::TYPE,
    SemanticTokenType::CLASS,
    SemanticTokenType::ENUM_MEMBER,
    SemanticTokenType::VARIABLE,
    SemanticTokenType::PARAMETER,
    SemanticTokenType::PROPERTY,
    SemanticTokenType::FUNCTION,
    SemanticTokenType::NAMESPACE,
    SemanticTokenType::STRING,
    SemanticTokenType::NUMBER,
    SemanticTokenType::COMMENT,
    SemanticTokenType::OPERATOR,
    SemanticTokenType::METHOD,
];

const KEYWORD: u32 = 0;
const TYPE: u32 = 1;
const CLASS: u32 = 2;
const ENUM_MEMBER: u32 = 3;
const VARIABLE: u32 = 4;
const PARAMETER: u32 = 5;
const PROPERTY: u32 = 6;
const FUNCTION: u32 = 7;
const NAMESPACE: u32 = 8;
const STRING: u32 = 9;
const NUMBER: u32 = 10;
const COMMENT: u32 = 11;
const OPERATOR: u32 = 12;
const METHOD: u32 = 13;

pub const MODIFIERS: &[SemanticTokenModifier] = &[
    SemanticTokenModifier::DECLARATION,
    SemanticTokenModifier::DEFAULT_LIBRARY,
];
const DECLARATION: u32 = 1;
const DEFAULT_LIBRARY: u32 = 2;

pub fn legend() -> SemanticTokensLegend {
    SemanticTokensLegend {
        token_types: TYPES.to_vec(),
        token_modifiers: MODIFIERS.to_vec(),
    }
}

/// One token before encoding: a byte range on one line.
struct Raw {
    start: usize,
    end: usize,
    ty: u32,
    modifiers: u32,
}

fn kind_type(kind: Kind, exits: &[&str], name: &str) -> u32 {
    match kind {
        Kind::Node if exits.contains(&name) => ENUM_MEMBER,
        Kind::Node => CLASS,
        Kind::Type => TYPE,
        Kind::Memory => VARIABLE,
        Kind::Input => PARAMETER,
        Kind::Tool => METHOD,
        Kind::Provider | Kind::Environment => NAMESPACE,
        Kind::Template => STRING,
        Kind::Function => FUNCTION,
    }
}

pub fn tokens(text: &str, lines: &LineIndex, index: &Index, exits: &[&str]) -> Vec<SemanticToken> {
    let by_start: HashMap<usize, (Kind, bool, &str)> = index
        .occurrences
        .iter()
        .map(|o| (o.span.start, (o.kind, o.def, o.name.as_str())))
        .collect();
    let bytes = text.as_bytes();
    let mut raw: Vec<Raw> = Vec::new();
    let mut push = |start: usize, end: usize, ty: u32, modifiers: u32| {
        raw.push(Raw {
            start,
            end,
            ty,
            modifiers,
        })
    };
    let mut i = 0;
    let mut after_dot = false;
    while i < bytes.len() {
        let c = bytes[i];
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(text.len(), |e| i + e);
            push(i, end, COMMENT, 0);
            i = end;
        } else if let Some(body) = rest.strip_prefix("/*") {
            let end = body.find("*/").map_or(text.len(), |e| i + 2 + e + 2);
            push(i, end, COMMENT, 0);
            i = end;
        } else if let Some(body) = rest.strip_prefix("\"\"\"") {
            let end = body.find("\"\"\"").map_or(text.len(), |e| i + 3 + e + 3);
            push(i, end, STRING, 0);
            i = end;
        } else if c == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' && bytes[j] != b'\n' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(text.len());
            push(i, end, STRING, 0);
            i = end;
        } else if c.is_ascii_digit() {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'.') {
                j += 1;
            }
            push(i, j, NUMBER, 0);
            i = j;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                j += 1;
            }
            let word = &text[i..j];
            let next = text[j..].trim_start_matches([' ', '\t']);
            if let Some(&(kind, def, name)) = by_start.get(&i) {
                let modifiers = if def { DECLARATION } else { 0 };
                push(i, j, kind_type(kind, exits, name), modifiers);
            } else if after_dot {
                push(i, j, PROPERTY, 0);
            } else if super::KEYWORDS.contains(&word) {
                push(i, j, KEYWORD, 0);
            } else if BUILTIN_ROOTS.contains(&word) {
                push(i, j, VARIABLE, DEFAULT_LIBRARY);
            } else if BUILTIN_TYPES.contains(&word) || word == "list" || word == "map" {
                push(i, j, TYPE, DEFAULT_LIBRARY);
            } else if next.starts_with('=') && !next.starts_with("==")
                || next.starts_with(':')
                || next.starts_with('{')
            {
                push(i, j, PROPERTY, 0);
            }
            i = j;
            after_dot = false;
            continue;
        } else if rest.starts_with("->") {
            push(i, i + 2, OPERATOR, 0);
            i += 2;
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
        after_dot = c == b'.';
    }
    encode(text, lines, raw)
}

/// Relative encoding, one token a line (a comment or string over several lines is cut at
/// each line's end). Columns are counted on from the previous token of the same line, so a
/// line of a million tokens is read once, not once a token.
fn encode(text: &str, lines: &LineIndex, raw: Vec<Raw>) -> Vec<SemanticToken> {
    let mut out = Vec::with_capacity(raw.len());
    let (mut prev_line, mut prev_start) = (0u32, 0u32);
    // Where the last column was counted: its byte offset, line and column.
    let (mut at, mut at_line, mut at_col) = (0usize, usize::MAX, 0usize);
    for r in raw {
        let mut start = r.start;
        while start < r.end {
            let line_end = text[start..r.end].find('\n').map_or(r.end, |e| start + e);
            let piece = text[start..line_end].trim_end_matches('\r');
            if !piece.is_empty() {
                let (line, line_start) = lines.line_of(start);
                let column = if line == at_line && start >= at {
                    at_col + text[at..start].chars().map(char::len_utf16).sum::<usize>()
                } else {
                    text[line_start..start].chars().map(char::len_utf16).sum()
                };
                (at, at_line, at_col) = (start, line, column);
                let (line, column) = (line as u32, column as u32);
                let length: usize = piece.chars().map(char::len_utf16).sum();
                let delta_line = line - prev_line;
                let delta_start = if delta_line == 0 {
                    column - prev_start
                } else {
                    column
                };
                out.push(SemanticToken {
                    delta_line,
                    delta_start,
                    length: length as u32,
                    token_type: r.ty,
                    token_modifiers_bitset: r.modifiers,
                });
                prev_line = line;
                prev_start = column;
            }
            start = line_end + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (line, UTF-16 column, length, type) of each token.
    fn absolute(tokens: &[SemanticToken]) -> Vec<(u32, u32, u32, u32)> {
        let (mut line, mut col) = (0, 0);
        tokens
            .iter()
            .map(|t| {
                line += t.delta_line;
                col = if t.delta_line == 0 {
                    col + t.delta_start
                } else {
                    t.delta_start
                };
                (line, col, t.length, t.token_type)
            })
            .collect()
    }

    #[test]
    fn a_string_over_lines_is_cut_at_each_line_and_columns_are_utf16() {
        let text = "exit é when \"𝄞\" == \"\"\"a\nb\"\"\" // c\n";
        let lines = LineIndex::new(text);
        let got = absolute(&tokens(text, &lines, &Index::default(), &[]));
        assert_eq!(
            got,
            [
                (0, 0, 4, KEYWORD),
                (0, 7, 4, KEYWORD),
                (0, 12, 4, STRING),
                (0, 20, 4, STRING),
                (1, 0, 4, STRING),
                (1, 5, 4, COMMENT),
            ]
        );
    }
}
