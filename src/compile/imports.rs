//! Providers, tools and environments: declared in the file or imported from YAML.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::attrs::Attrs;
use super::types::{Field, Type};
use super::workflow::{EnvKind, EnvSpec, ProviderSpec, ToolSpec};
use super::{Compiler, relative_to};
use crate::diagnostics::{Diagnostic, Diagnostics, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ast, ImportKind, ValueKind};

pub const PROVIDER_KINDS: &[&str] = &[
    "openai",
    "openai-compatible",
    "anthropic",
    "gemini",
    "ollama",
    "scripted",
];
const PROVIDER_KEYS: &[&str] = &[
    "kind",
    "model",
    "base_url",
    "base_url_env",
    "api_key_env",
    "temperature",
    "max_tokens",
    "timeout",
    "retry",
    "fallback",
    "price",
    "max_concurrency",
    "requests_per_minute",
    "circuit_breaker",
];
/// The fields of a YAML tool spec.
pub const TOOL_KEYS: &[&str] = TOOL_BLOCK_KEYS.split_at(TOOL_BLOCK_KEYS.len() - 1).0;

/// A `tool` block's keys: the YAML fields (`input_schema` is refused with its own
/// message), then `extra_fields`, which a YAML spec says with `additionalProperties`.
const TOOL_BLOCK_KEYS: &[&str] = &[
    "tool_name",
    "version",
    "source",
    "py_standalone",
    "installation",
    "setup_script",
    "executable",
    "usage",
    "timeout",
    "input_schema",
    "max_output",
    "extra_fields",
];

/// A provider profile before fallback names are resolved.
pub(super) struct PendingProvider {
    spec: ProviderSpec,
    fallback: Vec<(String, Span)>,
}

