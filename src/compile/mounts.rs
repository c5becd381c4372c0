//! The `mounts` of a Docker environment: `"dir:/container[:ro|:rw]"` with `dir` a folder
//! of the run's workspace, or `"host:/abs/path:/container[:ro|:rw]"` for a folder of the
//! host outside it (explicit, and `check` warns). Read-only unless `rw`.

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
}

/// Parses one entry of `mounts`; the error says what is wrong with it.
pub fn parse_mount(text: &str) -> Result<MountSpec, String> {
    let mut parts: Vec<&str> = text.split(':').collect();
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
                "a mount is `dir:/container[:ro|:rw]` or `host:/abs/path:/container[:ro|:rw]`"
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
        assert!(parse_mount("/etc:/etc").is_err());
        assert!(parse_mount("../up:/x").is_err());
        assert!(parse_mount("host:rel:/x").is_err());
        assert!(parse_mount("a:b").is_err());
        assert!(parse_mount("a").is_err());
    }
}
