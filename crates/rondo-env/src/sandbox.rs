//! Confinement of local tool processes: Landlock write rules, and a read-only view of
//! folders beneath the workspace that hold the engine's records.
//!
//! Everything is prepared in the parent (the ruleset, the paths, the mount flags); the
//! forked child only makes system calls ([`Sandbox::enter`]), which is all that is safe
//! between `fork` and `exec` in a multi-threaded process.
//!
//! Reads are not restricted: a tool reads what the user can read. What the engine
//! records is redacted of every key a profile names, so reading the system area leaks no
//! secret; writing it is what would corrupt a run, and that is denied.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::EnvError;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: u32 = 1;

const FS_WRITE_FILE: u64 = 1 << 1;
const FS_REMOVE_DIR: u64 = 1 << 4;
const FS_REMOVE_FILE: u64 = 1 << 5;
const FS_MAKE_CHAR: u64 = 1 << 6;
const FS_MAKE_DIR: u64 = 1 << 7;
const FS_MAKE_REG: u64 = 1 << 8;
const FS_MAKE_SOCK: u64 = 1 << 9;
const FS_MAKE_FIFO: u64 = 1 << 10;
const FS_MAKE_BLOCK: u64 = 1 << 11;
const FS_MAKE_SYM: u64 = 1 << 12;
/// ABI 2: link or rename into another folder.
const FS_REFER: u64 = 1 << 13;
/// ABI 3: truncate, `O_TRUNC`.
const FS_TRUNCATE: u64 = 1 << 14;

/// Devices any program may write to, wherever it runs.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of the running kernel; 0 when it has none (not built in,
/// or disabled at boot).
fn landlock_abi() -> u32 {
    // SAFETY: with a null attribute and size 0, the call only reports the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// The rights that write the file system, as far as the kernel's ABI knows them. Every
/// right not listed (read, execute, list) stays allowed everywhere.
fn write_rights(abi: u32) -> (u64, u64) {
    let mut file = FS_WRITE_FILE;
    let mut dir = FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM;
    if abi >= 2 {
        dir |= FS_REFER;
    }
    if abi >= 3 {
        file |= FS_TRUNCATE;
        dir |= FS_TRUNCATE;
    }
    (file, dir)
}

/// A folder beneath a writable one that is mounted read-only for the tool.
struct ReadOnlyMount {
    path: CString,
    /// Flags of the mount it lives in that a user namespace may not drop on remount.
    kept_flags: libc::c_ulong,
}

/// Identity maps written when an unprivileged user needs a user namespace for the
/// private mount namespace.
struct UserMaps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

/// What a confined tool process may write: the folders given to [`Sandbox::new`], the
/// write-only devices, and nothing else; folders listed as read-only are mounted
/// read-only in a private mount namespace of the process.
pub(crate) struct Sandbox {
    ruleset: OwnedFd,
    read_only: Vec<ReadOnlyMount>,
    user_maps: Option<UserMaps>,
}

fn os_err(what: &str, e: io::Error) -> EnvError {
    EnvError::Confinement(format!("{what}: {e}"))
}

fn c_path(path: &Path) -> Result<CString, EnvError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| EnvError::Confinement(format!("{} contains a NUL byte", path.display())))
}