impl Compiler<'_> {
    pub(super) fn imports(&mut self, ast: &Ast) {
        let mut pending = Vec::new();
        for import in &ast.imports {
            let path = relative_to(&self.workflow.dir, &import.path);
            let text = match crate::source::read_regular(&path, crate::source::MAX_SOURCE_BYTES) {
                Ok(t) => t,
                Err(e) => {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::import::missing",
                            format!("cannot read `{}`", import.path),
                        )
                        .label(import.path_span, format!("{e}"))
                        .help(format!(
                            "looked for {}; paths are relative to the folder of this file",
                            path.display()
                        )),
                    );
                    continue;
                }
            };
            let yaml: Value = match serde_saphyr::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::import::bad_yaml",
                            format!("`{}` is not valid YAML", import.path),
                        )
                        .label(import.path_span, super::expr::first_line(&e.to_string()))
                        .help(format!("fix {}", path.display())),
                    );
                    continue;
                }
            };
            match import.kind {
                // The provider crate's own format (`profiles:`), parsed by the crate.
                ImportKind::Providers if yaml.get("profiles").is_some() => {
                    match rondo_provider::parse_profiles(&text) {
                        Ok(profiles) => pending.extend(
                            profiles
                                .into_iter()
                                .map(|p| from_profile(p, &path, import.path_span)),
                        ),
                        Err(e) => self.diags.push(
                            Diagnostic::error(
                                "rondo::import::bad_field",
                                format!("{}: {e}", path.display()),
                            )
                            .label(import.path_span, "imported here")
                            .help("see docs/providers.md for the profile fields"),
                        ),
                    }
                }
                ImportKind::Providers => {
                    pending.extend(self.yaml_providers(&yaml, &path, import.path_span))
                }
                ImportKind::Tool => {
                    if let Some(tool) = self.yaml_tool(&yaml, &path, import.path_span) {
                        self.add_tool(tool, import.path_span);
                    }
                }
            }
        }
        self.pending_providers = pending;
    }

    pub(super) fn providers(&mut self, ast: &Ast) {
        let mut pending = std::mem::take(&mut self.pending_providers);
        for decl in &ast.providers {
            let mut attrs = Attrs::new(
                &decl.attrs,
                PROVIDER_KEYS,
                format!("provider `{}`", decl.name.name),
            );
            let diags = &mut self.diags;
            let kind = attrs.string("kind", diags);
            let mut spec = ProviderSpec {
                name: decl.name.name.clone(),
                kind: kind.as_ref().map(|k| k.0.clone()).unwrap_or_default(),
                model: attrs.string("model", diags).map(|x| x.0),
                base_url: attrs.string("base_url", diags).map(|x| x.0),
                base_url_env: attrs.string("base_url_env", diags).map(|x| x.0),
                api_key_env: attrs.string("api_key_env", diags).map(|x| x.0),
                temperature: attrs.number("temperature", diags).map(|x| x.0),
                max_tokens: attrs.count("max_tokens", diags).map(|x| x.0),
                timeout_ms: attrs.duration_ms("timeout", diags).map(|x| x.0),
                retry: BTreeMap::new(),
                fallback: Vec::new(),
                price_input_per_1k: 0.0,
                price_output_per_1k: 0.0,
                max_concurrency: attrs.count("max_concurrency", diags).map(|x| x.0),
                requests_per_minute: attrs.count("requests_per_minute", diags).map(|x| x.0),
                circuit_breaker: attrs.count("circuit_breaker", diags).map(|x| x.0),
                span: decl.name.span,
                origin: None,
            };
            if let Some(retry) = attrs.block("retry", diags) {
                let mut r = Attrs::new(
                    retry,
                    &[
                        "max_attempts",
                        "initial_backoff",
                        "max_backoff",
                        "total_budget",
                    ],
                    "`retry`",
                );
                if let Some((n, _)) = r.count("max_attempts", diags) {
                    spec.retry.insert("max_attempts".into(), Value::from(n));
                }
                for key in ["initial_backoff", "max_backoff", "total_budget"] {
                    if let Some((ms, _)) = r.duration_ms(key, diags) {
                        spec.retry.insert(format!("{key}_ms"), Value::from(ms));
                    }
                }
                r.finish(diags);
            }
            if let Some(price) = attrs.block("price", diags) {
                let mut p = Attrs::new(price, &["input_per_1k", "output_per_1k"], "`price`");
                spec.price_input_per_1k = p.number("input_per_1k", diags).map_or(0.0, |x| x.0);
                spec.price_output_per_1k = p.number("output_per_1k", diags).map_or(0.0, |x| x.0);
                p.finish(diags);
            }
            let fallback = attrs
                .ident_list("fallback", diags)
                .into_iter()
                .map(|i| (i.name, i.span))
                .collect();
            attrs.finish(diags);
            match kind {
                None => self.diags.push(
                    Diagnostic::error(
                        "rondo::provider::no_kind",
                        format!("provider `{}` has no `kind`", decl.name.name),
                    )
                    .label(decl.name.span, "which API?")
                    .help(format!("kinds: {}", PROVIDER_KINDS.join(", "))),
                ),
                Some((k, span)) if !PROVIDER_KINDS.contains(&k.as_str()) => self.diags.push(
                    Diagnostic::error(
                        "rondo::provider::unknown_kind",
                        format!("unknown provider kind `{k}`"),
                    )
                    .label(span, "not a provider kind")
                    .help(
                        did_you_mean(&k, PROVIDER_KINDS.iter().copied())
                            .unwrap_or_else(|| format!("kinds: {}", PROVIDER_KINDS.join(", "))),
                    ),
                ),
                _ => {}
            }
            pending.push(PendingProvider { spec, fallback });
        }
        for p in &pending {
            if let Some(&id) = self.provider_names.get(&p.spec.name) {
                let first = self.workflow.providers[id].span;
                let name = syntax::Ident {
                    name: p.spec.name.clone(),
                    span: p.spec.span,
                };
                self.duplicate("provider", &name, Some(first));
                continue;
            }
            self.provider_names
                .insert(p.spec.name.clone(), self.workflow.providers.len());
            self.workflow.providers.push(p.spec.clone());
        }
        for p in pending {
            let Some(&id) = self.provider_names.get(&p.spec.name) else {
                continue;
            };
            let mut chain = Vec::new();
            for (name, span) in p.fallback {
                let ident = syntax::Ident { name, span };
                if let Some(f) = self.lookup_provider(&ident) {
                    if f == id {
                        self.diags.push(
                            Diagnostic::error(
                                "rondo::provider::self_fallback",
                                format!("provider `{}` falls back to itself", ident.name),
                            )
                            .label(span, "itself")
                            .help("a fallback names another profile"),
                        );
                    } else {
                        chain.push(f);
                    }
                }
            }
            self.workflow.providers[id].fallback = chain;
        }
    }

    fn yaml_providers(&mut self, yaml: &Value, path: &Path, at: Span) -> Vec<PendingProvider> {
        // Accepts `providers: {name: {...}}`, `{name: {...}}` or a list with `name` fields.
        let entries: Vec<(String, &Value)> = match yaml.get("providers").unwrap_or(yaml) {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(items) => items
                .iter()
                .map(|v| {
                    (
                        v.get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        v,
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut out = Vec::new();
        for (name, v) in entries {
            let Some(map) = v.as_object() else { continue };
            let field_error = |this: &mut Self, key: &str, what: &str| {
                this.diags.push(
                    Diagnostic::error(
                        "rondo::import::bad_field",
                        format!(
                            "{}: provider `{name}`: field `{key}` {what}",
                            path.display()
                        ),
                    )
                    .label(at, "imported here")
                    .help(format!("fix `{key}` of `{name}` in {}", path.display())),
                );
            };
            for key in map.keys() {
                if key != "name" && !PROVIDER_KEYS.contains(&key.as_str()) {
                    let help = did_you_mean(key, PROVIDER_KEYS.iter().copied());
                    field_error(
                        self,
                        key,
                        &format!(
                            "is not a provider setting{}",
                            help.map(|h| format!(" ({h})")).unwrap_or_default()
                        ),
                    );
                }
            }
            let s = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_string);
            let n = |k: &str| map.get(k).and_then(Value::as_f64);
            let kind = s("kind").unwrap_or_default();
            if !PROVIDER_KINDS.contains(&kind.as_str()) {
                field_error(
                    self,
                    "kind",
                    &format!("is `{kind}`, not one of {}", PROVIDER_KINDS.join(", ")),
                );
            }
            let mut retry = BTreeMap::new();
            if let Some(Value::Object(r)) = map.get("retry") {
                for (k, v) in r {
                    retry.insert(k.clone(), v.clone());
                }
            }
            let price = map.get("price");
            let price_of = |k: &str| {
                price
                    .and_then(|p| p.get(k))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
            };
            let spec = ProviderSpec {
                name: name.clone(),
                kind,
                model: s("model"),
                base_url: s("base_url"),
                base_url_env: s("base_url_env"),
                api_key_env: s("api_key_env"),
                temperature: n("temperature"),
                max_tokens: n("max_tokens").map(|x| x as u64),
                timeout_ms: map.get("timeout").and_then(duration_value),
                retry,
                fallback: Vec::new(),
                price_input_per_1k: price_of("input_per_1k"),
                price_output_per_1k: price_of("output_per_1k"),
                max_concurrency: n("max_concurrency").map(|x| x as u64),
                requests_per_minute: n("requests_per_minute").map(|x| x as u64),
                circuit_breaker: n("circuit_breaker").map(|x| x as u64),
                span: at,
                origin: Some(path.to_path_buf()),
            };
            let fallback = match map.get("fallback") {
                Some(Value::Array(items)) => items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|f| (f.to_string(), at))
                    .collect(),
                _ => Vec::new(),
            };
            out.push(PendingProvider { spec, fallback });
        }
        out
    }

    fn yaml_tool(&mut self, yaml: &Value, path: &Path, at: Span) -> Option<ToolSpec> {
        let Some(map) = yaml.as_object() else {
            self.diags.push(
                Diagnostic::error(
                    "rondo::import::bad_field",
                    format!("{}: a tool spec is a mapping of fields", path.display()),
                )
                .label(at, "imported here")
                .help(format!("fields: {}", TOOL_KEYS.join(", "))),
            );
            return None;
        };
        for key in map.keys() {
            if !TOOL_KEYS.contains(&key.as_str()) {
                let help = did_you_mean(key, TOOL_KEYS.iter().copied())
                    .unwrap_or_else(|| format!("fields: {}", TOOL_KEYS.join(", ")));
                self.diags.push(
                    Diagnostic::error(
                        "rondo::tool::unknown_field",
                        format!("{}: unknown field `{key}`", path.display()),
                    )
                    .label(at, "imported here")
                    .help(help),
                );
            }
        }
        let s = |k: &str| {
            map.get(k).and_then(|v| {
                v.as_str()
                    .map(str::to_string)
                    .or_else(|| v.as_f64().map(|f| f.to_string()))
            })
        };
        let Some(name) = s("tool_name") else {
            self.diags.push(
                Diagnostic::error(
                    "rondo::tool::no_name",
                    format!("{}: field `tool_name` is missing", path.display()),
                )
                .label(at, "imported here")
                .help("every tool spec names its tool: `tool_name: mytool`"),
            );
            return None;
        };
        let dir = spec_base_dir(path);
        let input = match map.get("input_schema") {
            Some(schema) => match schema_to_type(schema) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::tool::bad_schema",
                            format!("{}: field `input_schema`: {e}", path.display()),
                        )
                        .label(at, "imported here")
                        .help("use a JSON-Schema object: type, properties, required, enum, items"),
                    );
                    None
                }
            },
            None => None,
        };
        Some(ToolSpec {
            name,
            version: s("version"),
            source: s("source")
                .filter(|s| !s.is_empty() && s != "None")
                .map(|p| relative_to(&dir, &p)),
            py_standalone: s("py_standalone").filter(|s| !s.is_empty() && s != "None"),
            installation: s("installation"),
            setup_script: s("setup_script"),
            executable: resolve_executable(&s("executable").unwrap_or_default(), &dir),
            usage: s("usage").unwrap_or_default(),
            timeout_ms: map.get("timeout").and_then(duration_value),
            max_output: map.get("max_output").and_then(|v| match v {
                serde_json::Value::Number(n) => n.as_u64(),
                serde_json::Value::String(s) => super::attrs::parse_size(s),
                _ => None,
            }),
            input,
            // JSON Schema: an object is open unless it says otherwise.
            allow_extra_fields: map
                .get("input_schema")
                .and_then(|s| s.get("additionalProperties"))
                .is_none_or(|a| a != &Value::Bool(false)),
            span: at,
            origin: Some(path.to_path_buf()),
        })
    }

    fn add_tool(&mut self, tool: ToolSpec, span: Span) {
        if let Some(&id) = self.tool_names.get(&tool.name) {
            let first = self.workflow.tools[id].span;
            let name = syntax::Ident {
                name: tool.name,
                span,
            };
            self.duplicate("tool", &name, Some(first));
            return;
        }
        self.tool_names
            .insert(tool.name.clone(), self.workflow.tools.len());
        self.workflow.tools.push(tool);
    }

    pub(super) fn tools(&mut self, ast: &Ast) {
        for decl in &ast.tools {
            let mut attrs = Attrs::new(
                &decl.attrs,
                TOOL_BLOCK_KEYS,
                format!("tool `{}`", decl.name.name),
            );
            let diags = &mut self.diags;
            if let Some((n, span)) = attrs.string("tool_name", diags)
                && n != decl.name.name
            {
                diags.push(
                    Diagnostic::error(
                        "rondo::tool::name_mismatch",
                        format!(
                            "`tool_name` says `{n}` but the tool is declared as `{}`",
                            decl.name.name
                        ),
                    )
                    .label(span, "different name")
                    .help("drop `tool_name` in the file; the declaration names the tool"),
                );
            }
            let executable = attrs.string("executable", diags);
            let spec = ToolSpec {
                name: decl.name.name.clone(),
                version: attrs.string("version", diags).map(|x| x.0),
                source: attrs
                    .string("source", diags)
                    .map(|x| relative_to(&self.workflow.dir, &x.0)),
                py_standalone: attrs.string("py_standalone", diags).map(|x| x.0),
                installation: attrs.string("installation", diags).map(|x| x.0),
                setup_script: attrs.string("setup_script", diags).map(|x| x.0),
                executable: resolve_executable(
                    &executable.clone().map(|x| x.0).unwrap_or_default(),
                    &self.workflow.dir,
                ),
                usage: attrs
                    .string("usage", diags)
                    .map(|x| x.0)
                    .unwrap_or_default(),
                timeout_ms: attrs.duration_ms("timeout", diags).map(|x| x.0),
                max_output: attrs.bytes("max_output", diags).map(|x| x.0),
                input: None,
                allow_extra_fields: extra_fields(&mut attrs, diags),
                span: decl.name.span,
                origin: None,
            };
            if attrs.get("input_schema").is_some() {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::tool::schema_in_file",
                        "inside a .rondo file, write the argument schema as `input { ... }`",
                    )
                    .label(decl.name.span, "has `input_schema`")
                    .help(
                        "e.g. `input { expression: string }`; `input_schema` is the YAML spelling",
                    ),
                );
            }
            attrs.finish(&mut self.diags);
            // A missing `executable` is reported by the checker's tool rules (check/tools.rs).
            let mut spec = spec;
            spec.input = decl.input.as_ref().map(|t| self.resolve_type(t));
            self.add_tool(spec, decl.name.span);
        }
    }

    pub(super) fn environments(&mut self, ast: &Ast) {
        for decl in &ast.environments {
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
            let kind = match attrs.string("kind", diags) {
                Some((k, _)) if k == "docker" => EnvKind::Docker,
                Some((k, _)) if k == "local" => EnvKind::Local,
                Some((k, span)) => {
                    diags.push(
                        Diagnostic::error(
                            "rondo::environment::unknown_kind",
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
            };
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
                                        "rondo::attr::wrong_kind",
                                        "environment variables are strings",
                                    )
                                    .label(v.span, "not a string")
                                    .help("quote the value"),
                                ),
                            }
                        }
                    }
                    _ => diags.push(
                        Diagnostic::error("rondo::attr::wrong_kind", "`env` is a map")
                            .label(v.span, "not a map")
                            .help("write `env = { NAME = \"value\" }`"),
                    ),
                }
            }
            let image = attrs.string("image", diags).map(|x| x.0);
            let workdir = attrs.string("workdir", diags).map(|x| x.0);
            let network = attrs.string("network", diags).map(|x| x.0);
            let memory = attrs.string("memory", diags).map(|x| x.0);
            let cpus = attrs.number("cpus", diags).map(|x| x.0);
            let pids = attrs.count("pids", diags).map(|x| x.0);
            let tools = attrs.ident_list("tools", diags);
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
                for key in ["user", "read_only_root"] {
                    if let Some(v) = attrs.value(key) {
                        diags.push(
                            Diagnostic::error(
                                "rondo::environment::docker_only",
                                format!("`{key}` applies to Docker environments only"),
                            )
                            .label(v.span, "a local environment runs as the user running rondo")
                            .help("write `kind = \"docker\"` and an `image`, or remove it"),
                        );
                    }
                }
            }
            let mounts: Vec<(String, Span)> =
                attrs.string_list("mounts", diags).unwrap_or_default();
            for (text, span) in &mounts {
                check_mount(text, *span, diags);
            }
            let mounts = mounts.into_iter().map(|m| m.0).collect();
            attrs.finish(&mut self.diags);
            if kind == EnvKind::Docker && image.is_none() {
                self.diags.push(
                    Diagnostic::error("rondo::environment::no_image", format!("docker environment `{}` has no image", decl.name.name))
                        .label(decl.name.span, "which image?")
                        .help("write `image = \"rondo-test-base:latest\"` (built by scripts/build-test-image.sh)"),
                );
            }
            let tools = tools.iter().filter_map(|t| self.lookup_tool(t)).collect();
            if let Some(&id) = self.env_names.get(&decl.name.name) {
                let first = self.workflow.environments[id].span;
                self.duplicate("environment", &decl.name, Some(first));
                continue;
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
}

