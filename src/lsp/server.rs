//! The server's loop and state: the open documents, the analysis of each workflow, and
//! the diagnostics published.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, Response};
use lsp_types::notification::{self as notif, Notification as _};
use lsp_types::request::{self as req, Request as _};
use lsp_types::{
    CompletionOptions, CompletionResponse, DiagnosticRelatedInformation, DiagnosticSeverity,
    DocumentSymbolResponse, GotoDefinitionResponse, Hover, HoverContents, HoverProviderCapability,
    InitializeParams, Location, MarkupContent, MarkupKind, NumberOrString, OneOf,
    PrepareRenameResponse, PublishDiagnosticsParams, RenameOptions, SemanticTokens,
    SemanticTokensFullOptions, SemanticTokensOptions, SemanticTokensResult,
    SemanticTokensServerCapabilities, ServerCapabilities, TextDocumentSyncCapability,
    TextDocumentSyncKind, TextEdit, Url, WorkspaceEdit,
};
use serde_json::Value;

use super::analysis::{Analysis, Overlays, normalize};
use super::features::{self, Place, Target, Where};
use super::position::{LineIndex, apply_change};
use crate::check::CheckOptions;
use crate::diagnostics::{Diagnostic, Severity};
use crate::source::{SourceFile, Span};

/// How the server checks.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Skip the environment tier (API keys), as `rondo check --offline`.
    pub offline: bool,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Serves one client on `connection` until it says `exit`.
pub fn serve(connection: &Connection, options: Options) -> Result<(), Error> {
    let (id, params) = connection.initialize_start()?;
    let params: InitializeParams = serde_json::from_value(params)?;
    let mut options = options;
    if let Some(Value::Bool(offline)) = params
        .initialization_options
        .as_ref()
        .and_then(|o| o.get("offline"))
    {
        options.offline |= *offline;
    }
    connection.initialize_finish(
        id,
        serde_json::json!({
            "capabilities": capabilities(),
            "serverInfo": { "name": "rondo", "version": env!("CARGO_PKG_VERSION") },
        }),
    )?;
    let mut server = Server::new(connection, &params, options);
    server.run()
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(
            TextDocumentSyncKind::INCREMENTAL,
        )),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        references_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: Default::default(),
        })),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into(), "\"".into()]),
            ..CompletionOptions::default()
        }),
        document_symbol_provider: Some(OneOf::Left(true)),
        document_formatting_provider: Some(OneOf::Left(true)),
        semantic_tokens_provider: Some(SemanticTokensServerCapabilities::SemanticTokensOptions(
            SemanticTokensOptions {
                legend: super::tokens::legend(),
                full: Some(SemanticTokensFullOptions::Bool(true)),
                range: None,
                work_done_progress_options: Default::default(),
            },
        )),
        ..ServerCapabilities::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    Rondo,
    Tera,
    Other,
}

fn language(path: &Path, id: Option<&str>) -> Language {
    match (path.extension().and_then(|e| e.to_str()), id) {
        (Some("rondo"), _) | (_, Some("rondo")) => Language::Rondo,
        (Some("tera"), _) | (_, Some("tera")) => Language::Tera,
        _ => Language::Other,
    }
}

struct Document {
    uri: Url,
    text: String,
    version: i32,
    language: Language,
}

struct Server<'c> {
    connection: &'c Connection,
    options: CheckOptions,
    /// Open documents, by absolute normalised path.
    docs: HashMap<PathBuf, Document>,
    /// The analysis of each workflow known: open ones, and those read from disk because
    /// they render an open template.
    analyses: HashMap<PathBuf, Arc<Analysis>>,
    /// The last analysis of each workflow that parsed (its names serve completion while
    /// the current text is half written).
    parsed: HashMap<PathBuf, Arc<Analysis>>,
    dirty: BTreeSet<PathBuf>,
    /// Folders searched for the workflows that render a template.
    roots: Vec<PathBuf>,
    searched: HashSet<PathBuf>,
    /// Templates already searched for on disk (a workflow opened later is found as open).
    orphans: HashSet<PathBuf>,
    /// What was last published for each file.
    published: HashMap<PathBuf, Vec<lsp_types::Diagnostic>>,
    overlays: Overlays,
    dropper: std::sync::mpsc::Sender<Vec<Arc<Analysis>>>,
}

/// What a message asks of the loop.
enum Flow {
    Go,
    Exit,
}

