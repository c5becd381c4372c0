//! The library's stages build on the ones below them only: syntax < compile < check < run
//! < eval, serve, view < cli. A lower stage that names a higher one closes a circle
//! (`rondo check` would depend on the interpreter, the viewer on the command line).

use std::path::{Path, PathBuf};

/// Stages from the bottom; the modules of one line may use each other.
const STAGES: &[&[&str]] = &[
    &["source", "script", "diagnostics", "syntax"],
    &["compile", "fmt"],
    &["check"],
    &["run"],
    &["eval", "serve", "view"],
    &["cli"],
];

/// Arrows known to go up, each to be removed by the change named beside it.
const KNOWN: &[(&str, &str)] = &[];

fn stage(module: &str) -> Option<usize> {
    STAGES.iter().position(|s| s.contains(&module))
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level modules a line names as `crate::NAME`.
fn named_modules(line: &str) -> Vec<&str> {
    line.match_indices("crate::")
        .map(|(at, _)| {
            let rest = &line[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn no_stage_names_a_stage_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut upward = Vec::new();
    let mut known_seen = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let Some(own) = path
            .strip_prefix(root.join("src"))
            .unwrap()
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|name| name.trim_end_matches(".rs"))
            .and_then(stage)
        else {
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for module in named_modules(line) {
                let Some(theirs) = stage(module) else {
                    continue;
                };
                if theirs <= own {
                    continue;
                }
                if KNOWN.contains(&(rel.as_str(), module)) {
                    known_seen.push((rel.clone(), module.to_string()));
                } else {
                    upward.push(format!("{rel}:{}: names `crate::{module}`", n + 1));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "a stage names a stage above it:\n{}",
        upward.join("\n")
    );
    for (file, module) in KNOWN {
        assert!(
            known_seen.iter().any(|(f, m)| f == file && m == module),
            "{file} no longer names `crate::{module}`: remove it from KNOWN"
        );
    }
}

/// The SSE stream answers with the routes' error type, which lives apart from the routes.
#[test]
fn serve_events_does_not_name_the_routes_module() {
    let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve/events.rs");
    let text = std::fs::read_to_string(events).unwrap();
    let named: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| l.contains("api::"))
        .collect();
    assert!(named.is_empty(), "serve/events.rs names api: {named:?}");
}
