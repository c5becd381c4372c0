#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use rondo_memory::{CodeContextView, FileView, ViewItem};

/// The machine's Python standard library directory (the parent of `json/`).
pub fn stdlib() -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, os; print(os.path.dirname(os.path.dirname(json.__file__)))",
        ])
        .output()
        .expect("python3 must be installed to locate the standard library");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

pub fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

/// 1-based number of the first line at or after `from` whose text contains `needle`.
pub fn line_of(text: &str, needle: &str, from: usize) -> usize {
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("no line containing {needle:?} after line {from}"))
}

pub fn file<'a>(view: &'a CodeContextView, path: &str) -> &'a FileView {
    view.files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| {
            panic!(
                "{path} not rendered; files: {:?}",
                view.files.iter().map(|f| &f.path).collect::<Vec<_>>()
            )
        })
}

pub fn numbers(view: &FileView) -> Vec<usize> {
    view.items
        .iter()
        .filter_map(|i| match i {
            ViewItem::Line { number, .. } => Some(*number),
            ViewItem::Gap => None,
        })
        .collect()
}

/// Lines ascend, texts match the file, and a gap stands exactly between non-adjacent lines.
pub fn assert_well_formed(view: &FileView, text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let mut prev: Option<usize> = None;
    let mut gap_pending = false;
    assert!(
        !matches!(view.items.first(), Some(ViewItem::Gap)),
        "{}: leading gap",
        view.path
    );
    assert!(
        !matches!(view.items.last(), Some(ViewItem::Gap)),
        "{}: trailing gap",
        view.path
    );
    for item in &view.items {
        match item {
            ViewItem::Gap => {
                assert!(
                    !gap_pending,
                    "{}: two gaps in a row after {prev:?}",
                    view.path
                );
                gap_pending = true;
            }
            ViewItem::Line { number, text } => {
                assert_eq!(
                    text,
                    lines[number - 1],
                    "{}: text of line {number}",
                    view.path
                );
                if let Some(p) = prev {
                    assert!(*number > p, "{}: {number} after {p}", view.path);
                    assert_eq!(
                        gap_pending,
                        *number != p + 1,
                        "{}: gap between {p} and {number}",
                        view.path
                    );
                }
                prev = Some(*number);
                gap_pending = false;
            }
        }
    }
}

/// Renders a file view the way the documented template does, for readable failures.
pub fn show(view: &FileView) -> String {
    let mut out = format!("### File: {}\n", view.path);
    for item in &view.items {
        match item {
            ViewItem::Gap => out.push_str("...\n"),
            ViewItem::Line { number, text } => out.push_str(&format!("{number:>5} {text}\n")),
        }
    }
    out
}
