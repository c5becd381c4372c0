//! `../shared/reference/iter.md`, rule by rule, on real runs of `workflows/iter.rondo` by the
//! `rondo` binary: the scripted provider answers for the architect, worker, validators and
//! summarizer; the worker's changes are applied by the workflow's own tool and built and
//! tested with the real `go build ./... && go test ./...`, as the guide builds.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use super::common::{events, go_ready, json as read_json, of_kind, stderr};

fn workflow() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/iter.rondo")
}

const GO_MOD: &str = "module example.com/hello\n\ngo 1.18\n";

fn hello_go(word: &str) -> String {
    format!("package hello\n\n// Hello greets.\nfunc Hello() string {{ return \"{word}\" }}\n")
}

fn hello_test(word: &str) -> String {
    format!(
        "package hello\n\nimport \"testing\"\n\nfunc TestHello(t *testing.T) {{\n\tif Hello() != \"{word}\" {{\n\t\tt.Fatal(Hello())\n\t}}\n}}\n"
    )
}

/// The architect's plan: requirements R1 and R2, and steps `(number, dependencies, requirement ids)`.
fn plan(steps: &[(i64, &[i64], &[&str])]) -> String {
    let steps: Vec<Value> = steps
        .iter()
        .map(|(n, deps, reqs)| {
            json!({"number": n, "title": format!("step {n}"), "dependencies": deps, "requirements": reqs,
                   "approach": "write the files", "cleanup": [], "acceptance_criteria": ["go test ./... passes"],
                   "doc": format!("# Step {n}\nDo step {n}.\n")})
        })
        .collect();
    json!({"requirements": [{"id": "R1", "text": "package hello"}, {"id": "R2", "text": "its test"}],
           "requirements_md": "# Requirements\n- R1\n- R2\n", "analysis_md": "# Analysis\nNew module.\n",
           "steps": steps})
    .to_string()
}

/// A worker Result with the guide's fields.
fn result(step: i64, changes: &[(&str, &str)], note: &str, exit_signal: bool) -> String {
    skilled("patch", step, changes, note, exit_signal)
}

/// A worker Result that names the skill applying its changes.
fn skilled(
    skill: &str,
    step: i64,
    changes: &[(&str, &str)],
    note: &str,
    exit_signal: bool,
) -> String {
    let changes: Vec<Value> = changes
        .iter()
        .map(|(path, content)| json!({"path": path, "action": "modify", "content": content}))
        .collect();
    json!({"task_id": format!("step-{step}"), "skill_name": skill, "status": "success", "message": note,
           "changes": changes, "impl_md": format!("# Implementation\n{note}\n"), "exit_signal": exit_signal,
           "next_tasks": []})
    .to_string()
}

/// The Go module in one step.
fn go_result(word: &str, note: &str) -> String {
    result(
        1,
        &[
            ("go.mod", GO_MOD),
            ("hello.go", &hello_go(word)),
            ("hello_test.go", &hello_test(word)),
        ],
        note,
        true,
    )
}

fn verdict(
    status: &str,
    reqs: Value,
    build: bool,
    tests: bool,
    cleanup: bool,
    report: &str,
) -> String {
    // Every requirement judged is referenced at a line of the code.
    let refs: serde_json::Map<String, Value> = reqs
        .as_object()
        .map(|m| m.keys().map(|k| (k.clone(), json!("hello.go:4"))).collect())
        .unwrap_or_default();
    json!({"status": status, "reasons": [format!("reason: {report}")], "requirement_status": reqs,
           "requirement_refs": refs, "build_passed": build, "tests_passed": tests,
           "cleanup_verified": cleanup, "report": report})
    .to_string()
}

fn pass(report: &str) -> String {
    verdict(
        "pass",
        json!({"R1": true, "R2": true}),
        true,
        true,
        true,
        report,
    )
}

fn final_verdict(status: &str, conflicts: &[&str], build: bool, report: &str) -> String {
    json!({"status": status, "reasons": ["reviewed"], "conflicts": conflicts,
           "requirement_status": {"R1": true, "R2": true}, "build_passed": build, "tests_passed": build,
           "report": report})
    .to_string()
}

/// One run of the workflow: its inputs and each role's replies, visit by visit (the last repeats).
struct Iter {
    inputs: Vec<(String, String)>,
    replies: serde_json::Map<String, Value>,
    workspace: Option<PathBuf>,
}

/// What a run left behind.
struct Ran {
    out: Output,
    run_dir: PathBuf,
    workspace: PathBuf,
}

