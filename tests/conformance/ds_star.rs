//! `../shared/reference/ds-star.md`, rule by rule, on real runs of `workflows/ds_star.rondo`
//! through the `rondo` binary: the run directory's artifacts by their exact names, the JSON
//! contracts field by field, the verifier's local rule on a failed execution, the router's
//! backtrack, the round bound, the planner's fallback, and the providers (`mock`, `openai`,
//! `gemini`, `local`) against a local server speaking each vendor's wire protocol.
//!
//! Every run starts in a fresh folder (the folder "rondo was started in", which `data_dir` is
//! relative to) with no API key in its environment.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::{events, json as read_json, keys};

/// Variables a run of a hosted profile would read: none is inherited from the test's
/// environment.
const VENDOR_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "LOCAL_LLM_ENDPOINT",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OLLAMA_HOST",
];

fn workflow() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/ds_star.rondo")
}

/// The reference's mock client, as the workflow's default reply set holds it.
fn mock_script() -> rondo::run::scripted::Script {
    rondo::run::scripted::Script::from_yaml(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/scripts/ds_star_hello.yaml"),
    )
    .expect("the default reply set parses")
}

const HELLO: &str = "Create hello.txt in the run directory containing 'hello'.";

/// The folder a user starts `rondo` in.
struct Site {
    dir: tempfile::TempDir,
}

struct Run {
    out: Output,
    /// The run's system area (`runs/<id>`: events, state).
    dir: PathBuf,
    /// Its workspace: the reference's `runs/<timestamp>/`, where every artifact is.
    ws: PathBuf,
}

impl Site {
    fn new() -> Self {
        Site {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("canonical tempdir")
    }

    /// Replies for `--script script.yaml`.
    fn script(&self, yaml: &str) {
        std::fs::write(self.dir.path().join("script.yaml"), yaml).expect("write script");
    }

    fn run(&self, id: &str, args: &[&str]) -> Run {
        self.run_in(self.dir.path(), id, args, &[])
    }

    fn run_in(&self, cwd: &Path, id: &str, args: &[&str], env: &[(&str, String)]) -> Run {
        let runs = self.dir.path().join("runs");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.current_dir(cwd)
            .args(["run", "-q"])
            .arg(workflow())
            .arg("--run-dir")
            .arg(&runs)
            .args(["--run-id", id])
            .args(args);
        for var in VENDOR_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run rondo");
        let dir = runs.join(id);
        Run {
            out,
            ws: dir.join("workspace"),
            dir,
        }
    }
}

impl Run {
    fn ok(&self) -> &Self {
        assert!(
            self.out.status.success(),
            "exit {:?}:\n{}",
            self.out.status.code(),
            String::from_utf8_lossy(&self.out.stderr)
        );
        self
    }

    fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.ws.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e} (run {})", self.dir.display()))
    }

    fn json(&self, name: &str) -> Value {
        read_json(self.ws.join(name))
    }

    fn events(&self) -> Vec<Value> {
        events(&self.dir)
    }

    /// The roles in the order they ran.
    fn path(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "role_start")
            .map(|e| e["role"].as_str().expect("role").to_string())
            .collect()
    }

    /// The prompts one llm role was sent, one a visit (its first attempt), whether the
    /// reply was accepted or not.
    fn prompts(&self, role: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| {
                (e["event"] == "llm_response" || e["event"] == "invalid_output")
                    && e["role"] == role
                    && e["attempt"] == 1
            })
            .map(|e| e["prompt"].as_str().expect("prompt").to_string())
            .collect()
    }

    /// The workspace's `round_XX_code.py` files, sorted.
    fn code_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.ws)
            .expect("workspace")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("round_") && n.ends_with("_code.py"))
            .collect();
        names.sort();
        names
    }
}

fn step(id: u64, title: &str, details: &str, status: &str) -> Value {
    json!({"id": id, "title": title, "details": details, "status": status})
}

