//! The shipped workflows (`workflows/*.rondo`): each checks clean — no error and no
//! warning — its DOT and Mermaid drawings are snapshot-tested (`tests/snapshots/`), and
//! drawing twice, or compiling twice, gives identical bytes.
//!
//! The environment tier (provider API keys) is skipped, as with `rondo check --offline`:
//! the keys are not part of the files.

mod common;

use std::path::{Path, PathBuf};

use rondo::render::{self, Format};
use rondo::source::SourceFile;

fn workflow_path(name: &str) -> PathBuf {
    Path::new("workflows").join(format!("{name}.rondo"))
}

fn checks_clean(name: &str) {
    let path = workflow_path(name);
    let (file, _, diags, summary) = common::check_path(&path, true);
    let sorted = diags.sorted();
    assert!(
        sorted.is_empty(),
        "{} is not clean ({} error(s), {} warning(s)):\n{}",
        path.display(),
        diags.error_count(),
        diags.warning_count(),
        rondo::diagnostics::render_human(&file, &sorted, false, 100)
    );
    assert!(summary.roles > 0, "{}: no roles", path.display());
    assert!(summary.exits > 0, "{}: no exit is reached", path.display());
}

fn drawing(name: &str, format: Format) -> String {
    let path = workflow_path(name);
    let (_, workflow, _, _) = common::check_path(&path, true);
    render::render(&workflow, format).expect("dot and mermaid never fail")
}

fn snapshot(name: &str, format: Format) {
    // A drawing of a broken workflow is not worth keeping: be clean first.
    checks_clean(name);
    let text = drawing(name, format);
    let suffix = match format {
        Format::Dot => "dot",
        Format::Mermaid => "mermaid",
        Format::Svg => "svg",
    };
    insta::with_settings!({
        prepend_module_to_snapshot => false,
        description => format!("rondo graph {} --format {suffix}", workflow_path(name).display()),
        omit_expression => true,
    }, {
        insta::assert_snapshot!(format!("{name}_{suffix}"), text);
    });
}

fn deterministic(name: &str) {
    let path = workflow_path(name);
    let (_, workflow, _, _) = common::check_path(&path, true);
    for format in [Format::Dot, Format::Mermaid] {
        let first = render::render(&workflow, format).expect("render");
        let second = render::render(&workflow, format).expect("render");
        assert_eq!(first.as_bytes(), second.as_bytes(), "{format:?} twice");
        // A fresh compile of the same text draws the same bytes too.
        let again = drawing(name, format);
        assert_eq!(
            first.as_bytes(),
            again.as_bytes(),
            "{format:?} after recompiling"
        );
    }
    // The compiled workflow itself serializes identically (`rondo dump`).
    let text = std::fs::read_to_string(&path).expect("read");
    let one =
        serde_json::to_string(&rondo::compile::load(&SourceFile::new(&path, text.as_str())).0)
            .expect("dump");
    let two =
        serde_json::to_string(&rondo::compile::load(&SourceFile::new(&path, text.as_str())).0)
            .expect("dump");
    assert_eq!(one, two, "dump twice");
}

macro_rules! workflow_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use rondo::render::Format;

                #[test]
                fn checks_clean() {
                    super::checks_clean(stringify!($name));
                }

                #[test]
                fn dot_snapshot() {
                    super::snapshot(stringify!($name), Format::Dot);
                }

                #[test]
                fn mermaid_snapshot() {
                    super::snapshot(stringify!($name), Format::Mermaid);
                }

                #[test]
                fn rendering_is_deterministic() {
                    super::deterministic(stringify!($name));
                }
            }
        )*

        /// A new file in `workflows/` must be added to the list above.
        #[test]
        fn every_workflow_file_is_tested() {
            let tested: Vec<String> = vec![$(format!("{}.rondo", stringify!($name))),*];
            let found: Vec<String> = common::workflow_files()
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            let mut tested_sorted = tested.clone();
            tested_sorted.sort();
            assert_eq!(found, tested_sorted, "add new workflows to `workflow_tests!` in tests/workflows.rs");
        }
    };
}

workflow_tests!(catmaster, ds_star, iter, llm_ide, micro_agent);
