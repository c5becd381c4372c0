//! Tar archives of host paths (for uploads) and content hashes (for the tool cache).

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::EnvError;

/// Visit `root` (a file or a directory) depth-first in name order, calling `f` with the
/// path relative to `root` (empty for `root` itself) and its symlink-aware metadata.
fn walk(
    root: &Path,
    rel: &Path,
    f: &mut dyn FnMut(&Path, &Path, &fs::Metadata) -> Result<(), EnvError>,
) -> Result<(), EnvError> {
    let path = root.join(rel);
    let meta = fs::symlink_metadata(&path).map_err(|e| EnvError::io(&path, e))?;
    f(&path, rel, &meta)?;
    if meta.is_dir() {
        let mut names: Vec<_> = fs::read_dir(&path)
            .map_err(|e| EnvError::io(&path, e))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| EnvError::io(&path, e))?;
        names.sort();
        for name in names {
            walk(root, &rel.join(name), f)?;
        }
    }
    Ok(())
}

/// A tar of `src` whose top entry is named `name`. Entries are owned by root: the
/// container's root has no CAP_DAC_OVERRIDE/CAP_CHOWN, so files owned by the host
/// user would be read-only to it.
pub(crate) fn tar_of(src: &Path, name: &str) -> Result<Vec<u8>, EnvError> {
    tar_skipping(src, name, &[])
}

/// [`tar_of`] without the paths (relative to `src`) in `skip` and what is under them: a
/// workspace's system area never reaches a sandbox.
pub(crate) fn tar_skipping(src: &Path, name: &str, skip: &[PathBuf]) -> Result<Vec<u8>, EnvError> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    walk(src, Path::new(""), &mut |path, rel, meta| {
        if skipped(rel, skip) {
            return Ok(());
        }
        let entry_name = Path::new(name).join(rel);
        let mut header = tar::Header::new_gnu();
        header.set_metadata(meta);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("root").ok();
        header.set_groupname("root").ok();
        let res = if meta.file_type().is_symlink() {
            let target = fs::read_link(path).map_err(|e| EnvError::io(path, e))?;
            builder.append_link(&mut header, &entry_name, target)
        } else if meta.is_dir() {
            header.set_size(0);
            builder.append_data(&mut header, &entry_name, std::io::empty())
        } else if meta.is_file() {
            let file = fs::File::open(path).map_err(|e| EnvError::io(path, e))?;
            builder.append_data(&mut header, &entry_name, file)
        } else {
            return Ok(()); // sockets, fifos: nothing sensible to copy
        };
        res.map_err(|e| EnvError::io(path, e))
    })?;
    builder.into_inner().map_err(|e| EnvError::io(src, e))
}

/// Hash of a file tree: names, kinds, executable bits and contents.
pub(crate) fn hash_tree(src: &Path, hasher: &mut Sha256) -> Result<(), EnvError> {
    walk(src, Path::new(""), &mut |path, rel, meta| {
        hasher.update(rel.to_string_lossy().as_bytes());
        hasher.update([0]);
        if meta.file_type().is_symlink() {
            let target = fs::read_link(path).map_err(|e| EnvError::io(path, e))?;
            hasher.update(b"L");
            hasher.update(target.to_string_lossy().as_bytes());
        } else if meta.is_dir() {
            hasher.update(b"D");
        } else if meta.is_file() {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let exec = meta.permissions().mode() & 0o111 != 0;
                hasher.update(if exec { b"X" } else { b"F" });
            }
            let mut file = fs::File::open(path).map_err(|e| EnvError::io(path, e))?;
            let mut buf = [0u8; 64 * 1024];
            loop {
                let n = file.read(&mut buf).map_err(|e| EnvError::io(path, e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        hasher.update([0]);
        Ok(())
    })
}

/// Unpack a tar whose single top entry is the copied file or directory into `dest`
/// (the top entry becomes `dest` itself).
pub(crate) fn unpack_as(data: &[u8], dest: &Path) -> Result<(), EnvError> {
    unpack_skipping(data, dest, &[])
}

fn skipped(rel: &Path, skip: &[PathBuf]) -> bool {
    skip.iter().any(|s| rel.starts_with(s))
}

/// [`unpack_as`] leaving out the entries at or under `skip` (relative to `dest`): what a
/// sandbox wrote where the host keeps its records never reaches the host.
pub(crate) fn unpack_skipping(data: &[u8], dest: &Path, skip: &[PathBuf]) -> Result<(), EnvError> {
    let mut archive = tar::Archive::new(data);
    let entries = archive.entries().map_err(|e| EnvError::io(dest, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| EnvError::io(dest, e))?;
        let path = entry
            .path()
            .map_err(|e| EnvError::io(dest, e))?
            .into_owned();
        let mut comps = path
            .components()
            .filter(|c| !matches!(c, Component::CurDir));
        comps.next(); // the top entry's own name
        let rest: Vec<Component> = comps.collect();
        if rest.iter().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(EnvError::InvalidRequest(format!(
                "refusing archive entry {}",
                path.display()
            )));
        }
        // `unpack` takes a hard link's target as it is, relative to this process's
        // folder or absolute: a link to any file this process may open.
        if entry.header().entry_type().is_hard_link() {
            return Err(EnvError::InvalidRequest(format!(
                "refusing archive entry {}: a hard link",
                path.display()
            )));
        }
        let rel: PathBuf = rest.iter().collect();
        if skipped(&rel, skip) {
            continue;
        }
        // Joining an empty path would add a trailing slash, which a file cannot have.
        let target = rest.iter().fold(dest.to_path_buf(), |p, c| p.join(c));
        // An earlier entry (or the destination) must not turn a folder into a link that
        // leads out of `dest`: copies out of a sandbox are untrusted.
        let mut at = dest.to_path_buf();
        for c in rest.iter().take(rest.len().saturating_sub(1)) {
            at.push(c);
            if fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(EnvError::InvalidRequest(format!(
                    "refusing archive entry {}: {} is a symbolic link",
                    path.display(),
                    at.display()
                )));
            }
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| EnvError::io(parent, e))?;
        }
        entry
            .unpack(&target)
            .map_err(|e| EnvError::io(&target, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hard_link_out_of_an_archive_is_refused() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        header.set_mode(0o755);
        builder
            .append_data(&mut header, "top", std::io::empty())
            .unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Link);
        header.set_size(0);
        builder
            .append_link(&mut header, "top/h", "/etc/hostname")
            .unwrap();
        let data = builder.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = unpack_as(&data, &dir.path().join("out")).unwrap_err();
        assert!(err.to_string().contains("a hard link"), "{err}");
        assert!(!dir.path().join("out/h").exists());
    }
}