/// Single-quoted YAML of a reply (quotes doubled).
fn yq(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

const SUFFICIENT: &str =
    r#"{"sufficient": true, "reason": "done.", "missing": [], "next_action": "stop"}"#;
const NOT_YET: &str = r#"{"sufficient": false, "reason": "Not yet.", "missing": ["more"], "next_action": "add_step"}"#;
const ADD_STEP: &str = r#"{"action": "add_step", "backtrack_to_step_id": null}"#;

// ---------------------------------------------------------------- 2) data flow, artifacts

/// Guide §2 and §5: one run writes `run_metadata.json`, `descriptions.json`, `plan.json`,
/// `round_XX_prompt.txt`, `round_XX_code.py`, `round_XX_exec.json` and `final_answer.md`,
/// by those exact names; §3/§6: with the mock client (the workflow's default provider and
/// reply set, no `--script`) the hello.txt example runs as the reference's does.
#[test]
fn the_mock_client_writes_every_artifact_by_its_exact_name() {
    let site = Site::new();
    let run = site.run("hello", &["-i", &format!("question={HELLO}")]);
    run.ok();
    let mut names: Vec<String> = std::fs::read_dir(&run.ws)
        .expect("workspace")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "descriptions.json",
            "final_answer.md",
            "hello.txt",
            "logs",
            "plan.json",
            "round_00_code.py",
            "round_00_exec.json",
            "round_00_prompt.txt",
            "run_metadata.json"
        ]
    );
    // The executor ran the script with the run directory as its working directory.
    assert_eq!(run.text("hello.txt"), "hello");
    let mock = mock_script();
    assert_eq!(
        run.text("round_00_code.py"),
        mock.reply("coder", 1, 0).unwrap()
    );
    assert_eq!(
        run.text("final_answer.md"),
        "Created hello.txt in the run directory."
    );
    // round_XX_prompt.txt is the coder's prompt, as sent.
    let coder = run.prompts("coder");
    assert_eq!(coder.len(), 1);
    assert_eq!(run.text("round_00_prompt.txt"), coder[0]);
    assert!(coder[0].starts_with("ROLE: CODER\n"));
    // plan.json: the planner's step, field by field, done once its script ran.
    assert_eq!(
        run.json("plan.json"),
        json!([step(1, "Write hello.txt", HELLO, "done")])
    );
    // round_XX_exec.json: the execution of round_00_code.py.
    let exec = run.json("round_00_exec.json");
    assert_eq!(exec["exit_code"], 0);
    assert_eq!(exec["stdout"], "wrote hello.txt\n");
    assert_eq!(exec["stderr"], "");
    assert_eq!(exec["timed_out"], false);
    // run_metadata.json says how the run ended.
    let meta = run.json("run_metadata.json");
    assert_eq!(
        keys(&meta),
        [
            "data_dir",
            "ended_by",
            "max_rounds",
            "plan_steps",
            "question",
            "rounds",
            "status",
            "verdict",
            "workflow"
        ]
    );
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["ended_by"], "sufficient");
    assert_eq!(meta["rounds"], 1);
    assert_eq!(meta["max_rounds"], 8);
    assert_eq!(meta["plan_steps"], 1);
    assert_eq!(meta["question"], HELLO);
    // The verifier's JSON contract, field by field.
    assert_eq!(
        keys(&meta["verdict"]),
        ["missing", "next_action", "reason", "sufficient"]
    );
    assert_eq!(meta["verdict"]["sufficient"], true);
    assert_eq!(meta["verdict"]["next_action"], "stop");
    // The analyzer is local tooling: only the planner, coder, verifier and finalyzer asked
    // the model, each once.
    let asked: Vec<String> = run
        .events()
        .iter()
        .filter(|e| e["event"] == "llm_response")
        .map(|e| e["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(asked, ["planner", "coder", "verifier", "finalyzer"]);
    assert!(
        run.events()
            .iter()
            .any(|e| e["event"] == "tool_call" && e["role"] == "analyzer")
    );
}

/// `--provider mock` is the reference CLI's spelling of the same client.
#[test]
fn provider_mock_is_the_deterministic_mock_client() {
    let site = Site::new();
    let run = site.run("mock", &["--provider", "mock", "-i", "question=anything"]);
    run.ok();
    assert_eq!(run.text("hello.txt"), "hello");
    let profiles: Vec<Value> = run
        .events()
        .iter()
        .filter(|e| e["event"] == "llm_response")
        .map(|e| e["profile"].clone())
        .collect();
    assert!(!profiles.is_empty() && profiles.iter().all(|p| p == "mock"));
}

// ------------------------------------------------------------------------ analyzer, data

/// The analyzer describes the user's data folder, relative to where `rondo` was started;
/// `descriptions.json` is the reference's `{files, warnings}`; the prompts see it, and the
/// generated scripts open the files by the path given.
#[test]
fn data_dir_is_the_users_folder_relative_to_where_rondo_started() {
    let site = Site::new();
    let data = site.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("sales.csv"), "region,amount\nnorth,10\nsouth,\n").unwrap();
    let sub = site.path().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: |\n    import csv, json\n    path = list(json.load(open('descriptions.json'))['files'])[0]\n    print(len(list(csv.DictReader(open(path)))))\n  verifier: {}\n  finalyzer: two rows\nunreached: [debugger, router]\n",
        yq(r#"{"id": 1, "title": "Count rows", "details": "Read the CSV.", "status": "todo"}"#),
        yq(SUFFICIENT)
    ));
    // The default `data` is the folder beside the user, not the run's.
    let run = site.run(
        "default",
        &["--script", "script.yaml", "-i", "question=How many rows?"],
    );
    run.ok();
    let csv = data.join("sales.csv").display().to_string();
    let descriptions = run.json("descriptions.json");
    assert_eq!(keys(&descriptions), ["files", "warnings"]);
    assert_eq!(descriptions["warnings"], json!([]));
    assert_eq!(keys(&descriptions["files"]), [csv.as_str()]);
    let sales = &descriptions["files"][&csv];
    assert_eq!(sales["rows"], 2);
    assert_eq!(
        sales["columns"],
        json!([
            {"name": "region", "type": "string", "missing": 0},
            {"name": "amount", "type": "number", "missing": 1}
        ])
    );
    assert!(run.prompts("planner")[0].contains("sales.csv"));
    assert!(run.prompts("coder")[0].contains("\"amount\""));
    assert_eq!(run.json("round_00_exec.json")["stdout"], "2\n");
    // From another folder, a relative data_dir is relative to that folder.
    let script = site.path().join("script.yaml").display().to_string();
    let again = site.run_in(
        &sub,
        "relative",
        &[
            "--script",
            &script,
            "-i",
            "question=How many rows?",
            "-i",
            "data_dir=../data",
        ],
        &[],
    );
    again.ok();
    assert_eq!(again.json("descriptions.json"), descriptions);
    assert_eq!(
        again.json("run_metadata.json")["data_dir"],
        data.display().to_string()
    );
}

