//! `../shared/reference/llm-ide-agent.md`, rule by rule, on real runs of
//! `workflows/llm_ide.rondo` by the `rondo` binary: the scripted provider answers for the
//! model, the tools run in the Docker container the workflow declares (the local
//! `rondo-test-base` image), the repository is the workspace, seen as `/work`.
//! The workflow's own `test` blocks cover the two act templates and one IDE call; these go
//! further: which actions count as accesses (Aᵢ), how observations are cut, the stored
//! score, the tagged reply format, the debugger tool and how tools are installed.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common;

struct Run {
    out: std::process::Output,
    /// The run's system area, `WS/.rondo/runs/<id>`.
    system: PathBuf,
}

impl Run {
    fn info(&self) -> Value {
        common::json(self.system.join("run.json"))
    }

    fn events(&self) -> Vec<Value> {
        common::events(&self.system)
    }

    fn state(&self) -> Value {
        common::state(&self.system)
    }

    /// The code-context memory as the checkpoint holds it.
    fn code(&self) -> Value {
        self.state()["memory"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m.get("chunks").is_some())
            .cloned()
            .unwrap()
    }

    /// The history memory's nodes.
    fn nodes(&self) -> Vec<Value> {
        self.state()["memory"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|m| m.get("nodes").and_then(Value::as_array).cloned())
            .unwrap()
    }

    /// The chunk of `function` (None: module level) in `path`.
    fn chunk(&self, path: &str, function: Option<&str>) -> Option<Value> {
        self.code()["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["file_path"] == path && c["function"].as_str() == function)
            .cloned()
    }

    /// The prompts an llm role was sent, in order.
    fn prompts(&self, role: &str) -> Vec<String> {
        common::prompts_to(&self.events(), role)
    }

    fn exit(&self) -> String {
        self.info()["exit"].as_str().unwrap_or_default().to_string()
    }
}

/// Runs the workflow in the workspace `ws` (the container's `/work`) with the
/// scripted replies `{role: [reply, ...]}`.
fn ide(ws: &Path, id: &str, task: &str, replies: Value) -> Run {
    ide_with(
        &common::root().join("workflows/llm_ide.rondo"),
        ws,
        id,
        task,
        replies,
    )
}

fn ide_with(workflow: &Path, ws: &Path, id: &str, task: &str, replies: Value) -> Run {
    std::fs::create_dir_all(ws).unwrap();
    let script = ws.parent().unwrap().join(format!("{id}.script.json"));
    // A role a test gives no reply is one its run is written not to reach.
    let unreached: Vec<&str> = ["act_next", "reflect", "act_alternative"]
        .into_iter()
        .filter(|r| replies.get(r).is_none())
        .collect();
    let script_text = json!({ "replies": replies, "unreached": unreached }).to_string();
    std::fs::write(&script, script_text).unwrap();
    let task = format!("task={task}");
    let out = common::rondo(&[
        "run",
        "-q",
        workflow.to_str().unwrap(),
        "--provider",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--run-id",
        id,
        "--input",
        &task,
    ]);
    Run {
        out,
        system: ws.join(".rondo/runs").join(id),
    }
}

/// An act reply in the spec's tag format.
fn act(thought: &str, action_type: &str, params: Value) -> String {
    format!(
        "<thought>{thought}</thought>\n<action_type>{action_type}</action_type>\n<action_params>{params}</action_params>"
    )
}

fn bash(thought: &str, command: &str) -> String {
    act(thought, "bash", json!({ "command": command }))
}

fn submit() -> String {
    act("Done.", "submit", json!({}))
}

/// A reflection in the spec's tag format.
fn reflect(bad: bool, lessons: &str, summary: &str) -> String {
    format!(
        "<bad_action>{bad}</bad_action>\n<lessons>{lessons}</lessons>\n<summary>{summary}</summary>"
    )
}

fn sound() -> String {
    reflect(false, "", "ok")
}

const CALC: &str = "def add(a, b):\n    return a + b\n\n\nclass Shape:\n    def area(self):\n        if self.w > 0:\n            return self.w * self.h\n        return 0\n";

fn workspace(tmp: &Path) -> PathBuf {
    let ws = tmp.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("calc.py"), CALC).unwrap();
    ws
}

