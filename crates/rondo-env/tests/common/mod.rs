#![allow(dead_code)]
//! Shared helpers: the test image, the sample tool spec, process checks.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rondo_env::ToolSpec;

pub const IMAGE: &str = "rondo-test-base:latest";

pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn pyfind_spec() -> ToolSpec {
    let root = project_root();
    ToolSpec::from_file(&root.join("config/tools/pyfind.yaml"), &root).unwrap()
}

static IMAGE_LOCK: Mutex<bool> = Mutex::new(false);

/// Whether Docker tests can run. A missing engine fails the test unless the developer lists
/// `docker` in `RONDO_TEST_SKIP`, and then the skip is printed; a missing image is built.
pub async fn docker_ready() -> bool {
    let docker = match rondo_env::connect().await {
        Ok(d) => d,
        Err(e) => {
            let skipped = std::env::var("RONDO_TEST_SKIP")
                .is_ok_and(|list| list.split(',').any(|e| e.trim() == "docker"));
            assert!(
                skipped,
                "this test needs a Docker engine ({e}); RONDO_TEST_SKIP=docker skips it"
            );
            let test = std::thread::current().name().unwrap_or("?").to_string();
            eprintln!("SKIPPED {test}: no Docker engine (RONDO_TEST_SKIP): {e}");
            return false;
        }
    };
    if docker.inspect_image(IMAGE).await.is_ok() {
        return true;
    }
    let mut built = IMAGE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !*built {
        let status = std::process::Command::new(project_root().join("scripts/build-test-image.sh"))
            .status()
            .expect("running scripts/build-test-image.sh");
        assert!(status.success(), "scripts/build-test-image.sh failed");
        *built = true;
    }
    true
}

/// The live (not zombie) processes whose command line holds `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if process_alive(pid) && String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Alive and not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            state != Some("Z")
        }
        Err(_) => false,
    }
}

pub fn unique(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}