/// A data folder that is missing or empty is said so in `descriptions.json` and in the
/// prompts, never a bare `{}`.
#[test]
fn an_empty_or_missing_data_folder_is_reported_in_the_descriptions() {
    let site = Site::new();
    std::fs::create_dir_all(site.path().join("empty")).unwrap();
    for (id, data_dir, said) in [
        ("missing", "nowhere", "does not exist: no files described"),
        ("empty", "empty", "is empty: no files described"),
    ] {
        let run = site.run(
            id,
            &[
                "-i",
                &format!("question={HELLO}"),
                "-i",
                &format!("data_dir={data_dir}"),
            ],
        );
        run.ok();
        let warning = format!(
            "data directory {} {said}",
            site.path().join(data_dir).display()
        );
        assert_eq!(
            run.json("descriptions.json"),
            json!({"files": {}, "warnings": [warning]})
        );
        assert!(run.prompts("planner")[0].contains(&warning), "{id}");
        assert!(run.prompts("coder")[0].contains(&warning), "{id}");
    }
}

// ------------------------------------------------------------------------------- planner

/// Guide §3: "Planner code will fallback to using raw text if JSON parse fails (coerce
/// logic)": whatever the planner replies becomes exactly one `todo` step numbered by the
/// loop — its title and details kept when it is a JSON object, its raw text as the details
/// otherwise — and the run goes on.
#[test]
fn a_planner_reply_that_is_not_a_step_still_becomes_one() {
    let site = Site::new();
    let prose = "Write 'hello' into hello.txt, then print it.";
    let list = r#"["write", "hello.txt"]"#;
    let cases: &[(&str, &str, &str, &str)] = &[
        ("prose", prose, "Plan step", prose),
        (
            "no_id",
            r#"{"title": "Write hello", "details": "hello.txt", "status": "todo"}"#,
            "Write hello",
            "hello.txt",
        ),
        (
            "string_id",
            r#"{"id": "1", "title": "Write hello", "details": "hello.txt", "status": "todo"}"#,
            "Write hello",
            "hello.txt",
        ),
        (
            "word_id",
            r#"{"id": "one", "title": "Write hello", "details": "hello.txt", "status": "pending"}"#,
            "Write hello",
            "hello.txt",
        ),
        (
            "numbers",
            r#"{"id": 7, "title": 42, "details": "hello.txt"}"#,
            "42",
            "hello.txt",
        ),
        ("no_details", r#"{"id": 1}"#, "Plan step", ""),
        ("list", list, "Plan step", list),
    ];
    for (id, reply, title, details) in cases {
        site.script(&format!(
            "replies:\n  planner: {}\n  coder: \"print('ok')\"\n  verifier: {}\n  finalyzer: done\nunreached: [debugger, router]\n",
            yq(reply),
            yq(SUFFICIENT)
        ));
        let run = site.run(id, &["--script", "script.yaml", "-i", "question=q"]);
        run.ok();
        assert_eq!(
            run.json("plan.json"),
            json!([step(1, title, details, "done")]),
            "{id}"
        );
        assert_eq!(
            run.json("run_metadata.json")["ended_by"],
            "sufficient",
            "{id}"
        );
        assert!(run.path().contains(&"coder".to_string()), "{id}");
    }
}

// ------------------------------------------------------------------ executor, debugger

/// Guide §3: "if last exec had non-zero exit code, the verifier returns fix_step without
/// calling the LLM". A failing script goes to the debugger, whose patch is executed and
/// overwrites round_XX_code.py; the verifier model sees only the successful execution.
#[test]
fn a_failed_execution_is_debugged_and_never_shown_to_the_verifier_model() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: |\n    import sys\n    print('boom', file=sys.stderr)\n    sys.exit(3)\n  debugger: \"print('fixed')\"\n  verifier: {}\n  finalyzer: fixed\nunreached: [router]\n",
        yq(r#"{"id": 1, "title": "Print", "details": "Print something.", "status": "todo"}"#),
        yq(SUFFICIENT)
    ));
    let run = site.run("debug", &["--script", "script.yaml", "-i", "question=q"]);
    run.ok();
    assert_eq!(
        run.path(),
        [
            "analyzer",
            "planner",
            "coder",
            "executor",
            "debugger",
            "executor",
            "verifier",
            "verified",
            "finalyzer",
            "wrap_up"
        ]
    );
    let ev = run.events();
    let failed = ev
        .iter()
        .position(|e| e["event"] == "tool_call" && e["role"] == "executor")
        .unwrap();
    assert_eq!(ev[failed]["result"]["exit_code"], 3);
    let debugger = ev
        .iter()
        .position(|e| e["event"] == "role_start" && e["role"] == "debugger")
        .unwrap();
    assert!(
        !ev[failed..debugger]
            .iter()
            .any(|e| e["event"] == "llm_response" && e["role"] == "verifier")
    );
    // The debugger saw the failure; its patch is what round_00 holds and what ran.
    assert!(run.prompts("debugger")[0].contains("boom"));
    assert_eq!(run.text("round_00_code.py"), "print('fixed')\n");
    assert_eq!(run.json("round_00_exec.json")["stdout"], "fixed\n");
    assert!(run.text("logs/round_00_exec_1.log").contains("boom"));
    let verifier = run.prompts("verifier");
    assert_eq!(verifier.len(), 1);
    assert!(verifier[0].contains("fixed") && !verifier[0].contains("boom"));
    assert_eq!(run.json("plan.json")[0]["status"], "done");
}

