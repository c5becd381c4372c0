//! The syntax tree printed in the one layout: a statement a line, blocks indented by two
//! spaces, a blank line between top-level declarations, each comment where it was.
//!
//! The tree keeps the words and values; the text keeps the rest. Literals (strings,
//! numbers, durations) are printed as written, `"""` strings moved as a whole to their
//! new indentation. Comments come from [`Scan`], in the order of the text: the ones
//! before a statement (or inside one that is printed on a line of its own) go on their
//! own lines before it; one that followed a statement on its line follows it still.

use super::doc::{self, Doc, INDENT, WIDTH, bracketed, concat, filled, group, nest, text};
use super::scan::Scan;
use crate::source::Span;
use crate::syntax::ast::*;

/// One line of the output.
enum Out {
    Blank,
    Code {
        indent: usize,
        /// Its text; a statement printed over several lines holds them all, indented.
        text: String,
        trailing: Option<String>,
    },
}

/// What is printed as a line (or a block) of its own.
#[derive(Clone, Copy)]
enum Node<'a> {
    Workflow(&'a WorkflowDecl),
    Import(&'a ImportDecl),
    Type(&'a TypeDecl),
    /// `memory { ... }`: where `memory` starts, its braces, the entries inside them.
    Memory(usize, Span),
    Provider(&'a BlockDecl),
    Environment(&'a BlockDecl),
    Tool(&'a ToolDecl),
    Role(&'a RoleDecl),
    Exit(&'a ExitDecl),
    Route(&'a RouteDecl),
    Artifact(&'a ArtifactDecl),
    Test(&'a TestDecl),
    Input(&'a InputDecl),
    Answer(&'a Expr),
    Attr(&'a Attr),
    ToolInput(&'a TypeExpr),
    Output(&'a OutputDecl, Span),
    /// `update { ... }` of a role: where `update` starts and its braces.
    Update(&'a RoleDecl, usize, Span),
    Statement(&'a UpdateStmt),
    MemoryEntry(&'a MemoryEntry),
    Field(&'a FieldDecl),
    TestInput(&'a Ident, &'a Expr),
    Reply(&'a TestReply),
    Expect(&'a Expectation),
}

/// Kinds of top-level lines that stand together without a blank line between them (as
/// written: a blank line there is kept).
#[derive(PartialEq, Eq, Clone, Copy)]
enum Group {
    Import,
    TypeAlias,
    Exit,
    Route,
    Artifact,
    Alone,
}

impl Node<'_> {
    /// Where it starts and ends in the source.
    fn range(&self) -> (usize, usize) {
        let span = match *self {
            Node::Workflow(d) => d.span,
            Node::Import(d) => d.span,
            Node::Type(d) => d.span,
            Node::Memory(start, block) | Node::Update(_, start, block) => {
                Span::new(start, block.end + 1)
            }
            Node::Provider(d) | Node::Environment(d) => d.span,
            Node::Tool(d) => d.span,
            Node::Role(d) => d.span,
            Node::Exit(d) => d.span,
            Node::Route(d) => d.span,
            Node::Artifact(d) => d.span,
            Node::Test(d) => d.span,
            Node::Input(d) => d.span,
            Node::Answer(e) => e.span,
            Node::Attr(a) => a.span,
            Node::ToolInput(t) => t.span,
            Node::Output(_, span) => span,
            Node::Statement(UpdateStmt::Set { span, .. } | UpdateStmt::Call { span, .. }) => *span,
            Node::MemoryEntry(e) => e.span,
            Node::Field(f) => f.span,
            Node::TestInput(name, value) => Span::new(name.span.start, value.span.end),
            Node::Reply(r) => r.span,
            Node::Expect(e) => match e {
                Expectation::Exit(name) => name.span,
                Expectation::Path(_, span) | Expectation::Artifact { span, .. } => *span,
                Expectation::Holds(e) => e.span,
            },
        };
        (span.start, span.end)
    }

    fn group(&self) -> Group {
        match self {
            Node::Import(_) => Group::Import,
            Node::Type(t) if !matches!(t.ty.kind, TypeKind::Object(..)) => Group::TypeAlias,
            Node::Exit(_) => Group::Exit,
            Node::Route(_) => Group::Route,
            Node::Artifact(_) => Group::Artifact,
            _ => Group::Alone,
        }
    }

    /// Whether it holds statements of its own, whose comments stay inside it.
    fn holds_statements(&self) -> bool {
        match self {
            Node::Workflow(_)
            | Node::Memory(..)
            | Node::Provider(_)
            | Node::Environment(_)
            | Node::Tool(_)
            | Node::Role(_)
            | Node::Test(_)
            | Node::ToolInput(_)
            | Node::Update(..) => true,
            Node::Type(t) => object_of(&t.ty).is_some(),
            Node::Exit(e) => !e.attrs.is_empty(),
            Node::Attr(a) => matches!(a.value.kind, ValueKind::Block(_)),
            Node::Output(OutputDecl::Json(t) | OutputDecl::Tagged(t), _) => object_of(t).is_some(),
            Node::MemoryEntry(e) => {
                matches!(&e.shape, MemoryShape::Kind { attrs, .. } if !attrs.is_empty())
            }
            Node::Field(f) => object_of(&f.ty).is_some(),
            _ => false,
        }
    }
}

/// The fields of an object type (or of an optional one), printed as a block.
fn object_of(ty: &TypeExpr) -> Option<(&[FieldDecl], &[Attr], Span, bool)> {
    match &ty.kind {
        TypeKind::Object(fields, attrs) => Some((fields, attrs, ty.span, false)),
        TypeKind::Optional(inner) => match &inner.kind {
            TypeKind::Object(fields, attrs) => Some((fields, attrs, inner.span, true)),
            _ => None,
        },
        _ => None,
    }
}

fn sorted(mut nodes: Vec<Node<'_>>) -> Vec<Node<'_>> {
    nodes.sort_by_key(|n| n.range().0);
    nodes
}

/// How deep blocks, types, values and expressions may nest for the printer (which
/// recurses on them): deeper, the file is not formatted.
pub const MAX_NESTING: usize = 256;

pub struct Printer<'a> {
    src: &'a str,
    ast: &'a Ast,
    scan: &'a Scan,
    /// How deep the printer is now, and whether it went past [`MAX_NESTING`].
    depth: std::cell::Cell<usize>,
    too_deep: std::cell::Cell<bool>,
    /// The next comment to print.
    next: usize,
    out: Vec<Out>,
    /// Where in the source what was printed last ends.
    prev_end: usize,
}

impl<'a> Printer<'a> {
    pub fn new(src: &'a str, scan: &'a Scan, ast: &'a Ast) -> Self {
        Printer {
            src,
            ast,
            scan,
            depth: std::cell::Cell::new(0),
            too_deep: std::cell::Cell::new(false),
            next: 0,
            out: Vec::new(),
            prev_end: 0,
        }
    }

    /// The file formatted; `None` when it nests past [`MAX_NESTING`].
    pub fn file(mut self) -> Option<String> {
        let ast = self.ast;
        let mut nodes: Vec<Node<'a>> = Vec::new();
        nodes.extend(ast.workflow.iter().map(Node::Workflow));
        nodes.extend(ast.imports.iter().map(Node::Import));
        nodes.extend(ast.types.iter().map(Node::Type));
        let everything = Span::new(0, self.src.len());
        for (start, block) in self
            .scan
            .blocks_after_word(self.src, everything, "memory", 0)
        {
            nodes.push(Node::Memory(start, block));
        }
        nodes.extend(ast.providers.iter().map(Node::Provider));
        nodes.extend(ast.tools.iter().map(Node::Tool));
        nodes.extend(ast.environments.iter().map(Node::Environment));
        nodes.extend(ast.roles.iter().map(Node::Role));
        nodes.extend(ast.exits.iter().map(Node::Exit));
        nodes.extend(ast.routes.iter().map(Node::Route));
        nodes.extend(ast.artifacts.iter().map(Node::Artifact));
        nodes.extend(ast.tests.iter().map(Node::Test));
        let nodes = sorted(nodes);
        self.body(&nodes, 0, self.src.len(), true);
        if self.too_deep.get() {
            return None;
        }
        Some(self.finish())
    }

    /// One level deeper; `false` (and nothing is to be printed) past [`MAX_NESTING`].
    fn enter(&self) -> bool {
        let depth = self.depth.get() + 1;
        self.depth.set(depth);
        if depth > MAX_NESTING {
            self.too_deep.set(true);
        }
        !self.too_deep.get()
    }

    fn leave(&self) {
        self.depth.set(self.depth.get() - 1);
    }

    /// `print` one level deeper, or nothing past [`MAX_NESTING`].
    fn nested<T>(&self, print: impl FnOnce() -> T, nothing: T) -> T {
        let result = if self.enter() { print() } else { nothing };
        self.leave();
        result
    }

    /// The statements of a block (or of the file), then the comments left before `close`.
    fn body(&mut self, nodes: &[Node<'a>], indent: usize, close: usize, top: bool) {
        let mut first = true;
        let mut previous: Option<Group> = None;
        for (i, node) in nodes.iter().enumerate() {
            let (start, end) = node.range();
            let mut force = top && previous.is_some_and(|p| p != node.group() || p == Group::Alone);
            let flush_to = if node.holds_statements() { start } else { end };
            self.comments_before(flush_to, indent, &mut first, &mut force);
            self.gap(start, &mut first, &mut force);
            let (first_line, comments_before) = (self.out.len(), self.next);
            self.node(node, indent);
            self.prev_end = self.prev_end.max(end);
            let limit = nodes.get(i + 1).map_or(close, |n| n.range().0);
            // A block written on one line, now broken: its comment goes on its first line.
            let header = node.holds_statements()
                && self.next == comments_before
                && self.out.len() > first_line + 1
                && !self.src[start..end].contains('\n');
            let line = if header {
                first_line
            } else {
                self.out.len().saturating_sub(1)
            };
            self.same_line_comment(end, end, limit, line);
            previous = Some(node.group());
        }
        self.comments_before(close, indent, &mut first, &mut false);
    }

    /// A blank line before what starts at `start`, where the source has one (or `force`),
    /// never first in a block.
    fn gap(&mut self, start: usize, first: &mut bool, force: &mut bool) {
        if !*first && (*force || self.blank_between(self.prev_end, start)) {
            self.out.push(Out::Blank);
        }
        *first = false;
        *force = false;
    }

    fn blank_between(&self, from: usize, to: usize) -> bool {
        if from >= to {
            return false;
        }
        let between = &self.src[from..to];
        let mut lines = between.split('\n');
        lines.next();
        let mut inner: Vec<&str> = lines.collect();
        inner.pop();
        inner.iter().any(|l| l.trim().is_empty())
    }

    /// The comments that start before `limit`, each on its own line.
    fn comments_before(&mut self, limit: usize, indent: usize, first: &mut bool, force: &mut bool) {
        while let Some(comment) = self.scan.comments.get(self.next)
            && comment.span.start < limit
        {
            self.gap(comment.span.start, first, force);
            self.out.push(Out::Code {
                indent,
                text: comment.text.clone(),
                trailing: None,
            });
            self.prev_end = self.prev_end.max(comment.span.end);
            self.next += 1;
        }
    }

    /// A comment on the line of `line_of`, after `after` and before `limit`, at the end of
    /// the output line `line`.
    fn same_line_comment(&mut self, line_of: usize, after: usize, limit: usize, line: usize) {
        let Some(comment) = self.scan.comments.get(self.next) else {
            return;
        };
        let at = comment.span.start;
        if at < after || at >= limit || self.src[line_of.min(at)..at].contains('\n') {
            return;
        }
        if let Some(Out::Code { trailing, .. }) = self.out.get_mut(line)
            && trailing.is_none()
        {
            *trailing = Some(comment.text.clone());
            self.prev_end = self.prev_end.max(comment.span.end);
            self.next += 1;
        }
    }

    fn line(&mut self, indent: usize, text: String) {
        self.out.push(Out::Code {
            indent,
            text,
            trailing: None,
        });
    }

    fn leaf(&mut self, indent: usize, doc: Doc) {
        let text = doc::render(&doc, indent * INDENT, indent * INDENT);
        self.line(indent, text);
    }

    /// `header {`, the statements, `footer`.
    fn block(
        &mut self,
        indent: usize,
        header: String,
        start: usize,
        nodes: Vec<Node<'a>>,
        close: usize,
        footer: Doc,
    ) {
        let nodes = sorted(nodes);
        if nodes.is_empty() && !self.has_comment(Span::new(start, close)) {
            self.prev_end = self.prev_end.max(close + 1);
            return self.leaf(indent, concat(vec![text(format!("{header} {{}}")), footer]));
        }
        let limit = nodes.first().map_or(close, |n| n.range().0);
        self.line(indent, format!("{header} {{"));
        self.same_line_comment(start, start, limit, self.out.len().saturating_sub(1));
        self.body(&nodes, indent + 1, close, false);
        self.prev_end = self.prev_end.max(close + 1);
        self.leaf(indent, concat(vec![text("}"), footer]));
    }

    /// `head { key = value ... }`: a block of attributes; one attribute with no comment
    /// inside stays on the line when it fits.
    fn attr_block(
        &mut self,
        indent: usize,
        head: String,
        start: usize,
        attrs: &'a [Attr],
        braces: Span,
        footer: Doc,
    ) {
        if let [only] = attrs
            && !matches!(only.value.kind, ValueKind::Block(_))
            && !self.has_comment(braces)
        {
            let doc = concat(vec![
                text(format!("{head} {{ ")),
                self.attr_line(only),
                text(" }"),
                footer.clone(),
            ]);
            if self.fits_on_a_line(indent, &doc) {
                return self.leaf(indent, doc);
            }
        }
        let nodes = attrs.iter().map(Node::Attr).collect();
        self.block(indent, head, start, nodes, braces.end, footer);
    }

    /// `head { field: type ... }`, `object` being the braces' span: one field with no
    /// comment inside stays on the line when it fits.
    fn fields_block(
        &mut self,
        indent: usize,
        head: String,
        start: usize,
        (fields, attrs): (&'a [FieldDecl], &'a [Attr]),
        object: Span,
        footer: Doc,
    ) {
        if let [only] = fields
            && attrs.is_empty()
            && object_of(&only.ty).is_none()
            && !self.has_comment(object)
        {
            let doc = concat(vec![
                text(format!("{head} {{ {}: ", only.name.name)),
                self.ty(&only.ty),
                text(" }"),
                footer.clone(),
            ]);
            if self.fits_on_a_line(indent, &doc) {
                return self.leaf(indent, doc);
            }
        }
        let mut nodes: Vec<Node<'a>> = fields.iter().map(Node::Field).collect();
        nodes.extend(attrs.iter().map(Node::Attr));
        self.block(indent, head, start, nodes, object.end - 1, footer);
    }

    fn fits_on_a_line(&self, indent: usize, doc: &Doc) -> bool {
        let rendered = doc::render(doc, indent * INDENT, indent * INDENT);
        !rendered.contains('\n') && indent * INDENT + rendered.chars().count() <= WIDTH
    }

    fn has_comment(&self, span: Span) -> bool {
        let comments = &self.scan.comments;
        let first = comments.partition_point(|c| c.span.start < span.start);
        comments.get(first).is_some_and(|c| c.span.start < span.end)
    }

    fn node(&mut self, node: &Node<'a>, indent: usize) {
        if self.enter() {
            self.node_inner(node, indent);
        }
        self.leave();
    }

    /// Long but one piece: one short arm per kind of node, the printer's table of contents.
    fn node_inner(&mut self, node: &Node<'a>, indent: usize) {
        let (start, end) = node.range();
        match *node {
            Node::Workflow(w) => {
                let mut nodes: Vec<Node<'a>> = w.inputs.iter().map(Node::Input).collect();
                nodes.extend(w.attrs.iter().map(Node::Attr));
                nodes.extend(w.answers.iter().map(Node::Answer));
                let header = format!("workflow {}", w.name.name);
                self.block(indent, header, start, nodes, end - 1, nil());
            }
            Node::Import(i) => {
                let kind = match i.kind {
                    ImportKind::Providers => "providers",
                    ImportKind::Tool => "tool",
                };
                let doc = concat(vec![
                    text(format!("import {kind} ")),
                    self.literal(i.path_span),
                ]);
                self.leaf(indent, doc);
            }
            Node::Type(t) => match object_of(&t.ty) {
                Some((fields, attrs, object, optional)) if !optional => {
                    let header = format!("type {}", t.name.name);
                    self.fields_block(indent, header, start, (fields, attrs), object, nil());
                }
                _ => {
                    let doc = concat(vec![
                        text(format!("type {} = ", t.name.name)),
                        self.ty(&t.ty),
                    ]);
                    self.leaf(indent, doc);
                }
            },
            Node::Memory(_, braces) => {
                let nodes = self
                    .ast
                    .memory
                    .iter()
                    .filter(|e| e.span.start > braces.start && e.span.end <= braces.end)
                    .map(Node::MemoryEntry)
                    .collect();
                self.block(indent, "memory".into(), start, nodes, braces.end, nil());
            }
            Node::Provider(p) | Node::Environment(p) => {
                let keyword = if matches!(node, Node::Provider(_)) {
                    "provider"
                } else {
                    "environment"
                };
                let nodes = p.attrs.iter().map(Node::Attr).collect();
                let header = format!("{keyword} {}", p.name.name);
                self.block(indent, header, start, nodes, end - 1, nil());
            }
            Node::Tool(t) => {
                let mut nodes: Vec<Node<'a>> = t.attrs.iter().map(Node::Attr).collect();
                nodes.extend(t.input.iter().map(Node::ToolInput));
                let header = format!("tool {}", t.name.name);
                self.block(indent, header, start, nodes, end - 1, nil());
            }
            Node::ToolInput(ty) => {
                let object = match &ty.kind {
                    TypeKind::Object(fields, attrs) => (fields.as_slice(), attrs.as_slice()),
                    _ => (&[][..], &[][..]),
                };
                self.fields_block(indent, "input".into(), start, object, ty.span, nil());
            }
            Node::Role(r) => {
                let mut nodes: Vec<Node<'a>> = r.attrs.iter().map(Node::Attr).collect();
                nodes.extend(r.output.iter().map(|(o, span)| Node::Output(o, *span)));
                for (word, braces) in self.scan.blocks_after_word(self.src, r.span, "update", 1) {
                    nodes.push(Node::Update(r, word, braces));
                }
                nodes.extend(r.artifacts.iter().map(Node::Artifact));
                let header = format!("role {}: {}", r.name.name, r.kind.name);
                self.block(indent, header, start, nodes, end - 1, nil());
            }
            Node::Update(role, _, braces) => {
                let nodes = role
                    .updates
                    .iter()
                    .filter(|u| {
                        let (s, _) = Node::Statement(u).range();
                        s > braces.start && s < braces.end
                    })
                    .map(Node::Statement)
                    .collect();
                self.block(indent, "update".into(), start, nodes, braces.end, nil());
            }
            Node::Statement(s) => {
                let doc = match s {
                    UpdateStmt::Set { target, value, .. } => concat(vec![
                        text(format!("set {} = ", target.name)),
                        self.expr(value),
                    ]),
                    UpdateStmt::Call {
                        target, op, args, ..
                    } => self.call(format!("{}.{}", target.name, op.name), args),
                };
                self.leaf(indent, doc);
            }
            Node::Output(o, _) => self.output(o, indent, start, end),
            Node::Exit(e) => {
                let condition = match &e.condition {
                    Some(c) => concat(vec![text(" when "), self.expr(c)]),
                    None => nil(),
                };
                let head = format!("exit {}", e.name.name);
                match self.scan.block_at(e.name.span.end) {
                    Some(braces) if !e.attrs.is_empty() => {
                        self.attr_block(indent, head, start, &e.attrs, braces, condition);
                    }
                    _ => self.leaf(indent, concat(vec![text(head), condition])),
                }
            }
            Node::Route(r) => {
                let doc = self.route(r);
                self.leaf(indent, doc);
            }
            Node::Artifact(a) => {
                let mode = if a.append { " += " } else { " = " };
                let doc = concat(vec![
                    text("artifact "),
                    self.literal(a.name_span),
                    text(mode),
                    self.expr(&a.value),
                ]);
                self.leaf(indent, doc);
            }
            Node::Test(t) => {
                let name = self
                    .scan
                    .strings_in(t.span)
                    .first()
                    .map_or_else(String::new, |s| self.src[s.start..s.end].to_string());
                let mut nodes: Vec<Node<'a>> = t
                    .inputs
                    .iter()
                    .map(|(name, value)| Node::TestInput(name, value))
                    .collect();
                nodes.extend(t.replies.iter().map(Node::Reply));
                nodes.extend(t.expectations.iter().map(Node::Expect));
                nodes.extend(t.attrs.iter().map(Node::Attr));
                self.block(indent, format!("test {name}"), start, nodes, end - 1, nil());
            }
            Node::Input(i) => {
                let mut parts = vec![text(format!("input {}: ", i.name.name)), self.ty(&i.ty)];
                if let Some(default) = &i.default {
                    parts.push(text(" = "));
                    parts.push(self.expr(default));
                }
                self.leaf(indent, concat(parts));
            }
            Node::Answer(e) => {
                let doc = concat(vec![text("answer = "), self.expr(e)]);
                self.leaf(indent, doc);
            }
            Node::Attr(a) => match &a.value.kind {
                ValueKind::Block(attrs) => {
                    let braces = self
                        .scan
                        .block_at(a.key.span.end)
                        .unwrap_or(Span::new(a.span.end - 1, a.span.end - 1));
                    self.attr_block(indent, a.key.name.clone(), start, attrs, braces, nil());
                }
                _ => {
                    let doc = self.attr_line(a);
                    self.leaf(indent, doc);
                }
            },
            Node::MemoryEntry(e) => match &e.shape {
                MemoryShape::Plain { ty, default } => {
                    let mut parts = vec![text(format!("{}: ", e.name.name)), self.ty(ty)];
                    if let Some(default) = default {
                        parts.push(text(" = "));
                        parts.push(self.expr(default));
                    }
                    self.leaf(indent, concat(parts));
                }
                MemoryShape::Kind { kind, attrs } => {
                    let head = format!("{}: {}", e.name.name, kind.name);
                    match self.scan.block_at(kind.span.end) {
                        Some(braces) if !attrs.is_empty() => {
                            self.attr_block(indent, head, start, attrs, braces, nil());
                        }
                        _ => self.line(indent, head),
                    }
                }
            },
            Node::Field(f) => match object_of(&f.ty) {
                Some((fields, attrs, object, optional)) => {
                    let footer = text(if optional { "?" } else { "" });
                    let header = format!("{}:", f.name.name);
                    self.fields_block(indent, header, start, (fields, attrs), object, footer);
                }
                None => {
                    let doc = concat(vec![text(format!("{}: ", f.name.name)), self.ty(&f.ty)]);
                    self.leaf(indent, doc);
                }
            },
            Node::TestInput(name, value) => {
                let doc = concat(vec![
                    text(format!("input {} = ", name.name)),
                    self.expr(value),
                ]);
                self.leaf(indent, doc);
            }
            Node::Reply(r) => {
                let visit = r.visit.map(|n| format!(" visit {n}")).unwrap_or_default();
                let after_role = Span::new(r.role.span.end, r.span.end);
                let reply = self
                    .scan
                    .strings_in(after_role)
                    .last()
                    .map_or_else(|| text("\"\""), |s| self.literal(*s));
                let doc = concat(vec![
                    text(format!("reply {}{visit} = ", r.role.name)),
                    reply,
                ]);
                self.leaf(indent, doc);
            }
            Node::Expect(e) => {
                let doc = match e {
                    Expectation::Exit(name) => text(format!("expect exit {}", name.name)),
                    Expectation::Path(names, _) => concat(vec![
                        text("expect path "),
                        filled(
                            "[",
                            names.iter().map(|n| text(n.name.clone())).collect(),
                            "]",
                        ),
                    ]),
                    Expectation::Artifact { span, contains, .. } => {
                        let strings = self.scan.strings_in(*span);
                        let mut parts = vec![text("expect artifact ")];
                        if let Some(name) = strings.first() {
                            parts.push(self.literal(*name));
                        }
                        if contains.is_some()
                            && let Some(contains) = strings.get(1)
                        {
                            parts.push(text(" contains "));
                            parts.push(self.literal(*contains));
                        }
                        concat(parts)
                    }
                    Expectation::Holds(e) => concat(vec![text("expect "), self.expr(e)]),
                };
                self.leaf(indent, doc);
            }
        }
    }

    fn output(&mut self, output: &'a OutputDecl, indent: usize, start: usize, end: usize) {
        let (word, ty) = match output {
            OutputDecl::Json(ty) => ("json", ty),
            OutputDecl::Tagged(ty) => ("tagged", ty),
            OutputDecl::Text => return self.line(indent, "output text".into()),
            OutputDecl::Code(language) => {
                let mut doc = vec![text("output code")];
                if language.is_some()
                    && let Some(s) = self.scan.strings_in(Span::new(start, end)).first()
                {
                    doc.push(text(" "));
                    doc.push(self.literal(*s));
                }
                return self.leaf(indent, concat(doc));
            }
        };
        match object_of(ty) {
            Some((fields, attrs, object, optional)) => {
                let footer = text(if optional { "?" } else { "" });
                let header = format!("output {word}");
                self.fields_block(indent, header, start, (fields, attrs), object, footer);
            }
            None => {
                let doc = concat(vec![text(format!("output {word} ")), self.ty(ty)]);
                self.leaf(indent, doc);
            }
        }
    }

    fn attr_line(&self, attr: &Attr) -> Doc {
        concat(vec![
            text(format!("{} = ", attr.key.name)),
            self.value(&attr.value),
        ])
    }

    fn route(&self, r: &RouteDecl) -> Doc {
        let from = r.from.as_ref().map_or("start", |f| f.name.as_str());
        let mut parts = vec![text(format!("{from} -> "))];
        match &r.target {
            RouteTarget::Role(to) => parts.push(text(to.name.clone())),
            RouteTarget::Parallel { branches, join } => {
                parts.push(text("parallel "));
                let names = branches.iter().map(|b| text(b.name.clone())).collect();
                parts.push(filled("[", names, "]"));
                parts.push(text(format!(" -> {}", join.name)));
            }
            RouteTarget::Map { worker, over, join } => {
                parts.push(text(format!("map {} over ", worker.name)));
                parts.push(self.expr(over));
                parts.push(text(format!(" -> {}", join.name)));
            }
        }
        match &r.condition {
            Condition::Always => {}
            Condition::When(e) => {
                parts.push(text(" when "));
                parts.push(self.expr(e));
            }
            Condition::Otherwise(_) => parts.push(text(" otherwise")),
        }
        if let Some((max, _)) = r.max {
            parts.push(text(format!(" max {max}")));
        }
        if r.backtrack {
            parts.push(text(" backtrack"));
        }
        concat(parts)
    }

    /// A literal as written.
    fn literal(&self, span: Span) -> Doc {
        let written = &self.src[span.start..span.end];
        if written.starts_with("\"\"\"") {
            // The parser reads a line of such a string without its `\r\n` or `\n`.
            Doc::Raw(written.replace("\r\n", "\n"))
        } else {
            text(written.to_string())
        }
    }

    fn expr(&self, e: &Expr) -> Doc {
        self.nested(|| self.expr_inner(e), nil())
    }

    fn expr_inner(&self, e: &Expr) -> Doc {
        match &e.kind {
            ExprKind::String(_) | ExprKind::Number(_) => self.literal(e.span),
            ExprKind::Bool(b) => text(if *b { "true" } else { "false" }),
            ExprKind::Null => text("null"),
            ExprKind::List(items) => {
                bracketed("[", items.iter().map(|i| self.expr(i)).collect(), "]", true)
            }
            ExprKind::Map(entries) => {
                let entries = entries
                    .iter()
                    .map(|(key, value)| concat(vec![self.key(key), text(": "), self.expr(value)]))
                    .collect();
                bracketed("{", entries, "}", true)
            }
            ExprKind::Path(names) => text(dotted(names)),
            ExprKind::Call(name, args) => self.call(name.name.clone(), args),
            ExprKind::Get(call, fields) => {
                concat(vec![self.expr(call), text(format!(".{}", dotted(fields)))])
            }
            ExprKind::Unary(UnOp::Not, operand) => {
                let tight = !matches!(&operand.kind, ExprKind::Binary(op, ..) if precedence(*op) < NOT_BINDS);
                concat(vec![text("not "), self.operand(operand, tight)])
            }
            ExprKind::Unary(UnOp::Neg, operand) => {
                let tight = !matches!(
                    operand.kind,
                    ExprKind::Binary(..) | ExprKind::Unary(UnOp::Not, _)
                );
                concat(vec![text("-"), self.operand(operand, tight)])
            }
            ExprKind::Binary(op, ..) => self.chain(e, precedence(*op)),
        }
    }

    /// `name(args)`; a lone list or map argument opens on the line of the call
    /// (`json({` ... `})`).
    fn call(&self, name: String, args: &[Expr]) -> Doc {
        if let [only] = args
            && matches!(&only.kind, ExprKind::List(items) if !items.is_empty())
                | matches!(&only.kind, ExprKind::Map(entries) if !entries.is_empty())
        {
            return concat(vec![text(name), text("("), self.expr(only), text(")")]);
        }
        let args = args.iter().map(|a| self.expr(a)).collect();
        concat(vec![text(name), bracketed("(", args, ")", false)])
    }

    /// `a op b op c`, its operators of one precedence: the line breaks after an operator.
    fn chain(&self, e: &Expr, prec: u8) -> Doc {
        let mut rights = Vec::new();
        let mut left = e;
        while let ExprKind::Binary(op, l, r) = &left.kind
            && precedence(*op) == prec
        {
            rights.push((*op, r.as_ref()));
            left = l;
        }
        rights.reverse();
        let mut parts = Vec::with_capacity(rights.len() * 2 + 1);
        let mut item = self.operand(left, !needs_parens(left, prec, false));
        for (op, right) in rights {
            parts.push(concat(vec![item, text(format!(" {}", op.symbol()))]));
            parts.push(Doc::Line);
            item = self.operand(right, !needs_parens(right, prec, true));
        }
        parts.push(item);
        group(nest(Doc::Fill(parts)))
    }

    fn operand(&self, e: &Expr, bare: bool) -> Doc {
        if bare {
            self.expr(e)
        } else {
            concat(vec![text("("), self.expr(e), text(")")])
        }
    }

    fn key(&self, key: &Ident) -> Doc {
        text(self.src[key.span.start..key.span.end].to_string())
    }

    fn value(&self, v: &Value) -> Doc {
        self.nested(|| self.value_inner(v), nil())
    }

    fn value_inner(&self, v: &Value) -> Doc {
        match &v.kind {
            ValueKind::String(_) | ValueKind::Number(_) | ValueKind::Duration(_) => {
                self.literal(v.span)
            }
            ValueKind::Bool(b) => text(if *b { "true" } else { "false" }),
            ValueKind::Null => text("null"),
            ValueKind::Ident(name) => text(name.clone()),
            ValueKind::Path(names) => text(dotted(names)),
            ValueKind::List(items) => bracketed(
                "[",
                items.iter().map(|i| self.value(i)).collect(),
                "]",
                true,
            ),
            ValueKind::Map(entries) => {
                let entries = entries
                    .iter()
                    .map(|(key, value)| concat(vec![self.key(key), text(": "), self.value(value)]))
                    .collect();
                bracketed("{", entries, "}", true)
            }
            ValueKind::Call(name, args) => concat(vec![
                text(name.name.clone()),
                bracketed(
                    "(",
                    args.iter().map(|a| self.value(a)).collect(),
                    ")",
                    false,
                ),
            ]),
            // A block is a statement of its own (see `attr_block`); inside a value the
            // grammar has none.
            ValueKind::Block(_) => nil(),
        }
    }

    fn ty(&self, t: &TypeExpr) -> Doc {
        self.nested(|| self.ty_inner(t), nil())
    }

    fn ty_inner(&self, t: &TypeExpr) -> Doc {
        match &t.kind {
            TypeKind::Named(name) => text(name.clone()),
            TypeKind::Literal(_) => self.literal(t.span),
            TypeKind::List(inner) => concat(vec![text("list["), self.ty(inner), text("]")]),
            TypeKind::Map(inner) => concat(vec![text("map["), self.ty(inner), text("]")]),
            TypeKind::Object(fields, attrs) => {
                let mut items: Vec<Doc> = fields
                    .iter()
                    .map(|f| concat(vec![text(format!("{}: ", f.name.name)), self.ty(&f.ty)]))
                    .collect();
                items.extend(attrs.iter().map(|a| {
                    concat(vec![
                        text(format!("{} = ", a.key.name)),
                        self.value(&a.value),
                    ])
                }));
                bracketed("{", items, "}", true)
            }
            TypeKind::Union(members) => {
                let count = members.len();
                let mut parts = Vec::with_capacity(count * 2);
                for (i, member) in members.iter().enumerate() {
                    if i + 1 < count {
                        parts.push(concat(vec![self.ty(member), text(" |")]));
                        parts.push(Doc::Line);
                    } else {
                        parts.push(self.ty(member));
                    }
                }
                group(nest(Doc::Fill(parts)))
            }
            TypeKind::Optional(inner) => concat(vec![self.ty(inner), text("?")]),
        }
    }

    /// The lines joined, the comments that end lines side by side aligned.
    fn finish(mut self) -> String {
        align_trailing(&mut self.out);
        let mut text = String::new();
        for line in &self.out {
            match line {
                Out::Blank => text.push('\n'),
                Out::Code {
                    indent,
                    text: code,
                    trailing,
                } => {
                    text.extend(std::iter::repeat_n(' ', indent * INDENT));
                    text.push_str(code);
                    if let Some(comment) = trailing {
                        text.push_str(comment);
                    }
                    text.push('\n');
                }
            }
        }
        text
    }
}

/// Consecutive lines of one indentation that end with a comment: their comments start in
/// one column, two spaces past the longest of them. Other trailing comments get two
/// spaces.
fn align_trailing(out: &mut [Out]) {
    let mut i = 0;
    while i < out.len() {
        let run_indent = match &out[i] {
            Out::Code {
                indent,
                text,
                trailing: Some(_),
            } if !text.contains('\n') => *indent,
            _ => {
                if let Out::Code {
                    text,
                    trailing: Some(c),
                    ..
                } = &mut out[i]
                {
                    *c = format!("{}{c}", pad(text, 0));
                }
                i += 1;
                continue;
            }
        };
        let mut j = i;
        while let Some(Out::Code {
            indent,
            text,
            trailing: Some(_),
        }) = out.get(j)
            && *indent == run_indent
            && !text.contains('\n')
        {
            j += 1;
        }
        let widest = out[i..j]
            .iter()
            .map(|l| match l {
                Out::Code { text, .. } => text.chars().count(),
                Out::Blank => 0,
            })
            .max()
            .unwrap_or(0);
        for line in &mut out[i..j] {
            if let Out::Code {
                text,
                trailing: Some(c),
                ..
            } = line
            {
                *c = format!("{}{c}", pad(text, widest));
            }
        }
        i = j;
    }
}

/// The blanks between a line's text and its comment, to reach column `widest + 2`.
fn pad(text: &str, widest: usize) -> String {
    let width = text.rsplit('\n').next().unwrap_or("").chars().count();
    " ".repeat(widest.saturating_sub(width) + 2)
}

fn nil() -> Doc {
    Doc::Concat(Vec::new())
}

fn dotted(names: &[Ident]) -> String {
    names
        .iter()
        .map(|n| n.name.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

/// How tightly `not` holds its operand: as tightly as a comparison (`not a == b` is
/// `not (a == b)`), as the parser reads it.
const NOT_BINDS: u8 = 3;

/// The parser's precedences (`syntax::expr`), lowest first.
fn precedence(op: BinOp) -> u8 {
    match op {
        BinOp::Or => 1,
        BinOp::And => 2,
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 3,
        BinOp::Coalesce => 4,
        BinOp::Add | BinOp::Sub => 5,
    }
}

/// Whether an operand of an operator of precedence `prec` needs parentheses to be read
/// back as the same tree: the parser folds left to right, and `not` takes everything down
/// to a comparison after it.
fn needs_parens(operand: &Expr, prec: u8, right: bool) -> bool {
    match &operand.kind {
        ExprKind::Binary(op, ..) => {
            let own = precedence(*op);
            if right { own <= prec } else { own < prec }
        }
        ExprKind::Unary(UnOp::Not, _) => prec >= NOT_BINDS,
        _ => false,
    }
}
