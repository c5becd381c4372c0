//! Confinement of local tool processes.
//!
//! A confined command is the third process of a chain, all started by one `spawn`:
//!
//! - the **keeper**, `rondo`'s child: leaves `rondo`'s session and terminal (`setsid`),
//!   enters the process-limit cgroup when there is one, unshares a PID and a mount
//!   namespace (and a user namespace when `rondo` is not root), makes every mount
//!   read-only but the writable folders, gives the namespace a minimal `/dev`, then forks
//!   the init and waits for it: its exit status is the command's. It kills the init when
//!   `rondo` itself is gone (a pipe only `rondo` holds open closes).
//! - the **init**, PID 1 of the new namespace: forks the tool and reaps every process
//!   that ends up its child until the tool exits, then exits with the tool's status; the
//!   kernel then kills whatever the tool left behind, however it detached.
//! - the **tool**: mounts its own `/proc`, bounds its processes, sets `no_new_privs`,
//!   enters the Landlock ruleset, drops every capability, and returns to `exec`.
//!
//! Everything is prepared in the parent (the ruleset, the paths, the descriptors, the
//! numbers); between `fork` and `exec` the children only make system calls, which is all
//! that is safe in a copy of a multi-threaded process.
//!
//! Reads are not restricted: a tool reads what the user can read, but sees no other
//! process (so no other process's environment, memory or descriptors), no terminal and no
//! device but `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/random` and `/dev/urandom`.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    ABI, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use libc::{c_int, c_long, c_uint};
use serde::{Deserialize, Serialize};

use crate::EnvError;

/// `LANDLOCK_CREATE_RULESET_VERSION`: the flag that asks the kernel for its ABI version.
const CREATE_RULESET_VERSION: u32 = 1;

/// The newest Landlock ABI whose rights a sandbox uses (ABI 5: `ioctl` on devices; ABI 6:
/// no signal to, and no abstract Unix socket of, a process outside the ruleset). On an
/// older kernel the crate leaves out what the kernel does not know (best effort).
const NEWEST_ABI: ABI = ABI::V6;

const OPEN_TREE_CLONE: c_uint = 1;
const AT_RECURSIVE: c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Devices a tool may open and write, and the only ones in its `/dev`.
const DEVICES: &[&CStr] = &[
    c"/dev/null",
    c"/dev/zero",
    c"/dev/full",
    c"/dev/random",
    c"/dev/urandom",
];

/// Links of a usual `/dev` into the tool's own `/proc`.
const DEV_LINKS: &[(&CStr, &CStr)] = &[
    (c"/proc/self/fd", c"/dev/fd"),
    (c"/proc/self/fd/0", c"/dev/stdin"),
    (c"/proc/self/fd/1", c"/dev/stdout"),
    (c"/proc/self/fd/2", c"/dev/stderr"),
];

/// Folders made writable (the workspace, `TMPDIR`, an install folder) and folders beneath
/// them kept read-only, at most: the children keep their descriptors on the stack.
const MAX_FOLDERS: usize = 8;

/// Unix sockets with a path covered for one call, at most (the first by path).
const MAX_SOCKETS: usize = 1024;

/// Folders searched for the sockets of daemons when an environment starts (a socket
/// bound in another network namespace, such as an engine's socket mounted into a
/// container, is not in `/proc/net/unix`), how deep, and how many entries at most.
const SOCKET_FOLDERS: &[&str] = &["/run", "/var/run", "/tmp", "/var/tmp"];
const SOCKET_DEPTH: usize = 4;
const SOCKET_ENTRIES: usize = 20_000;

/// Processes of a tool call at once, the tool included, unless its spec says otherwise.
pub const DEFAULT_MAX_PROCESSES: u32 = 512;

/// The kernel's `RESERVED_PIDS`: a namespace's PIDs start over from here once they wrap.
const RESERVED_PIDS: u64 = 300;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The capabilities by their names in `capabilities(7)`, without `CAP_`, in bit order.
const CAPABILITIES: &[&str] = &[
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// A Linux capability (`capabilities(7)`), written `net_raw` or `CAP_NET_RAW`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Capability(u8);

impl Capability {
    /// The capability named `net_raw` or `CAP_NET_RAW` (any case).
    pub fn parse(name: &str) -> Option<Capability> {
        let lower = name.trim().to_ascii_lowercase();
        let bare = lower.strip_prefix("cap_").unwrap_or(&lower);
        CAPABILITIES
            .iter()
            .position(|c| *c == bare)
            .map(|i| Capability(i as u8))
    }

    /// Its name without `CAP_`, in lower case.
    pub fn name(self) -> &'static str {
        CAPABILITIES[usize::from(self.0)]
    }

    pub(crate) fn bit(self) -> u64 {
        1 << self.0
    }
}