/// When the patched script fails too, the verdict is the reference's local `fix_step`
/// (no verifier call), the step is `failed` in plan.json, and the router decides.
#[test]
fn a_round_whose_patch_still_fails_gets_fix_step_without_the_verifier_model() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner:\n    - {}\n    - {}\n  coder:\n    - \"raise SystemExit(4)\"\n    - \"print('second')\"\n  debugger: \"raise SystemExit(5)\"\n  verifier: {}\n  router: {}\n  finalyzer: done\n",
        yq(r#"{"id": 1, "title": "First", "details": "a", "status": "todo"}"#),
        yq(r#"{"id": 2, "title": "Second", "details": "b", "status": "todo"}"#),
        yq(SUFFICIENT),
        yq(ADD_STEP)
    ));
    let run = site.run("fix", &["--script", "script.yaml", "-i", "question=q"]);
    run.ok();
    assert_eq!(
        run.path(),
        [
            "analyzer",
            "planner",
            "coder",
            "executor",
            "debugger",
            "executor",
            "exec_failed",
            "round_end",
            "router",
            "planner",
            "coder",
            "executor",
            "verifier",
            "verified",
            "finalyzer",
            "wrap_up"
        ]
    );
    assert_eq!(run.prompts("verifier").len(), 1);
    let router = &run.prompts("router")[0];
    assert!(router.contains("\"next_action\": \"fix_step\""), "{router}");
    assert!(router.contains("Last code execution failed (non-zero exit code)."));
    assert_eq!(
        run.json("plan.json"),
        json!([
            step(1, "First", "a", "failed"),
            step(2, "Second", "b", "done")
        ])
    );
    // The round's code and execution match: the patch, and its exit code.
    assert_eq!(run.text("round_00_code.py"), "raise SystemExit(5)\n");
    assert_eq!(run.json("round_00_exec.json")["exit_code"], 5);
    assert_eq!(run.json("round_01_exec.json")["stdout"], "second\n");
}

/// Every debugger attempt is executed, the last one too: in every round, round_XX_code.py
/// is the script round_XX_exec.json ran.
#[test]
fn round_code_always_matches_round_exec() {
    let site = Site::new();
    let coder: Vec<String> = (1..=3)
        .map(|n| format!("    - \"print('coder {n}'); raise SystemExit(1)\"\n"))
        .collect();
    let debugger: Vec<String> = (1..=3)
        .map(|n| format!("    - \"print('debugger {n}'); raise SystemExit(1)\"\n"))
        .collect();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder:\n{}  debugger:\n{}  router: {}\n  finalyzer: gave up\nunreached: [verifier]\n",
        yq(r#"{"id": 1, "title": "Try", "details": "d", "status": "todo"}"#),
        coder.concat(),
        debugger.concat(),
        yq(ADD_STEP)
    ));
    let run = site.run(
        "attempts",
        &[
            "--script",
            "script.yaml",
            "-i",
            "question=q",
            "-i",
            "max_rounds=3",
        ],
    );
    run.ok();
    assert_eq!(
        run.code_files(),
        ["round_00_code.py", "round_01_code.py", "round_02_code.py"]
    );
    for r in 0..3 {
        let code = run.text(&format!("round_{r:02}_code.py"));
        let exec = run.json(&format!("round_{r:02}_exec.json"));
        assert!(
            code.contains(&format!("debugger {}", r + 1)),
            "round {r}: {code}"
        );
        assert_eq!(exec["stdout"], format!("debugger {}\n", r + 1), "round {r}");
    }
    assert_eq!(run.json("run_metadata.json")["ended_by"], "max_rounds");
    assert_eq!(run.prompts("verifier").len(), 0);
}

// ------------------------------------------------------------------------ router, plan

