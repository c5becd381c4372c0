//! SWE-bench's verdict on one patch, as its harness reaches it (swebench/harness:
//! run_evaluation.py, grading.py): in a fresh container of the instance's image the
//! repository is at its base commit, the patch is applied (with the harness's fallbacks),
//! every file the test patch touches is put back to its base version, the test patch is
//! applied, the tests run, and each test's status is read from their log. Resolved: every
//! FAIL_TO_PASS test passes and every PASS_TO_PASS test still does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::log_parsers::{ERROR, FAILED, PASSED, Parser, SKIPPED, StatusMap, XFAIL};

/// The harness's log markers (swebench/harness/constants).
pub const APPLY_PATCH_FAIL: &str = ">>>>> Patch Apply Failed";
pub const APPLY_PATCH_PASS: &str = ">>>>> Applied Patch";
pub const RESET_FAILED: &str = ">>>>> Reset Failed";
pub const TESTS_ERROR: &str = ">>>>> Tests Errored";
pub const TESTS_TIMEOUT: &str = ">>>>> Tests Timed Out";
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";

/// The files of one evaluation, in `OUT/eval/<run-id>/`.
pub const LOG_FILE: &str = "test_output.txt";
pub const REPORT_FILE: &str = "report.json";
pub const PATCH_FILE: &str = "patch.diff";
pub const TEST_PATCH_FILE: &str = "test.patch";
/// Where the patches are mounted, read-only, in the evaluation's container.
const INPUTS: &str = "/rondo-eval";

/// The harness's ways to apply a patch, tried in turn, the tree put back between them.
const APPLY: &[&str] = &[
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
];
/// A step other than the tests (reset, applying a patch) that takes longer has hung.
const STEP_TIMEOUT: Duration = Duration::from_secs(300);
/// Bytes of the test log kept (its head and tail, the middle cut).
const MAX_LOG: usize = 32 << 20;
/// The test patch's files the harness does not pass to the test command.
const NON_TEST_EXTS: &[&str] = &[
    ".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml",
];

/// One list of expected tests, split by the outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Split {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TestsStatus {
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Split,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Split,
}

/// The harness's report of one instance (the value under its id in its `report.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceReport {
    #[serde(rename = "patch_is_None")]
    pub patch_is_none: bool,
    pub patch_exists: bool,
    pub patch_successfully_applied: bool,
    pub resolved: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_status: Option<TestsStatus>,
}

/// Where and how one instance is evaluated.
#[derive(Debug, Clone)]
pub struct Target {
    /// Where the evaluation's sandbox runs.
    pub engine: rondo_env::SandboxEngine,
    pub instance_id: String,
    /// Names the container (`<run-id>-eval`).
    pub run_id: String,
    pub image: String,
    /// The repository in the container (`/testbed`, or where the agent saw it).
    pub workdir: String,
    /// A repository of this machine (its git directory, whose `HEAD` is the base): cloned
    /// afresh and mounted at `workdir`. `None`: the repository is the image's own.
    pub host_git_dir: Option<PathBuf>,
    /// The mount of that clone hides what the image has at `workdir`.
    pub replace: bool,
    pub env: BTreeMap<String, String>,
    pub base_commit: Option<String>,
    pub test_patch: String,
    pub test_command: String,
    pub parser: Parser,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
}

/// The verdict and what led to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub report: InstanceReport,
    /// Why there is no verdict on the tests: the patch did not apply, the tests timed out
    /// or left no status, the container could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why tests that ran have no verdict (no status in their log): unresolved, as the
    /// harness reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// The test command's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_exit_code: Option<i64>,
    pub eval_sec: f64,
    /// `OUT/eval/<run-id>/`: the patches, the log and the report.
    pub dir: PathBuf,
}

impl Outcome {
    /// Evaluated: the tests ran and were graded (the harness's "completed").
    pub fn completed(&self) -> bool {
        self.report.patch_exists && self.error.is_none()
    }
}

/// The files a diff touches (both sides of each `diff --git a/X b/Y`), in order.
pub fn diff_files(diff: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for line in diff.lines() {
        let Some(rest) = line.strip_prefix("diff --git ") else {
            continue;
        };
        let Some(b) = rest.find(" b/") else { continue };
        let a = rest[..b].trim_start_matches("a/").to_string();
        let bb = rest[b + 3..].to_string();
        for f in [a, bb] {
            if !f.is_empty() && !files.contains(&f) {
                files.push(f);
            }
        }
    }
    files
}

