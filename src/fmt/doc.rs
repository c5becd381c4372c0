//! A small pretty-printer in the manner of Wadler's "prettier printer" (and of Prettier's
//! `fill`): a document says where a line may break; a group is printed on one line when it
//! fits in [`WIDTH`] columns, else its lines break. Rendering is iterative: no recursion
//! on the document, whatever its depth.

use std::borrow::Cow;

/// The widest line the formatter aims for.
pub const WIDTH: usize = 100;
/// One level of indentation.
pub const INDENT: usize = 2;

#[derive(Debug, Clone)]
pub enum Doc {
    Text(Cow<'static, str>),
    /// A `"""` string as written: its lines are indented anew where it is printed.
    Raw(String),
    /// A space, or a line break.
    Line,
    /// Nothing, or a line break.
    SoftLine,
    /// Printed only when its group breaks (a trailing comma).
    IfBreak(&'static str),
    /// What is inside is indented one level more on the lines it breaks onto.
    Nest(Box<Doc>),
    Group(Box<Doc>),
    /// Items and separators, alternating: a separator breaks only when the item after it
    /// does not fit on the line.
    Fill(Vec<Doc>),
    Concat(Vec<Doc>),
}

pub fn text(s: impl Into<Cow<'static, str>>) -> Doc {
    Doc::Text(s.into())
}

pub fn concat(docs: Vec<Doc>) -> Doc {
    Doc::Concat(docs)
}

pub fn group(doc: Doc) -> Doc {
    Doc::Group(Box::new(doc))
}

pub fn nest(doc: Doc) -> Doc {
    Doc::Nest(Box::new(doc))
}

/// `open`, the items separated by `,`, `close`: on one line, or one item a line (with a
/// trailing comma when `trailing`).
pub fn bracketed(open: &'static str, items: Vec<Doc>, close: &'static str, trailing: bool) -> Doc {
    if items.is_empty() {
        return text(format!("{open}{close}"));
    }
    let pad = if open == "{" {
        Doc::Line
    } else {
        Doc::SoftLine
    };
    let mut inner = vec![pad.clone()];
    let count = items.len();
    for (i, item) in items.into_iter().enumerate() {
        inner.push(item);
        if i + 1 < count {
            inner.push(text(","));
            inner.push(Doc::Line);
        }
    }
    if trailing {
        inner.push(Doc::IfBreak(","));
    }
    group(concat(vec![
        text(open),
        nest(concat(inner)),
        pad,
        text(close),
    ]))
}

/// Like [`bracketed`], but the items fill each line before the next.
pub fn filled(open: &'static str, items: Vec<Doc>, close: &'static str) -> Doc {
    if items.is_empty() {
        return text(format!("{open}{close}"));
    }
    let count = items.len();
    let mut parts = Vec::with_capacity(count * 2);
    for (i, item) in items.into_iter().enumerate() {
        if i + 1 < count {
            parts.push(concat(vec![item, text(",")]));
            parts.push(Doc::Line);
        } else {
            parts.push(item);
        }
    }
    group(concat(vec![
        text(open),
        nest(concat(vec![Doc::SoftLine, Doc::Fill(parts)])),
        Doc::SoftLine,
        text(close),
    ]))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Flat,
    Break,
}

#[derive(Clone, Copy)]
enum Item<'d> {
    Doc(&'d Doc),
    /// The rest of a fill, from one of its items on.
    Fill(&'d [Doc]),
}

#[derive(Clone, Copy)]
struct Cmd<'d> {
    indent: usize,
    mode: Mode,
    item: Item<'d>,
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// Renders `doc` starting at `column`, its broken lines indented by `indent` spaces (plus
/// their nesting). The first line is not indented: the caller is there already.
pub fn render(doc: &Doc, indent: usize, column: usize) -> String {
    let mut out = String::new();
    let mut pos = column;
    let mut cmds = vec![Cmd {
        indent,
        mode: Mode::Break,
        item: Item::Doc(doc),
    }];
    while let Some(cmd) = cmds.pop() {
        let Cmd { indent, mode, item } = cmd;
        let doc = match item {
            Item::Doc(doc) => doc,
            Item::Fill(parts) => {
                fill(&mut cmds, indent, mode, parts, pos);
                continue;
            }
        };
        match doc {
            Doc::Text(s) => {
                out.push_str(s);
                pos += width(s);
            }
            Doc::Raw(s) => {
                let s = reindent_raw(s, indent);
                out.push_str(&s);
                pos = match s.rfind('\n') {
                    Some(at) => width(&s[at + 1..]),
                    None => pos + width(&s),
                };
            }
            Doc::Line | Doc::SoftLine if mode == Mode::Break => {
                out.push('\n');
                out.extend(std::iter::repeat_n(' ', indent));
                pos = indent;
            }
            Doc::Line => {
                out.push(' ');
                pos += 1;
            }
            Doc::SoftLine => {}
            Doc::IfBreak(s) => {
                if mode == Mode::Break {
                    out.push_str(s);
                    pos += width(s);
                }
            }
            Doc::Nest(inner) => cmds.push(Cmd {
                indent: indent + INDENT,
                mode,
                item: Item::Doc(inner),
            }),
            Doc::Group(inner) => {
                let flat = Cmd {
                    indent,
                    mode: Mode::Flat,
                    item: Item::Doc(inner),
                };
                if mode == Mode::Flat || fits(&[flat], &cmds, room(pos), false) {
                    cmds.push(flat);
                } else {
                    cmds.push(Cmd {
                        mode: Mode::Break,
                        ..flat
                    });
                }
            }
            Doc::Concat(docs) => cmds.extend(docs.iter().rev().map(|d| Cmd {
                indent,
                mode,
                item: Item::Doc(d),
            })),
            Doc::Fill(parts) => fill(&mut cmds, indent, mode, parts, pos),
        }
    }
    out
}

fn room(pos: usize) -> isize {
    WIDTH as isize - pos as isize
}

/// The next step of a fill: its first item, on this line when it fits, and the separator
/// after it, broken when the second item would not fit beside the first.
fn fill<'d>(cmds: &mut Vec<Cmd<'d>>, indent: usize, mode: Mode, parts: &'d [Doc], pos: usize) {
    let at = |mode, doc| Cmd {
        indent,
        mode,
        item: Item::Doc(doc),
    };
    let Some(content) = parts.first() else {
        return;
    };
    let content_fits = fits(&[at(Mode::Flat, content)], &[], room(pos), true);
    let content_cmd = at(
        if content_fits {
            Mode::Flat
        } else {
            Mode::Break
        },
        content,
    );
    let Some(separator) = parts.get(1) else {
        cmds.push(content_cmd);
        return;
    };
    let Some(second) = parts.get(2) else {
        let separator_mode = if content_fits {
            Mode::Flat
        } else {
            Mode::Break
        };
        cmds.push(at(separator_mode, separator));
        cmds.push(content_cmd);
        return;
    };
    let both_fit = fits(
        &[
            at(Mode::Flat, content),
            at(Mode::Flat, separator),
            at(Mode::Flat, second),
        ],
        &[],
        room(pos),
        true,
    );
    cmds.push(Cmd {
        indent,
        mode,
        item: Item::Fill(&parts[2..]),
    });
    cmds.push(at(
        if both_fit { Mode::Flat } else { Mode::Break },
        separator,
    ));
    cmds.push(content_cmd);
}

/// Whether `next` fits in `room` columns, followed by what `rest` prints up to its first
/// line break (unless `must_be_flat`, which looks at `next` alone).
fn fits(next: &[Cmd<'_>], rest: &[Cmd<'_>], room: isize, must_be_flat: bool) -> bool {
    let mut room = room;
    let mut stack: Vec<(Mode, Item<'_>)> = next.iter().rev().map(|c| (c.mode, c.item)).collect();
    let mut rest_index = rest.len();
    loop {
        if room < 0 {
            return false;
        }
        let (mode, item) = match stack.pop() {
            Some(entry) => entry,
            None if must_be_flat || rest_index == 0 => return true,
            None => {
                rest_index -= 1;
                (rest[rest_index].mode, rest[rest_index].item)
            }
        };
        let doc = match item {
            Item::Doc(doc) => doc,
            Item::Fill(parts) => {
                stack.extend(parts.iter().rev().map(|d| (mode, Item::Doc(d))));
                continue;
            }
        };
        match doc {
            Doc::Text(s) => room -= width(s) as isize,
            Doc::Raw(s) => match s.find('\n') {
                Some(at) => return room >= width(&s[..at]) as isize,
                None => room -= width(s) as isize,
            },
            Doc::Line | Doc::SoftLine if mode == Mode::Break => return true,
            Doc::Line => room -= 1,
            Doc::SoftLine => {}
            Doc::IfBreak(s) => {
                if mode == Mode::Break {
                    room -= width(s) as isize;
                }
            }
            Doc::Nest(inner) | Doc::Group(inner) => stack.push((mode, Item::Doc(inner))),
            Doc::Concat(docs) | Doc::Fill(docs) => {
                stack.extend(docs.iter().rev().map(|d| (mode, Item::Doc(d))))
            }
        }
    }
}

/// A `"""` string whose text starts on the line after its quotes, its lines moved so the
/// text is one level deeper than `indent` and the closing quotes at `indent`. The value
/// stays the same: the parser drops the first newline and the indentation all the text's
/// lines share (see `syntax::literals::dedent`), and every line moves by the same amount.
/// A string written otherwise is left as it is.
pub fn reindent_raw(raw: &str, indent: usize) -> String {
    let Some(body) = raw
        .strip_prefix("\"\"\"\n")
        .and_then(|b| b.strip_suffix("\"\"\""))
    else {
        return raw.to_string();
    };
    let leading = |l: &str| l.bytes().take_while(|b| *b == b' ' || *b == b'\t').count();
    let lines: Vec<&str> = body.split('\n').collect();
    let last = lines.len() - 1;
    let Some(shared) = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| leading(l))
        .min()
    else {
        return raw.to_string();
    };
    let target = indent + INDENT;
    let mut out = String::from("\"\"\"\n");
    for (i, line) in lines.iter().enumerate() {
        if i == last && line.trim().is_empty() {
            // The line of the closing quotes. Empty, it ends the text without a newline;
            // with blanks, with one: only its being empty counts.
            if line.is_empty() || indent == 0 {
                out.push_str(line);
            } else {
                out.extend(std::iter::repeat_n(' ', indent));
            }
            break;
        }
        // A blank line keeps what it has past the shared indentation; a line of text
        // has all of it.
        let own = leading(line);
        let rest = &line[own.min(shared)..];
        if !rest.is_empty() {
            if own >= shared {
                out.extend(std::iter::repeat_n(' ', target));
            }
            out.push_str(rest);
        }
        if i < last {
            out.push('\n');
        }
    }
    out.push_str("\"\"\"");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_string_moves_as_a_whole() {
        let raw = "\"\"\"\n      one\n        two\n\n    \"\"\"";
        assert_eq!(
            reindent_raw(raw, 2),
            "\"\"\"\n    one\n      two\n\n  \"\"\""
        );
        let inline = "\"\"\"one\n  two\"\"\"";
        assert_eq!(reindent_raw(inline, 2), inline);
    }
}