fn accessed(chunk: &Option<Value>) -> Vec<u64> {
    chunk
        .as_ref()
        .map(|c| {
            c["activity"]["accessed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

fn assert_ok(run: &Run) {
    assert_eq!(
        run.exit(),
        "submitted",
        "{}\n{}",
        common::stderr(&run.out),
        run.info()
    );
}

// ---- Memory / Code Context: `accessed` (A_i) for every action that opens code -------------

#[test]
fn an_ide_show_records_its_lines_whether_numbers_or_strings_and_a_refused_call_records_nothing() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let run = ide(
        &ws,
        "show",
        "Look at calc.py",
        json!({
            "act_next": [
                // numbers, as models write them
                act("Show add.", "pyfind", json!({"command": "show", "args": ["/work/calc.py", 1, 2]})),
                // strings, as the shipped workflow passed them
                act("Show area.", "pyfind", json!({"command": "show", "args": ["calc.py", "6", "9"]})),
                // a call the tool's input check refuses (unknown command): nothing was opened
                act("Bad call.", "pyfind", json!({"command": "open", "args": ["calc.py", 1, 9]})),
                submit(),
            ],
            "reflect": [sound(), sound(), sound()],
        }),
    );
    assert_ok(&run);
    // op 1 opened add, op 2 opened area, op 3 (refused) nothing, op 4 submitted
    assert_eq!(
        accessed(&run.chunk("calc.py", Some("add"))),
        vec![1, 0, 0, 0]
    );
    assert_eq!(
        accessed(&run.chunk("calc.py", Some("area"))),
        vec![0, 1, 0, 0]
    );
    let area = run.chunk("calc.py", Some("area")).unwrap();
    assert_eq!(area["lines"], json!([6, 7, 8, 9]));
    assert_eq!(area["whole_function"], true);
    // the refused call's observation says why
    let nodes = run.nodes();
    assert!(
        nodes[2]["observation"]
            .as_str()
            .unwrap()
            .contains("invalid arguments"),
        "{}",
        nodes[2]
    );
}

#[test]
fn shell_actions_that_read_code_record_accesses() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    std::fs::create_dir_all(ws.join("pkg")).unwrap();
    std::fs::write(
        ws.join("pkg/util.py"),
        "X = 1\n\n\ndef helper():\n    return X\n",
    )
    .unwrap();
    let run = ide(
        &ws,
        "shell",
        "Read the code",
        json!({
            "act_next": [
                bash("Print area.", "sed -n '6,8p' /work/calc.py"),
                bash("Where is X used?", "cd /work && grep -rn 'X' pkg"),
                bash("Top of calc.", "head -n 2 calc.py"),
                bash("All of util.", "cat -n /work/pkg/util.py; nl /etc/hostname"),
                bash("A write is not a read.", "echo '# note' >> /work/calc.py"),
                submit(),
            ],
            "reflect": [sound(), sound(), sound(), sound(), sound()],
        }),
    );
    assert_ok(&run);
    assert_eq!(
        accessed(&run.chunk("calc.py", Some("area"))),
        vec![1, 0, 0, 0, 0, 0]
    );
    assert_eq!(
        accessed(&run.chunk("pkg/util.py", None)),
        vec![0, 1, 0, 1, 0, 0]
    );
    assert_eq!(
        accessed(&run.chunk("pkg/util.py", Some("helper"))),
        vec![0, 1, 0, 1, 0, 0]
    );
    assert_eq!(
        accessed(&run.chunk("calc.py", Some("add"))),
        vec![0, 0, 1, 0, 0, 0]
    );
    // grep -n credits the lines it printed: X = 1 (1) and return X (5)
    assert_eq!(
        run.chunk("pkg/util.py", None).unwrap()["lines"],
        json!([1, 2, 3])
    );
    // nothing outside the repository
    assert!(
        run.code()["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| !c["file_path"].as_str().unwrap().contains("hostname"))
    );
}

// ---- Memory: `score` is the value computed for rendering ------------------------------------

#[test]
fn the_stored_score_is_the_rendered_one_and_decides_what_the_code_context_shows() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let run = ide(
        &ws,
        "score",
        "Score",
        json!({
            "act_next": [
                bash("Open add.", "sed -n '1,2p' /work/calc.py"),
                act("add returns the sum[1](calc.py:2)", "bash", json!({"command": "true"})),
                bash("Nothing.", "true"),
                submit(),
            ],
            "reflect": [sound(), sound(), sound()],
        }),
    );
    assert_ok(&run);
    let add = run.chunk("calc.py", Some("add")).unwrap();
    // S = (1*A1 + 0.5*R1)*0.9^3 + (1*A2 + 0.5*R2)*0.9^2 + ... with A1 = 1, R2 = 1, M = 4
    let expected = 0.9f64.powi(3) + 0.5 * 0.9f64.powi(2);
    let score = add["activity"]["score"].as_f64().unwrap();
    assert!((score - expected).abs() < 1e-9, "{add}");
    // the act prompt of op 4 shows add (score above 0.5) with its lines
    let prompts = run.prompts("act_next");
    assert!(prompts[3].contains("### File: `calc.py`"), "{}", prompts[3]);
    assert!(prompts[3].contains("2:     return a + b"), "{}", prompts[3]);
}

// ---- Operation History: observations cut by lines ------------------------------------------

#[test]
fn observations_keep_the_first_80_and_last_40_lines() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let run = ide(
        &ws,
        "lines",
        "Count",
        json!({
            "act_next": [bash("Count.", "seq 1 300"), bash("Short.", "seq 1 5"), submit()],
            "reflect": [sound(), sound()],
        }),
    );
    assert_ok(&run);
    let nodes = run.nodes();
    let long = nodes[0]["observation"].as_str().unwrap();
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 80 + 1 + 40, "{long}");
    assert_eq!(lines[0], "1");
    assert_eq!(lines[79], "80");
    assert_eq!(lines[80], "[... 180 lines elided ...]");
    assert_eq!(lines[81], "261");
    assert_eq!(lines[120], "300");
    assert_eq!(
        nodes[1]["observation"].as_str().unwrap().trim(),
        "1\n2\n3\n4\n5"
    );
    // the reflection prompt shows it as stored
    assert!(run.prompts("reflect")[0].contains("80\n[... 180 lines elided ...]\n261"));
}