impl TryFrom<String> for Capability {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        Capability::parse(&name).ok_or_else(|| {
            format!("`{name}` is not a capability (a capabilities(7) name, such as `net_raw`)")
        })
    }
}

impl From<Capability> for String {
    fn from(c: Capability) -> String {
        c.name().to_string()
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the number of a tool's processes is bounded.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ProcessLimit {
    /// `RLIMIT_NPROC` in the tool's own user namespace (not root; Linux 5.14 or later,
    /// which counts processes per user namespace).
    Rlimit,
    /// A `pids` cgroup per call (root, a writable `pids` hierarchy).
    Cgroup,
    /// The PID namespace's own `pid_max` (root without a `pids` cgroup; Linux 6.14 or
    /// later): a looser bound, the limit plus the 300 PIDs the kernel reserves.
    PidMax,
}

/// What the kernel gives a local tool, as found when the environment started; each
/// field is one protection (`docs/tools.md`, "What a local tool can do").
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(default)]
pub struct Protections {
    /// The kernel's Landlock ABI version; 0 without Landlock.
    pub landlock_abi: u32,
    /// Writes beneath the workspace and `TMPDIR` only (Landlock).
    pub write_rules: bool,
    /// No `ioctl` on any device the tool opens (Landlock ABI 5).
    pub ioctl_dev: bool,
    /// No signal to, and no abstract Unix socket of, a process outside the tool's own
    /// (Landlock ABI 6).
    pub scopes: bool,
    /// Its own session: no controlling terminal, no terminal signals.
    pub new_session: bool,
    /// Its own PID namespace and `/proc`: sees only its own processes, all of which end
    /// with the call.
    pub pid_namespace: bool,
    /// Every mount read-only but the workspace and `TMPDIR` (no `chmod`, `chown`,
    /// `utimes` or xattr elsewhere), and a `/dev` of the harmless devices only.
    pub read_only_mounts: bool,
    /// Its own user namespace (when `rondo` is not root).
    pub user_namespace: bool,
    /// Started with no capability at all (when `rondo` is root).
    pub no_capabilities: bool,
    /// How its processes are bounded, if they are.
    pub process_limit: Option<ProcessLimit>,
    /// `rondo` itself cannot be read through `/proc` or traced ([`harden_self`]).
    pub rondo_not_dumpable: bool,
}

impl Protections {
    /// The protections of tools run unconfined: only the new session.
    pub(crate) fn unconfined() -> Protections {
        Protections {
            landlock_abi: landlock_abi(),
            new_session: true,
            rondo_not_dumpable: not_dumpable(),
            ..Protections::default()
        }
    }

    /// The protections not in force, one phrase each, for a warning.
    pub fn missing(&self) -> Vec<&'static str> {
        let root = is_root();
        [
            (self.write_rules, "write rules (Landlock)"),
            (
                self.ioctl_dev,
                "no ioctl on devices (Landlock ABI 5, Linux 6.10)",
            ),
            (
                self.scopes,
                "no signals out of the tool (Landlock ABI 6, Linux 6.12)",
            ),
            (self.new_session, "own session"),
            (self.pid_namespace, "own PID namespace and /proc"),
            (self.read_only_mounts, "read-only mounts and a private /dev"),
            (self.user_namespace || root, "own user namespace"),
            (self.no_capabilities || !root, "no capabilities"),
            (
                self.process_limit.is_some(),
                "a bounded number of processes",
            ),
            (self.rondo_not_dumpable, "rondo not dumpable"),
        ]
        .into_iter()
        .filter(|(ok, _)| !ok)
        .map(|(_, what)| what)
        .collect()
    }
}