impl Iter {
    /// A one-step Go task whose every reply passes; tests change what they look at.
    fn new() -> Self {
        let mut it = Iter {
            inputs: vec![("task".into(), "Add package hello with a test".into())],
            replies: serde_json::Map::new(),
            workspace: None,
        };
        it = it
            .reply("architect", &[plan(&[(1, &[], &["R1", "R2"])])])
            .reply("worker", &[go_result("hello", "added package hello")])
            .reply("validator", &[pass("# Step 1 validation\nVerdict: PASS\n")])
            .reply(
                "final_validator",
                &[final_verdict(
                    "pass",
                    &[],
                    true,
                    "# Final validation\nVerdict: PASS\n",
                )],
            )
            .reply("summarizer", &["# Summary\nhello added.\n".to_string()]);
        it
    }

    fn input(mut self, name: &str, value: &str) -> Self {
        self.inputs.push((name.into(), value.into()));
        self
    }

    fn reply(mut self, role: &str, replies: &[String]) -> Self {
        self.replies.insert(
            role.into(),
            Value::Array(replies.iter().cloned().map(Value::String).collect()),
        );
        self
    }

    /// Works in an existing folder (`--workspace`), as a user's project.
    fn in_workspace(mut self, dir: &Path) -> Self {
        self.workspace = Some(dir.to_path_buf());
        self
    }

    fn run(self, tmp: &Path) -> Ran {
        let script = tmp.join("replies.yaml");
        // JSON is YAML.
        std::fs::write(&script, json!({ "replies": self.replies }).to_string()).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.current_dir(tmp)
            .env("NO_COLOR", "1")
            .args(["run", "-q"])
            .arg(workflow())
            .args(["--provider", "scripted", "--run-id", "it"])
            .arg("--script")
            .arg(&script);
        let run_dir = match &self.workspace {
            Some(dir) => {
                cmd.arg("--workspace").arg(dir);
                dir.join(".rondo/runs/it")
            }
            None => {
                cmd.arg("--run-dir").arg(tmp.join("runs"));
                tmp.join("runs/it")
            }
        };
        for (name, value) in &self.inputs {
            cmd.arg("--input").arg(format!("{name}={value}"));
        }
        let out = cmd.output().unwrap();
        let workspace = self
            .workspace
            .clone()
            .unwrap_or_else(|| run_dir.join("workspace"));
        Ran {
            out,
            run_dir,
            workspace,
        }
    }
}

impl Ran {
    fn exit(&self) -> String {
        read_json(self.run_dir.join("run.json"))["exit"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }

    /// The roles run, in order.
    fn path(&self) -> Vec<String> {
        of_kind(&events(&self.run_dir), "role_start")
            .iter()
            .map(|e| e["role"].as_str().unwrap().to_string())
            .collect()
    }

    fn count(&self, role: &str) -> usize {
        self.path().iter().filter(|r| *r == role).count()
    }

    /// The prompts `role` was sent, in order (rejected attempts included).
    fn prompts(&self, role: &str) -> Vec<String> {
        super::common::prompts_to(&events(&self.run_dir), role)
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.workspace.join(name)).unwrap_or_else(|e| {
            panic!("{name}: {e}; path {:?}; {}", self.path(), stderr(&self.out))
        })
    }

    /// A memory value at the end of the run (`state.json` keeps them in declaration order).
    fn memory(&self, name: &str) -> Value {
        let dump = dump();
        let index = dump["memory"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no memory `{name}`"));
        crate::common::state(&self.run_dir)["memory"][index].clone()
    }

    fn has(&self, name: &str) -> bool {
        self.workspace.join(name).is_file()
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?} ({}), path {:?}\n{}",
            self.code(),
            self.exit(),
            self.path(),
            stderr(&self.out)
        )
    }
}

/// The compiled workflow, as `rondo dump` gives it.
fn dump() -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["dump", "--format", "json"])
        .arg(workflow())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn needs_go() -> bool {
    if !go_ready() {
        eprintln!("skipped: Go is not installed");
        return false;
    }
    true
}

// ---- Validator Agent: DEFAULT STANCE REJECT, field by field ------------------------------------