// ---- Response Format: tags, parsed into typed fields ---------------------------------------

#[test]
fn tagged_replies_are_typed_and_a_missing_or_repeated_tag_is_asked_again_with_the_reason() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let run = ide(
        &ws,
        "tags",
        "Tags",
        json!({
            // by visit, one reply per attempt: a retry gets the next
            "act_next": {
                "1": [
                    // no <action-params>: invalid, asked again
                    "<thought>Look.</thought><action_type>bash</action_type>",
                    // the spec's own spelling, prose around the tags
                    "I will look.\n<thought>Look at add[1](calc.py:1).</thought>\n<action_type>bash</action_type>\n<action-params>{\"command\": \"echo hi\"}</action-params>",
                ],
                "2": submit(),
            },
            "reflect": {
                "1": [
                    // two <summary> tags: invalid, asked again
                    "<bad_action>false</bad_action><lessons></lessons><summary>a</summary><summary>b</summary>",
                    // Python's True, coerced like a JSON field; the alternative template follows
                    "<bad_action>True</bad_action>\n<lessons>Say more.\nCheck paths.</lessons>\n<summary>echo printed hi.</summary>",
                ],
            },
            "act_alternative": [submit()],
        }),
    );
    assert_ok(&run);
    let invalid = common::of_kind(&run.events(), "invalid_output");
    assert_eq!(invalid.len(), 2, "{invalid:?}");
    let reasons: Vec<String> = invalid.iter().map(|e| e.to_string()).collect();
    assert!(reasons[0].contains("no <action_params>"), "{}", reasons[0]);
    assert!(reasons[1].contains("2 <summary> tags"), "{}", reasons[1]);
    // the retry prompt names the reason
    assert!(run.prompts("act_next")[1].contains("no <action_params>"));
    let nodes = run.nodes();
    assert_eq!(nodes[0]["action_type"], "bash");
    assert_eq!(
        serde_json::from_str::<Value>(nodes[0]["action_params"].as_str().unwrap()).unwrap(),
        json!({"command": "echo hi"})
    );
    assert_eq!(nodes[0]["bad_action"], true);
    assert_eq!(nodes[0]["summary"], "echo printed hi.");
    // bad action: the alternative is the sibling of the bad node
    assert_eq!(nodes[1]["parent"], nodes[0]["parent"]);
    // the act prompts ask for the tags and, after the first operation, for the reflection
    let first = &run.prompts("act_next")[0];
    assert!(
        first.contains("<action-params>...</action-params>"),
        "{first}"
    );
    let alt = &run.prompts("act_alternative")[0];
    assert!(
        alt.contains("first your reflection on the previous action"),
        "{alt}"
    );
    assert!(!first.contains("first your reflection"), "{first}");
    // the lessons of the reflection, one per line, reach the next prompt
    assert!(alt.contains("Say more."), "{alt}");
    assert!(alt.contains("Check paths."), "{alt}");
}

