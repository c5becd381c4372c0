//! Stage 3: proves a compiled [`Workflow`] sound. Ordered passes over the graph
//! (reachability, bounded loops, exhaustive routing), the prompt templates, and — unless
//! offline — the environment (provider keys). Provider profiles and tool specs were
//! validated by their own crates when the workflow was compiled.

pub mod cost;
mod graph;
mod outcomes;
pub mod ran;
mod stages;
mod templates;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use petgraph::graph::NodeIndex;
use serde::Serialize;

use crate::compile::{self, MemoryKind, RoleKind, Workflow};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, nearest};
use crate::prompt::Prompts;
use crate::source::{SourceFile, Span};
use crate::syntax::{Ast, ValueKind};

#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Skip the environment tier (API keys present, Docker reachable).
    pub offline: bool,
}

/// What `check` found out about a sound workflow.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub roles: usize,
    pub llm_roles: usize,
    pub tool_roles: usize,
    pub builtin_roles: usize,
    pub routes: usize,
    pub exits: usize,
    /// Worst-case LLM calls in one run (with retries), `None` when a map fan-out has no
    /// bound; `u64::MAX` when the figure does not fit 64 bits.
    pub worst_case_llm_calls: Option<u64>,
    /// Worst-case visits per role.
    pub max_visits: Vec<(String, Option<u64>)>,
    /// Inputs that bound visits (`max_visits = input.N`): the figures above use their
    /// defaults, and a run given larger values makes more calls.
    pub bounded_by_inputs: Vec<String>,
}

impl Summary {
    pub fn line(&self) -> String {
        let inputs: Vec<String> = self
            .bounded_by_inputs
            .iter()
            .map(|n| format!("`{n}`"))
            .collect();
        let calls = match self.worst_case_llm_calls {
            Some(u64::MAX) => format!("more than {} LLM calls per run", u64::MAX - 1),
            Some(n) if inputs.is_empty() => format!("at most {n} LLM calls per run"),
            Some(n) => format!(
                "at most {n} LLM calls per run with the default of input {}",
                inputs.join(", ")
            ),
            None if !inputs.is_empty() => format!(
                "a number of LLM calls per run set by input {}",
                inputs.join(", ")
            ),
            None => "an unbounded number of LLM calls per run".to_string(),
        };
        format!(
            "{} roles ({} llm, {} tool, {} builtin), {} routes, {} exits; {calls}",
            self.roles,
            self.llm_roles,
            self.tool_roles,
            self.builtin_roles,
            self.routes,
            self.exits
        )
    }
}

/// A workflow that compiled and passed `check` without an error: every name resolved
/// (no placeholder index is left), every route exhaustive, every loop bounded. Only
/// [`load`] makes one, and the interpreter runs nothing else:
///
/// ```
/// use rondo::check::{self, CheckOptions};
/// use rondo::source::SourceFile;
///
/// let options = CheckOptions { offline: true };
/// let file = SourceFile::new("w.rondo", "start -> nowhere\n");
/// assert!(check::load(&file, &options).checked.is_err());
/// let file = SourceFile::new("w.rondo", "start -> done\nexit done\n");
/// let workflow = check::load(&file, &options).checked.expect("sound");
/// let _start = || rondo::run::Interpreter::start(&workflow, &Default::default());
/// ```
///
/// A workflow straight from the compiler, possibly partial, does not type-check:
///
/// ```compile_fail
/// use rondo::source::SourceFile;
///
/// let file = SourceFile::new("w.rondo", "start -> nowhere\n");
/// let (workflow, _) = rondo::compile::load(&file);
/// let _start = || rondo::run::Interpreter::start(&workflow, &Default::default());
/// ```
#[derive(Debug, Clone)]
pub struct Checked(Workflow);

impl Checked {
    /// The same workflow with every provider profile calling `model` (`rondo swebench
    /// --model`): a model name is free text, so nothing checked depends on it.
    pub fn with_model(mut self, model: &str) -> Checked {
        for p in &mut self.0.providers {
            p.profile.model = model.to_string();
            p.profile.model_env = None;
        }
        self
    }
}

