use std::fmt;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rondo_config::yaml::{Fields, Pos, struct_fields};
use serde::{Deserialize, Serialize};

use crate::Capability;

/// How a tool is installed. Only pip is supported (as in the reference design).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum Installation {
    Pip,
}

impl Installation {
    /// The method a spec names (`pip`).
    pub fn parse(name: &str) -> Option<Installation> {
        (name.trim() == "pip").then_some(Installation::Pip)
    }
}

impl TryFrom<String> for Installation {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Installation::parse(&name).ok_or_else(|| {
            format!("unknown installation method `{name}` (only `pip` is supported)")
        })
    }
}

/// A tool that roles can call: how to install it and how to run it. The one tool model:
/// read from `config/tools/<name>.yaml` ([`ToolSpec::from_file`]) or built in code (a
/// workflow's `tool` block); either way [`ToolSpec::validate`] decides whether it is sound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    #[serde(default)]
    pub tool_name: String,
    /// Only used when there is no `source`: pip installs `<tool_name>==<version>`.
    #[serde(default)]
    pub version: Option<String>,
    /// A host folder copied to `/tools/<tool_name>`. Relative paths are resolved against the
    /// project root given to [`ToolSpec::from_file`].
    #[serde(default)]
    pub source: Option<PathBuf>,
    /// Where `source` is copied in a container (the reference's `target`; default
    /// `/tools/<tool_name>`), an absolute path.
    #[serde(default)]
    pub target: Option<String>,
    /// A shell script that installs the tool (the reference's `installation_script`), run
    /// in the tool's folder and environment after `pip` (if any); a template like
    /// `setup_script`.
    #[serde(default)]
    pub installation_script: Option<String>,
    /// A Python version ("3.11"): the tool gets its own virtual environment made with
    /// `python3.11 -m venv` (conda in the reference design).
    #[serde(default)]
    pub py_standalone: Option<String>,
    /// `None`: nothing to install; the executable is run as it is.
    #[serde(default)]
    pub installation: Option<Installation>,
    /// Shell script run after a successful install; may use `{{tool_name}}`, `{{tool_dir}}`,
    /// `{{env_dir}}`, `{{env_bin}}`, `{{env_python}}`, `{{version}}`, and nothing else.
    #[serde(default)]
    pub setup_script: Option<String>,
    /// How the tool is called, run through its environment with the arguments appended.
    #[serde(default)]
    pub executable: String,
    /// Appended to prompts.
    #[serde(default)]
    pub usage: String,
    /// How long a call may run (`30s`, `2m`, or a number of seconds).
    #[serde(default, with = "rondo_config::duration::serde::option")]
    pub timeout: Option<Duration>,
    /// Bytes of output kept per stream (head and tail) of a call (`4MB`, or a number).
    #[serde(default, with = "rondo_config::size::serde_option")]
    pub max_output: Option<u64>,
    /// A JSON-Schema-like object describing the tool's arguments.
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
    /// Processes a call may have at once, the tool included (local tools; default
    /// [`crate::DEFAULT_MAX_PROCESSES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<NonZeroU32>,
    /// In Docker, processes a call leaves running are kept until the environment ends
    /// (a session held between calls); otherwise they end with the call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_processes: bool,
    /// Capabilities a local tool keeps when `rondo` runs as root (`net_raw`,
    /// `CAP_NET_RAW`); without it, none at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Capability>>,
    /// Where the spec was written, for error messages. `None` for specs built in code.
    #[serde(skip)]
    pub origin: Option<SpecOrigin>,
}

/// The file a spec was written in and where each of its fields is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpecOrigin {
    pub file: PathBuf,
    pub fields: Fields,
}

impl SpecOrigin {
    fn position(&self, field: &str) -> Option<Pos> {
        self.fields.value(field)
    }
}

/// What is wrong with a spec; each kind is one rule of [`ToolSpec::validate`] (or of reading
/// the YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueKind {
    /// Not YAML, or a field of the wrong type.
    Yaml,
    UnknownField,
    NoName,
    BadName,
    NoExecutable,
    /// Something to install (`source`, `version`, `py_standalone`, `setup_script`) but no
    /// `installation`.
    NoInstallation,
    /// `installation: pip` with neither `source` nor `version`.
    NothingToInstall,
    SourceMissing,
    BadPython,
    ZeroTimeout,
    BadSchema,
    BadSetupScript,
    /// `target` not an absolute path without `..`.
    BadTarget,
}

/// One problem with one field of a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecIssue {
    pub kind: IssueKind,
    pub field: String,
    /// Where the field is written, when the spec came from a file.
    pub pos: Option<Pos>,
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

fn fmt_pos(pos: Option<Pos>) -> String {
    pos.map(|p| format!(":{p}")).unwrap_or_default()
}

