//! What is under the cursor, and what the editor asks of it: hover, definition,
//! references, rename, document symbols.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::compile::types::Type;
use crate::compile::{self, MaxVisits, MemoryKind, NodeKind, OutputFormat, RoleKind, Workflow};
use crate::source::Span;
use crate::syntax::{MemoryShape, OutputDecl, TypeExpr, TypeKind};

use super::analysis::{Analysis, span_text};
use super::index::{Kind, PathRead};

/// Which file of an analysis a position is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    Workflow,
    /// The index of a template in [`Analysis::templates`].
    Template(usize),
}

/// A place in a file: its path and a byte span of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub path: PathBuf,
    pub span: Span,
}

/// What is under the cursor.
#[derive(Debug, Clone)]
pub enum Target {
    /// A name of the workflow: a role or exit, type, memory, input, tool, provider,
    /// environment, template, or a function.
    Symbol {
        kind: Kind,
        name: String,
        span: Span,
    },
    /// A word of a path read past its root: a field (`planner.title`).
    Field {
        read: PathRead,
        upto: usize,
        span: Span,
    },
    /// A value every run has (`output`, `round`, `visit`...).
    Builtin { name: String, span: Span },
}

impl Target {
    pub fn span(&self) -> Span {
        match self {
            Target::Symbol { span, .. }
            | Target::Field { span, .. }
            | Target::Builtin { span, .. } => *span,
        }
    }
}

pub fn target_at(a: &Analysis, at: Where, offset: usize) -> Option<Target> {
    let (read, occurrence) = match at {
        Where::Workflow => (
            a.index().path_at(offset).map(|(r, i)| (r.clone(), i)),
            a.index().at(offset).cloned(),
        ),
        Where::Template(t) => {
            let t = &a.templates()[t];
            let read = t.reads.iter().find_map(|r| {
                r.parts
                    .iter()
                    .position(|(_, s)| s.start <= offset && offset <= s.end)
                    .map(|i| {
                        (
                            PathRead {
                                parts: r.parts.clone(),
                                role: None,
                            },
                            i,
                        )
                    })
            });
            let occurrence = t
                .occurrences
                .iter()
                .find(|o| o.span.start <= offset && offset <= o.span.end)
                .cloned();
            (read, occurrence)
        }
    };
    if let Some((read, i)) = read {
        let root = read.parts[0].0.as_str();
        let named = matches!(root, "input" | "memory");
        let span = read.parts[i].1;
        if i >= 1 && !(named && i == 1) {
            return Some(Target::Field {
                read,
                upto: i,
                span,
            });
        }
        if i == 0 && (named || super::index::BUILTIN_ROOTS.contains(&root)) {
            return Some(Target::Builtin {
                name: root.to_string(),
                span,
            });
        }
    }
    occurrence.map(|o| Target::Symbol {
        kind: o.kind,
        name: o.name,
        span: o.span,
    })
}

/// The type a path read holds up to its word `upto`.
pub fn path_type(w: &Workflow, read: &PathRead, upto: usize) -> Option<Type> {
    let parts = &read.parts;
    let (root, rest): (Cow<'_, Type>, &[(String, Span)]) = match parts[0].0.as_str() {
        "input" => {
            let name = &parts.get(1)?.0;
            let input = w.inputs.iter().find(|i| &i.name == name)?;
            (Cow::Borrowed(&input.ty), &parts[2..])
        }
        "memory" => {
            let name = &parts.get(1)?.0;
            let slot = w.memory.iter().find(|m| &m.name == name)?;
            let ty = match &slot.kind {
                MemoryKind::Value { ty, .. } => Cow::Borrowed(ty),
                MemoryKind::Conversation { .. } => Cow::Owned(compile::conversation_type()),
                _ => Cow::Owned(Type::Any),
            };
            (ty, &parts[2..])
        }
        "output" => {
            let role = w.role(w.find_node(read.role.as_deref()?)?)?;
            (Cow::Borrowed(&*role.output_type), &parts[1..])
        }
        "round" | "step" | "visit" => (Cow::Owned(Type::Int), &parts[1..]),
        "run_id" | "prompt" => (Cow::Owned(Type::String), &parts[1..]),
        name => {
            let node = w.find_node(name)?;
            let role = w.role(node)?;
            match parts.get(1).filter(|_| w.is_json_llm(node)) {
                Some((field, _)) if compile::INVALID_FIELDS.contains(&field.as_str()) => {
                    (Cow::Owned(compile::invalid_field_type(field)?), &parts[2..])
                }
                _ => (Cow::Borrowed(&*role.output_type), &parts[1..]),
            }
        }
    };
    let skipped = parts.len() - rest.len();
    let fields: Vec<String> = rest
        .iter()
        .take((upto + 1).saturating_sub(skipped))
        .map(|(n, _)| n.clone())
        .collect();
    root.field_path(&fields)
}

