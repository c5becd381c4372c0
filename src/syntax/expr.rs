//! Expressions: the grammar gives a flat `unary (infix unary)*`; this folds it by
//! precedence, bounds its depth, and reports the operators and literals of other
//! languages (`&&`, `!`, `=`, `is not None`, `True`) as what they meant.

use pest::iterators::Pair;

use super::{Builder, Rule, children, string_value};
use crate::diagnostics::{Code, Diagnostic};
use crate::source::Span;
use crate::syntax::ast::*;

pub(super) const MAX_EXPR_DEPTH: usize = 128;

/// An operand: a path or literal, or a call with the fields of its result.
struct Operand<'i> {
    head: Pair<'i, Rule>,
    /// `call_args` and the field names after them.
    call: Option<(Pair<'i, Rule>, Vec<Pair<'i, Rule>>)>,
}

/// One element of the flat `prefix* primary (infix prefix* primary)*` of an expression.
enum Piece<'i> {
    Prefix(UnOp, Span),
    Infix(BinOp),
    Operand(Operand<'i>),
    /// An operand already reported and read as `null` (the `None` of `is not None`).
    Null(Span),
}

type Pieces<'v, 'i> = std::iter::Peekable<std::vec::Drain<'v, Piece<'i>>>;

/// An operator other languages spell this way, and what Rondo means by it.
enum Foreign {
    /// `&&`, `||`, `!`: the word to write instead.
    Logical(&'static str),
    /// `=` for `==`.
    Assign,
    /// `is`, `is not`.
    Is,
}

/// The operator an `infix` token spells.
fn infix_op(text: &str) -> (BinOp, Option<Foreign>) {
    match text {
        "or" => (BinOp::Or, None),
        "and" => (BinOp::And, None),
        "==" => (BinOp::Eq, None),
        "!=" => (BinOp::Ne, None),
        "<" => (BinOp::Lt, None),
        "<=" => (BinOp::Le, None),
        ">" => (BinOp::Gt, None),
        ">=" => (BinOp::Ge, None),
        "+" => (BinOp::Add, None),
        "-" => (BinOp::Sub, None),
        "??" => (BinOp::Coalesce, None),
        "&&" => (BinOp::And, Some(Foreign::Logical("and"))),
        "||" => (BinOp::Or, Some(Foreign::Logical("or"))),
        "=" => (BinOp::Eq, Some(Foreign::Assign)),
        "is" => (BinOp::Eq, Some(Foreign::Is)),
        // `is not`, with any blanks between the words.
        _ => (BinOp::Ne, Some(Foreign::Is)),
    }
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

/// The literal a one-word path spells: `true`, `false`, `null`, or Python's spelling of
/// one (`Some(true)` in the second place).
pub(super) fn word_literal(word: &str) -> Option<(ExprKind, bool)> {
    Some(match word {
        "true" => (ExprKind::Bool(true), false),
        "false" => (ExprKind::Bool(false), false),
        "null" => (ExprKind::Null, false),
        "True" => (ExprKind::Bool(true), true),
        "False" => (ExprKind::Bool(false), true),
        "None" => (ExprKind::Null, true),
        _ => return None,
    })
}

impl Builder<'_> {
    /// The names of a path token (`a.b.c`), each with its span.
    pub(super) fn path_names(&self, pair: &Pair<'_, Rule>) -> Vec<Ident> {
        let mut at = self.span(pair).start;
        pair.as_str()
            .split('.')
            .map(|name| {
                let ident = Ident {
                    name: name.to_string(),
                    span: Span::new(at, at + name.len()),
                };
                at += name.len() + 1;
                ident
            })
            .collect()
    }

    pub(super) fn expr(&mut self, pair: Pair<'_, Rule>) -> Expr {
        let s = self.span(&pair);
        if self.too_deep(s) {
            return null_at(s);
        }
        self.depth += 1;
        let result = if pair.as_rule() != Rule::expr {
            Some(self.primary(pair))
        } else {
            let mut pieces = self.pieces(pair);
            self.climb(&mut pieces.drain(..).peekable(), 0)
        };
        self.depth -= 1;
        result.unwrap_or_else(|| null_at(s))
    }

    /// The pieces of an `expr` pair, with the other languages' operators reported.
    fn pieces<'i>(&mut self, pair: Pair<'i, Rule>) -> Vec<Piece<'i>> {
        let mut pieces = Vec::new();
        let mut items = children(pair).peekable();
        while let Some(item) = items.next() {
            let at = self.span(&item);
            match item.as_rule() {
                Rule::prefix => {
                    let op = match item.as_str() {
                        "-" => UnOp::Neg,
                        "!" => {
                            self.foreign_operator(at, "!", "not", "`not x`");
                            UnOp::Not
                        }
                        _ => UnOp::Not,
                    };
                    pieces.push(Piece::Prefix(op, at));
                }
                Rule::infix => {
                    let (op, foreign) = infix_op(item.as_str());
                    match foreign {
                        None => {}
                        Some(Foreign::Logical(meant)) => {
                            let example = format!("`a {meant} b`");
                            self.foreign_operator(at, item.as_str(), meant, &example)
                        }
                        Some(Foreign::Assign) => self.single_equals(at),
                        Some(Foreign::Is) => {
                            // `is None` and `is not None` are one mistake, read as `== null`.
                            let none = items
                                .peek()
                                .filter(|next| {
                                    next.as_rule() == Rule::path && next.as_str() == "None"
                                })
                                .map(|p| self.span(p));
                            self.is_operator(op, at, none);
                            pieces.push(Piece::Infix(op));
                            if let Some(none) = none {
                                items.next();
                                pieces.push(Piece::Null(none));
                            }
                            continue;
                        }
                    }
                    pieces.push(Piece::Infix(op));
                }
                Rule::path => {
                    let call = match items.peek().map(Pair::as_rule) {
                        Some(Rule::call_args) => {
                            let args = items.next().expect("peeked");
                            let mut fields = Vec::new();
                            while items.peek().is_some_and(|p| p.as_rule() == Rule::ident) {
                                fields.extend(items.next());
                            }
                            Some((args, fields))
                        }
                        _ => None,
                    };
                    pieces.push(Piece::Operand(Operand { head: item, call }));
                }
                _ => pieces.push(Piece::Operand(Operand {
                    head: item,
                    call: None,
                })),
            }
        }
        pieces
    }

    fn single_equals(&mut self, at: Span) {
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxSingleEquals,
                "`=` does not compare: write `==`",
            )
            .label(at, "write `==` here")
            .help("`==` compares two values; `=` only gives an attribute, a `set` or an input its value"),
        );
    }

    /// `x is y`, `x is not y`; with `None` after it, the whole `is not None`.
    fn is_operator(&mut self, op: BinOp, at: Span, none: Option<Span>) {
        let symbol = op.symbol();
        let (meant, help) = match none {
            Some(_) => (
                format!("{symbol} null"),
                "a missing value is `null` in Rondo: test it with `x == null` or `x != null`, or give a fallback with `x ?? default`",
            ),
            None => (
                symbol.to_string(),
                "Rondo compares values with `==` and `!=`",
            ),
        };
        let whole = Span::new(at.start, none.map_or(at.end, |n| n.end));
        let written = &self.text[whole.start..whole.end];
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxIsOperator,
                format!("`{written}` is Python: write `{meant}`"),
            )
            .label(whole, format!("write `{meant}` here"))
            .help(help),
        );
    }

    fn foreign_operator(&mut self, at: Span, written: &str, meant: &str, example: &str) {
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxCOperator,
                format!("`{written}` is not a Rondo operator: write `{meant}`"),
            )
            .label(at, format!("write `{meant}` here"))
            .help(format!(
                "the logical operators are the words `and`, `or` and `not`, as in {example}"
            )),
        );
    }

    /// `True`, `False`, `None` where `true`, `false`, `null` was meant: reported.
    pub(super) fn python_literal(&mut self, word: &str, at: Span) {
        let meant = word.to_ascii_lowercase().replace("none", "null");
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxPythonLiteral,
                format!("`{word}` is Python: write `{meant}`"),
            )
            .label(at, format!("write `{meant}` here"))
            .help("Rondo's literals are lowercase: `true`, `false` and `null`"),
        );
    }

    /// A route's `if` or `else` where `when` or `otherwise` was meant: reported, read as
    /// meant.
    pub(super) fn python_keyword(&mut self, word: &str, meant: &str, at: Span) {
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxPythonKeyword,
                format!("`{word}` is Python: a route says `{meant}`"),
            )
            .label(at, format!("write `{meant}` here"))
            .help("a route is `a -> b when <condition>`, and `a -> c otherwise` takes every case the others leave"),
        );
    }

    /// `'text'` where `"text"` was meant: reported, read as the string.
    pub(super) fn single_quote(&mut self, at: Span) {
        let inner = self.text.get(at.start + 1..at.end - 1).unwrap_or("");
        self.diagnostics.push(
            Diagnostic::error(Code::SyntaxSingleQuote, "strings take double quotes")
                .label(at, format!("write `\"{inner}\"`"))
            .help("Rondo's strings are `\"text\"`, or `\"\"\"...\"\"\"` over several lines; `'` is no quote"),
        );
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
                Diagnostic::error(Code::SyntaxTooDeep, "this expression is nested too deeply")
                    .label(at, format!("more than {MAX_EXPR_DEPTH} levels"))
                    .help("split it: compute parts in `update` blocks and refer to them"),
            );
        }
        true
    }

    fn enter(&mut self, at: Span) -> bool {
        if self.too_deep(at) {
            return false;
        }
        self.depth += 1;
        true
    }

    /// Precedence climbing over expression pieces.
    fn climb(&mut self, pieces: &mut Pieces<'_, '_>, min_prec: u8) -> Option<Expr> {
        let mut lhs = self.unary(pieces)?;
        // Every operator of a chain (`a and b and c ...`) deepens the tree by one, and
        // everything after the parser walks it recursively: a chain counts as nesting.
        let mut spine = 0;
        let result = loop {
            let Some(Piece::Infix(op)) = pieces.peek() else {
                break Some(lhs);
            };
            let op = *op;
            let prec = precedence(op);
            if prec < min_prec {
                break Some(lhs);
            }
            if !self.enter(Span::new(lhs.span.end.saturating_sub(1), lhs.span.end)) {
                pieces.for_each(drop);
                break None;
            }
            spine += 1;
            pieces.next();
            let Some(rhs) = self.climb(pieces, prec + 1) else {
                break None;
            };
            let span = Span::new(lhs.span.start, rhs.span.end);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        };
        self.depth -= spine;
        result
    }

    fn unary(&mut self, pieces: &mut Pieces<'_, '_>) -> Option<Expr> {
        let at = match pieces.peek()? {
            Piece::Prefix(_, at) | Piece::Null(at) => *at,
            Piece::Operand(operand) => self.span(&operand.head),
            Piece::Infix(_) => return None,
        };
        if !self.enter(at) {
            pieces.for_each(drop);
            return None;
        }
        let result = match pieces.next()? {
            Piece::Operand(operand) => Some(self.operand(operand)),
            Piece::Null(at) => Some(null_at(at)),
            Piece::Prefix(op, at) => {
                // `not` binds looser than comparisons (`not a == b` is `not (a == b)`);
                // `-` binds tightest.
                let operand = if op == UnOp::Not {
                    self.climb(pieces, precedence(BinOp::Eq))
                } else {
                    self.unary(pieces)
                };
                operand.map(|operand| Expr {
                    span: Span::new(at.start, operand.span.end),
                    kind: ExprKind::Unary(op, Box::new(operand)),
                })
            }
            Piece::Infix(_) => None,
        };
        self.depth -= 1;
        result
    }

    fn operand(&mut self, operand: Operand<'_>) -> Expr {
        match operand.call {
            Some((args, fields)) => self.call(operand.head, args, fields),
            None => self.primary(operand.head),
        }
    }

    fn primary(&mut self, pair: Pair<'_, Rule>) -> Expr {
        let s = self.span(&pair);
        let kind = match pair.as_rule() {
            Rule::string | Rule::raw_string => ExprKind::String(string_value(pair)),
            Rule::single_string => {
                self.single_quote(s);
                ExprKind::String(string_value(pair))
            }
            Rule::number => ExprKind::Number(self.number(&pair)),
            Rule::path => match word_literal(pair.as_str()) {
                Some((literal, python)) => {
                    if python {
                        self.python_literal(pair.as_str(), s);
                    }
                    literal
                }
                None => ExprKind::Path(self.path_names(&pair)),
            },
            Rule::list_expr => ExprKind::List(children(pair).map(|e| self.expr(e)).collect()),
            Rule::map_expr => ExprKind::Map(
                children(pair)
                    .filter_map(|entry| {
                        let mut parts = children(entry);
                        let key = self.map_key(parts.next()?);
                        Some((key, self.expr(parts.next()?)))
                    })
                    .collect(),
            ),
            Rule::paren | Rule::expr => {
                let inner = if pair.as_rule() == Rule::paren {
                    children(pair).next()
                } else {
                    Some(pair)
                };
                return match inner {
                    Some(e) => self.expr(e),
                    None => null_at(s),
                };
            }
            _ => ExprKind::Null,
        };
        Expr { kind, span: s }
    }

    /// `name(args)`, and the fields of its result (`first(memory.plan).title`).
    fn call(
        &mut self,
        head: Pair<'_, Rule>,
        args: Pair<'_, Rule>,
        fields: Vec<Pair<'_, Rule>>,
    ) -> Expr {
        let name = Ident {
            name: head.as_str().to_string(),
            span: self.span(&head),
        };
        let call_span = Span::new(name.span.start, self.span(&args).end);
        let args = children(args).map(|e| self.expr(e)).collect();
        let call = Expr {
            kind: ExprKind::Call(name, args),
            span: call_span,
        };
        let fields: Vec<Ident> = fields.into_iter().map(|p| self.ident(p)).collect();
        match fields.last() {
            None => call,
            Some(last) => Expr {
                span: Span::new(call_span.start, last.span.end),
                kind: ExprKind::Get(Box::new(call), fields),
            },
        }
    }
}

fn null_at(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Null,
        span,
    }
}