/// A "pass" whose fields do not all pass is a rejection: each variant sends the worker back,
/// with the enforced verdict in its next prompt, and a full pass afterwards ends `done`.
#[test]
fn a_pass_with_any_field_short_of_a_pass_goes_back_to_the_worker() {
    if !needs_go() {
        return;
    }
    let variants = [
        (
            "a requirement false",
            verdict(
                "pass",
                json!({"R1": true, "R2": false}),
                true,
                true,
                true,
                "claimed pass",
            ),
        ),
        (
            "no requirement traced",
            verdict("pass", json!({}), true, true, true, "claimed pass"),
        ),
        (
            "a requirement of the step not traced",
            verdict(
                "pass",
                json!({"R1": true}),
                true,
                true,
                true,
                "claimed pass",
            ),
        ),
        (
            "cleanup not verified",
            verdict(
                "pass",
                json!({"R1": true, "R2": true}),
                true,
                true,
                false,
                "claimed pass",
            ),
        ),
        (
            "tests not passed",
            verdict(
                "pass",
                json!({"R1": true, "R2": true}),
                true,
                false,
                true,
                "claimed pass",
            ),
        ),
        (
            "build not passed",
            verdict(
                "pass",
                json!({"R1": true, "R2": true}),
                false,
                true,
                true,
                "claimed pass",
            ),
        ),
    ];
    for (what, first) in variants {
        let tmp = tempfile::tempdir().unwrap();
        let ran = Iter::new()
            .reply("validator", &[first, pass("real pass")])
            .run(tmp.path());
        assert_eq!(ran.exit(), "done", "{what}: {}", ran.describe());
        assert_eq!(ran.count("worker"), 2, "{what}: {}", ran.describe());
        assert_eq!(ran.count("reject"), 1, "{what}: {}", ran.describe());
        let second = &ran.prompts("worker")[1];
        assert!(second.contains("REJECTED"), "{what}: {second}");
        assert!(
            second.contains("Verdict as enforced: REJECT"),
            "{what}: {second}"
        );
    }
}

/// A failed worker, or a Result without changes, never reaches the validator: the worker is
/// asked again with the reason.
#[test]
fn a_failed_worker_or_a_result_without_changes_goes_back_to_the_worker() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let failed = json!({"task_id": "step-1", "skill_name": "patch", "status": "failed",
                        "message": "cannot find the package", "changes": [{"path": "x.go", "action": "create", "content": "package x\n"}],
                        "impl_md": "failed", "exit_signal": true, "next_tasks": []})
    .to_string();
    let empty = result(1, &[], "nothing to do", true);
    let ran = Iter::new()
        .reply(
            "worker",
            &[failed, empty, go_result("hello", "added package hello")],
        )
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    assert_eq!(ran.count("worker"), 3, "{}", ran.describe());
    assert_eq!(ran.count("worker_failed"), 2, "{}", ran.describe());
    assert_eq!(ran.count("validator"), 1, "{}", ran.describe());
    // The failed worker's file was never applied.
    assert!(!ran.has("x.go"));
    let prompts = ran.prompts("worker");
    assert!(prompts[1].contains("You reported failure: cannot find the package"));
    assert!(prompts[2].contains("Your result had no changes"));
}

/// A validator reply that cannot be parsed (after its retries) is a REJECT: the worker tries
/// again and the run goes on; the attempt's report says why.
#[test]
fn an_unreadable_verdict_is_a_rejection_not_an_engine_error() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A visit's reply answers each of its attempts: visit 1 stays unreadable after its retries.
    let ran = Iter::new()
        .reply(
            "validator",
            &["I think it is fine.".to_string(), pass("PASS at last")],
        )
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    assert_eq!(ran.code(), Some(0));
    assert_eq!(ran.count("verdict_unreadable"), 1, "{}", ran.describe());
    assert_eq!(ran.count("worker"), 2, "{}", ran.describe());
    let valid = ran.file("step_1_valid.md");
    assert!(valid.contains("could not be read"), "{valid}");
    assert!(valid.contains("PASS at last"), "{valid}");
}

/// The same for the final validator: an unreadable final verdict is not `done`, and
/// final_validation.md and summary.md are still written.
#[test]
fn an_unreadable_final_verdict_ends_rejected_with_its_report_and_the_summary() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new()
        .reply("final_validator", &["looks good to me".to_string()])
        .run(tmp.path());
    assert_eq!(ran.exit(), "rejected", "{}", ran.describe());
    assert_eq!(ran.code(), Some(6));
    assert!(
        ran.file("final_validation.md")
            .contains("could not be read")
    );
    assert!(ran.has("summary.md"));
}

// ---- Final Validator Agent: ALL changes, conflicts, full build -----------------------------------

