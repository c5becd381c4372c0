//! `rondo optimize` and roles that take demos, through the real binary with the scripted
//! provider: the example project `tests/fixtures/optimize` (three of its four training
//! cases pass) copied to a temporary folder.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;

use common::{assert_success, events, json, of_kind, root, run_with, stderr};

fn copy_project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let from = root().join("tests/fixtures/optimize");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", from.display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let workflow = dir.path().join("qa.rondo");
    (dir, workflow)
}

fn optimize(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir)
        .args(["optimize", "-q", "qa.rondo", "--dataset", "train.jsonl"])
        .args(["--role", "answer"])
        .args(args)
        .output()
        .unwrap()
}

fn questions(demos: &Value) -> Vec<String> {
    demos
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["inputs"]["question"].as_str().unwrap().to_string())
        .collect()
}

/// The prompt the `answer` role was sent in a run.
fn prompt(run_dir: &Path) -> String {
    let responses = of_kind(&events(run_dir), "llm_response");
    responses[0]["prompt"].as_str().unwrap().to_string()
}

#[test]
fn demos_come_only_from_passing_cases_and_respect_max_demos() {
    let (dir, _) = copy_project();
    let out = optimize(dir.path(), &["--max-demos", "10", "--runs", "all"]);
    assert_success(&out);
    let demos = json(dir.path().join("opt/answer_demos.json"));
    // t3 expects "32" and the scripted reply says 42: it failed, so it gives no demo.
    assert_eq!(
        questions(&demos),
        ["six times seven?", "forty plus two?", "fifty minus eight?"]
    );
    for d in demos.as_array().unwrap() {
        assert_eq!(d["reply"], "The answer is 42.");
    }
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("before") && table.contains("after"),
        "{table}"
    );
    assert!(
        table.contains("3 demos chosen of 3 passing cases"),
        "{table}"
    );

    let out = optimize(dir.path(), &["--max-demos", "2", "--runs", "two"]);
    assert_success(&out);
    let demos = json(dir.path().join("opt/answer_demos.json"));
    assert_eq!(demos.as_array().unwrap().len(), 2);
    for q in questions(&demos) {
        assert_ne!(q, "two to the fifth?");
    }
}

#[test]
fn the_same_seed_chooses_the_same_demos() {
    let (dir, _) = copy_project();
    let mut files = Vec::new();
    for (i, seed) in ["7", "7"].iter().enumerate() {
        let out_file = format!("demos{i}.json");
        let runs = format!("runs{i}");
        let out = optimize(
            dir.path(),
            &[
                "--max-demos",
                "1",
                "--seed",
                seed,
                "--out",
                &out_file,
                "--runs",
                &runs,
            ],
        );
        assert_success(&out);
        files.push(std::fs::read(dir.path().join(&out_file)).unwrap());
    }
    assert_eq!(files[0], files[1]);
    // The seed does choose: across seeds, more than one of the three candidates is picked.
    let mut picked = std::collections::BTreeSet::new();
    for seed in 0..6 {
        let out_file = format!("seed{seed}.json");
        let runs = format!("seedruns{seed}");
        let out = optimize(
            dir.path(),
            &[
                "--max-demos",
                "1",
                "--seed",
                &seed.to_string(),
                "--out",
                &out_file,
                "--runs",
                &runs,
            ],
        );
        assert_success(&out);
        picked.extend(questions(&json(dir.path().join(&out_file))));
    }
    assert!(picked.len() > 1, "{picked:?}");
}

#[test]
fn the_role_sees_its_demos_in_the_next_run_and_the_before_eval_does_not() {
    let (dir, workflow) = copy_project();
    let out = optimize(dir.path(), &["--max-demos", "3", "--runs", "opt-runs"]);
    assert_success(&out);
    let (out, run_dir) = run_with(&workflow, "next", &["--input", "question=nine?"]);
    assert_success(&out);
    let text = prompt(&run_dir);
    assert!(
        text.contains("Q: six times seven?\nA: The answer is 42.")
            && text.contains("Q: fifty minus eight?")
            && text.ends_with("Q: nine?\nA:\n"),
        "{text}"
    );
    // The eval before ran without demos, the one after with them.
    let before = case_prompt(&dir.path().join("opt-runs/before"), "t1");
    assert_eq!(before, "Q: six times seven?\nA:\n");
    let after = case_prompt(&dir.path().join("opt-runs/after"), "t1");
    assert!(
        after.contains("Q: forty plus two?\nA: The answer is 42."),
        "{after}"
    );
    // Again, with the demos file there: "before" still runs without it.
    let out = optimize(dir.path(), &["--max-demos", "3", "--runs", "again"]);
    assert_success(&out);
    assert_eq!(
        case_prompt(&dir.path().join("again/before"), "t1"),
        "Q: six times seven?\nA:\n"
    );
}

