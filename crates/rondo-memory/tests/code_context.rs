//! Referral scores, activity bookkeeping, citations and bad input.

mod common;

use std::path::Path;

use common::{assert_well_formed, file, numbers, show};
use rondo_memory::{CodeContext, CodeContextError, ScoreParams, ViewItem, referral_score};

const MODULE: &str = "import os


class Greeter:
    def greet(self, name):
        if name:
            return \"hi \" + name
        return \"hi\"


def helper(x):
    for i in range(x):
        print(i)
    return x
";

fn params(alpha: f64, beta: f64, gamma: f64, threshold: f64) -> ScoreParams {
    ScoreParams {
        alpha,
        beta,
        gamma,
        threshold,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn referral_score_matches_hand_computation() {
    let a = [1, 0, 1];
    let r = [0, 2, 1];
    // (α·A₁+β·R₁)γ² + (α·A₂+β·R₂)γ + (α·A₃+β·R₃)
    let cases = [
        ((1.0, 0.5, 0.9), 1.0 * 0.81 + 1.0 * 0.9 + 1.5),
        ((2.0, 1.0, 0.5), 2.0 * 0.25 + 2.0 * 0.5 + 3.0),
        ((1.0, 1.0, 1.0), 2.0 + 3.0),
        ((1.0, 1.0, 0.0), 2.0),
        ((0.0, 3.0, 0.8), 3.0 * 2.0 * 0.8 + 3.0),
    ];
    for ((alpha, beta, gamma), expected) in cases {
        let got = referral_score(&a, &r, alpha, beta, gamma);
        assert!(
            close(got, expected),
            "α={alpha} β={beta} γ={gamma}: {got} != {expected}"
        );
    }
    assert_eq!(referral_score(&[], &[], 1.0, 1.0, 0.9), 0.0);
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mod.py"), MODULE).unwrap();
    dir
}

/// Three operations: open `greet`, cite it twice and `helper` once, open `helper` whole and an import.
fn three_operations(cc: &mut CodeContext, root: &Path) {
    assert!(matches!(
        cc.record_access(root, "mod.py", &[7]),
        Err(CodeContextError::NoOperation)
    ));
    assert_eq!(cc.begin_operation(), 1);
    cc.record_access(root, "mod.py", &[7]).unwrap();

    cc.begin_operation();
    let thought = "It returns early[1](mod.py:7) inside the loop[2](./mod.py:13), see again[3](mod.py:7); \
                   ignored: [4](mod.py:99) [5](missing.py:1) [6](/etc/passwd:1) [7](mod.py:0)";
    let report = cc.record_citations(root, thought).unwrap();
    assert_eq!(
        report
            .counted
            .iter()
            .map(|(c, idx)| (c.index, *idx))
            .collect::<Vec<_>>(),
        vec![(1, 0), (2, 1), (3, 0)]
    );
    let reasons: Vec<&str> = report.skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(report.skipped.len(), 4, "{reasons:?}");
    assert!(
        reasons[0].contains("outside the file (1-14)"),
        "{reasons:?}"
    );
    assert!(reasons[1].starts_with("cannot read file"), "{reasons:?}");
    assert!(reasons[2].contains("absolute"), "{reasons:?}");

    cc.begin_operation();
    let report = cc
        .record_access(root, "mod.py", &[1, 11, 12, 13, 14, 40])
        .unwrap();
    assert_eq!(report.chunks, vec![2, 1]);
    assert_eq!(report.skipped.len(), 1);
}

#[test]
fn activity_vectors_and_scores_through_operations() {
    let dir = workspace();
    let root = dir.path();
    let mut cc = CodeContext::new(params(1.0, 0.5, 0.9, 1.2)).unwrap();
    three_operations(&mut cc, root);

    let chunks = cc.chunks();
    let keys: Vec<_> = chunks
        .iter()
        .map(|c| (c.class.as_deref(), c.function.as_deref()))
        .collect();
    assert_eq!(
        keys,
        vec![
            (Some("Greeter"), Some("greet")),
            (None, Some("helper")),
            (None, None)
        ]
    );
    assert_eq!(chunks[0].activity.accessed, vec![1, 0, 0]);
    assert_eq!(chunks[0].activity.referred, vec![0, 2, 0]);
    assert_eq!(chunks[1].activity.accessed, vec![0, 0, 1]);
    assert_eq!(chunks[1].activity.referred, vec![0, 1, 0]);
    assert_eq!(chunks[2].activity.accessed, vec![0, 0, 1]);
    assert_eq!(chunks[2].activity.referred, vec![0, 0, 0]);
    assert_eq!(chunks[1].lines, vec![11, 12, 13, 14]);
    assert!(chunks[1].whole_function, "all of helper was opened");
    assert!(!chunks[0].whole_function);

    let view = cc.render(root);
    let scores: Vec<f64> = cc.chunks().iter().map(|c| c.activity.score).collect();
    // greet: 1·0.81 + 0.5·2·0.9; helper: 0.5·1·0.9 + 1; module: 1.
    for (got, expected) in scores.iter().zip([1.71, 1.45, 1.0]) {
        assert!(close(*got, expected), "{scores:?}");
    }
    // The module-level chunk (1.0) is under the threshold 1.2: `import os` is not shown.
    let fv = file(&view, "mod.py");
    assert_well_formed(fv, MODULE);
    assert_eq!(
        numbers(fv),
        vec![4, 5, 6, 7, 11, 12, 13, 14],
        "{}",
        show(fv)
    );
    assert_eq!(fv.items[4], ViewItem::Gap);

    // Other weights: the module chunk now scores 1 > 0.9 and shows.
    let mut cc = CodeContext::new(params(1.0, 2.0, 0.5, 0.9)).unwrap();
    three_operations(&mut cc, root);
    let view = cc.render(root);
    let scores: Vec<f64> = cc.chunks().iter().map(|c| c.activity.score).collect();
    for (got, expected) in scores.iter().zip([0.25 + 2.0, 1.0 + 1.0, 1.0]) {
        assert!(close(*got, expected), "{scores:?}");
    }
    assert_eq!(
        numbers(file(&view, "mod.py")),
        vec![1, 4, 5, 6, 7, 11, 12, 13, 14]
    );

    // Nothing above a high threshold: no file at all.
    let mut cc = CodeContext::new(params(1.0, 0.5, 0.9, 10.0)).unwrap();
    three_operations(&mut cc, root);
    assert!(cc.render(root).files.is_empty());
}

#[test]
fn citation_of_a_line_outside_the_chunks_joins_its_function_chunk() {
    let dir = workspace();
    let root = dir.path();
    let mut cc = CodeContext::new(params(1.0, 1.0, 0.9, 0.0)).unwrap();
    cc.begin_operation();
    cc.record_access(root, "mod.py", &[7]).unwrap();
    cc.begin_operation();
    cc.record_citations(root, "the fallback[1](mod.py:8)")
        .unwrap();
    assert_eq!(cc.chunks().len(), 1);
    assert_eq!(cc.chunks()[0].lines, vec![7, 8]);
    assert_eq!(cc.chunks()[0].activity.referred, vec![0, 1]);
}

#[test]
fn bad_input_is_reported_not_fatal() {
    let dir = workspace();
    let root = dir.path();
    for bad in [
        params(f64::NAN, 1.0, 0.9, 0.0),
        params(1.0, -1.0, 0.9, 0.0),
        params(1.0, 1.0, 1.5, 0.0),
    ] {
        assert!(matches!(
            CodeContext::new(bad),
            Err(CodeContextError::InvalidParams(_))
        ));
    }
    let mut cc = CodeContext::new(params(1.0, 1.0, 0.9, 0.0)).unwrap();
    cc.begin_operation();
    assert!(matches!(
        cc.record_access(root, "nope.py", &[1]),
        Err(CodeContextError::Read { .. })
    ));
    assert!(matches!(
        cc.record_access(root, "../mod.py", &[1]),
        Err(CodeContextError::InvalidPath { .. })
    ));
    let report = cc.record_access_range(root, "mod.py", 12, 500).unwrap();
    assert_eq!(cc.chunks()[0].lines, vec![12, 13, 14]);
    assert!(
        report.skipped[0].reason.contains("clamped"),
        "{:?}",
        report.skipped
    );
    std::fs::write(root.join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    cc.record_access(root, "notes.txt", &[1, 3]).unwrap();

    // The file shrinks, then a file disappears: rendering skips what it cannot show.
    std::fs::write(root.join("mod.py"), "def helper(x):\n    return x\n").unwrap();
    let view = cc.render(root);
    assert_eq!(numbers(file(&view, "mod.py")), Vec::<usize>::new());
    assert_eq!(view.skipped.len(), 3, "{:?}", view.skipped);
    assert!(
        view.skipped
            .iter()
            .all(|s| s.reason.contains("outside the file (1-2)"))
    );
    assert_eq!(numbers(file(&view, "notes.txt")), vec![1, 3]);
    std::fs::remove_file(root.join("notes.txt")).unwrap();
    let view = cc.render(root);
    assert!(
        view.skipped
            .iter()
            .any(|s| s.path == "notes.txt" && s.reason.starts_with("cannot read file"))
    );
}

#[test]
fn parse_cache_is_reused_until_the_content_changes() {
    let dir = workspace();
    let root = dir.path();
    let mut cc = CodeContext::new(params(1.0, 1.0, 0.9, 0.0)).unwrap();
    cc.begin_operation();
    cc.record_access(root, "mod.py", &[7, 13]).unwrap();
    let first = cc.render(root);
    cc.render(root);
    assert_eq!(cc.parse_count(), 1);
    // A context restored from a checkpoint reuses the process-wide parse.
    let mut restored: CodeContext =
        serde_json::from_str(&serde_json::to_string(&cc).unwrap()).unwrap();
    assert_eq!(restored.render(root), first);
    assert_eq!(restored.parse_count(), 0);
    std::fs::write(root.join("mod.py"), format!("# edited\n{MODULE}")).unwrap();
    let edited = cc.render(root);
    assert_eq!(cc.parse_count(), 2);
    // Same line numbers, new content: line 7 is now `if name:`.
    assert_ne!(first, edited);
    assert_eq!(numbers(file(&edited, "mod.py")), vec![5, 6, 7, 12, 13]);
}

/// A whole-function chunk renders the function as the file has it now, and only it: after an
/// edit moves `helper` down four lines, its old line numbers (11-14, now function `other`) are
/// not shown beside it.
#[test]
fn a_whole_function_after_an_edit_is_the_function_alone() {
    let dir = workspace();
    let root = dir.path();
    let mut cc = CodeContext::new(params(1.0, 1.0, 0.9, 0.0)).unwrap();
    cc.begin_operation();
    cc.record_access(root, "mod.py", &[11, 12, 13, 14]).unwrap();
    assert!(cc.chunks()[0].whole_function);
    let edited = MODULE.replace(
        "def helper(x):",
        "def other():\n    return 1\n\n\ndef helper(x):",
    );
    std::fs::write(root.join("mod.py"), edited).unwrap();
    let view = cc.render(root);
    // helper is now lines 15-18; lines 11-14 hold `other` and blank lines.
    assert_eq!(numbers(file(&view, "mod.py")), vec![15, 16, 17, 18]);
}