/// Where the field a path read names up to `upto` is declared, following named types.
pub fn field_declaration(a: &Analysis, read: &PathRead, upto: usize) -> Option<Span> {
    let ast = &a.ast;
    let parts = &read.parts;
    let (mut ty, rest): (&TypeExpr, &[(String, Span)]) = match parts[0].0.as_str() {
        "input" => {
            let wf = ast.workflow.as_ref()?;
            let name = &parts.get(1)?.0;
            let input = wf.inputs.iter().find(|i| &i.name.name == name)?;
            (&input.ty, &parts[2..])
        }
        "memory" => {
            let name = &parts.get(1)?.0;
            let m = ast.memory.iter().find(|m| &m.name.name == name)?;
            match &m.shape {
                MemoryShape::Plain { ty, .. } => (ty, &parts[2..]),
                MemoryShape::Kind { .. } => return None,
            }
        }
        root => {
            let role_name = if root == "output" {
                read.role.as_deref()?
            } else {
                root
            };
            let role = ast.roles.iter().find(|r| r.name.name == role_name)?;
            match &role.output {
                Some((OutputDecl::Json(ty) | OutputDecl::Tagged(ty), _)) => (ty, &parts[1..]),
                _ => return None,
            }
        }
    };
    let skipped = parts.len() - rest.len();
    let wanted = (upto + 1).checked_sub(skipped)?;
    let mut found = None;
    for (field, _) in rest.iter().take(wanted) {
        let mut guard = 0;
        let fields = loop {
            guard += 1;
            if guard > 64 {
                return None;
            }
            match &ty.kind {
                TypeKind::Named(name) => {
                    ty = &ast.types.iter().find(|t| &t.name.name == name)?.ty;
                }
                TypeKind::Optional(inner) => ty = inner,
                TypeKind::Object(fields, _) => break fields,
                _ => return None,
            }
        };
        let decl = fields.iter().find(|f| &f.name.name == field)?;
        found = Some(decl.name.span);
        ty = &decl.ty;
    }
    found
}

/// Markdown for what is under the cursor.
pub fn hover(a: &Analysis, target: &Target) -> Option<String> {
    let w = &a.workflow;
    match target {
        Target::Field { read, upto, .. } => {
            let name = &read.parts[*upto].0;
            let ty = path_type(w, read, *upto)?;
            let path: Vec<&str> = read.parts[..=*upto]
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            Some(format!(
                "```rondo\n{}: {}\n```\nfield `{name}` of `{}`",
                path.join("."),
                ty.display(),
                path[..path.len() - 1].join(".")
            ))
        }
        Target::Builtin { name, .. } => Some(builtin_doc(name).to_string()),
        Target::Symbol { kind, name, .. } => symbol_hover(a, *kind, name),
    }
}

fn builtin_doc(name: &str) -> &'static str {
    match name {
        "input" => "`input.NAME`: an input of the run, declared in the header (`input NAME: type`)",
        "memory" => "`memory.NAME`: a memory slot, declared in the `memory { }` block",
        "output" => "`output`: the output of the role being run",
        "prompt" => "`prompt`: the rendered user prompt of this llm role (`string`)",
        "item" => "`item`: the item a `map` worker was given (`any`)",
        "round" => "`round`: how many times the header's `round` role has run (`int`)",
        "step" => "`step`: the number of the step being run (`int`)",
        "visit" => "`visit`: how many times this role has run, this visit included (`int`)",
        "run_id" => "`run_id`: the run's id (`string`)",
        "ended" => "`ended`: how the run ended, `{ exit, code, reason }`, null while it goes on",
        _ => "a value every run has",
    }
}

