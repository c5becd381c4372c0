//! Providers, tools and environments: declared in the file or imported from YAML.
//! Providers are the provider crate's profiles and tools the environment crate's specs,
//! checked by those crates' own validation; this file only says where each problem is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use rondo_config::yaml::{FieldPos, Fields, Pos, struct_fields};
use rondo_env::tool::{Installation, IssueKind, SpecIssue, SpecOrigin, ToolSpec};
use rondo_provider::{
    FileIssue, Price, PriceEnv, ProfileIssue, ProviderKind, ProviderProfile, RetryPolicy,
    StreamMode,
};
use serde_json::Value;

use super::attrs::Attrs;
use super::types::{Field, Type};
use super::workflow::{EnvKind, EnvSpec, Provider, Tool};
use super::{Compiler, relative_to};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, ExternalLabel, did_you_mean};
use crate::source::{SourceFile, Span};
use crate::syntax::{self, Ast, Attr, BlockDecl, ImportKind, ToolDecl, ValueKind};

mod plugin_modules;

/// The settings of a `provider` block: the profile's fields but its name.
static PROVIDER_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    struct_fields::<ProviderProfile>()
        .iter()
        .copied()
        .filter(|&f| f != "name")
        .collect()
});

/// A `tool` block's keys: the spec's fields (`input_schema` is refused with its own
/// message), then `extra_fields`, which a YAML spec says with `additionalProperties`.
static TOOL_BLOCK_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut keys = struct_fields::<ToolSpec>().to_vec();
    keys.push("extra_fields");
    keys
});

/// Where a provider's or a tool's fields are written: in the workflow, or in an imported
/// YAML file (reported there, with the import line shown in the workflow).
#[derive(Clone)]
pub(super) struct Place {
    fields: Fields,
    yaml: Option<YamlFile>,
    /// The declaration's name, or the import line.
    decl: Span,
}

#[derive(Clone)]
struct YamlFile {
    path: PathBuf,
    text: Arc<str>,
}

impl Place {
    fn workflow(fields: Fields, decl: Span) -> Self {
        Place {
            fields,
            yaml: None,
            decl,
        }
    }

    fn yaml(path: &Path, text: &Arc<str>, fields: Fields, import: Span) -> Self {
        Place {
            fields,
            yaml: Some(YamlFile {
                path: path.to_path_buf(),
                text: text.clone(),
            }),
            decl: import,
        }
    }

    /// `d` labelled at `pos` in this place's file (the declaration when there is none).
    fn at(&self, d: Diagnostic, pos: Option<Pos>, label: impl Into<String>) -> Diagnostic {
        let span = pos.map(|p| Span::new(p.offset, p.offset + p.len));
        match (&self.yaml, span) {
            (None, span) => d.label(span.unwrap_or(self.decl), label),
            (Some(y), Some(span)) => d
                .label(self.decl, "imported here")
                .external(ExternalLabel::new(&y.path, y.text.clone(), span, label)),
            (Some(_), None) => d.label(self.decl, label),
        }
    }

    /// `key = "value"` as written here (`key: value` in YAML).
    fn setting(&self, key: &str, value: &str) -> String {
        match self.yaml {
            None => format!("{key} = \"{value}\""),
            Some(_) => format!("{key}: {value}"),
        }
    }

    /// `d` labelled at the value of `field`.
    fn field(&self, d: Diagnostic, field: &str, label: impl Into<String>) -> Diagnostic {
        self.at(d, self.fields.value(field), label)
    }
}

/// Byte offsets of line starts, so positions of many attributes cost a search each.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Lines(starts)
    }

    fn pos(&self, file: &SourceFile, span: Span) -> Pos {
        let line = self.0.partition_point(|&s| s <= span.start).max(1);
        let start = self.0[line - 1];
        let column = file
            .text
            .get(start..span.start)
            .map_or(0, |t| t.chars().count())
            + 1;
        Pos {
            line: line as u64,
            column: column as u64,
            offset: span.start,
            len: span.len(),
        }
    }

    /// Where each attribute of a block is written (nested blocks as `retry.x`).
    fn fields(&self, file: &SourceFile, attrs: &[Attr]) -> Fields {
        let mut fields = Vec::new();
        let mut push = |path: String, attr: &Attr| {
            let items = match &attr.value.kind {
                ValueKind::List(items) => items.iter().map(|i| self.pos(file, i.span)).collect(),
                _ => Vec::new(),
            };
            fields.push(FieldPos {
                path,
                key: self.pos(file, attr.key.span),
                value: self.pos(file, attr.value.span),
                items,
            });
        };
        for attr in attrs {
            if let ValueKind::Block(inner) = &attr.value.kind {
                for a in inner {
                    push(format!("{}.{}", attr.key.name, a.key.name), a);
                }
            }
            push(attr.key.name.clone(), attr);
        }
        Fields { fields }
    }
}

/// A provider profile before fallback names are checked.
pub(super) struct PendingProvider {
    profile: ProviderProfile,
    place: Place,
}

