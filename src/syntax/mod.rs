//! Stage 1: source text → [`Ast`] with spans, plus the syntax diagnostics.
//!
//! pest reads the file with `grammar/rondo.pest`; this module turns its tree into the
//! [`Ast`]. The grammar accepts any line it does not understand as a bad line, so one bad
//! line yields one diagnostic and the rest of the file is parsed.

pub mod ast;
mod expr;
mod literals;

use std::sync::atomic::{AtomicBool, Ordering};

use pest::Parser;
use pest::iterators::{Pair, Pairs};

pub use ast::*;

use crate::diagnostics::{Code, Diagnostic, Diagnostics};
use crate::source::{SourceFile, Span};
use literals::{dedent, number_fits, unescape};

// The derive lives here so `Rule` is in scope for every conversion function below.
#[derive(pest_derive::Parser)]
#[grammar = "../grammar/rondo.pest"]
struct RondoParser;

/// The children of `pair` but comments, which are pairs of their own (see the grammar).
fn children<'i>(pair: Pair<'i, Rule>) -> Children<'i> {
    pair.into_inner().filter(|p| !is_comment(p))
}

type Children<'i> = std::iter::Filter<Pairs<'i, Rule>, fn(&Pair<'i, Rule>) -> bool>;

fn is_comment(pair: &Pair<'_, Rule>) -> bool {
    matches!(
        pair.as_rule(),
        Rule::line_comment | Rule::block_comment | Rule::inline_comment
    )
}

/// Parses a whole file. Never fails: problems are diagnostics.
pub fn parse(file: &SourceFile) -> (Ast, Diagnostics) {
    parse_each(file, |_| {})
}

/// Parses a whole file one declaration (or route) at a time, and shows `seen` the tree
/// after each: what needs only part of it (the templates the llm roles name) can start
/// while the rest is read. The tree and diagnostics are those of a whole-file parse: pest
/// never looks behind a position, so a declaration reads the same from where it starts.
///
/// A large file's second half is parsed on another thread from a line that likely starts
/// a declaration. That work is used only when the first half's last declaration ends
/// exactly there, where the file's own parse would have started a declaration too.
pub fn parse_each(file: &SourceFile, seen: impl FnMut(&Ast)) -> (Ast, Diagnostics) {
    parse_split(file, split_point(&file.text), seen)
}

/// A parse that reads the whole file on the calling thread: what the split parse of a
/// large file must give.
pub fn parse_on_one_thread(file: &SourceFile) -> (Ast, Diagnostics) {
    parse_split(file, None, |_| {})
}

fn parse_split(
    file: &SourceFile,
    split: Option<usize>,
    mut seen: impl FnMut(&Ast),
) -> (Ast, Diagnostics) {
    let text: &str = &file.text;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let mut tail = split.and_then(|at| {
            std::thread::Builder::new()
                .name("parse".into())
                // As the main thread's: pest's stack guard then stops where it would.
                .stack_size(8 << 20)
                .spawn_scoped(scope, {
                    let stop = &stop;
                    move || parse_tail(text, at, stop)
                })
                .ok()
        });
        let mut builder = Builder::new(text);
        let mut ast = Ast::default();
        while builder.base < text.len() {
            if split.is_some_and(|at| builder.base >= at) {
                // Past the split, the other thread's work is of no use: it stops.
                let landed = Some(builder.base) == split;
                if !landed {
                    stop.store(true, Ordering::Relaxed);
                }
                let read = tail.take().and_then(|t| t.join().ok()).flatten();
                if let Some((steps, after)) = read.filter(|_| landed) {
                    builder.take_diagnostics_of(after);
                    for items in steps {
                        for item in items {
                            ast.add(item);
                        }
                        seen(&ast);
                    }
                    break;
                }
            }
            match builder.step() {
                Ok(items) => {
                    for item in items {
                        ast.add(item);
                    }
                    seen(&ast);
                }
                Err(diagnostic) => {
                    stop.store(true, Ordering::Relaxed);
                    builder.diagnostics.push(diagnostic);
                    return (Ast::default(), builder.diagnostics);
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        (ast, builder.diagnostics)
    })
}

/// Files smaller than this are read on one thread: starting another costs more.
const SPLIT_FROM_BYTES: usize = 8 << 10;

/// The end of the line before the first line in the second half of a large file that
/// starts with a letter, as a declaration or a route does: where the previous declaration
/// likely ended (a step starts with the layout before its declaration).
fn split_point(text: &str) -> Option<usize> {
    if text.len() < SPLIT_FROM_BYTES {
        return None;
    }
    let mut at = text.len() / 2;
    while let Some(newline) = text[at..].find('\n') {
        at += newline + 1;
        if text[at..].starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Some(at - 1);
        }
    }
    None
}

/// The steps from `from` to the end of the file, each with its items, and the builder
/// that read them (for its diagnostics); `None` when stopped, or when pest's guards
/// stopped it (the main thread then reads that part itself).
fn parse_tail<'t>(
    text: &'t str,
    from: usize,
    stop: &AtomicBool,
) -> Option<(Vec<Vec<Item>>, Builder<'t>)> {
    let mut builder = Builder::new(text);
    builder.base = from;
    let mut steps = Vec::new();
    while builder.base < text.len() {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        steps.push(builder.step().ok()?);
    }
    Some((steps, builder))
}

