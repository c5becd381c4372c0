//! Stage 1: source text → [`Ast`] with spans, plus the syntax diagnostics.
//!
//! The grammar (`grammar/rondo.pest`) accepts any line it does not understand as a
//! `bad_line`, so one bad line yields one diagnostic and the rest of the file is parsed.

pub mod ast;

use pest::Parser;
use pest::iterators::Pair;

pub use ast::*;

use crate::diagnostics::{Diagnostic, Diagnostics};
use crate::source::{SourceFile, Span};

// The derive lives here so `Rule` is in scope for every conversion function below.
#[derive(pest_derive::Parser)]
#[grammar = "../grammar/rondo.pest"]
struct RondoParser;

/// Parses a whole file. Never fails: problems are diagnostics.
pub fn parse(file: &SourceFile) -> (Ast, Diagnostics) {
    let text: &str = &file.text;
    let (ast, diagnostics) = parse_text(text);
    // One missing `}` would otherwise turn every later line into its own error.
    if let Some((opening, closed)) = close_unclosed_block(text, &diagnostics) {
        let (fixed_ast, mut fixed) = parse_text(&closed);
        if fixed.error_count() < diagnostics.error_count() {
            fixed.push(
                Diagnostic::error(
                    "rondo::syntax::unclosed_block",
                    "unclosed `{`: this block is never closed",
                )
                .label(opening, "opened here, no matching `}`")
                .help("add the missing `}` where the block ends"),
            );
            return (fixed_ast, fixed);
        }
    }
    (ast, diagnostics)
}

/// A block header the parser rejected as a whole line (its body lines recover one by one,
/// so only a missing `}` makes the header itself fail): the source with a `}` in place of
/// the newline before the next top-level line, so every byte offset stays the same.
fn close_unclosed_block(text: &str, diagnostics: &Diagnostics) -> Option<(Span, String)> {
    const HEADERS: &[&str] = &[
        "workflow",
        "memory",
        "provider",
        "tool",
        "environment",
        "role",
        "test",
        "type",
        "exit",
    ];
    let opening = diagnostics.iter().find_map(|d| {
        let span = d.primary_span();
        let line = text.get(span.start..span.end)?.trim_end();
        let word = line.split_whitespace().next()?;
        let at_line_start = span.start == 0 || text.as_bytes().get(span.start - 1) == Some(&b'\n');
        (d.code == "rondo::syntax::invalid_line"
            && at_line_start
            && HEADERS.contains(&word)
            && line.ends_with('{'))
        .then_some(span)
    })?;
    let top_level = regex::Regex::new(r"^(workflow|import|type|memory|provider|tool|environment|role|exit|test)\b|^(start|[A-Za-z_][A-Za-z0-9_]*)\s*->").ok()?;
    let mut closed = text.to_string();
    let mut offset = opening.end;
    for line in text[opening.end..].split_inclusive('\n') {
        if offset > opening.end && top_level.is_match(line) {
            // `offset - 1` is the newline that ends the previous line.
            closed.replace_range(offset - 1..offset, "}");
            return Some((opening, closed));
        }
        offset += line.len();
    }
    // At the end of the file the `}` takes the place of trailing whitespace, so no span
    // points past the real text; with none there, the original diagnostics stand.
    let last = closed.len().checked_sub(1)?;
    if !closed.as_bytes()[last].is_ascii_whitespace() {
        return None;
    }
    closed.replace_range(last.., "}");
    Some((opening, closed))
}

fn parse_text(text: &str) -> (Ast, Diagnostics) {
    let mut builder = Builder {
        diagnostics: Diagnostics::default(),
        depth: 0,
    };
    let ast = match RondoParser::parse(Rule::file, text) {
        Ok(mut pairs) => match pairs.next() {
            Some(pair) => builder.file(pair),
            None => Ast::default(),
        },
        Err(error) => {
            builder.diagnostics.push(pest_error(error));
            Ast::default()
        }
    };
    (ast, builder.diagnostics)
}

/// Parses one expression (used by tests and the `--input` flag).
pub fn parse_expr(text: &str) -> Result<Expr, Diagnostic> {
    let mut pairs = RondoParser::parse(Rule::expr, text).map_err(pest_error)?;
    let pair = pairs
        .next()
        .ok_or_else(|| Diagnostic::error("rondo::syntax::expression", "empty expression"))?;
    // pest may have skipped whitespace after the expression; anything else is extra text.
    if !text[pair.as_span().end()..].trim().is_empty() {
        return Err(Diagnostic::error(
            "rondo::syntax::expression",
            "unexpected text after the expression",
        )
        .label(
            Span::new(pair.as_span().end(), text.len()),
            "not understood",
        ));
    }
    Ok(Builder {
        diagnostics: Diagnostics::default(),
        depth: 0,
    }
    .expr(pair))
}