impl Compiler<'_> {
    pub(super) fn imports(&mut self, ast: &Ast) {
        let mut pending = Vec::new();
        for import in &ast.imports {
            let path = relative_to(&self.workflow.dir, &import.path);
            let Some((text, file)) = self.read_yaml(
                &path,
                &import.path,
                import.path_span,
                "paths are relative to the folder of this file",
            ) else {
                continue;
            };
            match import.kind {
                ImportKind::Providers => pending.extend(self.yaml_providers(&text, &file)),
                ImportKind::Tool => {
                    if let Some(tool) = self.yaml_tool(&text, &file) {
                        self.add_tool(tool);
                    }
                }
            }
        }
        self.pending_providers = pending;
    }

    /// A YAML file named at `at` (`shown` as written there): its text and its place, or
    /// its diagnostic.
    fn read_yaml(
        &mut self,
        path: &Path,
        shown: &str,
        at: Span,
        where_from: &str,
    ) -> Option<(Arc<str>, Place)> {
        let text: Arc<str> =
            match crate::source::read_regular(path, crate::source::MAX_SOURCE_BYTES) {
                Ok(t) => t.into(),
                Err(e) => {
                    if let Some((text, span, label)) = e.bad_byte() {
                        self.diags.push(
                            Diagnostic::not_utf8(format_args!("`{shown}`"))
                                .label(at, "imported here")
                                .external(ExternalLabel::new(path, text.into(), span, label)),
                        );
                        return None;
                    }
                    self.diags.push(
                        Diagnostic::error(Code::ImportMissing, format!("cannot read `{shown}`"))
                            .label(at, format!("{e}"))
                            .help(format!("looked for {}; {where_from}", path.display())),
                    );
                    return None;
                }
            };
        let file = Place::yaml(path, &text, Fields::default(), at);
        if let Err(e) = rondo_config::yaml::from_str::<serde::de::IgnoredAny>(&text) {
            self.diags.push(
                file.at(
                    Diagnostic::error(Code::ImportBadYaml, format!("`{shown}` is not valid YAML")),
                    e.pos,
                    e.message,
                )
                .help(format!("fix {}", path.display())),
            );
            return None;
        }
        Some((text, file))
    }

    /// `plugins_env = "TOOLS_MODULES"` in the header: the tool specs that variable names
    /// (comma-separated files, or folders whose `.yaml` files are taken in name order;
    /// relative to the folder `rondo` starts in) join the workflow as `import tool` lines
    /// do, with the same checks. A role takes them by listing `plugins` in its `tools`.
    pub(super) fn plugin_tools(&mut self, ast: &Ast) {
        const MAX_FILES: usize = 256;
        let Some(attr) = ast
            .workflow
            .as_ref()
            .and_then(|w| w.attrs.iter().find(|a| a.key.name == "plugins_env"))
        else {
            return;
        };
        let ValueKind::String(var) = &attr.value.kind else {
            return;
        };
        let at = attr.value.span;
        let listed = std::env::var(var).unwrap_or_default();
        let modules_command = self.modules_command(ast);
        let mut files = Vec::new();
        let mut modules = Vec::new();
        for entry in listed.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let path = PathBuf::from(entry);
            if modules_command.is_some() && !path.exists() && plugin_modules::is_module_name(entry)
            {
                modules.push(entry.to_string());
            } else if path.is_dir() {
                let mut specs: Vec<_> = std::fs::read_dir(&path)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                    .take(MAX_FILES + 1)
                    .collect();
                specs.sort();
                files.extend(specs);
            } else {
                files.push(path);
            }
        }
        if files.len() + modules.len() > MAX_FILES {
            self.diags.push(
                Diagnostic::error(
                    Code::ToolTooManyPlugins,
                    format!("{var} names more than {MAX_FILES} tool specs"),
                )
                .label(at, format!("{var} is read here"))
                .help("name fewer files or folders"),
            );
            files.truncate(MAX_FILES);
            modules.truncate(MAX_FILES.saturating_sub(files.len()));
        }
        let mut ids = Vec::new();
        for path in files {
            let shown = path.display().to_string();
            // Executables beside the spec resolve wherever the run's workspace is.
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            let from = format!("{var} names it, relative to the folder rondo started in");
            let Some((text, file)) = self.read_yaml(&path, &shown, at, &from) else {
                continue;
            };
            if let Some(tool) = self.yaml_tool(&text, &file) {
                let before = self.workflow.tools.len();
                self.add_tool(tool);
                if self.workflow.tools.len() > before {
                    ids.push(before);
                }
            }
        }
        if let Some(command) = &modules_command {
            for module in &modules {
                ids.extend(self.module_tools(command, module, var, at));
            }
        }
        self.plugin_tools = Some(ids);
    }

    /// The profiles of a providers file (the provider crate's format).
    fn yaml_providers(&mut self, text: &str, file: &Place) -> Vec<PendingProvider> {
        let issues = match rondo_provider::read_profiles(text) {
            Ok(profiles) => {
                return profiles
                    .into_iter()
                    .map(|p| PendingProvider {
                        profile: p.profile,
                        place: Place {
                            fields: p.fields,
                            ..file.clone()
                        },
                    })
                    .collect();
            }
            Err(issues) => issues,
        };
        for issue in issues {
            let d = match issue {
                FileIssue::Yaml(e) => file
                    .at(
                        Diagnostic::error(
                            Code::ImportBadField,
                            format!("{}{}", file_prefix(file, e.pos), e.message),
                        ),
                        e.pos,
                        "here",
                    )
                    .help("see docs/providers.md for the profile fields"),
                FileIssue::UnknownField { field, known } => file
                    .at(
                        Diagnostic::error(
                            Code::ImportBadField,
                            format!("`{}` is not a provider setting", field.path),
                        ),
                        Some(field.key),
                        "unknown field",
                    )
                    .help(unknown_field_help(&field.path, known)),
            };
            self.diags.push(d);
        }
        Vec::new()
    }

    pub(super) fn providers(&mut self, ast: &Ast) {
        let mut pending = std::mem::take(&mut self.pending_providers);
        if !ast.providers.is_empty() {
            let lines = Lines::new(&self.file.text);
            for decl in &ast.providers {
                let p = self.dsl_provider(decl, &lines);
                pending.push(p);
            }
        }
        let mut registered = Vec::new();
        for p in pending {
            let name = &p.profile.name;
            if let Some(&id) = self.provider_names.get(name) {
                let first = self.workflow.providers[id].span;
                let mut d = p.place.field(
                    Diagnostic::error(
                        Code::NameDuplicate,
                        format!("provider `{name}` is declared twice"),
                    ),
                    "name",
                    "declared again here",
                );
                if !first.is_empty() && first != p.place.decl {
                    d = d.label(first, "first declared here");
                }
                self.diags
                    .push(d.help("names must be unique; rename one of them"));
                continue;
            }
            self.provider_names
                .insert(name.clone(), self.workflow.providers.len());
            self.workflow.providers.push(Provider {
                profile: p.profile.clone(),
                span: p.place.decl,
            });
            registered.push(p);
        }
        let known: BTreeSet<&str> = self.provider_names.keys().map(String::as_str).collect();
        let mut diags = Vec::new();
        for p in &registered {
            for issue in p.profile.validate(&known) {
                diags.push(profile_issue(&p.profile, &p.place, &issue, &known));
            }
        }
        for d in diags {
            self.diags.push(d);
        }
    }

    /// A `provider` block as the provider crate's profile.
    fn dsl_provider(&mut self, decl: &BlockDecl, lines: &Lines) -> PendingProvider {
        let fields = lines.fields(self.file, &decl.attrs);
        let place = Place::workflow(fields, decl.name.span);
        let mut attrs = Attrs::new(
            &decl.attrs,
            &PROVIDER_KEYS,
            format!("provider `{}`", decl.name.name),
        );
        let misspelled_kind = attrs.misspells(&["kind"]);
        let diags = &mut self.diags;
        let kind = provider_kind(&mut attrs, misspelled_kind, &decl.name, diags);
        // A provider whose kind is wrong still exists, so its users are not reported too;
        // the error above keeps the workflow from running.
        let mut p = ProviderProfile::new(
            decl.name.name.clone(),
            kind.unwrap_or(ProviderKind::Scripted),
            attrs
                .string("model", diags)
                .map(|x| x.0)
                .unwrap_or_default(),
        );
        p.model_env = attrs.string("model_env", diags).map(|x| x.0);
        p.base_url = attrs.string("base_url", diags).map(|x| x.0);
        p.base_url_env = attrs.string("base_url_env", diags).map(|x| x.0);
        p.api_key_env = attrs.string("api_key_env", diags).map(|x| x.0);
        p.temperature = attrs.number("temperature", diags).map(|x| x.0 as f32);
        let u32_max = u64::from(u32::MAX);
        p.max_tokens = attrs
            .count_max("max_tokens", u32_max, diags)
            .map(|x| x.0 as u32);
        if let Some((d, _)) = attrs.duration("timeout", diags) {
            p.timeout = d;
        }
        provider_blocks(&mut attrs, &mut p, diags);
        p.fallback = attrs
            .ident_list("fallback", diags)
            .into_iter()
            .map(|i| i.name)
            .collect();
        p.max_concurrency = attrs
            .count_max("max_concurrency", u32_max, diags)
            .map(|x| x.0 as usize);
        p.requests_per_minute = attrs
            .count_max("requests_per_minute", u32_max, diags)
            .map(|x| x.0 as u32);
        p.circuit_breaker_threshold = attrs
            .count_max("circuit_breaker_threshold", u32_max, diags)
            .map(|x| x.0 as u32);
        if let Some((d, _)) = attrs.duration("circuit_breaker_cooldown", diags) {
            p.circuit_breaker_cooldown = d;
        }
        if let Some(mode) = stream_mode(&mut attrs, diags) {
            p.stream = mode;
        }
        attrs.finish(diags);
        PendingProvider { profile: p, place }
    }

    /// A tool spec file, read and validated by the environment crate.
    fn yaml_tool(&mut self, text: &str, file: &Place) -> Option<Tool> {
        let path = file
            .yaml
            .as_ref()
            .map(|y| y.path.clone())
            .unwrap_or_default();
        let dir = spec_base_dir(&path);
        let mut spec = match ToolSpec::parse_yaml(text, &path, &dir) {
            Ok(spec) => spec,
            Err(e) => {
                for issue in e.issues() {
                    let d = tool_issue("", file, issue);
                    self.diags.push(d);
                }
                // The tool still exists, so its users are not reported too.
                let name = rondo_config::yaml::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| v.get("tool_name")?.as_str().map(str::to_string))?;
                return Some(Tool {
                    spec: ToolSpec::new(name, ""),
                    input: None,
                    allow_extra_fields: false,
                    span: file.decl,
                });
            }
        };
        let place = Place {
            fields: spec
                .origin
                .as_ref()
                .map(|o| o.fields.clone())
                .unwrap_or_default(),
            ..file.clone()
        };
        if let Err(e) = spec.validate() {
            for issue in e.issues() {
                let d = tool_issue(&spec.tool_name, &place, issue);
                self.diags.push(d);
            }
        }
        if spec.tool_name.is_empty() {
            return None;
        }
        spec.executable = resolve_executable(&spec.executable, &dir);
        let input = match spec.input_schema.as_ref().map(schema_to_type) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                let at = place.fields.get("input_schema").map(|f| f.key);
                self.diags.push(
                    place
                        .at(
                            Diagnostic::error(
                                Code::ToolBadSchema,
                                format!(
                                    "{}tool `{}`: field `input_schema`: {e}",
                                    file_prefix(&place, at),
                                    spec.tool_name
                                ),
                            ),
                            at,
                            "not a schema Rondo reads",
                        )
                        .help("use a JSON-Schema object: type, properties, required, enum, items"),
                );
                None
            }
        };
        // JSON Schema: an object is open unless it says otherwise.
        let allow_extra_fields = spec
            .input_schema
            .as_ref()
            .and_then(|s| s.get("additionalProperties"))
            .is_none_or(|a| a != &Value::Bool(false));
        Some(Tool {
            spec,
            input,
            allow_extra_fields,
            span: place.decl,
        })
    }

    fn add_tool(&mut self, tool: Tool) {
        if let Some(&id) = self.tool_names.get(tool.name()) {
            let first = self.workflow.tools[id].span;
            let name = syntax::Ident {
                name: tool.spec.tool_name,
                span: tool.span,
            };
            self.duplicate("tool", &name, Some(first));
            return;
        }
        self.tool_names
            .insert(tool.name().to_string(), self.workflow.tools.len());
        self.workflow.tools.push(tool);
    }

    pub(super) fn tools(&mut self, ast: &Ast) {
        if ast.tools.is_empty() {
            return;
        }
        let lines = Lines::new(&self.file.text);
        for decl in &ast.tools {
            let tool = self.dsl_tool(decl, &lines);
            self.add_tool(tool);
        }
    }

    /// A `tool` block as the environment crate's spec, validated by it.
    fn dsl_tool(&mut self, decl: &ToolDecl, lines: &Lines) -> Tool {
        let fields = lines.fields(self.file, &decl.attrs);
        let place = Place::workflow(fields.clone(), decl.name.span);
        let mut attrs = Attrs::new(
            &decl.attrs,
            &TOOL_BLOCK_KEYS,
            format!("tool `{}`", decl.name.name),
        );
        let diags = &mut self.diags;
        if let Some((n, span)) = attrs.string("tool_name", diags)
            && n != decl.name.name
        {
            diags.push(
                Diagnostic::error(
                    Code::ToolNameMismatch,
                    format!(
                        "`tool_name` says `{n}` but the tool is declared as `{}`",
                        decl.name.name
                    ),
                )
                .label(span, "different name")
                .help("drop `tool_name` in the file; the declaration names the tool"),
            );
        }
        let executable = attrs.string("executable", diags).map(|x| x.0);
        // `command = [..]` is how a tool role runs a program: written here for the
        // executable, it is one mistake, not also "no executable".
        let command_for_executable = executable.is_none()
            && attrs.get("command").is_some_and(|a| {
                diags.push(command_in_tool(a));
                true
            });
        let mut spec = ToolSpec::new(
            decl.name.name.clone(),
            resolve_executable(&executable.unwrap_or_default(), &self.workflow.dir),
        );
        spec.version = attrs.string("version", diags).map(|x| x.0);
        spec.source = attrs
            .string("source", diags)
            .map(|x| relative_to(&self.workflow.dir, &x.0));
        spec.py_standalone = attrs.string("py_standalone", diags).map(|x| x.0);
        let installation_ok = tool_installation(&mut attrs, &mut spec, &decl.name.name, diags);
        spec.setup_script = attrs.string("setup_script", diags).map(|x| x.0);
        spec.installation_script = attrs.string("installation_script", diags).map(|x| x.0);
        spec.target = attrs.string("target", diags).map(|x| x.0);
        spec.usage = attrs
            .string("usage", diags)
            .map(|x| x.0)
            .unwrap_or_default();
        spec.timeout = attrs.duration("timeout", diags).map(|x| x.0);
        spec.max_output = attrs.bytes("max_output", diags).map(|x| x.0);
        tool_processes(&mut attrs, &mut spec, diags);
        let allow_extra_fields = extra_fields(&mut attrs, diags);
        if attrs.get("input_schema").is_some() {
            diags.push(
                Diagnostic::error(
                    Code::ToolSchemaInFile,
                    "inside a .rondo file, write the argument schema as `input { ... }`",
                )
                .label(decl.name.span, "has `input_schema`")
                .help("e.g. `input { expression: string }`; `input_schema` is the YAML spelling"),
            );
        }
        attrs.finish(diags);
        spec.origin = Some(SpecOrigin {
            file: self.workflow.path.clone(),
            fields,
        });
        if let Err(e) = spec.validate() {
            for issue in e.issues() {
                // A wrong method is reported above; the rule about a missing one would repeat it.
                if issue.kind == IssueKind::NoInstallation && !installation_ok {
                    continue;
                }
                if issue.kind == IssueKind::NoExecutable && command_for_executable {
                    continue;
                }
                let d = tool_issue(&spec.tool_name, &place, issue);
                self.diags.push(d);
            }
        }
        let input = decl.input.as_ref().map(|t| self.resolve_type(t));
        Tool {
            spec,
            input,
            allow_extra_fields,
            span: decl.name.span,
        }
    }

    pub(super) fn environments(&mut self, ast: &Ast) {
        for decl in &ast.environments {
            self.environment(decl);
        }
    }

    fn environment(&mut self, decl: &BlockDecl) {
        let mut attrs = Attrs::new(
            &decl.attrs,
            &[
                "kind",
                "image",
                "workdir",
                "env",
                "network",
                "memory",
                "cpus",
                "pids",
                "tools",
                "mounts",
                "per_branch",
                "user",
                "read_only_root",
            ],
            format!("environment `{}`", decl.name.name),
        );
        let diags = &mut self.diags;
        let kind = env_kind(&mut attrs, diags);
        let env = env_vars(&mut attrs, diags);
        let image = attrs.string("image", diags).map(|x| x.0);
        let workdir = attrs.string("workdir", diags).map(|x| x.0);
        let network = attrs.string("network", diags).map(|x| x.0);
        let memory = attrs.bytes("memory", diags).map(|x| x.0);
        let cpus = attrs.number("cpus", diags).map(|x| x.0);
        let pids = attrs.count("pids", diags).map(|x| x.0);
        let (tools, inline) = env_tools(&mut attrs, diags);
        let per_branch = matches!(
            attrs.value("per_branch").map(|v| &v.kind),
            Some(ValueKind::Bool(true))
        );
        let user = attrs.string("user", diags).map(|x| x.0);
        let read_only_root = matches!(
            attrs.value("read_only_root").map(|v| &v.kind),
            Some(ValueKind::Bool(true))
        );
        if kind == EnvKind::Local {
            docker_only_keys(&mut attrs, diags);
        }
        let mounts: Vec<(String, Span)> = attrs.string_list("mounts", diags).unwrap_or_default();
        for (text, span) in &mounts {
            check_mount(text, *span, diags);
        }
        let mounts = mounts.into_iter().map(|m| m.0).collect();
        let misspelled_image = attrs.misspells(&["image"]);
        attrs.finish(&mut self.diags);
        if kind == EnvKind::Docker && image.is_none() && !misspelled_image {
            self.diags.push(
                Diagnostic::error(Code::EnvironmentNoImage, format!("docker environment `{}` has no image", decl.name.name))
                    .label(decl.name.span, "which image?")
                    .help("write `image = \"rondo-test-base:latest\"` (built by scripts/build-test-image.sh)"),
            );
        }
        if !inline.is_empty() {
            let lines = Lines::new(&self.file.text);
            for tool in &inline {
                let tool = self.dsl_tool(tool, &lines);
                self.add_tool(tool);
            }
        }
        let tools = tools.iter().filter_map(|t| self.lookup_tool(t)).collect();
        if let Some(&id) = self.env_names.get(&decl.name.name) {
            let first = self.workflow.environments[id].span;
            self.duplicate("environment", &decl.name, Some(first));
            return;
        }
        self.env_names
            .insert(decl.name.name.clone(), self.workflow.environments.len());
        self.workflow.environments.push(EnvSpec {
            name: decl.name.name.clone(),
            kind,
            image,
            workdir,
            env,
            network,
            memory,
            cpus,
            pids,
            tools,
            mounts,
            per_branch,
            user,
            read_only_root,
            span: decl.name.span,
        });
    }
}

