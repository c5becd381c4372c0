//! The names a tera template reads, with where they are written: tera's own tree keeps no
//! positions, so the tags are scanned here. A name bound in the template (a loop
//! variable, a `set`, a macro's argument) is its own and is left out, wherever it is bound.

use crate::source::Span;

/// A dotted path a template reads: `memory.plan`, `planner.title`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub parts: Vec<(String, Span)>,
}

/// A template another one names (`{% include "x.tera" %}`): its name and where, quotes
/// left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub span: Span,
}

const KEYWORDS: &[&str] = &[
    "if",
    "elif",
    "else",
    "endif",
    "for",
    "in",
    "endfor",
    "set",
    "set_global",
    "include",
    "import",
    "extends",
    "block",
    "endblock",
    "macro",
    "endmacro",
    "filter",
    "endfilter",
    "raw",
    "endraw",
    "as",
    "and",
    "or",
    "not",
    "is",
    "true",
    "false",
    "True",
    "False",
    "none",
    "None",
    "ignore",
    "missing",
    "loop",
    "super",
    "break",
    "continue",
    "self",
];

#[derive(Debug, Clone)]
enum Token {
    Word { parts: Vec<(String, Span)> },
    Str { span: Span },
    Punct(char),
}

/// The tags of a template (`{{ ... }}`, `{% ... %}`) as tokens, comments and raw blocks
/// left out.
fn tags(text: &str) -> Vec<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut raw = false;
    while let Some(found) = text[i..].find('{') {
        let at = i + found;
        let close = match bytes.get(at + 1) {
            Some(b'{') => "}}",
            Some(b'%') => "%}",
            Some(b'#') => {
                i = text[at..].find("#}").map_or(text.len(), |e| at + e + 2);
                continue;
            }
            _ => {
                i = at + 1;
                continue;
            }
        };
        let (tokens, end) = tokenize(text, at + 2, close);
        let first = tokens.iter().find_map(|t| match t {
            Token::Word { parts } => Some(parts[0].0.as_str()),
            _ => None,
        });
        if close == "%}" && first == Some("endraw") {
            raw = false;
        } else if !raw {
            if close == "%}" && first == Some("raw") {
                raw = true;
            }
            out.push(tokens);
        }
        i = end;
    }
    out
}

fn tokenize(text: &str, from: usize, close: &str) -> (Vec<Token>, usize) {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = from;
    while i < bytes.len() {
        let c = bytes[i];
        if text[i..].starts_with(close) {
            return (tokens, i + close.len());
        }
        if c.is_ascii_whitespace() || c == b'-' && text[i + 1..].starts_with(close) {
            i += 1;
        } else if matches!(c, b'"' | b'\'' | b'`') {
            let end = text[i + 1..]
                .find(c as char)
                .map_or(text.len(), |e| i + 1 + e + 1);
            tokens.push(Token::Str {
                span: Span::new(i, end),
            });
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let mut parts = Vec::new();
            let mut start = i;
            loop {
                let mut end = start;
                while end < bytes.len()
                    && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_')
                {
                    end += 1;
                }
                parts.push((text[start..end].to_string(), Span::new(start, end)));
                let next = bytes.get(end + 1).copied().unwrap_or(0);
                if bytes.get(end) == Some(&b'.') && (next.is_ascii_alphabetic() || next == b'_') {
                    start = end + 1;
                } else {
                    i = end;
                    break;
                }
            }
            tokens.push(Token::Word { parts });
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            tokens.push(Token::Punct(ch));
            i += ch.len_utf8();
        }
    }
    (tokens, text.len())
}

fn word(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token::Word { parts }) if parts.len() == 1 => Some(parts[0].0.as_str()),
        _ => None,
    }
}

