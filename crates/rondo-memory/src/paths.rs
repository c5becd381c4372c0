//! Workspace-relative path checks shared by the code context and the whiteboard.

use thiserror::Error;

/// Why a path was refused as workspace-relative.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path `{0}` is absolute; give it relative to the workspace root")]
    Absolute(String),
    #[error("path `{0}` climbs out of the workspace with `..`")]
    Escapes(String),
    #[error(
        "path `{path}` is inside the system directory `{dir}/`, which is not part of the workspace"
    )]
    System { path: String, dir: String },
}

/// Normalizes `path` to a `/`-separated workspace-relative form: `.` components
/// dropped, `a/../b` folded to `b`. Refuses absolute paths (Unix, Windows drive
/// or UNC, `~`), escapes above the root, and paths under any of `system_dirs`.
pub fn normalize_workspace_path(path: &str, system_dirs: &[String]) -> Result<String, PathError> {
    let trimmed = path.trim();
    if trimmed.is_empty() {
        return Err(PathError::Empty);
    }
    let bytes = trimmed.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if trimmed.starts_with('/') || trimmed.starts_with('\\') || trimmed.starts_with('~') || drive {
        return Err(PathError::Absolute(trimmed.to_string()));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in trimmed.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathError::Escapes(trimmed.to_string()));
                }
            }
            other => parts.push(other),
        }
    }
    if parts.is_empty() {
        return Err(PathError::Empty);
    }
    if let Some(dir) = system_dirs
        .iter()
        // `.CATMASTER/x` is the same folder on a case-insensitive file system.
        .find(|dir| dir.trim_matches('/').eq_ignore_ascii_case(parts[0]))
    {
        return Err(PathError::System {
            path: trimmed.to_string(),
            dir: dir.trim_matches('/').to_string(),
        });
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys() -> Vec<String> {
        vec![".catmaster".to_string()]
    }

    #[test]
    fn normalizes_and_refuses() {
        assert_eq!(
            normalize_workspace_path("./a/./b/../c.py", &sys()).unwrap(),
            "a/c.py"
        );
        assert_eq!(
            normalize_workspace_path("a\\b.py", &sys()).unwrap(),
            "a/b.py"
        );
        assert!(matches!(
            normalize_workspace_path("/etc/passwd", &sys()),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(
            normalize_workspace_path("C:\\x", &sys()),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(
            normalize_workspace_path("~/x", &sys()),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(
            normalize_workspace_path("a/../../x", &sys()),
            Err(PathError::Escapes(_))
        ));
        assert!(matches!(
            normalize_workspace_path("./.catmaster/wb.md", &sys()),
            Err(PathError::System { .. })
        ));
        for cased in [".CATMASTER/x", ".CatMaster/wb.md", "a/../.Catmaster/x"] {
            assert!(
                matches!(
                    normalize_workspace_path(cased, &sys()),
                    Err(PathError::System { .. })
                ),
                "{cased}"
            );
        }
        assert!(matches!(
            normalize_workspace_path(" . ", &sys()),
            Err(PathError::Empty)
        ));
    }
}