/// Parses one expression (used by tests and the `--input` flag).
pub fn parse_expr(text: &str) -> Result<Expr, Diagnostic> {
    let mut pairs = RondoParser::parse(Rule::expr, text).map_err(|e| pest_error(e, 0))?;
    let pair = pairs
        .next()
        .ok_or_else(|| Diagnostic::error(Code::SyntaxExpression, "empty expression"))?;
    if !text[pair.as_span().end()..].trim().is_empty() {
        return Err(Diagnostic::error(
            Code::SyntaxExpression,
            "unexpected text after the expression",
        )
        .label(
            Span::new(pair.as_span().end(), text.len()),
            "not understood",
        ));
    }
    let mut builder = Builder::new(text);
    let expr = builder.expr(pair);
    // The first problem, e.g. `x = 1` for `x == 1`, is what the caller sees.
    match builder.diagnostics.iter().next() {
        Some(problem) => Err(problem.clone()),
        None => Ok(expr),
    }
}

/// `base`: where the text pest read starts in the file.
fn pest_error(error: pest::error::Error<Rule>, base: usize) -> Diagnostic {
    let span = match error.location {
        pest::error::InputLocation::Pos(p) => Span::new(base + p, base + p),
        pest::error::InputLocation::Span((s, e)) => Span::new(base + s, base + e),
    };
    let expected = match &error.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut words: Vec<String> = positives.iter().filter_map(|r| rule_word(*r)).collect();
            words.sort();
            words.dedup();
            words
        }
        // pest's guards: the stack or the call budget ran out.
        pest::error::ErrorVariant::CustomError { .. } => {
            return Diagnostic::error(
                Code::SyntaxTooDeep,
                "syntax error: brackets nested too deeply to read",
            )
            .label(span, "nested too deeply")
            .help("split the expression: compute parts in `update` blocks and refer to them");
        }
    };
    let text = if expected.is_empty() {
        "unexpected input".to_string()
    } else {
        format!("expected {}", expected.join(", "))
    };
    Diagnostic::error(Code::SyntaxUnexpected, format!("syntax error: {text}"))
        .label(span, text)
        .help("an unclosed `{`, `[`, `(` or `\"\"\"` is the usual cause")
}

fn rule_word(rule: Rule) -> Option<String> {
    let word = match rule {
        Rule::ident | Rule::path => "a name",
        Rule::string | Rule::raw_string => "a string",
        Rule::number => "a number",
        Rule::expr => "an expression",
        Rule::type_expr | Rule::type_union => "a type",
        _ => return Some(format!("`{rule:?}`")),
    };
    Some(word.to_string())
}

/// One declaration, route or broken declaration, built.
enum Item {
    Workflow(WorkflowDecl),
    Import(ImportDecl),
    Type(TypeDecl),
    Memory(Vec<MemoryEntry>),
    Provider(BlockDecl),
    Environment(BlockDecl),
    Tool(ToolDecl),
    Role(RoleDecl),
    Exit(ExitDecl),
    Route(RouteDecl),
    Artifact(ArtifactDecl),
    Test(TestDecl),
    /// The name of a `role` or `exit` that did not parse.
    Broken(String),
}

impl Ast {
    fn add(&mut self, item: Item) {
        match item {
            Item::Workflow(decl) => {
                if self.workflow.is_some() {
                    self.extra_headers.push(decl.name.span);
                } else {
                    self.workflow = Some(decl);
                }
            }
            Item::Import(decl) => self.imports.push(decl),
            Item::Type(decl) => self.types.push(decl),
            Item::Memory(entries) => self.memory.extend(entries),
            Item::Provider(decl) => self.providers.push(decl),
            Item::Environment(decl) => self.environments.push(decl),
            Item::Tool(decl) => self.tools.push(decl),
            Item::Role(decl) => self.roles.push(decl),
            Item::Exit(decl) => self.exits.push(decl),
            Item::Route(decl) => self.routes.push(decl),
            Item::Artifact(decl) => self.artifacts.push(decl),
            Item::Test(decl) => self.tests.push(decl),
            Item::Broken(name) => self.broken_nodes.push(name),
        }
    }
}

const TYPE_TOO_DEEP: &str = "syntax error: a type nested too deeply to read";

struct Builder<'t> {
    text: &'t str,
    /// Where the text pest is reading starts in the file (it reads one declaration at a
    /// time): pest's positions are relative to it.
    base: usize,
    /// The file has a `/*`, so it may have one that is never closed.
    has_block_comment: bool,
    diagnostics: Diagnostics,
    /// Current expression nesting, bounded so hostile input cannot overflow the stack.
    depth: usize,
    /// An unclosed `/*` swallowed the rest of the file: the blocks it left open are not
    /// reported on their own.
    unclosed_comment: bool,
    /// A type nested past the bound was reported (once per file).
    too_deep_type: bool,
}

