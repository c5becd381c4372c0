//! Tool spec loading and validation: errors name the file, the field and the line.

mod common;

use std::path::Path;

use rondo_env::tool::{Installation, IssueKind, load_dir};
use rondo_env::{SpecError, ToolSpec};

fn parse(yaml: &str, dir: &Path) -> Result<ToolSpec, SpecError> {
    ToolSpec::from_yaml(yaml, Path::new("config/tools/t.yaml"), dir)
}

#[test]
fn sample_spec_loads() {
    let spec = common::pyfind_spec();
    assert_eq!(spec.tool_name, "pyfind");
    assert_eq!(spec.installation, Some(Installation::Pip));
    assert_eq!(spec.py_standalone.as_deref(), Some("3.11"));
    assert!(
        spec.source
            .as_ref()
            .unwrap()
            .join("pyproject.toml")
            .is_file()
    );
    assert_eq!(spec.timeout, Some(std::time::Duration::from_secs(60)));
    assert!(spec.usage.contains("pyfind symbol"));
    assert_eq!(spec.input_schema.as_ref().unwrap()["type"], "object");
    let all = load_dir(
        &common::project_root().join("config/tools"),
        &common::project_root(),
    )
    .unwrap();
    assert!(all.iter().any(|s| s.tool_name == "pyfind"));
}

#[test]
fn missing_source_folder_names_file_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse(
        "tool_name: x\nsource: no/such/dir\ninstallation: pip\nexecutable: x\n",
        dir.path(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("config/tools/t.yaml:2:"), "{msg}");
    assert!(msg.contains("field `source`"), "{msg}");
    assert!(msg.contains("which is not a folder"), "{msg}");
}

#[test]
fn unknown_installation_method() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse(
        "tool_name: x\nversion: '1.0'\ninstallation: conda\nexecutable: x\n",
        dir.path(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("config/tools/t.yaml:3:15: "), "{msg}");
    assert!(msg.contains("unknown installation method `conda`"), "{msg}");
}

#[test]
fn py_standalone_must_be_a_python_version() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse(
        "tool_name: x\nversion: '1'\npy_standalone: python3\ninstallation: pip\nexecutable: x\n",
        dir.path(),
    )
    .unwrap_err();
    assert_eq!(err.issues()[0].field, "py_standalone");
    assert_eq!(err.issues()[0].kind, IssueKind::BadPython);
    assert_eq!(err.issues()[0].pos.map(|p| p.line), Some(3));
    // Only `3` or `3.N`: venv cannot make a `python3.11.4`.
    let err = parse(
        "tool_name: x\nversion: '1'\npy_standalone: '3.11.4'\ninstallation: pip\nexecutable: x\n",
        dir.path(),
    )
    .unwrap_err();
    assert_eq!(err.issues()[0].kind, IssueKind::BadPython);
    // An unquoted 3.11 is read as the text "3.11".
    let ok = parse(
        "tool_name: x\nversion: '1'\npy_standalone: 3.11\ninstallation: pip\nexecutable: x\n",
        dir.path(),
    )
    .unwrap();
    assert_eq!(ok.py_standalone.as_deref(), Some("3.11"));
}

#[test]
fn bad_yaml_and_unknown_fields_carry_positions() {
    let dir = tempfile::tempdir().unwrap();
    let line_of = |err: &SpecError| err.issues()[0].pos.map(|p| p.line);
    let err = parse("tool_name: [unclosed\n", dir.path()).unwrap_err();
    assert_eq!(err.issues()[0].kind, IssueKind::Yaml, "{err}");
    assert!(line_of(&err).is_some(), "{err}");
    assert!(err.to_string().starts_with("config/tools/t.yaml:"), "{err}");

    let err = parse(
        "tool_name: x\nversion: '1'\ninstallation: pip\nexecutable: x\ncolour: red\n",
        dir.path(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("colour"), "{msg}");
    assert_eq!(err.issues()[0].kind, IssueKind::UnknownField);
    assert_eq!(line_of(&err), Some(5), "{msg}");

    let err = parse(
        "tool_name: x\ninstallation: pip\nversion: '1'\n",
        dir.path(),
    )
    .unwrap_err();
    assert_eq!(err.issues()[0].kind, IssueKind::NoExecutable, "{err}");

    let err = parse("tool_name: x\nexecutable: x\ntimeout: 1.5 s\n", dir.path()).unwrap_err();
    assert_eq!(err.issues()[0].kind, IssueKind::Yaml, "{err}");
    assert_eq!(line_of(&err), Some(3), "{err}");
}

#[test]
fn durations_and_sizes_are_read_as_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let spec = parse(
        "tool_name: x\nexecutable: x\ntimeout: 1.5s\nmax_output: 4MB\n",
        dir.path(),
    )
    .unwrap();
    assert_eq!(spec.timeout, Some(std::time::Duration::from_millis(1500)));
    assert_eq!(spec.max_output, Some(4 << 20));
    assert!(!spec.needs_install(), "no installation: run as it is");
    let spec = parse("tool_name: x\nexecutable: x\ntimeout: 90\n", dir.path()).unwrap();
    assert_eq!(spec.timeout, Some(std::time::Duration::from_secs(90)));
    let err = parse("tool_name: x\nexecutable: x\ntimeout: 0s\n", dir.path()).unwrap_err();
    assert_eq!(err.issues()[0].kind, IssueKind::ZeroTimeout);
}

#[test]
fn template_variables_and_several_issues_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse(
        "tool_name: 'bad name'\ninstallation: pip\nexecutable: x\nsetup_script: echo {{tool_home}}\n",
        dir.path(),
    )
    .unwrap_err();
    let fields: Vec<&str> = err.issues().iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        ["tool_name", "installation", "setup_script"],
        "{err}"
    );
    assert!(err.to_string().contains("tool_home"));
}

#[test]
fn inline_specs_validate_too() {
    let mut spec = ToolSpec::new("inline", "inline-tool");
    spec.validate().unwrap();
    spec.py_standalone = Some("3.11".into());
    let err = spec.validate().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("tool `inline` (inline): field `installation`"),
        "{err}"
    );
    spec.installation = Some(Installation::Pip);
    let err = spec.validate().unwrap_err();
    assert_eq!(err.issues()[0].kind, IssueKind::NothingToInstall, "{err}");
    spec.version = Some("1.0".into());
    spec.validate().unwrap();
}