fn pest_error(error: pest::error::Error<Rule>) -> Diagnostic {
    let span = match error.location {
        pest::error::InputLocation::Pos(p) => Span::new(p, p),
        pest::error::InputLocation::Span((s, e)) => Span::new(s, e),
    };
    let expected = match &error.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut words: Vec<String> = positives.iter().filter_map(|r| rule_word(*r)).collect();
            words.sort();
            words.dedup();
            words
        }
        pest::error::ErrorVariant::CustomError { .. } => Vec::new(),
    };
    let text = if expected.is_empty() {
        "unexpected input".to_string()
    } else {
        format!("expected {}", expected.join(", "))
    };
    Diagnostic::error("rondo::syntax::unexpected", format!("syntax error: {text}"))
        .label(span, text)
        .help("an unclosed `{`, `[`, `(` or `\"\"\"` is the usual cause")
}

fn rule_word(rule: Rule) -> Option<String> {
    let word = match rule {
        Rule::EOI => "end of file",
        Rule::ident | Rule::attr_name | Rule::path_root => "a name",
        Rule::string | Rule::raw_string => "a string",
        Rule::number => "a number",
        Rule::expr => "an expression",
        Rule::value => "a value",
        Rule::type_expr | Rule::type_union => "a type",
        _ => return Some(format!("`{rule:?}`")),
    };
    Some(word.to_string())
}

struct Builder {
    diagnostics: Diagnostics,
    /// Current expression nesting, bounded so hostile input cannot overflow the stack.
    depth: usize,
}

const MAX_EXPR_DEPTH: usize = 128;

fn span(pair: &Pair<'_, Rule>) -> Span {
    Span::from_pest(pair.as_span())
}

fn ident(pair: Pair<'_, Rule>) -> Ident {
    Ident {
        name: pair.as_str().to_string(),
        span: span(&pair),
    }
}