// ---- Tools: the debugger, installed the spec's way ----------------------------------------

#[test]
fn the_debugger_is_a_tool_installed_from_its_spec_and_debugs_a_program_in_the_container() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    std::fs::write(
        ws.join("prog.py"),
        "from calc import Shape\n\n\ndef scale(s, k):\n    s.w = s.w * k\n    return s\n\n\ns = Shape()\ns.w, s.h = 2, 3\nprint('area', scale(s, 0).area())\n",
    )
    .unwrap();
    let rdb = |command: &str, args: Value| {
        act("Debug.", "rdb", json!({"command": command, "args": args}))
    };
    let run = ide(
        &ws,
        "debug",
        "Why is the area 0?",
        json!({
            "act_next": [
                rdb("start", json!(["/work/prog.py", "--break", "/work/calc.py:7"])),
                rdb("locals", json!([])),
                rdb("where", json!([])),
                rdb("eval", json!(["self.w * self.h"])),
                rdb("next", json!([])),
                rdb("continue", json!([])),
                rdb("locals", json!([])),
                bash(
                    "How was it installed?",
                    "cat /tools/rdb/.installed; /opt/envs/rdb/bin/python -c 'import sys, rdb; print(sys.executable, sys.version[:4])'",
                ),
                submit(),
            ],
            "reflect": [sound(), sound(), sound(), sound(), sound(), sound(), sound(), sound()],
        }),
    );
    assert_ok(&run);
    let nodes = run.nodes();
    let obs = |i: usize| nodes[i]["observation"].as_str().unwrap().to_string();
    assert!(
        obs(0).contains("stopped /work/calc.py:7 in area()"),
        "{}",
        obs(0)
    );
    assert!(obs(0).contains("if self.w > 0:"), "{}", obs(0));
    assert!(obs(1).contains("self = <calc.Shape object"), "{}", obs(1));
    assert!(
        obs(2).contains("/work/prog.py:11 in <module>()"),
        "{}",
        obs(2)
    );
    assert!(obs(2).contains("/work/calc.py:7 in area()"), "{}", obs(2));
    assert_eq!(obs(3).lines().last(), Some("0"), "{}", obs(3));
    // w is 0: `if` is false, the next line is `return 0`
    assert!(
        obs(4).contains("stopped /work/calc.py:9 in area()"),
        "{}",
        obs(4)
    );
    assert!(obs(5).contains("area 0"), "{}", obs(5));
    assert!(obs(5).contains("program finished"), "{}", obs(5));
    assert!(obs(6).contains("no debug session"), "{}", obs(6));
    // installed the spec's way: source in /tools/rdb, its own Python (/opt/envs/rdb), the
    // setup script (a template) run after pip, which wrote this marker
    assert_eq!(
        obs(7).trim(),
        "rdb 0.1.0 installed in /opt/envs/rdb from /tools/rdb\n/opt/envs/rdb/bin/python 3.11"
    );
    // the prompts show its usage text
    assert!(run.prompts("act_next")[0].contains("rdb locals               the local variables"));
}

// ---- Tools: py_standalone with conda, and without it ----------------------------------------