fn path_of(uri: &Url) -> PathBuf {
    match uri.to_file_path() {
        Ok(p) => normalize(&p),
        // An unsaved buffer: named in the current folder, so relative paths resolve there.
        Err(()) => normalize(Path::new(
            uri.path_segments()
                .and_then(|mut s| s.next_back())
                .filter(|s| !s.is_empty())
                .unwrap_or("untitled.rondo"),
        )),
    }
}

impl<'c> Server<'c> {
    fn new(connection: &'c Connection, params: &InitializeParams, options: Options) -> Self {
        let mut roots: Vec<PathBuf> = params
            .workspace_folders
            .iter()
            .flatten()
            .filter_map(|f| f.uri.to_file_path().ok())
            .map(|p| normalize(&p))
            .collect();
        #[allow(deprecated)] // `rootUri`: what clients without workspace folders send.
        if roots.is_empty()
            && let Some(root) = params.root_uri.as_ref().and_then(|u| u.to_file_path().ok())
        {
            roots.push(normalize(&root));
        }
        Server {
            connection,
            options: CheckOptions {
                offline: options.offline,
            },
            docs: HashMap::new(),
            analyses: HashMap::new(),
            parsed: HashMap::new(),
            dirty: BTreeSet::new(),
            roots,
            searched: HashSet::new(),
            orphans: HashSet::new(),
            published: HashMap::new(),
            overlays: Overlays::new(),
            dropper: {
                let (tx, rx) = std::sync::mpsc::channel::<Vec<Arc<Analysis>>>();
                std::thread::spawn(move || {
                    while let Ok(old) = rx.recv() {
                        drop(old);
                    }
                });
                tx
            },
        }
    }

    fn run(&mut self) -> Result<(), Error> {
        let receiver = self.connection.receiver.clone();
        while let Ok(message) = receiver.recv() {
            if let Flow::Exit = self.handle(message)? {
                return Ok(());
            }
            // Edits typed in a burst are checked once, after the last of them.
            while let Ok(message) = receiver.try_recv() {
                if let Flow::Exit = self.handle(message)? {
                    return Ok(());
                }
            }
            self.flush();
        }
        Ok(())
    }

    fn send(&self, message: impl Into<Message>) {
        let _ = self.connection.sender.send(message.into());
    }

