use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::spec::render_template;
use super::{DEFAULT_WHEELHOUSE, ToolSpec};
use crate::{EnvError, Environment, ExecRequest, archive, shell_quote, truncate_for_prompt};

/// Where tools and their environments live inside an environment.
#[derive(Debug, Clone)]
pub(crate) struct ToolLayout {
    pub tools_root: String,
    pub envs_root: String,
    /// Interpreter used when a spec has no `py_standalone`.
    pub python: String,
    pub wheelhouse: String,
    /// Make a venv even without `py_standalone` (local installs never touch the host Python).
    pub always_venv: bool,
    pub install_timeout: Duration,
    /// The environment has `conda`: `py_standalone` tools get conda environments (found
    /// by [`install_all`] in containers, or read from a cached tool image's label).
    pub conda: bool,
}

impl ToolLayout {
    pub(crate) fn container(install_timeout: Duration) -> Self {
        ToolLayout {
            tools_root: "/tools".into(),
            envs_root: "/opt/envs".into(),
            python: "python3".into(),
            wheelhouse: DEFAULT_WHEELHOUSE.into(),
            always_venv: false,
            install_timeout,
            conda: false,
        }
    }
}

/// A tool ready to be called in an environment.
#[derive(Debug, Clone, PartialEq)]
pub struct InstalledTool {
    pub spec: ToolSpec,
    /// Where `source` was copied.
    pub tool_dir: String,
    /// The tool's own virtual environment, if it has one.
    pub env_dir: Option<String>,
    /// The Python the tool was installed with (`python` inside a conda environment).
    pub env_python: String,
    /// The conda environment (`conda create -n <tool_name>`) when the image has conda.
    pub conda_env: Option<String>,
}

impl InstalledTool {
    /// The request that calls the tool with `args` (each shell-quoted) through its
    /// environment, with the spec's timeout. Add a workdir, log path, etc. as needed.
    pub fn command<S: AsRef<str>>(&self, args: &[S]) -> ExecRequest {
        let mut line = match &self.conda_env {
            Some(env) => format!("conda run -n {} ", shell_quote(env)),
            None => self.env_prefix(),
        };
        line.push_str(&self.spec.executable);
        for a in args {
            line.push(' ');
            line.push_str(&shell_quote(a.as_ref()));
        }
        let mut req = ExecRequest::shell(line);
        req.timeout = self.spec.timeout;
        req.max_output = self
            .spec
            .max_output
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
        req
    }

    /// The equivalent of `conda run -n <env>`: the venv's bin first on PATH.
    fn env_prefix(&self) -> String {
        match &self.env_dir {
            Some(dir) => format!(
                "export VIRTUAL_ENV={q}; export PATH={qb}:\"$PATH\"; ",
                q = shell_quote(dir),
                qb = shell_quote(&format!("{dir}/bin"))
            ),
            None => String::new(),
        }
    }

    /// A shell line run inside the tool's environment.
    fn in_env(&self, line: &str) -> String {
        match &self.conda_env {
            Some(env) => format!(
                "conda run -n {} bash -c {}",
                shell_quote(env),
                shell_quote(line)
            ),
            None => format!("{}{line}", self.env_prefix()),
        }
    }

    fn var(&self, name: &str) -> Option<String> {
        // conda decides where an environment lives; `conda run` says it in CONDA_PREFIX.
        if self.conda_env.is_some() && (name == "env_dir" || name == "env_bin") {
            let bin = if name == "env_bin" { "/bin" } else { "" };
            return Some(format!("\"$CONDA_PREFIX\"{bin}"));
        }
        Some(match name {
            "tool_name" => self.spec.tool_name.clone(),
            "tool_dir" => self.tool_dir.clone(),
            "env_dir" => self.env_dir.clone().unwrap_or_default(),
            "env_bin" => self
                .env_dir
                .as_ref()
                .map(|d| format!("{d}/bin"))
                .unwrap_or_default(),
            "env_python" => self.env_python.clone(),
            "version" => self.spec.version.clone().unwrap_or_default(),
            _ => return None,
        })
    }
}

/// One install step that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub tool: String,
    pub step: String,
    pub log: PathBuf,
    pub exit_code: Option<i64>,
    pub duration: Duration,
}

