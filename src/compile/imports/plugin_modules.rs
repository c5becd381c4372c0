//! `plugins_env` entries in a module form (`TOOLS_MODULES=pkg.tools`, micro-agent's Python
//! modules): an entry that names no file is given to the header's `plugins_modules` command,
//! which prints the tools of that module as tool specs (a JSON list); each joins the
//! workflow as a YAML spec does, with the same checks. Rondo knows nothing of Python: the
//! command does (workflows/micro_agent.rondo's is tools/micro_agent/plugins.py).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Place, resolve_executable};
use crate::compile::Compiler;
use crate::diagnostics::{Code, Diagnostic};
use crate::source::Span;
use crate::syntax::{Ast, ValueKind};

/// How long a listing may take, and the most it may print.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_LISTING: u64 = 1 << 20;
/// What of the command's standard error a diagnostic shows.
const MAX_SHOWN_ERROR: usize = 600;
/// Variables the command is given: none of the user's others (keys stay out of it).
const PASSED_ENV: &[&str] = &["PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "TMPDIR"];

/// `pkg.tools`: dotted names, each a letter or `_` then letters, digits or `_`.
pub(super) fn is_module_name(entry: &str) -> bool {
    // `tools.yaml` is a spec file, however it is spelt.
    let spec_file = [".yaml", ".yml"].iter().any(|x| entry.ends_with(x));
    !spec_file
        && entry.len() <= 200
        && entry.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

impl Compiler<'_> {
    /// The header's `plugins_modules = "COMMAND"`, its words resolved as a tool's
    /// executable is (a relative script path against the workflow's folder).
    pub(super) fn modules_command(&self, ast: &Ast) -> Option<String> {
        let attr = ast
            .workflow
            .as_ref()?
            .attrs
            .iter()
            .find(|a| a.key.name == "plugins_modules")?;
        match &attr.value.kind {
            ValueKind::String(command) if !command.trim().is_empty() => {
                Some(resolve_executable(command.trim(), &self.workflow.dir))
            }
            _ => None,
        }
    }

    /// The tools `module` gives, listed by `command`; `at` is the `plugins_env` value.
    /// Returns the ids of the tools added.
    pub(super) fn module_tools(
        &mut self,
        command: &str,
        module: &str,
        var: &str,
        at: Span,
    ) -> Vec<usize> {
        let cwd = std::env::current_dir().unwrap_or_default();
        let listing = match list(command, &cwd, module) {
            Ok(text) => text,
            Err(why) => {
                self.diags.push(
                    Diagnostic::error(
                        Code::ImportMissing,
                        format!("cannot load the tools of module `{module}`"),
                    )
                    .label(at, format!("{var} names it"))
                    .help(format!(
                        "`{command} {} {module}` said: {why}",
                        cwd.display()
                    )),
                );
                return Vec::new();
            }
        };
        let specs = match serde_json::from_str::<Value>(&listing) {
            Ok(Value::Array(specs)) => specs,
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        Code::ImportMissing,
                        format!("the tools of module `{module}` are not a JSON list of specs"),
                    )
                    .label(at, format!("{var} names it"))
                    .help(format!("`{command}` prints one JSON list of tool specs")),
                );
                return Vec::new();
            }
        };
        // Diagnostics of a spec point into its text, named after the module.
        let shown = Path::new(var).join(module);
        let mut ids = Vec::new();
        for spec in specs {
            let text: Arc<str> = spec.to_string().into();
            let file = Place::yaml(&shown, &text, Default::default(), at);
            if let Some(tool) = self.yaml_tool(&text, &file) {
                let before = self.workflow.tools.len();
                self.add_tool(tool);
                if self.workflow.tools.len() > before {
                    ids.push(before);
                }
            }
        }
        ids
    }
}

/// Runs `command ROOT MODULE` in `cwd` with a clean environment, bounded in time and in
/// what it prints; its standard output, or why it failed.
fn list(command: &str, cwd: &Path, module: &str) -> Result<String, String> {
    let mut words = command.split(' ').filter(|w| !w.is_empty());
    let program = words.next().ok_or("the command is empty")?;
    let mut cmd = Command::new(program);
    cmd.args(words)
        .arg(cwd)
        .arg(module)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in PASSED_ENV {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start it: {e}"))?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    // Read both pipes while waiting, so a chatty command cannot block on a full pipe.
    let out = std::thread::spawn(move || read_bounded(stdout, MAX_LISTING + 1));
    let err = std::thread::spawn(move || read_bounded(stderr, MAX_SHOWN_ERROR as u64 * 4));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < LIST_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {}s", LIST_TIMEOUT.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        let err: String = err.trim().chars().take(MAX_SHOWN_ERROR).collect();
        return Err(if err.is_empty() {
            status.to_string()
        } else {
            err
        });
    }
    if out.len() as u64 > MAX_LISTING {
        return Err(format!("it printed more than {MAX_LISTING} bytes"));
    }
    String::from_utf8(out).map_err(|_| "it printed text that is not UTF-8".to_string())
}

fn read_bounded(pipe: Option<impl Read>, max: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(pipe) = pipe {
        let mut limited = pipe.take(max);
        let _ = limited.read_to_end(&mut buf);
        // Drain the rest so the command never blocks writing it.
        let mut rest = limited.into_inner();
        let _ = std::io::copy(&mut rest, &mut std::io::sink());
    }
    buf
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_names_are_dotted_identifiers() {
        for ok in ["pkg.tools", "tools", "_p.t2"] {
            assert!(super::is_module_name(ok), "{ok}");
        }
        for bad in [
            "",
            "pkg..tools",
            "pkg/tools.yaml",
            "2pkg",
            "extra.yaml",
            "a.yml",
            "a-b",
        ] {
            assert!(!super::is_module_name(bad), "{bad}");
        }
    }
}