/// The harness's test command for a repository when the instance gives none: Django's
/// runner on the test patch's modules, SymPy's on its files, else `pytest -rA` on them.
pub fn default_test_command(repo: &str, test_patch: &str) -> String {
    let files: Vec<String> = diff_files(test_patch)
        .into_iter()
        .filter(|f| !NON_TEST_EXTS.iter().any(|e| f.ends_with(e)))
        .collect();
    match repo {
        "django/django" => {
            let modules: Vec<String> = files
                .iter()
                .map(|f| {
                    let f = f.strip_suffix(".py").unwrap_or(f);
                    let f = f.strip_prefix("tests/").unwrap_or(f);
                    f.replace('/', ".")
                })
                .collect();
            format!(
                "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 {}",
                quote_all(&modules)
            )
        }
        "sympy/sympy" => format!(
            "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose {}",
            quote_all(&files)
        ),
        _ => format!(
            "pytest --no-header -rA --tb=no -p no:cacheprovider {}",
            quote_all(&files)
        ),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn quote_all(items: &[String]) -> String {
    items.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" ")
}

/// The harness's reading of a test log: no status at all when a step failed or the test
/// output is not between its markers; the status of each test from the part between them
/// (the whole log when that part has none); none when the tests exited non-zero and no
/// test failed (the log does not describe the run).
pub fn statuses(log: &str, parser: Parser) -> Option<StatusMap> {
    if [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT]
        .iter()
        .any(|c| log.contains(c))
    {
        return None;
    }
    let (_, after) = log.split_once(START_TEST_OUTPUT)?;
    let (inner, _) = after.split_once(END_TEST_OUTPUT)?;
    let mut map = parser.parse(inner);
    if map.is_empty() {
        map = parser.parse(log);
    }
    if map.is_empty() {
        return None;
    }
    let exit = log.split_once(TEST_EXIT_CODE).and_then(|(_, rest)| {
        rest.trim_start_matches([':', ' '])
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<i64>().ok())
    });
    if exit.is_some_and(|c| c != 0) && !map.values().any(|s| s == FAILED || s == ERROR) {
        return None;
    }
    Some(map)
}

/// The key of `case` in `map`, allowing a parametrised id cut in the dataset (more `[`
/// than `]`) to match the one test it begins, when every candidate agrees.
fn resolve<'a>(case: &str, map: &'a StatusMap) -> Option<&'a str> {
    if let Some((k, _)) = map.get_key_value(case) {
        return Some(k);
    }
    if case.matches('[').count() > case.matches(']').count() {
        let passing = |s: &str| s == PASSED || s == XFAIL;
        let found: Vec<(&String, &String)> =
            map.iter().filter(|(k, _)| k.starts_with(case)).collect();
        let first = found.first()?;
        if found.iter().all(|(_, s)| passing(s) == passing(first.1)) {
            return Some(first.0);
        }
    }
    None
}

fn passed(case: &str, map: &StatusMap) -> bool {
    resolve(case, map).is_some_and(|k| map[k] == PASSED || map[k] == XFAIL)
}

fn failed(case: &str, map: &StatusMap) -> bool {
    resolve(case, map).is_none_or(|k| [FAILED, ERROR, SKIPPED].contains(&map[k].as_str()))
}

/// The harness's grading: a FAIL_TO_PASS test succeeds when it passed (skipped is a
/// failure), a PASS_TO_PASS test when it passed or was skipped; a test absent from the
/// log failed. Resolved: no failure in either list.
pub fn grade(map: &StatusMap, fail_to_pass: &[String], pass_to_pass: &[String]) -> TestsStatus {
    let mut status = TestsStatus::default();
    for case in fail_to_pass {
        if passed(case, map) {
            status.fail_to_pass.success.push(case.clone());
        } else if failed(case, map) {
            status.fail_to_pass.failure.push(case.clone());
        }
    }
    for case in pass_to_pass {
        let skipped = resolve(case, map).is_some_and(|k| map[k] == SKIPPED);
        if passed(case, map) || skipped {
            status.pass_to_pass.success.push(case.clone());
        } else if failed(case, map) {
            status.pass_to_pass.failure.push(case.clone());
        }
    }
    status
}

