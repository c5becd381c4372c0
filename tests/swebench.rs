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

/// Every instance runs in its own workspace and container: the two right fixes pass their
/// tests, the wrong one does not; each patch is the repository's change only (none of the
/// run's logs or artifacts), and preds.json / report.json follow from the results.
#[test]
fn each_instance_gets_a_real_patch_and_its_tests_decide_resolved() {
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
    assert_eq!(
        calc["tests"][0]["command"],
        "python3 -m unittest -q test_calc"
    );
    assert_eq!(calc["tests"][0]["exit_code"], 0);
    assert!(
        calc["tests"][0]["output"]
            .as_str()
            .unwrap()
            .contains("Ran 2 tests")
    );

    let slug = by_id(&res, "textutil-slug");
    assert_eq!(slug["resolved"], true);
    assert!(
        slug["patch"]
            .as_str()
            .unwrap()
            .contains("+    return \"-\".join(title.lower().split())\n")
    );

    let stats = by_id(&res, "stats-mean");
    assert_eq!(stats["exit"], "submitted");
    assert_eq!(stats["resolved"], false);
    assert!(
        stats["patch"]
            .as_str()
            .unwrap()
            .contains("+    return sum(xs) / (len(xs) + 1)\n")
    );
    assert_eq!(stats["tests"][0]["exit_code"], 1);
    assert!(
        stats["tests"][0]["output"]
            .as_str()
            .unwrap()
            .contains("AssertionError: 1.5 != 2")
    );

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
    // The run's records are in the workspace's system area, as `rondo run --workspace` keeps them.
    let run_json: Value = serde_json::from_str(
        &std::fs::read_to_string(ws.join(".rondo/runs/calc-add/run.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(run_json["exit"], "submitted");

    let preds: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("swe/preds.json")).unwrap())
            .unwrap();
    assert_eq!(preds["calc-add"]["model_patch"], calc["patch"]);
    assert_eq!(preds["stats-mean"]["instance_id"], "stats-mean");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("swe/report.json")).unwrap())
            .unwrap();
    assert_eq!(report["n"], 3);
    assert_eq!(report["resolved"], 2);
    assert_eq!(report["unresolved"], 1);
    assert_eq!(report["with_patch"], 3);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("2 resolved of 3 (66.7%), 1 unresolved"),
        "{table}"
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
            r#"{"instance_id": "calc", "repo": "tests/fixtures/swebench/repos/calc", "problem_statement": "add(2, 3) returns -1", "test_commands": ["python3 -m unittest -q test_calc"]}"#,
            "\n",
            r#"{"instance_id": "imaged", "repo": "tests/fixtures/swebench/repos/calc", "problem_statement": "x", "image": "rondo-no-such-image:0"}"#,
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