impl Checked {
    /// The same workflow with each Docker environment that mounts the whole workspace
    /// mounting it at `path` instead, over what the image has there, and working there
    /// (`rondo swebench` on SWE-bench's images, whose repository is `/testbed`). `None`
    /// when no environment mounts the workspace.
    pub fn with_workspace_at(mut self, path: &str) -> Option<Checked> {
        use crate::compile::mounts::{MountSource, parse_mount};
        let mut moved = false;
        for env in &mut self.0.environments {
            if env.kind != compile::EnvKind::Docker {
                continue;
            }
            for mount in &mut env.mounts {
                let Ok(spec) = parse_mount(mount) else {
                    continue;
                };
                let MountSource::Workspace(rel) = &spec.source else {
                    continue;
                };
                if !rel.to_string_lossy().trim_matches(['.', '/']).is_empty() {
                    continue;
                }
                let mode = if spec.writable { "rw" } else { "ro" };
                if env.workdir.as_deref().is_none_or(|w| w == spec.container) {
                    env.workdir = Some(path.to_string());
                }
                *mount = format!("{}:{path}:{mode}:replace", rel.display());
                moved = true;
            }
        }
        moved.then_some(self)
    }
}

impl std::ops::Deref for Checked {
    type Target = Workflow;

    fn deref(&self) -> &Workflow {
        &self.0
    }
}

/// What compiling and checking one file found.
pub struct Loaded {
    /// The syntax tree, handed back so a caller about to exit can skip freeing it.
    pub ast: Ast,
    /// `Ok` when neither compiling nor checking found an error; else the partial workflow.
    pub checked: Result<Checked, Workflow>,
    pub diagnostics: Diagnostics,
    pub summary: Summary,
}

impl Loaded {
    /// The workflow, checked or not.
    pub fn workflow(&self) -> &Workflow {
        match &self.checked {
            Ok(w) => w,
            Err(w) => w,
        }
    }
}

/// Parses, compiles and checks a file: the one way to a [`Checked`] workflow.
pub fn load(file: &SourceFile, options: &CheckOptions) -> Loaded {
    // tera's parser is most of a check's time: the templates the file names are parsed
    // on other threads as soon as the declaration naming them is read, while the rest of
    // the file is parsed and compiled.
    let ((ast, workflow, mut diagnostics), early) = std::thread::scope(|scope| {
        let mut feed = Feed::new(file, scope);
        let (ast, parsed) = crate::syntax::parse_each(file, |ast| feed.seen(ast));
        let reader = feed.finish(&ast);
        let (workflow, diagnostics) = compile::compile_parsed(file, &ast, parsed);
        let early = reader.and_then(|r| r.join().ok()).flatten();
        ((ast, workflow, diagnostics), early)
    });
    let sound = stages::sound(&ast, &diagnostics);
    let (more, summary) = check_sound(&workflow, sound, options, early);
    diagnostics.extend(more);
    drop_follow_ons(&ast, &workflow, &mut diagnostics);
    let checked = if diagnostics.has_errors() {
        Err(workflow)
    } else {
        Ok(Checked(workflow))
    };
    Loaded {
        ast,
        checked,
        diagnostics,
        summary,
    }
}

/// What the template readers are sent while the file is parsed.
enum Early {
    /// A string rendered with tera at run time (an artifact's name, a tool's command or
    /// log name): parsed into the compiler's cache, which asks for it soon.
    Inline(String),
    /// A template of the prompts folder that an llm role names.
    Template(Arc<Path>, String),
    /// The file is parsed: the prompts folder and every template its llm roles name.
    Last(PathBuf, Vec<String>),
}

type Reader<'scope> = ScopedJoinHandle<'scope, Option<Prompts>>;

/// Sends the template readers what each declaration names as soon as it is parsed.
/// They start with the first such declaration; a file that names none starts no thread.
struct Feed<'scope, 'env> {
    file: &'env SourceFile,
    scope: &'scope Scope<'scope, 'env>,
    reader: Option<(Sender<Early>, Reader<'scope>)>,
    /// Known once the workflow header is read; templates named before wait for it.
    dir: Option<Arc<Path>>,
    waiting: Vec<String>,
    /// Roles and workflow-level artifacts already sent.
    roles: usize,
    artifacts: usize,
}

impl<'scope, 'env> Feed<'scope, 'env> {
    fn new(file: &'env SourceFile, scope: &'scope Scope<'scope, 'env>) -> Self {
        Feed {
            file,
            scope,
            reader: None,
            dir: None,
            waiting: Vec::new(),
            roles: 0,
            artifacts: 0,
        }
    }

