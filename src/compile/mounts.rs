//! The `mounts` of a Docker environment: `"dir:/container[:ro|:rw]"` with `dir` a folder
//! of the run's workspace, or `"host:/abs/path:/container[:ro|:rw]"` for a folder of the
//! host outside it (explicit, and `check` warns). Read-only unless `rw`. A mount never hides
//! what the image has at its container path unless it ends with `:replace`.

use std::path::{Component, Path, PathBuf};

/// Where a mount's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountSource {
    /// A relative path inside the run's workspace (`.` is the workspace itself).
    Workspace(PathBuf),
    /// An absolute path of the host, outside the workspace.
    Host(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub source: MountSource,
    pub container: String,
    pub writable: bool,
    /// `:replace`: the mount may cover what the image has at `container`.
    pub replace: bool,
}

/// Folders every Linux image has: a mount onto one (or onto `/`) would hide the system.
pub const SYSTEM_PATHS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys",
    "/usr", "/var",
];

/// The system folder `container` covers, if it is one (or `/`).
pub fn hides_system(container: &str) -> Option<&'static str> {
    let trimmed = container.trim_end_matches('/');
    let path = if trimmed.is_empty() { "/" } else { trimmed };
    SYSTEM_PATHS.iter().copied().find(|p| *p == path)
}

/// Parses one entry of `mounts`; the error says what is wrong with it.
pub fn parse_mount(text: &str) -> Result<MountSpec, String> {
    let mut parts: Vec<&str> = text.split(':').collect();
    let replace = parts.len() > 2 && parts.last() == Some(&"replace");
    if replace {
        parts.pop();
    }
    let writable = match parts.last().copied() {
        Some("rw") if parts.len() > 2 => {
            parts.pop();
            true
        }
        Some("ro") if parts.len() > 2 => {
            parts.pop();
            false
        }
        _ => false,
    };
    let (source, container) = match parts.as_slice() {
        ["host", path, container] => {
            if !path.starts_with('/') {
                return Err(format!("the host path `{path}` is not absolute"));
            }
            (MountSource::Host(PathBuf::from(path)), *container)
        }
        [path, _] if path.starts_with('/') => {
            return Err(format!(
                "`{path}` is outside the run's workspace: a host folder is written `host:{path}:...`"
            ));
        }
        [path, container] => {
            let rel = Path::new(path);
            if path.is_empty()
                || rel
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
            {
                return Err(format!(
                    "`{path}` leaves the run's workspace: write a folder inside it, or `host:/abs/path:...`"
                ));
            }
            (MountSource::Workspace(rel.to_path_buf()), *container)
        }
        _ => {
            return Err(
                "a mount is `dir:/container[:ro|:rw][:replace]` or `host:/abs/path:/container[:ro|:rw][:replace]`"
                    .into(),
            );
        }
    };
    if !container.starts_with('/') {
        return Err(format!("the container path `{container}` is not absolute"));
    }
    Ok(MountSpec {
        source,
        container: container.to_string(),
        writable,
        replace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let m = parse_mount("repo:/work:rw").unwrap();
        assert_eq!(m.source, MountSource::Workspace("repo".into()));
        assert!(m.writable);
        let m = parse_mount("host:/data/set:/data").unwrap();
        assert_eq!(m.source, MountSource::Host("/data/set".into()));
        assert!(!m.writable);
        assert!(!m.replace);
        let m = parse_mount(".:/testbed:rw:replace").unwrap();
        assert_eq!(m.source, MountSource::Workspace(".".into()));
        assert!(m.writable && m.replace);
        assert!(parse_mount("repo:/work:replace").unwrap().replace);
        assert_eq!(hides_system("/usr/"), Some("/usr"));
        assert_eq!(hides_system("/"), Some("/"));
        assert_eq!(hides_system("/usr/src"), None);
        assert!(parse_mount("/etc:/etc").is_err());
        assert!(parse_mount("../up:/x").is_err());
        assert!(parse_mount("host:rel:/x").is_err());
        assert!(parse_mount("a:b").is_err());
        assert!(parse_mount("a").is_err());
    }
}