fn symbol_hover(a: &Analysis, kind: Kind, name: &str) -> Option<String> {
    let w = &a.workflow;
    match kind {
        Kind::Node => {
            let node = w.find_node(name)?;
            match &w.node(node).kind {
                NodeKind::Exit(exit) => Some(format!(
                    "```rondo\nexit {name}\n```\nexits the run with code **{}**{}",
                    exit.code,
                    if exit.builtin { " (built in)" } else { "" }
                )),
                NodeKind::Role(role) => Some(role_hover(a, name, role)),
                NodeKind::Start => None,
            }
        }
        Kind::Type => {
            let decl = a.ast.types.iter().find(|t| t.name.name == name)?;
            Some(format!(
                "```rondo\n{}\n```",
                span_text(a.text(), decl.span).trim()
            ))
        }
        Kind::Memory => memory_hover(w, name),
        Kind::Input => input_hover(w, name),
        Kind::Tool => {
            let tool = w.tools.iter().find(|t| t.name() == name)?;
            let mut out = format!("```rondo\ntool {name}\n```");
            if !tool.spec.usage.is_empty() {
                out.push_str(&format!("\n{}", tool.spec.usage.trim()));
            }
            if let Some(input) = &tool.input {
                out.push_str(&format!("\n\ninput: `{}`", input.display()));
            }
            Some(out)
        }
        Kind::Provider => {
            let p = w.providers.iter().find(|p| p.name() == name)?;
            let model = if p.profile.model.is_empty() {
                String::new()
            } else {
                format!(", model `{}`", p.profile.model)
            };
            Some(format!(
                "```rondo\nprovider {name}\n```\nkind `{}`{model}",
                p.profile.kind.as_str()
            ))
        }
        Kind::Environment => {
            let e = w.environments.iter().find(|e| e.name == name)?;
            let image = e
                .image
                .as_ref()
                .map(|i| format!(", image `{i}`"))
                .unwrap_or_default();
            Some(format!(
                "```rondo\nenvironment {name}\n```\nkind `{}`{image}",
                match e.kind {
                    compile::EnvKind::Local => "local",
                    compile::EnvKind::Docker => "docker",
                }
            ))
        }
        Kind::Template => Some(template_hover(a, name)),
        Kind::Function => {
            let (params, returns, doc) = super::signature(name)?;
            Some(format!(
                "```rondo\n{name}({params}) -> {returns}\n```\n{doc}"
            ))
        }
    }
}

/// A memory slot: its declaration, and the roles that write and read it.
fn memory_hover(w: &compile::Workflow, name: &str) -> Option<String> {
    let slot = w.memory.iter().find(|m| m.name == name)?;
    let what = match &slot.kind {
        MemoryKind::Value { ty, default } => {
            format!("{}: {} = {}", slot.name, ty.display(), compact(default))
        }
        MemoryKind::Conversation {
            max_messages,
            max_bytes,
        } => format!(
            "{}: conversation {{ max_messages = {max_messages}, max_bytes = {max_bytes} }}",
            slot.name
        ),
        other => format!("{}: {}", slot.name, other.kind_name()),
    };
    let readers: Vec<&str> = w
        .roles()
        .filter(|(_, r)| r.reads.iter().any(|&m| w.memory[m].name == name))
        .map(|(i, _)| w.node(i).name.as_str())
        .collect();
    let writers: Vec<&str> = w
        .roles()
        .filter(|(_, r)| r.writes.iter().any(|&m| w.memory[m].name == name))
        .map(|(i, _)| w.node(i).name.as_str())
        .collect();
    let mut out = format!("```rondo\nmemory {{ {what} }}\n```");
    if !writers.is_empty() {
        out.push_str(&format!("\nwritten by {}", list(&writers)));
    }
    if !readers.is_empty() {
        out.push_str(&format!("\nread by the prompts of {}", list(&readers)));
    }
    Some(out)
}

/// An input: its declaration, and whether a run must give it.
fn input_hover(w: &compile::Workflow, name: &str) -> Option<String> {
    let input = w.inputs.iter().find(|i| i.name == name)?;
    let default = input
        .default
        .as_ref()
        .map(|d| format!(" = {}", compact(d)))
        .unwrap_or_default();
    let ty = if input.path {
        "path".to_string()
    } else {
        input.ty.display()
    };
    Some(format!(
        "```rondo\ninput {name}: {ty}{default}\n```\n{}",
        if input.default.is_some() {
            "an input of the run, with a default"
        } else {
            "an input of the run: every run must give it (`--input`)"
        }
    ))
}