/// Cross-step conflicts listed, or a failing full build, are not `done`, whatever the final
/// validator's `status` says.
#[test]
fn conflicts_or_a_failed_final_build_are_not_done() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new()
        .reply(
            "final_validator",
            &[final_verdict(
                "pass",
                &["step 1 and step 2 both define Hello"],
                true,
                "# Final\nPASS\n",
            )],
        )
        .run(&subdir(tmp.path(), "a"));
    assert_eq!(ran.exit(), "rejected", "{}", ran.describe());
    assert_eq!(ran.code(), Some(6));
    let report = ran.file("final_validation.md");
    assert!(report.contains("Enforced verdict: REJECT"), "{report}");
    assert!(report.contains("both define Hello"), "{report}");
    assert!(ran.has("summary.md"));

    // The build passes after the step and fails as the final build (its own log exists then).
    let ran = Iter::new()
        .input(
            "build_command",
            "go build ./... && go test ./... && test ! -e logs/final_build.log",
        )
        .run(&subdir(tmp.path(), "b"));
    assert_eq!(ran.exit(), "rejected", "{}", ran.describe());
    assert_eq!(ran.count("final_rejected"), 1, "{}", ran.describe());
    let prompt = &ran.prompts("final_validator")[0];
    assert!(prompt.contains("FAIL (exit 1)"), "{prompt}");
}

/// "Verifies all requirements satisfied": a final pass that leaves one of the plan's
/// requirements out of its `requirement_status` (all it lists being true) is not done.
#[test]
fn a_final_pass_that_leaves_a_plan_requirement_untraced_is_not_done() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let verdict = json!({"status": "pass", "reasons": ["reviewed"], "conflicts": [],
                         "requirement_status": {"R1": true}, "build_passed": true, "tests_passed": true,
                         "report": "# Final\nPASS\n"})
    .to_string();
    let ran = Iter::new()
        .reply("final_validator", &[verdict])
        .run(tmp.path());
    assert_eq!(ran.exit(), "rejected", "{}", ran.describe());
    assert_eq!(ran.count("final_rejected"), 1, "{}", ran.describe());
    let report = ran.file("final_validation.md");
    assert!(report.contains(r#""untraced":["R2"]"#), "{report}");
    assert!(ran.has("summary.md"));
}

/// The final validator reviews the changes themselves: the diff of every validated step, so
/// a later step's rewrite of an earlier step's line is visible as such.
#[test]
fn the_final_validator_sees_the_diffs_of_all_steps() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let step1 = result(
        1,
        &[
            ("go.mod", GO_MOD),
            ("hello.go", &hello_go("helo")),
            ("hello_test.go", &hello_test("helo")),
        ],
        "first cut",
        false,
    );
    let step2 = result(
        2,
        &[
            ("hello.go", &hello_go("hello")),
            ("hello_test.go", &hello_test("hello")),
        ],
        "spelling fixed",
        true,
    );
    let ran = Iter::new()
        .reply(
            "architect",
            &[plan(&[(1, &[], &["R1"]), (2, &[1], &["R2"])])],
        )
        .reply("worker", &[step1, step2])
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    let prompt = &ran.prompts("final_validator")[0];
    // Step 1 created the file; step 2 changed its line.
    assert!(prompt.contains("+++ b/hello.go"), "{prompt}");
    assert!(
        prompt.contains("+func Hello() string { return \"helo\" }"),
        "{prompt}"
    );
    assert!(
        prompt.contains(
            "-func Hello() string { return \"helo\" }\n+func Hello() string { return \"hello\" }"
        ),
        "{prompt}"
    );
    assert!(
        prompt.contains("Step 2: step 2 - spelling fixed"),
        "{prompt}"
    );
}

// ---- Execution Rules: SUMMARY IS MANDATORY, exit detection ---------------------------------------

/// `exit_threshold = 1` does not skip the final build, final_validation.md or summary.md: the
/// dual condition is tested once the summary exists.
#[test]
fn a_low_exit_threshold_skips_neither_the_final_validation_nor_the_summary() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new().input("exit_threshold", "1").run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    let path = ran.path();
    let tail: Vec<&str> = path[path.len() - 5..].iter().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "final_build",
            "final_validator",
            "final_passed",
            "summarizer",
            "wrap_up"
        ]
    );
    assert!(ran.file("final_validation.md").contains("PASS"));
    assert!(ran.file("summary.md").contains("Summary"));
    assert!(ran.file("logs/final_build.log").contains("ok"));
}

/// summary.md's existence is the third completion indicator: with the default threshold (3),
/// the two recorded indicators and the file end `done`; a threshold past them ends `incomplete`.
#[test]
fn summary_md_existing_is_a_completion_indicator() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new().run(&subdir(tmp.path(), "a"));
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    assert_eq!(
        ran.memory("indicators"),
        json!(["all_steps_validated", "final_validation_passed"]),
    );
    let ran = Iter::new()
        .input("exit_threshold", "4")
        .run(&subdir(tmp.path(), "b"));
    assert_eq!(ran.exit(), "incomplete", "{}", ran.describe());
    assert_eq!(ran.code(), Some(5));
    assert!(ran.has("summary.md"));
}