/// A mount must parse; a host folder is worth a warning; the Docker socket is refused.
fn check_mount(text: &str, span: Span, diags: &mut Diagnostics) {
    use super::mounts::{MountSource, parse_mount};
    match parse_mount(text) {
        Err(e) => diags.push(
            Diagnostic::error("rondo::environment::bad_mount", format!("mount `{text}`: {e}"))
                .label(span, "not a mount")
                .help("`dir:/container[:ro|:rw]` with `dir` inside the run's workspace, or `host:/abs/path:/container[:ro|:rw]`"),
        ),
        Ok(m) => {
            if let MountSource::Host(path) = &m.source {
                if let Some(why) = rondo_env::refused_mount(path) {
                    diags.push(
                        Diagnostic::error(
                            "rondo::environment::docker_socket",
                            format!("mount `{text}` can never be allowed"),
                        )
                        .label(span, why)
                        .help("a container that holds the Docker socket controls the host; give the tool what it needs through the workspace"),
                    );
                } else {
                    let mode = if m.writable { "read-write" } else { "read-only" };
                    diags.push(
                        Diagnostic::warning(
                            "rondo::environment::host_mount",
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

/// A profile from the provider crate's YAML format as a workflow provider.
fn from_profile(p: rondo_provider::ProviderProfile, path: &Path, at: Span) -> PendingProvider {
    let ms = |d: std::time::Duration| Value::from(d.as_millis() as u64);
    let mut retry = BTreeMap::new();
    retry.insert(
        "max_attempts".to_string(),
        Value::from(p.retry.max_attempts),
    );
    retry.insert(
        "initial_backoff_ms".to_string(),
        ms(p.retry.initial_backoff),
    );
    retry.insert("max_backoff_ms".to_string(), ms(p.retry.max_backoff));
    retry.insert("total_budget_ms".to_string(), ms(p.retry.total_budget));
    let kind = serde_json::to_value(p.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    PendingProvider {
        fallback: p.fallback.iter().map(|f| (f.clone(), at)).collect(),
        spec: ProviderSpec {
            name: p.name,
            kind,
            model: Some(p.model),
            base_url: p.base_url,
            base_url_env: None,
            api_key_env: p.api_key_env,
            temperature: p.temperature.map(f64::from),
            max_tokens: p.max_tokens.map(u64::from),
            timeout_ms: Some(p.timeout.as_millis() as u64),
            retry,
            fallback: Vec::new(),
            price_input_per_1k: p.price.map_or(0.0, |x| x.input_per_1k),
            price_output_per_1k: p.price.map_or(0.0, |x| x.output_per_1k),
            max_concurrency: p.max_concurrency.map(|n| n as u64),
            requests_per_minute: p.requests_per_minute.map(u64::from),
            circuit_breaker: p.circuit_breaker_threshold.map(u64::from),
            span: at,
            origin: Some(path.to_path_buf()),
        },
    }
}

fn duration_value(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_f64().map(|s| (s * 1000.0) as u64),
        Value::String(s) => {
            let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
            let n: u64 = digits.parse().ok()?;
            Some(match &s[digits.len()..] {
                "ms" => n,
                "" | "s" => n * 1000,
                "m" => n * 60_000,
                "h" => n * 3_600_000,
                _ => return None,
            })
        }
        _ => None,
    }
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
fn extra_fields(attrs: &mut Attrs, diags: &mut Diagnostics) -> bool {
    match attrs.string("extra_fields", diags) {
        None => false,
        Some((v, _)) if v == "reject" => false,
        Some((v, _)) if v == "allow" => true,
        Some((v, span)) => {
            diags.push(
                Diagnostic::error(
                    "rondo::tool::bad_extra_fields",
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

/// A workflow's provider as the provider crate's profile (what a run calls, and what
/// decides which key variable must be set).
pub fn provider_profile(
    workflow: &super::Workflow,
    spec: &ProviderSpec,
) -> Result<rondo_provider::ProviderProfile, String> {
    use rondo_provider::{Price, ProviderKind, ProviderProfile};
    let kind = match spec.kind.as_str() {
        "openai" => ProviderKind::OpenAi,
        "openai-compatible" => ProviderKind::OpenAiCompatible,
        "anthropic" => ProviderKind::Anthropic,
        "gemini" => ProviderKind::Gemini,
        "ollama" => ProviderKind::Ollama,
        "scripted" => ProviderKind::Scripted,
        other => return Err(format!("provider `{}`: unknown kind `{other}`", spec.name)),
    };
    let mut p = ProviderProfile::new(
        spec.name.clone(),
        kind,
        spec.model.clone().unwrap_or_default(),
    );
    p.base_url = spec
        .base_url_env
        .as_ref()
        .and_then(|v| std::env::var(v).ok())
        .filter(|v| !v.is_empty())
        .or_else(|| spec.base_url.clone());
    p.api_key_env = spec.api_key_env.clone().or(p.api_key_env);
    p.temperature = spec.temperature.map(|t| t as f32);
    p.max_tokens = spec.max_tokens.map(|t| t as u32);
    if let Some(ms) = spec.timeout_ms {
        p.timeout = std::time::Duration::from_millis(ms);
    }
    let ms = |k: &str| {
        spec.retry
            .get(k)
            .and_then(Value::as_u64)
            .map(std::time::Duration::from_millis)
    };
    if let Some(n) = spec.retry.get("max_attempts").and_then(Value::as_u64) {
        p.retry.max_attempts = n as u32;
    }
    if let Some(d) = ms("initial_backoff_ms") {
        p.retry.initial_backoff = d;
    }
    if let Some(d) = ms("max_backoff_ms") {
        p.retry.max_backoff = d;
    }
    if let Some(d) = ms("total_budget_ms") {
        p.retry.total_budget = d;
    }
    p.fallback = spec
        .fallback
        .iter()
        .map(|&id| workflow.providers[id].name.clone())
        .collect();
    if spec.price_input_per_1k > 0.0 || spec.price_output_per_1k > 0.0 {
        p.price = Some(Price {
            input_per_1k: spec.price_input_per_1k,
            output_per_1k: spec.price_output_per_1k,
        });
    }
    p.max_concurrency = spec.max_concurrency.map(|n| n as usize);
    p.requests_per_minute = spec.requests_per_minute.map(|n| n as u32);
    p.circuit_breaker_threshold = spec.circuit_breaker.map(|n| n as u32);
    Ok(p)
}