/// The image with the stand-in `conda` (tests/fixtures/conda), built from the test image.
fn conda_image() -> &'static str {
    let out = std::process::Command::new("docker")
        .args(["build", "-q", "-t", "rondo-test-conda:latest"])
        .arg(common::root().join("tests/fixtures/conda"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    "rondo-test-conda:latest"
}

/// A copy of the project whose workflow runs in `image` (prompts, configs and tools linked).
fn project_with_image(dir: &Path, image: &str) -> PathBuf {
    let root = common::root();
    std::fs::create_dir_all(dir.join("workflows")).unwrap();
    for name in ["prompts", "config", "tools"] {
        std::os::unix::fs::symlink(root.join(name), dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(
        root.join("workflows/scripts"),
        dir.join("workflows/scripts"),
    )
    .unwrap();
    let text = std::fs::read_to_string(root.join("workflows/llm_ide.rondo")).unwrap();
    let old = "image = \"rondo-test-base:latest\"";
    assert!(text.contains(old));
    let path = dir.join("workflows/llm_ide.rondo");
    std::fs::write(&path, text.replace(old, &format!("image = \"{image}\""))).unwrap();
    path
}

#[test]
fn with_conda_each_standalone_tool_gets_a_conda_env_and_runs_through_conda_run() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let workflow = project_with_image(&tmp.path().join("proj"), conda_image());
    let run = ide_with(
        &workflow,
        &ws,
        "conda",
        "Tools through conda",
        json!({
            "act_next": [
                act("Definitions.", "pyfind", json!({"command": "defs", "args": ["/work/calc.py"]})),
                act("Debug.", "rdb", json!({"command": "start", "args": ["/work/calc.py", "--stop-at-entry"]})),
                act("Quit.", "rdb", json!({"command": "quit", "args": []})),
                bash(
                    "What ran?",
                    "cat /var/log/conda-calls; cat /tools/rdb/.installed; echo \"venvs: $(ls /opt/envs 2>/dev/null)\"",
                ),
                submit(),
            ],
            "reflect": [sound(), sound(), sound(), sound()],
        }),
    );
    assert_ok(&run);
    let nodes = run.nodes();
    assert!(
        nodes[0]["observation"].as_str().unwrap().contains("add"),
        "{}",
        nodes[0]
    );
    assert!(
        nodes[1]["observation"]
            .as_str()
            .unwrap()
            .contains("stopped /work/calc.py:1"),
        "{}",
        nodes[1]
    );
    let seen = nodes[3]["observation"].as_str().unwrap();
    let calls: Vec<&str> = seen.lines().filter(|l| l.starts_with("conda ")).collect();
    // created and verified per tool, pip and the setup script in the env, calls through `conda run`
    for expected in [
        "conda create -n pyfind python=3.11 -y",
        "conda create -n rdb python=3.11 -y",
        "conda run -n pyfind pyfind defs /work/calc.py",
        "conda run -n rdb python -m rdb.client start /work/calc.py --stop-at-entry",
        "conda run -n rdb python -m rdb.client quit",
    ] {
        assert!(calls.contains(&expected), "{expected} not in {calls:#?}");
    }
    let in_env = |what: &str| {
        calls
            .iter()
            .any(|c| c.starts_with("conda run -n rdb bash -c") && c.contains(what))
    };
    assert!(in_env("sys.version_info"), "{calls:#?}");
    assert!(in_env("-m pip install --no-index"), "{calls:#?}");
    assert!(in_env("# The debugger's own check"), "{calls:#?}");
    assert!(
        seen.contains("rdb 0.1.0 installed in /opt/conda/envs/rdb from /tools/rdb"),
        "{seen}"
    );
    // no venv was made
    assert_eq!(seen.lines().last(), Some("venvs: "), "{seen}");
}

#[test]
fn without_conda_standalone_tools_get_a_venv_and_the_install_log_says_so() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    // A fresh image id, so the tools are installed (not taken from a cached tool image).
    let tag = format!("rondo-test-venv:{}", std::process::id());
    let mut build = std::process::Command::new("docker")
        .args(["build", "-q", "-t", &tag, "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::io::Write::write_all(
        build.stdin.as_mut().unwrap(),
        format!("FROM rondo-test-base:latest\nLABEL rondo.test.nonce={nonce}\n").as_bytes(),
    )
    .unwrap();
    drop(build.stdin.take());
    let out = build.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let workflow = project_with_image(&tmp.path().join("proj"), &tag);
    let run = ide_with(
        &workflow,
        &ws,
        "venv",
        "Tools in venvs",
        json!({
            "act_next": [
                bash("Where?", "ls /opt/envs; command -v conda || echo 'no conda'"),
                submit(),
            ],
            "reflect": [sound()],
        }),
    );
    let _ = std::process::Command::new("docker")
        .args(["image", "rm", &tag])
        .output();
    assert_ok(&run);
    let seen = run.nodes()[0]["observation"].as_str().unwrap().to_string();
    assert_eq!(seen.trim(), "pyfind\nrdb\nno conda");
    let log = run.system.join("install_logs/env-manager.log");
    let log = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(
        log.contains("no conda in this image: py_standalone tools get venvs"),
        "{log}"
    );
}

// ---- environment.tools: the reference's fields, and the config/tools form -------------------

#[test]
fn environment_tool_entries_in_the_reference_fields_install_like_tool_spec_files() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let proj = tmp.path().join("proj");
    let workflow = project_with_image(&proj, "rondo-test-base:latest");
    std::fs::create_dir_all(proj.join("counter")).unwrap();
    std::fs::write(proj.join("counter/count.sh"), "wc -l < \"$1\"\n").unwrap();
    let nonce = std::process::id();
    let text = std::fs::read_to_string(&workflow).unwrap();
    let entry = format!(
        "tools = [pyfind, rdb, {{ name = \"counter\", source = \"../counter\", target = \"/opt/counter\", installation_script = \"chmod +x count.sh && echo \\\"{{{{tool_name}}}} {nonce}\\\" > {{{{tool_dir}}}}/.done\", command = \"/opt/counter/count.sh\", usage = \"count FILE: its lines\" }}]"
    );
    assert!(text.contains("tools = [pyfind, rdb]"));
    let text = text.replacen("tools = [pyfind, rdb]", &entry, 1);
    std::fs::write(&workflow, text).unwrap();
    let check = common::rondo(&["check", "--offline", workflow.to_str().unwrap()]);
    assert!(check.status.success(), "{}", common::stderr(&check));
    let run = ide_with(
        &workflow,
        &ws,
        "entries",
        "Count",
        json!({
            "act_next": [bash("Count.", "cat /opt/counter/.done; /opt/counter/count.sh /work/calc.py"), submit()],
            "reflect": [sound()],
        }),
    );
    assert_ok(&run);
    let seen = run.nodes()[0]["observation"].as_str().unwrap().to_string();
    assert_eq!(seen.trim(), format!("counter {nonce}\n9"));
    // installed like any spec: copy to the target, the installation script, the executable check
    let logs = run.system.join("install_logs");
    let mut steps: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("counter-"))
        .collect();
    steps.sort();
    assert_eq!(
        steps,
        [
            "counter-01-copy-source.log",
            "counter-02-installation-script.log",
            "counter-03-check-executable.log"
        ]
    );
    let copy = std::fs::read_to_string(logs.join("counter-01-copy-source.log")).unwrap();
    assert!(copy.contains("-> /opt/counter"), "{copy}");
}

