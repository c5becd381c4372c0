//! `rondo swebench`: SWE-bench-style instances (three small Python repositories with real
//! bugs, tests/fixtures/swebench) run through the LLM-IDE workflow with scripted replies
//! that edit the repository in the container. The patches are real `git diff`s, the test
//! commands really run in a fresh container, and one instance's fix is wrong.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;

use common::{docker_ready, stderr};

/// The repository's workflows and the fixtures, in a fresh folder.
fn project() -> tempfile::TempDir {
    let dir = common::repo_copy();
    let fixtures = dir.path().join("tests/fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    let status = std::process::Command::new("cp")
        .arg("-R")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/swebench"))
        .arg(&fixtures)
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

fn swebench(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .arg("swebench")
        .args(args)
        .output()
        .unwrap()
}

const DATASET: &str = "tests/fixtures/swebench/instances.jsonl";
const SCRIPT: &str = "tests/fixtures/swebench/fix.yaml";

fn scripted(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![DATASET, "--provider", "scripted", "--script", SCRIPT, "-q"];
    args.extend_from_slice(extra);
    args
}

fn results(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn by_id<'a>(results: &'a [Value], id: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["instance_id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}: {results:#?}"))
}

fn journal_len(workspace: &Path, run_id: &str) -> u64 {
    std::fs::metadata(
        workspace
            .join(".rondo/runs")
            .join(run_id)
            .join("events.jsonl"),
    )
    .unwrap()
    .len()
}

fn report_of(res: &Value) -> &Value {
    &res["report"]
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every instance runs in its own workspace and container, and each patch is then judged
/// as SWE-bench's harness judges it: in a fresh container, with the instance's test patch,
/// each test's status read from the log. The two right fixes are resolved, the wrong one
/// is not; the reports have the harness's form; `--predictions` on the batch's own
/// preds.json gives the same verdicts without running any agent.
#[test]
fn the_harness_decides_resolved_and_predictions_give_the_same_verdicts() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let out = swebench(dir.path(), &scripted(&["--out", "swe", "-c", "3"]));
    // One instance is unresolved.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = results(&dir.path().join("swe"));
    assert_eq!(res.len(), 3);
    let ids: Vec<&str> = res
        .iter()
        .map(|r| r["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["calc-add", "textutil-slug", "stats-mean"]);

    let calc = by_id(&res, "calc-add");
    assert_eq!(calc["exit"], "submitted");
    assert_eq!(calc["resolved"], true);
    let patch = calc["patch"].as_str().unwrap();
    assert!(
        patch.starts_with("diff --git a/calc.py b/calc.py\n"),
        "{patch}"
    );
    assert!(
        patch.contains("\n-    return a - b\n+    return a + b\n"),
        "{patch}"
    );
    for run_file in ["logs/", "patch.diff", "trajectory.json", ".rondo"] {
        assert!(!patch.contains(run_file), "{run_file} in {patch}");
    }
    let report = report_of(calc);
    assert_eq!(report["patch_is_None"], false);
    assert_eq!(report["patch_exists"], true);
    assert_eq!(report["patch_successfully_applied"], true);
    assert_eq!(report["resolved"], true);
    assert_eq!(
        report["tests_status"]["FAIL_TO_PASS"]["success"],
        serde_json::json!([
            "test_add (test_calc.CalcTest.test_add)",
            "test_add_negative (test_calc.CalcTest.test_add_negative)"
        ])
    );
    assert_eq!(
        report["tests_status"]["PASS_TO_PASS"]["success"],
        serde_json::json!(["test_mul (test_calc.CalcTest.test_mul)"])
    );
    // The harness's report file, under the instance's id, and the log it was read from:
    // the test patch's new test ran though the agent never saw it.
    let eval_dir = PathBuf::from(calc["eval_dir"].as_str().unwrap());
    let file = read_json(&eval_dir.join("report.json"));
    assert_eq!(&file["calc-add"], report);
    let log = std::fs::read_to_string(eval_dir.join("test_output.txt")).unwrap();
    assert!(
        log.contains("test_add_negative (test_calc.CalcTest.test_add_negative) ... ok"),
        "{log}"
    );
    assert!(log.contains(">>>>> Test Exit Code: 0"), "{log}");

    let slug = by_id(&res, "textutil-slug");
    assert_eq!(slug["resolved"], true);

    let stats = by_id(&res, "stats-mean");
    assert_eq!(stats["exit"], "submitted");
    assert_eq!(stats["resolved"], false);
    assert!(
        stats["patch"]
            .as_str()
            .unwrap()
            .contains("+    return sum(xs) / (len(xs) + 1)\n")
    );
    let report = report_of(stats);
    assert_eq!(report["patch_successfully_applied"], true);
    assert_eq!(report["resolved"], false);
    assert_eq!(
        report["tests_status"]["FAIL_TO_PASS"]["failure"],
        serde_json::json!([
            "test_mean (test_stats.MeanTest.test_mean)",
            "test_mean_of_two (test_stats.MeanTest.test_mean_of_two)"
        ])
    );
    assert_eq!(stats["test_exit_code"], 1);

    // The agent edited the copy; the fixture repository is untouched.
    let fixture = std::fs::read_to_string(
        dir.path()
            .join("tests/fixtures/swebench/repos/calc/calc.py"),
    )
    .unwrap();
    assert!(fixture.contains("return a - b"));
    let ws = PathBuf::from(calc["workspace"].as_str().unwrap());
    assert!(
        std::fs::read_to_string(ws.join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    let run_json = read_json(&ws.join(".rondo/runs/calc-add/run.json"));
    assert_eq!(run_json["exit"], "submitted");

    let preds = read_json(&dir.path().join("swe/preds.json"));
    assert_eq!(preds["calc-add"]["model_patch"], calc["patch"]);
    assert_eq!(preds["stats-mean"]["instance_id"], "stats-mean");
    let summary = read_json(&dir.path().join("swe/report.json"));
    assert_eq!(summary["total_instances"], 3);
    assert_eq!(summary["submitted_instances"], 3);
    assert_eq!(summary["completed_instances"], 3);
    assert_eq!(summary["resolved_instances"], 2);
    assert_eq!(summary["unresolved_instances"], 1);
    assert_eq!(summary["empty_patch_instances"], 0);
    assert_eq!(summary["error_instances"], 0);
    assert_eq!(
        summary["resolved_ids"],
        serde_json::json!(["calc-add", "textutil-slug"])
    );
    assert_eq!(summary["unresolved_ids"], serde_json::json!(["stats-mean"]));
    assert!(summary["input_tokens"].as_u64().unwrap() > 0, "{summary:#}");
    assert!(
        summary["instances"]["calc-add"]["agent_sec"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(
        summary["instances"]["calc-add"]["eval_sec"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("2 resolved of 3 (66.7%), 1 unresolved"),
        "{table}"
    );

    // The same patches from preds.json, no agent: the same verdicts, the same reports.
    let out = swebench(
        dir.path(),
        &[
            DATASET,
            "--predictions",
            "swe/preds.json",
            "--out",
            "p",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let again = results(&dir.path().join("p"));
    assert_eq!(again.len(), 3);
    for r in &res {
        let id = r["instance_id"].as_str().unwrap();
        let p = by_id(&again, id);
        assert_eq!(p["exit"], "prediction");
        assert_eq!(report_of(p), report_of(r), "{id}");
        assert!(p.get("workspace").is_none(), "{p:#}");
    }
    assert!(!dir.path().join("p/workspaces/calc-add/.rondo").exists());
    let again = read_json(&dir.path().join("p/report.json"));
    for key in [
        "resolved_ids",
        "unresolved_ids",
        "completed_ids",
        "error_ids",
    ] {
        assert_eq!(again[key], summary[key], "{key}");
    }
}

/// `--predictions` reports what the harness reports of a patch that does not apply (an
/// error, not a failed test), an empty patch and a `null` one (not evaluated), and leaves
/// an instance without a prediction incomplete.
#[test]
fn a_patch_that_does_not_apply_and_empty_patches_are_reported_as_such() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let preds = serde_json::json!([
        {"instance_id": "calc-add", "model_name_or_path": "m",
         "model_patch": "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,3 @@\n-no such line\n+x\n context\n"},
        {"instance_id": "textutil-slug", "model_name_or_path": "m", "model_patch": ""},
        {"instance_id": "stats-mean", "model_name_or_path": "m", "model_patch": null},
    ]);
    std::fs::write(dir.path().join("bad.json"), preds.to_string()).unwrap();
    let out = swebench(
        dir.path(),
        &[DATASET, "--predictions", "bad.json", "--out", "b", "-q"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = results(&dir.path().join("b"));
    let calc = by_id(&res, "calc-add");
    assert_eq!(report_of(calc)["patch_exists"], true);
    assert_eq!(report_of(calc)["patch_successfully_applied"], false);
    assert_eq!(report_of(calc)["resolved"], false);
    assert!(report_of(calc).get("tests_status").is_none());
    assert!(calc["resolved"].is_null());
    assert!(
        calc["eval_error"]
            .as_str()
            .unwrap()
            .contains("the patch does not apply"),
        "{calc:#}"
    );
    let log = std::fs::read_to_string(dir.path().join("b/eval/calc-add/test_output.txt")).unwrap();
    assert!(log.contains(">>>>> Patch Apply Failed"), "{log}");
    assert!(!log.contains(">>>>> Start Test Output"), "{log}");
    let slug = by_id(&res, "textutil-slug");
    assert_eq!(report_of(slug)["patch_exists"], false);
    assert_eq!(report_of(slug)["patch_is_None"], false);
    let stats = by_id(&res, "stats-mean");
    assert_eq!(report_of(stats)["patch_is_None"], true);
    let summary = read_json(&dir.path().join("b/report.json"));
    assert_eq!(summary["error_ids"], serde_json::json!(["calc-add"]));
    assert_eq!(
        summary["empty_patch_ids"],
        serde_json::json!(["stats-mean", "textutil-slug"])
    );
    assert_eq!(summary["completed_instances"], 0);
    assert_eq!(summary["resolved_instances"], 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("calc-add: not evaluated: the patch does not apply"),
        "{stdout}"
    );

    // Tests that print no status (the patch ends the process at import): unresolved, as
    // the harness reports a log it cannot read, and said why.
    let silent = serde_json::json!([{
        "instance_id": "stats-mean", "model_name_or_path": "m",
        "model_patch": "diff --git a/stats.py b/stats.py\n--- a/stats.py\n+++ b/stats.py\n@@ -1,4 +1,6 @@\n \"\"\"Statistics helpers.\"\"\"\n+import os\n+os._exit(0)\n \n \n def mean(xs):\n"
    }]);
    std::fs::write(dir.path().join("silent.json"), silent.to_string()).unwrap();
    let out = swebench(
        dir.path(),
        &[
            DATASET,
            "--predictions",
            "silent.json",
            "-i",
            "stats-mean",
            "--out",
            "s",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = results(&dir.path().join("s"));
    let stats = by_id(&res, "stats-mean");
    assert_eq!(stats["resolved"], false, "{stats:#}");
    assert_eq!(stats["test_exit_code"], 0);
    assert!(
        stats["eval_note"]
            .as_str()
            .unwrap()
            .contains("no test status in the log"),
        "{stats:#}"
    );
    assert_eq!(report_of(stats)["patch_successfully_applied"], false);
    let summary = read_json(&dir.path().join("s/report.json"));
    assert_eq!(summary["unresolved_ids"], serde_json::json!(["stats-mean"]));

    // Only one prediction: the others are incomplete, not failed.
    std::fs::write(dir.path().join("one.jsonl"), format!("{}\n", preds[0])).unwrap();
    let out = swebench(
        dir.path(),
        &[DATASET, "--predictions", "one.jsonl", "--out", "o", "-q"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let summary = read_json(&dir.path().join("o/report.json"));
    assert_eq!(summary["submitted_ids"], serde_json::json!(["calc-add"]));
    assert_eq!(
        summary["incomplete_ids"],
        serde_json::json!(["stats-mean", "textutil-slug"])
    );
}

/// An agent that makes the failing test pass by editing the test is not resolved: the
/// harness puts every file the test patch touches back to its base version first. (The
/// old verdict, the tests run in the agent's workspace, called it resolved.)
#[test]
fn an_agent_that_edits_the_failing_test_is_unresolved() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let act = serde_json::json!({
        "command": "cd /work && sed -i 's/mean(\\[1, 2, 3\\]), 2)/mean([1, 2, 3]), 3.0)/' test_stats.py && python3 -m unittest test_stats"
    });
    let script = format!(
        "replies:\n  act_next:\n    - {}\n    - '<thought>Submit.</thought> <action_type>submit</action_type> <action-params>{{}}</action-params>'\n  reflect:\n    - '<bad_action>false</bad_action> <lessons></lessons> <summary>edited</summary>'\n",
        serde_json::to_string(&format!(
            "<thought>Make the test pass.</thought> <action_type>bash</action_type> <action-params>{act}</action-params>"
        ))
        .unwrap()
    );
    std::fs::write(dir.path().join("cheat.yaml"), script).unwrap();
    let out = swebench(
        dir.path(),
        &[
            DATASET,
            "--provider",
            "scripted",
            "--script",
            "cheat.yaml",
            "-i",
            "stats-mean",
            "--out",
            "c",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = results(&dir.path().join("c"));
    let stats = by_id(&res, "stats-mean");
    // The agent's test did pass in its workspace ...
    let ws = PathBuf::from(stats["workspace"].as_str().unwrap());
    assert!(
        std::fs::read_to_string(ws.join("test_stats.py"))
            .unwrap()
            .contains("mean([1, 2, 3]), 3.0)")
    );
    assert!(
        stats["patch"]
            .as_str()
            .unwrap()
            .contains("+++ b/test_stats.py"),
        "{stats:#}"
    );
    // ... and the harness restored it: unresolved.
    assert_eq!(report_of(stats)["patch_successfully_applied"], true);
    assert_eq!(stats["resolved"], false);
    assert_eq!(
        report_of(stats)["tests_status"]["FAIL_TO_PASS"]["failure"],
        serde_json::json!([
            "test_mean (test_stats.MeanTest.test_mean)",
            "test_mean_of_two (test_stats.MeanTest.test_mean_of_two)"
        ])
    );
}

/// `--instance` runs one instance and prints its patch; `--split` / `--subset` / `--filter`
/// / `--slice` choose among the dataset's lines.
#[test]
fn one_instance_prints_its_patch_and_the_options_select_instances() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let out = swebench(
        dir.path(),
        &scripted(&["--instance", "calc-add", "--out", "one"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("diff --git a/calc.py b/calc.py\n"),
        "{stdout}"
    );
    let res = results(&dir.path().join("one"));
    assert_eq!(res.len(), 1);
    assert_eq!(res[0]["resolved"], true);

    let out = swebench(dir.path(), &scripted(&["--split", "dev", "--out", "dev"]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let ids: Vec<Value> = results(&dir.path().join("dev"))
        .iter()
        .map(|r| r["instance_id"].clone())
        .collect();
    assert_eq!(ids, ["stats-mean"]);

    let out = swebench(
        dir.path(),
        &scripted(&["--subset", "lite", "--filter", "^text", "--out", "f"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ids: Vec<Value> = results(&dir.path().join("f"))
        .iter()
        .map(|r| r["instance_id"].clone())
        .collect();
    assert_eq!(ids, ["textutil-slug"]);

    let out = swebench(dir.path(), &scripted(&["--slice", "1:", "--out", "s"]));
    let ids: Vec<Value> = results(&dir.path().join("s"))
        .iter()
        .map(|r| r["instance_id"].clone())
        .collect();
    assert_eq!(ids, ["textutil-slug", "stats-mean"], "{}", stderr(&out));

    let out = swebench(dir.path(), &scripted(&["--instance", "nope", "--out", "x"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--instance \"nope\": no such instance"),
        "{}",
        stderr(&out)
    );
}

/// A result lost with the process (its run finished, its line never written) is made again
/// by `--resume` from the run, which does not run again; instances with a result are left
/// alone.
#[test]
fn resume_finishes_only_the_instances_without_a_result() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let out_dir = dir.path().join("swe");
    let out = swebench(dir.path(), &scripted(&["--out", "swe"]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let before = results(&out_dir);
    let calc_ws = PathBuf::from(by_id(&before, "calc-add")["workspace"].as_str().unwrap());
    let stats_ws = PathBuf::from(by_id(&before, "stats-mean")["workspace"].as_str().unwrap());
    let calc_journal = journal_len(&calc_ws, "calc-add");
    let stats_journal = journal_len(&stats_ws, "stats-mean");
    // Drop stats-mean's result, as a kill between its run and its line would.
    for file in ["results.jsonl", "cases.jsonl"] {
        let text = std::fs::read_to_string(out_dir.join(file)).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.contains("\"stats-mean\""))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(out_dir.join(file), kept).unwrap();
    }
    assert_eq!(results(&out_dir).len(), 2);
    let out = swebench(dir.path(), &["--resume", "swe", "-q"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let after = results(&out_dir);
    assert_eq!(after.len(), 3);
    assert_eq!(by_id(&after, "stats-mean")["resolved"], false);
    assert_eq!(
        by_id(&after, "stats-mean")["patch"],
        by_id(&before, "stats-mean")["patch"]
    );
    assert_eq!(
        by_id(&after, "calc-add")["patch"],
        by_id(&before, "calc-add")["patch"]
    );
    // Neither run ran again.
    assert_eq!(journal_len(&calc_ws, "calc-add"), calc_journal);
    assert_eq!(journal_len(&stats_ws, "stats-mean"), stats_journal);
}

/// Every problem of the dataset is located at its line and column, with the code, and
/// nothing runs.
#[test]
fn a_bad_instance_is_located_and_nothing_runs() {
    let dir = project();
    let data = dir.path().join("bad.jsonl");
    std::fs::write(
        &data,
        concat!(
            r#"{"instance_id": "a", "repo": "tests/fixtures/swebench/repos/calc", "problem_statement": "x"}"#,
            "\n",
            r#"{"instance_id": "b", "repo": "no/such/repo", "problem_statement": "x", "test_cmds": ["true"]}"#,
            "\n",
            r#"{"instance_id": "a", "repo": "tests/fixtures/swebench/repos/calc"}"#,
            "\n",
            r#"{"instance_id": "c", "repo": }"#,
            "\n",
            r#"{"instance_id": "d", "repo": "tests/fixtures/swebench/repos/calc", "problem_statement": "x", "FAIL_TO_PASS": "[\"a\", 3]", "log_parser": "pytests"}"#,
            "\n",
        ),
    )
    .unwrap();
    let out = swebench(
        dir.path(),
        &["bad.jsonl", "--provider", "scripted", "--out", "bad"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("rondo::swebench::bad_instance"), "{err}");
    assert!(err.contains("bad.jsonl:2:"), "{err}");
    assert!(
        err.contains("`test_cmds` is not a field of an instance"),
        "{err}"
    );
    assert!(err.contains("test_commands"), "{err}");
    assert!(
        err.contains("the repository `no/such/repo` is not a folder"),
        "{err}"
    );
    assert!(
        err.contains("this instance has no `problem_statement`"),
        "{err}"
    );
    assert!(err.contains("bad.jsonl:4:"), "{err}");
    assert!(err.contains("this line is not JSON"), "{err}");
    assert!(
        err.contains("`FAIL_TO_PASS` is a list of strings, or one written as a JSON string"),
        "{err}"
    );
    assert!(err.contains("`pytests` is not a log parser"), "{err}");
    assert!(err.contains("bad.jsonl:5:"), "{err}");
    assert!(
        err.contains("this instance has no `FAIL_TO_PASS` tests"),
        "{err}"
    );
    assert!(err.contains("nothing ran"), "{err}");
    assert!(!dir.path().join("bad").exists());
}

#[test]
fn swebench_help_examples_work_as_written() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let examples = common::help_examples("swebench");
    assert!(examples.len() >= 3, "{examples:?}");
    let dir = project();
    for line in &examples {
        assert!(line.starts_with("rondo swebench "), "{line}");
        let out = common::run_example(dir.path(), line);
        assert!(out.status.success(), "`{line}`: {}", stderr(&out));
    }
}

/// A one-reply OpenAI-compatible server on a free port: every request body is kept, every
/// reply is `content` with 1000 prompt and 500 completion tokens.
fn chat_server(content: &'static str) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut data = Vec::new();
            let mut buf = [0u8; 8192];
            let body = loop {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                data.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&data).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    if data.len() >= end + 4 + len {
                        break Some(data[end + 4..end + 4 + len].to_vec());
                    }
                }
            };
            let Some(body) = body else { continue };
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                kept.lock().unwrap().push(v);
            }
            let reply = serde_json::json!({
                "id": "c1", "object": "chat.completion", "created": 0, "model": "served",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
            })
            .to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (port, seen)
}

/// `--model` is the model the provider is asked for, the run's cost is the instance's, and
/// an instance's `image` is the image its run starts (a missing one ends it at `error`).
#[test]
fn the_model_the_cost_and_the_image_of_an_instance_reach_its_run() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let (port, seen) = chat_server("Replace the minus with a plus.");
    let workflow = format!(
        r#"
workflow agent {{
  prompts = "prompts"
  provider = local
  input task: string
}}
provider local {{
  kind = "openai-compatible"
  model = "declared-model"
  base_url = "http://127.0.0.1:{port}/v1"
  api_key_env = "RONDO_SWE_TEST_KEY"
  price {{ input_per_1k = 1.0  output_per_1k = 2.0 }}
}}
environment box {{
  kind = "docker"
  image = "rondo-test-base:latest"
  mounts = [".:/work:rw"]
}}
role plan: llm {{
  prompt = "plan.tera"
  output text
}}
role edit: tool {{
  env = box
  command = ["sh", "-c", "sed -i 's/a - b/a + b/' /work/calc.py"]
}}
start -> plan
plan -> edit
edit -> submitted
exit submitted
"#
    );
    let wf = common::project(
        &dir.path().join("agent"),
        &workflow,
        &[("plan.tera", "Fix this: {{ input.task }}\n")],
        "",
    );
    std::fs::write(
        dir.path().join("imaged.jsonl"),
        concat!(
            r#"{"instance_id": "calc", "repo": "tests/fixtures/swebench/repos/calc", "problem_statement": "add(2, 3) returns -1", "test_commands": ["python3 -m unittest -v test_calc"], "log_parser": "unittest", "FAIL_TO_PASS": ["test_add (test_calc.CalcTest.test_add)"]}"#,
            "\n",
            r#"{"instance_id": "imaged", "repo": "tests/fixtures/swebench/repos/calc", "problem_statement": "x", "image": "rondo-no-such-image:0", "FAIL_TO_PASS": "[\"t\"]"}"#,
            "\n",
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .env("RONDO_SWE_TEST_KEY", "sk-local-test")
        .args(["swebench", "imaged.jsonl", "-q", "--workflow"])
        .arg(&wf)
        .args(["--model", "other-model", "-c", "1", "--out", "m"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let seen = seen.lock().unwrap();
    // One call a run (the image is needed only after it).
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert!(
        seen.iter().all(|s| s["model"] == "other-model"),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.to_string().contains("Fix this: add(2, 3) returns -1")),
        "{seen:#?}"
    );
    let res = results(&dir.path().join("m"));
    let calc = by_id(&res, "calc");
    assert_eq!(calc["exit"], "submitted");
    assert_eq!(calc["resolved"], true);
    // 1000 tokens in at $1 per 1k, 500 out at $2 per 1k.
    assert!(
        (calc["cost_usd"].as_f64().unwrap() - 2.0).abs() < 1e-9,
        "{calc:#}"
    );
    assert!(
        calc["patch"]
            .as_str()
            .unwrap()
            .contains("+    return a + b\n")
    );
    let imaged = by_id(&res, "imaged");
    assert_eq!(imaged["exit"], "error");
    assert!(
        imaged["reason"]
            .as_str()
            .unwrap()
            .contains("rondo-no-such-image:0"),
        "{imaged:#}"
    );
    assert_eq!(imaged["patch"], "");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("m/report.json")).unwrap())
            .unwrap();
    // The run that ended at `error` spent its call too.
    assert!((imaged["cost_usd"].as_f64().unwrap() - 2.0).abs() < 1e-9);
    assert!((report["cost_usd"].as_f64().unwrap() - 4.0).abs() < 1e-9);
}

/// The agent can write the workspace's `.git` (its config, its hooks): the patch is taken
/// with a git directory the container never sees, so nothing written there runs on the host.
#[test]
fn what_the_agent_writes_in_the_workspaces_git_never_runs_on_the_host() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let marker = dir.path().join("ran-on-the-host");
    let command = format!(
        "cd /work && printf '[core]\\n\\tfsmonitor = touch {m}\\n[diff]\\n\\texternal = touch {m}\\n' >> .git/config && sed -i 's/a - b/a + b/' calc.py",
        m = marker.display()
    );
    // The spec's tagged reply; a JSON string is a YAML double-quoted scalar.
    let act = format!(
        "<thought>Fix it.</thought> <action_type>bash</action_type> <action-params>{}</action-params>",
        serde_json::json!({ "command": command })
    );
    let script = format!(
        "replies:\n  act_next:\n    - {}\n    - '<thought>Submit.</thought> <action_type>submit</action_type> <action-params>{{}}</action-params>'\n  reflect:\n    - '<bad_action>false</bad_action> <lessons></lessons> <summary>edited</summary>'\n",
        serde_json::to_string(&act).unwrap()
    );
    std::fs::write(dir.path().join("evil.yaml"), script).unwrap();
    let out = swebench(
        dir.path(),
        &[
            DATASET,
            "--provider",
            "scripted",
            "--script",
            "evil.yaml",
            "-i",
            "calc-add",
            "--out",
            "e",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let res = results(&dir.path().join("e"));
    let ws = PathBuf::from(res[0]["workspace"].as_str().unwrap());
    // The container did write the workspace's git config ...
    let set = std::process::Command::new("git")
        .args(["config", "-f"])
        .arg(ws.join(".git/config"))
        .arg("core.fsmonitor")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&set.stdout).trim(),
        format!("touch {}", marker.display())
    );
    // ... and the host never ran it, yet took the patch.
    assert!(!marker.exists(), "the agent's git config ran on the host");
    assert!(
        res[0]["patch"]
            .as_str()
            .unwrap()
            .contains("+    return a + b\n"),
        "{:#}",
        res[0]
    );
    assert_eq!(res[0]["resolved"], true);
}

/// The ids of the containers labelled with the batch whose results folder is `out`.
fn batch_containers(out: &Path) -> Vec<String> {
    let out = std::fs::canonicalize(out).unwrap_or(out.to_path_buf());
    let got = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=rondo.batch={}", out.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&got.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A SWE-bench-style build folder for `id`: the calc repository, a git repository at a
/// commit made with fixed dates (so its id is known), copied into the image at /testbed.
/// Returns the base commit.
fn testbed_build(dir: &Path, id: &str) -> String {
    let ctx = dir.join("builds").join(id);
    let repo = ctx.join("testbed");
    std::fs::create_dir_all(&repo).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/swebench/repos/calc");
    for f in ["calc.py", "test_calc.py"] {
        std::fs::copy(src.join(f), repo.join(f)).unwrap();
    }
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .env("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "base"]);
    std::fs::write(
        ctx.join("Dockerfile"),
        // As SWE-bench's builds do, the image changes a tracked file after the base commit.
        "FROM rondo-test-base:latest\nCOPY testbed /testbed\nRUN printf '\\n# built by the image\\n' >> /testbed/calc.py\nWORKDIR /testbed\n",
    )
    .unwrap();
    git(&["rev-parse", "HEAD"])
}

/// The calc instance as SWE-bench publishes a row: its repository is the image's own
/// (`acme/calc` is no folder here), the test lists are JSON-encoded strings.
fn testbed_dataset(dir: &Path, id: &str, base: &str) {
    let fixtures: Vec<Value> =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DATASET))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let calc = &fixtures[0];
    let row = serde_json::json!({
        "instance_id": id,
        "repo": "acme/calc",
        "base_commit": base,
        "problem_statement": calc["problem_statement"],
        "patch": "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -3,7 +3,7 @@\n \n def add(a, b):\n     \"\"\"Return the sum of a and b.\"\"\"\n-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n",
        "test_patch": calc["test_patch"],
        "FAIL_TO_PASS": calc["FAIL_TO_PASS"],
        "PASS_TO_PASS": calc["PASS_TO_PASS"],
        "test_commands": calc["test_commands"],
        "log_parser": "unittest",
        "version": "1.0",
        "environment_setup_commit": base,
        "hints_text": "",
        "created_at": "2020-01-01T00:00:00Z",
    });
    std::fs::write(dir.join("testbed.jsonl"), format!("{row}\n")).unwrap();
}

/// An instance whose repository exists only inside its image (SWE-bench's /testbed): the
/// image is built locally from its Dockerfile (`--build`, named by `--image`'s template),
/// the agent works in /testbed, the patch is taken with a git directory out of its reach,
/// and the evaluation checks out the base commit in a fresh container of that image. The
/// dataset's gold patch, given with `--predictions`, is resolved too; no container is left.
#[test]
fn an_instance_whose_repository_is_its_images_testbed() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let id = "acme__calc-1";
    let image = "rondo-test-sweb.acme_1776_calc-1:latest";
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", image])
        .output();
    let base = testbed_build(dir.path(), id);
    testbed_dataset(dir.path(), id, &base);
    let act = serde_json::json!({
        "command": "cd /testbed && git log --format=%H -1 && sed -i 's/return a - b/return a + b/' calc.py"
    });
    let script = format!(
        "replies:\n  act_next:\n    - {}\n    - '<thought>Submit.</thought> <action_type>submit</action_type> <action-params>{{}}</action-params>'\n  reflect:\n    - '<bad_action>false</bad_action> <lessons></lessons> <summary>edited</summary>'\n",
        serde_json::to_string(&format!(
            "<thought>Fix it.</thought> <action_type>bash</action_type> <action-params>{act}</action-params>"
        ))
        .unwrap()
    );
    std::fs::write(dir.path().join("testbed.yaml"), script).unwrap();
    let template = "rondo-test-sweb.{hub_id}:latest";
    let out = swebench(
        dir.path(),
        &[
            "testbed.jsonl",
            "--provider",
            "scripted",
            "--script",
            "testbed.yaml",
            "--image",
            template,
            "--build",
            "builds",
            "--out",
            "t",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let res = results(&dir.path().join("t"));
    let r = by_id(&res, id);
    assert_eq!(r["resolved"], true, "{r:#}");
    assert_eq!(report_of(r)["patch_successfully_applied"], true);
    assert!(
        r["patch"]
            .as_str()
            .unwrap()
            .contains("-    return a - b\n+    return a + b\n"),
        "{r:#}"
    );
    // The image's own change is the workspace's base, not part of the agent's patch.
    assert!(
        !r["patch"].as_str().unwrap().contains("built by the image"),
        "{r:#}"
    );
    // The agent's workspace is the image's /testbed, copied out at its base commit.
    let ws = PathBuf::from(r["workspace"].as_str().unwrap());
    let head = std::process::Command::new("git")
        .arg("-C")
        .arg(dir.path().join("t/git").join(format!("{id}.git")))
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    let parent = std::process::Command::new("git")
        .arg("-C")
        .arg(dir.path().join("t/git").join(format!("{id}.git")))
        .args(["rev-parse", "HEAD^"])
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&head.stdout).trim(), base);
    assert_eq!(String::from_utf8_lossy(&parent.stdout).trim(), base);
    assert!(
        std::fs::read_to_string(ws.join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    let log = std::fs::read_to_string(dir.path().join("t/eval").join(id).join("test_output.txt"))
        .unwrap();
    assert!(
        log.contains("test_add_negative (test_calc.CalcTest.test_add_negative) ... ok"),
        "{log}"
    );
    assert!(batch_containers(&dir.path().join("t")).is_empty());

    // The dataset's own patch, as another agent's prediction: resolved.
    let row: Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("testbed.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    let preds = serde_json::json!({id: {"instance_id": id, "model_name_or_path": "gold", "model_patch": row["patch"]}});
    std::fs::write(dir.path().join("gold.json"), preds.to_string()).unwrap();
    let out = swebench(
        dir.path(),
        &[
            "testbed.jsonl",
            "--predictions",
            "gold.json",
            "--image",
            template,
            "--out",
            "g",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let res = results(&dir.path().join("g"));
    assert_eq!(by_id(&res, id)["resolved"], true);
    assert!(!dir.path().join("g/workspaces").exists());
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", image])
        .output();
}

/// Sends `signal` to the batch once its evaluation container runs, and waits for it to end.
fn interrupt_during_eval(dir: &Path, args: &[&str], out: &Path, signal: &str) -> Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .arg("swebench")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let running = std::process::Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                "label=rondo.run_id=calc-add-eval",
                "--filter",
            ])
            .arg(format!("label=rondo.owner_pid={}", child.id()))
            .output()
            .unwrap();
        if !running.stdout.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no evaluation container started"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Let the steps before the tests finish: the tests hang.
    let log = out.join("eval/calc-add/inputs/test.patch");
    while !log.exists() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

/// A patch whose tests hang: Ctrl-C (then SIGTERM, on `--resume`) stops the batch during
/// the tests with every container of the batch removed and no result written; `--resume`
/// with a wall-time limit then kills the hanging tests and reports them timed out.
#[test]
fn an_interrupt_during_a_hanging_test_leaves_no_container_and_the_batch_resumes() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let preds = serde_json::json!([{
        "instance_id": "calc-add", "model_name_or_path": "m",
        "model_patch": "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -3,7 +3,8 @@\n \n def add(a, b):\n     \"\"\"Return the sum of a and b.\"\"\"\n-    return a - b\n+    while True:\n+        pass\n \n \n def mul(a, b):\n"
    }]);
    std::fs::write(dir.path().join("hang.json"), preds.to_string()).unwrap();
    let out_dir = dir.path().join("h");
    let args = [
        DATASET,
        "--predictions",
        "hang.json",
        "-i",
        "calc-add",
        "--out",
        "h",
        "-q",
    ];
    let out = interrupt_during_eval(dir.path(), &args, &out_dir, "-INT");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interrupted: continue with"),
        "{}",
        stderr(&out)
    );
    assert!(batch_containers(&out_dir).is_empty());
    assert!(results(&out_dir).is_empty());

    let out = interrupt_during_eval(dir.path(), &["--resume", "h", "-q"], &out_dir, "-TERM");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(batch_containers(&out_dir).is_empty());
    assert!(results(&out_dir).is_empty());

    let out = swebench(dir.path(), &["--resume", "h", "-q", "--eval-timeout", "3"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = results(&out_dir);
    let calc = by_id(&res, "calc-add");
    assert_eq!(calc["eval_timed_out"], true, "{calc:#}");
    assert!(
        calc["eval_error"]
            .as_str()
            .unwrap()
            .contains("the tests timed out after 3 seconds"),
        "{calc:#}"
    );
    assert!(calc["resolved"].is_null());
    let log = std::fs::read_to_string(out_dir.join("eval/calc-add/test_output.txt")).unwrap();
    assert!(log.contains(">>>>> Tests Timed Out"), "{log}");
    let summary = read_json(&out_dir.join("report.json"));
    assert_eq!(summary["error_ids"], serde_json::json!(["calc-add"]));
    assert!(batch_containers(&out_dir).is_empty());
}

/// A command killed at its tool's timeout gives the agent an observation that says so (it
/// printed nothing: the observation was empty).
#[test]
fn a_command_that_hits_its_timeout_says_it_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    let wf = common::project(
        dir.path(),
        r#"
workflow slow {}
environment here { kind = "local" }
role hang: tool {
  env = here
  command = ["sh", "-c", "sleep 30"]
  timeout = 1s
}
start -> hang
hang -> done
exit done
"#,
        &[],
        "",
    );
    let (out, run_dir) = common::run_with(&wf, "slow", &[]);
    let journal = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let shown: Vec<Value> = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e.pointer("/result/shown").cloned())
        .collect();
    assert_eq!(
        shown,
        [Value::String("timed out after 1 seconds".into())],
        "{}\n{journal}",
        stderr(&out)
    );
}

/// Ctrl-C while the agent's command hangs: the run stops at a checkpoint, every container
/// of the batch is removed, no result is written; `--resume` continues the run where it
/// stopped and the batch ends resolved.
#[test]
fn an_interrupt_during_an_agents_command_leaves_no_container_and_the_run_resumes() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let act = serde_json::json!({
        "command": "cd /work && while [ ! -e .go ]; do sleep 1; done; rm -f .go && sed -i 's/return a - b/return a + b/' calc.py"
    });
    let script = format!(
        "replies:\n  act_next:\n    - {}\n    - '<thought>Submit.</thought> <action_type>submit</action_type> <action-params>{{}}</action-params>'\n  reflect:\n    - '<bad_action>false</bad_action> <lessons></lessons> <summary>edited</summary>'\n",
        serde_json::to_string(&format!(
            "<thought>Wait, then fix.</thought> <action_type>bash</action_type> <action-params>{act}</action-params>"
        ))
        .unwrap()
    );
    std::fs::write(dir.path().join("wait.yaml"), script).unwrap();
    let out_dir = dir.path().join("a");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args([
            "swebench",
            DATASET,
            "--provider",
            "scripted",
            "--script",
            "wait.yaml",
        ])
        .args(["-i", "calc-add", "--out", "a", "-q"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let logs = out_dir.join("workspaces/calc-add/logs");
    let started = std::time::Instant::now();
    while std::fs::read_dir(&logs).map_or(true, |mut d| d.next().is_none()) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the agent's command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(!batch_containers(&out_dir).is_empty());
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(batch_containers(&out_dir).is_empty());
    assert!(results(&out_dir).is_empty());

    std::fs::write(out_dir.join("workspaces/calc-add/.go"), "").unwrap();
    let out = swebench(dir.path(), &["--resume", "a", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let res = results(&out_dir);
    assert_eq!(by_id(&res, "calc-add")["resolved"], true, "{res:#?}");
    assert!(
        !by_id(&res, "calc-add")["patch"]
            .as_str()
            .unwrap()
            .contains(".go"),
        "{res:#?}"
    );
    assert!(batch_containers(&out_dir).is_empty());
}

/// A file the test patch creates is not the agent's to write: a prediction that writes its
/// own, passing, version of it is undone (the file is removed before the test patch is
/// applied), and the real test fails.
#[test]
fn a_test_file_the_test_patch_creates_is_the_test_patchs() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let new_test = |body: &str| {
        format!(
            "diff --git a/test_new.py b/test_new.py\nnew file mode 100644\n--- /dev/null\n+++ b/test_new.py\n@@ -0,0 +1,8 @@\n+import unittest\n+\n+from calc import add\n+\n+\n+class NewTest(unittest.TestCase):\n+    def test_new(self):\n+        {body}\n"
        )
    };
    let row = serde_json::json!({
        "instance_id": "calc-new", "repo": "tests/fixtures/swebench/repos/calc",
        "problem_statement": "add subtracts",
        "test_patch": new_test("self.assertEqual(add(2, 2), 4)"),
        "FAIL_TO_PASS": "[\"test_new (test_new.NewTest.test_new)\"]",
        "PASS_TO_PASS": "[]",
        "test_commands": ["python3 -m unittest -v test_new"],
        "log_parser": "unittest",
    });
    std::fs::write(dir.path().join("new.jsonl"), format!("{row}\n")).unwrap();
    let preds = serde_json::json!([{
        "instance_id": "calc-new", "model_name_or_path": "m",
        "model_patch": new_test("self.assertTrue(True)"),
    }]);
    std::fs::write(dir.path().join("new.json"), preds.to_string()).unwrap();
    let out = swebench(
        dir.path(),
        &["new.jsonl", "--predictions", "new.json", "--out", "n", "-q"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = results(&dir.path().join("n"));
    let r = by_id(&res, "calc-new");
    assert_eq!(report_of(r)["patch_successfully_applied"], true, "{r:#}");
    assert_eq!(r["resolved"], false, "{r:#}");
    assert_eq!(
        report_of(r)["tests_status"]["FAIL_TO_PASS"]["failure"],
        serde_json::json!(["test_new (test_new.NewTest.test_new)"])
    );
}

const PARQUET: &str = "tests/fixtures/swebench/parquet";

/// The instances of a dataset file, read as `rondo swebench` reads them (with `--image`'s
/// template, so a repository `owner/name` is the image's).
fn read_dataset(path: &Path) -> Vec<rondo::eval::swebench::Instance> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (_, workflow, _, _) = common::check_path(&root.join("workflows/llm_ide.rondo"), true);
    rondo::eval::swebench::read_instances(path, &workflow, Some("sweb.eval.{hub_id}:latest"), true)
        .unwrap_or_else(|p| panic!("{:#?}", p.diagnostics))
}

fn setup_for(split: Option<&str>, filter: Option<&str>) -> rondo::eval::swebench::Setup {
    serde_json::from_value(serde_json::json!({
        "workflow": "w.rondo", "dataset": "d", "concurrency": 1,
        "split": split, "filter": filter,
    }))
    .unwrap()
}

/// SWE-bench's split as Hugging Face publishes it (tests/fixtures/swebench/parquet/make.py
/// writes it with pyarrow: the published columns, snappy) reads as the same instances as
/// its JSON Lines rows; the split is the file's (`test-00000-of-00001.parquet`), and
/// `--split` and `--filter` select on Parquet rows as on JSON Lines.
#[test]
fn a_parquet_dataset_as_published_reads_as_its_json_lines_rows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let jsonl = read_dataset(&root.join(DATASET));
    let mut parquet = read_dataset(&root.join(PARQUET).join("test-00000-of-00001.parquet"));
    parquet.extend(read_dataset(
        &root.join(PARQUET).join("dev-00000-of-00001.parquet"),
    ));
    let ids: Vec<&str> = parquet.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["calc-add", "textutil-slug", "stats-mean"]);
    for p in &parquet {
        let j = jsonl.iter().find(|j| j.id == p.id).unwrap();
        assert_eq!(p.problem_statement, j.problem_statement);
        assert_eq!(p.test_patch, j.test_patch);
        assert_eq!(p.fail_to_pass, j.fail_to_pass);
        assert_eq!(p.pass_to_pass, j.pass_to_pass);
        assert!(!p.fail_to_pass.is_empty());
        assert_eq!(p.split, j.split, "{}", p.id);
        assert_eq!(p.base_commit.as_deref(), Some("0".repeat(40).as_str()));
        // `acme/calc` is SWE-bench's owner/name: the repository is the image's /testbed.
        assert!(p.repo.is_none());
        assert_eq!(
            p.image.as_deref(),
            Some(format!("sweb.eval.{}:latest", p.id).as_str())
        );
    }
    // The test lists as Parquet lists of strings read the same.
    let lists = read_dataset(&root.join(PARQUET).join("lists/test-00000-of-00001.parquet"));
    assert_eq!(lists.len(), 2);
    for l in &lists {
        let j = jsonl.iter().find(|j| j.id == l.id).unwrap();
        assert_eq!(l.fail_to_pass, j.fail_to_pass);
        assert_eq!(l.pass_to_pass, j.pass_to_pass);
        assert_eq!(l.split.as_deref(), Some("test"));
    }
    let test = read_dataset(&root.join(PARQUET).join("test-00000-of-00001.parquet"));
    let chosen = |instances: Vec<_>, split, filter| -> Vec<String> {
        rondo::eval::swebench::select(instances, &setup_for(split, filter))
            .unwrap()
            .into_iter()
            .map(|i| i.id)
            .collect()
    };
    assert_eq!(
        chosen(test.clone(), Some("test"), None),
        ["calc-add", "textutil-slug"]
    );
    assert!(chosen(test.clone(), Some("dev"), None).is_empty());
    assert_eq!(chosen(test, Some("test"), Some("^text")), ["textutil-slug"]);
    let dev = read_dataset(&root.join(PARQUET).join("dev-00000-of-00001.parquet"));
    assert_eq!(chosen(dev, Some("dev"), Some("mean$")), ["stats-mean"]);
}

/// A Parquet file with a missing column, with columns of the wrong type, or cut short is
/// a located diagnostic with help, never a panic; nothing runs.
#[test]
fn a_bad_parquet_file_is_a_diagnostic_not_a_panic() {
    let dir = project();
    let bad = |file: &str| {
        let out = swebench(
            dir.path(),
            &[file, "--provider", "scripted", "--out", "bad"],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert!(!err.contains("panicked"), "{file}: {err}");
        assert!(
            err.contains("rondo::swebench::bad_instance"),
            "{file}: {err}"
        );
        assert!(!dir.path().join("bad").exists());
        err
    };
    let err = bad("tests/fixtures/swebench/parquet/bad/no_repo.parquet");
    assert!(
        err.contains("the Parquet file has no column `repo`"),
        "{err}"
    );
    assert!(err.contains("no_repo.parquet:1:"), "{err}");
    assert!(err.contains("SWE-bench's columns"), "{err}");

    let err = bad("tests/fixtures/swebench/parquet/bad/wrong_type.parquet");
    assert!(
        err.contains("the column `instance_id` holds int64; it must hold a string"),
        "{err}"
    );
    assert!(
        err.contains("the column `FAIL_TO_PASS` holds list<int64>; it must hold a string"),
        "{err}"
    );
    // Located on its line of the columns' listing: instance_id is the first column.
    assert!(err.contains("wrong_type.parquet:2:"), "{err}");

    let whole = std::fs::read(
        dir.path()
            .join("tests/fixtures/swebench/parquet/test-00000-of-00001.parquet"),
    )
    .unwrap();
    for (name, bytes) in [
        ("half.parquet", &whole[..whole.len() / 2]),
        ("last_byte.parquet", &whole[..whole.len() - 1]),
        ("magic.parquet", &whole[..4]),
    ] {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        let err = bad(name);
        assert!(err.contains(&format!("{name} as Parquet")), "{err}");
    }
    // The data pages damaged, the footer whole: the rows cannot be decoded.
    let mut damaged = whole.clone();
    for b in &mut damaged[8..whole.len() / 3] {
        *b = 0xff;
    }
    std::fs::write(dir.path().join("damaged.parquet"), &damaged).unwrap();
    let err = bad("damaged.parquet");
    assert!(err.contains("damaged.parquet as Parquet"), "{err}");
}

/// Scripted replies for the LLM-IDE workflow: each act reply a bash command (the last one
/// submits), each reflection sound.
fn llm_ide_script(commands: &[&str]) -> String {
    let mut acts: Vec<String> = commands
        .iter()
        .map(|c| {
            let params = serde_json::json!({ "command": c });
            format!("<thought>Next step.</thought> <action_type>bash</action_type> <action-params>{params}</action-params>")
        })
        .collect();
    acts.push("<thought>Submit.</thought> <action_type>submit</action_type> <action-params>{}</action-params>".into());
    let list = |items: &[String]| -> String {
        items
            .iter()
            .map(|i| format!("    - {}\n", serde_json::to_string(i).unwrap()))
            .collect()
    };
    let reflect = vec![
        "<bad_action>false</bad_action> <lessons></lessons> <summary>ok</summary>"
            .to_string();
        commands.len()
    ];
    format!(
        "replies:\n  act_next:\n{}  reflect:\n{}",
        list(&acts),
        list(&reflect)
    )
}

/// The events of an instance's run, from its workspace.
fn run_events(res: &Value) -> Vec<Value> {
    let ws = PathBuf::from(res["workspace"].as_str().unwrap());
    let run_id = res["run_id"].as_str().unwrap();
    common::events(&ws.join(".rondo/runs").join(run_id))
}

/// With no reproduction script given, the LLM-IDE agent is told to write one first, at
/// `issue_reproduction.py` of the repository, and to run it (mini-swe-agent's swebench
/// workflow); here, on a SWE-bench-style image (the repository at /testbed), the agent
/// writes it, runs it and sees the failure, fixes the code, runs it again and sees it
/// pass, and submits. The patch resolves the instance and leaves the reproduction out.
#[test]
fn the_agent_writes_and_runs_a_reproduction_first_and_its_patch_resolves() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let id = "acme__calc-2";
    let image = "rondo-test-sweb.acme_1776_calc-2:latest";
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", image])
        .output();
    let base = testbed_build(dir.path(), id);
    testbed_dataset(dir.path(), id, &base);
    let script = llm_ide_script(&[
        "cd /testbed && printf 'from calc import add\\nassert add(2, 3) == 5, add(2, 3)\\nprint(\"reproduction passed\")\\n' > issue_reproduction.py && python3 issue_reproduction.py",
        "cd /testbed && sed -i 's/return a - b/return a + b/' calc.py && python3 issue_reproduction.py",
    ]);
    std::fs::write(dir.path().join("repro.yaml"), script).unwrap();
    let out = swebench(
        dir.path(),
        &[
            "testbed.jsonl",
            "--provider",
            "scripted",
            "--script",
            "repro.yaml",
            "--image",
            "rondo-test-sweb.{hub_id}:latest",
            "--build",
            "builds",
            "--out",
            "t",
            "-q",
        ],
    );
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", image])
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let res = results(&dir.path().join("t"));
    let r = by_id(&res, id);
    assert_eq!(r["resolved"], true, "{r:#}");
    let events = run_events(r);
    let acts = common::prompts_to(&events, "act_next");
    assert!(
        acts[0].contains("Reproduce the issue first: write a script that demonstrates it at `/testbed/issue_reproduction.py`"),
        "{}",
        acts[0]
    );
    assert!(!acts[0].contains("<failing_program>"), "{}", acts[0]);
    let reflections = common::prompts_to(&events, "reflect");
    assert!(
        reflections[0].contains("AssertionError: -1"),
        "{}",
        reflections[0]
    );
    assert!(
        reflections[1].contains("reproduction passed"),
        "{}",
        reflections[1]
    );
    let patch = r["patch"].as_str().unwrap();
    assert!(patch.contains("+    return a + b\n"), "{patch}");
    assert!(!patch.contains("issue_reproduction"), "{patch}");
    let ws = PathBuf::from(r["workspace"].as_str().unwrap());
    assert!(ws.join("issue_reproduction.py").is_file());
    // The submit step's own patch leaves it out too.
    let artifact = std::fs::read_to_string(ws.join("patch.diff")).unwrap();
    assert!(artifact.contains("calc.py"), "{artifact}");
    assert!(!artifact.contains("issue_reproduction"), "{artifact}");
    assert!(batch_containers(&dir.path().join("t")).is_empty());
}

/// `--reproductions DIR`: the instance's script `DIR/<id>.py` is written at
/// `issue_reproduction.py` of its repository and run before the first operation
/// (setup_reproduction_script); the prompts show where it is, its code, how to run it and
/// what it printed, and say not to change it. The agent fixes the code and reruns it; the
/// script is not part of the patch, which resolves the instance.
#[test]
fn a_given_reproduction_script_is_written_run_and_shown_before_the_first_operation() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let repro = "from calc import add\nassert add(2, 3) == 5, f\"add(2, 3) = {add(2, 3)}\"\nprint(\"reproduction passed: {{ not a template }}\")\n";
    std::fs::create_dir_all(dir.path().join("repros")).unwrap();
    std::fs::write(dir.path().join("repros/calc-add.py"), repro).unwrap();
    let script = llm_ide_script(&[
        "cd /work && sed -i 's/return a - b/return a + b/' calc.py && python3 issue_reproduction.py",
    ]);
    std::fs::write(dir.path().join("repro.yaml"), script).unwrap();
    let out = swebench(
        dir.path(),
        &[
            DATASET,
            "--provider",
            "scripted",
            "--script",
            "repro.yaml",
            "-i",
            "calc-add",
            "--reproductions",
            "repros",
            "--out",
            "r",
            "-q",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let res = results(&dir.path().join("r"));
    let r = by_id(&res, "calc-add");
    assert_eq!(r["resolved"], true, "{r:#}");
    let ws = PathBuf::from(r["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("issue_reproduction.py")).unwrap(),
        repro
    );
    let events = run_events(r);
    let calls: Vec<String> = common::of_kind(&events, "tool_call")
        .iter()
        .map(|e| e["role"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        calls.first().map(String::as_str),
        Some("setup_reproduction_script"),
        "{calls:?}"
    );
    let acts = common::prompts_to(&events, "act_next");
    let first = &acts[0];
    for part in [
        "<failing_program>",
        "A script demonstrating the issue is available at `/work/issue_reproduction.py`",
        "assert add(2, 3) == 5, f\"add(2, 3) = {add(2, 3)}\"",
        "cd /work && python issue_reproduction.py",
        "$ python3 issue_reproduction.py",
        "AssertionError: add(2, 3) = -1",
        "Modify the reproduction script to make it pass",
    ] {
        assert!(first.contains(part), "{part:?} not in\n{first}");
    }
    assert!(!first.contains("Reproduce the issue first"), "{first}");
    let reflections = common::prompts_to(&events, "reflect");
    assert!(
        reflections[0].contains("reproduction passed: {{ not a template }}"),
        "{}",
        reflections[0]
    );
    let patch = r["patch"].as_str().unwrap();
    assert!(patch.contains("+    return a + b\n"), "{patch}");
    assert!(!patch.contains("issue_reproduction"), "{patch}");
}

/// The LLM-IDE workflow with its command timeouts cut to 2 seconds (the rest as shipped):
/// a reproduction script that hangs and a bash command that hangs each reach the agent as
/// "timed out after 2 seconds", not as an empty observation.
#[test]
fn the_llm_ide_agents_commands_and_its_reproduction_say_they_timed_out() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let dir = project();
    let text = std::fs::read_to_string(dir.path().join("workflows/llm_ide.rondo")).unwrap();
    let fast = text
        .replace("  timeout = 120s\n", "  timeout = 2s\n")
        .replace(
            "  timeout = 60s\n  log = \"logs/op_0_reproduction.log\"",
            "  timeout = 2s\n  log = \"logs/op_0_reproduction.log\"",
        );
    assert_eq!(fast.matches("timeout = 2s").count(), 3, "{fast}");
    std::fs::write(dir.path().join("workflows/llm_ide_fast.rondo"), fast).unwrap();
    std::fs::create_dir_all(dir.path().join("repros")).unwrap();
    std::fs::write(
        dir.path().join("repros/calc-add.py"),
        "import time\nprint('started', flush=True)\ntime.sleep(60)\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("hang.yaml"), llm_ide_script(&["sleep 60"])).unwrap();
    let out = swebench(
        dir.path(),
        &[
            DATASET,
            "--workflow",
            "workflows/llm_ide_fast.rondo",
            "--provider",
            "scripted",
            "--script",
            "hang.yaml",
            "-i",
            "calc-add",
            "--reproductions",
            "repros",
            "--out",
            "h",
            "-q",
        ],
    );
    let res = results(&dir.path().join("h"));
    let r = by_id(&res, "calc-add");
    assert_eq!(r["exit"], "submitted", "{}", stderr(&out));
    let events = run_events(r);
    let acts = common::prompts_to(&events, "act_next");
    let failing = acts[0]
        .split("<failing_program>")
        .nth(1)
        .unwrap_or_default();
    assert!(
        failing.contains("started\ntimed out after 2 seconds"),
        "{}",
        acts[0]
    );
    let reflections = common::prompts_to(&events, "reflect");
    let observation = reflections[0]
        .split("<observation>")
        .nth(1)
        .unwrap_or_default();
    assert!(
        observation
            .trim_start()
            .starts_with("timed out after 2 seconds"),
        "{}",
        reflections[0]
    );
}