fn fmt_invalid(file: Option<&Path>, tool: &str, issues: &[SpecIssue]) -> String {
    let file = file.map_or_else(
        || format!("tool `{tool}` (inline)"),
        |f| f.display().to_string(),
    );
    let lines: Vec<String> = issues
        .iter()
        .map(|i| match i.kind {
            IssueKind::Yaml => {
                format!("{file}{}: invalid tool spec: {}", fmt_pos(i.pos), i.message)
            }
            _ => format!(
                "{file}{}: field `{}` {}",
                fmt_pos(i.pos),
                i.field,
                i.message
            ),
        })
        .collect();
    lines.join("\n")
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
    /// A minimal spec built in code (nothing to install); set the other fields directly.
    pub fn new(tool_name: impl Into<String>, executable: impl Into<String>) -> Self {
        ToolSpec {
            tool_name: tool_name.into(),
            version: None,
            source: None,
            target: None,
            installation_script: None,
            py_standalone: None,
            installation: None,
            setup_script: None,
            executable: executable.into(),
            usage: String::new(),
            timeout: None,
            max_output: None,
            input_schema: None,
            max_processes: None,
            keep_processes: false,
            capabilities: None,
            origin: None,
        }
    }

    /// Whether the tool is installed into its environment before it runs.
    pub fn needs_install(&self) -> bool {
        self.installation.is_some() || self.installation_script.is_some()
    }

    /// Parse and validate a spec file. A relative `source` is resolved against `project_root`.
    pub fn from_file(path: &Path, project_root: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|e| SpecError::Read {
            file: path.to_path_buf(),
            source: e,
        })?;
        Self::from_yaml(&text, path, project_root)
    }

    /// Parse and validate spec text; `file` is only used in messages. Every problem is
    /// reported, each with its line and column.
    pub fn from_yaml(text: &str, file: &Path, project_root: &Path) -> Result<Self, SpecError> {
        let spec = Self::parse_yaml(text, file, project_root)?;
        spec.validate()?;
        Ok(spec)
    }

    /// [`ToolSpec::from_yaml`] without [`ToolSpec::validate`]: a spec of the right shape,
    /// sound or not, with the positions of its fields.
    pub fn parse_yaml(text: &str, file: &Path, project_root: &Path) -> Result<Self, SpecError> {
        let invalid = |issues| SpecError::Invalid {
            file: Some(file.to_path_buf()),
            tool: String::new(),
            issues,
        };
        let yaml_issue = |e: rondo_config::YamlError| SpecIssue {
            kind: IssueKind::Yaml,
            field: String::new(),
            pos: e.pos,
            message: e.message,
        };
        let fields: Fields =
            rondo_config::yaml::from_str(text).map_err(|e| invalid(vec![yaml_issue(e)]))?;
        let known = struct_fields::<ToolSpec>();
        let unknown: Vec<SpecIssue> = fields
            .unknown(known, &[])
            .map(|(f, _)| SpecIssue {
                kind: IssueKind::UnknownField,
                field: f.path.clone(),
                pos: Some(f.key),
                message: format!("is unknown (fields: {})", known.join(", ")),
            })
            .collect();
        if !unknown.is_empty() {
            return Err(invalid(unknown));
        }
        let mut spec: ToolSpec =
            rondo_config::yaml::from_str(text).map_err(|e| invalid(vec![yaml_issue(e)]))?;
        // The reference design's specs write `None` for an absent source or Python.
        for field in [&mut spec.py_standalone, &mut spec.version] {
            if field
                .as_deref()
                .is_some_and(|v| v.is_empty() || v == "None")
            {
                *field = None;
            }
        }
        spec.source = spec
            .source
            .filter(|s| !s.as_os_str().is_empty() && s.as_os_str() != "None")
            .map(|s| project_root.join(s));
        spec.origin = Some(SpecOrigin {
            file: file.to_path_buf(),
            fields,
        });
        Ok(spec)
    }

    /// Check the fields (and that `source` exists); every problem is reported at once.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut found = Vec::new();
        self.name_problems(&mut found);
        self.install_problems(&mut found);
        self.field_problems(&mut found);
        if found.is_empty() {
            return Ok(());
        }
        let mut issues: Vec<SpecIssue> = found
            .into_iter()
            .map(|(kind, field, message)| SpecIssue {
                kind,
                field: field.to_string(),
                pos: self.origin.as_ref().and_then(|o| o.position(field)),
                message,
            })
            .collect();
        issues.sort_by_key(|i| i.pos.map_or(u64::MAX, |p| p.line));
        Err(SpecError::Invalid {
            file: self.origin.as_ref().map(|o| o.file.clone()),
            tool: self.tool_name.clone(),
            issues,
        })
    }

    /// `tool_name` and `executable`.
    fn name_problems(&self, found: &mut Problems) {
        if self.tool_name.is_empty() {
            found.push((
                IssueKind::NoName,
                "tool_name",
                "is missing (every spec names its tool)".into(),
            ));
        } else if self.tool_name.starts_with('.')
            || !self
                .tool_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            found.push((
                IssueKind::BadName,
                "tool_name",
                format!(
                    "is `{}`, not a tool name (letters, digits, `-`, `_`, `.`)",
                    self.tool_name
                ),
            ));
        }
        if self.executable.trim().is_empty() {
            found.push((IssueKind::NoExecutable, "executable", "is empty".into()));
        }
    }

    /// What installs the tool: `installation`, and the fields it needs or that need it.
    fn install_problems(&self, found: &mut Problems) {
        let to_install = [
            ("source", self.source.is_some()),
            ("version", self.version.is_some()),
            ("py_standalone", self.py_standalone.is_some()),
            ("setup_script", self.setup_script.is_some()),
        ];
        match self.installation {
            // An installation script installs the tool its own way.
            None if self.installation_script.is_some() => {}
            None => {
                if let Some((field, _)) = to_install.iter().find(|(_, set)| *set) {
                    found.push((
                        IssueKind::NoInstallation,
                        "installation",
                        format!("is missing though the tool has a `{field}` to install"),
                    ));
                }
            }
            Some(Installation::Pip) => {
                if self.source.is_none()
                    && self.version.as_deref().is_none_or(|v| v.trim().is_empty())
                {
                    found.push((
                        IssueKind::NothingToInstall,
                        "installation",
                        "is `pip` but neither `source` nor `version` says what to install".into(),
                    ));
                }
            }
        }
    }

    /// The other fields, each on its own.
    fn field_problems(&self, found: &mut Problems) {
        if let Some(src) = &self.source
            && !src.is_dir()
        {
            found.push((
                IssueKind::SourceMissing,
                "source",
                format!("names `{}`, which is not a folder", src.display()),
            ));
        }
        if let Some(v) = &self.py_standalone
            && !is_python_version(v)
        {
            found.push((
                IssueKind::BadPython,
                "py_standalone",
                format!("is `{v}`, not a Python version (`3` or `3.N`, such as \"3.11\")"),
            ));
        }
        if self.timeout == Some(Duration::ZERO) {
            found.push((
                IssueKind::ZeroTimeout,
                "timeout",
                "must be more than 0".into(),
            ));
        }
        if let Some(schema) = &self.input_schema
            && !schema.is_object()
        {
            found.push((
                IssueKind::BadSchema,
                "input_schema",
                "must be a mapping (a JSON-Schema-like object)".into(),
            ));
        }
        for (field, script) in [
            ("setup_script", &self.setup_script),
            ("installation_script", &self.installation_script),
        ] {
            if let Some(script) = script
                && let Err(msg) = render_template(script, &|_| Some(String::new()))
            {
                found.push((
                    IssueKind::BadSetupScript,
                    field,
                    format!("is not a script the installer can render: {msg}"),
                ));
            }
        }
        if let Some(target) = &self.target
            && (!target.starts_with('/') || target.split('/').any(|p| p == ".."))
        {
            found.push((
                IssueKind::BadTarget,
                "target",
                format!("is `{target}`, not an absolute path in the container"),
            ));
        }
    }

    /// `path:line:column: field `x`` for messages about a field (install failures).
    pub fn locate(&self, field: &str) -> String {
        match &self.origin {
            Some(o) => format!(
                "{}{}: field `{field}`",
                o.file.display(),
                fmt_pos(o.position(field))
            ),
            None => format!("tool `{}` (inline): field `{field}`", self.tool_name),
        }
    }
}