/// The router's `{"action", "backtrack_to_step_id"}`: a backtrack to a step of the plan cuts
/// it there and the planner adds the replacement, numbered by the loop; a step id outside
/// the plan (0, 99, null) adds a step, as the reference router does.
#[test]
fn the_router_backtracks_to_a_step_and_ignores_ids_outside_the_plan() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner:\n    - {}\n    - {}\n    - {}\n  coder: \"print('ok')\"\n  verifier:\n    - {}\n    - {}\n    - {}\n  router:\n    - {}\n    - {}\n  finalyzer: done\nunreached: [debugger]\n",
        yq(r#"{"id": 1, "title": "Numbers", "details": "nums = [1, 2, 3]", "status": "todo"}"#),
        yq(r#"{"id": 2, "title": "Sum", "details": "sum(nums)", "status": "todo"}"#),
        yq(r#"{"id": 5, "title": "Mean", "details": "sum(nums) / 3", "status": "todo"}"#),
        yq(NOT_YET),
        yq(r#"{"sufficient": false, "reason": "The sum is not the mean.", "missing": ["mean"], "next_action": "fix_step"}"#),
        yq(SUFFICIENT),
        yq(ADD_STEP),
        yq(r#"{"action": "backtrack", "backtrack_to_step_id": 2}"#)
    ));
    let run = site.run("back", &["--script", "script.yaml", "-i", "question=mean"]);
    run.ok();
    assert_eq!(
        run.json("plan.json"),
        json!([
            step(1, "Numbers", "nums = [1, 2, 3]", "done"),
            step(2, "Mean", "sum(nums) / 3", "done")
        ])
    );
    let back: Vec<Value> = run
        .events()
        .into_iter()
        .filter(|e| e["event"] == "route" && e["backtrack"] == true)
        .collect();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0]["from"], "router");
    assert_eq!(back[0]["to"][0], "truncate_plan");
    // The replacement step saw the cut plan.
    assert!(!run.prompts("planner")[2].contains("\"Sum\""));
    assert_eq!(run.json("run_metadata.json")["rounds"], 3);

    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: \"print('ok')\"\n  verifier:\n    - {}\n    - {}\n    - {}\n    - {}\n  router:\n    - {}\n    - {}\n    - {}\n  finalyzer: done\nunreached: [debugger]\n",
        yq(r#"{"id": 1, "title": "Step", "details": "d", "status": "todo"}"#),
        yq(NOT_YET),
        yq(NOT_YET),
        yq(NOT_YET),
        yq(SUFFICIENT),
        yq(r#"{"action": "backtrack", "backtrack_to_step_id": 0}"#),
        yq(r#"{"action": "backtrack", "backtrack_to_step_id": 99}"#),
        yq(r#"{"action": "backtrack", "backtrack_to_step_id": null}"#)
    ));
    let run = site.run("outside", &["--script", "script.yaml", "-i", "question=q"]);
    run.ok();
    let plan = run.json("plan.json");
    let ids: Vec<u64> = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert!(!run.path().contains(&"truncate_plan".to_string()));
}

/// A router reply that is not JSON is the reference router's default, `add_step`; a
/// verifier reply that is not JSON is its default result (not sufficient), which the router
/// is shown.
#[test]
fn unreadable_router_and_verifier_replies_take_the_reference_defaults() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: \"print('ok')\"\n  verifier:\n    - \"It looks fine to me.\"\n    - {}\n  router: \"Add another step, I think.\"\n  finalyzer: done\nunreached: [debugger]\n",
        yq(r#"{"id": 1, "title": "Step", "details": "d", "status": "todo"}"#),
        yq(SUFFICIENT)
    ));
    let run = site.run(
        "unreadable",
        &["--script", "script.yaml", "-i", "question=q"],
    );
    run.ok();
    let path = run.path();
    let router_at = path.iter().position(|r| r == "router").unwrap();
    assert_eq!(
        &path[router_at - 3..router_at + 2],
        [
            "verifier",
            "verdict_unreadable",
            "round_end",
            "router",
            "planner"
        ]
    );
    assert!(run.prompts("router")[0].contains("Verifier returned invalid JSON."));
    assert_eq!(run.json("plan.json").as_array().unwrap().len(), 2);
}

// ------------------------------------------------------------------------- max rounds

/// `max_rounds` bounds the loop and the run ends through the finalyzer, whatever the value:
/// 20 rounds of `add_step` are 20 rounds (round_00 to round_19), not a `limit` exit.
#[test]
fn max_rounds_is_the_real_bound_of_the_loop() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: \"print('round')\"\n  verifier: {}\n  router: {}\n  finalyzer: out of rounds\nunreached: [debugger]\n",
        yq(r#"{"id": 1, "title": "More", "details": "d", "status": "todo"}"#),
        yq(NOT_YET),
        yq(ADD_STEP)
    ));
    let run = site.run(
        "twenty",
        &[
            "--script",
            "script.yaml",
            "-i",
            "question=q",
            "-i",
            "max_rounds=20",
        ],
    );
    run.ok();
    let expected: Vec<String> = (0..20).map(|r| format!("round_{r:02}_code.py")).collect();
    assert_eq!(run.code_files(), expected);
    assert!(run.ws.join("round_19_exec.json").is_file());
    assert_eq!(run.text("final_answer.md"), "out of rounds");
    let meta = run.json("run_metadata.json");
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["ended_by"], "max_rounds");
    assert_eq!(meta["rounds"], 20);
    assert_eq!(meta["plan_steps"], 20);
    // The last round asks no router: the rounds are used up.
    assert_eq!(run.prompts("router").len(), 19);
    assert_eq!(run.prompts("planner").len(), 20);
}