    fn handle(&mut self, message: Message) -> Result<Flow, Error> {
        match message {
            Message::Request(request) => {
                if self.connection.handle_shutdown(&request)? {
                    return Ok(Flow::Exit);
                }
                // Answers are about the text as it is now.
                self.flush();
                let id = request.id.clone();
                let method = request.method.clone();
                // A fault of the server answers this request with an error; the session
                // goes on.
                let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.request(request)
                }));
                let response = match answered {
                    Ok(Ok(result)) => Response::new_ok(id, result),
                    Ok(Err((code, message))) => Response::new_err(id, code as i32, message),
                    Err(_) => Response::new_err(
                        id,
                        ErrorCode::InternalError as i32,
                        format!("rondo lsp failed on `{method}` (a bug: please report it)"),
                    ),
                };
                self.send(response);
            }
            Message::Notification(n) => {
                if n.method == notif::Exit::METHOD {
                    return Ok(Flow::Exit);
                }
                self.notification(n);
            }
            Message::Response(_) => {}
        }
        Ok(Flow::Go)
    }

    fn notification(&mut self, n: Notification) {
        match n.method.as_str() {
            notif::DidOpenTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidOpenTextDocumentParams>(n.params)
                else {
                    return;
                };
                let path = path_of(&p.text_document.uri);
                let lang = language(&path, Some(&p.text_document.language_id));
                self.docs.insert(
                    path.clone(),
                    Document {
                        uri: p.text_document.uri,
                        text: p.text_document.text,
                        version: p.text_document.version,
                        language: lang,
                    },
                );
                self.changed(&path);
            }
            notif::DidChangeTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidChangeTextDocumentParams>(n.params)
                else {
                    return;
                };
                let path = path_of(&p.text_document.uri);
                let Some(doc) = self.docs.get_mut(&path) else {
                    return;
                };
                for change in p.content_changes {
                    match change.range {
                        Some(range) => apply_change(&mut doc.text, range, &change.text),
                        None => doc.text = change.text,
                    }
                }
                doc.version = p.text_document.version;
                self.changed(&path);
            }
            notif::DidSaveTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidSaveTextDocumentParams>(n.params)
                else {
                    return;
                };
                // Workflows read from disk see the saved file now.
                let path = path_of(&p.text_document.uri);
                self.changed(&path);
            }
            notif::DidCloseTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidCloseTextDocumentParams>(n.params)
                else {
                    return;
                };
                let path = path_of(&p.text_document.uri);
                let Some(doc) = self.docs.remove(&path) else {
                    return;
                };
                match doc.language {
                    Language::Rondo => {
                        let old = [self.analyses.remove(&path), self.parsed.remove(&path)];
                        self.drop_later(old.into_iter().flatten().collect());
                        self.dirty.remove(&path);
                        self.publish(&path, Some(&doc.uri), Vec::new(), None);
                        self.publish_templates();
                    }
                    // Its workflows read the file from disk again.
                    _ => self.changed(&path),
                }
            }
            _ => {}
        }
    }

    /// A file's text changed: which workflows to check again.
    fn changed(&mut self, path: &Path) {
        match self.docs.get(path).map(|d| d.language) {
            Some(Language::Rondo) => {
                self.dirty.insert(path.to_path_buf());
            }
            _ => {
                let mut owners = self.owners(path);
                if owners.is_empty() && self.docs.contains_key(path) {
                    self.discover(path);
                    owners = self.owners(path);
                }
                self.dirty.extend(owners);
            }
        }
    }

    /// The workflows known to render a template.
    fn owners(&self, template: &Path) -> Vec<PathBuf> {
        self.analyses
            .iter()
            .filter(|(_, a)| a.template(template).is_some())
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Finds the workflows on disk that render a template: `.rondo` files in its folder,
    /// the folders above it within the workspace, and the workspace, which are near it or
    /// name its folder.
    fn discover(&mut self, template: &Path) {
        if !self.orphans.insert(template.to_path_buf()) {
            return;
        }
        let Some(dir) = template.parent() else { return };
        let folder = dir.file_name().map(|n| n.to_string_lossy().to_string());
        // Not above the workspace: only its own files are read.
        let mut places: Vec<PathBuf> = dir
            .ancestors()
            .take(if self.roots.is_empty() { 2 } else { 4 })
            .filter(|p| self.roots.is_empty() || self.roots.iter().any(|r| p.starts_with(r)))
            .map(Path::to_path_buf)
            .collect();
        places.extend(self.roots.iter().cloned());
        let mut found = Vec::new();
        for place in places {
            if !self.searched.insert(place.clone()) {
                continue;
            }
            find_workflows(&place, 0, &mut found);
        }
        for path in found {
            let path = normalize(&path);
            if self.analyses.contains_key(&path) || self.docs.contains_key(&path) {
                continue;
            }
            let Ok(file) = SourceFile::read(&path) else {
                continue;
            };
            let near = dir.starts_with(path.parent().unwrap_or(Path::new("/")));
            if !near
                && !folder
                    .as_ref()
                    .is_some_and(|f| file.text.contains(f.as_str()))
            {
                continue;
            }
            let a = self.analyze(&path, &file.text);
            if a.template(template).is_some() {
                self.orphans.remove(template);
                self.analyses.insert(path, Arc::new(a));
            }
        }
        // A template seen later in a folder already searched is found again.
        self.searched.clear();
    }

    fn open_texts(&self) -> HashMap<PathBuf, String> {
        self.docs
            .iter()
            .filter(|(_, d)| d.language != Language::Rondo)
            .map(|(p, d)| (p.clone(), d.text.clone()))
            .collect()
    }

    fn analyze(&self, path: &Path, text: &str) -> Analysis {
        Analysis::new(
            path,
            text,
            &self.open_texts(),
            &self.options,
            &self.overlays,
        )
    }

    /// Checks every workflow whose text or templates changed, and publishes.
    fn flush(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let dirty = std::mem::take(&mut self.dirty);
        for path in dirty {
            let text = match self.docs.get(&path) {
                Some(doc) => doc.text.clone(),
                None => match SourceFile::read(&path) {
                    Ok(f) => f.text.to_string(),
                    Err(_) => {
                        self.analyses.remove(&path);
                        continue;
                    }
                },
            };
            let analyzed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.analyze(&path, &text)
            }));
            // A fault of the checker leaves the last analysis in place; its message went to
            // standard error, which editors keep in the server's log.
            let Ok(a) = analyzed else { continue };
            let a = Arc::new(a);
            let mut old = Vec::new();
            if !a.syntax_errors {
                old.extend(self.parsed.insert(path.clone(), a.clone()));
            }
            old.extend(self.analyses.insert(path.clone(), a.clone()));
            if let Some(doc) = self.docs.get(&path) {
                let uri = doc.uri.clone();
                let version = doc.version;
                let diags = workflow_diagnostics(&a);
                self.publish(&path, Some(&uri), diags, Some(version));
            }
            self.drop_later(old);
        }
        self.publish_templates();
    }

    /// Freeing the tree and graph of a large workflow takes a while: another thread does
    /// it, so the next edit is not kept waiting.
    fn drop_later(&self, old: Vec<Arc<Analysis>>) {
        if !old.is_empty() {
            let _ = self.dropper.send(old);
        }
    }

    fn publish(
        &mut self,
        path: &Path,
        uri: Option<&Url>,
        diagnostics: Vec<lsp_types::Diagnostic>,
        version: Option<i32>,
    ) {
        let before = self.published.get(path);
        if version.is_none() && before.map_or(diagnostics.is_empty(), |b| *b == diagnostics) {
            return;
        }
        let uri = match uri.cloned().or_else(|| Url::from_file_path(path).ok()) {
            Some(u) => u,
            None => return,
        };
        self.published
            .insert(path.to_path_buf(), diagnostics.clone());
        self.send(Notification::new(
            notif::PublishDiagnostics::METHOD.to_string(),
            PublishDiagnosticsParams {
                uri,
                diagnostics,
                version,
            },
        ));
    }

    /// The diagnostics of every template, gathered from every workflow rendering it.
    fn publish_templates(&mut self) {
        let mut by_template: HashMap<PathBuf, Vec<lsp_types::Diagnostic>> = HashMap::new();
        for a in self.analyses.values() {
            for t in a.templates() {
                by_template.entry(t.path.clone()).or_default();
            }
            for (path, d) in template_diagnostics(a) {
                let list = by_template.entry(path).or_default();
                if !list.contains(&d) {
                    list.push(d);
                }
            }
        }
        let stale: Vec<PathBuf> = self
            .published
            .keys()
            .filter(|p| {
                !by_template.contains_key(*p)
                    && self
                        .docs
                        .get(*p)
                        .is_none_or(|d| d.language != Language::Rondo)
            })
            .cloned()
            .collect();
        for p in stale {
            by_template.insert(p, Vec::new());
        }
        for (path, diags) in by_template {
            let uri = self.docs.get(&path).map(|d| d.uri.clone());
            self.publish(&path, uri.as_ref(), diags, None);
        }
    }

    fn request(&mut self, request: Request) -> Result<Value, (ErrorCode, String)> {
        let params = request.params;
        let bad = |e: serde_json::Error| (ErrorCode::InvalidParams, e.to_string());
        let json = |v: Option<Value>| Ok(v.unwrap_or(Value::Null));
        match request.method.as_str() {
            req::HoverRequest::METHOD => {
                let p: lsp_types::HoverParams = serde_json::from_value(params).map_err(bad)?;
                json(self.hover(&p.text_document_position_params))
            }
            req::GotoDefinition::METHOD => {
                let p: lsp_types::GotoDefinitionParams =
                    serde_json::from_value(params).map_err(bad)?;
                json(self.definition(&p.text_document_position_params))
            }
            req::References::METHOD => {
                let p: lsp_types::ReferenceParams = serde_json::from_value(params).map_err(bad)?;
                json(self.references(&p.text_document_position, p.context.include_declaration))
            }
            req::PrepareRenameRequest::METHOD => {
                let p: lsp_types::TextDocumentPositionParams =
                    serde_json::from_value(params).map_err(bad)?;
                self.prepare_rename(&p)
            }
            req::Rename::METHOD => {
                let p: lsp_types::RenameParams = serde_json::from_value(params).map_err(bad)?;
                self.rename(&p)
            }
            req::Completion::METHOD => {
                let p: lsp_types::CompletionParams = serde_json::from_value(params).map_err(bad)?;
                json(self.completion(&p.text_document_position))
            }
            req::DocumentSymbolRequest::METHOD => {
                let p: lsp_types::DocumentSymbolParams =
                    serde_json::from_value(params).map_err(bad)?;
                json(self.symbols(&p.text_document.uri))
            }
            req::Formatting::METHOD => {
                let p: lsp_types::DocumentFormattingParams =
                    serde_json::from_value(params).map_err(bad)?;
                json(self.format(&p.text_document.uri))
            }
            req::SemanticTokensFullRequest::METHOD => {
                let p: lsp_types::SemanticTokensParams =
                    serde_json::from_value(params).map_err(bad)?;
                json(self.semantic_tokens(&p.text_document.uri))
            }
            other => Err((
                ErrorCode::MethodNotFound,
                format!("`{other}` is not served"),
            )),
        }
    }

    /// The analysis a position is read with, the file it is in, and its byte offset.
    fn locate(
        &mut self,
        p: &lsp_types::TextDocumentPositionParams,
    ) -> Option<(Arc<Analysis>, Where, usize)> {
        let path = path_of(&p.text_document.uri);
        if let Some(a) = self.analyses.get(&path) {
            let offset = a.lines.offset(a.text(), p.position);
            return Some((a.clone(), Where::Workflow, offset));
        }
        let mut owners = self.owners(&path);
        if owners.is_empty() {
            self.discover(&path);
            owners = self.owners(&path);
        }
        owners.sort();
        let a = self.analyses.get(owners.first()?)?.clone();
        let t = features::template_index(&a, &path)?;
        let template = &a.templates()[t];
        let offset = template.lines.offset(&template.text, p.position);
        Some((a, Where::Template(t), offset))
    }

    fn target(
        &mut self,
        p: &lsp_types::TextDocumentPositionParams,
    ) -> Option<(Arc<Analysis>, Where, Target)> {
        let (a, at, offset) = self.locate(p)?;
        let target = features::target_at(&a, at, offset)?;
        Some((a, at, target))
    }

    fn hover(&mut self, p: &lsp_types::TextDocumentPositionParams) -> Option<Value> {
        let (a, at, target) = self.target(p)?;
        let text = features::hover(&a, &target)?;
        let (file_text, lines) = file_of(&a, at);
        let hover = Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: text,
            }),
            range: Some(lines.range(file_text, target.span())),
        };
        serde_json::to_value(hover).ok()
    }

    fn definition(&mut self, p: &lsp_types::TextDocumentPositionParams) -> Option<Value> {
        let (a, _, target) = self.target(p)?;
        let places = features::definition(&a, &target);
        let locations: Vec<Location> = places.iter().filter_map(|pl| location(&a, pl)).collect();
        if locations.is_empty() {
            return None;
        }
        serde_json::to_value(GotoDefinitionResponse::Array(locations)).ok()
    }

    fn references(
        &mut self,
        p: &lsp_types::TextDocumentPositionParams,
        declaration: bool,
    ) -> Option<Value> {
        let (a, _, target) = self.target(p)?;
        let Target::Symbol { kind, name, .. } = &target else {
            return None;
        };
        let places = features::references(&a, *kind, name, declaration);
        let locations: Vec<Location> = places.iter().filter_map(|pl| location(&a, pl)).collect();
        serde_json::to_value(locations).ok()
    }

    fn prepare_rename(
        &mut self,
        p: &lsp_types::TextDocumentPositionParams,
    ) -> Result<Value, (ErrorCode, String)> {
        let Some((a, at, target)) = self.target(p) else {
            return Ok(Value::Null);
        };
        match &target {
            Target::Symbol { kind, name, span } if features::can_rename(&a, *kind, name) => {
                let (text, lines) = file_of(&a, at);
                let response = PrepareRenameResponse::Range(lines.range(text, *span));
                Ok(serde_json::to_value(response).unwrap_or(Value::Null))
            }
            _ => Err((
                ErrorCode::RequestFailed,
                "only a role, exit, type, memory, input, tool, provider or environment declared in this workflow can be renamed".into(),
            )),
        }
    }

    fn rename(&mut self, p: &lsp_types::RenameParams) -> Result<Value, (ErrorCode, String)> {
        let failed = |m: String| (ErrorCode::RequestFailed, m);
        let Some((a, _, target)) = self.target(&p.text_document_position) else {
            return Err(failed("nothing to rename here".into()));
        };
        let Target::Symbol { kind, name, .. } = &target else {
            return Err(failed("a field is renamed in its type".into()));
        };
        if !features::can_rename(&a, *kind, name) {
            return Err(failed(format!("`{name}` is not declared in this workflow")));
        }
        let edits = features::rename(&a, *kind, name);
        if let Some(problem) = features::rename_problem(&a, *kind, &p.new_name, &edits) {
            return Err(failed(problem));
        }
        let mut changes: HashMap<Url, Vec<TextEdit>> = HashMap::new();
        for (path, spans) in edits {
            let Some(uri) = self.uri(&path) else { continue };
            let Some((text, lines)) = text_of(&a, &path) else {
                continue;
            };
            changes.insert(
                uri,
                spans
                    .into_iter()
                    .map(|s| TextEdit::new(lines.range(text, s), p.new_name.clone()))
                    .collect(),
            );
        }
        let edit = WorkspaceEdit {
            changes: Some(changes),
            ..WorkspaceEdit::default()
        };
        Ok(serde_json::to_value(edit).unwrap_or(Value::Null))
    }

    fn uri(&self, path: &Path) -> Option<Url> {
        self.docs
            .get(path)
            .map(|d| d.uri.clone())
            .or_else(|| Url::from_file_path(path).ok())
    }

    fn completion(&mut self, p: &lsp_types::TextDocumentPositionParams) -> Option<Value> {
        let (a, at, offset) = self.locate(p)?;
        let names_from = self.parsed.get(&a.file.path).cloned().unwrap_or(a.clone());
        let names = super::complete::Names { a: &names_from };
        let items = match at {
            Where::Workflow => super::complete::workflow(a.text(), offset, &names),
            Where::Template(t) => super::complete::template(&a.templates()[t].text, offset, &names),
        };
        serde_json::to_value(CompletionResponse::Array(items)).ok()
    }

    fn symbols(&mut self, uri: &Url) -> Option<Value> {
        let a = self.analyses.get(&path_of(uri))?;
        let symbols = super::symbols::outline(&a.ast, a.text(), &a.lines);
        serde_json::to_value(DocumentSymbolResponse::Nested(symbols)).ok()
    }

    fn format(&mut self, uri: &Url) -> Option<Value> {
        let path = path_of(uri);
        let doc = self
            .docs
            .get(&path)
            .filter(|d| d.language == Language::Rondo)?;
        let file = SourceFile::new(&path, doc.text.as_str());
        match crate::fmt::format(&file) {
            Ok(formatted) if formatted == doc.text => {
                serde_json::to_value(Vec::<TextEdit>::new()).ok()
            }
            Ok(formatted) => {
                let lines = LineIndex::new(&doc.text);
                let whole = lines.range(&doc.text, Span::new(0, doc.text.len()));
                serde_json::to_value(vec![TextEdit::new(whole, formatted)]).ok()
            }
            Err(e) => {
                self.send(Notification::new(
                    notif::LogMessage::METHOD.to_string(),
                    lsp_types::LogMessageParams {
                        typ: lsp_types::MessageType::WARNING,
                        message: format!("{}: not formatted: {e}", path.display()),
                    },
                ));
                None
            }
        }
    }

    fn semantic_tokens(&mut self, uri: &Url) -> Option<Value> {
        let a = self.analyses.get(&path_of(uri))?;
        let w = &a.workflow;
        let exits: Vec<&str> = w
            .graph
            .node_indices()
            .filter(|&i| w.is_exit(i))
            .map(|i| w.node(i).name.as_str())
            .collect();
        let data = super::tokens::tokens(a.text(), &a.lines, a.index(), &exits);
        serde_json::to_value(SemanticTokensResult::Tokens(SemanticTokens {
            result_id: None,
            data,
        }))
        .ok()
    }
}