#[test]
fn a_tool_entry_without_a_name_or_with_a_relative_target_is_refused_by_check() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    let workflow = project_with_image(&proj, "rondo-test-base:latest");
    let text = std::fs::read_to_string(&workflow).unwrap();
    let bad = text.replacen(
        "tools = [pyfind, rdb]",
        "tools = [pyfind, rdb, { command = \"x\" }, { name = \"y\", command = \"y\", target = \"opt/y\", installation_script = \"true\" }]",
        1,
    );
    std::fs::write(&workflow, bad).unwrap();
    let check = common::rondo(&["check", "--offline", workflow.to_str().unwrap()]);
    assert!(!check.status.success());
    let err = common::stderr(&check);
    assert!(err.contains("this tool entry has no `name`"), "{err}");
    assert!(
        err.contains("field `target` is `opt/y`, not an absolute path in the container"),
        "{err}"
    );
}

// ---- Submission: the diff of the agent's work, taken with the image's own git ----------------

/// A run in a git repository submits the diff of what the agent changed: the image has git,
/// and the step logs Rondo writes into the workspace are not part of the patch.
#[test]
fn the_submission_is_the_diff_of_the_agents_changes_and_nothing_else() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(&ws)
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "."]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
    let run = ide(
        &ws,
        "submit-diff",
        "Make add also work for three numbers.",
        json!({
            "act_next": [
                bash("Edit add.", "sed -i 's/def add(a, b):/def add(a, b, c=0):/; s/return a + b$/return a + b + c/' /work/calc.py"),
                submit(),
            ],
            "reflect": [sound()],
        }),
    );
    assert_ok(&run);
    let patch = std::fs::read_to_string(ws.join("patch.diff")).unwrap();
    assert!(patch.contains("diff --git a/calc.py b/calc.py"), "{patch}");
    assert!(patch.contains("+def add(a, b, c=0):"), "{patch}");
    assert!(!patch.contains("logs/op_"), "{patch}");
    assert!(!patch.contains("no git repository"), "{patch}");
}