fn string_value(pair: Pair<'_, Rule>) -> String {
    match pair.as_rule() {
        Rule::raw_string => dedent(children(pair).next().map_or("", |p| p.as_str())),
        _ => unescape(children(pair).next().map_or("", |p| p.as_str())),
    }
}

fn missing(span: Span) -> Ident {
    Ident {
        name: String::new(),
        span,
    }
}

fn any_type(span: Span) -> TypeExpr {
    TypeExpr {
        kind: TypeKind::Named("any".into()),
        span,
    }
}

/// What a body line was expected to be, for the diagnostic of a line that is not one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Top,
    Block,
    Update,
    Field,
    Test,
}

impl<'t> Builder<'t> {
    fn span(&self, pair: &Pair<'_, Rule>) -> Span {
        let at = pair.as_span();
        Span::new(self.base + at.start(), self.base + at.end())
    }

    fn ident(&self, pair: Pair<'_, Rule>) -> Ident {
        Ident {
            name: pair.as_str().to_string(),
            span: self.span(&pair),
        }
    }

    /// The name `pair` gives, or an empty one at `at` when it is missing.
    fn ident_or_missing(&self, pair: Option<Pair<'_, Rule>>, at: Span) -> Ident {
        pair.map(|p| self.ident(p)).unwrap_or_else(|| missing(at))
    }

    /// A map key: a name or a quoted string.
    fn map_key(&self, pair: Pair<'_, Rule>) -> Ident {
        if pair.as_rule() == Rule::string {
            Ident {
                span: self.span(&pair),
                name: string_value(pair),
            }
        } else {
            self.ident(pair)
        }
    }

    fn new(text: &'t str) -> Self {
        Builder {
            text,
            base: 0,
            has_block_comment: text.contains("/*"),
            diagnostics: Diagnostics::default(),
            depth: 0,
            too_deep_type: false,
            unclosed_comment: false,
        }
    }

    /// Adds the diagnostics of the builder that read the rest of the file, as this one
    /// would have made them: a type nested too deeply is reported once per file.
    fn take_diagnostics_of(&mut self, after: Builder<'_>) {
        let mut theirs = after.diagnostics;
        if self.too_deep_type {
            theirs.retain(|d| !(d.code == Code::SyntaxTooDeep && d.message == TYPE_TOO_DEEP));
        }
        self.diagnostics.extend(theirs);
        self.too_deep_type |= after.too_deep_type;
        self.unclosed_comment |= after.unclosed_comment;
    }