/// Flags of the mount holding `path` that are locked in a user namespace.
fn kept_flags(path: &CString) -> Result<libc::c_ulong, EnvError> {
    // SAFETY: `path` is NUL-terminated and `st` is a valid out-pointer.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(os_err("statvfs", io::Error::last_os_error()));
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

impl Sandbox {
    /// A ruleset allowing writes beneath `writable` (folders that exist) and to the
    /// usual devices; `read_only` folders (beneath a writable one) are remounted
    /// read-only for the tool. Fails when the kernel has no Landlock.
    pub(crate) fn new(writable: &[&Path], read_only: &[PathBuf]) -> Result<Sandbox, EnvError> {
        let abi = landlock_abi();
        if abi == 0 {
            return Err(EnvError::Confinement(
                "this kernel has no Landlock (Linux 5.13 or later, with `landlock` among the \
                 boot-time LSMs)"
                    .into(),
            ));
        }
        let (file_rights, dir_rights) = write_rights(abi);
        let attr = RulesetAttr {
            handled_access_fs: dir_rights,
        };
        // SAFETY: `attr` is a valid ruleset attribute of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(os_err(
                "creating a Landlock ruleset",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: the kernel just returned this descriptor (close-on-exec) to us alone.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let devices = DEVICES.iter().map(Path::new);
        for path in writable.iter().copied().chain(devices) {
            let is_device = !writable.contains(&path);
            let handle = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
                .open(path)
            {
                Ok(f) => f,
                Err(_) if is_device => continue,
                Err(e) => return Err(os_err(&format!("opening {}", path.display()), e)),
            };
            let is_dir = handle.metadata().is_ok_and(|m| m.is_dir());
            let rule = PathBeneathAttr {
                allowed_access: if is_dir { dir_rights } else { file_rights },
                parent_fd: handle.as_raw_fd(),
            };
            // SAFETY: `rule` is a valid path-beneath attribute and both fds are open.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset.as_raw_fd(),
                    RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0u32,
                )
            };
            if rc != 0 {
                return Err(os_err(
                    &format!("a Landlock rule for {}", path.display()),
                    io::Error::last_os_error(),
                ));
            }
        }
        let read_only = read_only
            .iter()
            .map(|p| {
                let path = c_path(p)?;
                let kept_flags = kept_flags(&path)?;
                Ok(ReadOnlyMount { path, kept_flags })
            })
            .collect::<Result<Vec<_>, EnvError>>()?;
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let user_maps = (uid != 0 && !read_only.is_empty()).then(|| UserMaps {
            uid: format!("{uid} {uid} 1").into_bytes(),
            gid: format!("{gid} {gid} 1").into_bytes(),
        });
        Ok(Sandbox {
            ruleset,
            read_only,
            user_maps,
        })
    }

    /// Confine the calling process; run in the child between `fork` and `exec`, so it
    /// only makes system calls (no allocation, no lock).
    ///
    /// # Safety
    /// Call only in a freshly forked, single-threaded child.
    pub(crate) unsafe fn enter(&self) -> io::Result<()> {
        fn check(rc: libc::c_long) -> io::Result<()> {
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
        // SAFETY (all blocks below): plain system calls on NUL-terminated strings and
        // descriptors owned by `self`, which outlives the call.
        if !self.read_only.is_empty() {
            let flags = match self.user_maps {
                Some(_) => libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
                None => libc::CLONE_NEWNS,
            };
            check(unsafe { libc::unshare(flags) }.into())?;
            if let Some(maps) = &self.user_maps {
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", &maps.uid)?;
                write_proc(c"/proc/self/gid_map", &maps.gid)?;
            }
            let none = std::ptr::null::<libc::c_char>();
            // Nothing mounted here propagates back to the user's namespace.
            check(
                unsafe {
                    libc::mount(
                        none,
                        c"/".as_ptr(),
                        none,
                        libc::MS_REC | libc::MS_SLAVE,
                        std::ptr::null(),
                    )
                }
                .into(),
            )?;
            for m in &self.read_only {
                let p = m.path.as_ptr();
                check(
                    unsafe {
                        libc::mount(p, p, none, libc::MS_BIND | libc::MS_REC, std::ptr::null())
                    }
                    .into(),
                )?;
                let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | m.kept_flags;
                check(unsafe { libc::mount(none, p, none, flags, std::ptr::null()) }.into())?;
            }
        }
        // Landlock also forbids the tool to unmount the read-only view made above.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())?;
        check(unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            )
        })
    }
}

/// Write `data` to a `/proc` file with raw system calls (safe after `fork`).
fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path, a valid buffer, and a descriptor closed here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// A private temporary folder for one environment's tools (`TMPDIR`), removed on drop.
pub(crate) struct PrivateTmp(PathBuf);

impl PrivateTmp {
    pub(crate) fn new() -> Result<PrivateTmp, EnvError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let pid = std::process::id();
        let mut last = None;
        for n in 0..64u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = base.join(format!("rondo-tool-{pid}-{nanos:x}-{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let path = std::fs::canonicalize(&path).unwrap_or(path);
                    return Ok(PrivateTmp(path));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(EnvError::io(&path, e)),
            }
        }
        Err(EnvError::io(
            base,
            last.unwrap_or_else(|| io::Error::other("no free name")),
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