/// An environment's `kind`: local unless it says `docker`.
fn env_kind(attrs: &mut Attrs, diags: &mut Diagnostics) -> EnvKind {
    match attrs.string("kind", diags) {
        Some((k, _)) if k == "docker" => EnvKind::Docker,
        Some((k, _)) if k == "local" => EnvKind::Local,
        Some((k, span)) => {
            diags.push(
                Diagnostic::error(
                    Code::EnvironmentUnknownKind,
                    format!("unknown environment kind `{k}`"),
                )
                .label(span, "not an environment kind")
                .help(
                    did_you_mean(&k, ["docker", "local"])
                        .unwrap_or_else(|| "kinds: docker, local".into()),
                ),
            );
            EnvKind::Local
        }
        None => EnvKind::Local,
    }
}

/// An environment's `env = { NAME = "value" }`.
fn env_vars(attrs: &mut Attrs, diags: &mut Diagnostics) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if let Some(v) = attrs.value("env") {
        match &v.kind {
            ValueKind::Map(entries) => {
                for (k, v) in entries {
                    match &v.kind {
                        ValueKind::String(s) => {
                            env.insert(k.name.clone(), s.clone());
                        }
                        ValueKind::Number(n) => {
                            env.insert(k.name.clone(), n.to_string());
                        }
                        _ => diags.push(
                            Diagnostic::error(
                                Code::AttrWrongKind,
                                "environment variables are strings",
                            )
                            .label(v.span, "not a string")
                            .help("quote the value"),
                        ),
                    }
                }
            }
            _ => diags.push(
                Diagnostic::error(Code::AttrWrongKind, "`env` is a map")
                    .label(v.span, "not a map")
                    .help("write `env = { NAME = \"value\" }`"),
            ),
        }
    }
    env
}

