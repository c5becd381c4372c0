//! The one confinement mechanism for every path Rondo touches on a workflow's behalf:
//! artifacts and their temporary files, tool logs, the whiteboard, code-context reads,
//! `exists()`.
//!
//! A [`Workspace`] is a directory handle ([`cap_std::fs::Dir`]); every open goes through
//! it, so a path is resolved *beneath* the handle by the kernel, not checked as a string
//! and then opened by name. On Linux cap-std resolves with `openat2(RESOLVE_BENEATH)`
//! when the kernel has it and otherwise walks the path one `openat` at a time, refusing
//! `..` above the root, absolute paths and symbolic links that lead out. Because the
//! check and the open are the same system call, a tool that swaps a directory for a
//! symbolic link between the two cannot win a race (no TOCTOU), which a
//! `canonicalize` + `starts_with` sanitiser cannot promise.
//!
//! On top of that, nothing is reached *through* a folder named [`SYSTEM_DIR`] (`.rondo`,
//! where `rondo run --workspace DIR` keeps its journal and checkpoints): a name starting
//! with it is refused before any open ([`relative_name`]), and a symbolic link inside the
//! workspace pointing into it is caught after the open, from the real location of the
//! opened handle.

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

/// The folder inside a `--workspace` directory that holds the runs' system areas.
pub const SYSTEM_DIR: &str = ".rondo";

/// Longest workspace-relative name accepted (bytes).
pub const MAX_NAME: usize = 4096;

/// Why a name is not a workspace-relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    Empty,
    Absolute,
    Climbs,
    System,
    Nul,
    TooLong,
}

impl std::fmt::Display for NameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameError::Empty => "the name is empty",
            NameError::Absolute => "the name is an absolute path",
            NameError::Climbs => "the name climbs out of the workspace with `..`",
            NameError::System => {
                "the name is inside `.rondo/`, the runs' system area, which tools and artifacts never reach"
            }
            NameError::Nul => "the name contains a NUL byte",
            NameError::TooLong => "the name is longer than 4096 bytes",
        })
    }
}

impl std::error::Error for NameError {}

/// A name relative to the workspace: not empty, not absolute, no `..`, no component
/// named [`SYSTEM_DIR`]. `.` components are dropped.
pub fn relative_name(name: &str) -> Result<PathBuf, NameError> {
    if name.len() > MAX_NAME {
        return Err(NameError::TooLong);
    }
    if name.contains('\0') {
        return Err(NameError::Nul);
    }
    let mut out = PathBuf::new();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => {
                if is_system(part) {
                    return Err(NameError::System);
                }
                out.push(part);
            }
            Component::CurDir => {}
            Component::ParentDir => return Err(NameError::Climbs),
            Component::RootDir | Component::Prefix(_) => return Err(NameError::Absolute),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(NameError::Empty);
    }
    Ok(out)
}

/// Longest component [`contained_name`] keeps (bytes); file systems allow 255.
const MAX_COMPONENT: usize = 240;

/// Longest a value becomes in [`path_component`], leaving room for the text around it.
const MAX_VALUE: usize = 120;

/// `part` with NUL made `_`, cut to `max` bytes on a character boundary, and never empty.
fn component(part: &str, max: usize) -> String {
    let mut out = part.replace('\0', "_");
    if out.len() > max {
        let mut end = max;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// A value interpolated into a name (an artifact's), made one harmless path component:
/// `/`, backslash and NUL become `_`, `..` becomes `__`, at most 120 bytes, never empty.
/// `None` when the value already is one.
pub fn path_component(value: &str) -> Option<String> {
    let out = component(
        &value.replace(['/', '\\'], "_").replace("..", "__"),
        MAX_VALUE,
    );
    (out != value).then_some(out)
}

/// A name made a relative path whatever its parts are: empty and `.` components dropped
/// (so also a leading `/`), `..` made `__`, NUL made `_`, each component at most 240
/// bytes. What it names may still be refused by [`relative_name`] (the system area).
pub fn contained_name(name: &str) -> String {
    let parts: Vec<String> = name
        .split('/')
        .filter(|part| !matches!(*part, "" | "."))
        .map(|part| match part {
            ".." => "__".to_string(),
            other => component(other, MAX_COMPONENT),
        })
        .collect();
    match parts.as_slice() {
        [] => "_".into(),
        _ => parts.join("/"),
    }
}

fn is_system(part: &std::ffi::OsStr) -> bool {
    // Case-insensitive: on a case-insensitive file system `.RONDO` is the same folder.
    part.to_str()
        .is_some_and(|p| p.eq_ignore_ascii_case(SYSTEM_DIR))
}

fn refused(name: &str, e: NameError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("`{name}`: {e}"))
}

fn not_found() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "the workspace has nothing yet")
}

