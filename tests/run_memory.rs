//! Structured memory through real runs: the code context, operation history and
//! whiteboard persist in the checkpoint, so a resumed run renders exactly the prompts
//! of an uninterrupted one.

use std::path::Path;

use serde_json::Value;

mod common;

use common::rondo;

const WORKFLOW: &str = r#"
workflow mem {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  code: code_context { alpha = 1.0  beta = 0.5  gamma = 0.9  threshold = 0.4  root = "repo" }
  ops: history
  board: whiteboard { sections = ["Facts", "Key Files"] }
}
role setup: tool {
  command = ["python3", "-c", "import pathlib; p = pathlib.Path('repo'); p.mkdir(); p.joinpath('calc.py').write_text('class Calc:\\n    def add(self, a, b):\\n        if a < 0:\\n            return 0\\n        return a + b\\n\\n    def sub(self, a, b):\\n        return a - b\\n\\n\\ndef main():\\n    for i in range(3):\\n        print(Calc().add(i, 1))\\n')"]
}
role act: llm {
  prompt = "act.tera"
  reads = [code, ops, board]
  max_visits = 5
  output json { thought: string  action_type: string  action_params: { file: string  lines: list[int] } }
  update {
    ops.push(output)
    code.cite(output.thought)
    board.apply([{ op: "UPSERT", section: "Key Files", text: "inspected", path: output.action_params.file }])
  }
}
role look: tool {
  command = ["sed", "-n", "{{ act.action_params.lines | first }},{{ act.action_params.lines | last }}p", "repo/{{ act.action_params.file }}"]
  max_visits = 5
  update {
    code.access({ file_path: act.action_params.file, lines: act.action_params.lines })
    ops.observe(look.stdout)
  }
}
role reflect: llm {
  prompt = "reflect.tera"
  reads = [ops]
  max_visits = 5
  output json { bad_action: bool  summary: string  lessons: string }
  update { ops.reflect(output) }
}
start -> setup
setup -> act
act -> look
act -> invalid_output when act.invalid
look -> reflect
reflect -> act when visits(act) < 3
reflect -> done otherwise
reflect -> invalid_output when reflect.invalid
exit done
"#;

const ACT: &str = r#"## Code Context
{% for file in memory.code.files %}### File: `{{ file.path }}`
{% for item in file.items %}{% if item.kind == "gap" %}...
{% else %}{{ item.number }} {{ item.text }}
{% endif %}{% endfor %}{% endfor %}
## Operation History
{% for node in memory.ops.chain %}- {{ node.thought }} -> {{ node.observation | default(value="") | trim }} (bad: {{ node.bad_action | default(value="?") }})
{% endfor %}
## Lessons Learned
{% for l in memory.ops.lessons %}- {{ l.text }}
{% endfor %}
## Whiteboard
{{ memory.board.markdown }}
"#;

const REFLECT: &str =
    "Reflect on: {% for node in memory.ops.chain %}{{ node.action_type }} {% endfor %}\n";

fn act_reply(thought: &str, lines: &str) -> String {
    format!(
        "'{{\"thought\": \"{thought}\", \"action_type\": \"look\", \"action_params\": {{\"file\": \"calc.py\", \"lines\": [{lines}]}}}}'"
    )
}

fn script(act_visits: usize) -> String {
    let acts = [
        act_reply("The adder is in Calc [1](calc.py:2)", "4, 5"),
        act_reply("Now main [1](calc.py:11) and [2](calc.py:13)", "12, 13"),
        act_reply("Check the guard [1](calc.py:3) again", "3, 4"),
    ];
    let reflections = [
        r#"'{"bad_action": false, "summary": "saw add", "lessons": "read whole functions"}'"#,
        r#"'{"bad_action": true, "summary": "nothing new", "lessons": "do not reread"}'"#,
        r#"'{"bad_action": false, "summary": "saw main", "lessons": ""}'"#,
    ];
    // Keyed by visit: a visit without a reply ends the run at `limit` (a sequence would
    // repeat its last).
    let act: Vec<String> = acts[..act_visits]
        .iter()
        .enumerate()
        .map(|(i, a)| format!("    \"{}\": {a}", i + 1))
        .collect();
    let reflect: Vec<String> = reflections.iter().map(|r| format!("    - {r}")).collect();
    format!(
        "replies:\n  act:\n{}\n  reflect:\n{}\n",
        act.join("\n"),
        reflect.join("\n")
    )
}

/// Prepended to `act.tera`, it stops the run at `error` at act's third visit (`range`
/// yields at most 100,000 numbers) and renders nothing before; written back without it,
/// `rondo resume` goes on with the same prompts.
const STOP_AT_THIRD_ACT: &str = "{% for i in range(end=visit * 40000) %}{% endfor %}";