impl fmt::Display for Installation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pip")
    }
}

/// Problems of a spec: what, in which field, and the message.
type Problems = Vec<(IssueKind, &'static str, String)>;

fn is_python_version(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() <= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        && parts[0] == "3"
}

/// The one renderer of `setup_script`: each `{{ name }}` is replaced by a variable of
/// [`TEMPLATE_VARS`]. Anything else between `{{` and `}}` (a filter, an expression), an
/// unclosed `{{`, or a `{%` block is an error, so a script is never run other than written.
pub(crate) fn render_template(
    template: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let line_of = |rest: &str| {
        template[..template.len() - rest.len()]
            .matches('\n')
            .count()
            + 1
    };
    if let Some(at) = template.find("{%") {
        return Err(format!(
            "line {} of the script: `{{%` blocks are not supported; a setup script only \
             substitutes `{{{{ name }}}}` ({})",
            line_of(&template[at..]),
            TEMPLATE_VARS.join(", ")
        ));
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            format!(
                "line {} of the script: unclosed `{{{{`",
                line_of(&rest[start..])
            )
        })?;
        let name = after[..end].trim();
        let value = TEMPLATE_VARS
            .contains(&name)
            .then(|| lookup(name))
            .flatten()
            .ok_or_else(|| {
                format!(
                    "line {} of the script: `{{{{ {name} }}}}` is not a template variable (known: {})",
                    line_of(&rest[start..]),
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
        // What a tera template would do differently is refused, never run as written.
        let e = render_template("echo\n{{ tool_dir | upper }}", &f).unwrap_err();
        assert!(e.starts_with("line 2 of the script"), "{e}");
        assert!(render_template("{% if version %}pip{% endif %}", &f).is_err());
        // Shell's own braces are left alone.
        assert_eq!(
            render_template("n=${#args[@]}; echo ${x%.py}", &f).unwrap(),
            "n=${#args[@]}; echo ${x%.py}"
        );
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
