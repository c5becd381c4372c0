//! `rondo check` on files as large as the source limit allows (issue 21, section 7): 100,000
//! exits, roles or routes check, and an expression nested 100,000 deep or 100,000 terms long
//! stops at a located limit error; each within 1 GiB of memory (the peak resident size the
//! kernel reports for the process). Timing is `bench/check_scale.sh`'s business, not a
//! test's: the old code took quadratic time and memory here (100,000 exits did not finish,
//! 100,000 roles needed 1.9 GB).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The peak resident size a process may reach.
const MAX_RSS_KIB: i64 = 1 << 20;

struct Checked {
    code: Option<i32>,
    output: String,
    max_rss_kib: i64,
}

fn check(file: &Path) -> Checked {
    let out_file = file.with_extension("out");
    let child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["check", "--offline"])
        .arg(file)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(file.with_extension("err")).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // A hang guard, not a timing assertion: the quadratic code did not finish at all.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid value to be filled in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, whose pid we hold; the pointers are valid.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        let code = (waited == pid && libc::WIFEXITED(status)).then(|| libc::WEXITSTATUS(status));
        let _ = tx.send((code, usage.ru_maxrss));
    });
    let (code, max_rss_kib) = rx
        .recv_timeout(Duration::from_secs(900))
        .unwrap_or_else(|_| {
            // SAFETY: signals our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("rondo check {} did not finish", file.display())
        });
    std::mem::forget(child);
    let output = format!(
        "{}{}",
        std::fs::read_to_string(&out_file).unwrap_or_default(),
        std::fs::read_to_string(file.with_extension("err")).unwrap_or_default()
    );
    Checked {
        code,
        output,
        max_rss_kib,
    }
}

fn generate(dir: &Path, kind: &str, n: usize) -> std::path::PathBuf {
    let file = dir.join(format!("{kind}_{n}.rondo"));
    let generator = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/check_scale/gen.py");
    let status = Command::new("python3")
        .arg(generator)
        .args([kind, &n.to_string()])
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::metadata(&file).unwrap().len() <= rondo::source::MAX_SOURCE_BYTES,
        "{kind} {n} is over the source limit"
    );
    file
}

fn head(text: &str) -> &str {
    &text[..text.floor_char_boundary(3000)]
}

#[test]
fn the_largest_files_check_or_stop_at_a_located_limit() {
    let dir = tempfile::tempdir().unwrap();
    // (kind, size, exit code, what the output must hold)
    let cases = [
        ("exits", 100_000, 0, "100001 exits"),
        ("roles", 100_000, 0, "100000 roles"),
        ("routes", 100_000, 0, "200002 routes"),
        ("deep", 100_000, 1, "rondo::syntax::too_deep"),
        ("chain", 100_000, 1, "more than 128 levels"),
    ];
    for (kind, n, code, needle) in cases {
        let file = generate(dir.path(), kind, n);
        let ran = check(&file);
        assert_eq!(ran.code, Some(code), "{kind}: {}", head(&ran.output));
        assert!(
            ran.output.contains(needle),
            "{kind}: {needle} not in {}",
            head(&ran.output)
        );
        if code != 0 {
            // Located: the file, a line and a column.
            let located = format!("{}:", file.display());
            assert!(
                ran.output.contains(&located),
                "{kind}: {}",
                head(&ran.output)
            );
        }
        assert!(
            ran.max_rss_kib < MAX_RSS_KIB,
            "{kind} {n}: {} MiB at its peak",
            ran.max_rss_kib >> 10
        );
    }
}