/// The tools of an environment and how they got there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstalledTools {
    pub tools: Vec<InstalledTool>,
    /// Content hash of the specs, their sources and the base (image id or wheelhouse).
    pub hash: Option<String>,
    /// True when a previous install was reused and no step ran.
    pub cached: bool,
    /// Docker: the image the run container was created from (`rondo-tools:<hash>`).
    pub image: Option<String>,
    /// The steps that ran (empty when cached).
    pub steps: Vec<StepRecord>,
}

impl InstalledTools {
    pub fn get(&self, name: &str) -> Option<&InstalledTool> {
        self.tools.iter().find(|t| t.spec.tool_name == name)
    }
}

pub(crate) fn installed_paths(spec: &ToolSpec, layout: &ToolLayout) -> InstalledTool {
    let name = &spec.tool_name;
    let conda_env = (layout.conda && spec.needs_install() && spec.py_standalone.is_some())
        .then(|| name.clone());
    let env_dir = (conda_env.is_none()
        && spec.needs_install()
        && (spec.py_standalone.is_some() || layout.always_venv))
        .then(|| format!("{}/{name}", layout.envs_root));
    let env_python = match (&env_dir, &conda_env) {
        (Some(dir), _) => format!("{dir}/bin/python"),
        (None, Some(_)) => "python".into(),
        (None, None) => layout.python.clone(),
    };
    InstalledTool {
        spec: spec.clone(),
        // `target` is a container path; local installs keep their own folder.
        tool_dir: match (&spec.target, layout.always_venv) {
            (Some(target), false) => target.clone(),
            _ => format!("{}/{name}", layout.tools_root),
        },
        env_dir,
        env_python,
        conda_env,
    }
}

/// Content hash deciding whether a cached install can be reused.
pub(crate) fn tools_hash(specs: &[ToolSpec], base: &str) -> Result<String, EnvError> {
    let mut h = Sha256::new();
    h.update(b"rondo-tools-v1\0");
    h.update(base.as_bytes());
    let mut sorted: Vec<&ToolSpec> = specs.iter().collect();
    sorted.sort_by(|a, b| a.tool_name.cmp(&b.tool_name));
    for spec in sorted {
        let mut s = spec.clone();
        s.source = None; // the host path does not matter, the content does
        let json = serde_json::to_string(&s)
            .map_err(|e| EnvError::InvalidRequest(format!("cannot hash tool spec: {e}")))?;
        h.update(json.as_bytes());
        h.update([0]);
        if let Some(src) = &spec.source {
            archive::hash_tree(src, &mut h)?;
        }
    }
    Ok(hex::encode(h.finalize()))
}

const PIP_ENV: &[(&str, &str)] = &[
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ("PIP_NO_INPUT", "1"),
    // HOME is the run's workspace locally: no cache there.
    ("PIP_NO_CACHE_DIR", "1"),
    // Without py_standalone the tool goes into the image's own Python, which Debian marks
    // externally managed; the container is disposable, so that is allowed.
    ("PIP_BREAK_SYSTEM_PACKAGES", "1"),
];

struct Step {
    name: &'static str,
    field: &'static str,
    request: ExecRequest,
}

/// The steps of a tool's install, in order.
struct Steps {
    timeout: Duration,
    list: Vec<Step>,
}

impl Steps {
    /// A step running shell `line` (in `workdir`, else the default folder), with pip's
    /// offline settings; `field` is the spec's field it serves.
    fn push(
        &mut self,
        name: &'static str,
        field: &'static str,
        line: String,
        workdir: Option<&str>,
    ) {
        let mut req = ExecRequest::shell(line).timeout(self.timeout);
        for (k, v) in PIP_ENV {
            req = req.env(*k, *v);
        }
        req.workdir = workdir.map(str::to_string);
        self.list.push(Step {
            name,
            field,
            request: req,
        });
    }
}