/// Make `rondo` itself non-dumpable, so that no process of the same user (a tool run
/// unconfined, say) can read its environment or memory through `/proc` or `ptrace`.
/// Call first thing in `main`.
pub fn harden_self() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn not_dumpable() -> bool {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 }
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The Landlock ABI version of the running kernel; 0 when it has none (not built in,
/// or disabled at boot).
fn landlock_abi() -> u32 {
    // SAFETY: with a null attribute and size 0, the call only reports the ABI version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// The running kernel's version, `(major, minor)`.
fn kernel_version() -> (u32, u32) {
    // SAFETY: a zeroed utsname is a valid value of this plain C struct.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid out-pointer.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return (0, 0);
    }
    // SAFETY: uname NUL-terminates the release.
    let release = unsafe { CStr::from_ptr(uts.release.as_ptr()) }.to_string_lossy();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The rights that write the file system, `(file, folder)`. Every right not listed (read,
/// execute, list) stays allowed everywhere; `ioctl` on a device is handled and granted
/// nowhere.
fn write_rights() -> (BitFlags<AccessFs>, BitFlags<AccessFs>) {
    let mut dir = AccessFs::from_write(NEWEST_ABI);
    dir.remove(AccessFs::IoctlDev);
    (dir & AccessFs::from_file(NEWEST_ABI), dir)
}

/// Identity maps written when an unprivileged user needs a user namespace.
struct UserMaps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

/// The `pids` cgroup folder under which each call gets its own, when `rondo` may make one.
struct PidsCgroup {
    base: PathBuf,
    /// Folders whose processes were still dying when their call ended.
    stale: Arc<Mutex<Vec<PathBuf>>>,
}

/// What a confined tool process may do: write the folders given to [`Sandbox::new`] and
/// the harmless devices, and nothing else; see the module's documentation.
pub(crate) struct Sandbox {
    ruleset: OwnedFd,
    writable: Vec<CString>,
    read_only: Vec<CString>,
    /// The [`DEVICES`] that exist.
    devices: Vec<&'static CStr>,
    user_maps: Option<UserMaps>,
    root: bool,
    cgroup: Option<PidsCgroup>,
    protections: Protections,
    /// The writable folders, to leave a tool's own sockets alone.
    writable_paths: Vec<PathBuf>,
    /// The folder mounted at the tool's `/dev/shm` (the last of `writable`).
    shm: CString,
    /// Sockets found in [`SOCKET_FOLDERS`] when the sandbox was made.
    sockets: Vec<PathBuf>,
}

fn os_err(what: &str, e: io::Error) -> EnvError {
    EnvError::Confinement(format!("{what}: {e}"))
}

fn c_path(path: &Path) -> Result<CString, EnvError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| EnvError::Confinement(format!("{} contains a NUL byte", path.display())))
}

fn open_path(path: &Path) -> io::Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map(OwnedFd::from)
}

fn no_landlock() -> EnvError {
    EnvError::Confinement(
        "this kernel has no Landlock (Linux 5.13 or later, with `landlock` among the \
         boot-time LSMs)"
            .into(),
    )
}

/// The Landlock ruleset a tool enters: it may write beneath `writable` and to the
/// [`DEVICES`] that exist (returned too), and nothing else.
fn write_ruleset(writable: &[&Path]) -> Result<(OwnedFd, Vec<&'static CStr>), EnvError> {
    let landlock_err =
        |what: &str, e: landlock::RulesetError| EnvError::Confinement(format!("{what}: {e}"));
    let (file_rights, dir_rights) = write_rights();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_write(NEWEST_ABI))
        .and_then(|r| r.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .and_then(|r| r.create())
        .map_err(|e| landlock_err("creating a Landlock ruleset", e))?;
    for path in writable {
        if path.starts_with("/dev") || path.starts_with("/proc") {
            return Err(EnvError::Confinement(format!(
                "a tool's writable folder cannot be under /dev or /proc: {}",
                path.display()
            )));
        }
        let handle =
            open_path(path).map_err(|e| os_err(&format!("opening {}", path.display()), e))?;
        let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
        let rights = if is_dir { dir_rights } else { file_rights };
        ruleset = ruleset
            .add_rule(PathBeneath::new(handle, rights))
            .map_err(|e| landlock_err(&format!("a Landlock rule for {}", path.display()), e))?;
    }
    let mut devices = Vec::new();
    for &dev in DEVICES {
        let path = Path::new(std::ffi::OsStr::from_bytes(dev.to_bytes()));
        if let Ok(handle) = open_path(path) {
            ruleset = ruleset
                .add_rule(PathBeneath::new(handle, file_rights))
                .map_err(|e| landlock_err(&format!("a Landlock rule for {}", path.display()), e))?;
            devices.push(dev);
        }
    }
    let fd: Option<OwnedFd> = ruleset.into();
    Ok((fd.ok_or_else(no_landlock)?, devices))
}