/// A step the validator keeps rejecting ends `rejected` (code 6) once `max_rejections` is
/// reached, and summary.md is still written: it says why the run gave up.
#[test]
fn a_step_rejected_every_time_ends_rejected_after_the_summary() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new()
        .input("max_rejections", "2")
        .reply(
            "validator",
            &[verdict(
                "reject",
                json!({"R1": false, "R2": true}),
                true,
                true,
                true,
                "REJECT: R1 untraced",
            )],
        )
        .run(tmp.path());
    assert_eq!(ran.exit(), "rejected", "{}", ran.describe());
    assert_eq!(ran.code(), Some(6));
    assert_eq!(ran.count("worker"), 2, "{}", ran.describe());
    // The summarizer is the last role before the `finally` one.
    let path = ran.path();
    assert_eq!(
        path[path.len() - 2..],
        ["summarizer".to_string(), "wrap_up".to_string()]
    );
    assert!(ran.has("summary.md"));
    let prompt = &ran.prompts("summarizer")[0];
    assert!(prompt.contains("a step was rejected 2 times"), "{prompt}");
    assert!(prompt.contains("reason: REJECT: R1 untraced"), "{prompt}");
    assert!(!ran.has("final_validation.md"));
}

// ---- Architect Agent: steps and their dependencies ---------------------------------------------

/// A plan whose dependencies cannot be followed (on a later step, on an unknown step) or that
/// names an unknown requirement is sent back to the architect with the reason, and the next
/// plan is the one followed.
#[test]
fn a_plan_with_bad_dependencies_or_unknown_requirements_goes_back_to_the_architect() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let later = plan(&[(1, &[2], &["R1"]), (2, &[], &["R2"])]);
    let unknown = plan(&[(1, &[], &["R1", "R9"]), (2, &[7], &["R2"])]);
    let good = plan(&[(1, &[], &["R1", "R2"])]);
    let ran = Iter::new()
        .reply("architect", &[later, unknown, good])
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    assert_eq!(ran.count("replan"), 2, "{}", ran.describe());
    let prompts = ran.prompts("architect");
    assert!(
        prompts[1].contains("Step 1 depends on step 2, which comes later"),
        "{}",
        prompts[1]
    );
    assert!(prompts[2].contains("requirement \"R9\""), "{}", prompts[2]);
    assert!(
        prompts[2].contains("step 7, which the plan does not have"),
        "{}",
        prompts[2]
    );
    // Only the accepted plan's step docs were written.
    assert!(ran.has("step_1.md") && !ran.has("step_2.md"));
}

/// A plan with no steps is asked again; one that never gets a step ends `incomplete` (code 5),
/// not in an engine error.
#[test]
fn a_plan_without_steps_is_asked_again_then_ends_incomplete() {
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new().reply("architect", &[plan(&[])]).run(tmp.path());
    assert_eq!(ran.exit(), "incomplete", "{}", ran.describe());
    assert_eq!(ran.code(), Some(5));
    assert_eq!(ran.count("architect"), 3);
    assert!(ran.prompts("architect")[1].contains("The plan has no steps"));
    assert_eq!(ran.count("worker"), 0);
}

// ---- Reports: every attempt kept, named by the architect's step numbers --------------------------

/// Steps numbered 10 and 20 by the architect: every attempt's implementation notes and verdict
/// stay in step_10_impl.md / step_10_valid.md, the build logs are named by step and attempt.
#[test]
fn every_attempts_reports_are_kept_under_the_architects_step_numbers() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let broken = result(
        10,
        &[
            ("go.mod", GO_MOD),
            ("hello.go", &hello_go("hello")),
            ("hello_test.go", &hello_test("bye")),
        ],
        "first attempt",
        false,
    );
    let fixed = go_result("hello", "second attempt");
    // Step 20 changes a file of its own: a step that changes nothing does not advance.
    let step20 = result(20, &[("NOTES.md", "step 20\n")], "step 20", true);
    let ran = Iter::new()
        .reply(
            "architect",
            &[plan(&[(10, &[], &["R1"]), (20, &[10], &["R2"])])],
        )
        .reply("worker", &[broken, fixed, step20])
        .reply(
            "validator",
            &[
                verdict(
                    "reject",
                    json!({"R1": true, "R2": false}),
                    false,
                    false,
                    true,
                    "REJECT: TestHello fails",
                ),
                pass("PASS step 10"),
                pass("PASS step 20"),
            ],
        )
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    let impl10 = ran.file("step_10_impl.md");
    assert!(
        impl10.contains("## Attempt 1") && impl10.contains("first attempt"),
        "{impl10}"
    );
    assert!(
        impl10.contains("## Attempt 2") && impl10.contains("second attempt"),
        "{impl10}"
    );
    let valid10 = ran.file("step_10_valid.md");
    assert!(valid10.contains("REJECT: TestHello fails"), "{valid10}");
    assert!(valid10.contains("PASS step 10"), "{valid10}");
    assert!(ran.file("step_20_valid.md").contains("PASS step 20"));
    assert!(ran.file("step_10.md").contains("# Step 10"));
    assert!(
        ran.file("logs/build_step_10_attempt_1.log")
            .contains("FAIL")
    );
    assert!(ran.file("logs/build_step_10_attempt_2.log").contains("ok"));
    assert!(ran.has("logs/build_step_20_attempt_1.log"));
    assert!(!ran.has("step_1_valid.md") && !ran.has("step_2_valid.md"));
}

