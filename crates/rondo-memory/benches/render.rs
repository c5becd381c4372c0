//! Rendering the code context of a ~5,000-line Python file with 200 chunks:
//! warm (parse cached) and cold (first render after a checkpoint restore, parse included).

use std::hint::black_box;
use std::path::Path;
use std::process::Command;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rondo_memory::{CodeContext, ScoreParams, ViewItem};

const PATH: &str = "bench.py";

/// The stdlib's `tkinter/__init__.py` (4,643 lines in 3.11, hundreds of methods),
/// or `_pydecimal.py` where tkinter is not installed.
fn write_input(dir: &Path) -> (String, usize) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, os; print(os.path.dirname(os.path.dirname(json.__file__)))",
        ])
        .output()
        .expect("python3 locates the stdlib");
    let stdlib = Path::new(String::from_utf8(out.stdout).unwrap().trim()).to_path_buf();
    let name = ["tkinter/__init__.py", "_pydecimal.py"]
        .into_iter()
        .find(|p| stdlib.join(p).exists())
        .unwrap();
    let source = std::fs::read_to_string(stdlib.join(name)).unwrap();
    std::fs::write(dir.join(PATH), &source).unwrap();
    (name.to_string(), source.lines().count())
}

fn context(root: &Path, n_lines: usize) -> CodeContext {
    let mut cc = CodeContext::new(ScoreParams {
        alpha: 1.0,
        beta: 0.5,
        gamma: 0.9,
        threshold: 0.0,
    })
    .unwrap();
    cc.begin_operation();
    let mut start = 1;
    while cc.chunks().len() < 200 && start + 3 <= n_lines {
        cc.record_access(root, PATH, &[start, start + 1, start + 3])
            .unwrap();
        start += 11;
    }
    cc
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (name, n_lines) = write_input(root);
    let mut cc = context(root, n_lines);
    let view = cc.render(root);
    let shown = view.files[0]
        .items
        .iter()
        .filter(|i| matches!(i, ViewItem::Line { .. }))
        .count();
    eprintln!(
        "input: {name}, {n_lines} lines, {} chunks, {shown} lines rendered",
        cc.chunks().len()
    );
    let checkpoint = serde_json::to_string(&cc).unwrap();

    let source = std::fs::read_to_string(root.join(PATH)).unwrap();
    c.bench_function("tree-sitter parse only", |b| {
        b.iter(|| {
            let mut parser = tree_sitter::Parser::new();
            parser
                .set_language(&tree_sitter_python::LANGUAGE.into())
                .unwrap();
            black_box(parser.parse(&source, None))
        })
    });
    c.bench_function("render 200 chunks, 4.6k lines (parse cached)", |b| {
        b.iter(|| black_box(cc.render(root)))
    });
    c.bench_function(
        "render 200 chunks, 4.6k lines (first render after restore: read + parse)",
        |b| {
            let mut edit = 0u64;
            b.iter_batched(
                || {
                    // A new trailing comment changes the content hash: no cache can answer.
                    edit += 1;
                    std::fs::write(root.join(PATH), format!("{source}# edit {edit}\n")).unwrap();
                    serde_json::from_str::<CodeContext>(&checkpoint).unwrap()
                },
                |mut cold| black_box(cold.render(root)),
                BatchSize::SmallInput,
            )
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