/// `tools = [pyfind, { name = "rdb", source = "...", command = "...", ... }]`: a name, or
/// an entry in the reference's fields, read like a `tool` block; the names, and the
/// entries as `tool` blocks.
fn env_tools(attrs: &mut Attrs, diags: &mut Diagnostics) -> (Vec<syntax::Ident>, Vec<ToolDecl>) {
    let mut inline: Vec<ToolDecl> = Vec::new();
    let tools: Vec<syntax::Ident> = match attrs.value("tools").map(|v| &v.kind) {
        Some(ValueKind::List(items))
            if items.iter().any(|i| matches!(i.kind, ValueKind::Map(_))) =>
        {
            let mut names = Vec::new();
            for item in items {
                match &item.kind {
                    ValueKind::Ident(s) | ValueKind::String(s) => names.push(syntax::Ident {
                        name: s.clone(),
                        span: item.span,
                    }),
                    ValueKind::Map(entries) => {
                        if let Some(decl) = inline_tool(entries, item.span, diags) {
                            names.push(decl.name.clone());
                            inline.push(decl);
                        }
                    }
                    _ => diags.push(
                        Diagnostic::error(Code::AttrWrongKind, "`tools` lists tool names or tool entries")
                            .label(item.span, "neither a name nor `{ name = ..., command = ... }`")
                            .help("write `tools = [pyfind, { name = \"rdb\", command = \"rdb\", usage = \"...\" }]`"),
                    ),
                }
            }
            names
        }
        _ => attrs.ident_list("tools", diags),
    };
    (tools, inline)
}

