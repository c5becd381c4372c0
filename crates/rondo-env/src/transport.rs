//! How host directories (the run's workspace and the declared mounts) reach a tool
//! sandbox. Everything outside this module sees only [`Mount`]s and the contract: when a
//! command starts, the sandbox sees the host's files; when it returns, what it wrote in a
//! writable mount is on the host. Nothing else may assume the sandbox shares the host's
//! file system.

use std::path::{Path, PathBuf};

/// A host directory visible in the sandbox. Read-only unless declared writable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
    pub writable: bool,
    /// The mount may cover what the image has at `container`; otherwise a Docker
    /// environment refuses to start when the image has anything there.
    pub replace: bool,
}

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// The sandbox runs on this machine: each mount is a bind mount, so writes are seen
    /// both ways at once.
    #[default]
    BindMount,
    /// The sandbox may be elsewhere: each mount is copied in before every command, and
    /// each writable mount copied back after it (files are added and overwritten on the
    /// host, never deleted; the copies in the sandbox are owned by its root).
    CopyInOut,
}

impl Transport {
    /// The bind specifications (`host:container:ro|rw`) a container is created with.
    pub(crate) fn binds(self, mounts: &[Mount]) -> Vec<String> {
        match self {
            Transport::BindMount => mounts
                .iter()
                .map(|m| {
                    let mode = if m.writable { "rw" } else { "ro" };
                    format!("{}:{}:{mode}", m.host.display(), m.container)
                })
                .collect(),
            Transport::CopyInOut => Vec::new(),
        }
    }

    /// The mounts to copy into the sandbox before a command.
    pub(crate) fn before_exec(self, mounts: &[Mount]) -> impl Iterator<Item = &Mount> {
        mounts.iter().filter(move |_| self == Transport::CopyInOut)
    }

    /// The mounts to copy back to the host after a command.
    pub(crate) fn after_exec(self, mounts: &[Mount]) -> impl Iterator<Item = &Mount> {
        mounts
            .iter()
            .filter(move |m| self == Transport::CopyInOut && m.writable)
    }
}

/// The places the Docker engine's socket is known to live on this machine.
fn docker_sockets() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = vec!["/var/run/docker.sock".into(), "/run/docker.sock".into()];
    if let Ok(host) = std::env::var("DOCKER_HOST")
        && let Some(path) = host.strip_prefix("unix://")
    {
        paths.push(path.into());
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        paths.push(PathBuf::from(dir).join("docker.sock"));
    }
    let resolved: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    paths.extend(resolved);
    paths
}

/// Why `host` may never be mounted into a sandbox, if it may not: it is (or resolves to)
/// a socket, or it contains the Docker socket — a container holding it controls the
/// engine, and so the host.
pub fn refused_mount(host: &Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let real = std::fs::canonicalize(host).unwrap_or_else(|_| host.to_path_buf());
    for socket in docker_sockets() {
        if socket.starts_with(host) || socket.starts_with(&real) {
            return Some(if socket == real || socket == host {
                format!(
                    "{} is the Docker socket: a container holding it controls the host",
                    host.display()
                )
            } else {
                format!(
                    "{} contains the Docker socket ({}): a container holding it controls the host",
                    host.display(),
                    socket.display()
                )
            });
        }
    }
    if std::fs::metadata(&real).is_ok_and(|m| m.file_type().is_socket()) {
        return Some(format!(
            "{} is a socket: a sandbox never gets a socket of the host",
            host.display()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docker_socket_and_its_folders_are_refused() {
        for p in ["/var/run/docker.sock", "/run/docker.sock", "/var/run", "/"] {
            assert!(refused_mount(Path::new(p)).is_some(), "{p}");
        }
        let tmp = std::env::temp_dir();
        assert!(refused_mount(&tmp.join("rondo-no-such-dir")).is_none());
    }

    #[test]
    fn any_socket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(refused_mount(&path).unwrap().contains("is a socket"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(refused_mount(&link).is_some());
        assert!(refused_mount(dir.path()).is_none());
    }
}