/// How the number of a tool's processes is bounded, if it can be: `root` tells whether
/// `rondo` is root, `cgroup` whether it found a `pids` cgroup it may write.
fn process_limit(root: bool, cgroup: bool) -> Option<ProcessLimit> {
    match (root, cgroup, kernel_version()) {
        (false, _, v) if v >= (5, 14) => Some(ProcessLimit::Rlimit),
        (true, true, _) => Some(ProcessLimit::Cgroup),
        (true, false, v) if v >= (6, 14) => Some(ProcessLimit::PidMax),
        _ => None,
    }
}

impl UserMaps {
    /// Maps of the current user and group onto themselves.
    fn identity() -> UserMaps {
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        UserMaps {
            uid: format!("{uid} {uid} 1").into_bytes(),
            gid: format!("{gid} {gid} 1").into_bytes(),
        }
    }
}

impl Sandbox {
    /// A sandbox whose tools write beneath `writable` (folders that exist) and to the
    /// harmless devices; `read_only` folders (beneath a writable one) stay read-only;
    /// `shm`, a folder that exists, is their `/dev/shm` (POSIX shared memory and
    /// semaphores), writable too. Fails when the kernel has no Landlock.
    pub(crate) fn new(
        writable: &[&Path],
        read_only: &[PathBuf],
        shm: &Path,
    ) -> Result<Sandbox, EnvError> {
        let writable: Vec<&Path> = writable.iter().copied().chain([shm]).collect();
        let writable = writable.as_slice();
        let abi = landlock_abi();
        if abi == 0 {
            return Err(no_landlock());
        }
        if writable.len() > MAX_FOLDERS || read_only.len() > MAX_FOLDERS {
            return Err(EnvError::Confinement(format!(
                "at most {MAX_FOLDERS} writable and {MAX_FOLDERS} read-only folders"
            )));
        }
        let (ruleset, devices) = write_ruleset(writable)?;
        let root = is_root();
        let cgroup = if root { PidsCgroup::find() } else { None };
        let protections = Protections {
            landlock_abi: abi,
            write_rules: true,
            ioctl_dev: abi >= 5,
            scopes: abi >= 6,
            new_session: true,
            pid_namespace: true,
            read_only_mounts: true,
            user_namespace: !root,
            no_capabilities: root,
            process_limit: process_limit(root, cgroup.is_some()),
            rondo_not_dumpable: not_dumpable(),
        };
        Ok(Sandbox {
            ruleset,
            writable: writable
                .iter()
                .map(|p| c_path(p))
                .collect::<Result<_, _>>()?,
            read_only: read_only
                .iter()
                .map(|p| c_path(p))
                .collect::<Result<_, _>>()?,
            devices,
            user_maps: (!root).then(UserMaps::identity),
            root,
            cgroup,
            protections,
            writable_paths: writable.iter().map(|p| p.to_path_buf()).collect(),
            shm: c_path(shm)?,
            sockets: sockets_in_folders(),
        })
    }

    /// The Unix sockets with a path a tool could connect to, as found now: those found
    /// when the sandbox was made and those bound in `rondo`'s network namespace; not the
    /// tool's own (beneath a writable folder), nor those under `/dev` and `/proc`, which
    /// the tool gets fresh. A daemon's socket is a way out of any confinement: the Docker
    /// engine's, systemd's, a D-Bus bus, an SSH or GPG agent act for whoever connects,
    /// and for root they act as root.
    fn sockets_to_cover(&self) -> Result<Vec<CString>, EnvError> {
        let listed = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        let bound = listed.lines().skip(1).filter_map(|line| {
            let path = line.split_whitespace().nth(7)?;
            path.starts_with('/').then(|| PathBuf::from(path))
        });
        let mut found = std::collections::BTreeSet::new();
        for path in self.sockets.iter().cloned().chain(bound) {
            let Ok(real) = std::fs::canonicalize(&path) else {
                continue;
            };
            let is_socket = std::fs::symlink_metadata(&real)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            let fresh = real.starts_with("/dev") || real.starts_with("/proc");
            let own = self.writable_paths.iter().any(|w| real.starts_with(w));
            if is_socket && !fresh && !own {
                found.insert(real);
            }
        }
        found.iter().take(MAX_SOCKETS).map(|p| c_path(p)).collect()
    }

    pub(crate) fn protections(&self) -> &Protections {
        &self.protections
    }

