//! parse + compile + check of a 10,000-role workflow and of workflows/ds_star.rondo (the
//! whole-process targets are in bench/check/run.sh). The big file is made by
//! bench/check/gen.py when missing.
//!
//!     cargo bench -p rondo --bench check

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{Criterion, criterion_group, criterion_main};

// The same allocator as the `rondo` binary, so these figures match `rondo check`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use rondo::check::{self, CheckOptions};
use rondo::compile;
use rondo::source::SourceFile;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn big_file() -> PathBuf {
    let path = root().join("bench/check/big_10k.rondo");
    if !path.is_file() {
        let status = Command::new("python3")
            .arg(root().join("bench/check/gen.py"))
            .args(["--roles", "10000", "--out"])
            .arg(&path)
            .status()
            .expect("run python3 bench/check/gen.py");
        assert!(status.success(), "gen.py failed");
    }
    path
}

/// What `rondo check --offline FILE` does once the file is read.
fn check_text(file: &SourceFile) -> usize {
    let (workflow, mut diags) = compile::load(file);
    let (more, summary) = check::check(
        &workflow,
        diags.has_errors(),
        &CheckOptions { offline: true },
    );
    diags.extend(more);
    diags.error_count() + summary.roles
}

fn load(path: &Path) -> SourceFile {
    let file = SourceFile::read(path).expect("read benchmark file");
    let (workflow, diags) = compile::load(&file);
    let (more, _) = check::check(
        &workflow,
        diags.has_errors(),
        &CheckOptions { offline: true },
    );
    assert!(
        !diags.has_errors() && !more.has_errors(),
        "{} does not check clean",
        path.display()
    );
    file
}

fn benches(c: &mut Criterion) {
    let ds_star = load(&root().join("workflows/ds_star.rondo"));
    let big = load(&big_file());

    let mut group = c.benchmark_group("check");
    group.bench_function("ds_star", |b| b.iter(|| check_text(black_box(&ds_star))));
    group.sample_size(20);
    group.bench_function("big_10k_roles_30k_edges", |b| {
        b.iter(|| check_text(black_box(&big)))
    });
    group.finish();

    // The stages of the big file separately, to see where the time goes.
    let mut stages = c.benchmark_group("check_stages_10k");
    stages.sample_size(20);
    stages.bench_function("parse", |b| {
        b.iter(|| rondo::syntax::parse(black_box(&big)).0.roles.len())
    });
    stages.bench_function("parse_compile", |b| {
        b.iter(|| compile::load(black_box(&big)).0.routes.len())
    });
    let (workflow, _) = compile::load(&big);
    stages.bench_function("check_only", |b| {
        b.iter(|| {
            check::check(black_box(&workflow), false, &CheckOptions { offline: true })
                .1
                .roles
        })
    });
    stages.finish();
}

criterion_group!(check_benches, benches);
criterion_main!(check_benches);