// ---- Output Capture: workdir/logs/, only pass/fail and the tail in context -----------------------

/// With a work directory given, build and test output goes to `workdir/logs/`; the validator
/// sees the log's path, FAIL and the last 30 lines, never the whole output.
#[test]
fn output_capture_goes_to_the_work_directorys_logs() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("svc")).unwrap();
    std::fs::write(project.join("svc/go.mod"), GO_MOD).unwrap();
    let noisy = "for i in $(seq -w 1 100); do echo L$i; done; go build ./... && go test ./...";
    let broken = result(
        1,
        &[
            ("hello.go", &hello_go("hello")),
            ("hello_test.go", &hello_test("bye")),
        ],
        "first attempt",
        false,
    );
    let fixed = result(
        1,
        &[("hello_test.go", &hello_test("hello"))],
        "test fixed",
        true,
    );
    let ran = Iter::new()
        .input("workdir", "svc")
        .input("build_command", noisy)
        .reply("worker", &[broken, fixed])
        .reply(
            "validator",
            &[
                verdict("reject", json!({"R1": false}), false, false, true, "REJECT"),
                pass("PASS"),
            ],
        )
        .in_workspace(&project)
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    let first = ran.file("svc/logs/build_step_1_attempt_1.log");
    assert!(first.contains("L001") && first.contains("FAIL"), "{first}");
    assert!(
        ran.file("svc/logs/build_step_1_attempt_2.log")
            .contains("ok")
    );
    assert!(ran.file("svc/logs/final_build.log").contains("L100"));
    assert!(!project.join("logs").exists());
    let prompt = &ran.prompts("validator")[0];
    assert!(
        prompt.contains("svc/logs/build_step_1_attempt_1.log"),
        "{prompt}"
    );
    assert!(prompt.contains("FAIL (exit 1)"), "{prompt}");
    assert!(
        !prompt.contains("L001"),
        "the whole log was pasted:\n{prompt}"
    );
    let passed = &ran.prompts("validator")[1];
    assert!(
        passed.contains("Build/test (") && passed.contains("): PASS"),
        "{passed}"
    );
    assert!(!passed.contains("L100"), "{passed}");
}

// ---- Key Types: Result ------------------------------------------------------------------------

/// The worker answers with the guide's Result: a reply without `task_id` or `skill_name` is
/// asked again, and `next_tasks` (Tasks) are recorded with the result.
#[test]
fn the_worker_answers_with_the_guides_result() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut without: Value = serde_json::from_str(&go_result("hello", "no ids")).unwrap();
    without.as_object_mut().unwrap().remove("skill_name");
    let mut with: Value = serde_json::from_str(&go_result("hello", "with ids")).unwrap();
    with["next_tasks"] = json!([{"id": "t2", "description": "document Hello", "type": "docs",
                                 "files": ["README.md"], "context": {"step": 1}, "constraints": {"max_files": 1}}]);
    let ran = Iter::new()
        .reply("worker", &[without.to_string(), with.to_string()])
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    let rejected = of_kind(&events(&ran.run_dir), "invalid_output");
    assert!(
        rejected
            .iter()
            .any(|e| e["role"] == "worker" && e.to_string().contains("skill_name")),
        "{rejected:?}"
    );
    let impls = ran.memory("impls");
    let result = &impls[0];
    assert_eq!(result["task_id"], "step-1");
    assert_eq!(result["skill_name"], "patch");
    assert_eq!(result["next_tasks"][0]["type"], "docs");
}

// ---- Skills: declared capabilities the worker is given ------------------------------------------