    /// Called with the tree after each declaration is added to it.
    fn seen(&mut self, ast: &Ast) {
        if self.dir.is_none()
            && let Some(header) = &ast.workflow
        {
            let dir: Arc<Path> = compile::prompts_dir(self.file, Some(header)).into();
            self.dir = Some(dir.clone());
            for name in std::mem::take(&mut self.waiting) {
                self.send(Early::Template(dir.clone(), name));
            }
        }
        for role in ast.roles.get(self.roles..).unwrap_or_default() {
            for text in inline_templates(role) {
                self.send(Early::Inline(text.to_string()));
            }
            for name in compile::prompts_named_by(role) {
                match &self.dir {
                    Some(dir) => self.send(Early::Template(dir.clone(), name)),
                    None => self.waiting.push(name),
                }
            }
        }
        self.roles = ast.roles.len();
        for artifact in ast.artifacts.get(self.artifacts..).unwrap_or_default() {
            if artifact.name.contains('{') {
                self.send(Early::Inline(artifact.name.clone()));
            }
        }
        self.artifacts = ast.artifacts.len();
    }

    /// The whole file is parsed: the readers are told which templates it names (those
    /// waiting for a header that never came are in the file's folder) and finish.
    fn finish(mut self, ast: &Ast) -> Option<Reader<'scope>> {
        let (dir, names) = compile::named_prompts(self.file, ast);
        if self.dir.is_none() {
            let folder: Arc<Path> = dir.as_path().into();
            for name in std::mem::take(&mut self.waiting) {
                self.send(Early::Template(folder.clone(), name));
            }
        }
        let (sender, reader) = self.reader.take()?;
        let _ = sender.send(Early::Last(dir, names));
        Some(reader)
    }

    fn send(&mut self, early: Early) {
        if self.reader.is_none() {
            let (sender, receiver) = std::sync::mpsc::channel();
            // The main thread's stack: tera's parser recurses once per nesting level.
            let reader = std::thread::Builder::new()
                .name("templates".into())
                .stack_size(8 << 20)
                .spawn_scoped(self.scope, move || read_early(receiver))
                .ok();
            match reader {
                Some(reader) => self.reader = Some((sender, reader)),
                // The compiled workflow's templates are then read after it.
                None => return,
            }
        }
        if let Some((sender, _)) = &self.reader {
            let _ = sender.send(early);
        }
    }
}