fn hidden(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("`{name}` leads into the system area `{SYSTEM_DIR}/`"),
    )
}

/// A directory every access is confined to.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    /// Empty until the folder exists: a [`deferred`](Workspace::deferred) workspace is
    /// made by the first write.
    dir: std::sync::OnceLock<Dir>,
    /// Files whose folder was searched for temporary files of killed processes.
    swept: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
}

impl Workspace {
    /// Opens an existing directory as a workspace.
    pub fn open(root: &Path) -> io::Result<Workspace> {
        let root = std::fs::canonicalize(root)?;
        let dir = Dir::open_ambient_dir(&root, ambient_authority())?;
        Ok(Workspace {
            root,
            dir: dir.into(),
            swept: Default::default(),
        })
    }

    /// Creates the directory (and its parents) if needed, then opens it.
    pub fn create(root: &Path) -> io::Result<Workspace> {
        std::fs::create_dir_all(root)?;
        Self::open(root)
    }

    /// A workspace made only when something is written to it: until then it reads as
    /// an empty folder (nothing exists, every length is 0) and nothing is created. Its
    /// parent must exist; an existing folder is opened at once.
    pub fn deferred(root: &Path) -> io::Result<Workspace> {
        if root.is_dir() {
            return Self::open(root);
        }
        let name = root.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a workspace needs a folder name",
            )
        })?;
        let parent = match root.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok(Workspace {
            root: std::fs::canonicalize(parent)?.join(name),
            dir: std::sync::OnceLock::new(),
            swept: Default::default(),
        })
    }

    /// Makes the folder now (a tool's working directory must exist).
    pub fn ensure(&self) -> io::Result<()> {
        self.dir().map(|_| ())
    }

    /// The folder, made first when it does not exist yet. Opened by its canonical path,
    /// then checked to be where that path said: a link put in its place is refused.
    fn dir(&self) -> io::Result<&Dir> {
        if let Some(dir) = self.dir.get() {
            return Ok(dir);
        }
        match std::fs::create_dir(&self.root) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        self.adopt()
    }

    /// The folder when it exists (made by this workspace or by anyone else), else `None`.
    fn existing(&self) -> io::Result<Option<&Dir>> {
        if let Some(dir) = self.dir.get() {
            return Ok(Some(dir));
        }
        match self.adopt() {
            Ok(dir) => Ok(Some(dir)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn adopt(&self) -> io::Result<&Dir> {
        let dir = Dir::open_ambient_dir(&self.root, ambient_authority())?;
        match real_path(&dir) {
            Ok(real) if real != self.root => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{} is not the workspace folder it was", self.root.display()),
                ));
            }
            Err(e) if e.kind() != io::ErrorKind::Unsupported => return Err(e),
            _ => {}
        }
        let _ = self.dir.set(dir);
        self.dir
            .get()
            .ok_or_else(|| io::Error::other("the workspace folder was not kept"))
    }

    /// The workspace's absolute, canonical path (a tool's working directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A sub-folder as a workspace of its own, confined like any other access
    /// (created first when `create`).
    pub fn subdir(&self, name: &str, create: bool) -> io::Result<Workspace> {
        let rel = relative_name(name).map_err(|e| refused(name, e))?;
        let dir = if create {
            self.open_or_create_dir(&rel)?
        } else {
            self.existing()?.ok_or_else(not_found)?.open_dir(&rel)?
        };
        let real = self.visible(name, &dir)?;
        Ok(Workspace {
            root: real,
            dir: dir.into(),
            swept: Default::default(),
        })
    }

    /// Reads a regular file.
    pub fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let rel = relative_name(name).map_err(|e| refused(name, e))?;
        let mut options = OpenOptions::new();
        options.read(true);
        nonblocking(&mut options);
        let file = self
            .existing()?
            .ok_or_else(not_found)?
            .open_with(&rel, &options)?;
        self.visible(name, &file)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not a regular file"),
            ));
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut file.into_std(), &mut bytes)?;
        Ok(bytes)
    }

    /// Whether `name` names something inside the workspace (never outside it, never in
    /// the system area). Invalid names are simply absent.
    pub fn exists(&self, name: &str) -> bool {
        let Ok(rel) = relative_name(name) else {
            return false;
        };
        let Ok(Some(dir)) = self.existing() else {
            return false;
        };
        match dir.canonicalize(&rel) {
            Ok(real) => relative_name(&real.to_string_lossy()).is_ok(),
            Err(_) => false,
        }
    }

    /// Writes through a temporary file in the same folder and a rename: readers never
    /// see half a file, and a symbolic link at `name` is replaced, not followed.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace(name, bytes, true)
    }

    /// [`write_atomic`](Self::write_atomic) without fsync: a reader, or a process killed
    /// at any point, sees the old or the new content. Durable after [`sync`](Self::sync).
    pub fn write_replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace(name, bytes, false)
    }

    /// [`write_atomic`](Self::write_atomic) whose rename is made durable by a later
    /// [`sync_folder`](Self::sync_folder) (one folder sync for several files replaced
    /// together). The new content is synced before the rename: a power failure leaves
    /// the old file or the whole new one, never an empty one.
    pub fn write_atomic_folder_later(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.replace_with(name, bytes, true, false)
    }

    /// Syncs the workspace's own folder (renames and new names in it).
    pub fn sync_folder(&self) -> io::Result<()> {
        self.dir()?.open(".")?.into_std().sync_all()
    }

    fn replace(&self, name: &str, bytes: &[u8], sync: bool) -> io::Result<()> {
        self.replace_with(name, bytes, sync, sync)
    }

    fn replace_with(
        &self,
        name: &str,
        bytes: &[u8],
        sync: bool,
        sync_folder: bool,
    ) -> io::Result<()> {
        let (parent, file_name) = self.parent_of(name)?;
        self.sweep(name, &parent, &file_name);
        let tmp = temp_name(&file_name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let written = (|| {
            let mut f = parent.open_with(&tmp, &options)?.into_std();
            f.write_all(bytes)?;
            if sync {
                f.sync_all()?;
            }
            parent.rename(&tmp, &parent, &file_name)
        })();
        if written.is_err() {
            let _ = parent.remove_file(&tmp);
        }
        written?;
        if sync_folder && let Ok(d) = parent.open(".") {
            let _ = d.into_std().sync_all();
        }
        Ok(())
    }

    /// Rewrites an existing regular file in place and syncs it: for when the folder
    /// refuses the temporary file of [`write_atomic`](Self::write_atomic) (its
    /// permissions changed, the disk is full). A reader may see half of it. The space for
    /// `bytes` is taken first: where there is none (a full disk, the process's file size
    /// limit) the file is left whole rather than cut.
    pub fn rewrite(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let (parent, file_name) = self.parent_of(name)?;
        let mut options = OpenOptions::new();
        options.write(true);
        nonblocking(&mut options);
        let file = parent.open_with(&file_name, &options)?;
        self.visible(name, &file)?;
        regular(name, &file)?;
        let file = file.into_std();
        let len = bytes.len() as u64;
        if len > file.metadata()?.len() {
            reserve(&file, len)?;
        }
        file.write_all_at(bytes, 0)?;
        file.set_len(len)?;
        file.sync_all()
    }

    /// Appends bytes, syncs, and returns the file's new length.
    pub fn append(&self, name: &str, bytes: &[u8]) -> io::Result<u64> {
        self.append_with(name, bytes, true)
    }

    /// [`append`](Self::append) without fsync. Durable after [`sync`](Self::sync).
    pub fn append_unsynced(&self, name: &str, bytes: &[u8]) -> io::Result<u64> {
        self.append_with(name, bytes, false)
    }

    fn append_with(&self, name: &str, bytes: &[u8], sync: bool) -> io::Result<u64> {
        let (parent, file_name) = self.parent_of(name)?;
        let mut options = OpenOptions::new();
        options.append(true).create(true);
        nonblocking(&mut options);
        let file = parent.open_with(&file_name, &options)?;
        self.visible(name, &file)?;
        regular(name, &file)?;
        let mut file = file.into_std();
        file.write_all(bytes)?;
        if sync {
            file.sync_data()?;
        }
        Ok(file.metadata()?.len())
    }

    /// The length of a regular file, 0 when there is none.
    pub fn file_len(&self, name: &str) -> io::Result<u64> {
        let rel = relative_name(name).map_err(|e| refused(name, e))?;
        let mut options = OpenOptions::new();
        options.read(true);
        nonblocking(&mut options);
        let Some(dir) = self.existing()? else {
            return Ok(0);
        };
        let file = match dir.open_with(&rel, &options) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        self.visible(name, &file)?;
        regular(name, &file)?;
        Ok(file.metadata()?.len())
    }

    /// Syncs a file written by [`write_replace`](Self::write_replace) or
    /// [`append_unsynced`](Self::append_unsynced), and its folder (the rename). A file
    /// no longer there, or no longer a regular file inside the workspace, is skipped.
    pub fn sync(&self, name: &str) -> io::Result<()> {
        if self.existing()?.is_none() {
            return Ok(());
        }
        let Ok((parent, file_name)) = self.parent_of(name) else {
            return Ok(());
        };
        let mut options = OpenOptions::new();
        options.read(true);
        nonblocking(&mut options);
        if let Ok(file) = parent.open_with(&file_name, &options)
            && self.visible(name, &file).is_ok()
            && regular(name, &file).is_ok()
        {
            file.into_std().sync_all()?;
        }
        if let Ok(d) = parent.open(".") {
            d.into_std().sync_all()?;
        }
        Ok(())
    }

    /// Creates (or empties) a file for writing, e.g. a tool's log.
    pub fn create_file(&self, name: &str) -> io::Result<std::fs::File> {
        let (parent, file_name) = self.parent_of(name)?;
        let mut options = OpenOptions::new();
        options.write(true).create(true);
        nonblocking(&mut options);
        let file = parent.open_with(&file_name, &options)?;
        // Checked before it is emptied: a link into the system area is refused untouched.
        self.visible(name, &file)?;
        regular(name, &file)?;
        let file = file.into_std();
        file.set_len(0)?;
        Ok(file)
    }

    /// Cuts an existing file back to `len` bytes (an append-mode artifact on resume).
    pub fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let rel = relative_name(name).map_err(|e| refused(name, e))?;
        let mut options = OpenOptions::new();
        options.write(true);
        nonblocking(&mut options);
        let Some(dir) = self.existing()? else {
            return Ok(());
        };
        let file = match dir.open_with(&rel, &options) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        self.visible(name, &file)?;
        regular(name, &file)?;
        file.into_std().set_len(len)
    }

    /// The first time a process replaces `name`, removes the temporary files of it that
    /// processes no longer running left (a run killed mid-write, then resumed: the step
    /// writes the same file again). Temporary names carry the writer's pid, so a write in
    /// progress in another process sharing the workspace is left alone.
    fn sweep(&self, name: &str, parent: &Dir, file_name: &Path) {
        let Ok(mut swept) = self.swept.lock() else {
            return;
        };
        if !swept.insert(PathBuf::from(name)) {
            return;
        }
        let prefix = format!(".{}.", file_name.to_string_lossy());
        let Ok(entries) = parent.entries() else {
            return;
        };
        for entry in entries.flatten() {
            let entry_name = entry.file_name();
            let Some(pid) = entry_name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|n| n.strip_suffix(".tmp"))
                .and_then(|n| n.split_once('-'))
                .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
            else {
                continue;
            };
            if pid != std::process::id() && !process_alive(pid) {
                let _ = parent.remove_file(&entry_name);
            }
        }
    }

    /// The folder holding `name` (created if missing) and the file name.
    fn parent_of(&self, name: &str) -> io::Result<(Dir, PathBuf)> {
        let rel = relative_name(name).map_err(|e| refused(name, e))?;
        let file_name = PathBuf::from(
            rel.file_name()
                .ok_or_else(|| refused(name, NameError::Empty))?,
        );
        let parent = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => self.open_or_create_dir(p)?,
            None => self.dir()?.try_clone()?,
        };
        self.visible(name, &parent)?;
        Ok((parent, file_name))
    }

    /// When creating fails because the name exists as a link out of the workspace, the
    /// open says why (permission denied), not the creation (already exists).
    fn open_or_create_dir(&self, rel: &Path) -> io::Result<Dir> {
        let dir = self.dir()?;
        match dir.create_dir_all(rel) {
            Ok(()) => dir.open_dir(rel),
            Err(e) => match dir.open_dir(rel) {
                Ok(dir) => Ok(dir),
                Err(open) if open.kind() == io::ErrorKind::NotFound => Err(e),
                Err(open) => Err(open),
            },
        }
    }

    /// The real location of an opened handle, refused when it lies in the system area
    /// (reached through a symbolic link inside the workspace).
    fn visible<F: std::os::fd::AsRawFd>(&self, name: &str, handle: &F) -> io::Result<PathBuf> {
        let real = real_path(handle)?;
        let Ok(below) = real.strip_prefix(&self.root) else {
            return Err(hidden(name));
        };
        if below
            .components()
            .any(|c| matches!(c, Component::Normal(p) if is_system(p)))
        {
            return Err(hidden(name));
        }
        Ok(real)
    }
}

