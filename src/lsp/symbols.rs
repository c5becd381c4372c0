//! The outline of a workflow file: its declarations, nested as they are written.

use lsp_types::{DocumentSymbol, SymbolKind};

use crate::source::Span;
use crate::syntax::{Ast, Ident, MemoryEntry, MemoryShape, TypeDecl, TypeKind, WorkflowDecl};

use super::position::LineIndex;

struct Outline<'a> {
    text: &'a str,
    lines: &'a LineIndex,
}

impl Outline<'_> {
    #[allow(deprecated)] // `deprecated` is a field the type still has.
    fn symbol(
        &self,
        name: &str,
        detail: Option<String>,
        kind: SymbolKind,
        whole: Span,
        name_span: Span,
        children: Vec<DocumentSymbol>,
    ) -> DocumentSymbol {
        // The name's range must lie inside the whole's.
        let whole = Span::new(
            whole.start.min(name_span.start),
            whole.end.max(name_span.end),
        );
        DocumentSymbol {
            name: if name.is_empty() {
                "?".into()
            } else {
                name.into()
            },
            detail,
            kind,
            tags: None,
            deprecated: None,
            range: self.lines.range(self.text, whole),
            selection_range: self.lines.range(self.text, name_span),
            children: (!children.is_empty()).then_some(children),
        }
    }
}

pub fn outline(ast: &Ast, text: &str, lines: &LineIndex) -> Vec<DocumentSymbol> {
    let o = Outline { text, lines };
    let mut out = Vec::new();
    if let Some(wf) = &ast.workflow {
        out.push(o.workflow(wf));
    }
    out.extend(ast.types.iter().map(|t| o.type_decl(t)));
    out.extend(o.memory(&ast.memory));
    // Declarations without children.
    for p in &ast.providers {
        out.push(o.leaf(&p.name, "provider", SymbolKind::INTERFACE, p.span));
    }
    for t in &ast.tools {
        out.push(o.leaf(&t.name, "tool", SymbolKind::FUNCTION, t.span));
    }
    for e in &ast.environments {
        out.push(o.leaf(&e.name, "environment", SymbolKind::PACKAGE, e.span));
    }
    for r in &ast.roles {
        out.push(o.leaf(&r.name, &r.kind.name, SymbolKind::CLASS, r.span));
    }
    for e in &ast.exits {
        out.push(o.leaf(&e.name, "exit", SymbolKind::ENUM_MEMBER, e.span));
    }
    for t in &ast.tests {
        out.push(o.symbol(
            &t.name,
            Some("test".into()),
            SymbolKind::METHOD,
            t.span,
            Span::new(t.span.start, t.span.start + 4),
            Vec::new(),
        ));
    }
    out.sort_by_key(|s| (s.range.start.line, s.range.start.character));
    out
}

impl Outline<'_> {
    /// A declaration named `name`, without children.
    fn leaf(&self, name: &Ident, detail: &str, kind: SymbolKind, whole: Span) -> DocumentSymbol {
        self.symbol(
            &name.name,
            Some(detail.to_string()),
            kind,
            whole,
            name.span,
            Vec::new(),
        )
    }

    /// The workflow header, its inputs inside.
    fn workflow(&self, wf: &WorkflowDecl) -> DocumentSymbol {
        let inputs = wf
            .inputs
            .iter()
            .map(|i| {
                let ty = super::analysis::span_text(self.text, i.ty.span);
                self.symbol(
                    &i.name.name,
                    Some(ty.to_string()),
                    SymbolKind::VARIABLE,
                    i.span,
                    i.name.span,
                    Vec::new(),
                )
            })
            .collect();
        self.symbol(
            &wf.name.name,
            Some("workflow".into()),
            SymbolKind::MODULE,
            wf.span,
            wf.name.span,
            inputs,
        )
    }

    /// A `type`, an object's fields inside.
    fn type_decl(&self, t: &TypeDecl) -> DocumentSymbol {
        let fields = match &t.ty.kind {
            TypeKind::Object(fields, _) => fields
                .iter()
                .map(|f| {
                    let ty = super::analysis::span_text(self.text, f.ty.span);
                    self.symbol(
                        &f.name.name,
                        Some(ty.to_string()),
                        SymbolKind::FIELD,
                        f.span,
                        f.name.span,
                        Vec::new(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        self.symbol(
            &t.name.name,
            Some("type".into()),
            SymbolKind::STRUCT,
            t.span,
            t.name.span,
            fields,
        )
    }

    /// The `memory` block, its slots inside; none without slots.
    fn memory(&self, memory: &[MemoryEntry]) -> Option<DocumentSymbol> {
        let (first, last) = (memory.first()?, memory.last()?);
        let slots = memory
            .iter()
            .map(|m| {
                let detail = match &m.shape {
                    MemoryShape::Plain { ty, .. } => super::analysis::span_text(self.text, ty.span),
                    MemoryShape::Kind { kind, .. } => &kind.name,
                };
                self.symbol(
                    &m.name.name,
                    Some(detail.to_string()),
                    SymbolKind::VARIABLE,
                    m.span,
                    m.name.span,
                    Vec::new(),
                )
            })
            .collect();
        let span = Span::new(first.span.start, last.span.end);
        Some(self.symbol(
            "memory",
            None,
            SymbolKind::NAMESPACE,
            span,
            first.name.span,
            slots,
        ))
    }
}