/// `.rondo` files below a folder (hidden folders and build output skipped), bounded.
fn find_workflows(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 4 || out.len() >= 500 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten().take(5000) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            if !name.starts_with('.') && !matches!(name.as_ref(), "target" | "node_modules") {
                find_workflows(&e.path(), depth + 1, out);
            }
        } else if kind.is_file() && name.ends_with(".rondo") {
            out.push(e.path());
        }
    }
}

fn file_of(a: &Analysis, at: Where) -> (&str, &LineIndex) {
    match at {
        Where::Workflow => (a.text(), &a.lines),
        Where::Template(t) => (&a.templates()[t].text, &a.templates()[t].lines),
    }
}

/// The text of a file of an analysis: the workflow or one of its templates.
fn text_of<'a>(a: &'a Analysis, path: &Path) -> Option<(&'a str, &'a LineIndex)> {
    if a.file.path == path {
        return Some((a.text(), &a.lines));
    }
    a.template(path).map(|t| (&*t.text, &t.lines))
}

fn location(a: &Analysis, place: &Place) -> Option<Location> {
    let uri = Url::from_file_path(&place.path).ok()?;
    let range = match text_of(a, &place.path) {
        Some((text, lines)) => lines.range(text, place.span),
        None => lsp_types::Range::default(),
    };
    Some(Location::new(uri, range))
}