fn steps_for(tool: &InstalledTool, layout: &ToolLayout) -> Result<Vec<Step>, EnvError> {
    let spec = &tool.spec;
    let mut steps = Steps {
        timeout: layout.install_timeout,
        list: Vec::new(),
    };
    env_steps(tool, layout, &mut steps);
    pip_steps(tool, layout, &mut steps);
    script_steps(tool, &mut steps)?;
    let program = spec
        .executable
        .split_whitespace()
        .next()
        .unwrap_or_default();
    steps.push(
        "check-executable",
        "executable",
        tool.in_env(&format!("command -v {}", shell_quote(program))),
        spec.source.is_some().then_some(tool.tool_dir.as_str()),
    );
    Ok(steps.list)
}

/// The tool's Python: inside a conda environment every step runs through
/// `conda run -n <env>`, where it is `python`.
fn tool_python(tool: &InstalledTool) -> String {
    if tool.conda_env.is_some() {
        "python".to_string()
    } else {
        shell_quote(&tool.env_python)
    }
}

/// A command that fails unless `py` is Python `want` (its first parts; any when empty).
fn version_check(py: &str, want: &str) -> String {
    format!(
        "{py} -c 'import sys; w = sys.argv[1]; v = \".\".join(map(str, sys.version_info[:len(w.split(\".\"))])); print(sys.executable, sys.version.split()[0]); sys.exit(0 if not w or v == w else \"python \" + v + \" != \" + w)' {w}",
        w = shell_quote(want)
    )
}

/// The steps that make the tool's own environment, a conda one or a venv, and check its
/// Python's version.
fn env_steps(tool: &InstalledTool, layout: &ToolLayout, steps: &mut Steps) {
    let spec = &tool.spec;
    let q = |s: &str| shell_quote(s);
    let py = tool_python(tool);
    if let Some(env) = &tool.conda_env {
        let want = spec.py_standalone.clone().unwrap_or_default();
        steps.push(
            "create-env",
            "py_standalone",
            format!(
                "conda create -n {} {} -y",
                q(env),
                q(&format!("python={want}"))
            ),
            None,
        );
        steps.push(
            "verify-env",
            "py_standalone",
            tool.in_env(&version_check(&py, &want)),
            None,
        );
    } else if let Some(dir) = &tool.env_dir {
        let base_python = match &spec.py_standalone {
            Some(v) if v == "3" => "python3".to_string(),
            Some(v) => format!("python{v}"),
            None => layout.python.clone(),
        };
        let field = if spec.py_standalone.is_some() {
            "py_standalone"
        } else {
            "installation"
        };
        steps.push(
            "create-env",
            field,
            format!(
                "command -v {bp} >/dev/null || {{ echo '{bp} not found: venv cannot provide another Python version' >&2; exit 127; }}\n\
                 {bp} -m venv {d}",
                bp = q(&base_python),
                d = q(dir)
            ),
            None,
        );
        let want = spec.py_standalone.clone().unwrap_or_default();
        steps.push("verify-env", field, version_check(&py, &want), None);
    }
}

/// The steps of `installation = "pip"`, offline from the wheelhouse: the tool's source
/// in place, or its released version. Without `installation` only the installation
/// script installs.
fn pip_steps(tool: &InstalledTool, layout: &ToolLayout, steps: &mut Steps) {
    let spec = &tool.spec;
    let py = tool_python(tool);
    let in_env = |line: String| {
        if tool.conda_env.is_some() {
            tool.in_env(&line)
        } else {
            line
        }
    };
    let wheels = shell_quote(&layout.wheelhouse);
    let pip = format!("{py} -m pip install --no-index --find-links {wheels}");
    let pip_install = spec.installation.is_some();
    if pip_install && spec.source.is_some() {
        // setuptools < 70 needs `wheel` to build; with --no-build-isolation it must be in
        // the target environment already.
        steps.push(
            "build-backend",
            "installation",
            in_env(format!(
                "{py} -c 'import setuptools, wheel' 2>/dev/null || {pip} setuptools wheel"
            )),
            None,
        );
        steps.push(
            "pip-install",
            "installation",
            in_env(format!("{pip} --no-build-isolation -e .")),
            Some(&tool.tool_dir),
        );
    } else if pip_install {
        let version = spec.version.as_deref().unwrap_or_default();
        steps.push(
            "pip-install",
            "installation",
            in_env(format!(
                "{pip} {}",
                shell_quote(&format!("{}=={version}", spec.tool_name))
            )),
            None,
        );
    }
}