/// Keys a local environment cannot take.
fn docker_only_keys(attrs: &mut Attrs, diags: &mut Diagnostics) {
    for key in ["user", "read_only_root"] {
        if let Some(v) = attrs.value(key) {
            diags.push(
                Diagnostic::error(
                    Code::EnvironmentDockerOnly,
                    format!("`{key}` applies to Docker environments only"),
                )
                .label(v.span, "a local environment runs as the user running rondo")
                .help("write `kind = \"docker\"` and an `image`, or remove it"),
            );
        }
    }
}

/// A tool's `installation` into `spec`; false when it names no method there is.
fn tool_installation(
    attrs: &mut Attrs,
    spec: &mut ToolSpec,
    tool: &str,
    diags: &mut Diagnostics,
) -> bool {
    let mut installation_ok = true;
    if let Some((method, span)) = attrs.string("installation", diags) {
        spec.installation = Installation::parse(&method);
        if spec.installation.is_none() {
            installation_ok = false;
            diags.push(
                Diagnostic::error(
                    Code::ToolBadInstallation,
                    format!(
                        "tool `{}`: field `installation` is `{method}`; only `pip` is supported",
                        tool
                    ),
                )
                .label(span, "not an installation method")
                .help("write `installation = \"pip\"`, or leave it out for a tool that needs no install"),
            );
        }
    }
    installation_ok
}

/// A tool's `keep_processes`, `max_processes` and `capabilities` into `spec`.
fn tool_processes(attrs: &mut Attrs, spec: &mut ToolSpec, diags: &mut Diagnostics) {
    if let Some(value) = attrs.value("keep_processes") {
        match &value.kind {
            crate::syntax::ValueKind::Bool(b) => spec.keep_processes = *b,
            _ => diags.push(
                Diagnostic::error(Code::AttrWrongKind, "`keep_processes` is true or false")
                    .label(value.span, "not a boolean")
                    .help("true keeps what a call leaves running (in Docker) until the run ends"),
            ),
        }
    }
    if let Some((n, span)) = attrs.count_max("max_processes", u64::from(u32::MAX), diags) {
        spec.max_processes = std::num::NonZeroU32::new(n as u32);
        if spec.max_processes.is_none() {
            diags.push(
                Diagnostic::error(Code::AttrWrongKind, "`max_processes` is at least 1")
                    .label(span, "no process could start")
                    .help("the tool itself is one process; the default is 512"),
            );
        }
    }
    if let Some(names) = attrs.string_list("capabilities", diags) {
        let mut kept = Vec::new();
        for (name, span) in names {
            match rondo_env::Capability::parse(&name) {
                Some(c) => kept.push(c),
                None => diags.push(
                    Diagnostic::error(
                        Code::ToolBadCapability,
                        format!("`{name}` is not a Linux capability"),
                    )
                    .label(span, "unknown capability")
                    .help("a name from capabilities(7), such as \"net_raw\" or \"CAP_CHOWN\"; tools run with none unless listed here"),
                ),
            }
        }
        spec.capabilities = Some(kept);
    }
}