/// Resolved in the harness's sense (`ResolvedStatus.FULL`): every listed test succeeded.
pub fn resolved(status: &TestsStatus) -> bool {
    let rate = |s: &Split| {
        let n = s.success.len() + s.failure.len();
        n == 0 || s.failure.is_empty()
    };
    rate(&status.fail_to_pass) && rate(&status.pass_to_pass)
}

/// The instance's report for a patch that was not evaluated: none (`null` in the
/// predictions) or empty.
pub fn not_evaluated(patch: Option<&str>) -> Option<InstanceReport> {
    match patch {
        None => Some(InstanceReport {
            patch_is_none: true,
            ..Default::default()
        }),
        Some(p) if p.trim().is_empty() => Some(InstanceReport::default()),
        Some(_) => None,
    }
}

/// Evaluates `patch` on `target` in a fresh container; everything goes to `dir`. The tests
/// get `limit`; a test that runs longer is killed and the evaluation reported timed out.
pub async fn evaluate(
    target: &Target,
    patch: Option<&str>,
    dir: &Path,
    limit: Duration,
) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome {
        report: InstanceReport::default(),
        error: None,
        note: None,
        timed_out: false,
        test_exit_code: None,
        eval_sec: 0.0,
        dir: dir.to_path_buf(),
    };
    if let Some(report) = not_evaluated(patch) {
        outcome.report = report;
        write_report(target, &outcome);
        return outcome;
    }
    outcome.report.patch_exists = true;
    let patch = patch.unwrap_or_default();
    let mut log = String::new();
    // An evaluation starts from a fresh sandbox: one lost with its node runs again whole.
    let mut lost = 0;
    let result = loop {
        log.clear();
        outcome.timed_out = false;
        outcome.test_exit_code = None;
        match run(target, patch, dir, limit, &mut outcome, &mut log).await {
            Err(e) if e.starts_with(SANDBOX_LOST) && lost < 2 => {
                lost += 1;
                eprintln!(
                    "warning: {}: {e}; evaluating again in a new sandbox",
                    target.instance_id
                );
            }
            r => break r,
        }
    };
    if let Err(e) = result {
        outcome.error = Some(e);
    }
    let _ = std::fs::write(dir.join(LOG_FILE), &log);
    if outcome.error.is_none() {
        match statuses(&log, target.parser) {
            Some(map) => {
                outcome.report.patch_successfully_applied = true;
                let status = grade(&map, &target.fail_to_pass, &target.pass_to_pass);
                outcome.report.resolved = resolved(&status);
                outcome.report.tests_status = Some(status);
            }
            None => {
                outcome.note = Some(format!(
                    "no test status in the log (exit {}): see {}",
                    outcome
                        .test_exit_code
                        .map_or("none".into(), |c| c.to_string()),
                    dir.join(LOG_FILE).display()
                ));
            }
        }
    }
    outcome.eval_sec = started.elapsed().as_secs_f64();
    write_report(target, &outcome);
    outcome
}

fn write_report(target: &Target, outcome: &Outcome) {
    let _ = std::fs::create_dir_all(&outcome.dir);
    let mut map = serde_json::Map::new();
    map.insert(
        target.instance_id.clone(),
        serde_json::to_value(&outcome.report).unwrap_or_default(),
    );
    let text = serde_json::to_string_pretty(&map).unwrap_or_default();
    let _ = crate::run::rundir::write_atomic(&outcome.dir.join(REPORT_FILE), text.as_bytes());
}