#[cfg(target_os = "linux")]
fn real_path<F: std::os::fd::AsRawFd>(handle: &F) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", handle.as_raw_fd()))
}

#[cfg(not(target_os = "linux"))]
fn real_path<F: std::os::fd::AsRawFd>(_handle: &F) -> io::Result<PathBuf> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the real location of a handle is only known on Linux",
    ))
}

#[cfg(target_os = "linux")]
fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Without `/proc`, a leftover is never taken for a dead process's.
#[cfg(not(target_os = "linux"))]
fn process_alive(_pid: u32) -> bool {
    true
}

/// Allocates `file`'s first `len` bytes (its length grows to `len`), or says why it cannot.
/// A filesystem without `fallocate` lets the write that follows find out.
fn reserve(file: &std::fs::File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: a valid descriptor owned by `file` for the call's duration.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(()),
        _ => Err(error),
    }
}

/// A FIFO planted in the workspace must not block the engine on open.
fn nonblocking(options: &mut OpenOptions) {
    use cap_std::fs::OpenOptionsExt;
    options.custom_flags(libc::O_NONBLOCK);
}

fn regular(name: &str, file: &cap_std::fs::File) -> io::Result<()> {
    if file.metadata()?.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{name}` is not a regular file"),
        ))
    }
}

fn temp_name(file_name: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(format!(
        ".{}.{}-{n}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            relative_name("./a/b.txt").unwrap(),
            PathBuf::from("a/b.txt")
        );
        assert_eq!(relative_name("/etc/passwd"), Err(NameError::Absolute));
        assert_eq!(relative_name("a/../../x"), Err(NameError::Climbs));
        assert_eq!(
            relative_name(".rondo/runs/x/events.jsonl"),
            Err(NameError::System)
        );
        assert_eq!(relative_name("./.RONDO/x"), Err(NameError::System));
        assert_eq!(relative_name("."), Err(NameError::Empty));
        assert_eq!(relative_name("a\0b"), Err(NameError::Nul));
        assert_eq!(relative_name("sub/.rondo/x"), Err(NameError::System));
    }

    /// A deferred workspace reads as empty and creates nothing until the first write;
    /// a link put where its folder would be is refused, not followed.
    #[test]
    fn a_deferred_workspace_is_made_by_its_first_write() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let ws = Workspace::deferred(&root).unwrap();
        assert!(!ws.exists("a.txt"));
        assert_eq!(ws.file_len("a.txt").unwrap(), 0);
        assert_eq!(
            ws.read("a.txt").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        ws.truncate("a.txt", 0).unwrap();
        ws.sync("a.txt").unwrap();
        assert!(!root.exists(), "reads create nothing");
        ws.write_atomic("out/a.txt", b"hi").unwrap();
        assert_eq!(std::fs::read(root.join("out/a.txt")).unwrap(), b"hi");
        assert!(ws.exists("out/a.txt"));

        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let linked = tmp.path().join("linked");
        let ws = Workspace::deferred(&linked).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        assert!(ws.write_atomic("x", b"x").is_err());
        assert!(!elsewhere.join("x").exists());
    }

    #[test]
    fn values_become_one_component() {
        assert_eq!(path_component("report"), None);
        assert_eq!(path_component("a/b\\c\0d").as_deref(), Some("a_b_c_d"));
        assert_eq!(path_component("../../etc").as_deref(), Some("______etc"));
        assert_eq!(path_component("").as_deref(), Some("_"));
        let long = "é".repeat(100);
        let cut = path_component(&long).unwrap();
        assert_eq!(cut.len(), 120);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn names_are_contained() {
        assert_eq!(contained_name("out/a.md"), "out/a.md");
        assert_eq!(contained_name("/etc//./passwd"), "etc/passwd");
        assert_eq!(contained_name("../../x"), "__/__/x");
        assert_eq!(contained_name("a\0b"), "a_b");
        assert_eq!(contained_name("./"), "_");
        let long = format!("d/{}", "x".repeat(300));
        assert_eq!(contained_name(&long), format!("d/{}", "x".repeat(240)));
        // Still named as written, for `relative_name` to refuse.
        assert_eq!(contained_name(".rondo/runs"), ".rondo/runs");
        assert_eq!(
            relative_name(&contained_name("/../.rondo")),
            Err(NameError::System)
        );
    }
}
