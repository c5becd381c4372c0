//! Symbolic links planted in a workspace never lead a read or a write out of it, nor
//! into its `.rondo/` system area.

use std::os::unix::fs::symlink;

use rondo_workspace::Workspace;

fn setup() -> (tempfile::TempDir, Workspace, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws_path = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    let ws = Workspace::create(&ws_path).unwrap();
    (tmp, ws, outside)
}

#[test]
fn writes_through_a_symlinked_folder_stay_inside() {
    let (_tmp, ws, outside) = setup();
    symlink(&outside, ws.root().join("out")).unwrap();
    let refused = ws.write_atomic("out/planted.txt", b"x").unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(ws.write_atomic("out/deeper/planted.txt", b"x").is_err());
    assert!(ws.subdir("out", true).is_err());
    assert!(ws.append("out/planted.txt", b"x").is_err());
    assert!(ws.create_file("out/planted.log").is_err());
    assert!(!outside.join("planted.txt").exists());
    assert!(!outside.join("planted.log").exists());
    // No temporary file left behind either.
    let left: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn a_symlinked_file_is_replaced_by_an_atomic_write_and_refused_for_append() {
    let (_tmp, ws, outside) = setup();
    symlink(outside.join("secret.txt"), ws.root().join("report.md")).unwrap();
    ws.write_atomic("report.md", b"new").unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert_eq!(
        std::fs::read_to_string(ws.root().join("report.md")).unwrap(),
        "new"
    );
    symlink(outside.join("secret.txt"), ws.root().join("log.jsonl")).unwrap();
    assert!(ws.append("log.jsonl", b"line\n").is_err());
    assert!(ws.create_file("log.jsonl").is_err());
    assert!(ws.truncate("log.jsonl", 0).is_err());
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
}

#[test]
fn reads_and_exists_stay_inside() {
    let (_tmp, ws, outside) = setup();
    symlink("/etc/passwd", ws.root().join("passwd")).unwrap();
    symlink(&outside, ws.root().join("out")).unwrap();
    assert!(ws.read("passwd").is_err());
    assert!(ws.read("out/secret.txt").is_err());
    assert!(ws.read("/etc/passwd").is_err());
    assert!(ws.read("../outside/secret.txt").is_err());
    assert!(!ws.exists("/etc/passwd"));
    assert!(!ws.exists("../outside/secret.txt"));
    assert!(!ws.exists("passwd"));
    assert!(!ws.exists("out/secret.txt"));
    ws.write_atomic("inside.txt", b"ok").unwrap();
    assert!(ws.exists("inside.txt"));
    assert_eq!(ws.read("./inside.txt").unwrap(), b"ok");
    // A link that stays inside is followed.
    symlink("inside.txt", ws.root().join("alias.txt")).unwrap();
    assert_eq!(ws.read("alias.txt").unwrap(), b"ok");
}

#[test]
fn the_system_area_is_out_of_reach_even_through_an_inner_link() {
    let (_tmp, ws, _outside) = setup();
    let system = ws.root().join(".rondo/runs/r1");
    std::fs::create_dir_all(&system).unwrap();
    std::fs::write(system.join("events.jsonl"), "{\"seq\":1}\n").unwrap();
    symlink(".rondo/runs/r1", ws.root().join("sys")).unwrap();
    symlink(".rondo/runs/r1/events.jsonl", ws.root().join("ev")).unwrap();
    assert!(ws.write_atomic(".rondo/runs/r1/events.jsonl", b"").is_err());
    assert!(ws.write_atomic("sys/events.jsonl", b"").is_err());
    assert!(ws.create_file("ev").is_err());
    assert!(ws.append("ev", b"x").is_err());
    assert!(ws.truncate("ev", 0).is_err());
    assert!(ws.read("ev").is_err());
    assert!(!ws.exists("sys/events.jsonl"));
    assert!(!ws.exists(".rondo"));
    assert_eq!(
        std::fs::read_to_string(system.join("events.jsonl")).unwrap(),
        "{\"seq\":1}\n"
    );
}

#[test]
fn a_fifo_does_not_block_a_read() {
    let (_tmp, ws, _outside) = setup();
    let fifo = ws.root().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(ws.read("pipe").is_err());
    assert!(ws.append("pipe", b"x").is_err());
}

/// The unsynced writes (synced later, at a run's snapshot) are confined like the others,
/// and the later sync never follows a link planted in the meantime.
#[test]
fn unsynced_writes_and_their_sync_stay_inside() {
    let (_tmp, ws, outside) = setup();
    symlink(&outside, ws.root().join("out")).unwrap();
    assert!(ws.write_replace("out/planted.txt", b"x").is_err());
    assert!(ws.append_unsynced("out/planted.txt", b"x").is_err());
    assert!(!outside.join("planted.txt").exists());
    symlink(outside.join("secret.txt"), ws.root().join("report.md")).unwrap();
    ws.write_replace("report.md", b"new").unwrap();
    assert_eq!(std::fs::read(ws.root().join("report.md")).unwrap(), b"new");
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert_eq!(ws.append_unsynced("log.jsonl", b"1\n").unwrap(), 2);
    assert_eq!(ws.append_unsynced("log.jsonl", b"2\n").unwrap(), 4);
    assert_eq!(ws.file_len("log.jsonl").unwrap(), 4);
    assert_eq!(ws.file_len("missing.jsonl").unwrap(), 0);
    ws.sync("log.jsonl").unwrap();
    std::fs::remove_file(ws.root().join("log.jsonl")).unwrap();
    symlink(outside.join("secret.txt"), ws.root().join("log.jsonl")).unwrap();
    // Skipped, not followed; the length of a link out is refused.
    ws.sync("log.jsonl").unwrap();
    assert!(ws.file_len("log.jsonl").is_err());
    let left: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
    assert_eq!(left.len(), 1);
}

/// A temporary file left by a killed writer is removed by the next replacement of the
/// same file; one of a running process (this one) is left alone.
#[test]
fn a_dead_writers_temporary_file_is_removed_by_the_next_write() {
    let (_tmp, ws, _outside) = setup();
    let dead = ws.root().join(".report.md.4294967295-3.tmp");
    let live = ws
        .root()
        .join(format!(".report.md.{}-99999.tmp", std::process::id()));
    std::fs::write(&dead, "half").unwrap();
    std::fs::write(&live, "in progress").unwrap();
    ws.write_replace("report.md", b"new").unwrap();
    assert!(!dead.exists());
    assert!(live.exists());
    assert_eq!(std::fs::read(ws.root().join("report.md")).unwrap(), b"new");
}
