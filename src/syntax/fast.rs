//! The fast path of [`super::parse`]: a hand-written recursive descent over the same
//! grammar (`grammar/rondo.pest`) that builds the same [`Ast`] with the same spans, for
//! files without a single problem. It gives up (`None`) at the first thing the pest
//! parser would report (a bad line, a second output, two conditions, a bad bound, deep
//! nesting), and the pest path then produces the diagnostics. pest spends most of its
//! time in per-rule bookkeeping and backtracking; this parser decides each construct from
//! its first bytes. `tests/parse_equivalence.rs` checks both parsers agree.
//!
//! Each function follows one grammar rule, including where pest skips whitespace: in
//! `a ~ b?` and `a ~ b*` pest skips after `a` even when `b` is absent, so such a rule's
//! span ends after that whitespace. Calling [`Parser::skip`] in the same places gives
//! the same spans.

use super::ast::*;
use super::{
    ExprPiece, Operands, climb, dedent, duration_fits, number_fits, parse_duration_ms, unescape,
};
use crate::source::Span;

/// Below the pest builder's expression depth limit, whatever the prefix operators add.
const MAX_DEPTH: usize = 48;

const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "not",
    "true",
    "false",
    "null",
    "start",
    "when",
    "otherwise",
    "backtrack",
    "max",
    "parallel",
    "over",
];

pub(super) fn parse(text: &str) -> Option<Ast> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
        pieces: Vec::new(),
        too_large: false,
    };
    let ast = parser.file()?;
    // The pest path reports the number.
    (!parser.too_large).then_some(ast)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// An upper bound of the pest builder's expression depth at this point.
    depth: usize,
    /// The flat pieces of the expressions being read, innermost last.
    pieces: Vec<ExprPiece<Expr>>,
    /// A number or duration past the 64-bit range was read.
    too_large: bool,
}