fn severity(s: Severity) -> DiagnosticSeverity {
    match s {
        Severity::Error => DiagnosticSeverity::ERROR,
        Severity::Warning => DiagnosticSeverity::WARNING,
    }
}

fn message(d: &Diagnostic) -> String {
    match &d.help {
        Some(help) => format!("{}\nhelp: {help}", d.message),
        None => d.message.clone(),
    }
}

fn base(d: &Diagnostic, range: lsp_types::Range, message: String) -> lsp_types::Diagnostic {
    lsp_types::Diagnostic {
        range,
        severity: Some(severity(d.severity)),
        code: Some(NumberOrString::String(d.code.as_str().to_string())),
        source: Some("rondo".into()),
        message,
        ..lsp_types::Diagnostic::default()
    }
}

/// The diagnostics shown in the workflow file: each at its first label, the other labels
/// as related places; one reported in a template is also shown where the workflow names
/// the template, pointing there.
fn workflow_diagnostics(a: &Analysis) -> Vec<lsp_types::Diagnostic> {
    let (text, lines) = (a.text(), &a.lines);
    let uri = Url::from_file_path(&a.file.path).ok();
    let related = |label: &crate::diagnostics::Label| {
        Some(DiagnosticRelatedInformation {
            location: Location::new(uri.clone()?, lines.range(text, label.span)),
            message: label.text.clone(),
        })
    };
    a.diagnostics
        .iter()
        .filter(|d| d.external.is_none() || !d.labels.is_empty())
        .map(|d| {
            let mut msg = message(d);
            let mut info: Vec<DiagnosticRelatedInformation> = d
                .labels
                .iter()
                .filter(|l| !l.text.is_empty())
                .filter_map(related)
                .collect();
            if let Some(e) = &d.external {
                let t = LineIndex::new(&e.text);
                let pos = t.position(&e.text, e.span.start);
                msg = format!(
                    "{msg}\nin {}:{}:{}",
                    e.path.display(),
                    pos.line + 1,
                    pos.character + 1
                );
                if let Ok(u) = Url::from_file_path(&e.path) {
                    info.push(DiagnosticRelatedInformation {
                        location: Location::new(u, t.range(&e.text, e.span)),
                        message: e.label.clone(),
                    });
                }
            }
            let mut diag = base(d, lines.range(text, d.primary_span()), msg);
            diag.related_information = (!info.is_empty()).then_some(info);
            diag
        })
        .collect()
}

