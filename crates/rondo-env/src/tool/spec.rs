use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

/// How a tool is installed. Only pip is supported (as in the reference design).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Installation {
    Pip,
}

/// A tool that roles can call: how to install it and how to run it.
///
/// Loaded from `config/tools/<name>.yaml` ([`ToolSpec::from_file`]) or built in code
/// (a workflow may declare a tool inline); either way call [`ToolSpec::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub tool_name: String,
    /// Only used when there is no `source`: pip installs `<tool_name>==<version>`.
    pub version: Option<String>,
    /// A host folder copied to `/tools/<tool_name>`. Relative paths are resolved against the
    /// project root given to [`ToolSpec::from_file`].
    pub source: Option<PathBuf>,
    /// A Python version ("3.11"): the tool gets its own virtual environment made with
    /// `python3.11 -m venv` (conda in the reference design).
    pub py_standalone: Option<String>,
    pub installation: Installation,
    /// Shell script run after a successful install; may use `{{tool_name}}`, `{{tool_dir}}`,
    /// `{{env_dir}}`, `{{env_bin}}`, `{{env_python}}`, `{{version}}`.
    pub setup_script: Option<String>,
    /// How the tool is called, run through its environment with the arguments appended.
    pub executable: String,
    /// Appended to prompts.
    pub usage: String,
    /// Seconds a call may run.
    pub timeout: Option<u64>,
    /// A JSON-Schema-like object describing the tool's arguments.
    pub input_schema: Option<serde_json::Value>,
    /// Where the spec came from, for error messages. `None` for specs built in code.
    #[serde(skip)]
    pub origin: Option<SpecOrigin>,
}

/// The spec file and the position of each field in it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpecOrigin {
    pub file: PathBuf,
    pub fields: Vec<(&'static str, u64, u64)>,
}

impl SpecOrigin {
    fn position(&self, field: &str) -> Option<(u64, u64)> {
        self.fields
            .iter()
            .find(|(f, _, _)| *f == field)
            .map(|&(_, l, c)| (l, c))
    }
}

/// One problem with one field of a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecIssue {
    pub field: &'static str,
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{}: cannot read tool spec: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}{}: invalid tool spec YAML: {message}", file.display(), fmt_pos(*line, *column))]
    Yaml {
        file: PathBuf,
        line: Option<u64>,
        column: Option<u64>,
        message: String,
    },
    #[error("{}", fmt_invalid(file.as_deref(), tool, issues))]
    Invalid {
        /// `None` for specs built in code.
        file: Option<PathBuf>,
        tool: String,
        issues: Vec<SpecIssue>,
    },
}

impl SpecError {
    /// The issues of an `Invalid` error (empty otherwise).
    pub fn issues(&self) -> &[SpecIssue] {
        match self {
            SpecError::Invalid { issues, .. } => issues,
            _ => &[],
        }
    }
}

fn fmt_pos(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

fn fmt_invalid(file: Option<&Path>, tool: &str, issues: &[SpecIssue]) -> String {
    let file = file.map_or_else(
        || format!("tool `{tool}` (inline)"),
        |f| f.display().to_string(),
    );
    let lines: Vec<String> = issues
        .iter()
        .map(|i| {
            format!(
                "{file}{}: field `{}`: {}",
                fmt_pos(i.line, i.column),
                i.field,
                i.message
            )
        })
        .collect();
    lines.join("\n")
}

/// The YAML shape, with positions for error messages.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    tool_name: Spanned<String>,
    #[serde(default)]
    version: Option<Spanned<String>>,
    #[serde(default)]
    source: Option<Spanned<String>>,
    #[serde(default)]
    py_standalone: Option<Spanned<String>>,
    installation: Spanned<String>,
    #[serde(default)]
    setup_script: Option<Spanned<String>>,
    executable: Spanned<String>,
    #[serde(default)]
    usage: Option<Spanned<String>>,
    #[serde(default)]
    timeout: Option<Spanned<u64>>,
    #[serde(default)]
    input_schema: Option<Spanned<serde_json::Value>>,
}