fn is_keyword(word: &str) -> bool {
    // Most names are longer than any keyword or start differently: decide those cheaply.
    word.len() <= 9
        && matches!(
            word.as_bytes()[0],
            b'a' | b'b' | b'f' | b'm' | b'n' | b'o' | b's' | b't' | b'w' | b'p'
        )
        && KEYWORDS.contains(&word)
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

/// Operand source of the shared precedence climbing: operands are already built.
struct Built;

impl Operands<Expr> for Built {
    fn span_of(&self, operand: &Expr) -> Span {
        operand.span
    }
    fn build(&mut self, operand: Expr) -> Expr {
        operand
    }
    fn enter(&mut self, _at: Span) -> bool {
        true
    }
    fn leave(&mut self) {}
}

impl<'a> Parser<'a> {
    fn peek(&self) -> u8 {
        self.bytes.get(self.pos).copied().unwrap_or(0)
    }

    fn peek_at(&self, offset: usize) -> u8 {
        self.bytes.get(self.pos + offset).copied().unwrap_or(0)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// `WHITESPACE | COMMENT`, repeated.
    fn skip(&mut self) {
        loop {
            match self.peek() {
                b' ' | b'\t' | b'\r' | b'\n' => self.pos += 1,
                b'/' if self.peek_at(1) == b'/' => {
                    self.pos += 2;
                    while !self.at_end() && self.peek() != b'\n' {
                        self.pos += 1;
                    }
                }
                b'/' if self.peek_at(1) == b'*' => {
                    match self.text[self.pos + 2..].find("*/") {
                        Some(end) => self.pos += 2 + end + 2,
                        // An unclosed `/*` is no comment: leave it to fail.
                        None => return,
                    }
                }
                _ => return,
            }
        }
    }

    fn starts_with(&self, literal: &str) -> bool {
        self.bytes[self.pos..].starts_with(literal.as_bytes())
    }

    /// A literal, as pest matches it: no word boundary.
    fn lit(&mut self, literal: &str) -> bool {
        if self.starts_with(literal) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    /// A literal followed by no identifier character (`@{ "x" ~ !ident_char }`).
    fn word(&mut self, literal: &str) -> bool {
        if self.starts_with(literal) && !is_ident_char(self.peek_at(literal.len())) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    /// `lit` then `skip`, failing as a unit.
    fn lit_skip(&mut self, literal: &str) -> Option<()> {
        if self.lit(literal) {
            self.skip();
            Some(())
        } else {
            None
        }
    }

    fn name_end(&self) -> Option<usize> {
        if !is_ident_start(self.peek()) {
            return None;
        }
        let mut end = self.pos + 1;
        while end < self.bytes.len() && is_ident_char(self.bytes[end]) {
            end += 1;
        }
        Some(end)
    }

    /// `attr_name` and `path_root`: any word.
    fn attr_name(&mut self) -> Option<Ident> {
        let end = self.name_end()?;
        let ident = Ident {
            name: self.text[self.pos..end].to_string(),
            span: Span::new(self.pos, end),
        };
        self.pos = end;
        Some(ident)
    }

    /// `ident`: any word but a keyword.
    fn ident(&mut self) -> Option<Ident> {
        let end = self.name_end()?;
        if is_keyword(&self.text[self.pos..end]) {
            return None;
        }
        self.attr_name()
    }

    /// Runs `f`; on failure puts the position back.
    fn attempt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        let start = self.pos;
        let result = f(self);
        if result.is_none() {
            self.pos = start;
        }
        result
    }

    /// `a*` after a `~`: at least the skip, then `a (skip a)*`.
    fn repeat<T>(&mut self, f: impl FnMut(&mut Self) -> Option<T>) -> Vec<T> {
        let mut out = Vec::new();
        self.repeat_into(f, |item| out.push(item));
        out
    }

    /// [`Self::repeat`], handing each item to `sink` instead of collecting them.
    fn repeat_into<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Option<T>,
        mut sink: impl FnMut(T),
    ) {
        if let Some(first) = self.attempt(&mut f) {
            sink(first);
            loop {
                let save = self.pos;
                self.skip();
                match self.attempt(&mut f) {
                    Some(next) => sink(next),
                    None => {
                        self.pos = save;
                        break;
                    }
                }
            }
        }
    }

    /// `"{" ~ item* ~ "}"`: every line must be an item (a bad line gives up).
    fn block(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.lit_skip("{")?;
        while self.peek() != b'}' {
            if self.at_end() {
                return None;
            }
            item(self)?;
            self.skip();
        }
        self.pos += 1;
        Some(())
    }

    fn file(&mut self) -> Option<Ast> {
        let mut ast = Ast::default();
        self.skip();
        while !self.at_end() {
            self.item(&mut ast)?;
            self.skip();
        }
        Some(ast)
    }

    /// The declarations in the grammar's order, then a route. Their keywords share no
    /// prefix, so at most one declaration is tried.
    fn item(&mut self, ast: &mut Ast) -> Option<()> {
        if self.starts_with("workflow")
            && let Some(decl) = self.attempt(Self::workflow)
        {
            if ast.workflow.is_some() {
                ast.extra_headers.push(decl.name.span);
            } else {
                ast.workflow = Some(decl);
            }
            return Some(());
        }
        if self.starts_with("memory") {
            let before = ast.memory.len();
            if self.attempt(|p| p.memory(&mut ast.memory)).is_some() {
                return Some(());
            }
            ast.memory.truncate(before);
        }
        let declared = self.declaration("import", Self::import, &mut ast.imports)
            || self.declaration("type", Self::type_decl, &mut ast.types)
            || self.declaration("provider", |p| p.block_decl("provider"), &mut ast.providers)
            || self.declaration("tool", Self::tool_decl, &mut ast.tools)
            || self.declaration(
                "environment",
                |p| p.block_decl("environment"),
                &mut ast.environments,
            )
            || self.declaration("role", Self::role, &mut ast.roles)
            || self.declaration("exit", Self::exit, &mut ast.exits)
            || self.declaration("test", Self::test, &mut ast.tests)
            || self.declaration("artifact", Self::artifact, &mut ast.artifacts);
        if declared {
            return Some(());
        }
        let route = self.route()?;
        ast.routes.push(route);
        Some(())
    }

    /// A declaration starting with `keyword`, added to `into`; `false` when there is none.
    fn declaration<T>(
        &mut self,
        keyword: &str,
        parse: impl FnOnce(&mut Self) -> Option<T>,
        into: &mut Vec<T>,
    ) -> bool {
        if !self.starts_with(keyword) {
            return false;
        }
        match self.attempt(parse) {
            Some(decl) => {
                into.push(decl);
                true
            }
            None => false,
        }
    }

    fn workflow(&mut self) -> Option<WorkflowDecl> {
        let (start, name) = self.header("workflow")?;
        let mut inputs = Vec::new();
        let mut attrs = Vec::new();
        self.block(|p| {
            if let Some(input) = p.attempt(Self::input_decl) {
                inputs.push(input);
            } else {
                attrs.push(p.attr_or_block()?);
            }
            Some(())
        })?;
        Some(WorkflowDecl {
            name,
            inputs,
            attrs,
            span: Span::new(start, self.pos),
        })
    }

    /// `keyword ~ ident`, and the whitespace after it: where the declaration starts,
    /// and its name.
    fn header(&mut self, keyword: &str) -> Option<(usize, Ident)> {
        let start = self.pos;
        self.lit_skip(keyword)?;
        let name = self.ident()?;
        self.skip();
        Some((start, name))
    }

    /// `(literal ~ expr)?`
    fn expr_after(&mut self, literal: &str) -> Option<Expr> {
        self.attempt(|p| {
            p.lit_skip(literal)?;
            p.expr()
        })
    }

    fn input_decl(&mut self) -> Option<InputDecl> {
        let start = self.pos;
        self.lit_skip("input")?;
        let name = self.ident()?;
        self.skip();
        self.lit_skip(":")?;
        let ty = self.type_expr()?;
        self.skip();
        let default = self.expr_after("=");
        Some(InputDecl {
            name,
            ty,
            default,
            span: Span::new(start, self.pos),
        })
    }

    fn import(&mut self) -> Option<ImportDecl> {
        let start = self.pos;
        self.lit_skip("import")?;
        let kind = if self.lit("providers") {
            ImportKind::Providers
        } else if self.lit("tool") {
            ImportKind::Tool
        } else {
            return None;
        };
        self.skip();
        let (path, path_span) = self.any_string()?;
        Some(ImportDecl {
            kind,
            path,
            path_span,
            span: Span::new(start, self.pos),
        })
    }

    /// `attr_block | attr`.
    fn attr_or_block(&mut self) -> Option<Attr> {
        self.attempt(Self::attr_block).or_else(|| self.attr())
    }

    fn attr_block(&mut self) -> Option<Attr> {
        let start = self.pos;
        let key = self.attr_name()?;
        self.skip();
        let mut attrs = Vec::new();
        self.block(|p| {
            attrs.push(p.attr()?);
            Some(())
        })?;
        let span = Span::new(start, self.pos);
        Some(Attr {
            key,
            value: Value {
                kind: ValueKind::Block(attrs),
                span,
            },
            span,
        })
    }

    fn attr(&mut self) -> Option<Attr> {
        let start = self.pos;
        let key = self.attr_name()?;
        self.skip();
        self.lit_skip("=")?;
        let value = self.value()?;
        Some(Attr {
            key,
            value,
            span: Span::new(start, self.pos),
        })
    }

    fn deeper(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// `f` one nesting level deeper; gives up past [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if self.deeper().is_none() {
            self.depth -= 1;
            return None;
        }
        let result = f(self);
        self.depth -= 1;
        result
    }

    fn value(&mut self) -> Option<Value> {
        self.nested(Self::value_inner)
    }

    fn value_inner(&mut self) -> Option<Value> {
        let start = self.pos;
        let first = self.peek();
        let kind = if first == b'"' {
            ValueKind::String(self.any_string()?.0)
        } else if first.is_ascii_digit() || first == b'-' {
            if let Some(ms) = self.duration() {
                ValueKind::Duration(ms)
            } else {
                ValueKind::Number(self.number()?)
            }
        } else if first == b'[' {
            self.lit_skip("[")?;
            let mut items = Vec::new();
            if let Some(first) = self.attempt(Self::value) {
                items.push(first);
                self.skip();
                items.extend(self.repeat(|p| {
                    p.lit_skip(",")?;
                    p.value()
                }));
                self.skip();
                if self.lit(",") {
                    self.skip();
                }
            }
            if !self.lit("]") {
                return None;
            }
            ValueKind::List(items)
        } else if first == b'{' {
            self.lit_skip("{")?;
            let entries = self.repeat(|p| {
                let entry = p.map_value_entry()?;
                let save = p.pos;
                p.skip();
                if !p.lit(",") {
                    p.pos = save;
                }
                Some(entry)
            });
            self.skip();
            if !self.lit("}") {
                return None;
            }
            ValueKind::Map(entries)
        } else if is_ident_start(first) {
            if self.word("true") {
                ValueKind::Bool(true)
            } else if self.word("false") {
                ValueKind::Bool(false)
            } else if self.word("null") {
                ValueKind::Null
            } else if let Some((name, args)) = self.attempt(Self::call_value) {
                ValueKind::Call(name, args)
            } else {
                let root = self.attr_name()?;
                let fields = self.fields();
                if fields.is_empty() {
                    if is_keyword(&root.name) {
                        return None;
                    }
                    ValueKind::Ident(root.name)
                } else {
                    let mut path = Vec::with_capacity(fields.len() + 1);
                    path.push(root);
                    path.extend(fields);
                    ValueKind::Path(path)
                }
            }
        } else {
            return None;
        };
        Some(Value {
            kind,
            span: Span::new(start, self.pos),
        })
    }

    /// `map_entry ~ ","?` of a map value, the comma handled by the caller.
    fn map_value_entry(&mut self) -> Option<(Ident, Value)> {
        let key = self.map_key()?;
        self.skip();
        if !self.lit("=") && !self.lit(":") {
            return None;
        }
        self.skip();
        Some((key, self.value()?))
    }

    fn map_key(&mut self) -> Option<Ident> {
        if self.peek() == b'"' {
            let start = self.pos;
            let name = self.string()?;
            Some(Ident {
                name,
                span: Span::new(start, self.pos),
            })
        } else {
            self.attr_name()
        }
    }

    fn call_value(&mut self) -> Option<(Ident, Vec<Value>)> {
        let name = self.ident()?;
        self.skip();
        self.lit_skip("(")?;
        let mut args = Vec::new();
        if let Some(first) = self.attempt(Self::value) {
            args.push(first);
            self.skip();
            args.extend(self.repeat(|p| {
                p.lit_skip(",")?;
                p.value()
            }));
        }
        self.skip();
        self.lit(")").then_some((name, args))
    }

    /// `("." ~ attr_name)*` with no whitespace: the fields of a path.
    fn fields(&mut self) -> Vec<Ident> {
        let mut fields = Vec::new();
        while self.peek() == b'.' && is_ident_start(self.peek_at(1)) {
            self.pos += 1;
            if let Some(field) = self.attr_name() {
                fields.push(field);
            }
        }
        fields
    }

    fn duration(&mut self) -> Option<u64> {
        let start = self.pos;
        let mut end = start;
        while end < self.bytes.len() && self.bytes[end].is_ascii_digit() {
            end += 1;
        }
        if end == start {
            return None;
        }
        let rest = &self.bytes[end..];
        let unit = if rest.starts_with(b"ms") {
            2
        } else if matches!(rest.first(), Some(b's' | b'm' | b'h')) {
            1
        } else {
            return None;
        };
        end += unit;
        if end < self.bytes.len() && is_ident_char(self.bytes[end]) {
            return None;
        }
        self.pos = end;
        let text = &self.text[start..end];
        self.too_large |= !duration_fits(text);
        Some(parse_duration_ms(text))
    }

    /// `"-"? ~ DIGIT+ ~ ("." ~ DIGIT+)? ~ !ident_char`
    fn number(&mut self) -> Option<f64> {
        let start = self.pos;
        let mut end = start;
        if self.bytes.get(end) == Some(&b'-') {
            end += 1;
        }
        let digits_start = end;
        while end < self.bytes.len() && self.bytes[end].is_ascii_digit() {
            end += 1;
        }
        if end == digits_start {
            return None;
        }
        if self.bytes.get(end) == Some(&b'.')
            && self.bytes.get(end + 1).is_some_and(u8::is_ascii_digit)
        {
            end += 1;
            while end < self.bytes.len() && self.bytes[end].is_ascii_digit() {
                end += 1;
            }
        }
        if end < self.bytes.len() && is_ident_char(self.bytes[end]) {
            return None;
        }
        self.pos = end;
        let text = &self.text[start..end];
        self.too_large |= !number_fits(text);
        Some(text.parse().unwrap_or(f64::NAN))
    }

    /// `raw_string | string`: the value and the span with its quotes.
    fn any_string(&mut self) -> Option<(String, Span)> {
        let start = self.pos;
        if self.starts_with("\"\"\"")
            && let Some(len) = self.text[start + 3..].find("\"\"\"")
        {
            let body = &self.text[start + 3..start + 3 + len];
            self.pos = start + 3 + len + 3;
            return Some((dedent(body), Span::new(start, self.pos)));
        }
        let value = self.string()?;
        Some((value, Span::new(start, self.pos)))
    }

    fn string(&mut self) -> Option<String> {
        if self.peek() != b'"' {
            return None;
        }
        let body_start = self.pos + 1;
        let mut at = body_start;
        loop {
            match self.bytes.get(at)? {
                b'"' => break,
                b'\n' => return None,
                b'\\' => {
                    if at + 1 >= self.bytes.len() {
                        return None;
                    }
                    at += 2;
                }
                _ => at += 1,
            }
        }
        let body = &self.text[body_start..at];
        self.pos = at + 1;
        Some(if body.contains('\\') {
            unescape(body)
        } else {
            body.to_string()
        })
    }

    fn type_decl(&mut self) -> Option<TypeDecl> {
        let start = self.pos;
        self.lit_skip("type")?;
        let name = self.ident()?;
        self.skip();
        let ty = if self.lit("=") {
            self.skip();
            self.type_expr()?
        } else {
            self.object_type()?
        };
        Some(TypeDecl {
            name,
            ty,
            span: Span::new(start, self.pos),
        })
    }

    /// `type_union ~ optional_mark?`
    fn type_expr(&mut self) -> Option<TypeExpr> {
        let start = self.pos;
        let base = self.nested(Self::type_union)?;
        self.skip();
        if self.lit("?") {
            return Some(TypeExpr {
                kind: TypeKind::Optional(Box::new(base)),
                span: Span::new(start, self.pos),
            });
        }
        Some(base)
    }

    fn type_union(&mut self) -> Option<TypeExpr> {
        let start = self.pos;
        let first = self.type_atom()?;
        self.skip();
        let rest = self.repeat(|p| {
            p.lit_skip("|")?;
            p.type_atom()
        });
        if rest.is_empty() {
            return Some(first);
        }
        let mut members = Vec::with_capacity(rest.len() + 1);
        members.push(first);
        members.extend(rest);
        Some(TypeExpr {
            kind: TypeKind::Union(members),
            span: Span::new(start, self.pos),
        })
    }

    fn type_atom(&mut self) -> Option<TypeExpr> {
        let start = self.pos;
        match self.peek() {
            b'"' => {
                let value = self.string()?;
                return Some(TypeExpr {
                    kind: TypeKind::Literal(value),
                    span: Span::new(start, self.pos),
                });
            }
            b'{' => return self.object_type(),
            _ => {}
        }
        for (word, is_list) in [("list", true), ("map", false)] {
            if self.starts_with(word)
                && let Some(item) = self.attempt(|p| {
                    p.lit_skip(word)?;
                    p.lit_skip("[")?;
                    let item = p.type_expr()?;
                    p.skip();
                    p.lit("]").then_some(item)
                })
            {
                let kind = if is_list {
                    TypeKind::List(Box::new(item))
                } else {
                    TypeKind::Map(Box::new(item))
                };
                return Some(TypeExpr {
                    kind,
                    span: Span::new(start, self.pos),
                });
            }
        }
        let name = self.ident()?;
        Some(TypeExpr {
            kind: TypeKind::Named(name.name),
            span: name.span,
        })
    }

    fn object_type(&mut self) -> Option<TypeExpr> {
        let start = self.pos;
        let mut fields = Vec::new();
        self.block(|p| {
            fields.push(p.field_decl()?);
            Some(())
        })?;
        Some(TypeExpr {
            kind: TypeKind::Object(fields),
            span: Span::new(start, self.pos),
        })
    }

    fn field_decl(&mut self) -> Option<FieldDecl> {
        let start = self.pos;
        let name = self.attr_name()?;
        self.skip();
        self.lit_skip(":")?;
        let ty = self.type_expr()?;
        self.skip();
        self.lit(",");
        Some(FieldDecl {
            name,
            ty,
            span: Span::new(start, self.pos),
        })
    }

    fn memory(&mut self, entries: &mut Vec<MemoryEntry>) -> Option<()> {
        self.lit_skip("memory")?;
        self.block(|p| {
            entries.push(p.memory_entry()?);
            Some(())
        })
    }

    fn memory_entry(&mut self) -> Option<MemoryEntry> {
        let start = self.pos;
        let name = self.ident()?;
        self.skip();
        self.lit_skip(":")?;
        let kind_start = self.pos;
        let kind = ["whiteboard", "code_context", "history"]
            .into_iter()
            .find(|kind| self.word(kind));
        let shape = if let Some(kind) = kind {
            let kind = Ident {
                name: kind.to_string(),
                span: Span::new(kind_start, self.pos),
            };
            self.skip();
            let attrs = self
                .attempt(|p| {
                    let mut attrs = Vec::new();
                    p.block(|p| {
                        attrs.push(p.attr()?);
                        Some(())
                    })?;
                    Some(attrs)
                })
                .unwrap_or_default();
            MemoryShape::Kind { kind, attrs }
        } else {
            let ty = self.type_expr()?;
            self.skip();
            let default = self.expr_after("=");
            MemoryShape::Plain { ty, default }
        };
        Some(MemoryEntry {
            name,
            shape,
            span: Span::new(start, self.pos),
        })
    }

    fn block_decl(&mut self, keyword: &str) -> Option<BlockDecl> {
        let (start, name) = self.header(keyword)?;
        let mut attrs = Vec::new();
        self.block(|p| {
            attrs.push(p.attr_or_block()?);
            Some(())
        })?;
        Some(BlockDecl {
            name,
            attrs,
            span: Span::new(start, self.pos),
        })
    }

    fn tool_decl(&mut self) -> Option<ToolDecl> {
        let (start, name) = self.header("tool")?;
        let mut attrs = Vec::new();
        let mut input = None;
        self.block(|p| {
            if let Some(obj) = p.attempt(|p| {
                p.lit_skip("input")?;
                p.object_type()
            }) {
                input = Some(obj);
            } else {
                attrs.push(p.attr_or_block()?);
            }
            Some(())
        })?;
        Some(ToolDecl {
            name,
            attrs,
            input,
            span: Span::new(start, self.pos),
        })
    }

    fn role(&mut self) -> Option<RoleDecl> {
        let (start, name) = self.header("role")?;
        self.lit_skip(":")?;
        let kind = self.ident()?;
        self.skip();
        let mut role = RoleDecl::new(name, kind, Span::default());
        self.block(|p| p.role_item(&mut role))?;
        role.span = Span::new(start, self.pos);
        Some(role)
    }

    fn role_item(&mut self, role: &mut RoleDecl) -> Option<()> {
        if self.starts_with("output")
            && let Some(output) = self.attempt(Self::output)
        {
            // A second output is reported by the pest path.
            if role.output.is_some() {
                return None;
            }
            role.output = Some(output);
            return Some(());
        }
        if self.starts_with("update") && self.attempt(|p| p.update_block(role)).is_some() {
            return Some(());
        }
        if self.starts_with("artifact")
            && let Some(artifact) = self.attempt(Self::artifact)
        {
            role.artifacts.push(artifact);
            return Some(());
        }
        role.attrs.push(self.attr_or_block()?);
        Some(())
    }

    fn output(&mut self) -> Option<(OutputDecl, Span)> {
        let start = self.pos;
        self.lit_skip("output")?;
        let output = if self.lit("json") {
            self.skip();
            OutputDecl::Json(self.type_expr()?)
        } else if self.lit("text") {
            OutputDecl::Text
        } else if self.lit("code") {
            self.skip();
            OutputDecl::Code(self.attempt(Self::any_string).map(|(value, _)| value))
        } else {
            return None;
        };
        Some((output, Span::new(start, self.pos)))
    }

    fn update_block(&mut self, role: &mut RoleDecl) -> Option<()> {
        self.lit_skip("update")?;
        let before = role.updates.len();
        let parsed = self.block(|p| {
            let stmt = p.attempt(Self::set_stmt).or_else(|| p.call_stmt())?;
            role.updates.push(stmt);
            Some(())
        });
        if parsed.is_none() {
            role.updates.truncate(before);
        }
        parsed
    }

    fn set_stmt(&mut self) -> Option<UpdateStmt> {
        let start = self.pos;
        self.lit_skip("set")?;
        let target = self.ident()?;
        self.skip();
        self.lit_skip("=")?;
        let value = self.expr()?;
        Some(UpdateStmt::Set {
            target,
            value,
            span: Span::new(start, self.pos),
        })
    }

    fn call_stmt(&mut self) -> Option<UpdateStmt> {
        let start = self.pos;
        let target = self.ident()?;
        self.skip();
        self.lit_skip(".")?;
        let op = self.ident()?;
        self.skip();
        self.lit_skip("(")?;
        let args = self.expr_list();
        self.skip();
        if !self.lit(")") {
            return None;
        }
        Some(UpdateStmt::Call {
            target,
            op,
            args,
            span: Span::new(start, self.pos),
        })
    }

    /// `(expr ~ ("," ~ expr)*)?` without the skip that follows.
    fn expr_list(&mut self) -> Vec<Expr> {
        let mut args = Vec::new();
        if let Some(first) = self.attempt(Self::expr) {
            args.push(first);
            self.skip();
            args.extend(self.repeat(|p| {
                p.lit_skip(",")?;
                p.expr()
            }));
        }
        args
    }

    fn artifact(&mut self) -> Option<ArtifactDecl> {
        let start = self.pos;
        self.lit_skip("artifact")?;
        let (name, name_span) = self.any_string()?;
        self.skip();
        let append = if self.lit("+=") {
            true
        } else if self.lit("=") {
            false
        } else {
            return None;
        };
        self.skip();
        let value = self.expr()?;
        Some(ArtifactDecl {
            name,
            name_span,
            append,
            value,
            span: Span::new(start, self.pos),
        })
    }

    fn exit(&mut self) -> Option<ExitDecl> {
        let (start, name) = self.header("exit")?;
        let attrs = self
            .attempt(|p| {
                let mut attrs = Vec::new();
                p.block(|p| {
                    attrs.push(p.attr()?);
                    Some(())
                })?;
                Some(attrs)
            })
            .unwrap_or_default();
        self.skip();
        let condition = self.expr_after("when");
        Some(ExitDecl {
            name,
            attrs,
            condition,
            span: Span::new(start, self.pos),
        })
    }

    fn route(&mut self) -> Option<RouteDecl> {
        let start = self.pos;
        let from_start = self.pos;
        let from = if self.word("start") {
            None
        } else {
            Some(self.ident()?)
        };
        let from_span = Span::new(from_start, self.pos);
        self.skip();
        self.lit_skip("->")?;
        let target = self.route_target()?;
        self.skip();
        let mut route = RouteDecl {
            from,
            from_span,
            target,
            condition: Condition::Always,
            max: None,
            backtrack: false,
            span: Span::default(),
        };
        let mut ok = true;
        self.repeat_into(Self::edge_mod, |modifier| {
            match modifier {
                EdgeMod::Condition(condition) => {
                    // Two conditions are reported by the pest path.
                    ok &= matches!(route.condition, Condition::Always);
                    route.condition = condition;
                }
                EdgeMod::Max(n, at) => {
                    ok &= n >= 1.0 && n.fract() == 0.0;
                    route.max = Some((n as u64, at));
                }
                EdgeMod::Backtrack => route.backtrack = true,
            }
        });
        route.span = Span::new(start, self.pos);
        ok.then_some(route)
    }

    fn route_target(&mut self) -> Option<RouteTarget> {
        if self.starts_with("parallel")
            && let Some(target) = self.attempt(Self::parallel_target)
        {
            return Some(target);
        }
        if self.starts_with("map")
            && let Some(target) = self.attempt(Self::map_target)
        {
            return Some(target);
        }
        let start = self.pos;
        if self.word("start") {
            return Some(RouteTarget::Role(Ident {
                name: "start".into(),
                span: Span::new(start, self.pos),
            }));
        }
        Some(RouteTarget::Role(self.ident()?))
    }

    fn parallel_target(&mut self) -> Option<RouteTarget> {
        self.lit_skip("parallel")?;
        self.lit_skip("[")?;
        let first = self.ident()?;
        self.skip();
        let mut branches = vec![first];
        branches.extend(self.repeat(|p| {
            p.lit_skip(",")?;
            p.ident()
        }));
        self.skip();
        if self.lit(",") {
            self.skip();
        }
        self.lit_skip("]")?;
        self.lit_skip("->")?;
        let join = self.ident()?;
        Some(RouteTarget::Parallel { branches, join })
    }

    fn map_target(&mut self) -> Option<RouteTarget> {
        self.lit_skip("map")?;
        let worker = self.ident()?;
        self.skip();
        self.lit_skip("over")?;
        let over = self.expr()?;
        self.skip();
        self.lit_skip("->")?;
        let join = self.ident()?;
        Some(RouteTarget::Map { worker, over, join })
    }

    fn edge_mod(&mut self) -> Option<EdgeMod> {
        let start = self.pos;
        if self.lit("when") {
            self.skip();
            return Some(EdgeMod::Condition(Condition::When(self.expr()?)));
        }
        if self.lit("otherwise") {
            return Some(EdgeMod::Condition(Condition::Otherwise(Span::new(
                start, self.pos,
            ))));
        }
        if self.lit("max") {
            self.skip();
            let n = self.number()?;
            return Some(EdgeMod::Max(n, Span::new(start, self.pos)));
        }
        if self.lit("backtrack") {
            return Some(EdgeMod::Backtrack);
        }
        None
    }

    fn test(&mut self) -> Option<TestDecl> {
        let start = self.pos;
        self.lit_skip("test")?;
        let (name, _) = self.any_string()?;
        self.skip();
        let mut test = TestDecl::new(name, Span::default());
        self.block(|p| p.test_item(&mut test))?;
        test.span = Span::new(start, self.pos);
        Some(test)
    }

    fn test_item(&mut self, test: &mut TestDecl) -> Option<()> {
        if self.starts_with("input")
            && let Some(input) = self.attempt(|p| {
                p.lit_skip("input")?;
                let name = p.ident()?;
                p.skip();
                p.lit_skip("=")?;
                Some((name, p.expr()?))
            })
        {
            test.inputs.push(input);
            return Some(());
        }
        if self.starts_with("reply")
            && let Some(reply) = self.attempt(Self::test_reply)
        {
            test.replies.push(reply);
            return Some(());
        }
        if self.starts_with("expect")
            && let Some(expectation) = self.attempt(Self::expectation)
        {
            test.expectations.push(expectation);
            return Some(());
        }
        test.attrs.push(self.attr()?);
        Some(())
    }

    fn test_reply(&mut self) -> Option<TestReply> {
        let start = self.pos;
        self.lit_skip("reply")?;
        let role = self.ident()?;
        self.skip();
        let visit = self.attempt(|p| {
            p.lit_skip("visit")?;
            let number_start = p.pos;
            p.number()?;
            Some(p.text[number_start..p.pos].parse::<u64>().unwrap_or(0))
        });
        self.skip();
        self.lit_skip("=")?;
        let (text, _) = self.any_string()?;
        Some(TestReply {
            role,
            visit,
            text,
            span: Span::new(start, self.pos),
        })
    }

    /// `expect_exit | expect_path | expect_artifact | expect_expr`, in that order.
    fn expectation(&mut self) -> Option<Expectation> {
        let start = self.pos;
        let after_expect = |p: &mut Self| {
            p.pos = start;
            p.lit_skip("expect")
        };
        after_expect(self)?;
        if self.lit("exit") {
            self.skip();
            if let Some(name) = self.ident() {
                return Some(Expectation::Exit(name));
            }
        }
        after_expect(self)?;
        if self.lit("path")
            && let Some(names) = self.attempt(|p| {
                p.skip();
                p.lit_skip("[")?;
                let mut names = Vec::new();
                if let Some(first) = p.ident() {
                    names.push(first);
                    p.skip();
                    names.extend(p.repeat(|p| {
                        p.lit_skip(",")?;
                        p.ident()
                    }));
                    p.skip();
                    if p.lit(",") {
                        p.skip();
                    }
                }
                p.lit("]").then_some(names)
            })
        {
            return Some(Expectation::Path(names, Span::new(start, self.pos)));
        }
        after_expect(self)?;
        if self.lit("artifact")
            && let Some((name, contains)) = self.attempt(|p| {
                p.skip();
                let (name, _) = p.any_string()?;
                p.skip();
                let contains = p.attempt(|p| {
                    p.lit_skip("contains")?;
                    p.any_string().map(|(text, _)| text)
                });
                Some((name, contains))
            })
        {
            return Some(Expectation::Artifact {
                name,
                contains,
                span: Span::new(start, self.pos),
            });
        }
        after_expect(self)?;
        Some(Expectation::Holds(self.expr()?))
    }

    /// `prefix* ~ primary ~ (infix ~ prefix* ~ primary)*`, folded by precedence.
    fn expr(&mut self) -> Option<Expr> {
        self.deeper()?;
        let outer = self.depth;
        // Nested expressions push above this one's pieces and take theirs off before
        // this one continues, so one stack serves the whole file.
        let base = self.pieces.len();
        let result = self.expr_pieces();
        self.depth = outer - 1;
        if result.is_none() {
            self.pieces.truncate(base);
            return None;
        }
        climb(&mut Built, &mut self.pieces.drain(base..).peekable(), 0)
    }

    fn expr_pieces(&mut self) -> Option<()> {
        self.prefixes();
        self.skip();
        let operand = self.primary()?;
        self.pieces.push(ExprPiece::Operand(operand));
        self.skip();
        let mut first = true;
        loop {
            let save = self.pos;
            let count = self.pieces.len();
            if !first {
                self.skip();
            }
            let Some(op) = self.infix() else {
                self.pos = save;
                break;
            };
            self.pieces.push(ExprPiece::Infix(op));
            // The pest builder counts a chain's operators as nesting: a long chain
            // goes to it for the diagnostic.
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return None;
            }
            self.skip();
            self.prefixes();
            self.skip();
            match self.primary() {
                Some(operand) => self.pieces.push(ExprPiece::Operand(operand)),
                None => {
                    self.pos = save;
                    self.pieces.truncate(count);
                    break;
                }
            }
            first = false;
        }
        Some(())
    }

    /// `prefix*`; every prefix may deepen the pest builder's recursion.
    fn prefixes(&mut self) {
        let mut first = true;
        loop {
            let save = self.pos;
            if !first {
                self.skip();
            }
            let start = self.pos;
            let op = if self.word("not") {
                UnOp::Not
            } else if self.lit("-") {
                UnOp::Neg
            } else {
                self.pos = save;
                return;
            };
            self.pieces
                .push(ExprPiece::Prefix(op, Span::new(start, self.pos)));
            self.depth += 1;
            first = false;
        }
    }

    fn infix(&mut self) -> Option<BinOp> {
        let op = match self.peek() {
            b'o' if self.word("or") => return Some(BinOp::Or),
            b'a' if self.word("and") => return Some(BinOp::And),
            b'=' if self.peek_at(1) == b'=' => (BinOp::Eq, 2),
            b'!' if self.peek_at(1) == b'=' => (BinOp::Ne, 2),
            b'<' if self.peek_at(1) == b'=' => (BinOp::Le, 2),
            b'>' if self.peek_at(1) == b'=' => (BinOp::Ge, 2),
            b'<' => (BinOp::Lt, 1),
            b'>' => (BinOp::Gt, 1),
            b'+' => (BinOp::Add, 1),
            b'-' => (BinOp::Sub, 1),
            b'?' if self.peek_at(1) == b'?' => (BinOp::Coalesce, 2),
            _ => return None,
        };
        self.pos += op.1;
        Some(op.0)
    }

    fn primary(&mut self) -> Option<Expr> {
        self.nested(Self::primary_inner)
    }

    fn primary_inner(&mut self) -> Option<Expr> {
        let start = self.pos;
        let first = self.peek();
        let kind = if first == b'"' {
            ExprKind::String(self.any_string()?.0)
        } else if first.is_ascii_digit() {
            ExprKind::Number(self.number()?)
        } else if first == b'[' {
            self.lit_skip("[")?;
            let items = self.expr_list();
            self.skip();
            if !items.is_empty() && self.lit(",") {
                self.skip();
            }
            if !self.lit("]") {
                return None;
            }
            ExprKind::List(items)
        } else if first == b'{' {
            self.lit_skip("{")?;
            let mut entries = Vec::new();
            if let Some(entry) = self.attempt(Self::map_expr_entry) {
                entries.push(entry);
                self.skip();
                entries.extend(self.repeat(|p| {
                    p.lit_skip(",")?;
                    p.map_expr_entry()
                }));
                self.skip();
                if self.lit(",") {
                    self.skip();
                }
            }
            self.skip();
            if !self.lit("}") {
                return None;
            }
            ExprKind::Map(entries)
        } else if first == b'(' {
            self.lit_skip("(")?;
            let inner = self.expr()?;
            self.skip();
            return self.lit(")").then_some(inner);
        } else if is_ident_start(first) {
            if self.word("true") {
                ExprKind::Bool(true)
            } else if self.word("false") {
                ExprKind::Bool(false)
            } else if self.word("null") {
                ExprKind::Null
            } else if let Some((name, args)) = self.attempt(Self::call_head) {
                let call_end = self.pos;
                let fields = self.fields();
                let call = ExprKind::Call(name, args);
                if fields.is_empty() {
                    call
                } else {
                    ExprKind::Get(
                        Box::new(Expr {
                            kind: call,
                            span: Span::new(start, call_end),
                        }),
                        fields,
                    )
                }
            } else {
                let root = self.attr_name()?;
                let mut path = vec![root];
                path.extend(self.fields());
                ExprKind::Path(path)
            }
        } else {
            return None;
        };
        Some(Expr {
            kind,
            span: Span::new(start, self.pos),
        })
    }

    fn call_head(&mut self) -> Option<(Ident, Vec<Expr>)> {
        let name = self.ident()?;
        self.skip();
        self.lit_skip("(")?;
        let args = self.expr_list();
        self.skip();
        self.lit(")").then_some((name, args))
    }

    fn map_expr_entry(&mut self) -> Option<(Ident, Expr)> {
        let key = self.map_key()?;
        self.skip();
        self.lit_skip(":")?;
        Some((key, self.expr()?))
    }
}

enum EdgeMod {
    Condition(Condition),
    Max(f64, Span),
    Backtrack,
}