/// The strings of a role that tera renders at run time and that hold a tag.
fn inline_templates(role: &crate::syntax::RoleDecl) -> Vec<&str> {
    let names = role.artifacts.iter().map(|a| a.name.as_str());
    let tool_strings = role
        .attrs
        .iter()
        .filter(|a| matches!(a.key.name.as_str(), "command" | "log"))
        .flat_map(|a| match &a.value.kind {
            ValueKind::String(s) => vec![s.as_str()],
            ValueKind::List(items) => items
                .iter()
                .filter_map(|i| match &i.kind {
                    ValueKind::String(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        });
    names
        .chain(tool_strings)
        .filter(|t| t.contains('{'))
        .collect()
}

/// Reads what the feed sends. A second thread joins in at the second template, when the
/// machine has a second core; the templates are then put together as
/// [`Prompts::load_named`] does.
fn read_early(receiver: Receiver<Early>) -> Option<Prompts> {
    let work = Mutex::new(receiver);
    std::thread::scope(|scope| {
        let mut mine = Drained::default();
        let mut helper = None;
        while let Some(early) = next(&work) {
            let second = matches!(early, Early::Template(..)) && mine.read.len() == 1;
            if second && helper.is_none() && has_second_core() {
                helper = std::thread::Builder::new()
                    .name("templates".into())
                    .stack_size(8 << 20)
                    .spawn_scoped(scope, || drain(&work))
                    .ok();
            }
            mine.take(early);
        }
        // A helper that failed leaves its templates to be read again below.
        if let Some(theirs) = helper.and_then(|h| h.join().ok()) {
            mine.merge(theirs);
        }
        let (dir, names) = mine.last?;
        let ready = if mine.dir.as_deref() == Some(dir.as_path()) {
            mine.read
        } else {
            HashMap::new()
        };
        Some(Prompts::load_read(&dir, &names, ready))
    })
}

fn has_second_core() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// The next message; `None` once the feed is done.
fn next(work: &Mutex<Receiver<Early>>) -> Option<Early> {
    work.lock().ok()?.recv().ok()
}

fn drain(work: &Mutex<Receiver<Early>>) -> Drained {
    let mut drained = Drained::default();
    while let Some(early) = next(work) {
        drained.take(early);
    }
    drained
}

/// What one reader did with the messages it took.
#[derive(Default)]
struct Drained {
    dir: Option<Arc<Path>>,
    read: HashMap<String, crate::prompt::Read>,
    last: Option<(PathBuf, Vec<String>)>,
}

impl Drained {
    fn take(&mut self, early: Early) {
        match early {
            Early::Inline(text) => {
                // An error is reported by compile or check, which have the span.
                let _ = compile::parse_template(&text);
            }
            Early::Template(dir, name) => {
                if let std::collections::hash_map::Entry::Vacant(slot) = self.read.entry(name) {
                    let read = crate::prompt::read_template(&dir, slot.key());
                    slot.insert(read);
                }
                self.dir = Some(dir);
            }
            Early::Last(dir, names) => self.last = Some((dir, names)),
        }
    }

    fn merge(&mut self, other: Drained) {
        self.dir = self.dir.take().or(other.dir);
        self.last = self.last.take().or(other.last);
        for (name, read) in other.read {
            self.read.entry(name).or_insert(read);
        }
    }
}

/// Drops what only follows from another error: a template reading `memory.plan` for a
/// role whose `reads` misspells it (`reads = [plna]`) is the unknown name's fault, and
/// "add `plan` to `reads`" would be wrong advice beside "did you mean `plan`?".
fn drop_follow_ons(ast: &Ast, workflow: &Workflow, diags: &mut Diagnostics) {
    let names: Vec<&str> = workflow.memory.iter().map(|m| m.name.as_str()).collect();
    // (the role's name, a memory one of its unknown `reads` names meant)
    let mut meant: Vec<(Span, &str)> = Vec::new();
    for role in &ast.roles {
        let reads = role.attrs.iter().filter(|a| a.key.name == "reads");
        for attr in reads {
            let ValueKind::List(items) = &attr.value.kind else {
                continue;
            };
            for item in items {
                let ValueKind::Ident(name) = &item.kind else {
                    continue;
                };
                if !names.contains(&name.as_str())
                    && let Some(m) = nearest(name, names.iter().copied())
                {
                    meant.push((role.name.span, m));
                }
            }
        }
    }
    if meant.is_empty() {
        return;
    }
    diags.retain(|d| {
        let Some(e) = d.external.as_deref() else {
            return true;
        };
        let read = e.text.get(e.span.start..e.span.end).unwrap_or("");
        !(d.code == Code::TemplateMemoryNotRead && meant.contains(&(d.primary_span(), read)))
    });
}

/// What is known of a file that could not be read as text: only `diagnostics` (nothing
/// else is checked, since every other report would follow from that one fault).
pub fn unreadable(diagnostics: Diagnostics) -> Loaded {
    let (ast, workflow, _) = compile::load_keeping_ast(&SourceFile::new("", ""));
    Loaded {
        ast,
        checked: Err(workflow),
        diagnostics,
        summary: Summary::default(),
    }
}

/// Reads, compiles and checks one file. `Err` when the file cannot be read; a file that is
/// not UTF-8 is a diagnostic, pointing at its first bad byte.
pub fn load_checked(
    path: &std::path::Path,
    options: &CheckOptions,
) -> Result<(SourceFile, Loaded), String> {
    let file = match SourceFile::read(path) {
        Ok(file) => file,
        Err(e) => {
            let Some((text, span, label)) = e.bad_byte() else {
                return Err(format!("cannot read {}: {e}", path.display()));
            };
            let mut diags = Diagnostics::default();
            diags.push(
                Diagnostic::not_utf8(format_args!("`{}`", path.display())).label(span, label),
            );
            return Ok((SourceFile::new(path, text), unreadable(diags)));
        }
    };
    let loaded = load(&file, options);
    Ok((file, loaded))
}

/// Runs every pass; after a compile with errors, only the template passes (without
/// knowing which roles surely ran). [`load`] runs more: every pass whose input the
/// errors left sound.
pub fn check(
    workflow: &Workflow,
    compile_has_errors: bool,
    options: &CheckOptions,
) -> (Diagnostics, Summary) {
    let sound = if compile_has_errors {
        stages::Sound::NONE
    } else {
        stages::Sound::ALL
    };
    check_sound(workflow, sound, options, None)
}

/// Runs the passes whose input is `sound`, so one mistake does not cascade into
/// unrelated reports and does not hide the others.
fn check_sound(
    workflow: &Workflow,
    sound: stages::Sound,
    options: &CheckOptions,
    early: Option<Prompts>,
) -> (Diagnostics, Summary) {
    let mut diags = Diagnostics::default();
    // Which roles surely ran is only known on a graph whose names all resolved.
    let runs = sound.graph.then(|| ran::definitely_valid(workflow));
    templates::check(workflow, runs.as_ref(), early, &mut diags);
    // After the compiler's own memory errors (gamma, sections): one report each.
    if sound.memory {
        memory(workflow, &mut diags);
    }
    if let Some(runs) = &runs {
        let invalid_unrouted = outcomes::check(workflow, &mut diags);
        graph::check(workflow, &invalid_unrouted, &mut diags);
        ran::check(workflow, runs, &mut diags);
        // The worst case is only proven on a sound graph without errors.
        if !diags.has_errors() {
            cost::check(workflow, &mut diags);
        }
    }
    if !options.offline {
        environment(workflow, &mut diags);
    }
    let summary = summary(workflow);
    (diags, summary)
}

/// Each memory slot can be made as the run makes it (whiteboard sections with distinct
/// id prefixes, code-context weights in range).
fn memory(workflow: &Workflow, diags: &mut Diagnostics) {
    for slot in &workflow.memory {
        if let Err(e) = slot.kind.can_be_made() {
            diags.push(
                Diagnostic::error(
                    Code::MemoryCannotCreate,
                    format!("memory `{}` cannot be made", slot.name),
                )
                .label(slot.span, e)
                .help(match slot.kind {
                    MemoryKind::Whiteboard { .. } => {
                        "a section's id prefix is the last word of its name (`Key Facts` → \
                         FACT): give each section a different last word"
                    }
                    _ => "alpha and beta weigh accesses and citations: use 0 or more",
                }),
            );
        }
    }
}

fn environment(workflow: &Workflow, diags: &mut Diagnostics) {
    // The provider crate decides which key a profile needs, as at run start.
    let lacking = |id: usize| {
        let profile = &workflow.providers[id].profile;
        let var = profile.key_env().filter(|_| profile.key_required())?;
        std::env::var_os(var)
            .is_none_or(|v| v.is_empty())
            .then(|| var.to_string())
    };
    // The chains a run calls (a role's profile, then its fallbacks); a profile without its
    // key is skipped for the next one, so only a chain with no callable profile keeps
    // `rondo run` from starting.
    let chains: Vec<Vec<usize>> = role_providers(workflow)
        .into_iter()
        .map(|id| chain(workflow, id))
        .collect();
    let mut reported = Vec::new();
    for chain in &chains {
        for &id in chain {
            let Some(var) = lacking(id) else { continue };
            if reported.contains(&id) {
                continue;
            }
            reported.push(id);
            let p = &workflow.providers[id];
            // Called by a chain none of whose profiles has its key: the run will not start.
            let dead = chains
                .iter()
                .any(|c| c.contains(&id) && c.iter().all(|&other| lacking(other).is_some()));
            let at = chain.iter().position(|&other| other == id).unwrap_or(0);
            let callable = chain[at..]
                .iter()
                .chain(&chain[..at])
                .copied()
                .find(|&other| lacking(other).is_none());
            // The file is sound; only this machine is not ready: a warning either way.
            let diag = match callable.filter(|_| !dead) {
                Some(other) => Diagnostic::warning(
                    Code::EnvMissingKey,
                    format!(
                        "provider `{}` needs the environment variable `{var}`, which is not set: its calls go to `{}`",
                        p.name(),
                        workflow.providers[other].name()
                    ),
                )
                .label(p.span, "declared here")
                .help(format!("export {var}=... to call `{}`; a profile without its key is skipped for its fallback; `rondo check --offline` skips this check, `--deny-warnings` fails on it", p.name())),
                None => Diagnostic::warning(Code::EnvMissingKey, format!("provider `{}` needs the environment variable `{var}`, which is not set", p.name()))
                    .label(p.span, "declared here")
                    .help(format!("export {var}=... before `rondo run` (it will not start without it), or run with `--provider scripted`; `rondo check --offline` skips this check, `--deny-warnings` fails on it")),
            };
            diags.push(diag);
        }
    }
}

/// `id` and its fallbacks, in the order a call tries them.
fn chain(workflow: &Workflow, id: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![id];
    while let Some(id) = stack.pop() {
        if id >= workflow.providers.len() || out.contains(&id) {
            continue;
        }
        out.push(id);
        let fallback = &workflow.providers[id].profile.fallback;
        stack.extend(
            fallback
                .iter()
                .rev()
                .filter_map(|f| workflow.provider_id(f)),
        );
    }
    out
}

/// The profile each llm role calls first.
fn role_providers(workflow: &Workflow) -> Vec<usize> {
    let mut out: Vec<usize> = workflow
        .roles()
        .filter_map(|(_, r)| match &r.kind {
            RoleKind::Llm(l) => Some(l.provider),
            _ => None,
        })
        .filter(|&id| id < workflow.providers.len())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Providers a run may call: those of llm roles and their fallback chains.
pub fn used_providers(workflow: &Workflow) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    let mut stack = role_providers(workflow);
    while let Some(id) = stack.pop() {
        if id >= workflow.providers.len() || out.contains(&id) {
            continue;
        }
        out.push(id);
        let fallback = &workflow.providers[id].profile.fallback;
        stack.extend(fallback.iter().filter_map(|f| workflow.provider_id(f)));
    }
    out.sort();
    out
}

fn summary(workflow: &Workflow) -> Summary {
    let mut s = Summary {
        roles: 0,
        llm_roles: 0,
        tool_roles: 0,
        builtin_roles: 0,
        routes: workflow.routes.len(),
        exits: workflow
            .graph
            .node_indices()
            .filter(|&i| {
                workflow.is_exit(i)
                    && workflow
                        .graph
                        .neighbors_directed(i, petgraph::Direction::Incoming)
                        .next()
                        .is_some()
            })
            .count(),
        worst_case_llm_calls: Some(0),
        max_visits: Vec::new(),
        bounded_by_inputs: Vec::new(),
    };
    let bounds = graph::visit_bounds(workflow);
    for (index, role) in workflow.roles() {
        s.roles += 1;
        if let Some(crate::compile::MaxVisits::Input(id)) = role.max_visits
            && let Some(input) = workflow.inputs.get(id)
            && !s.bounded_by_inputs.contains(&input.name)
        {
            s.bounded_by_inputs.push(input.name.clone());
        }
        let bound = bounds.get(&index).copied().flatten();
        s.max_visits
            .push((workflow.node(index).name.clone(), bound));
        match &role.kind {
            RoleKind::Llm(l) => {
                s.llm_roles += 1;
                s.worst_case_llm_calls = match (s.worst_case_llm_calls, bound) {
                    (Some(total), Some(b)) => {
                        Some(total.saturating_add(b.saturating_mul(l.retries.saturating_add(1))))
                    }
                    _ => None,
                };
            }
            RoleKind::Tool(_) => s.tool_roles += 1,
            RoleKind::Builtin => s.builtin_roles += 1,
        }
    }
    s
}

pub(crate) fn node_name(workflow: &Workflow, index: NodeIndex) -> &str {
    &workflow.node(index).name
}
