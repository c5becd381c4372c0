//! Prompt templates (tera): loading a workflow's prompt folder, the filters Rondo adds,
//! and finding which variables a template uses so `check` can prove they exist.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tera::ast::{Expr, ExprVal, Node};
use tera::{Tera, Value};

/// All templates of one prompts folder, parsed once.
pub struct Prompts {
    pub tera: Tera,
    pub dir: PathBuf,
    /// Files that failed to parse, with the reason.
    pub errors: HashMap<String, String>,
    /// The text of each file that parsed, for diagnostics that point into it.
    pub sources: HashMap<String, Arc<str>>,
}

impl Prompts {
    pub fn load(dir: &Path) -> Prompts {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        register(&mut tera);
        let mut errors = HashMap::new();
        let mut sources = HashMap::new();
        let mut files = Vec::new();
        collect_files(dir, dir, &mut files);
        files.sort();
        // Add one by one so one bad file does not hide the others.
        for (name, path) in &files {
            match std::fs::read_to_string(path) {
                Ok(text) => match tera.add_raw_template(name, &text) {
                    Ok(()) => {
                        sources.insert(name.clone(), Arc::from(text));
                    }
                    Err(e) => {
                        errors.insert(name.clone(), crate::compile::tera_error_text(&e));
                    }
                },
                Err(e) => {
                    errors.insert(name.clone(), e.to_string());
                }
            }
        }
        Prompts {
            tera,
            dir: dir.to_path_buf(),
            errors,
            sources,
        }
    }

    /// Only the named templates and what they include: a run reads no other file.
    pub fn load_named(dir: &Path, names: &[String]) -> Prompts {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        register(&mut tera);
        let mut prompts = Prompts {
            tera,
            dir: dir.to_path_buf(),
            errors: HashMap::new(),
            sources: HashMap::new(),
        };
        let mut queue: Vec<String> = names.to_vec();
        while let Some(name) = queue.pop() {
            if prompts.tera.get_template(&name).is_ok() || prompts.errors.contains_key(&name) {
                continue;
            }
            let added = std::fs::read_to_string(dir.join(&name))
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    prompts
                        .tera
                        .add_raw_template(&name, &text)
                        .map_err(|e| crate::compile::tera_error_text(&e))
                });
            match added {
                Ok(()) => {
                    if let Ok(t) = prompts.tera.get_template(&name) {
                        let mut locals = Vec::new();
                        let mut vars = BTreeSet::new();
                        let mut includes = Vec::new();
                        walk_nodes(&t.ast, &mut locals, &mut vars, &mut includes);
                        queue.extend(includes);
                    }
                }
                Err(e) => {
                    prompts.errors.insert(name, e);
                }
            }
        }
        prompts
    }

    pub fn has(&self, name: &str) -> bool {
        self.tera.get_template(name).is_ok()
    }

    /// `(root, second segment)` of every variable the template (and what it includes) reads,
    /// minus loop variables and `set` names.
    pub fn variables(&self, name: &str) -> BTreeSet<(String, Option<String>)> {
        let mut out = BTreeSet::new();
        let mut seen = BTreeSet::new();
        self.walk_template(name, &mut out, &mut seen);
        out
    }

    fn walk_template(
        &self,
        name: &str,
        out: &mut BTreeSet<(String, Option<String>)>,
        seen: &mut BTreeSet<String>,
    ) {
        if !seen.insert(name.to_string()) {
            return;
        }
        let Ok(template) = self.tera.get_template(name) else {
            return;
        };
        let mut locals = vec!["loop".to_string(), "__tera_context".to_string()];
        let mut includes = Vec::new();
        walk_nodes(&template.ast, &mut locals, out, &mut includes);
        for include in includes {
            self.walk_template(&include, out, seen);
        }
    }

    pub fn render(&self, name: &str, context: &tera::Context) -> Result<String, String> {
        self.tera
            .render(name, context)
            .map_err(|e| crate::compile::tera_error_text(&e))
    }
}

/// Renders a one-off template string (artifact names, command arguments).
pub fn render_str(text: &str, context: &tera::Context) -> Result<String, String> {
    if !text.contains("{{") && !text.contains("{%") {
        return Ok(text.to_string());
    }
    let mut tera = Tera::default();
    tera.autoescape_on(vec![]);
    register(&mut tera);
    tera.add_raw_template("inline", text)
        .map_err(|e| crate::compile::tera_error_text(&e))?;
    tera.render("inline", context)
        .map_err(|e| crate::compile::tera_error_text(&e))
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push((rel.to_string_lossy().replace('\\', "/"), path));
        }
    }
}