/// The worker's prompt lists its skills; the skill its Result names applies the changes, within
/// its reach: `test` may not touch hello.go, an undeclared skill (`review`) applies nothing,
/// and either way the validator's pass cannot stand. `codemod` then applies them.
#[test]
fn the_skill_a_result_names_applies_its_changes_within_its_reach() {
    if !needs_go() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let files = [
        ("go.mod", GO_MOD),
        ("hello.go", &hello_go("hello") as &str),
        ("hello_test.go", &hello_test("hello") as &str),
    ];
    let ran = Iter::new()
        .reply(
            "worker",
            &[
                skilled("test", 1, &files, "as tests", true),
                skilled("review", 1, &files, "as a review", true),
                skilled("codemod", 1, &files, "as a codemod", true),
            ],
        )
        .run(tmp.path());
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    assert_eq!(ran.count("reject"), 2, "{}", ran.describe());
    let prompt = &ran.prompts("worker")[0];
    for skill in ["patch:", "codemod:", "test:", "docs:", "devops:"] {
        assert!(prompt.contains(&format!("- {skill}")), "{prompt}");
    }
    let calls: Vec<Value> = of_kind(&events(&ran.run_dir), "tool_call")
        .into_iter()
        .filter(|c| c["role"] == "apply")
        .collect();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0]["result"]["status"], "failed");
    assert!(
        calls[0]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("the test skill may only change"),
        "{}",
        calls[0]["result"]
    );
    assert_eq!(
        calls[1]["result"]["error_kind"], "unknown_tool",
        "{}",
        calls[1]["result"]
    );
    assert_eq!(calls[2]["result"]["status"], "success");
    assert_eq!(calls[2]["result"]["tool_name"], "codemod");
    let second = &ran.prompts("worker")[1];
    assert!(second.contains("\"applied\":false"), "{second}");
}

// ---- Safety: the agent loop's own circuit breaker ----------------------------------------------

/// `breaker_threshold` failed attempts in a row stop the loop at its own exit (code 7), before
/// the validator's rejection bound, whatever the providers' breakers say.
#[test]
fn failed_attempts_in_a_row_open_the_loops_circuit_breaker() {
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new()
        .input("breaker_threshold", "3")
        .input("build_command", "true")
        .reply("worker", &["no JSON here".to_string()])
        .run(tmp.path());
    assert_eq!(ran.exit(), "circuit_open", "{}", ran.describe());
    assert_eq!(ran.code(), Some(7));
    assert_eq!(ran.count("worker"), 3, "{}", ran.describe());
    assert_eq!(ran.count("validator"), 0);
}

/// The workflow's exits are told apart by exit code alone: none is a built-in's (2, 3, 4, 130)
/// and no two share one (`check --deny-warnings` fails on a shared code).
#[test]
fn the_exit_codes_are_distinct_from_the_built_ins_and_each_other() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["check", "--offline", "--deny-warnings", "--format", "json"])
        .arg(workflow())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let dump = dump();
    let exits: Vec<&Value> = dump["graph"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"]["node"] == "exit" && n["kind"]["builtin"] == false)
        .collect();
    let mut codes: Vec<i64> = exits
        .iter()
        .map(|e| e["kind"]["code"].as_i64().unwrap())
        .collect();
    for code in &codes {
        assert!(![2, 3, 4, 130].contains(code), "{code}");
    }
    let n = codes.len();
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), n, "{exits:?}");
    let names: Vec<&str> = exits.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"circuit_open") && names.contains(&"rejected"));
}

/// A folder of its own for a second run in the same test.
fn subdir(tmp: &Path, name: &str) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---- what the roles see, and what ends a run ---------------------------------------------------

/// "Must analyze existing patterns before planning"; the worker "Follows step docs EXACTLY"
/// and sends whole files: before every attempt it sees the files as they are now, an earlier
/// step's changes included, not only their names.
#[test]
fn the_worker_sees_the_current_content_of_the_files_it_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = subdir(tmp.path(), "ws");
    std::fs::write(ws.join("notes.md"), "ORIGINAL_MARKER line\n").unwrap();
    let ran = Iter::new()
        .input("build_command", "true")
        .reply(
            "architect",
            &[plan(&[(1, &[], &["R1"]), (2, &[1], &["R2"])])],
        )
        .reply(
            "worker",
            &[
                result(1, &[("notes.md", "STEP1_MARKER line\n")], "step 1", false),
                result(2, &[("more.md", "two\n")], "step 2", true),
            ],
        )
        .in_workspace(&ws)
        .run(&subdir(tmp.path(), "run"));
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
    let prompts = ran.prompts("worker");
    assert_eq!(prompts.len(), 2);
    assert!(
        prompts[0].contains("--- notes.md\nORIGINAL_MARKER line"),
        "{}",
        prompts[0]
    );
    assert!(
        prompts[1].contains("--- notes.md\nSTEP1_MARKER line"),
        "{}",
        prompts[1]
    );
    assert!(ran.prompts("architect")[0].contains("ORIGINAL_MARKER"));
}