/// A provider's `kind` (none when it is missing or unknown, reported unless `misspelled`,
/// where the misspelling is).
fn provider_kind(
    attrs: &mut Attrs,
    misspelled: bool,
    name: &syntax::Ident,
    diags: &mut Diagnostics,
) -> Option<ProviderKind> {
    match attrs.string("kind", diags) {
        None if misspelled => None,
        None => {
            diags.push(
                Diagnostic::error(
                    Code::ProviderNoKind,
                    format!("provider `{}` has no `kind`", name.name),
                )
                .label(name.span, "which API?")
                .help(format!("kinds: {}", kind_names().join(", "))),
            );
            None
        }
        Some((k, span)) => {
            let kind = ProviderKind::parse(&k);
            if kind.is_none() {
                diags.push(
                    Diagnostic::error(
                        Code::ProviderUnknownKind,
                        format!("unknown provider kind `{k}`"),
                    )
                    .label(span, "not a provider kind")
                    .help(
                        did_you_mean(&k, kind_names())
                            .unwrap_or_else(|| format!("kinds: {}", kind_names().join(", "))),
                    ),
                );
            }
            kind
        }
    }
}

/// A provider's `retry`, `price` and `price_env` blocks.
fn provider_blocks(attrs: &mut Attrs, p: &mut ProviderProfile, diags: &mut Diagnostics) {
    let u32_max = u64::from(u32::MAX);
    if let Some(block) = attrs.block("retry", diags) {
        let mut r = Attrs::new(block, struct_fields::<RetryPolicy>(), "`retry`");
        if let Some((n, _)) = r.count_max("max_attempts", u32_max, diags) {
            p.retry.max_attempts = n as u32;
        }
        let durations = [
            ("initial_backoff", &mut p.retry.initial_backoff),
            ("max_backoff", &mut p.retry.max_backoff),
            ("total_budget", &mut p.retry.total_budget),
        ];
        for (key, slot) in durations {
            if let Some((d, _)) = r.duration(key, diags) {
                *slot = d;
            }
        }
        r.finish(diags);
    }
    if let Some(block) = attrs.block("price", diags) {
        let mut r = Attrs::new(block, struct_fields::<Price>(), "`price`");
        p.price = Some(Price {
            input_per_1k: r.number("input_per_1k", diags).map_or(0.0, |x| x.0),
            output_per_1k: r.number("output_per_1k", diags).map_or(0.0, |x| x.0),
        });
        r.finish(diags);
    }
    if let Some(block) = attrs.block("price_env", diags) {
        let mut r = Attrs::new(block, struct_fields::<PriceEnv>(), "`price_env`");
        p.price_env = Some(PriceEnv {
            input_per_1k: r.string("input_per_1k", diags).map(|x| x.0),
            output_per_1k: r.string("output_per_1k", diags).map(|x| x.0),
        });
        r.finish(diags);
    }
}

/// An `environment.tools` entry in the reference's fields (`name`, `source`, `target`,
/// `installation_script`, `command`, `usage`, or any field of a `tool` block) as a `tool`
/// block: `name` names it, `command` is its `executable`.
fn inline_tool(
    entries: &[(syntax::Ident, syntax::Value)],
    span: Span,
    diags: &mut Diagnostics,
) -> Option<ToolDecl> {
    let mut name = None;
    let mut attrs = Vec::new();
    for (key, value) in entries {
        match (key.name.as_str(), &value.kind) {
            ("name", ValueKind::String(n) | ValueKind::Ident(n)) => {
                name = Some(syntax::Ident {
                    name: n.clone(),
                    span: value.span,
                })
            }
            (k, _) => attrs.push(syntax::Attr {
                key: syntax::Ident {
                    name: if k == "command" {
                        "executable".into()
                    } else {
                        k.to_string()
                    },
                    span: key.span,
                },
                value: value.clone(),
                span: Span::new(key.span.start, value.span.end),
            }),
        }
    }
    let Some(name) = name else {
        diags.push(
            Diagnostic::error(Code::ToolNoName, "this tool entry has no `name`")
                .label(span, "which tool?")
                .help("write `name = \"mytool\"` in the entry"),
        );
        return None;
    };
    Some(ToolDecl {
        name,
        attrs,
        input: None,
        span,
    })
}

/// A mount must parse; a host folder is worth a warning; the Docker socket is refused.
fn check_mount(text: &str, span: Span, diags: &mut Diagnostics) {
    use super::mounts::{MountSource, parse_mount};
    match parse_mount(text) {
        Err(e) => diags.push(
            Diagnostic::error(Code::EnvironmentBadMount, format!("mount `{text}`: {e}"))
                .label(span, "not a mount")
                .help("`dir:/container[:ro|:rw][:replace]` with `dir` inside the run's workspace, or `host:/abs/path:/container[:ro|:rw][:replace]`"),
        ),
        Ok(m) => {
            if !m.replace
                && let Some(system) = super::mounts::hides_system(&m.container)
            {
                diags.push(
                    Diagnostic::error(
                        Code::EnvironmentHidesImage,
                        format!("mount `{text}` would hide the image's `{system}`"),
                    )
                    .label(span, format!("every image has `{system}`: the container would see this mount instead"))
                    .help("mount onto a path of your own (`/work`, `/data`), or end the mount with `:replace` to cover what the image has there on purpose"),
                );
            }
            if let MountSource::Host(path) = &m.source {
                if let Some(why) = rondo_env::refused_mount(path) {
                    diags.push(
                        Diagnostic::error(
                            Code::EnvironmentDockerSocket,
                            format!("mount `{text}` can never be allowed"),
                        )
                        .label(span, why)
                        .help("a container that holds the Docker socket controls the host; give the tool what it needs through the workspace"),
                    );
                } else {
                    let mode = if m.writable { "read-write" } else { "read-only" };
                    diags.push(
                        Diagnostic::warning(
                            Code::EnvironmentHostMount,
                            format!("mount `{text}` gives the container a host folder outside the run's workspace"),
                        )
                        .label(span, format!("{} is visible {mode} in the container", path.display()))
                        .help("the tool sees (and may keep) whatever this folder holds; mount a folder of the workspace instead when you can"),
                    );
                }
            }
        }
    }
}