fn project(dir: &Path, act_visits: usize) -> std::path::PathBuf {
    project_with(dir, act_visits, ACT)
}

fn project_with(dir: &Path, act_visits: usize, act: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    std::fs::write(dir.join("prompts/act.tera"), act).unwrap();
    std::fs::write(dir.join("prompts/reflect.tera"), REFLECT).unwrap();
    std::fs::write(dir.join("script.yaml"), script(act_visits)).unwrap();
    let path = dir.join("mem.rondo");
    std::fs::write(&path, WORKFLOW).unwrap();
    path
}

fn prompts(run_dir: &Path) -> Vec<(String, u64, String)> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "llm_response")
        .map(|e| {
            (
                e["role"].as_str().unwrap().to_string(),
                e["visit"].as_u64().unwrap(),
                e["prompt"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_resumed_run_renders_the_same_prompts_as_an_uninterrupted_one() {
    let clean = tempfile::tempdir().unwrap();
    let wf = project(clean.path(), 3);
    let check = rondo(&["check", "--offline", wf.to_str().unwrap()]);
    common::assert_success(&check);
    let runs = clean.path().join("runs");
    let out = rondo(&[
        "run",
        "-q",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "a",
    ]);
    common::assert_success(&out);
    let expected = prompts(&runs.join("a"));
    assert_eq!(expected.len(), 6);

    // The memory made it into the prompts: signatures and block headers around the cited
    // and opened lines, `...` gaps, the reflection and the whiteboard.
    let last_act = &expected.iter().rfind(|p| p.0 == "act").unwrap().2;
    assert!(last_act.contains("1 class Calc:"), "{last_act}");
    assert!(
        last_act.contains("2     def add(self, a, b):"),
        "{last_act}"
    );
    assert!(last_act.contains("3         if a < 0:"), "{last_act}");
    assert!(last_act.contains("...\n"), "{last_act}");
    assert!(last_act.contains("- read whole functions"), "{last_act}");
    assert!(last_act.contains("calc.py"), "{last_act}");
    assert!(last_act.contains("11 def main():"), "{last_act}");
    assert!(last_act.contains("12     for i in range(3):"), "{last_act}");
    // The second action was bad; it is still the last node, which the chain always shows.
    assert!(last_act.contains("Now main"), "{last_act}");
    assert!(last_act.contains("(bad: true)"), "{last_act}");

    // Same workflow, but the third act prompt cannot be rendered: the run stops at `error`,
    // resumable; with the template fixed, `rondo resume` finishes it.
    let broken = tempfile::tempdir().unwrap();
    let wf = project_with(broken.path(), 3, &format!("{STOP_AT_THIRD_ACT}{ACT}"));
    let runs = broken.path().join("runs");
    let out = rondo(&[
        "run",
        "-q",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "a",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = runs.join("a");
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["status"], "failed");
    std::fs::write(broken.path().join("prompts/act.tera"), ACT).unwrap();
    let out = rondo(&["resume", "-q", run_dir.to_str().unwrap()]);
    common::assert_success(&out);
    assert_eq!(prompts(&run_dir), expected);
    let board = std::fs::read_to_string(run_dir.join("whiteboard.md")).unwrap();
    assert!(board.contains("calc.py"), "{board}");
}

/// `x.patch(which, changes)` changes the fields of the matching items of a typed list;
/// `check` has made sure the changes fit the item type, so the list stays valid.
#[test]
fn patch_changes_the_matching_items_of_a_typed_list() {
    let workflow = r#"
workflow board {
  prompts = "prompts"
  script = "script.yaml"
}
type Step {
  id: int
  status: "todo" | "done"
  note: string?
}
memory {
  steps: list[Step] = []
}
role plan: builtin {
  update {
    steps.append({ id: 1, status: "todo" })
    steps.append({ id: 2, status: "todo" })
  }
}
role judge: llm {
  prompt = "judge.tera"
  output json { finished: int, note: string }
  update { steps.patch({ id: output.finished }, { status: "done", note: output.note }) }
}
start -> plan
plan -> judge
judge -> invalid_output when judge.invalid
judge -> done
exit done
"#;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let path = common::project(
        dir,
        workflow,
        &[("judge.tera", "Which step is done?\n")],
        "replies:\n  judge: '{\"finished\": 2, \"note\": \"tested\"}'\n",
    );
    let runs = dir.join("runs");
    let (out, _) = common::run(&path, "r");
    common::assert_success(&out);
    let state: Value = common::state(&runs.join("r"));
    assert_eq!(
        state["memory"][0],
        serde_json::json!([
            {"id": 1, "status": "todo", "note": null},
            {"id": 2, "status": "done", "note": "tested"}
        ])
    );
}

/// Structured memory is read back typed by its declaration: a checkpoint whose stored
/// whiteboard is not one stops `resume` with a located message, never a panic or a run
/// that goes on with an empty board.
#[test]
fn a_damaged_structured_memory_in_the_checkpoint_stops_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project_with(tmp.path(), 3, &format!("{STOP_AT_THIRD_ACT}{ACT}"));
    let runs = tmp.path().join("runs");
    let out = rondo(&[
        "run",
        "-q",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "a",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = runs.join("a");
    // The damage is made to a snapshot of the run's last state, as `state.json` holds one.
    let state_path = run_dir.join("state.json");
    let mut state = common::state(&run_dir);
    // Slot 2 is `board`, whose sections are a list: a map in their place is damage.
    assert!(state["memory"][2]["sections"].is_array(), "{state}");
    state["memory"][2]["sections"] = serde_json::json!({"Facts": 1});
    std::fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();
    std::fs::write(tmp.path().join("prompts/act.tera"), ACT).unwrap();
    let out = rondo(&["resume", "-q", run_dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("damaged checkpoint (state.json"),
        "{stderr}"
    );
    assert!(stderr.contains("memory `board`"), "{stderr}");
}

const DURABLE: &str = r#"
workflow keep {
  prompts = "prompts"
  script = "script.yaml"
  durable = [notes, board]
}
memory {
  notes: list[string] = []
  board: whiteboard { sections = ["Facts", "Key Files"] }
}
role note: builtin {
  update {
    notes.append(run_id)
    board.apply([{ op: "UPSERT", section: "Facts", text: run_id }])
  }
}
start -> note
note -> done
exit done
"#;

/// `durable` memory carries over between the runs of one `--workspace` folder (kept in
/// its `.rondo/`, out of the tools' reach), never between runs with workspaces of their
/// own; a saved value that no longer fits starts empty and the `durable_memory` event
/// says why; a saved whiteboard goes through the whiteboard's rules.
#[test]
fn durable_memory_carries_over_between_runs_of_a_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let path = common::project(tmp.path(), DURABLE, &[], "replies: {}\n");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let in_ws = |id: &str| {
        let out = rondo(&[
            "run",
            "-q",
            path.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--run-id",
            id,
        ]);
        common::assert_success(&out);
        let system = ws.join(".rondo/runs").join(id);
        let state: Value = common::state(&system);
        (state, common::events(&system))
    };
    let (state, _) = in_ws("a");
    assert_eq!(state["memory"][0], serde_json::json!(["a"]));
    let (state, events) = in_ws("b");
    assert_eq!(state["memory"][0], serde_json::json!(["a", "b"]));
    let carried = common::of_kind(&events, "durable_memory");
    assert_eq!(carried[0]["loaded"], serde_json::json!(["notes", "board"]));
    let board = std::fs::read_to_string(ws.join(".rondo/runs/b/whiteboard.md")).unwrap();
    assert!(board.contains("- FACT-1: a\n- FACT-2: b"), "{board}");
    let saved = ws.join(".rondo/memory/keep.json");
    assert!(saved.is_file());

    // A run with a workspace of its own neither reads nor writes it.
    let (out, run_dir) = common::run(&path, "alone");
    common::assert_success(&out);
    let state = common::state(&run_dir);
    assert_eq!(state["memory"][0], serde_json::json!(["alone"]));
    assert!(!run_dir.join("workspace/.rondo").exists());

    // A saved file that does not fit: the value of the wrong type and the whiteboard
    // entry with a path out of the workspace are not carried, and the event says why.
    let mut doc = common::json(&saved);
    doc["memory"]["notes"] = serde_json::json!([1, 2]);
    let sections = doc["memory"]["board"]["sections"].as_array_mut().unwrap();
    sections[1]["entries"] = serde_json::json!([{"id": "FILE-1", "text": "x", "path": "../../etc/passwd",
        "status": "active", "reason": null, "superseded_by": null}]);
    std::fs::write(&saved, doc.to_string()).unwrap();
    let (state, events) = in_ws("c");
    assert_eq!(state["memory"][0], serde_json::json!(["c"]));
    let carried = &common::of_kind(&events, "durable_memory")[0];
    assert_eq!(carried["loaded"], serde_json::json!([]));
    let skipped = carried["skipped"].to_string();
    assert!(
        skipped.contains("notes") && skipped.contains("board"),
        "{skipped}"
    );
    assert!(skipped.contains("climbs out of the workspace"), "{skipped}");
    // This run's memory is saved again for the next.
    assert_eq!(
        common::json(&saved)["memory"]["notes"],
        serde_json::json!(["c"])
    );
}
