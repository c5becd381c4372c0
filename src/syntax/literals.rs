//! The text of literals: string escapes, `"""` dedenting, numbers and durations.

/// Unescapes a `"..."` body.
pub(super) fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A `"""` string: drop one leading newline and the common indentation.
pub(super) fn dedent(raw: &str) -> String {
    let body = raw.strip_prefix('\n').unwrap_or(raw);
    let body = body.strip_prefix("\r\n").unwrap_or(body);
    // Only spaces and tabs count as indentation, so slicing stays on character boundaries.
    let leading = |l: &str| l.bytes().take_while(|b| *b == b' ' || *b == b'\t').count();
    let indent = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(leading)
        .min()
        .unwrap_or(0);
    let mut out: Vec<&str> = body.lines().map(|l| &l[leading(l).min(indent)..]).collect();
    // The closing `"""` on its own line leaves an all-blank last line.
    if out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
        return out.join("\n") + "\n";
    }
    out.join("\n")
}

/// Whether a number literal's whole part fits 64 bits (its size: in an expression `-5` is
/// the negation of `5`, so the sign is not part of the literal there).
pub(super) fn number_fits(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let whole = digits.split('.').next().unwrap_or("");
    whole.parse::<u64>().is_ok()
}