/// Names the template binds itself: loop variables, `set` names, macros and their
/// arguments.
fn locals(tags: &[Vec<Token>]) -> Vec<String> {
    let mut out = vec!["loop".to_string()];
    for tag in tags {
        match word(tag.first()) {
            Some("for") => {
                for t in tag[1..].iter() {
                    match t {
                        Token::Word { parts } if parts[0].0 == "in" => break,
                        Token::Word { parts } => out.push(parts[0].0.clone()),
                        _ => {}
                    }
                }
            }
            Some("set" | "set_global") => {
                if let Some(name) = word(tag.get(1)) {
                    out.push(name.to_string());
                }
            }
            Some("macro") => {
                out.extend(tag[1..].iter().filter_map(|t| match t {
                    Token::Word { parts } => Some(parts[0].0.clone()),
                    _ => None,
                }));
            }
            _ => {}
        }
    }
    out
}

/// Every path the template reads whose root it does not bind itself.
pub fn reads(text: &str) -> Vec<Read> {
    let tags = tags(text);
    let locals = locals(&tags);
    let mut out = Vec::new();
    for tag in &tags {
        for (i, t) in tag.iter().enumerate() {
            let Token::Word { parts } = t else { continue };
            let root = parts[0].0.as_str();
            if KEYWORDS.contains(&root) || locals.iter().any(|l| l == root) {
                continue;
            }
            let prev = i.checked_sub(1).and_then(|p| tag.get(p));
            let before_prev = i.checked_sub(2).and_then(|p| tag.get(p));
            let after_filter = matches!(prev, Some(Token::Punct('|')));
            let tester = word(prev) == Some("is")
                || (word(prev) == Some("not") && word(before_prev) == Some("is"));
            let next = tag.get(i + 1);
            let called = matches!(next, Some(Token::Punct('(')));
            let keyword_arg = matches!(next, Some(Token::Punct('=')))
                && !matches!(tag.get(i + 2), Some(Token::Punct('=')));
            if after_filter || tester || called || keyword_arg {
                continue;
            }
            out.push(Read {
                parts: parts.clone(),
            });
        }
    }
    out
}

/// The templates this one includes, extends or imports, by name.
pub fn named(text: &str) -> Vec<Named> {
    let mut out = Vec::new();
    for tag in tags(text) {
        if !matches!(word(tag.first()), Some("include" | "extends" | "import")) {
            continue;
        }
        for t in &tag[1..] {
            if let Token::Str { span } = t
                && span.end >= span.start + 2
            {
                let inner = Span::new(span.start + 1, span.end - 1);
                out.push(Named {
                    name: text[inner.start..inner.end].to_string(),
                    span: inner,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(text: &str) -> Vec<String> {
        reads(text)
            .into_iter()
            .map(|r| {
                r.parts
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(".")
            })
            .collect()
    }

    #[test]
    fn reads_leave_out_locals_filters_testers_and_calls() {
        let text = "Q: {{ input.question | truncate(length=80) }}\n\
            {% for s in memory.plan %}{{ s.title }} {{ loop.index }}{% endfor %}\n\
            {% if planner.invalid is defined %}{{ range(end=3) }}{% endif %}\n\
            {# memory.hidden #}{% set n = verifier.reason %}{{ n }} {{ \"memory.x\" }}\n\
            {% raw %}{{ memory.raw }}{% endraw %}{{- round | pad(width=2) -}}";
        assert_eq!(
            roots(text),
            [
                "input.question",
                "memory.plan",
                "planner.invalid",
                "verifier.reason",
                "round"
            ]
        );
        let plan = reads(text).into_iter().nth(1).unwrap();
        assert_eq!(&text[plan.parts[1].1.start..plan.parts[1].1.end], "plan");
    }

    #[test]
    fn named_templates_are_the_strings_of_include_extends_import() {
        let text = "{% extends \"base.tera\" %}{% include \"parts/tools.tera\" %}{{ \"x.tera\" }}";
        let names: Vec<String> = named(text).into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["base.tera", "parts/tools.tera"]);
    }
}