/// With `--dev`, the demos still come from the training set (run in `OUT/train`), and the
/// scores before and after are of the held-out cases only, without and with the demos: a
/// gain there is not the training set scoring its own replies.
#[test]
fn dev_cases_are_scored_before_and_after_not_the_training_set() {
    let (dir, _) = copy_project();
    std::fs::write(
        dir.path().join("dev.jsonl"),
        concat!(
            r#"{"id": "d1", "inputs": {"question": "seven times six?"}, "expect": {"contains": "42"}}"#,
            "\n",
            r#"{"id": "d2", "inputs": {"question": "three cubed?"}, "expect": {"contains": "27"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = optimize(dir.path(), &["--dev", "dev.jsonl", "--runs", "held"]);
    assert_success(&out);
    let held = dir.path().join("held");
    // Demos from the training set's passing cases.
    let demos = json(dir.path().join("opt/answer_demos.json"));
    assert_eq!(demos.as_array().unwrap().len(), 3);
    let cases = |eval: &str| -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(held.join(eval).join("runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(cases("train").len(), 4);
    assert_eq!(cases("before").len(), 2);
    assert_eq!(cases("after").len(), 2);
    let table = String::from_utf8_lossy(&out.stdout);
    let n = table.lines().find(|l| l.starts_with("n ")).unwrap();
    assert_eq!(n.split_whitespace().collect::<Vec<_>>(), ["n", "2", "2"]);
    // d1's answer holds 42, d2's (27) cannot: half, before and after.
    let hits = table
        .lines()
        .find(|l| l.starts_with("contains_hit_rate"))
        .unwrap();
    assert_eq!(
        hits.split_whitespace().collect::<Vec<_>>(),
        ["contains_hit_rate", "0.5000", "0.5000"],
        "{table}"
    );
    assert!(table.contains("held-out"), "{table}");
    // The dev runs after saw the demos, those before did not.
    assert!(case_prompt(&held.join("after"), "d1").contains("Q: six times seven?"));
    assert!(!case_prompt(&held.join("before"), "d1").contains("six times seven"));
}

/// `rondo optimize --help`'s example, as written, from a folder holding the example project
/// where the repository has it.
#[test]
fn the_help_example_works_as_written() {
    let help = common::rondo(&["optimize", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout).into_owned();
    let example: String = text
        .split("Example:\n")
        .nth(1)
        .expect("an Example section")
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().trim_end_matches('\\').to_string())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(example.starts_with("rondo optimize "), "{example}");
    let (project, _) = copy_project();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tests/fixtures")).unwrap();
    std::fs::rename(project.path(), dir.path().join("tests/fixtures/optimize")).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_rondo")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&example)
        .current_dir(dir.path())
        .env("PATH", path)
        .output()
        .unwrap();
    assert_success(&out);
    assert_eq!(
        json(dir.path().join("evals/qa_demos.json"))
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// The prompt of case `id`'s run in an eval's results folder (its `cases.jsonl` names it).
fn case_prompt(results: &Path, id: &str) -> String {
    let cases = std::fs::read_to_string(results.join("cases.jsonl")).unwrap();
    let run_id = cases
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no case {id} in {}", results.display()))["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    prompt(&results.join("runs").join(run_id))
}

#[test]
fn a_missing_demos_file_is_no_demos() {
    let (dir, workflow) = copy_project();
    assert!(!dir.path().join("opt/answer_demos.json").exists());
    let (out, run_dir) = run_with(&workflow, "plain", &["--input", "question=hi?"]);
    assert_success(&out);
    assert_eq!(prompt(&run_dir), "Q: hi?\nA:\n");
}

#[test]
fn a_malformed_or_oversize_demos_file_stops_the_start() {
    let (dir, workflow) = copy_project();
    std::fs::create_dir_all(dir.path().join("opt")).unwrap();
    let file = dir.path().join("opt/answer_demos.json");
    for (i, (text, says)) in [
        ("{\"inputs\": {}}".to_string(), "is not a list"),
        ("[{\"reply\": \"x\"}]".to_string(), "demo 1 of"),
        ("[not json".to_string(), "is not JSON"),
        (
            format!(
                "[{}]",
                "{\"inputs\": {}, \"reply\": \"xxxxxxxxxx\"},".repeat(60_000)
            ),
            "more than the 1048576 bytes allowed",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(&file, text).unwrap();
        let (out, _) = run_with(&workflow, &format!("bad{i}"), &["--input", "question=hi?"]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(
            err.contains("answer_demos.json") && err.contains(says),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