/// The diagnostics reported in templates, by template.
fn template_diagnostics(a: &Analysis) -> Vec<(PathBuf, lsp_types::Diagnostic)> {
    let uri = Url::from_file_path(&a.file.path).ok();
    a.diagnostics
        .iter()
        .filter_map(|d| {
            let e = d.external.as_ref()?;
            let t = LineIndex::new(&e.text);
            let path = normalize(&e.path);
            let mut info: Vec<DiagnosticRelatedInformation> = Vec::new();
            if let Ok(u) = Url::from_file_path(&path) {
                for l in &e.also {
                    info.push(DiagnosticRelatedInformation {
                        location: Location::new(u.clone(), t.range(&e.text, l.span)),
                        message: l.text.clone(),
                    });
                }
            }
            if let Some(u) = &uri {
                for l in &d.labels {
                    info.push(DiagnosticRelatedInformation {
                        location: Location::new(u.clone(), a.lines.range(a.text(), l.span)),
                        message: l.text.clone(),
                    });
                }
            }
            if let (Ok(u), false) = (Url::from_file_path(&path), e.label.is_empty()) {
                info.insert(
                    0,
                    DiagnosticRelatedInformation {
                        location: Location::new(u, t.range(&e.text, e.span)),
                        message: e.label.clone(),
                    },
                );
            }
            let mut diag = base(d, t.range(&e.text, e.span), message(d));
            diag.related_information = (!info.is_empty()).then_some(info);
            Some((path, diag))
        })
        .collect()
}