pub(crate) const TEMPLATE_VARS: &[&str] = &[
    "tool_name",
    "tool_dir",
    "env_dir",
    "env_bin",
    "env_python",
    "version",
];

impl ToolSpec {
    /// A minimal spec built in code; set the other fields directly.
    pub fn new(tool_name: impl Into<String>, executable: impl Into<String>) -> Self {
        ToolSpec {
            tool_name: tool_name.into(),
            version: None,
            source: None,
            py_standalone: None,
            installation: Installation::Pip,
            setup_script: None,
            executable: executable.into(),
            usage: String::new(),
            timeout: None,
            input_schema: None,
            origin: None,
        }
    }

    /// Parse and validate a spec file. A relative `source` is resolved against `project_root`.
    pub fn from_file(path: &Path, project_root: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|e| SpecError::Read {
            file: path.to_path_buf(),
            source: e,
        })?;
        Self::from_yaml(&text, path, project_root)
    }

    /// Parse and validate spec text; `file` is only used in messages.
    pub fn from_yaml(text: &str, file: &Path, project_root: &Path) -> Result<Self, SpecError> {
        let raw: RawSpec = serde_saphyr::from_str(text).map_err(|e| {
            let loc = e.location();
            SpecError::Yaml {
                file: file.to_path_buf(),
                line: loc.map(|l| l.line()),
                column: loc.map(|l| l.column()),
                message: e.to_string(),
            }
        })?;
        let mut origin = SpecOrigin {
            file: file.to_path_buf(),
            fields: Vec::new(),
        };
        let mut at = |field: &'static str, loc: &serde_saphyr::Location| {
            origin.fields.push((field, loc.line(), loc.column()));
        };
        at("tool_name", &raw.tool_name.referenced);
        at("installation", &raw.installation.referenced);
        at("executable", &raw.executable.referenced);
        let mut issues = Vec::new();
        let installation = match raw.installation.value.trim() {
            "pip" => Installation::Pip,
            other => {
                issues.push(SpecIssue {
                    field: "installation",
                    line: Some(raw.installation.referenced.line()),
                    column: Some(raw.installation.referenced.column()),
                    message: format!(
                        "unknown installation method `{other}` (only `pip` is supported)"
                    ),
                });
                Installation::Pip
            }
        };
        macro_rules! opt {
            ($field:ident) => {
                raw.$field.map(|s| {
                    at(stringify!($field), &s.referenced);
                    s.value
                })
            };
        }
        let version = opt!(version);
        let source = opt!(source).map(|s| {
            let p = PathBuf::from(s);
            if p.is_absolute() {
                p
            } else {
                project_root.join(p)
            }
        });
        let py_standalone = opt!(py_standalone);
        let setup_script = opt!(setup_script);
        let usage = opt!(usage).unwrap_or_default();
        let timeout = opt!(timeout);
        let input_schema = opt!(input_schema);
        let spec = ToolSpec {
            tool_name: raw.tool_name.value,
            version,
            source,
            py_standalone,
            installation,
            setup_script,
            executable: raw.executable.value,
            usage,
            timeout,
            input_schema,
            origin: Some(origin),
        };
        spec.check(issues)?;
        Ok(spec)
    }

    /// Check the fields (and that `source` exists); every problem is reported at once.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.check(Vec::new())
    }

    fn check(&self, mut issues: Vec<SpecIssue>) -> Result<(), SpecError> {
        let mut issue = |field: &'static str, message: String| {
            let pos = self.origin.as_ref().and_then(|o| o.position(field));
            issues.push(SpecIssue {
                field,
                line: pos.map(|p| p.0),
                column: pos.map(|p| p.1),
                message,
            });
        };
        let name_ok = !self.tool_name.is_empty()
            && self
                .tool_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !self.tool_name.starts_with('.');
        if !name_ok {
            issue(
                "tool_name",
                format!(
                    "`{}` is not a valid tool name (letters, digits, `-`, `_`, `.`)",
                    self.tool_name
                ),
            );
        }
        match &self.source {
            Some(src) if !src.is_dir() => issue(
                "source",
                format!("source folder {} does not exist", src.display()),
            ),
            None if self.version.as_deref().is_none_or(|v| v.trim().is_empty()) => issue(
                "version",
                "a version is required when there is no `source` (pip installs <tool_name>==<version>)"
                    .into(),
            ),
            _ => {}
        }
        if let Some(v) = &self.py_standalone
            && !is_python_version(v)
        {
            issue(
                "py_standalone",
                format!("`{v}` is not a Python version like \"3.11\" (quote it in YAML)"),
            );
        }
        if self.executable.trim().is_empty() {
            issue("executable", "must not be empty".into());
        }
        if self.timeout == Some(0) {
            issue("timeout", "must be at least 1 second".into());
        }
        if let Some(schema) = &self.input_schema
            && !schema.is_object()
        {
            issue(
                "input_schema",
                "must be a mapping (a JSON-Schema-like object)".into(),
            );
        }
        if let Some(script) = &self.setup_script
            && let Err(msg) = render_template(script, &|_| Some(String::new()))
        {
            issue("setup_script", msg);
        }
        if issues.is_empty() {
            Ok(())
        } else {
            issues.sort_by_key(|i| i.line.unwrap_or(u64::MAX));
            Err(SpecError::Invalid {
                file: self.origin.as_ref().map(|o| o.file.clone()),
                tool: self.tool_name.clone(),
                issues,
            })
        }
    }

    /// The call timeout, if the spec sets one.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout.map(Duration::from_secs)
    }

    /// `path:line:column: field `x`` for messages about a field (install failures).
    pub fn locate(&self, field: &str) -> String {
        match &self.origin {
            Some(o) => {
                let pos = o.position(field);
                format!(
                    "{}{}: field `{field}`",
                    o.file.display(),
                    fmt_pos(pos.map(|p| p.0), pos.map(|p| p.1))
                )
            }
            None => format!("tool `{}` (inline): field `{field}`", self.tool_name),
        }
    }
}