/// The steps in the container; the log gets each step's output and the markers.
async fn run(
    target: &Target,
    patch: &str,
    dir: &Path,
    limit: Duration,
    outcome: &mut Outcome,
    log: &mut String,
) -> Result<(), String> {
    use rondo_env::{DockerConfig, Mount};
    let inputs = dir.join("inputs");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(&inputs)
        .map_err(|e| format!("cannot create {}: {e}", inputs.display()))?;
    for (name, text) in [
        (PATCH_FILE, patch),
        (TEST_PATCH_FILE, target.test_patch.as_str()),
    ] {
        std::fs::write(inputs.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))?;
        let _ = std::fs::write(dir.join(name), text);
    }
    let mut config = DockerConfig::new(target.image.clone(), format!("{}-eval", target.run_id));
    config.workdir = target.workdir.clone();
    config.env = target.env.clone();
    for (k, v) in [
        ("PYTHONDONTWRITEBYTECODE", "1"),
        // The repository may belong to another user than the container's.
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "safe.directory"),
        ("GIT_CONFIG_VALUE_0", "*"),
    ] {
        config.env.insert(k.into(), v.into());
    }
    config.mounts.push(Mount {
        host: inputs.clone(),
        container: INPUTS.into(),
        writable: false,
        replace: false,
    });
    if let Some(git_dir) = &target.host_git_dir {
        let repo = dir.join("repo");
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "clone",
                "-q",
                "--no-hardlinks",
            ])
            .arg(git_dir)
            .arg(&repo)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot clone {}: {}",
                git_dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        config.mounts.push(Mount {
            host: repo,
            container: target.workdir.clone(),
            writable: true,
            replace: target.replace,
        });
    }
    let env = target
        .engine
        .start(config, dir)
        .await
        .map_err(|e| match e {
            rondo_env::EnvError::SandboxLost { .. } => format!("{SANDBOX_LOST}{e}"),
            e => e.to_string(),
        })?;
    let result = steps(env.as_ref(), target, limit, outcome, log).await;
    let _ = env.shutdown().await;
    result
}

async fn exec(
    env: &dyn rondo_env::Environment,
    command: String,
    timeout: Duration,
) -> Result<rondo_env::ExecOutput, String> {
    use rondo_env::ExecRequest;
    let mut req = ExecRequest::shell(command);
    req.timeout = Some(timeout);
    req.max_output = Some(MAX_LOG);
    env.exec(req).await.map_err(|e| match e {
        rondo_env::EnvError::SandboxLost { .. } => format!("{SANDBOX_LOST}{e}"),
        e => e.to_string(),
    })
}

/// How an evaluation's error says its sandbox was lost (a Swarm node gone).
const SANDBOX_LOST: &str = "the evaluation's sandbox was lost: ";