    /// Everything one confined command needs between `fork` and `exec`: it starts in
    /// `workdir` with at most `max_processes` processes and, when `rondo` is root, the
    /// capabilities of `keep_capabilities` (a mask of [`Capability`] bits).
    pub(crate) fn launch(
        self: &Arc<Self>,
        workdir: &Path,
        max_processes: u32,
        keep_capabilities: u64,
    ) -> Result<Launch, EnvError> {
        let max = u64::from(max_processes.max(1));
        // The keeper and the init count too.
        let with_keepers = max + 2;
        let mut launch = Launch {
            sandbox: Some(self.clone()),
            workdir: c_path(workdir)?,
            nproc: 0,
            pid_max: Vec::new(),
            keep_capabilities: if self.root { keep_capabilities } else { 0 },
            cgroup: None,
            death: death_pipe(),
            sockets: self.sockets_to_cover()?,
        };
        match self.protections.process_limit {
            Some(ProcessLimit::Rlimit) => {
                // Only root may raise a hard limit; a lower one bounds the tool already.
                let mut current = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: libc::RLIM_INFINITY,
                };
                // SAFETY: `current` is a valid out-pointer.
                unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut current) };
                launch.nproc = with_keepers.min(current.rlim_max);
            }
            Some(ProcessLimit::PidMax) => {
                launch.pid_max = (RESERVED_PIDS + with_keepers).to_string().into_bytes();
            }
            Some(ProcessLimit::Cgroup) => {
                if let Some(cgroup) = &self.cgroup {
                    launch.cgroup = Some(cgroup.lease(with_keepers)?);
                }
            }
            None => {}
        }
        Ok(launch)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.sweep();
        }
    }
}

impl PidsCgroup {
    /// The `pids` cgroup `rondo` is in, if `rondo` can make and bound a child of it.
    fn find() -> Option<PidsCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let (v1, path) = own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            if controllers.split(',').any(|c| c == "pids") {
                Some((true, path))
            } else if id == "0" && controllers.is_empty() {
                Some((false, path))
            } else {
                None
            }
        })?;
        let mount = mountinfo.lines().find_map(|line| {
            let (fields, rest) = line.split_once(" - ")?;
            let mut rest = rest.split(' ');
            let (fstype, _, options) = (rest.next()?, rest.next()?, rest.next()?);
            let matches = if v1 {
                fstype == "cgroup" && options.split(',').any(|o| o == "pids")
            } else {
                fstype == "cgroup2"
            };
            let fields: Vec<&str> = fields.split(' ').collect();
            matches.then(|| (fields.get(3).copied(), fields.get(4).copied()))
        })?;
        let (Some(root), Some(point)) = mount else {
            return None;
        };
        let relative = Path::new(path).strip_prefix(root).ok()?;
        let base = Path::new(point).join(relative);
        if !v1 {
            let controllers = std::fs::read_to_string(base.join("cgroup.controllers")).ok()?;
            if !controllers.split_whitespace().any(|c| c == "pids") {
                return None;
            }
            std::fs::write(base.join("cgroup.subtree_control"), "+pids").ok()?;
        }
        let cgroup = PidsCgroup {
            base,
            stale: Arc::default(),
        };
        cgroup.sweep_dead();
        drop(cgroup.lease(1).ok()?);
        Some(cgroup)
    }

    /// A fresh cgroup allowing `max` processes, and its `cgroup.procs` opened to join it.
    fn lease(&self, max: u64) -> Result<CgroupLease, EnvError> {
        self.sweep();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = self.base.join(format!("rondo-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| EnvError::io(&dir, e))?;
        let mut lease = CgroupLease {
            dir,
            procs: None,
            stale: self.stale.clone(),
        };
        let max_file = lease.dir.join("pids.max");
        std::fs::write(&max_file, max.to_string()).map_err(|e| EnvError::io(&max_file, e))?;
        let procs_file = lease.dir.join("cgroup.procs");
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&procs_file)
            .map_err(|e| EnvError::io(&procs_file, e))?;
        lease.procs = Some(procs.into());
        Ok(lease)
    }

    /// Remove the cgroups of ended calls whose processes were still dying.
    fn sweep(&self) {
        let mut stale = self.stale.lock().unwrap_or_else(|e| e.into_inner());
        stale.retain(|dir| std::fs::remove_dir(dir).is_err() && dir.exists());
    }

    /// Remove the empty cgroups left by `rondo` processes that are gone.
    fn sweep_dead(&self) {
        let Ok(entries) = std::fs::read_dir(&self.base) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("rondo-"))
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
}

/// One call's cgroup, removed when the call has ended (or later, when its processes
/// were still dying).
struct CgroupLease {
    dir: PathBuf,
    procs: Option<OwnedFd>,
    stale: Arc<Mutex<Vec<PathBuf>>>,
}

