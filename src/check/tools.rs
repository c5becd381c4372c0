//! Tool specs against the install rules of the LLM-IDE reference ("Tools").

use crate::compile::{ToolSpec, Workflow};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

pub fn check(workflow: &Workflow, diags: &mut Diagnostics) {
    for tool in &workflow.tools {
        check_tool(tool, diags);
    }
}

fn field_error(
    tool: &ToolSpec,
    code: Code,
    field: &str,
    problem: String,
    help: &str,
) -> Diagnostic {
    let origin = tool
        .origin
        .as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default();
    Diagnostic::error(
        code,
        format!("{origin}tool `{}`: field `{field}` {problem}", tool.name),
    )
    .label(
        tool.span,
        if tool.origin.is_some() {
            "imported here"
        } else {
            "declared here"
        },
    )
    .help(help.to_string())
}

pub fn check_tool(tool: &ToolSpec, diags: &mut Diagnostics) {
    if let Some(installation) = &tool.installation
        && installation != "pip"
    {
        diags.push(field_error(
            tool,
            Code::ToolBadInstallation,
            "installation",
            format!("is `{installation}`; only `pip` is supported"),
            "write `installation: pip`, or leave it out for a tool that needs no install",
        ));
    }
    if let Some(source) = &tool.source
        && !source.is_dir()
    {
        diags.push(field_error(tool, Code::ToolSourceMissing, "source", format!("names `{}`, which is not a folder", source.display()), "`source` is a folder on the host, copied to /tools/<tool_name> in the container; paths are relative to the file that declares the tool"));
    }
    if let Some(py) = &tool.py_standalone {
        let valid = regex::Regex::new(r"^3(\.\d{1,2}){0,2}$")
            .map(|r| r.is_match(py))
            .unwrap_or(false);
        if !valid {
            diags.push(field_error(
                tool,
                Code::ToolBadPython,
                "py_standalone",
                format!("is `{py}`, not a Python version"),
                "write a version such as \"3.11\", or leave it out",
            ));
        }
    }
    if tool.installation.as_deref() == Some("pip")
        && tool.source.is_none()
        && tool.version.is_none()
    {
        diags.push(field_error(tool, Code::ToolPipWithoutPackage, "installation", "is `pip` but neither `source` nor `version` says what to install".into(), "set `source` (installs `-e .` from it) or `version` (installs `<tool_name>==<version>`)"));
    }
    if tool.installation.is_none()
        && (tool.py_standalone.is_some() || tool.setup_script.is_some())
        && tool.source.is_some()
    {
        diags.push(field_error(
            tool,
            Code::ToolNoInstallation,
            "installation",
            "is missing though the tool has a source to install".into(),
            "write `installation: pip`",
        ));
    }
    if tool.executable.trim().is_empty() {
        diags.push(field_error(
            tool,
            Code::ToolNoExecutable,
            "executable",
            "is empty".into(),
            "say how the tool is called, e.g. `executable: pyfind`",
        ));
    }
    if let Some(script) = &tool.setup_script
        && let Err(e) = tera::Tera::default().add_raw_template("setup_script", script)
    {
        diags.push(field_error(
            tool,
            Code::ToolBadSetupScript,
            "setup_script",
            format!(
                "is not a valid template: {}",
                crate::compile::tera_error_text(&e)
            ),
            "setup scripts may use {{ tool_name }}, {{ tool_dir }}, {{ env_python }}",
        ));
    }
}
