//! The results folder of a batch (`rondo eval`, `rondo swebench`, `rondo optimize`): its
//! default name, the setup saved in it to resume it, and the refusal to start a new batch
//! in a folder that holds one.

use std::path::{Path, PathBuf};

use crate::run::clock;

/// Runs at a time when none is asked for.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// `path` made absolute (resolved when it exists): a saved setup names its files so
/// that `--resume` finds them from any folder.
pub fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or(path.to_path_buf())
    })
}

/// `evals/<name>-<time>`: the default results folder of a batch.
pub fn default_dir(name: &str) -> PathBuf {
    let stamp = clock::rfc3339(clock::unix_ms())
        .replace(['-', ':'], "")
        .replace('T', "-");
    let stamp = stamp.split('.').next().unwrap_or("").to_string();
    PathBuf::from("evals").join(format!("{name}-{stamp}"))
}

/// `evals/<workflow>-optimize-<time>`: the default results folder of `rondo optimize`.
pub fn default_optimize_dir(workflow: &Path) -> PathBuf {
    let stem = workflow
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = clock::rfc3339(clock::unix_ms()).replace(['-', ':', '.'], "");
    PathBuf::from("evals").join(format!("{stem}-optimize-{stamp}"))
}

/// The setup a batch saved in its results folder `dir` (as `file`), read back to resume
/// it; `what` names the folder in the error.
pub fn saved_setup<T: serde::de::DeserializeOwned>(
    dir: &Path,
    file: &str,
    what: &str,
) -> Result<T, String> {
    let file = dir.join(file);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{} is not {what}: {e}", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// `Err` when `out` already holds a batch (its saved setup `file`), saying how to continue
/// it: a new batch never mixes with an old one.
pub fn refuse_existing(out: &Path, file: &str, what: &str, command: &str) -> Result<(), String> {
    if out.join(file).exists() {
        return Err(format!(
            "{} already holds {what}; continue it with `rondo {command} --resume {}`",
            out.display(),
            out.display()
        ));
    }
    Ok(())
}

/// `Err` when `out` already holds the runs of an optimize (`out/before`).
pub fn refuse_existing_optimize(out: &Path) -> Result<(), String> {
    if out.join("before").exists() {
        return Err(format!(
            "{} already holds an optimize run; give another --runs folder",
            out.display()
        ));
    }
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM; `false` when neither can be waited for.
pub async fn interrupted() -> bool {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = term.recv() => r.is_some(),
            };
        }
    }
    tokio::signal::ctrl_c().await.is_ok()
}