async fn steps(
    env: &dyn rondo_env::Environment,
    target: &Target,
    limit: Duration,
    outcome: &mut Outcome,
    log: &mut String,
) -> Result<(), String> {
    let base = target.base_commit.clone().unwrap_or_else(|| "HEAD".into());
    if let Some(commit) = &target.base_commit {
        let out = exec(
            env,
            // The image is at its base commit already, with its build's changes to tracked
            // files, which must stay: check out only a repository somewhere else.
            format!(
                "[ \"$(git rev-parse HEAD)\" = \"$(git rev-parse {c}^{{commit}})\" ] || git -c advice.detachedHead=false checkout -q -f {c}",
                c = quote(commit)
            ),
            STEP_TIMEOUT,
        )
        .await?;
        log.push_str(&out.merged);
        if !out.success() {
            log.push_str(&format!("\n{RESET_FAILED}\n"));
            return Err(format!(
                "cannot check out the base commit {commit}: {}",
                out.merged.trim()
            ));
        }
    }
    let mut script = String::from("p=/rondo-eval/patch.diff\n");
    for (i, cmd) in APPLY.iter().enumerate() {
        if i > 0 {
            script.push_str("git checkout -q -- . ; git clean -fdq\n");
        }
        script.push_str(&format!(
            "if {cmd} \"$p\"; then echo '{APPLY_PATCH_PASS} ({cmd})'; exit 0; fi\n"
        ));
    }
    script.push_str(&format!(
        "if git apply --check --reverse \"$p\"; then echo '{APPLY_PATCH_PASS} (already applied)'; exit 0; fi\nexit 1\n"
    ));
    let out = exec(env, script, STEP_TIMEOUT).await?;
    log.push_str(&out.merged);
    if !out.success() {
        log.push_str(&format!("\n{APPLY_PATCH_FAIL}\n"));
        return Err(
            "the patch does not apply (git apply, --3way, --reject, patch --fuzz=5 all failed)"
                .into(),
        );
    }
    let mut script = String::new();
    for f in diff_files(&target.test_patch) {
        let (q, b) = (quote(&f), quote(&format!("{base}:{f}")));
        script.push_str(&format!(
            "if git cat-file -e {b} 2>/dev/null; then git checkout -q {} -- {q}; else rm -rf -- {q}; fi\n",
            quote(&base)
        ));
    }
    if !target.test_patch.trim().is_empty() {
        script.push_str("git apply --verbose /rondo-eval/test.patch\n");
    }
    let out = exec(env, script, STEP_TIMEOUT).await?;
    log.push_str(&out.merged);
    if !out.success() {
        log.push_str(&format!("\n{TESTS_ERROR}\n"));
        return Err(format!(
            "the test patch does not apply: {}",
            out.merged.trim()
        ));
    }
    let command = format!(
        "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate && conda activate testbed; fi\n{}",
        target.test_command
    );
    log.push_str(&format!("\n{START_TEST_OUTPUT}\n"));
    let out = exec(env, command, limit).await?;
    log.push_str(&out.merged);
    log.push_str(&format!("\n{END_TEST_OUTPUT}\n"));
    outcome.test_exit_code = out.exit_code;
    if out.timed_out {
        outcome.timed_out = true;
        log.push_str(&format!(
            "{TESTS_TIMEOUT} after {} seconds\n",
            limit.as_secs()
        ));
        return Err(format!(
            "the tests timed out after {} seconds and were killed",
            limit.as_secs()
        ));
    }
    log.push_str(&format!(
        "{TEST_EXIT_CODE}: {}\n",
        out.exit_code.map_or("none".into(), |c| c.to_string())
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> StatusMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn grading_follows_the_harness() {
        let m = map(&[
            ("a", PASSED),
            ("b", FAILED),
            ("c", SKIPPED),
            ("d", XFAIL),
            ("t[x-1]", PASSED),
        ]);
        let s = grade(
            &m,
            &names(&["a", "c", "missing", "t[x"]),
            &names(&["c", "d", "b"]),
        );
        assert_eq!(s.fail_to_pass.success, names(&["a", "t[x"]));
        // A skipped FAIL_TO_PASS test is no resolution; a missing one failed.
        assert_eq!(s.fail_to_pass.failure, names(&["c", "missing"]));
        // A skipped PASS_TO_PASS test is no regression.
        assert_eq!(s.pass_to_pass.success, names(&["c", "d"]));
        assert_eq!(s.pass_to_pass.failure, names(&["b"]));
        assert!(!resolved(&s));
        let ok = grade(&m, &names(&["a"]), &names(&["d"]));
        assert!(resolved(&ok));
        assert!(resolved(&grade(&m, &[], &[])));
    }

    #[test]
    fn a_log_with_a_failed_step_or_no_markers_has_no_status() {
        let good = format!(
            "x\n{START_TEST_OUTPUT}\nPASSED t::a\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: 0\n"
        );
        assert_eq!(statuses(&good, Parser::Pytest).unwrap()["t::a"], PASSED);
        let bad = format!("{good}{APPLY_PATCH_FAIL}\n");
        assert!(statuses(&bad, Parser::Pytest).is_none());
        assert!(statuses("PASSED t::a\n", Parser::Pytest).is_none());
        // Exit 1 and no failure: printed by something other than the tests.
        let spoofed =
            format!("{START_TEST_OUTPUT}\nPASSED t::a\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: 1\n");
        assert!(statuses(&spoofed, Parser::Pytest).is_none());
        let failing =
            format!("{START_TEST_OUTPUT}\nFAILED t::a\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: 1\n");
        assert_eq!(statuses(&failing, Parser::Pytest).unwrap()["t::a"], FAILED);
    }

    #[test]
    fn the_default_command_runs_the_test_patchs_files() {
        let tp = "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@\ndiff --git a/tests/data.json b/tests/data.json\n";
        assert_eq!(
            default_test_command("psf/requests", tp),
            "pytest --no-header -rA --tb=no -p no:cacheprovider 'tests/test_x.py'"
        );
        let dj = "diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py\n";
        assert!(default_test_command("django/django", dj).ends_with(" 'admin_views.tests'"));
        assert_eq!(
            diff_files(tp),
            names(&["tests/test_x.py", "tests/data.json"])
        );
    }
}