fn register(tera: &mut Tera) {
    tera.register_filter("pad", |value: &Value, args: &HashMap<String, Value>| {
        let width = args.get("width").and_then(Value::as_u64).unwrap_or(2) as usize;
        let text = match value {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Ok(Value::String(format!("{text:0>width$}")))
    });
    tera.register_filter("to_json", |value: &Value, _: &HashMap<String, Value>| {
        Ok(Value::String(
            serde_json::to_string_pretty(value).unwrap_or_default(),
        ))
    });
}

fn split_ident(ident: &str) -> (String, Option<String>) {
    let mut parts = ident.split(['.', '[']);
    let root = parts.next().unwrap_or("").to_string();
    let second = parts
        .next()
        .map(|s| s.trim_end_matches(']').to_string())
        .filter(|s| {
            !s.is_empty() && !s.starts_with(['"', '\'']) && !s.chars().all(|c| c.is_ascii_digit())
        });
    (root, second)
}

fn walk_nodes(
    nodes: &[Node],
    locals: &mut Vec<String>,
    out: &mut BTreeSet<(String, Option<String>)>,
    includes: &mut Vec<String>,
) {
    for node in nodes {
        match node {
            Node::VariableBlock(_, e) => walk_expr(e, locals, out),
            Node::Set(_, set) => {
                walk_expr(&set.value, locals, out);
                locals.push(set.key.clone());
            }
            Node::Forloop(_, f, _) => {
                walk_expr(&f.container, locals, out);
                let before = locals.len();
                locals.push(f.value.clone());
                if let Some(k) = &f.key {
                    locals.push(k.clone());
                }
                walk_nodes(&f.body, locals, out, includes);
                if let Some(body) = &f.empty_body {
                    walk_nodes(body, locals, out, includes);
                }
                locals.truncate(before);
            }
            Node::If(i, _) => {
                for (_, cond, body) in &i.conditions {
                    walk_expr(cond, locals, out);
                    walk_nodes(body, locals, out, includes);
                }
                if let Some((_, body)) = &i.otherwise {
                    walk_nodes(body, locals, out, includes);
                }
            }
            Node::FilterSection(_, f, _) => {
                for arg in f.filter.args.values() {
                    walk_expr(arg, locals, out);
                }
                walk_nodes(&f.body, locals, out, includes);
            }
            Node::Block(_, b, _) => walk_nodes(&b.body, locals, out, includes),
            Node::MacroDefinition(_, m, _) => {
                let before = locals.len();
                locals.extend(m.args.keys().cloned());
                walk_nodes(&m.body, locals, out, includes);
                locals.truncate(before);
            }
            Node::Include(_, names, _) => includes.extend(names.iter().cloned()),
            _ => {}
        }
    }
}

fn walk_expr(e: &Expr, locals: &[String], out: &mut BTreeSet<(String, Option<String>)>) {
    for f in &e.filters {
        for arg in f.args.values() {
            walk_expr(arg, locals, out);
        }
    }
    match &e.val {
        ExprVal::Ident(ident) => {
            let (root, second) = split_ident(ident);
            if !locals.contains(&root) {
                out.insert((root, second));
            }
        }
        ExprVal::Math(m) => {
            walk_expr(&m.lhs, locals, out);
            walk_expr(&m.rhs, locals, out);
        }
        ExprVal::Logic(l) => {
            walk_expr(&l.lhs, locals, out);
            walk_expr(&l.rhs, locals, out);
        }
        ExprVal::In(i) => {
            walk_expr(&i.lhs, locals, out);
            walk_expr(&i.rhs, locals, out);
        }
        ExprVal::Test(t) => {
            // `x is defined` may name something absent on purpose.
            if t.name != "defined" && t.name != "undefined" {
                let (root, second) = split_ident(&t.ident);
                if !locals.contains(&root) {
                    out.insert((root, second));
                }
            }
            for a in &t.args {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::FunctionCall(f) => {
            for a in f.args.values() {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::MacroCall(m) => {
            for a in m.args.values() {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::Array(items) => {
            for a in items {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::StringConcat(s) => {
            for v in &s.values {
                if let ExprVal::Ident(ident) = v {
                    let (root, second) = split_ident(ident);
                    if !locals.contains(&root) {
                        out.insert((root, second));
                    }
                }
            }
        }
        _ => {}
    }
}