/// Rounds started by a backtrack count: `max_rounds = 3` with a backtrack after every
/// round is 3 rounds.
#[test]
fn rounds_started_by_backtracks_count_toward_max_rounds() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: \"print('x')\"\n  verifier: {}\n  router: {}\n  finalyzer: done\nunreached: [debugger]\n",
        yq(r#"{"id": 1, "title": "Again", "details": "d", "status": "todo"}"#),
        yq(NOT_YET),
        yq(r#"{"action": "backtrack", "backtrack_to_step_id": 1}"#)
    ));
    let run = site.run(
        "backtracks",
        &[
            "--script",
            "script.yaml",
            "-i",
            "question=q",
            "-i",
            "max_rounds=3",
        ],
    );
    run.ok();
    assert_eq!(
        run.code_files(),
        ["round_00_code.py", "round_01_code.py", "round_02_code.py"]
    );
    let truncations = run.path().iter().filter(|r| *r == "truncate_plan").count();
    assert_eq!(truncations, 2);
    let meta = run.json("run_metadata.json");
    assert_eq!(
        (meta["rounds"].as_u64(), meta["ended_by"].as_str()),
        (Some(3), Some("max_rounds"))
    );
    assert_eq!(
        run.json("plan.json"),
        json!([step(1, "Again", "d", "done")])
    );
}

/// `rounds` counts rounds exactly however the run ends: a router `stop` in the second
/// round is 2 rounds; a verifier `stop` without `sufficient` is said so.
#[test]
fn rounds_are_counted_exactly_and_the_ending_is_recorded() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner: {}\n  coder: \"print('x')\"\n  verifier: {}\n  router:\n    - {}\n    - {}\n  finalyzer: stopped\nunreached: [debugger]\n",
        yq(r#"{"id": 1, "title": "Look", "details": "d", "status": "todo"}"#),
        yq(NOT_YET),
        yq(ADD_STEP),
        yq(r#"{"action": "stop", "backtrack_to_step_id": null}"#)
    ));
    let run = site.run(
        "router_stop",
        &["--script", "script.yaml", "-i", "question=q"],
    );
    run.ok();
    let meta = run.json("run_metadata.json");
    assert_eq!(meta["rounds"], 2);
    assert_eq!(meta["ended_by"], "router_stop");
    assert_eq!(run.code_files().len(), 2);
    assert_eq!(run.text("final_answer.md"), "stopped");

    site.script(&format!(
        "replies:\n  planner: {}\n  coder: \"print('x')\"\n  verifier: {}\n  finalyzer: cannot\nunreached: [debugger, router]\n",
        yq(r#"{"id": 1, "title": "Look", "details": "d", "status": "todo"}"#),
        yq(r#"{"sufficient": false, "reason": "No data.", "missing": ["data"], "next_action": "stop"}"#)
    ));
    let run = site.run(
        "verifier_stop",
        &["--script", "script.yaml", "-i", "question=q"],
    );
    run.ok();
    let meta = run.json("run_metadata.json");
    assert_eq!(
        (meta["rounds"].as_u64(), meta["ended_by"].as_str()),
        (Some(1), Some("verifier_stop"))
    );
    assert!(run.prompts("router").is_empty());
}

/// A bound of 0 rounds cannot start a run: the input is refused with its reason.
#[test]
fn max_rounds_below_one_is_refused_at_start() {
    let site = Site::new();
    let run = site.run("zero", &["-i", "question=q", "-i", "max_rounds=0"]);
    assert_eq!(run.out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.out.stderr);
    assert!(err.contains("input `max_rounds` is 0"), "{err}");
    assert!(!run.dir.join("run.json").exists());
}

/// The plan is updated by the loop: the coder sees its step `todo`; once executed it is
/// `done` or `failed` in plan.json.
#[test]
fn a_step_moves_from_todo_to_done_or_failed_in_plan_json() {
    let site = Site::new();
    site.script(&format!(
        "replies:\n  planner:\n    - {}\n    - {}\n  coder:\n    - \"raise SystemExit(2)\"\n    - \"print('ok')\"\n  debugger: \"raise SystemExit(2)\"\n  verifier: {}\n  router: {}\n  finalyzer: done\n",
        yq(r#"{"id": 1, "title": "Fails", "details": "a", "status": "todo"}"#),
        yq(r#"{"id": 2, "title": "Works", "details": "b", "status": "todo"}"#),
        yq(NOT_YET),
        yq(ADD_STEP)
    ));
    let run = site.run(
        "status",
        &[
            "--script",
            "script.yaml",
            "-i",
            "question=q",
            "-i",
            "max_rounds=2",
        ],
    );
    run.ok();
    let coder = run.prompts("coder");
    assert!(coder[0].contains("\"status\": \"todo\""));
    assert!(
        coder[1].contains("\"status\": \"failed\"") && coder[1].contains("\"status\": \"todo\"")
    );
    assert_eq!(
        run.json("plan.json"),
        json!([
            step(1, "Fails", "a", "failed"),
            step(2, "Works", "b", "done")
        ])
    );
}

// ------------------------------------------------------------------------------ providers

/// Variables set for one run.
type Env = Vec<(&'static str, String)>;

/// A request the fake server received.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A local server speaking OpenAI's chat completions and Gemini's `generateContent`, that
/// answers as the reference's mock client does: by the `ROLE: X` line of the prompt.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    fn start() -> Server {
        Self::start_billing(10)
    }

    /// A server whose every reply reports `input_tokens` input tokens used.
    fn start_billing(input_tokens: u64) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let script = Arc::new(mock_script());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (log, script) = (log.clone(), script.clone());
                std::thread::spawn(move || serve(stream, &log, &script, input_tokens));
            }
        });
        Server { addr, seen }
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().expect("lock").clone()
    }
}