impl Drop for CgroupLease {
    fn drop(&mut self) {
        self.procs = None;
        if std::fs::remove_dir(&self.dir).is_err() && self.dir.exists() {
            self.stale
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.dir.clone());
        }
    }
}

/// A pipe whose write end only `rondo` holds: its read end reports `rondo`'s end to the
/// keepers of running tools.
fn death_pipe() -> RawFd {
    static PIPE: OnceLock<Option<(OwnedFd, OwnedFd)>> = OnceLock::new();
    PIPE.get_or_init(|| {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` is a valid array of two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made for us alone.
        unsafe { Some((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
    })
    .as_ref()
    .map_or(-1, |(read, _)| read.as_raw_fd())
}

/// One command's confinement, entered by [`Launch::enter`] in the forked child.
pub(crate) struct Launch {
    /// `None`: unconfined, only a new session.
    sandbox: Option<Arc<Sandbox>>,
    workdir: CString,
    /// `RLIMIT_NPROC` of the tool, 0 for none.
    nproc: u64,
    /// The namespace's `pid_max`, as written to `/proc`; empty for none.
    pid_max: Vec<u8>,
    keep_capabilities: u64,
    cgroup: Option<CgroupLease>,
    death: RawFd,
    /// Unix sockets covered by `/dev/null` in the call's mount namespace.
    sockets: Vec<CString>,
}

fn check(rc: c_long) -> io::Result<c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// What a shell reports for a wait status: the exit code, or 128 + the signal.
fn status_code(status: c_int) -> c_int {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Write `message` to the command's standard error (safe after `fork`).
fn say(message: &[u8]) {
    // SAFETY: a valid buffer; a closed descriptor only yields EBADF.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
    }
}

impl Launch {
    /// A launch that only leaves `rondo`'s session, for tools run unconfined.
    pub(crate) fn unconfined() -> Launch {
        Launch {
            sandbox: None,
            workdir: CString::default(),
            nproc: 0,
            pid_max: Vec::new(),
            keep_capabilities: 0,
            cgroup: None,
            death: -1,
            sockets: Vec::new(),
        }
    }

    /// Run in the child between `fork` and `exec`: returns (to `exec`) only in the tool
    /// process; the keeper and the init it forks end with `_exit`.
    ///
    /// # Safety
    /// Call only in a freshly forked, single-threaded child: only system calls follow.
    pub(crate) unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: system calls on NUL-terminated strings, buffers and
        // descriptors owned by `self`, which outlives the call, in a child process.
        unsafe {
            check(libc::setsid().into())?;
            let Some(sandbox) = &self.sandbox else {
                return Ok(());
            };
            if let Some(procs) = self.cgroup.as_ref().and_then(|c| c.procs.as_ref()) {
                write_fd(procs.as_raw_fd(), b"0")?;
            }
            let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
            if sandbox.user_maps.is_some() {
                flags |= libc::CLONE_NEWUSER;
            }
            check(libc::unshare(flags).into())?;
            if let Some(maps) = &sandbox.user_maps {
                // A process that is not dumpable owns none of its /proc files.
                let dumpable = libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0);
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                let written = write_proc(c"/proc/self/setgroups", b"deny")
                    .and_then(|()| write_proc(c"/proc/self/uid_map", &maps.uid))
                    .and_then(|()| write_proc(c"/proc/self/gid_map", &maps.gid));
                libc::prctl(libc::PR_SET_DUMPABLE, dumpable.max(0), 0, 0, 0);
                written?;
            }
            sandbox.make_mounts(&self.sockets)?;
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            let init = check(libc::fork().into())? as libc::pid_t;
            if init == 0 {
                // PID 1 of the new namespace.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                let tool = libc::fork();
                if tool == 0 {
                    return self.confine_tool(sandbox);
                }
                if tool < 0 {
                    say(b"rondo: cannot start the tool: fork failed\n");
                    libc::_exit(126);
                }
                reap_until(tool);
            }
            // The timeout's SIGTERM is for the tool; the keeper reports how it ended.
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
            keep(init, self.death)
        }
    }

    /// The tool process, PID 2 of its namespace, before `exec`.
    unsafe fn confine_tool(&self, sandbox: &Sandbox) -> io::Result<()> {
        // SAFETY: system calls on NUL-terminated strings, buffers and
        // descriptors owned by `self` and `sandbox`, in a child process.
        unsafe {
            check(
                libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                )
                .into(),
            )?;
            if !self.pid_max.is_empty() {
                write_proc(c"/proc/sys/kernel/pid_max", &self.pid_max)?;
            }
            // The mounts above were made over the folder `spawn` entered.
            check(libc::chdir(self.workdir.as_ptr()).into())?;
            if self.nproc > 0 {
                let limit = libc::rlimit {
                    rlim_cur: self.nproc,
                    rlim_max: self.nproc,
                };
                check(libc::setrlimit(libc::RLIMIT_NPROC, &limit).into())?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            // Landlock also forbids the tool to unmount or remount anything made above.
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                sandbox.ruleset.as_raw_fd(),
                0u32,
            ))?;
            drop_capabilities(self.keep_capabilities)
        }
    }
}

/// Drop every capability but `keep` from every set, the bounding set included, so that
/// not even a root tool gets one back at `exec`.
unsafe fn drop_capabilities(keep: u64) -> io::Result<()> {
    // SAFETY: prctl and capset with integer arguments and valid buffers.
    unsafe {
        for cap in 0..64 {
            if keep & (1u64 << cap) != 0 {
                continue;
            }
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                // EINVAL: past the kernel's last capability.
                if *libc::__errno_location() == libc::EINVAL {
                    break;
                }
                return Err(io::Error::last_os_error());
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let half = |bits: u32| CapData {
            effective: bits,
            permitted: bits,
            inheritable: bits,
        };
        let data = [half(keep as u32), half((keep >> 32) as u32)];
        check(libc::syscall(
            libc::SYS_capset,
            &header as *const CapHeader,
            data.as_ptr(),
        ))?;
    }
    Ok(())
}

/// The init's loop: reap every child, and exit with the tool's status when it ends (the
/// kernel then kills the rest of the namespace).
unsafe fn reap_until(tool: libc::pid_t) -> ! {
    // SAFETY: system calls only.
    unsafe {
        // The init holds nothing: not the command's output, not `spawn`'s pipe.
        libc::syscall(libc::SYS_close_range, 0, c_uint::MAX, 0);
        loop {
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == tool {
                libc::_exit(status_code(status));
            }
            if pid < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(1);
            }
        }
    }
}

/// The keeper's loop: wait for the init and exit with its status; kill it first when
/// `rondo` is gone (the read end `death` of a pipe only `rondo` writes reports the end).
unsafe fn keep(init: libc::pid_t, death: RawFd) -> ! {
    // SAFETY: system calls only.
    unsafe {
        // Only `death` stays open: `spawn` learns the tool started when its own pipe
        // closes, and the command's output ends when the tool's processes close theirs.
        let death = if death >= 3 {
            libc::syscall(libc::SYS_close_range, 0, death as c_uint - 1, 0);
            libc::syscall(libc::SYS_close_range, death as c_uint + 1, c_uint::MAX, 0);
            death
        } else {
            libc::syscall(libc::SYS_close_range, 0, c_uint::MAX, 0);
            -1
        };
        let pidfd = libc::syscall(libc::SYS_pidfd_open, init, 0) as c_int;
        if pidfd >= 0 && death >= 0 {
            let mut fds = [
                libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: death,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            loop {
                if libc::poll(fds.as_mut_ptr(), 2, -1) < 0 {
                    continue;
                }
                if fds[0].revents != 0 {
                    break;
                }
                if fds[1].revents != 0 {
                    libc::kill(init, libc::SIGKILL);
                    break;
                }
            }
        }
        loop {
            let mut status = 0;
            let pid = libc::waitpid(init, &mut status, 0);
            if pid == init {
                libc::_exit(status_code(status));
            }
            if pid < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(1);
            }
        }
    }
}

impl Sandbox {
    /// In the keeper, in its new mount namespace: nothing it does reaches the user's;
    /// every mount turns read-only but the writable folders (bound back as they were),
    /// the read-only folders beneath them stay read-only, each of `sockets` is covered
    /// by `/dev/null` (a connection to it is refused), and `/dev` holds only the harmless
    /// devices.
    unsafe fn make_mounts(&self, sockets: &[CString]) -> io::Result<()> {
        // SAFETY: system calls on NUL-terminated strings, buffers
        // and descriptors owned by `self`, in a child process.
        unsafe {
            let none = std::ptr::null::<libc::c_char>();
            check(
                libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            let mut writable = [-1 as c_int; MAX_FOLDERS];
            for (slot, path) in writable.iter_mut().zip(&self.writable) {
                *slot = clone_tree(libc::AT_FDCWD, path, AT_RECURSIVE)?;
            }
            let shm = clone_tree(libc::AT_FDCWD, &self.shm, 0)?;
            // By path: a tree cloned must be in the namespace of the caller.
            let mut devices = [-1 as c_int; DEVICES.len()];
            for (slot, path) in devices.iter_mut().zip(&self.devices) {
                *slot = clone_tree(libc::AT_FDCWD, path, 0)?;
            }
            set_read_only(libc::AT_FDCWD, c"/", AT_RECURSIVE)?;
            for (&tree, path) in writable.iter().zip(&self.writable) {
                attach(tree, path)?;
            }
            for path in &self.read_only {
                let tree = clone_tree(libc::AT_FDCWD, path, AT_RECURSIVE)?;
                set_read_only(tree, c"", libc::AT_EMPTY_PATH as c_uint | AT_RECURSIVE)?;
                attach(tree, path)?;
            }
            for path in sockets {
                // A copy of the read-only /dev/null: nothing to connect to, and Landlock
                // keeps the tool from unmounting it.
                let null = clone_tree(libc::AT_FDCWD, c"/dev/null", 0)?;
                if let Err(e) = attach(null, path) {
                    // Gone since it was found, or out of the keeper's reach and so of
                    // the tool's too.
                    let gone = [libc::ENOENT, libc::ENOTDIR, libc::EACCES];
                    if !e.raw_os_error().is_some_and(|n| gone.contains(&n)) {
                        return Err(e);
                    }
                }
            }
            check(
                libc::mount(
                    c"tmpfs".as_ptr(),
                    c"/dev".as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NOEXEC,
                    c"mode=0755,size=64k".as_ptr().cast(),
                )
                .into(),
            )?;
            for (&tree, path) in devices.iter().zip(&self.devices) {
                let fd = check(
                    libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o666,
                    )
                    .into(),
                )?;
                libc::close(fd as c_int);
                attach(tree, path)?;
            }
            for (target, link) in DEV_LINKS {
                check(libc::symlink(target.as_ptr(), link.as_ptr()).into())?;
            }
            check(libc::mkdir(c"/dev/shm".as_ptr(), 0o1777).into())?;
            attach(shm, c"/dev/shm")?;
            set_read_only(libc::AT_FDCWD, c"/dev", 0)
        }
    }
}

/// A detached copy of the mount tree at `path` (relative to `dir`).
unsafe fn clone_tree(dir: c_int, path: &CStr, flags: c_uint) -> io::Result<c_int> {
    // SAFETY: a NUL-terminated path and integer flags.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dir,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint | flags,
        )
    })?;
    Ok(fd as c_int)
}

/// Mount the detached tree `tree` over `path`, and close it.
unsafe fn attach(tree: c_int, path: &CStr) -> io::Result<()> {
    // SAFETY: a descriptor we own, NUL-terminated paths, integer flags.
    unsafe {
        let rc = libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        );
        libc::close(tree);
        check(rc).map(drop)
    }
}

unsafe fn set_read_only(dir: c_int, path: &CStr, flags: c_uint) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a valid attribute of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// Write all of `data` to `fd` (safe after `fork`).
fn write_fd(fd: RawFd, data: &[u8]) -> io::Result<()> {
    // SAFETY: a valid buffer.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    if n != data.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Write `data` to a `/proc` file with raw system calls (safe after `fork`).
fn write_proc(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path, and a descriptor closed here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = write_fd(fd, data);
        libc::close(fd);
        written
    }
}

/// The Unix sockets in [`SOCKET_FOLDERS`], [`SOCKET_DEPTH`] levels deep, at most
/// [`SOCKET_ENTRIES`] entries looked at in each; links are not followed.
fn sockets_in_folders() -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    for folder in SOCKET_FOLDERS {
        let mut seen = 0usize;
        let mut queue = std::collections::VecDeque::from([(PathBuf::from(folder), 0)]);
        'folder: while let Some((dir, depth)) = queue.pop_front() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > SOCKET_ENTRIES {
                    break 'folder;
                }
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_socket() {
                    found.push(entry.path());
                } else if kind.is_dir() && depth + 1 < SOCKET_DEPTH {
                    queue.push_back((entry.path(), depth + 1));
                }
            }
        }
    }
    found
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

    /// The folder the environment's tools see as `/dev/shm`, made if missing.
    pub(crate) fn shm(&self) -> Result<PathBuf, EnvError> {
        let shm = self.0.join("shm");
        match std::fs::create_dir(&shm) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(EnvError::io(&shm, e)),
            _ => Ok(shm),
        }
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