/// Unescapes a `"..."` body.
fn unescape(raw: &str) -> String {
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
fn dedent(raw: &str) -> String {
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

/// A map key: a name or a quoted string.
fn map_key(pair: Pair<'_, Rule>) -> Ident {
    if pair.as_rule() == Rule::string {
        Ident {
            span: span(&pair),
            name: string_value(pair),
        }
    } else {
        ident(pair)
    }
}

fn string_value(pair: Pair<'_, Rule>) -> String {
    match pair.as_rule() {
        Rule::raw_string => dedent(pair.into_inner().next().map_or("", |p| p.as_str())),
        _ => unescape(pair.into_inner().next().map_or("", |p| p.as_str())),
    }
}

/// Whether a number literal's whole part fits 64 bits (its size: in an expression `-5` is
/// the negation of `5`, so the sign is not part of the literal there).
fn number_fits(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let whole = digits.split('.').next().unwrap_or("");
    whole.parse::<u64>().is_ok()
}

/// Whether a duration literal's milliseconds fit 64 bits.
fn duration_fits(text: &str) -> bool {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let factor: u64 = match &text[digits..] {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => 3_600_000,
    };
    text[..digits]
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .is_some()
}

fn parse_duration_ms(text: &str) -> u64 {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().unwrap_or(u64::MAX);
    let unit = &text[digits.len()..];
    let factor = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => 3_600_000,
    };
    n.saturating_mul(factor)
}

impl Builder {
    /// A number literal; one past the 64-bit range is reported, never clamped.
    fn number(&mut self, pair: &Pair<'_, Rule>) -> f64 {
        let text = pair.as_str();
        if !number_fits(text) {
            self.too_large(span(pair), "this number does not fit in 64 bits");
        }
        text.parse().unwrap_or(f64::NAN)
    }

    fn duration(&mut self, pair: &Pair<'_, Rule>) -> u64 {
        let text = pair.as_str();
        if !duration_fits(text) {
            self.too_large(
                span(pair),
                "this duration does not fit in 64 bits of milliseconds",
            );
        }
        parse_duration_ms(text)
    }

    fn too_large(&mut self, at: Span, message: &str) {
        self.diagnostics.push(
            Diagnostic::error("rondo::syntax::number_too_large", message)
                .label(at, "past the 64-bit range")
                .help("a number's whole part is at most 18446744073709551615 either side of zero; write a smaller value"),
        );
    }

    fn bad_line(&mut self, pair: Pair<'_, Rule>, context: &str) {
        let text = pair.as_str().trim();
        let word = text.split_whitespace().next().unwrap_or("");
        let help = match context {
            "top" => did_you_mean_keyword(word).unwrap_or_else(|| {
                "a line starts with `workflow`, `import`, `type`, `memory`, `provider`, `tool`, `environment`, `role`, `exit`, `test`, or is a route `a -> b`".to_string()
            }),
            "update" => "an update is `set name = expr` or `name.op(args)`, e.g. `plan.append(output)`".to_string(),
            "field" => "a field is `name: type`, e.g. `title: string` or `status: \"todo\" | \"done\"`".to_string(),
            "test" => "a test line is `input x = expr`, `reply role = \"...\"`, `expect exit NAME`, `expect path [..]`, `expect artifact \"name\"` or `expect <expression>`".to_string(),
            _ => "an attribute is `name = value`; a nested block is `name { ... }`".to_string(),
        };
        let what = match context {
            "top" => "this line is not a declaration or a route",
            "update" => "this line is not a memory update",
            "field" => "this line is not a field declaration",
            "test" => "this line is not a test statement",
            _ => "this line is not understood here",
        };
        self.diagnostics.push(
            Diagnostic::error("rondo::syntax::invalid_line", what)
                .label(span(&pair), "not understood")
                .help(help),
        );
    }

    fn file(&mut self, pair: Pair<'_, Rule>) -> Ast {
        let mut ast = Ast::default();
        for item in pair.into_inner() {
            match item.as_rule() {
                Rule::workflow_decl => {
                    let decl = self.workflow(item);
                    if ast.workflow.is_some() {
                        ast.extra_headers.push(decl.name.span);
                    } else {
                        ast.workflow = Some(decl);
                    }
                }
                Rule::import_decl => ast.imports.push(self.import(item)),
                Rule::type_decl => ast.types.push(self.type_decl(item)),
                Rule::memory_decl => {
                    for entry in item.into_inner() {
                        match entry.as_rule() {
                            Rule::memory_entry => ast.memory.push(self.memory_entry(entry)),
                            _ => self.bad_line(entry, "block"),
                        }
                    }
                }
                Rule::provider_decl => ast.providers.push(self.block_decl(item)),
                Rule::environment_decl => ast.environments.push(self.block_decl(item)),
                Rule::tool_decl => ast.tools.push(self.tool_decl(item)),
                Rule::role_decl => ast.roles.push(self.role(item)),
                Rule::exit_decl => ast.exits.push(self.exit(item)),
                Rule::route_decl => ast.routes.push(self.route(item)),
                Rule::artifact_decl => {
                    if let Some(a) = self.artifact(item) {
                        ast.artifacts.push(a);
                    }
                }
                Rule::test_decl => ast.tests.push(self.test(item)),
                Rule::bad_line => self.bad_line(item, "top"),
                _ => {}
            }
        }
        ast
    }

    fn workflow(&mut self, pair: Pair<'_, Rule>) -> WorkflowDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let mut decl = WorkflowDecl {
            name,
            inputs: Vec::new(),
            attrs: Vec::new(),
            span: s,
        };
        for item in inner {
            match item.as_rule() {
                Rule::input_decl => {
                    let s = span(&item);
                    let mut parts = item.into_inner();
                    let (Some(name), Some(ty)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    decl.inputs.push(InputDecl {
                        name: ident(name),
                        ty: self.type_expr(ty),
                        default: parts.next().map(|e| self.expr(e)),
                        span: s,
                    });
                }
                Rule::attr | Rule::attr_block => decl.attrs.push(self.attr(item)),
                _ => self.bad_line(item, "block"),
            }
        }
        decl
    }

    fn import(&mut self, pair: Pair<'_, Rule>) -> ImportDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let kind = match inner.next().map(|p| p.as_str().to_string()).as_deref() {
            Some("providers") => ImportKind::Providers,
            _ => ImportKind::Tool,
        };
        let (path, path_span) = inner
            .next()
            .map(|p| (span(&p), string_value(p)))
            .map(|(sp, v)| (v, sp))
            .unwrap_or_default();
        ImportDecl {
            kind,
            path,
            path_span,
            span: s,
        }
    }

    fn attrs_of(&mut self, pairs: pest::iterators::Pairs<'_, Rule>) -> Vec<Attr> {
        let mut attrs = Vec::new();
        for item in pairs {
            match item.as_rule() {
                Rule::attr | Rule::attr_block => attrs.push(self.attr(item)),
                _ => self.bad_line(item, "block"),
            }
        }
        attrs
    }

    fn attr(&mut self, pair: Pair<'_, Rule>) -> Attr {
        let s = span(&pair);
        let is_block = pair.as_rule() == Rule::attr_block;
        let mut inner = pair.into_inner();
        let key = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let value = if is_block {
            Value {
                kind: ValueKind::Block(self.attrs_of(inner)),
                span: s,
            }
        } else {
            match inner.next() {
                Some(v) => self.value(v),
                None => Value {
                    kind: ValueKind::Null,
                    span: s,
                },
            }
        };
        Attr {
            key,
            value,
            span: s,
        }
    }

    fn value(&mut self, pair: Pair<'_, Rule>) -> Value {
        let s = span(&pair);
        let pair = if pair.as_rule() == Rule::value {
            match pair.into_inner().next() {
                Some(p) => p,
                None => {
                    return Value {
                        kind: ValueKind::Null,
                        span: s,
                    };
                }
            }
        } else {
            pair
        };
        let kind = match pair.as_rule() {
            Rule::string | Rule::raw_string => ValueKind::String(string_value(pair)),
            Rule::duration => ValueKind::Duration(self.duration(&pair)),
            Rule::number => ValueKind::Number(self.number(&pair)),
            Rule::boolean => ValueKind::Bool(pair.as_str() == "true"),
            Rule::null => ValueKind::Null,
            Rule::ident => ValueKind::Ident(pair.as_str().to_string()),
            Rule::dotted => ValueKind::Path(pair.into_inner().map(ident).collect()),
            Rule::list_value => ValueKind::List(pair.into_inner().map(|v| self.value(v)).collect()),
            Rule::map_value => ValueKind::Map(
                pair.into_inner()
                    .filter_map(|entry| {
                        let mut parts = entry.into_inner();
                        let key = parts.next()?;
                        let key = map_key(key);
                        Some((key, self.value(parts.next()?)))
                    })
                    .collect(),
            ),
            Rule::call_value => {
                let mut parts = pair.into_inner();
                let name = parts.next().map(ident).unwrap_or_else(|| missing(s));
                ValueKind::Call(name, parts.map(|v| self.value(v)).collect())
            }
            _ => ValueKind::Null,
        };
        Value { kind, span: s }
    }

    fn block_decl(&mut self, pair: Pair<'_, Rule>) -> BlockDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        BlockDecl {
            name,
            attrs: self.attrs_of(inner),
            span: s,
        }
    }

    fn tool_decl(&mut self, pair: Pair<'_, Rule>) -> ToolDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let mut decl = ToolDecl {
            name,
            attrs: Vec::new(),
            input: None,
            span: s,
        };
        for item in inner {
            match item.as_rule() {
                Rule::tool_input => {
                    if let Some(obj) = item.into_inner().next() {
                        decl.input = Some(self.object_type(obj));
                    }
                }
                Rule::attr | Rule::attr_block => decl.attrs.push(self.attr(item)),
                _ => self.bad_line(item, "block"),
            }
        }
        decl
    }

    fn type_decl(&mut self, pair: Pair<'_, Rule>) -> TypeDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let ty = match inner.next() {
            Some(p) if p.as_rule() == Rule::object_type => self.object_type(p),
            Some(p) => self.type_expr(p),
            None => TypeExpr {
                kind: TypeKind::Named("any".into()),
                span: s,
            },
        };
        TypeDecl { name, ty, span: s }
    }

    fn type_expr(&mut self, pair: Pair<'_, Rule>) -> TypeExpr {
        let s = span(&pair);
        match pair.as_rule() {
            Rule::type_expr => {
                let mut inner = pair.into_inner();
                let base = match inner.next() {
                    Some(p) => self.type_expr(p),
                    None => TypeExpr {
                        kind: TypeKind::Named("any".into()),
                        span: s,
                    },
                };
                if inner.next().is_some() {
                    TypeExpr {
                        kind: TypeKind::Optional(Box::new(base)),
                        span: s,
                    }
                } else {
                    base
                }
            }
            Rule::type_union => {
                let mut members: Vec<TypeExpr> =
                    pair.into_inner().map(|p| self.type_expr(p)).collect();
                if members.len() == 1 {
                    members.remove(0)
                } else {
                    TypeExpr {
                        kind: TypeKind::Union(members),
                        span: s,
                    }
                }
            }
            Rule::string => TypeExpr {
                kind: TypeKind::Literal(string_value(pair)),
                span: s,
            },
            Rule::list_type | Rule::map_type => {
                let is_list = pair.as_rule() == Rule::list_type;
                let item = match pair.into_inner().next() {
                    Some(p) => self.type_expr(p),
                    None => TypeExpr {
                        kind: TypeKind::Named("any".into()),
                        span: s,
                    },
                };
                let kind = if is_list {
                    TypeKind::List(Box::new(item))
                } else {
                    TypeKind::Map(Box::new(item))
                };
                TypeExpr { kind, span: s }
            }
            Rule::object_type => self.object_type(pair),
            _ => TypeExpr {
                kind: TypeKind::Named(pair.as_str().to_string()),
                span: s,
            },
        }
    }

    fn object_type(&mut self, pair: Pair<'_, Rule>) -> TypeExpr {
        let s = span(&pair);
        let mut fields = Vec::new();
        for field in pair.into_inner() {
            match field.as_rule() {
                Rule::field_decl => {
                    let fs = span(&field);
                    let mut parts = field.into_inner();
                    let (Some(name), Some(ty)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    fields.push(FieldDecl {
                        name: ident(name),
                        ty: self.type_expr(ty),
                        span: fs,
                    });
                }
                _ => self.bad_line(field, "field"),
            }
        }
        TypeExpr {
            kind: TypeKind::Object(fields),
            span: s,
        }
    }

    fn memory_entry(&mut self, pair: Pair<'_, Rule>) -> MemoryEntry {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let shape = match inner.next() {
            Some(p) if p.as_rule() == Rule::memory_kind => {
                let mut parts = p.into_inner();
                let kind = parts.next().map(ident).unwrap_or_else(|| missing(s));
                MemoryShape::Kind {
                    kind,
                    attrs: self.attrs_of(parts),
                }
            }
            Some(p) => MemoryShape::Plain {
                ty: self.type_expr(p),
                default: inner.next().map(|e| self.expr(e)),
            },
            None => MemoryShape::Plain {
                ty: TypeExpr {
                    kind: TypeKind::Named("any".into()),
                    span: s,
                },
                default: None,
            },
        };
        MemoryEntry {
            name,
            shape,
            span: s,
        }
    }

    fn role(&mut self, pair: Pair<'_, Rule>) -> RoleDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let kind = inner
            .next()
            .and_then(|k| k.into_inner().next())
            .map(ident)
            .unwrap_or_else(|| missing(s));
        let mut role = RoleDecl::new(name, kind, s);
        for item in inner {
            match item.as_rule() {
                Rule::output_decl => {
                    let os = span(&item);
                    let Some(decl) = item.into_inner().next() else {
                        continue;
                    };
                    let output = match decl.as_rule() {
                        Rule::output_json => match decl.into_inner().next() {
                            Some(t) => OutputDecl::Json(self.type_expr(t)),
                            None => OutputDecl::Text,
                        },
                        Rule::output_code => {
                            OutputDecl::Code(decl.into_inner().next().map(string_value))
                        }
                        _ => OutputDecl::Text,
                    };
                    if let Some((_, previous)) = &role.output {
                        self.diagnostics.push(
                            Diagnostic::error(
                                "rondo::role::duplicate_output",
                                format!("role `{}` declares its output twice", role.name.name),
                            )
                            .label(os, "second output")
                            .label(*previous, "first output")
                            .help("a role has one output type; remove one of them"),
                        );
                    } else {
                        role.output = Some((output, os));
                    }
                }
                Rule::update_block => {
                    for stmt in item.into_inner() {
                        match stmt.as_rule() {
                            Rule::set_stmt | Rule::call_stmt => {
                                if let Some(u) = self.update(stmt) {
                                    role.updates.push(u);
                                }
                            }
                            _ => self.bad_line(stmt, "update"),
                        }
                    }
                }
                Rule::artifact_decl => {
                    if let Some(a) = self.artifact(item) {
                        role.artifacts.push(a);
                    }
                }
                Rule::attr | Rule::attr_block => role.attrs.push(self.attr(item)),
                _ => self.bad_line(item, "block"),
            }
        }
        role
    }

    fn artifact(&mut self, item: Pair<'_, Rule>) -> Option<ArtifactDecl> {
        let s = span(&item);
        let mut parts = item.into_inner();
        let name = parts.next()?;
        let mode = parts.next()?;
        let value = parts.next()?;
        Some(ArtifactDecl {
            name_span: span(&name),
            name: string_value(name),
            append: mode.as_str() == "+=",
            value: self.expr(value),
            span: s,
        })
    }

    fn update(&mut self, pair: Pair<'_, Rule>) -> Option<UpdateStmt> {
        let s = span(&pair);
        let is_set = pair.as_rule() == Rule::set_stmt;
        let mut inner = pair.into_inner();
        let target = ident(inner.next()?);
        if is_set {
            let value = self.expr(inner.next()?);
            Some(UpdateStmt::Set {
                target,
                value,
                span: s,
            })
        } else {
            let op = ident(inner.next()?);
            let args = inner.map(|e| self.expr(e)).collect();
            Some(UpdateStmt::Call {
                target,
                op,
                args,
                span: s,
            })
        }
    }

    fn exit(&mut self, pair: Pair<'_, Rule>) -> ExitDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(ident).unwrap_or_else(|| missing(s));
        let mut decl = ExitDecl {
            name,
            attrs: Vec::new(),
            condition: None,
            span: s,
        };
        for item in inner {
            match item.as_rule() {
                Rule::attr => decl.attrs.push(self.attr(item)),
                Rule::expr => decl.condition = Some(self.expr(item)),
                _ => self.bad_line(item, "block"),
            }
        }
        decl
    }

    fn route(&mut self, pair: Pair<'_, Rule>) -> RouteDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let (from, from_span) = match inner.next().and_then(|p| p.into_inner().next()) {
            Some(p) if p.as_rule() == Rule::start_kw => (None, span(&p)),
            Some(p) => {
                let id = ident(p);
                let sp = id.span;
                (Some(id), sp)
            }
            None => (None, s),
        };
        let mut route = RouteDecl {
            from,
            from_span,
            target: RouteTarget::Role(missing(s)),
            condition: Condition::Always,
            max: None,
            backtrack: false,
            span: s,
        };
        for part in inner {
            let ps = span(&part);
            match part.as_rule() {
                Rule::ident => route.target = RouteTarget::Role(ident(part)),
                Rule::start_target => {
                    route.target = RouteTarget::Role(Ident {
                        name: "start".into(),
                        span: ps,
                    })
                }
                Rule::parallel_target => {
                    let mut names: Vec<Ident> = part.into_inner().map(ident).collect();
                    let join = names.pop().unwrap_or_else(|| missing(ps));
                    route.target = RouteTarget::Parallel {
                        branches: names,
                        join,
                    };
                }
                Rule::map_target => {
                    let mut parts = part.into_inner();
                    let worker = parts.next().map(ident).unwrap_or_else(|| missing(ps));
                    let over = parts.next().map(|e| self.expr(e));
                    let join = parts.next().map(ident).unwrap_or_else(|| missing(ps));
                    route.target = RouteTarget::Map {
                        worker,
                        over: over.unwrap_or(Expr {
                            kind: ExprKind::Null,
                            span: ps,
                        }),
                        join,
                    };
                }
                Rule::when_mod => {
                    if let Some(e) = part.into_inner().next() {
                        let cond = Condition::When(self.expr(e));
                        route.condition = self.set_condition(&route.condition, cond, ps);
                    }
                }
                Rule::otherwise_mod => {
                    route.condition =
                        self.set_condition(&route.condition, Condition::Otherwise(ps), ps);
                }
                Rule::max_mod => {
                    let n = part
                        .into_inner()
                        .next()
                        .map(|n| self.number(&n))
                        .unwrap_or(-1.0);
                    if !n.is_finite() || n > u64::MAX as f64 {
                        // Reported as too large.
                    } else if n < 1.0 || n.fract() != 0.0 {
                        self.diagnostics.push(
                            Diagnostic::error(
                                "rondo::route::bad_bound",
                                "an edge bound must be a whole number of at least 1",
                            )
                            .label(ps, "not a positive whole number")
                            .help("write e.g. `max 5`"),
                        );
                    } else {
                        route.max = Some((n as u64, ps));
                    }
                }
                Rule::backtrack_mod => route.backtrack = true,
                _ => {}
            }
        }
        route
    }

    fn set_condition(&mut self, previous: &Condition, new: Condition, at: Span) -> Condition {
        if !matches!(previous, Condition::Always) {
            self.diagnostics.push(
                Diagnostic::error(
                    "rondo::route::two_conditions",
                    "this route has two conditions",
                )
                .label(at, "second condition")
                .help("join conditions with `and`, or write two routes"),
            );
        }
        new
    }

    fn test(&mut self, pair: Pair<'_, Rule>) -> TestDecl {
        let s = span(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().map(string_value).unwrap_or_default();
        let mut test = TestDecl::new(name, s);
        for item in inner {
            let is = span(&item);
            match item.as_rule() {
                Rule::test_input => {
                    let mut parts = item.into_inner();
                    if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
                        test.inputs.push((ident(name), self.expr(value)));
                    }
                }
                Rule::test_reply => {
                    let mut role = None;
                    let mut visit = None;
                    let mut text = String::new();
                    for part in item.into_inner() {
                        match part.as_rule() {
                            Rule::ident => role = Some(ident(part)),
                            Rule::number => {
                                self.number(&part);
                                visit = part.as_str().parse::<u64>().ok().or(Some(0));
                            }
                            _ => text = string_value(part),
                        }
                    }
                    if let Some(role) = role {
                        test.replies.push(TestReply {
                            role,
                            visit,
                            text,
                            span: is,
                        });
                    }
                }
                Rule::expect_exit => {
                    if let Some(name) = item.into_inner().next() {
                        test.expectations.push(Expectation::Exit(ident(name)));
                    }
                }
                Rule::expect_path => {
                    test.expectations.push(Expectation::Path(
                        item.into_inner().map(ident).collect(),
                        is,
                    ));
                }
                Rule::expect_artifact => {
                    let mut parts = item.into_inner();
                    let name = parts.next().map(string_value).unwrap_or_default();
                    let contains = parts.next().map(string_value);
                    test.expectations.push(Expectation::Artifact {
                        name,
                        contains,
                        span: is,
                    });
                }
                Rule::expect_expr => {
                    if let Some(e) = item.into_inner().next() {
                        test.expectations.push(Expectation::Holds(self.expr(e)));
                    }
                }
                Rule::attr | Rule::attr_block => test.attrs.push(self.attr(item)),
                _ => self.bad_line(item, "test"),
            }
        }
        test
    }

    fn expr(&mut self, pair: Pair<'_, Rule>) -> Expr {
        // `expr` is a flat list: prefix* primary (infix prefix* primary)*. Fold it with
        // precedence climbing.
        let s = span(&pair);
        if self.too_deep(s) {
            return Expr {
                kind: ExprKind::Null,
                span: s,
            };
        }
        self.depth += 1;
        let result = if pair.as_rule() != Rule::expr {
            Some(self.primary(pair))
        } else {
            let mut pieces: Vec<ExprPiece<Pair<'_, Rule>>> = pair
                .into_inner()
                .map(|item| match item.as_rule() {
                    Rule::not_op => ExprPiece::Prefix(UnOp::Not, span(&item)),
                    Rule::neg => ExprPiece::Prefix(UnOp::Neg, span(&item)),
                    rule => match bin_op(rule) {
                        Some(op) => ExprPiece::Infix(op),
                        None => ExprPiece::Operand(item),
                    },
                })
                .collect();
            climb(self, &mut pieces.drain(..).peekable(), 0)
        };
        self.depth -= 1;
        result.unwrap_or(Expr {
            kind: ExprKind::Null,
            span: s,
        })
    }

    /// Reports the first expression nested past the limit; the caller stops descending.
    fn too_deep(&mut self, at: Span) -> bool {
        if self.depth < MAX_EXPR_DEPTH {
            return false;
        }
        if !self
            .diagnostics
            .iter()
            .any(|d| d.code == "rondo::syntax::too_deep")
        {
            self.diagnostics.push(
                Diagnostic::error(
                    "rondo::syntax::too_deep",
                    "this expression is nested too deeply",
                )
                .label(at, format!("more than {MAX_EXPR_DEPTH} levels"))
                .help("split it: compute parts in `update` blocks and refer to them"),
            );
        }
        true
    }

    fn primary(&mut self, pair: Pair<'_, Rule>) -> Expr {
        let s = span(&pair);
        let kind = match pair.as_rule() {
            Rule::string | Rule::raw_string => ExprKind::String(string_value(pair)),
            Rule::number => ExprKind::Number(self.number(&pair)),
            Rule::boolean => ExprKind::Bool(pair.as_str() == "true"),
            Rule::null => ExprKind::Null,
            Rule::list_expr => ExprKind::List(pair.into_inner().map(|e| self.expr(e)).collect()),
            Rule::map_expr => ExprKind::Map(
                pair.into_inner()
                    .filter_map(|entry| {
                        let mut parts = entry.into_inner();
                        let key = parts.next()?;
                        let key = map_key(key);
                        Some((key, self.expr(parts.next()?)))
                    })
                    .collect(),
            ),
            Rule::call_expr => {
                let mut outer = pair.into_inner();
                let mut parts = outer.next().map(|h| h.into_inner()).into_iter().flatten();
                let name = parts.next().map(ident).unwrap_or_else(|| missing(s));
                let args: Vec<Expr> = parts.map(|p| self.expr(p)).collect();
                let fields: Vec<Ident> = outer
                    .next()
                    .map(|f| f.into_inner().map(ident).collect())
                    .unwrap_or_default();
                let call = ExprKind::Call(name, args);
                if fields.is_empty() {
                    call
                } else {
                    let call_span = Span::new(
                        s.start,
                        fields
                            .first()
                            .map_or(s.end, |f: &Ident| f.span.start.saturating_sub(1)),
                    );
                    ExprKind::Get(
                        Box::new(Expr {
                            kind: call,
                            span: call_span,
                        }),
                        fields,
                    )
                }
            }
            Rule::path_expr => ExprKind::Path(pair.into_inner().map(ident).collect()),
            Rule::expr => return self.expr(pair),
            _ => ExprKind::Null,
        };
        Expr { kind, span: s }
    }
}