/// A worker reply too long to be read is told so ("too long"), not "not valid JSON"; and a
/// run that ends before the summarizer (here the loop's circuit breaker) still has its
/// summary.md ("SUMMARY IS MANDATORY"), saying how it ended.
#[test]
fn a_worker_reply_over_max_reply_is_told_too_long_and_the_summary_is_still_written() {
    let tmp = tempfile::tempdir().unwrap();
    let big = format!("{{\"message\": \"{}\"}}", "x".repeat(1024 * 1024 + 10));
    let ran = Iter::new()
        .input("build_command", "true")
        .input("breaker_threshold", "2")
        .reply("worker", &[big])
        .run(tmp.path());
    assert_eq!(ran.exit(), "circuit_open", "{}", ran.describe());
    let prompts = ran.prompts("worker");
    let told = prompts.iter().any(|p| {
        p.contains("Your previous reply could not be used: the reply is longer than max_reply")
    });
    assert!(
        told,
        "{:?}",
        prompts.last().map(|p| &p[..p.len().min(3000)])
    );
    let summary = ran.file("summary.md");
    assert!(summary.contains("stopped at `circuit_open`"), "{summary}");
}

/// A run stopped by Rondo itself (`limit`: here the replies run out at the validator) still
/// leaves summary.md.
#[test]
fn a_run_stopped_at_limit_still_writes_summary_md() {
    let tmp = tempfile::tempdir().unwrap();
    let mut it = Iter::new().input("build_command", "true");
    it.replies
        .insert("validator".into(), json!({"2": pass("p")}));
    let ran = it.run(tmp.path());
    assert_eq!(ran.exit(), "limit", "{}", ran.describe());
    let summary = ran.file("summary.md");
    assert!(summary.contains("stopped at `limit`"), "{summary}");
}

/// "summary.md existence is a completion indicator": an empty summary.md is no summary, so
/// it does not make up the threshold ("SUMMARY IS MANDATORY - task incomplete without
/// summary.md").
#[test]
fn an_empty_summary_is_not_a_completion_indicator() {
    let tmp = tempfile::tempdir().unwrap();
    let ran = Iter::new()
        .input("build_command", "true")
        .reply("summarizer", &["  \n".to_string()])
        .run(tmp.path());
    assert_eq!(ran.exit(), "incomplete", "{}", ran.describe());
}

/// A step whose changes change nothing (an empty diff over all its attempts) has not been
/// implemented: the validator's pass does not move the run on.
#[test]
fn a_step_whose_diff_is_empty_does_not_advance() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = subdir(tmp.path(), "ws");
    std::fs::write(ws.join("notes.md"), "same\n").unwrap();
    let ran = Iter::new()
        .input("build_command", "true")
        .reply(
            "worker",
            &[result(1, &[("notes.md", "same\n")], "no-op", true)],
        )
        .in_workspace(&ws)
        .run(&subdir(tmp.path(), "run"));
    assert_eq!(ran.exit(), "rejected", "{}", ran.describe());
    assert_eq!(ran.count("advance"), 0);
}

/// "Must verify requirements with code line references": a pass whose requirements are not
/// each referenced at a line of the code (`path:line`) is a rejection, like any other field
/// short of a pass.
#[test]
fn a_pass_without_line_references_is_a_rejection() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("no refs", json!({})),
        ("one missing", json!({"R1": "hello.go:4"})),
        (
            "not a line",
            json!({"R1": "hello.go", "R2": "hello_test.go:6"}),
        ),
    ];
    for (name, refs) in cases {
        let mut bad: Value = serde_json::from_str(&pass("p")).unwrap();
        bad["requirement_refs"] = refs;
        let ran = Iter::new()
            .input("build_command", "true")
            .input("max_rejections", "1")
            .reply("validator", &[bad.to_string()])
            .run(&subdir(tmp.path(), &name.replace(' ', "_")));
        assert_eq!(ran.exit(), "rejected", "{name}: {}", ran.describe());
        assert_eq!(ran.count("advance"), 0, "{name}");
        let feedback = ran.memory("feedback").to_string();
        assert!(
            feedback.contains("without_line_reference"),
            "{name}: {feedback}"
        );
    }
    // With them, the same pass moves on.
    let ran = Iter::new()
        .input("build_command", "true")
        .run(&subdir(tmp.path(), "with_refs"));
    assert_eq!(ran.exit(), "done", "{}", ran.describe());
}