fn kind_names() -> Vec<&'static str> {
    ProviderKind::ALL.iter().map(|k| k.as_str()).collect()
}

fn unknown_field_help(path: &str, known: &[&str]) -> String {
    let name = path.rsplit('.').next().unwrap_or(path);
    did_you_mean(name, known.iter().copied())
        .unwrap_or_else(|| format!("fields: {}", known.join(", ")))
}

/// `path: ` when a problem of a YAML file cannot be shown in it.
fn file_prefix(place: &Place, pos: Option<Pos>) -> String {
    match (&place.yaml, pos) {
        (Some(y), None) => format!("{}: ", y.path.display()),
        _ => String::new(),
    }
}

/// A problem the provider crate found with a profile, where it is written.
fn profile_issue(
    profile: &ProviderProfile,
    place: &Place,
    issue: &ProfileIssue,
    known: &BTreeSet<&str>,
) -> Diagnostic {
    let name = &profile.name;
    let fallback_at = |index: usize| place.fields.item("fallback", index);
    match issue {
        ProfileIssue::NoModel => place
            .field(
                Diagnostic::error(
                    Code::ProviderNoModel,
                    format!("provider `{name}` has no `model`"),
                ),
                "model",
                "which model?",
            )
            .help(format!(
                "name the model the {} API should run, e.g. `model = \"...\"`; only `scripted` needs none",
                profile.kind.as_str()
            )),
        ProfileIssue::Zero(field) => place
            .field(
                Diagnostic::error(
                    Code::ProviderZeroLimit,
                    format!("provider `{name}`: `{field}` must be at least 1"),
                ),
                field,
                "0",
            )
            .help(if *field == "retry.max_attempts" {
                "`max_attempts` counts the first attempt: 1 means no retry"
            } else {
                "leave the setting out for no limit"
            }),
        ProfileIssue::UnknownFallback { index, name: f } => place
            .at(
                Diagnostic::error(
                    Code::ProviderUnknown,
                    format!("unknown provider profile `{f}`"),
                ),
                fallback_at(*index),
                "not declared",
            )
            .help(did_you_mean(f, known.iter().copied()).unwrap_or_else(|| {
                "declare it with `provider NAME { ... }` or import a providers file".into()
            })),
        ProfileIssue::SelfFallback { index } => place
            .at(
                Diagnostic::error(
                    Code::ProviderSelfFallback,
                    format!("provider `{name}` falls back to itself"),
                ),
                fallback_at(*index),
                "itself",
            )
            .help("a fallback names another profile"),
    }
}

/// `command = [..]` in a `tool` declaration, whose program is its `executable`.
fn command_in_tool(attr: &crate::syntax::Attr) -> Diagnostic {
    let words: Option<Vec<&str>> = match &attr.value.kind {
        crate::syntax::ValueKind::List(items) => items
            .iter()
            .map(|v| match &v.kind {
                crate::syntax::ValueKind::String(s) => Some(s.as_str()),
                _ => None,
            })
            .collect(),
        crate::syntax::ValueKind::String(s) => Some(vec![s.as_str()]),
        _ => None,
    };
    let example = words
        .filter(|w| !w.is_empty() && w.iter().all(|w| !w.contains([' ', '"', '\\'])))
        .map_or_else(|| "python3 calc.py".to_string(), |w| w.join(" "));
    Diagnostic::error(
        Code::AttrUnknown,
        "a `tool` declaration names its program with `executable`, not `command`",
    )
    .label(attr.key.span, "write `executable` here")
    .help(format!(
        "write `executable = \"{example}\"` (the program and its first words; a call's arguments are appended); `command = [..]` is how a tool role runs a program"
    ))
}