    /// Reports an unclosed `/*`. It ends the file, so it is the last pair when present.
    fn note_unclosed_comment(&mut self, file: &Pair<'_, Rule>) {
        if !self.has_block_comment {
            return;
        }
        let Some(comment) = file
            .clone()
            .into_inner()
            .flatten()
            .filter(|p| p.as_rule() == Rule::unclosed_comment)
            .last()
        else {
            return;
        };
        self.unclosed_comment = true;
        // The pair starts after the `/*`.
        let at = self.span(&comment).start.saturating_sub(2);
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxUnclosedComment,
                "unclosed `/*`: the rest of the file is a comment",
            )
            .label(Span::new(at, at + 2), "opened here, no `*/` after it")
            .help("close the comment with `*/`, or use `//` for a comment to the end of the line"),
        );
    }

    /// A block whose `}` is missing: it ended at the next declaration or route.
    fn unclosed(&mut self, opened: Span) {
        if self.unclosed_comment {
            return;
        }
        let text = &self.text[opened.start..opened.end.min(self.text.len())];
        let first_line = text.split('\n').next().unwrap_or("").trim_end();
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxUnclosedBlock,
                "unclosed `{`: this block is never closed",
            )
            .label(
                Span::new(opened.start, opened.start + first_line.len()),
                "opened here, no matching `}`",
            )
            .help("add the missing `}` where the block ends"),
        );
    }

    /// The name a declaration gives, reported when it is a reserved word.
    fn declared(&mut self, pair: Option<Pair<'_, Rule>>, at: Span) -> Ident {
        let name = self.ident_or_missing(pair, at);
        if RESERVED.contains(&name.name.as_str()) {
            self.diagnostics.push(
                Diagnostic::error(
                    Code::NameReserved,
                    format!("`{}` is a reserved word", name.name),
                )
                .label(name.span, "reserved word")
                .help(format!(
                    "choose another name; these words are reserved: {}",
                    RESERVED.join(" ")
                )),
            );
        }
        name
    }

    /// A number literal; one past the 64-bit range is reported, never clamped.
    fn number(&mut self, pair: &Pair<'_, Rule>) -> f64 {
        let text = pair.as_str();
        if !number_fits(text) {
            self.too_large(self.span(pair), "this number does not fit in 64 bits");
        }
        text.parse().unwrap_or(f64::NAN)
    }

    /// A duration literal, read by the one duration parser (`rondo_config`). The grammar
    /// admits only its syntax, so what it refuses is a duration past its range.
    fn duration(&mut self, pair: &Pair<'_, Rule>) -> std::time::Duration {
        rondo_config::parse_duration(pair.as_str()).unwrap_or_else(|_| {
            self.too_large(
                self.span(pair),
                "this duration does not fit in 64 bits of milliseconds",
            );
            rondo_config::duration::MAX
        })
    }

    fn too_large(&mut self, at: Span, message: &str) {
        self.diagnostics.push(
            Diagnostic::error(Code::SyntaxNumberTooLarge, message)
                .label(at, "past the 64-bit range")
                .help("a number's whole part is at most 18446744073709551615 either side of zero; write a smaller value"),
        );
    }

    /// Whether only blanks precede `at` on its line.
    fn starts_line(&self, at: usize) -> bool {
        let before = &self.text[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        before[line_start..].trim().is_empty()
    }

    /// A line (or the rest of one) that no rule of its place accepts.
    fn bad_line(&mut self, pair: Pair<'_, Rule>, context: Context) {
        // A block body that runs into an unclosed `/*` holds it as its last line.
        if pair.as_rule() == Rule::unclosed_comment {
            return;
        }
        let text = pair.as_str().trim_end();
        let start = self.span(&pair).start;
        let at = Span::new(start, start + text.len());
        let word = text.split_whitespace().next().unwrap_or("");
        let (what, help) = if !self.starts_line(at.start) {
            // The start of the line was understood; what follows it was not.
            let help = match context {
                Context::Top => {
                    "a route is `a -> b`, optionally followed by `when <condition>` or `otherwise`, then `max N` and `backtrack`; a declaration ends with its `}`"
                }
                _ => "write one statement per line; a comment starts with `//`",
            };
            ("unexpected text at the end of this line", help.to_string())
        } else {
            match context {
                Context::Top => (
                    "this line is not a declaration or a route",
                    did_you_mean_keyword(word).unwrap_or_else(|| {
                        "a line starts with `workflow`, `import`, `type`, `memory`, `provider`, `tool`, `environment`, `role`, `exit`, `test`, or is a route `a -> b`".to_string()
                    }),
                ),
                Context::Update => (
                    "this line is not a memory update",
                    "an update is `set name = expr` or `name.op(args)`, e.g. `plan.append(output)`".to_string(),
                ),
                Context::Field => (
                    "this line is not a field declaration",
                    "a field is `name: type`, e.g. `title: string` or `status: \"todo\" | \"done\"`".to_string(),
                ),
                Context::Test => (
                    "this line is not a test statement",
                    "a test line is `input x = expr`, `reply role = \"...\"`, `expect exit NAME`, `expect path [..]`, `expect artifact \"name\"` or `expect <expression>`".to_string(),
                ),
                Context::Block => (
                    "this line is not understood here",
                    "an attribute is `name = value`; a nested block is `name { ... }`".to_string(),
                ),
            }
        };
        self.diagnostics.push(
            Diagnostic::error(Code::SyntaxInvalidLine, what)
                .label(at, "not understood")
                .help(help),
        );
    }

    /// A declaration's keyword, then something that is not that declaration: one
    /// diagnostic at its first line, with the form; the block it opens is skipped. The
    /// name of a broken `role` or `exit`, when it has one.
    fn bad_decl(&mut self, pair: Pair<'_, Rule>) -> Option<String> {
        let text = pair.as_str();
        let line = text.lines().next().unwrap_or("").trim_end();
        let start = self.span(&pair).start;
        let at = Span::new(start, start + line.len());
        let keyword = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("");
        let form = match keyword {
            "role" => "`role NAME: KIND { ... }`, KIND being `llm`, `tool` or `builtin`",
            "exit" => "`exit NAME`, optionally with a `{ ... }` block and `when <condition>`",
            "type" => "`type NAME { field: type }` or `type NAME = type`",
            "workflow" => "`workflow NAME { ... }`",
            "memory" => "`memory { name: type = value }`",
            "import" => "`import providers \"file.yaml\"` or `import tool \"file.yaml\"`",
            "provider" => "`provider NAME { ... }`",
            "tool" => "`tool NAME { ... }`",
            "environment" => "`environment NAME { ... }`",
            "test" => "`test \"name\" { ... }`: a test's name is a string",
            _ => "`artifact \"name\" = expression` or `artifact \"name\" += expression`",
        };
        let skipped = if text.contains('\n') {
            "; the block it opens is skipped"
        } else {
            ""
        };
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxInvalidLine,
                format!("this `{keyword}` declaration does not parse"),
            )
            .label(at, "not understood")
            .help(format!(
                "{} `{keyword}` declaration is {form}{skipped}",
                if keyword.starts_with(['a', 'e', 'i']) {
                    "an"
                } else {
                    "a"
                }
            )),
        );
        let mut words = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty());
        let name = words.nth(1)?;
        let is_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        (matches!(keyword, "role" | "exit") && is_name).then(|| name.to_string())
    }

    /// Builds one declaration, route or bad line (`None`: a bad line, reported).
    fn item(&mut self, item: Pair<'_, Rule>) -> Option<Item> {
        Some(match item.as_rule() {
            Rule::workflow_decl => Item::Workflow(self.workflow(item)),
            Rule::import_decl => Item::Import(self.import(item)),
            Rule::type_decl => Item::Type(self.type_decl(item)),
            Rule::memory_decl => {
                let s = self.span(&item);
                let mut entries = Vec::new();
                for entry in children(item) {
                    match entry.as_rule() {
                        Rule::memory_entry => entries.push(self.memory_entry(entry)),
                        Rule::unclosed => self.unclosed(s),
                        _ => self.bad_line(entry, Context::Block),
                    }
                }
                Item::Memory(entries)
            }
            Rule::provider_decl => Item::Provider(self.block_decl(item)),
            Rule::environment_decl => Item::Environment(self.block_decl(item)),
            Rule::tool_decl => Item::Tool(self.tool_decl(item)),
            Rule::role_decl => Item::Role(self.role(item)),
            Rule::exit_decl => Item::Exit(self.exit(item)),
            Rule::route_decl => Item::Route(self.route(item)),
            Rule::artifact_decl => Item::Artifact(self.artifact(item)?),
            Rule::test_decl => Item::Test(self.test(item)),
            Rule::bad_line => {
                self.bad_line(item, Context::Top);
                return None;
            }
            Rule::bad_decl => Item::Broken(self.bad_decl(item)?),
            _ => return None,
        })
    }

    /// Reads the step at `base` (see the grammar's `step`), builds its items and moves
    /// `base` past it. `Err`: pest's stack or call guard stopped it.
    fn step(&mut self) -> Result<Vec<Item>, Diagnostic> {
        let rest = &self.text[self.base..];
        let step = match RondoParser::parse(Rule::step, rest) {
            Ok(mut pairs) => pairs.next().filter(|step| !step.as_str().is_empty()),
            Err(error) => return Err(pest_error(error, self.base)),
        };
        // Every line is accepted; a step that reads nothing would be a grammar bug.
        let Some(step) = step else {
            let at = Span::new(self.base, self.base);
            return Err(Diagnostic::error(
                Code::SyntaxUnexpected,
                "syntax error: unexpected input",
            )
            .label(at, "not understood"));
        };
        let read = step.as_str().len();
        self.note_unclosed_comment(&step);
        let items = children(step).filter_map(|item| self.item(item)).collect();
        self.base += read;
        Ok(items)
    }

    fn workflow(&mut self, pair: Pair<'_, Rule>) -> WorkflowDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        let mut decl = WorkflowDecl {
            name,
            inputs: Vec::new(),
            attrs: Vec::new(),
            answers: Vec::new(),
            span: s,
        };
        for item in inner {
            match item.as_rule() {
                Rule::input_decl => {
                    let s = self.span(&item);
                    let mut parts = children(item);
                    let (Some(name), Some(ty)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let name = self.declared(Some(name), s);
                    decl.inputs.push(InputDecl {
                        name,
                        ty: self.type_expr(ty),
                        default: parts.next().map(|e| self.expr(e)),
                        span: s,
                    });
                }
                Rule::answer_decl => {
                    if let Some(e) = children(item).next() {
                        let e = self.expr(e);
                        decl.answers.push(e);
                    }
                }
                _ => self.body_attr(item, s, &mut decl.attrs),
            }
        }
        decl
    }

    fn import(&mut self, pair: Pair<'_, Rule>) -> ImportDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let kind = match inner.next().map(|p| p.as_str()) {
            Some("providers") => ImportKind::Providers,
            _ => ImportKind::Tool,
        };
        let (path, path_span) = inner
            .next()
            .map(|p| (self.span(&p), string_value(p)))
            .map(|(sp, v)| (v, sp))
            .unwrap_or_default();
        ImportDecl {
            kind,
            path,
            path_span,
            span: s,
        }
    }

    /// One line of an attribute body: an attribute, a bad line, or the end of an unclosed
    /// block opened at `block`.
    fn body_attr(&mut self, item: Pair<'_, Rule>, block: Span, attrs: &mut Vec<Attr>) {
        match item.as_rule() {
            Rule::attr | Rule::flat_attr => attrs.push(self.attr(item)),
            Rule::unclosed => self.unclosed(block),
            _ => self.bad_line(item, Context::Block),
        }
    }

    fn attrs_of(&mut self, pairs: Children<'_>, block: Span) -> Vec<Attr> {
        let mut attrs = Vec::new();
        for item in pairs {
            self.body_attr(item, block, &mut attrs);
        }
        attrs
    }

    fn attr(&mut self, pair: Pair<'_, Rule>) -> Attr {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let key = self.ident_or_missing(inner.next(), s);
        let value = match inner.next() {
            Some(block) if block.as_rule() == Rule::attr_block => Value {
                kind: ValueKind::Block(self.attrs_of(children(block), s)),
                span: s,
            },
            Some(colon) if colon.as_rule() == Rule::colon => {
                self.colon_attribute(&key, self.span(&colon));
                self.value_or_null(inner.next(), s)
            }
            value => self.value_or_null(value, s),
        };
        Attr {
            key,
            value,
            span: s,
        }
    }

    fn colon_attribute(&mut self, key: &Ident, at: Span) {
        self.diagnostics.push(
            Diagnostic::error(
                Code::SyntaxColonAttribute,
                format!("an attribute takes `=`, not `:`: `{} = ...`", key.name),
            )
            .label(at, "write `=` here")
            .help("attributes are `name = value`; `:` gives a type (`input x: string`, fields, memory)"),
        );
    }

    fn value_or_null(&mut self, pair: Option<Pair<'_, Rule>>, at: Span) -> Value {
        match pair {
            Some(v) => self.value(v),
            None => Value {
                kind: ValueKind::Null,
                span: at,
            },
        }
    }

    fn value(&mut self, pair: Pair<'_, Rule>) -> Value {
        let s = self.span(&pair);
        let kind = match pair.as_rule() {
            Rule::string | Rule::raw_string => ValueKind::String(string_value(pair)),
            Rule::single_string => {
                self.single_quote(s);
                ValueKind::String(string_value(pair))
            }
            Rule::duration => ValueKind::Duration(self.duration(&pair)),
            Rule::number => ValueKind::Number(self.number(&pair)),
            Rule::name_value => self.name_value(pair),
            Rule::list_value => ValueKind::List(children(pair).map(|v| self.value(v)).collect()),
            Rule::map_value => ValueKind::Map(
                children(pair)
                    .filter_map(|entry| {
                        let mut parts = children(entry);
                        let key = self.map_key(parts.next()?);
                        Some((key, self.value(parts.next()?)))
                    })
                    .collect(),
            ),
            _ => ValueKind::Null,
        };
        Value { kind, span: s }
    }

    /// `planning`, `planner.tool`, `tail(30)`; `true`, `false`, `null` (and Python's
    /// spellings, reported).
    fn name_value(&mut self, pair: Pair<'_, Rule>) -> ValueKind {
        let mut inner = children(pair);
        let Some(path) = inner.next() else {
            return ValueKind::Null;
        };
        if let Some(args) = inner.next() {
            let name = Ident {
                name: path.as_str().to_string(),
                span: self.span(&path),
            };
            return ValueKind::Call(name, children(args).map(|v| self.value(v)).collect());
        }
        if let Some((literal, python)) = expr::word_literal(path.as_str()) {
            if python {
                self.python_literal(path.as_str(), self.span(&path));
            }
            return match literal {
                ExprKind::Bool(b) => ValueKind::Bool(b),
                _ => ValueKind::Null,
            };
        }
        let mut names = self.path_names(&path);
        if names.len() == 1 {
            ValueKind::Ident(names.remove(0).name)
        } else {
            ValueKind::Path(names)
        }
    }

    fn block_decl(&mut self, pair: Pair<'_, Rule>) -> BlockDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        BlockDecl {
            name,
            attrs: self.attrs_of(inner, s),
            span: s,
        }
    }

    fn tool_decl(&mut self, pair: Pair<'_, Rule>) -> ToolDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        let mut decl = ToolDecl {
            name,
            attrs: Vec::new(),
            input: None,
            span: s,
        };
        for item in inner {
            match item.as_rule() {
                Rule::tool_input => {
                    if let Some(obj) = children(item).next() {
                        decl.input = Some(self.object_type(obj));
                    }
                }
                _ => self.body_attr(item, s, &mut decl.attrs),
            }
        }
        decl
    }

    fn type_decl(&mut self, pair: Pair<'_, Rule>) -> TypeDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        let ty = match inner.next() {
            Some(p) => self.type_expr(p),
            None => any_type(s),
        };
        TypeDecl { name, ty, span: s }
    }

    fn type_expr(&mut self, pair: Pair<'_, Rule>) -> TypeExpr {
        let s = self.span(&pair);
        // The checker refuses types past 64 levels; the bound here only keeps a hostile
        // file from overflowing the stack before it gets there.
        if self.depth >= expr::MAX_EXPR_DEPTH {
            if !self.too_deep_type {
                self.too_deep_type = true;
                self.diagnostics.push(
                    Diagnostic::error(Code::SyntaxTooDeep, TYPE_TOO_DEEP)
                        .label(s, "nested too deeply")
                        .help("name the inner types: `type Inner = { ... }`, then use `Inner`"),
                );
            }
            return any_type(s);
        }
        self.depth += 1;
        let ty = self.type_expr_at_depth(pair, s);
        self.depth -= 1;
        ty
    }

    fn type_expr_at_depth(&mut self, pair: Pair<'_, Rule>, s: Span) -> TypeExpr {
        match pair.as_rule() {
            Rule::type_expr => {
                let mut inner = children(pair);
                let base = match inner.next() {
                    Some(p) => self.type_expr(p),
                    None => any_type(s),
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
                    children(pair).map(|p| self.type_expr(p)).collect();
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
                let item = match children(pair).next() {
                    Some(p) => self.type_expr(p),
                    None => any_type(s),
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
        let s = self.span(&pair);
        let mut fields = Vec::new();
        let mut attrs = Vec::new();
        for field in children(pair) {
            match field.as_rule() {
                Rule::type_attr => attrs.push(self.attr(field)),
                Rule::field_decl => {
                    let fs = self.span(&field);
                    let mut parts = children(field);
                    let (Some(name), Some(ty)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    fields.push(FieldDecl {
                        name: self.ident(name),
                        ty: self.type_expr(ty),
                        span: fs,
                    });
                }
                Rule::unclosed => self.unclosed(s),
                _ => self.bad_line(field, Context::Field),
            }
        }
        TypeExpr {
            kind: TypeKind::Object(fields, attrs),
            span: s,
        }
    }

    fn memory_entry(&mut self, pair: Pair<'_, Rule>) -> MemoryEntry {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        let shape = match inner.next() {
            Some(p) if p.as_rule() == Rule::memory_kind => {
                let mut parts = children(p);
                let kind = self.ident_or_missing(parts.next(), s);
                MemoryShape::Kind {
                    kind,
                    attrs: self.attrs_of(parts, s),
                }
            }
            Some(p) => MemoryShape::Plain {
                ty: self.type_expr(p),
                default: inner.next().map(|e| self.expr(e)),
            },
            None => MemoryShape::Plain {
                ty: any_type(s),
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
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        let kind = self.ident_or_missing(inner.next(), s);
        let mut role = RoleDecl::new(name, kind, s);
        for item in inner {
            match item.as_rule() {
                Rule::output_decl => self.output(item, &mut role),
                Rule::update_block => {
                    let us = self.span(&item);
                    for stmt in children(item) {
                        match stmt.as_rule() {
                            Rule::set_stmt | Rule::call_stmt => {
                                if let Some(u) = self.update(stmt) {
                                    role.updates.push(u);
                                }
                            }
                            Rule::unclosed => self.unclosed(us),
                            _ => self.bad_line(stmt, Context::Update),
                        }
                    }
                }
                Rule::artifact_decl => {
                    if let Some(a) = self.artifact(item) {
                        role.artifacts.push(a);
                    }
                }
                _ => self.body_attr(item, s, &mut role.attrs),
            }
        }
        role
    }

    fn output(&mut self, item: Pair<'_, Rule>, role: &mut RoleDecl) {
        let os = self.span(&item);
        let Some(decl) = children(item).next() else {
            return;
        };
        let output = match decl.as_rule() {
            Rule::output_json => match children(decl).next() {
                Some(t) => OutputDecl::Json(self.type_expr(t)),
                None => OutputDecl::Text,
            },
            Rule::output_tagged => match children(decl).next() {
                Some(t) => OutputDecl::Tagged(self.type_expr(t)),
                None => OutputDecl::Text,
            },
            Rule::output_code => OutputDecl::Code(children(decl).next().map(string_value)),
            _ => OutputDecl::Text,
        };
        if let Some((_, previous)) = &role.output {
            self.diagnostics.push(
                Diagnostic::error(
                    Code::RoleDuplicateOutput,
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

    fn artifact(&mut self, item: Pair<'_, Rule>) -> Option<ArtifactDecl> {
        let s = self.span(&item);
        let mut parts = children(item);
        let name = parts.next()?;
        let mode = parts.next()?;
        let value = parts.next()?;
        Some(ArtifactDecl {
            name_span: self.span(&name),
            name: string_value(name),
            append: mode.as_str() == "+=",
            value: self.expr(value),
            span: s,
        })
    }

    fn update(&mut self, pair: Pair<'_, Rule>) -> Option<UpdateStmt> {
        let s = self.span(&pair);
        let is_set = pair.as_rule() == Rule::set_stmt;
        let mut inner = children(pair);
        let target = self.ident(inner.next()?);
        if is_set {
            let value = self.expr(inner.next()?);
            Some(UpdateStmt::Set {
                target,
                value,
                span: s,
            })
        } else {
            let op = self.ident(inner.next()?);
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
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = self.declared(inner.next(), s);
        let mut decl = ExitDecl {
            name,
            attrs: Vec::new(),
            condition: None,
            span: s,
        };
        for item in inner {
            match item.as_rule() {
                Rule::expr => decl.condition = Some(self.expr(item)),
                _ => self.body_attr(item, s, &mut decl.attrs),
            }
        }
        decl
    }

    fn route(&mut self, pair: Pair<'_, Rule>) -> RouteDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let (from, from_span) = match inner.next() {
            Some(p) if p.as_str() == "start" => (None, self.span(&p)),
            Some(p) => {
                let id = self.ident(p);
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
            let ps = self.span(&part);
            match part.as_rule() {
                // `a -> start` is a role target named `start`; the checker rejects it.
                Rule::ident => route.target = RouteTarget::Role(self.ident(part)),
                Rule::parallel_target => {
                    let mut names: Vec<Ident> = children(part).map(|p| self.ident(p)).collect();
                    let join = names.pop().unwrap_or_else(|| missing(ps));
                    route.target = RouteTarget::Parallel {
                        branches: names,
                        join,
                    };
                }
                Rule::map_target => route.target = self.map_target(part, ps),
                Rule::when_mod => {
                    if let Some(e) = children(part).next() {
                        let cond = Condition::When(self.expr(e));
                        route.condition = self.set_condition(&route.condition, cond, ps);
                    }
                }
                Rule::if_mod => {
                    self.python_keyword("if", "when", Span::new(ps.start, ps.start + 2));
                    if let Some(e) = children(part).next() {
                        let cond = Condition::When(self.expr(e));
                        route.condition = self.set_condition(&route.condition, cond, ps);
                    }
                }
                Rule::otherwise_mod => {
                    route.condition =
                        self.set_condition(&route.condition, Condition::Otherwise(ps), ps);
                }
                Rule::else_mod => {
                    self.python_keyword("else", "otherwise", ps);
                    route.condition =
                        self.set_condition(&route.condition, Condition::Otherwise(ps), ps);
                }
                Rule::max_mod => {
                    let n = children(part)
                        .next()
                        .map(|n| self.number(&n))
                        .unwrap_or(-1.0);
                    if !n.is_finite() || n > u64::MAX as f64 {
                        // Reported as too large.
                    } else if n < 1.0 || n.fract() != 0.0 {
                        self.diagnostics.push(
                            Diagnostic::error(
                                Code::RouteBadBound,
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

    /// `map worker over EXPR -> join`; a missing part is at the target's span `at`.
    fn map_target(&mut self, pair: Pair<'_, Rule>, at: Span) -> RouteTarget {
        let mut parts = children(pair);
        let worker = self.ident_or_missing(parts.next(), at);
        let over = parts.next().map(|e| self.expr(e));
        let join = self.ident_or_missing(parts.next(), at);
        RouteTarget::Map {
            worker,
            over: over.unwrap_or(Expr {
                kind: ExprKind::Null,
                span: at,
            }),
            join,
        }
    }

    fn set_condition(&mut self, previous: &Condition, new: Condition, at: Span) -> Condition {
        if !matches!(previous, Condition::Always) {
            self.diagnostics.push(
                Diagnostic::error(Code::RouteTwoConditions, "this route has two conditions")
                    .label(at, "second condition")
                    .help("join conditions with `and`, or write two routes"),
            );
        }
        new
    }

    fn test(&mut self, pair: Pair<'_, Rule>) -> TestDecl {
        let s = self.span(&pair);
        let mut inner = children(pair);
        let name = inner.next().map(string_value).unwrap_or_default();
        let mut test = TestDecl::new(name, s);
        for item in inner {
            let is = self.span(&item);
            match item.as_rule() {
                Rule::test_input => {
                    let mut parts = children(item);
                    if let (Some(name), Some(value)) = (parts.next(), parts.next()) {
                        test.inputs.push((self.ident(name), self.expr(value)));
                    }
                }
                Rule::test_reply => {
                    let mut role = None;
                    let mut visit = None;
                    let mut text = String::new();
                    for part in children(item) {
                        match part.as_rule() {
                            Rule::ident => role = Some(self.ident(part)),
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
                    if let Some(name) = children(item).next() {
                        test.expectations.push(Expectation::Exit(self.ident(name)));
                    }
                }
                Rule::expect_path => {
                    test.expectations.push(Expectation::Path(
                        children(item).map(|p| self.ident(p)).collect(),
                        is,
                    ));
                }
                Rule::expect_artifact => {
                    let mut parts = children(item);
                    let name = parts.next().map(string_value).unwrap_or_default();
                    let contains = parts.next().map(string_value);
                    test.expectations.push(Expectation::Artifact {
                        name,
                        contains,
                        span: is,
                    });
                }
                Rule::expect_expr => {
                    if let Some(e) = children(item).next() {
                        test.expectations.push(Expectation::Holds(self.expr(e)));
                    }
                }
                Rule::attr => test.attrs.push(self.attr(item)),
                Rule::unclosed => self.unclosed(s),
                _ => self.bad_line(item, Context::Test),
            }
        }
        test
    }
}

/// Words that would make a route or an expression ambiguous as names.
const RESERVED: &[&str] = &[
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
