//! The outline of a workflow file: its declarations, nested as they are written.

use lsp_types::{DocumentSymbol, SymbolKind};

use crate::source::Span;
use crate::syntax::{Ast, MemoryShape, TypeKind};

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
        let inputs = wf
            .inputs
            .iter()
            .map(|i| {
                o.symbol(
                    &i.name.name,
                    Some(super::analysis::span_text(text, i.ty.span).to_string()),
                    SymbolKind::VARIABLE,
                    i.span,
                    i.name.span,
                    Vec::new(),
                )
            })
            .collect();
        out.push(o.symbol(
            &wf.name.name,
            Some("workflow".into()),
            SymbolKind::MODULE,
            wf.span,
            wf.name.span,
            inputs,
        ));
    }
    for t in &ast.types {
        let fields = match &t.ty.kind {
            TypeKind::Object(fields, _) => fields
                .iter()
                .map(|f| {
                    o.symbol(
                        &f.name.name,
                        Some(super::analysis::span_text(text, f.ty.span).to_string()),
                        SymbolKind::FIELD,
                        f.span,
                        f.name.span,
                        Vec::new(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        out.push(o.symbol(
            &t.name.name,
            Some("type".into()),
            SymbolKind::STRUCT,
            t.span,
            t.name.span,
            fields,
        ));
    }
    if let (Some(first), Some(last)) = (ast.memory.first(), ast.memory.last()) {
        let slots = ast
            .memory
            .iter()
            .map(|m| {
                let detail = match &m.shape {
                    MemoryShape::Plain { ty, .. } => super::analysis::span_text(text, ty.span),
                    MemoryShape::Kind { kind, .. } => &kind.name,
                };
                o.symbol(
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
        out.push(o.symbol(
            "memory",
            None,
            SymbolKind::NAMESPACE,
            span,
            first.name.span,
            slots,
        ));
    }
    for p in &ast.providers {
        out.push(o.symbol(
            &p.name.name,
            Some("provider".into()),
            SymbolKind::INTERFACE,
            p.span,
            p.name.span,
            Vec::new(),
        ));
    }
    for t in &ast.tools {
        out.push(o.symbol(
            &t.name.name,
            Some("tool".into()),
            SymbolKind::FUNCTION,
            t.span,
            t.name.span,
            Vec::new(),
        ));
    }
    for e in &ast.environments {
        out.push(o.symbol(
            &e.name.name,
            Some("environment".into()),
            SymbolKind::PACKAGE,
            e.span,
            e.name.span,
            Vec::new(),
        ));
    }
    for r in &ast.roles {
        out.push(o.symbol(
            &r.name.name,
            Some(r.kind.name.clone()),
            SymbolKind::CLASS,
            r.span,
            r.name.span,
            Vec::new(),
        ));
    }
    for e in &ast.exits {
        out.push(o.symbol(
            &e.name.name,
            Some("exit".into()),
            SymbolKind::ENUM_MEMBER,
            e.span,
            e.name.span,
            Vec::new(),
        ));
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