/// A problem the environment crate found with a tool spec, where it is written.
fn tool_issue(tool: &str, place: &Place, issue: &SpecIssue) -> Diagnostic {
    let (code, label, help): (Code, &str, String) = match issue.kind {
        IssueKind::Yaml => (
            Code::ImportBadField,
            "here",
            "see docs/tools.md for the spec fields".into(),
        ),
        IssueKind::UnknownField => (
            Code::ToolUnknownField,
            "unknown field",
            unknown_field_help(&issue.field, struct_fields::<ToolSpec>()),
        ),
        IssueKind::NoName => (
            Code::ToolNoName,
            "no `tool_name`",
            "every tool spec names its tool: `tool_name: mytool`".into(),
        ),
        IssueKind::BadName => (
            Code::ImportBadField,
            "not a tool name",
            "a tool name has letters, digits, `-`, `_` and `.`".into(),
        ),
        IssueKind::BadTarget => (
            Code::ImportBadField,
            "not an absolute container path",
            "write where the source goes in the container, e.g. `/tools/mytool`".into(),
        ),
        IssueKind::NoExecutable => (
            Code::ToolNoExecutable,
            "no executable",
            format!(
                "say how the tool is called, e.g. `{}`",
                place.setting("executable", "pyfind")
            ),
        ),
        IssueKind::NoInstallation => (
            Code::ToolNoInstallation,
            "no installation",
            format!("write `{}`", place.setting("installation", "pip")),
        ),
        IssueKind::NothingToInstall => (
            Code::ToolPipWithoutPackage,
            "nothing to install",
            "set `source` (installs `-e .` from it) or `version` (installs `<tool_name>==<version>`)"
                .into(),
        ),
        IssueKind::SourceMissing => (
            Code::ToolSourceMissing,
            "not a folder",
            "`source` is a folder on the host, copied to /tools/<tool_name> in the container; paths are relative to the file that declares the tool".into(),
        ),
        IssueKind::BadPython => (
            Code::ToolBadPython,
            "not a Python version",
            "write a version such as \"3.11\", or leave it out".into(),
        ),
        IssueKind::ZeroTimeout => (
            Code::ToolZeroTimeout,
            "no time to run",
            "give calls time to run, e.g. `timeout = 30s`, or leave it out".into(),
        ),
        IssueKind::BadSchema => (
            Code::ToolBadSchema,
            "not a mapping",
            "use a JSON-Schema object: type, properties, required, enum, items".into(),
        ),
        IssueKind::BadSetupScript => (
            Code::ToolBadSetupScript,
            "not a setup script the installer can render",
            "a setup script substitutes {{ tool_name }}, {{ tool_dir }}, {{ env_dir }}, {{ env_bin }}, {{ env_python }} and {{ version }}, and nothing else".into(),
        ),
    };
    let prefix = file_prefix(place, issue.pos);
    let message = match issue.kind {
        IssueKind::Yaml => format!("{prefix}{}", issue.message),
        IssueKind::UnknownField => format!("{prefix}unknown field `{}`", issue.field),
        _ if tool.is_empty() => format!("{prefix}field `{}` {}", issue.field, issue.message),
        _ => format!(
            "{prefix}tool `{tool}`: field `{}` {}",
            issue.field, issue.message
        ),
    };
    place
        .at(Diagnostic::error(code, message), issue.pos, label)
        .help(help)
}

/// A JSON-Schema subset (as CatMaster and micro-agent write them) as a Rondo type.
pub fn schema_to_type(schema: &Value) -> Result<Type, String> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let members: Vec<Type> = values
            .iter()
            .map(|v| {
                v.as_str()
                    .map(|s| Type::Literal {
                        value: s.to_string(),
                    })
                    .ok_or("only string enums are supported")
            })
            .collect::<Result<_, _>>()?;
        return Ok(Type::Union { members });
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("any");
    Ok(match ty {
        "string" => Type::String,
        "integer" => Type::Int,
        "number" => Type::Float,
        "boolean" => Type::Bool,
        "null" => Type::Null,
        "array" => Type::list(match schema.get("items") {
            Some(items) => schema_to_type(items)?,
            None => Type::Any,
        }),
        "object" => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match schema.get("properties").and_then(Value::as_object) {
                Some(props) => Type::Object {
                    fields: props
                        .iter()
                        .map(|(name, s)| {
                            let t = schema_to_type(s)?;
                            Ok(Field {
                                name: name.clone(),
                                ty: if required.contains(&name.as_str()) {
                                    t
                                } else {
                                    Type::optional(t)
                                },
                            })
                        })
                        .collect::<Result<_, String>>()?,
                    extra: Default::default(),
                },
                None => Type::Map {
                    value: Box::new(Type::Any),
                },
            }
        }
        "any" => Type::Any,
        other => return Err(format!("unknown schema type `{other}`")),
    })
}

/// Paths in a tool spec file are relative to its folder, except for specs kept in a
/// project's `config/tools/`, whose paths are relative to the project root.
fn spec_base_dir(path: &Path) -> std::path::PathBuf {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let is_config_tools = dir.file_name().is_some_and(|n| n == "tools")
        && dir
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "config");
    match dir.parent().and_then(Path::parent) {
        Some(root) if is_config_tools => root.to_path_buf(),
        _ => dir,
    }
}

/// Words of `executable` that name an existing file relative to `dir` become absolute,
/// so a tool runs the same from any working directory (the run directory).
pub fn resolve_executable(executable: &str, dir: &Path) -> String {
    executable
        .split(' ')
        .map(|word| {
            let candidate = dir.join(word);
            if word.contains('/') && !word.starts_with('/') && candidate.is_file() {
                std::fs::canonicalize(&candidate)
                    .map_or_else(|_| word.to_string(), |p| p.display().to_string())
            } else {
                word.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `extra_fields = "reject" | "allow"` (default `reject`: the schema shown for an `input`
/// block admits no other field, and the check holds calls to it).
/// `stream = auto | true | false`.
fn stream_mode(attrs: &mut Attrs, diags: &mut Diagnostics) -> Option<StreamMode> {
    let value = attrs.value("stream")?;
    let written = match &value.kind {
        ValueKind::Bool(b) => {
            return Some(if *b {
                StreamMode::Always
            } else {
                StreamMode::Never
            });
        }
        ValueKind::Ident(s) | ValueKind::String(s) => s.clone(),
        _ => String::new(),
    };
    if let Some(mode) = StreamMode::parse(&written) {
        return Some(mode);
    }
    diags.push(
        Diagnostic::error(
            Code::ProviderBadStream,
            "`stream` is auto, true or false".to_string(),
        )
        .label(value.span, "not a choice")
        .help(
            did_you_mean(&written, StreamMode::NAMES).unwrap_or_else(|| {
                "auto: stream when a person watches; true: always; false: never".into()
            }),
        ),
    );
    None
}

fn extra_fields(attrs: &mut Attrs, diags: &mut Diagnostics) -> bool {
    match attrs.string("extra_fields", diags) {
        None => false,
        Some((v, _)) if v == "reject" => false,
        Some((v, _)) if v == "allow" => true,
        Some((v, span)) => {
            diags.push(
                Diagnostic::error(
                    Code::ToolBadExtraFields,
                    format!("`extra_fields` is \"reject\" or \"allow\", not {v:?}"),
                )
                .label(span, "not a choice")
                .help(
                    did_you_mean(&v, ["reject", "allow"]).unwrap_or_else(|| {
                        "\"reject\": a call with a field `input` does not declare is a validation error; \"allow\": such fields are passed on".into()
                    }),
                ),
            );
            false
        }
    }
}