fn serve(
    mut stream: TcpStream,
    log: &Mutex<Vec<Request>>,
    script: &rondo::run::scripted::Script,
    input_tokens: u64,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let Ok(n) = stream.read(&mut chunk) else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let Ok(n) = stream.read(&mut chunk) else {
            return;
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    let gemini = path.contains(":generateContent");
    let prompt: String = if gemini {
        body["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["text"].as_str().map(str::to_string))
            .collect()
    } else {
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .collect()
    };
    let role = prompt
        .lines()
        .find_map(|l| l.strip_prefix("ROLE: "))
        .unwrap_or("")
        .to_lowercase();
    let text = script.reply(&role, 1, 0).unwrap_or("Unsupported prompt.");
    let reply = if gemini {
        json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": input_tokens, "candidatesTokenCount": 5, "totalTokenCount": input_tokens + 5}
        })
    } else {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": 5, "total_tokens": input_tokens + 5}
        })
    }
    .to_string();
    log.lock().expect("lock").push(Request {
        path,
        headers,
        body,
    });
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// Every hosted profile can be aimed at another server with the vendor's own variable:
/// `openai` with OPENAI_BASE_URL, `gemini` with GOOGLE_GEMINI_BASE_URL, and `local` (an
/// OpenAI-compatible server) with LOCAL_LLM_ENDPOINT. Each run completes the hello.txt
/// example against a local server speaking that API.
#[test]
fn hosted_profiles_reach_the_server_their_vendor_variable_names() {
    let server = Server::start();
    let site = Site::new();
    let base = format!("http://{}", server.addr);
    let cases: [(&str, Env, &str); 3] = [
        (
            "openai",
            vec![
                ("OPENAI_API_KEY", "sk-test-openai".into()),
                ("OPENAI_BASE_URL", format!("{base}/v1")),
            ],
            "/v1/chat/completions",
        ),
        (
            "gemini",
            vec![
                ("GEMINI_API_KEY", "gm-test".into()),
                ("GOOGLE_GEMINI_BASE_URL", format!("{base}/v1beta")),
            ],
            "/v1beta/models/gemini-1.5-flash:generateContent",
        ),
        (
            "local",
            vec![("LOCAL_LLM_ENDPOINT", format!("{base}/v1"))],
            "/v1/chat/completions",
        ),
    ];
    for (provider, env, endpoint) in cases {
        let before = server.requests().len();
        let run = site.run_in(
            site.dir.path(),
            provider,
            &["--provider", provider, "-i", &format!("question={HELLO}")],
            &env,
        );
        run.ok();
        assert_eq!(run.text("hello.txt"), "hello", "{provider}");
        let requests: Vec<Request> = server.requests().split_off(before);
        // planner, coder, verifier, finalyzer
        assert_eq!(requests.len(), 4, "{provider}: {requests:?}");
        for r in &requests {
            assert_eq!(r.path, endpoint, "{provider}");
            match provider {
                "openai" => {
                    assert_eq!(r.header("authorization"), Some("Bearer sk-test-openai"));
                    assert_eq!(r.body["model"], "gpt-4o-mini");
                }
                "gemini" => assert_eq!(r.header("x-goog-api-key"), Some("gm-test")),
                _ => {
                    assert_eq!(r.header("authorization"), None);
                    assert_eq!(r.body["model"], "local");
                }
            }
        }
        let profiles: Vec<Value> = run
            .events()
            .iter()
            .filter(|e| e["event"] == "llm_response")
            .map(|e| e["profile"].clone())
            .collect();
        assert!(
            profiles.iter().all(|p| p == provider),
            "{provider}: {profiles:?}"
        );
    }
}

/// The reference's `local` provider is a stub that fails clearly: with no server listening
/// the run stops at the first call (exit 2) and says which profile and address it tried.
#[test]
fn the_local_provider_without_a_server_fails_naming_its_address() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let site = Site::new();
    let endpoint = format!("http://127.0.0.1:{port}/v1");
    let run = site.run_in(
        site.dir.path(),
        "local_down",
        &["--provider", "local", "-i", "question=q"],
        &[("LOCAL_LLM_ENDPOINT", endpoint.clone())],
    );
    assert_eq!(run.out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.out.stderr);
    assert!(
        err.contains(&format!(
            "role `planner`: the provider call failed (profile `local`, model `local` at {endpoint}/chat/completions)"
        )),
        "{err}"
    );
    assert!(!run.ws.join("plan.json").exists());
}