impl fmt::Display for Installation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pip")
    }
}

fn is_python_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() <= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        && parts[0] == "3"
}

/// Replace `{{ name }}` placeholders; an unknown name or an unclosed `{{` is an error.
pub(crate) fn render_template(
    template: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| "unclosed `{{` in template".to_string())?;
        let name = after[..end].trim();
        let value = TEMPLATE_VARS
            .contains(&name)
            .then(|| lookup(name))
            .flatten()
            .ok_or_else(|| {
                format!(
                    "unknown template variable `{{{{{name}}}}}` (known: {})",
                    TEMPLATE_VARS.join(", ")
                )
            })?;
        out.push_str(&value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Load and validate every `*.yaml`/`*.yml` spec in `dir`, sorted by file name.
/// All files are read; the errors of all invalid ones are returned together.
pub fn load_dir(dir: &Path, project_root: &Path) -> Result<Vec<ToolSpec>, Vec<SpecError>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            return Err(vec![SpecError::Read {
                file: dir.to_path_buf(),
                source: e,
            }]);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    paths.sort();
    let (mut specs, mut errors) = (Vec::new(), Vec::new());
    for p in paths {
        match ToolSpec::from_file(&p, project_root) {
            Ok(s) => specs.push(s),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_rendering() {
        let f = |n: &str| Some(format!("<{n}>"));
        assert_eq!(
            render_template("cd {{tool_dir}} && {{ env_python }} -V", &f).unwrap(),
            "cd <tool_dir> && <env_python> -V"
        );
        assert!(
            render_template("{{nope}}", &f)
                .unwrap_err()
                .contains("nope")
        );
        assert!(render_template("{{tool_dir", &f).is_err());
    }

    #[test]
    fn python_versions() {
        assert!(is_python_version("3.11"));
        assert!(is_python_version("3"));
        assert!(!is_python_version("3.11.2.1"));
        assert!(!is_python_version("python3"));
        assert!(!is_python_version("2.7"));
    }
}