// ---- mini-swe-agent's format errors, and actions of a plausible but wrong shape -----------

/// An IDE action whose `args` is one string (`"calc.py 1 2"`) instead of a list is a call
/// the tool's schema refuses: an observation the model reflects on, not an engine error.
#[test]
fn an_ide_action_whose_args_is_a_string_is_an_observation_not_an_error() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let run = ide(
        &ws,
        "string_args",
        "Args",
        json!({
            "act_next": [
                act("Show add.", "pyfind", json!({"command": "show", "args": "calc.py 1 2"})),
                submit(),
            ],
            "reflect": [reflect(true, "args is a list", "the call was refused")],
            "act_alternative": [submit()],
        }),
    );
    assert_ok(&run);
    let calls = common::of_kind(&run.events(), "tool_call");
    let ide_call = calls
        .iter()
        .find(|c| c["role"] == "run_ide")
        .expect("run_ide ran");
    assert_eq!(ide_call["result"]["ok"], false, "{ide_call}");
    // The reflection saw why.
    assert!(run.prompts("reflect")[0].contains("args"));
}

/// Like mini-swe-agent, a reply in no usable format (prose, a missing tag, two actions, a
/// `<bad_action>maybe`-like value) is sent back to the model with the reason and the agent
/// goes on; only past the declared bound (`max_format_errors`) does the run end at
/// `invalid_output`.
#[test]
fn malformed_replies_go_back_to_the_model_up_to_the_declared_bound() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = workspace(tmp.path());
    let prose = "I think we should look at calc.py first.".to_string();
    let missing = "<thought>Look.</thought><action_type>bash</action_type>".to_string();
    let two = format!("{}\n{}", bash("a", "ls"), bash("b", "pwd"));
    let run = ide(
        &ws,
        "format",
        "Format",
        json!({
            "act_next": {"1": [prose.clone(), missing.clone(), two.clone()], "2": submit()},
        }),
    );
    assert_ok(&run);
    let path: Vec<String> = common::of_kind(&run.events(), "role_start")
        .iter()
        .map(|e| e["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(path, ["act_next", "format_error", "act_next", "submit"]);
    let prompts = run.prompts("act_next");
    let told = prompts.last().unwrap();
    assert!(
        told.contains("Your last reply could not be used, and no action was executed"),
        "{told}"
    );

    // Always malformed: the bound (10 by default) ends it at invalid_output, not before.
    let ws = tmp.path().join("ws2");
    std::fs::create_dir_all(&ws).unwrap();
    let run = ide(&ws, "format_bound", "Format", json!({"act_next": [prose]}));
    assert_eq!(run.exit(), "invalid_output", "{}", common::stderr(&run.out));
    let errors = common::of_kind(&run.events(), "role_start")
        .iter()
        .filter(|e| e["role"] == "format_error")
        .count();
    assert_eq!(errors, 10);
}
