//! Tool spec loading and validation: errors name the file, the field and the line.

mod common;

use std::path::Path;

use rondo_env::tool::{Installation, load_dir};
use rondo_env::{SpecError, ToolSpec};

fn parse(yaml: &str, dir: &Path) -> Result<ToolSpec, SpecError> {
    ToolSpec::from_yaml(yaml, Path::new("config/tools/t.yaml"), dir)
}

#[test]
fn sample_spec_loads() {
    let spec = common::pyfind_spec();
    assert_eq!(spec.tool_name, "pyfind");
    assert_eq!(spec.installation, Installation::Pip);
    assert_eq!(spec.py_standalone.as_deref(), Some("3.11"));
    assert!(
        spec.source
            .as_ref()
            .unwrap()
            .join("pyproject.toml")
            .is_file()
    );
    assert_eq!(spec.timeout, Some(60));
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
    assert!(msg.contains("does not exist"), "{msg}");
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
    assert!(
        msg.contains("config/tools/t.yaml:3:15: field `installation`"),
        "{msg}"
    );
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
    assert_eq!(err.issues()[0].line, Some(3));
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
    let err = parse("tool_name: [unclosed\n", dir.path()).unwrap_err();
    assert!(
        matches!(err, SpecError::Yaml { line: Some(_), .. }),
        "{err}"
    );
    assert!(err.to_string().starts_with("config/tools/t.yaml:"), "{err}");

    let err = parse(
        "tool_name: x\nversion: '1'\ninstallation: pip\nexecutable: x\ncolour: red\n",
        dir.path(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("colour"), "{msg}");
    assert!(
        matches!(err, SpecError::Yaml { line: Some(5), .. }),
        "{msg}"
    );

    let err = parse("tool_name: x\ninstallation: pip\n", dir.path()).unwrap_err();
    assert!(err.to_string().contains("executable"), "{err}");
}

#[test]
fn template_variables_and_several_issues_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse(
        "tool_name: 'bad name'\ninstallation: pip\nexecutable: x\nsetup_script: echo {{tool_home}}\n",
        dir.path(),
    )
    .unwrap_err();
    let fields: Vec<&str> = err.issues().iter().map(|i| i.field).collect();
    assert_eq!(fields, ["tool_name", "setup_script", "version"], "{err}");
    assert!(err.to_string().contains("tool_home"));
}

#[test]
fn inline_specs_validate_too() {
    let mut spec = ToolSpec::new("inline", "inline-tool");
    let err = spec.validate().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("tool `inline` (inline): field `version`"),
        "{err}"
    );
    spec.version = Some("1.0".into());
    spec.validate().unwrap();
}