/// The steps of the spec's `installation_script` and `setup_script`, rendered.
fn script_steps(tool: &InstalledTool, steps: &mut Steps) -> Result<(), EnvError> {
    let spec = &tool.spec;
    let workdir = spec.source.is_some().then_some(tool.tool_dir.as_str());
    let scripts = [
        (
            "installation-script",
            "installation_script",
            &spec.installation_script,
        ),
        ("setup-script", "setup_script", &spec.setup_script),
    ];
    for (name, field, script) in scripts {
        if let Some(script) = script {
            let rendered = render_template(script, &|n| tool.var(n))
                .map_err(|m| EnvError::InvalidRequest(format!("{}: {m}", spec.locate(field))))?;
            steps.push(name, field, tool.in_env(&rendered), workdir);
        }
    }
    Ok(())
}

/// Install `specs` into `env`, one log file per step in `log_dir`. Stops at the first
/// failing step with an error naming the spec file, field, step and log.
/// In a container, whether `conda` is there decides how `py_standalone` environments are
/// made (`layout.conda`); the answer is the `env-manager` step's log.
pub(crate) async fn install_all(
    env: &dyn Environment,
    specs: &[ToolSpec],
    layout: &mut ToolLayout,
    log_dir: &Path,
) -> Result<Vec<StepRecord>, EnvError> {
    for spec in specs {
        spec.validate()?;
    }
    std::fs::create_dir_all(log_dir).map_err(|e| EnvError::io(log_dir, e))?;
    let mut records = Vec::new();
    let standalone = specs
        .iter()
        .any(|s| s.needs_install() && s.py_standalone.is_some());
    if standalone && !layout.always_venv {
        let log = log_dir.join("env-manager.log");
        let probe = "if command -v conda >/dev/null 2>&1; then echo \"conda: $(command -v conda): py_standalone tools get conda environments (conda create -n <tool> python=<version> -y)\"; \
                     else echo 'no conda in this image: py_standalone tools get venvs (python<version> -m venv /opt/envs/<tool>)'; fi";
        let out = env
            .exec(
                ExecRequest::shell(probe)
                    .timeout(layout.install_timeout)
                    .log_path(&log),
            )
            .await?;
        layout.conda = out.stdout.starts_with("conda: ");
        records.push(StepRecord {
            tool: String::new(),
            step: "env-manager".into(),
            log,
            exit_code: out.exit_code,
            duration: out.duration,
        });
    }
    for spec in specs.iter().filter(|s| s.needs_install()) {
        let tool = installed_paths(spec, layout);
        let name = &spec.tool_name;
        let mut n = 0;
        let mut log_for = |step: &str| {
            n += 1;
            log_dir.join(format!("{name}-{n:02}-{step}.log"))
        };
        if let Some(src) = &spec.source {
            let log = log_for("copy-source");
            let started = std::time::Instant::now();
            env.copy_in(src, &tool.tool_dir).await?;
            let note = format!("copied {} -> {}\n", src.display(), tool.tool_dir);
            std::fs::write(&log, note).map_err(|e| EnvError::io(&log, e))?;
            records.push(StepRecord {
                tool: name.clone(),
                step: "copy-source".into(),
                log,
                exit_code: Some(0),
                duration: started.elapsed(),
            });
        }
        for step in steps_for(&tool, layout)? {
            let log = log_for(step.name);
            let out = env.exec(step.request.log_path(&log)).await?;
            records.push(StepRecord {
                tool: name.clone(),
                step: step.name.into(),
                log: log.clone(),
                exit_code: out.exit_code,
                duration: out.duration,
            });
            if !out.success() {
                let code = match (out.timed_out, out.exit_code) {
                    (true, _) => "timed out".to_string(),
                    (false, Some(c)) => c.to_string(),
                    (false, None) => "unknown".to_string(),
                };
                return Err(EnvError::Install(Box::new(crate::error::InstallFailure {
                    location: spec.locate(step.field),
                    tool: name.clone(),
                    step: step.name.into(),
                    exit_code: code,
                    log,
                    tail: truncate_for_prompt(out.merged.trim_end(), 0, 1500),
                })));
            }
        }
    }
    Ok(records)
}