impl<'i> Operands<Pair<'i, Rule>> for Builder {
    fn span_of(&self, operand: &Pair<'i, Rule>) -> Span {
        span(operand)
    }

    fn build(&mut self, operand: Pair<'i, Rule>) -> Expr {
        self.primary(operand)
    }

    fn enter(&mut self, at: Span) -> bool {
        if self.too_deep(at) {
            return false;
        }
        self.depth += 1;
        true
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }
}

/// One element of the flat `prefix* primary (infix prefix* primary)*` of an expression;
/// both parsers fold these with [`climb`].
enum ExprPiece<P> {
    Prefix(UnOp, Span),
    Infix(BinOp),
    Operand(P),
}

/// How [`climb`] turns operands into expressions and bounds its recursion.
trait Operands<P> {
    fn span_of(&self, operand: &P) -> Span;
    fn build(&mut self, operand: P) -> Expr;
    /// `false` stops the fold (nested too deeply).
    fn enter(&mut self, at: Span) -> bool;
    fn leave(&mut self);
}

type Pieces<'v, P> = std::iter::Peekable<std::vec::Drain<'v, ExprPiece<P>>>;

/// Precedence climbing over expression pieces.
fn climb<P>(
    operands: &mut impl Operands<P>,
    pieces: &mut Pieces<'_, P>,
    min_prec: u8,
) -> Option<Expr> {
    let mut lhs = unary(operands, pieces)?;
    // Every operator of a chain (`a and b and c ...`) deepens the tree by one, and
    // everything after the parser walks it recursively: a chain counts as nesting.
    let mut spine = 0;
    let result = loop {
        let Some(ExprPiece::Infix(op)) = pieces.peek() else {
            break Some(lhs);
        };
        let op = *op;
        let prec = precedence(op);
        if prec < min_prec {
            break Some(lhs);
        }
        if !operands.enter(Span::new(lhs.span.end.saturating_sub(1), lhs.span.end)) {
            pieces.for_each(drop);
            break None;
        }
        spine += 1;
        pieces.next();
        let Some(rhs) = climb(operands, pieces, prec + 1) else {
            break None;
        };
        let span = Span::new(lhs.span.start, rhs.span.end);
        lhs = Expr {
            kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
            span,
        };
    };
    for _ in 0..spine {
        operands.leave();
    }
    result
}