/// A hosted profile without its key does not start, and says which variable to set.
#[test]
fn a_hosted_profile_without_its_key_says_which_variable_to_set() {
    let site = Site::new();
    for (provider, var) in [("openai", "OPENAI_API_KEY"), ("gemini", "GEMINI_API_KEY")] {
        let run = site.run(provider, &["--provider", provider, "-i", "question=q"]);
        assert_eq!(run.out.status.code(), Some(2), "{provider}");
        let err = String::from_utf8_lossy(&run.out.stderr);
        assert!(err.contains(var), "{provider}: {err}");
    }
}

/// `get_client` keeps a fallback (guide §7): a hosted client that cannot be used hands the
/// call to the other one. `--provider openai` with only a Gemini key runs on Gemini.
#[test]
fn a_hosted_client_that_cannot_be_used_falls_back_to_the_other() {
    let server = Server::start();
    let site = Site::new();
    let base = format!("http://{}", server.addr);
    let run = site.run_in(
        site.dir.path(),
        "fallback",
        &["--provider", "openai", "-i", &format!("question={HELLO}")],
        &[
            ("GEMINI_API_KEY", "gm-test".into()),
            ("GOOGLE_GEMINI_BASE_URL", format!("{base}/v1beta")),
        ],
    );
    run.ok();
    assert_eq!(run.text("hello.txt"), "hello");
    let profiles: Vec<Value> = run
        .events()
        .iter()
        .filter(|e| e["event"] == "llm_response")
        .map(|e| e["profile"].clone())
        .collect();
    assert_eq!(profiles, ["gemini"; 4]);
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.path.ends_with(":generateContent"))
    );
}

/// The coder's output is a Python script (guide §3): a reply cut at `max_reply` is not one.
/// The cut attempt is refused (not written to `round_00_code.py` with the marker, where it
/// would fail as a SyntaxError) and the coder is asked again.
#[test]
fn a_script_cut_at_max_reply_is_refused_and_asked_again() {
    let site = Site::new();
    // 1 MiB (the default `max_reply`) and more of valid Python.
    let big = format!(
        "{}print('too long')",
        "x = 1\n".repeat(1024 * 1024 / 6 + 10)
    );
    let good =
        "from pathlib import Path\nPath('hello.txt').write_text('hello', encoding='utf-8')\n";
    site.script(&format!(
        "replies:\n  planner: {}\n  coder:\n    \"1\": [{}, {}]\n  verifier: {}\n  finalyzer: done\nunreached: [debugger, router]\n",
        yq(r#"{"id": 1, "title": "Write hello.txt", "details": "d", "status": "todo"}"#),
        // JSON strings (JSON is YAML): the scripts' new lines are kept.
        json!(big),
        json!(good),
        yq(SUFFICIENT)
    ));
    let run = site.run("cut", &["--script", "script.yaml", "-i", "question=q"]);
    run.ok();
    assert_eq!(run.text("round_00_code.py"), good);
    assert_eq!(run.text("hello.txt"), "hello");
    let refused: Vec<Value> = run
        .events()
        .into_iter()
        .filter(|e| e["event"] == "invalid_output" && e["role"] == "coder")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("longer than max_reply"),
        "{}",
        refused[0]["error"]
    );
    // Only the whole script ran: one execution, which succeeded.
    assert_eq!(run.json("round_00_exec.json")["exit_code"], 0);
}

/// `final_answer.md` is the finalyzer's (guide §2), and the loop always writes it: a run
/// stopped by Rondo's own budget (here `max_tokens = 500000`, spent by replies billed
/// 300,000 tokens each) ends at `limit` with a final answer saying so, and
/// `run_metadata.json` no longer says `running`.
#[test]
fn a_run_stopped_by_its_budget_still_writes_the_final_answer() {
    let server = Server::start_billing(300_000);
    let site = Site::new();
    let base = format!("http://{}", server.addr);
    let run = site.run_in(
        site.dir.path(),
        "budget",
        &["--provider", "openai", "-i", &format!("question={HELLO}")],
        &[
            ("OPENAI_API_KEY", "sk-test".into()),
            ("OPENAI_BASE_URL", format!("{base}/v1")),
        ],
    );
    let info = read_json(run.dir.join("run.json"));
    assert_eq!(info["exit"], "limit", "{info}");
    // The planner and the coder were answered; the verifier's call would pass the budget.
    assert_eq!(server.requests().len(), 2);
    let answer = run.text("final_answer.md");
    assert!(answer.contains("stopped at `limit`"), "{answer}");
    assert!(answer.contains("max_tokens"), "{answer}");
    // What the round left: the script's output.
    assert!(answer.contains("wrote hello.txt"), "{answer}");
    let meta = run.json("run_metadata.json");
    assert_eq!(meta["status"], "stopped");
    assert_eq!(meta["ended_by"], "limit");
    assert_eq!(meta["rounds"], 1);
}