/// A prompt template: its file, and the roles that render it.
fn template_hover(a: &Analysis, name: &str) -> String {
    let w = &a.workflow;
    let path = a.prompts_dir().join(name);
    let renders: Vec<&str> = w
        .roles()
        .filter(|(_, r)| match &r.kind {
            RoleKind::Llm(l) => l
                .prompt
                .iter()
                .chain(l.system.iter())
                .any(|p| p.to_string_lossy() == name),
            _ => false,
        })
        .map(|(i, _)| w.node(i).name.as_str())
        .collect();
    let exists = if path.is_file() { "" } else { " (missing)" };
    let mut out = format!("prompt template `{}`{exists}", path.display());
    if !renders.is_empty() {
        out.push_str(&format!("\n\nrendered by {}", list(&renders)));
    }
    out
}

fn role_hover(a: &Analysis, name: &str, role: &compile::Role) -> String {
    let w = &a.workflow;
    let mut lines = vec![format!("```rondo\nrole {name}: {}\n```", role.kind.name())];
    let mut facts = Vec::new();
    let mut attempts = 1u64;
    match &role.kind {
        RoleKind::Llm(l) => {
            if let Some(p) = w.providers.get(l.provider) {
                facts.push(format!("provider `{}`", p.name()));
            }
            if let Some(p) = &l.prompt {
                facts.push(format!("prompt `{}`", p.display()));
            }
            facts.push(format!(
                "output {}",
                match &l.output {
                    OutputFormat::Json { ty } => format!("json `{}`", ty.display()),
                    OutputFormat::Tagged { ty } => format!("tagged `{}`", ty.display()),
                    OutputFormat::Text => "text".into(),
                    OutputFormat::Code { language } => match language {
                        Some(lang) => format!("code `{lang}`"),
                        None => "code".into(),
                    },
                }
            ));
            attempts = l.retries.saturating_add(1);
        }
        RoleKind::Tool(_) => facts.push(format!("output `{}`", short(&role.output_type))),
        RoleKind::Builtin => {}
    }
    if !facts.is_empty() {
        lines.push(facts.join(" · "));
    }
    if a.has_errors {
        lines.push("worst case: not proven while the file has errors".into());
        return lines.join("\n\n");
    }
    let visits = a
        .summary
        .max_visits
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| *v);
    let by_input = match role.max_visits {
        Some(m @ MaxVisits::Input(_)) => {
            format!(", with the default of `{}`", m.display(&w.inputs))
        }
        _ => String::new(),
    };
    let worst = match (visits, &role.kind) {
        (Some(v), RoleKind::Llm(_)) => format!(
            "worst case: **{v}** visit{} per run, **{}** LLM call{} ({attempts} attempt{} a visit){by_input}",
            plural(v),
            v.saturating_mul(attempts),
            plural(v.saturating_mul(attempts)),
            plural(attempts)
        ),
        (Some(v), _) => format!("worst case: **{v}** visit{} per run{by_input}", plural(v)),
        (None, _) => "worst case: no bound on its visits is proven".into(),
    };
    lines.push(worst);
    if matches!(role.kind, RoleKind::Llm(_)) {
        let cost = a.cost();
        if let Some(r) = cost.role(name) {
            use crate::check::cost::CostReport as C;
            lines.push(format!(
                "worst-case cost: **{}** ({} input, {} output tokens{})",
                C::money(r.max_cost),
                C::count(r.input_tokens),
                C::count(r.output_tokens),
                if r.prompt_capped {
                    "; a value its prompt renders has no size bound: `rondo check --cost` names it"
                } else {
                    ""
                }
            ));
        }
        lines.push(match a.summary.worst_case_llm_calls {
            Some(n) => format!(
                "the whole run: at most {n} LLM calls, **{}**",
                crate::check::cost::CostReport::money(cost.max_cost)
            ),
            None => "the whole run: no bound on LLM calls is proven".into(),
        });
    }
    lines.join("\n\n")
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn short(ty: &Type) -> String {
    let d = ty.display();
    if d.len() > 120 {
        format!("{}…", &d[..d.floor_char_boundary(120)])
    } else {
        d
    }
}

fn compact(v: &Value) -> String {
    let s = serde_json::to_string(v).unwrap_or_default();
    if s.len() > 120 {
        format!("{}…", &s[..s.floor_char_boundary(120)])
    } else {
        s
    }
}

fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where a name is declared.
pub fn definition(a: &Analysis, target: &Target) -> Vec<Place> {
    let here = |span| Place {
        path: a.file.path.clone(),
        span,
    };
    match target {
        Target::Field { read, upto, .. } => field_declaration(a, read, *upto)
            .map(here)
            .into_iter()
            .collect(),
        Target::Builtin { .. } => Vec::new(),
        Target::Symbol { kind, name, .. } => {
            if *kind == Kind::Template {
                let path = a.prompts_dir().join(name);
                return vec![Place {
                    path: super::analysis::normalize(&path),
                    span: Span::default(),
                }];
            }
            let declared: Vec<Place> = a
                .index()
                .definitions(*kind, name)
                .map(|o| here(o.span))
                .collect();
            if !declared.is_empty() {
                return declared;
            }
            // Imported from YAML: the line importing it.
            let w = &a.workflow;
            let imported = match kind {
                Kind::Tool => w.tools.iter().find(|t| t.name() == name).map(|t| t.span),
                Kind::Provider => w
                    .providers
                    .iter()
                    .find(|p| p.name() == name)
                    .map(|p| p.span),
                _ => None,
            };
            imported
                .filter(|s| !s.is_empty())
                .map(here)
                .into_iter()
                .collect()
        }
    }
}

/// Every place a name is written, in the workflow and in its templates.
pub fn references(a: &Analysis, kind: Kind, name: &str, declaration: bool) -> Vec<Place> {
    let mut out: Vec<Place> = a
        .index()
        .all(kind, name)
        .filter(|o| declaration || !o.def)
        .map(|o| Place {
            path: a.file.path.clone(),
            span: o.span,
        })
        .collect();
    for t in a.templates() {
        out.extend(
            t.occurrences
                .iter()
                .filter(|o| o.kind == kind && o.name == name)
                .map(|o| Place {
                    path: t.path.clone(),
                    span: o.span,
                }),
        );
    }
    out
}

/// Why a name cannot be renamed to `new`, if it cannot: `new` is not a name, or the
/// workflow with the edits would have an error it does not have now (a reserved word, a
/// name declared twice), as the compiler says it.
pub fn rename_problem(
    a: &Analysis,
    kind: Kind,
    new: &str,
    edits: &HashMap<PathBuf, Vec<Span>>,
) -> Option<String> {
    let ident = new
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && new.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident {
        return Some(format!("`{new}` is not a name (letters, digits and `_`)"));
    }
    if kind == Kind::Node && compile::BUILTIN_EXITS.iter().any(|(n, _)| *n == new) {
        return Some(format!("`{new}` is a built-in exit"));
    }
    let spans = edits.get(&a.file.path)?;
    let mut text = a.text().to_string();
    for span in spans.iter().rev() {
        text.replace_range(span.start..span.end, new);
    }
    // The reply script is read from disk: its own edits are not seen here.
    let script_edited = a
        .workflow
        .script
        .as_deref()
        .is_some_and(|s| edits.contains_key(&super::analysis::normalize(s)));
    let errors = |text: &str| -> Vec<(crate::diagnostics::Code, String)> {
        let (_, diags) = compile::load(&crate::source::SourceFile::new(&a.file.path, text));
        diags
            .iter()
            .filter(|d| d.severity == crate::diagnostics::Severity::Error)
            .filter(|d| {
                !(script_edited && d.code == crate::diagnostics::Code::WorkflowScriptUnknownRole)
            })
            .map(|d| (d.code, d.message.clone()))
            .collect()
    };
    let before = errors(a.text());
    errors(&text)
        .into_iter()
        .find(|e| !before.contains(e))
        .map(|(_, message)| format!("renaming to `{new}` would make an error: {message}"))
}

/// The edits renaming a name everywhere it is written, by file.
pub fn rename(a: &Analysis, kind: Kind, name: &str) -> HashMap<PathBuf, Vec<Span>> {
    let mut out: HashMap<PathBuf, Vec<Span>> = HashMap::new();
    for place in references(a, kind, name, true) {
        out.entry(place.path).or_default().push(place.span);
    }
    for spans in out.values_mut() {
        spans.sort();
        spans.dedup();
    }
    out
}

/// Whether a name can be renamed from here: declared in this workflow file.
pub fn can_rename(a: &Analysis, kind: Kind, name: &str) -> bool {
    kind.renamable() && a.index().definitions(kind, name).next().is_some()
}

/// The occurrence of a template path's name, for a file outside any workflow.
pub fn template_index(a: &Analysis, path: &Path) -> Option<usize> {
    a.templates().iter().position(|t| t.path == path)
}