fn unary<P>(operands: &mut impl Operands<P>, pieces: &mut Pieces<'_, P>) -> Option<Expr> {
    let at = match pieces.peek()? {
        ExprPiece::Prefix(_, at) => *at,
        ExprPiece::Operand(operand) => operands.span_of(operand),
        ExprPiece::Infix(_) => return None,
    };
    if !operands.enter(at) {
        pieces.for_each(drop);
        return None;
    }
    let result = match pieces.next()? {
        ExprPiece::Operand(operand) => Some(operands.build(operand)),
        ExprPiece::Prefix(op, at) => {
            // `not` binds looser than comparisons (`not a == b` is `not (a == b)`); `-` binds tightest.
            let operand = if op == UnOp::Not {
                climb(operands, pieces, precedence(BinOp::Eq))
            } else {
                unary(operands, pieces)
            };
            operand.map(|operand| Expr {
                span: Span::new(at.start, operand.span.end),
                kind: ExprKind::Unary(op, Box::new(operand)),
            })
        }
        ExprPiece::Infix(_) => None,
    };
    operands.leave();
    result
}

fn bin_op(rule: Rule) -> Option<BinOp> {
    Some(match rule {
        Rule::or_op => BinOp::Or,
        Rule::and_op => BinOp::And,
        Rule::eq => BinOp::Eq,
        Rule::ne => BinOp::Ne,
        Rule::lt => BinOp::Lt,
        Rule::le => BinOp::Le,
        Rule::gt => BinOp::Gt,
        Rule::ge => BinOp::Ge,
        Rule::add => BinOp::Add,
        Rule::sub => BinOp::Sub,
        Rule::coalesce => BinOp::Coalesce,
        _ => return None,
    })
}

fn precedence(op: BinOp) -> u8 {
    match op {
        BinOp::Or => 1,
        BinOp::And => 2,
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 3,
        // As in Swift: `a ?? 0 > 3` compares the coalesced value; `a ?? b + 1` adds first.
        BinOp::Coalesce => 4,
        BinOp::Add | BinOp::Sub => 5,
    }
}

fn missing(span: Span) -> Ident {
    Ident {
        name: String::new(),
        span,
    }
}

const TOP_KEYWORDS: &[&str] = &[
    "workflow",
    "import",
    "type",
    "memory",
    "provider",
    "tool",
    "environment",
    "role",
    "exit",
    "test",
];

fn did_you_mean_keyword(word: &str) -> Option<String> {
    crate::diagnostics::did_you_mean(word, TOP_KEYWORDS.iter().copied())
        .map(|d| format!("{d} (this line does not start a known declaration)"))
}
