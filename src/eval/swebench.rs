//! `rondo swebench`: a SWE-bench-style runner on `rondo eval`'s machinery. Each instance's
//! repository is copied into its own git workspace, the agent workflow runs there with
//! `--workspace` (one container per run), the patch is that workspace's `git diff` against
//! the base commit, and the instance's test commands then run in a fresh container to mark
//! it resolved or not.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::dataset::{Problems, find, jsonl_lines, not_json, read_file, unique_run_id};
use super::{Case, CaseResult, Eval};
use crate::check::Checked;
use crate::compile::Workflow;
use crate::compile::mounts::{MountSource, parse_mount};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, did_you_mean};
use crate::run::events::Event;
use crate::run::{progress, rundir};
use crate::source::Span;

pub const SETUP_FILE: &str = "swebench.json";
pub const RESULTS_FILE: &str = "results.jsonl";
pub const REPORT_FILE: &str = "report.json";
pub const PREDS_FILE: &str = "preds.json";
pub const WORKSPACES_DIR: &str = "workspaces";
/// The git directories the patches are taken with, out of every container's reach.
pub const GIT_DIR: &str = "git";
/// The workflow input that receives the problem statement.
pub const TASK_INPUT: &str = "task";

/// A patch longer than this is cut (and the result says so).
const MAX_PATCH: usize = 4 << 20;
/// Bytes of a test command's output kept in its result (its tail).
const MAX_TEST_OUTPUT: usize = 8 << 10;
const TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(900);

/// The fields of an instance; the other SWE-bench fields are accepted and not used.
const FIELDS: &[&str] = &[
    "instance_id",
    "repo",
    "image",
    "problem_statement",
    "test_commands",
    "base_commit",
    "split",
    "subset",
];
const IGNORED: &[&str] = &[
    "patch",
    "test_patch",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
];
const INSTANCE_HELP: &str = "an instance is one JSON object a line: {\"instance_id\": \"...\", \"repo\": \"folder of the repository, relative to the dataset\", \"problem_statement\": \"...\", \"test_commands\": [\"...\"], \"image\": \"optional Docker image\", \"base_commit\": \"optional, for a git repository\", \"split\": \"...\", \"subset\": \"...\"}";

/// How a SWE-bench run was started: `DIR/swebench.json`, read back by `--resume DIR`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setup {
    pub workflow: PathBuf,
    pub dataset: PathBuf,
    #[serde(default)]
    pub subset: Option<String>,
    #[serde(default)]
    pub split: Option<String>,
    /// A regular expression on instance ids.
    #[serde(default)]
    pub filter: Option<String>,
    /// `START:END` of the selected instances (Python's slice, without a step).
    #[serde(default)]
    pub slice: Option<String>,
    /// `--instance ID`: only these.
    #[serde(default)]
    pub instances: Vec<String>,
    #[serde(default)]
    pub provider: Option<String>,
    /// The model of every profile the llm roles use.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub script: Option<PathBuf>,
    pub concurrency: usize,
}

/// One line of the dataset.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub run_id: String,
    /// The repository folder (absolute).
    pub repo: PathBuf,
    pub image: Option<String>,
    pub problem_statement: String,
    pub test_commands: Vec<String>,
    pub base_commit: Option<String>,
    pub split: Option<String>,
    pub subset: Option<String>,
}

/// Reads the dataset; every problem is located in the file and nothing runs.
pub fn read_instances(path: &Path, workflow: &Workflow) -> Result<Vec<Instance>, Box<Problems>> {
    let file = read_file(path, Code::SwebenchBadInstance)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut diags = Diagnostics::default();
    if !workflow.inputs.iter().any(|i| i.name == TASK_INPUT) {
        diags.push(
            Diagnostic::error(
                Code::SwebenchBadInstance,
                format!("the workflow has no input `{TASK_INPUT}` for the problem statement"),
            )
            .label(Span::new(0, 0), "every instance needs it")
            .help("declare `input task: string` in the workflow (workflows/llm_ide.rondo does)"),
        );
    }
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    let mut run_ids = HashSet::new();
    for (start, line) in jsonl_lines(&file.text) {
        if let Some(i) = instance(line, start, base, &mut diags, &mut ids, &mut run_ids) {
            out.push(i);
        }
    }
    if diags.has_errors() {
        return Err(Box::new(Problems {
            file,
            diagnostics: diags,
        }));
    }
    Ok(out)
}

fn instance(
    line: &str,
    start: usize,
    base: &Path,
    diags: &mut Diagnostics,
    ids: &mut HashSet<String>,
    run_ids: &mut HashSet<String>,
) -> Option<Instance> {
    let whole = Span::new(start, start + line.len());
    let at = |needle: &str| find(line, start, needle).unwrap_or(whole);
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            let (message, span) = not_json(&e, line, start);
            bad(diags, message, span, "here");
            return None;
        }
    };
    let Value::Object(obj) = value else {
        bad(
            diags,
            "an instance is a JSON object".into(),
            whole,
            "not an object",
        );
        return None;
    };
    let mut ok = true;
    for key in obj.keys() {
        if !FIELDS.contains(&key.as_str()) && !IGNORED.contains(&key.as_str()) {
            let span = at(&format!("\"{key}\""));
            let hint = did_you_mean(key, FIELDS.iter().copied());
            diags.push(
                Diagnostic::error(
                    Code::SwebenchBadInstance,
                    format!("`{key}` is not a field of an instance"),
                )
                .label(span, "unknown field")
                .help(hint.unwrap_or_else(|| INSTANCE_HELP.into())),
            );
            ok = false;
        }
    }
    let mut text = |name: &str, required: bool, diags: &mut Diagnostics| -> Option<String> {
        match obj.get(name) {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            None if !required => None,
            None => {
                bad(
                    diags,
                    format!("this instance has no `{name}`"),
                    whole,
                    &format!("needs \"{name}\""),
                );
                ok = false;
                None
            }
            Some(_) => {
                bad(
                    diags,
                    format!("`{name}` is a non-empty string"),
                    at(&format!("\"{name}\"")),
                    "not a string",
                );
                ok = false;
                None
            }
        }
    };
    let id = text("instance_id", true, diags);
    let repo = text("repo", true, diags);
    let problem_statement = text("problem_statement", true, diags);
    let image = text("image", false, diags);
    let base_commit = text("base_commit", false, diags);
    let split = text("split", false, diags);
    let subset = text("subset", false, diags);
    let test_commands = match obj.get("test_commands") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(_) => {
            bad(
                diags,
                "`test_commands` is a list of shell commands".into(),
                at("\"test_commands\""),
                "not a list of strings",
            );
            return None;
        }
    };
    let (id, repo, problem_statement) = (id?, repo?, problem_statement?);
    if !ids.insert(id.clone()) {
        bad(
            diags,
            format!("two instances have the id {id:?}"),
            at("\"instance_id\""),
            "repeated",
        );
        return None;
    }
    let repo_path = base.join(&repo);
    if !repo_path.is_dir() {
        bad(
            diags,
            format!(
                "the repository `{repo}` is not a folder ({})",
                repo_path.display()
            ),
            at(&format!("\"{repo}\"")),
            "no such folder",
        );
        return None;
    }
    if base_commit.is_some() && !repo_path.join(".git").exists() {
        bad(
            diags,
            format!("`base_commit` needs a git repository, and `{repo}` is not one"),
            at("\"base_commit\""),
            "not a git repository",
        );
        return None;
    }
    if !ok {
        return None;
    }
    Some(Instance {
        run_id: unique_run_id(&id, run_ids),
        id,
        repo: std::fs::canonicalize(&repo_path).unwrap_or(repo_path),
        image,
        problem_statement,
        test_commands,
        base_commit,
        split,
        subset,
    })
}

fn bad(diags: &mut Diagnostics, message: String, span: Span, label: &str) {
    diags.push(
        Diagnostic::error(Code::SwebenchBadInstance, message)
            .label(span, label)
            .help(INSTANCE_HELP),
    );
}

/// The instances `setup` selects, in dataset order: split, subset, filter, instance ids,
/// then the slice.
pub fn select(instances: Vec<Instance>, setup: &Setup) -> Result<Vec<Instance>, String> {
    let filter = match &setup.filter {
        Some(f) => Some(regex::Regex::new(f).map_err(|e| format!("--filter {f:?}: {e}"))?),
        None => None,
    };
    for id in &setup.instances {
        if !instances.iter().any(|i| &i.id == id) {
            return Err(format!(
                "--instance {id:?}: no such instance in the dataset"
            ));
        }
    }
    let chosen: Vec<Instance> = instances
        .into_iter()
        .filter(|i| setup.split.is_none() || i.split == setup.split)
        .filter(|i| setup.subset.is_none() || i.subset == setup.subset)
        .filter(|i| filter.as_ref().is_none_or(|re| re.is_match(&i.id)))
        .filter(|i| setup.instances.is_empty() || setup.instances.contains(&i.id))
        .collect();
    match &setup.slice {
        None => Ok(chosen),
        Some(s) => {
            let (a, b) = s
                .split_once(':')
                .ok_or_else(|| format!("--slice {s:?}: write START:END (e.g. 0:5)"))?;
            let n = chosen.len();
            let bound = |t: &str, default: usize| -> Result<usize, String> {
                if t.is_empty() {
                    return Ok(default);
                }
                let v: i64 = t
                    .parse()
                    .map_err(|_| format!("--slice {s:?}: {t:?} is not a whole number"))?;
                Ok(if v < 0 {
                    n.saturating_sub(v.unsigned_abs() as usize)
                } else {
                    (v as usize).min(n)
                })
            };
            let (a, b) = (bound(a, 0)?, bound(b, n)?);
            Ok(chosen
                .into_iter()
                .skip(a)
                .take(b.saturating_sub(a))
                .collect())
        }
    }
}

/// The outcome of one instance: a line of `results.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceResult {
    pub instance_id: String,
    pub run_id: String,
    pub exit: String,
    pub exit_code: i32,
    pub reason: String,
    /// The `git diff` of the workspace against its base commit, the run's own files left out.
    pub patch: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub patch_cut: bool,
    /// Why no patch could be taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_error: Option<String>,
    /// All test commands passed; `null` when the instance has none or they could not run.
    pub resolved: Option<bool>,
    pub tests: Vec<TestResult>,
    /// Why the tests could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_error: Option<String>,
    pub cost_usd: f64,
    pub llm_calls: u64,
    pub steps: u64,
    pub latency_sec: f64,
    /// The instance's repository as the agent left it; its run is in `.rondo/runs/<run_id>`.
    pub workspace: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestResult {
    pub command: String,
    pub exit_code: Option<i64>,
    pub passed: bool,
    /// The tail of its output.
    pub output: String,
}

/// `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    /// Runs that ended at a success exit.
    pub submitted: usize,
    pub with_patch: usize,
    pub resolved: usize,
    pub unresolved: usize,
    /// Instances without test commands, or whose tests could not run.
    pub not_tested: usize,
    pub resolve_rate: f64,
    pub cost_usd: f64,
    pub avg_cost_usd: f64,
}

impl Summary {
    pub fn of(results: &[InstanceResult]) -> Summary {
        let n = results.len();
        let count = |f: &dyn Fn(&InstanceResult) -> bool| results.iter().filter(|r| f(r)).count();
        let cost: f64 = results.iter().map(|r| r.cost_usd).sum();
        let resolved = count(&|r| r.resolved == Some(true));
        Summary {
            n,
            submitted: count(&|r| r.exit_code == 0),
            with_patch: count(&|r| !r.patch.trim().is_empty()),
            resolved,
            unresolved: count(&|r| r.resolved == Some(false)),
            not_tested: count(&|r| r.resolved.is_none()),
            resolve_rate: if n == 0 {
                0.0
            } else {
                resolved as f64 / n as f64
            },
            cost_usd: cost,
            avg_cost_usd: if n == 0 { 0.0 } else { cost / n as f64 },
        }
    }
}

/// Everything a SWE-bench run needs.
pub struct Swebench {
    pub workflow: Arc<Checked>,
    pub instances: Vec<Instance>,
    pub setup: Setup,
    pub out: PathBuf,
    pub progress: progress::Mode,
}

pub struct Report {
    pub results: Vec<InstanceResult>,
    pub summary: Summary,
    pub unfinished: usize,
}

/// Where the tests see the repository and in which image: the workflow's Docker
/// environment that mounts the workspace itself (`.:/path`), else its first Docker one.
struct TestSite {
    image: Option<String>,
    path: String,
    replace: bool,
    env: BTreeMap<String, String>,
}

fn test_site(workflow: &Workflow) -> TestSite {
    let docker: Vec<_> = workflow
        .environments
        .iter()
        .filter(|e| e.kind == crate::compile::EnvKind::Docker)
        .collect();
    for e in &docker {
        for m in &e.mounts {
            if let Ok(spec) = parse_mount(m)
                && let MountSource::Workspace(rel) = &spec.source
                && rel.to_string_lossy().trim_matches(['.', '/']).is_empty()
            {
                return TestSite {
                    image: e.image.clone(),
                    path: spec.container,
                    replace: spec.replace,
                    env: e.env.clone(),
                };
            }
        }
    }
    TestSite {
        image: docker.first().and_then(|e| e.image.clone()),
        path: docker
            .first()
            .and_then(|e| e.workdir.clone())
            .unwrap_or_else(|| "/work".into()),
        replace: false,
        env: docker.first().map(|e| e.env.clone()).unwrap_or_default(),
    }
}

/// Settings of every git command: an identity for the base commit, and nothing a
/// repository's own settings could make it run.
const SAFE_GIT: &[&str] = &[
    "-c",
    "user.name=rondo",
    "-c",
    "user.email=rondo@localhost",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
];

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(SAFE_GIT)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The instance's workspace: a copy of its repository at its base commit, a git repository
/// whose base is `HEAD` (for the agent), and a bare copy of that repository in `git_dir`
/// (for the patch: the agent can rewrite the workspace's `.git`, hooks and config included,
/// and the host must not run what it wrote there). Made under temporary names and renamed,
/// the git directory first, so a workspace that exists is complete.
fn prepare(instance: &Instance, dir: &Path, git_dir: &Path) -> Result<(), String> {
    if dir.exists() {
        return Ok(());
    }
    let tmp = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    if let Some(parent) = tmp.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let cwd = tmp.parent().unwrap_or(Path::new("."));
    if instance.repo.join(".git").exists() {
        let name = tmp.to_string_lossy().into_owned();
        let repo = instance.repo.to_string_lossy().into_owned();
        git(cwd, &["clone", "-q", "--no-hardlinks", &repo, &name])?;
        if let Some(commit) = &instance.base_commit {
            git(&tmp, &["checkout", "-q", "--detach", commit])?;
        }
    } else {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(instance.repo.join("."))
            .arg(&tmp)
            .status()
            .map_err(|e| format!("cannot run cp: {e}"))?;
        if !status.success() {
            return Err(format!("cannot copy {}", instance.repo.display()));
        }
        git(&tmp, &["init", "-q"])?;
        git(&tmp, &["add", "-A"])?;
        git(&tmp, &["commit", "-q", "--allow-empty", "-m", "base"])?;
    }
    let tmp_git = git_dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp_git);
    if let Some(parent) = tmp_git.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    git(
        cwd,
        &[
            "clone",
            "-q",
            "--bare",
            "--no-hardlinks",
            &tmp.to_string_lossy(),
            &tmp_git.to_string_lossy(),
        ],
    )?;
    for exclude in [tmp.join(".git/info/exclude"), tmp_git.join("info/exclude")] {
        let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
        text.push_str(&format!("/{}/\n", rondo_workspace::SYSTEM_DIR));
        if let Some(parent) = exclude.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(&exclude, text)
            .map_err(|e| format!("cannot write {}: {e}", exclude.display()))?;
    }
    let _ = std::fs::remove_dir_all(git_dir);
    std::fs::rename(&tmp_git, git_dir)
        .map_err(|e| format!("cannot rename {}: {e}", tmp_git.display()))?;
    std::fs::rename(&tmp, dir).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))
}

/// The files the engine wrote for the run in its workspace (artifacts, tool logs): not
/// part of the agent's patch.
fn run_files(run_dir: &Path, workspace: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let journal = rundir::read_journal(run_dir).unwrap_or_default();
    for entry in &journal.entries {
        let name = match &entry.event {
            Event::Artifact {
                file, folder: None, ..
            } => Some(file.as_str()),
            Event::ToolCall { result, .. } => result.get("log").and_then(Value::as_str),
            _ => None,
        };
        if let Some(name) = name {
            let path = Path::new(name);
            let rel = path.strip_prefix(workspace).unwrap_or(path);
            if rel.is_relative() {
                files.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

/// The workspace's changes against `HEAD` (untracked files included), less `skip`; cut at
/// [`MAX_PATCH`]. Taken with the instance's own git directory, never the workspace's.
fn patch(workspace: &Path, git_dir: &Path, skip: &[String]) -> Result<(String, bool), String> {
    let dirs = [
        format!("--git-dir={}", git_dir.display()),
        format!("--work-tree={}", workspace.display()),
    ];
    git(workspace, &[&dirs[0], &dirs[1], "add", "-A"])?;
    let mut args: Vec<String> = dirs.to_vec();
    args.extend(
        ["diff", "--cached", "--binary", "HEAD", "--", "."]
            .iter()
            .map(|s| s.to_string()),
    );
    args.extend(skip.iter().map(|f| format!(":(exclude,literal){f}")));
    let mut child = std::process::Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(SAFE_GIT)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run git: {e}"))?;
    let mut buf = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        stdout
            .take(MAX_PATCH as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("git diff: {e}"))?;
    }
    let cut = buf.len() > MAX_PATCH;
    if cut {
        let _ = child.kill();
        buf.truncate(MAX_PATCH);
    }
    let _ = child.wait();
    Ok((String::from_utf8_lossy(&buf).into_owned(), cut))
}

/// Runs the test commands in a fresh container of `image`, the workspace mounted where
/// the agent saw it.
async fn run_tests(
    instance: &Instance,
    workspace: &Path,
    site: &TestSite,
) -> Result<Vec<TestResult>, String> {
    use rondo_env::{DockerConfig, DockerEnv, Environment, ExecRequest, Mount};
    let image = instance
        .image
        .clone()
        .or_else(|| site.image.clone())
        .ok_or("no image to run the tests in: give the instance an `image` or the workflow a Docker environment")?;
    let mut config = DockerConfig::new(image, format!("{}-tests", instance.run_id));
    config.workdir = site.path.clone();
    config.env = site.env.clone();
    config
        .env
        .insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
    config.mounts = vec![Mount {
        host: workspace.to_path_buf(),
        container: site.path.clone(),
        writable: true,
        replace: site.replace,
    }];
    config.masks = vec![format!(
        "{}/{}",
        site.path.trim_end_matches('/'),
        rondo_workspace::SYSTEM_DIR
    )];
    let env = DockerEnv::start(config).await.map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for command in &instance.test_commands {
        let mut req = ExecRequest::shell(command.clone());
        req.timeout = Some(TEST_TIMEOUT);
        req.max_output = Some(MAX_TEST_OUTPUT * 2);
        let result = match env.exec(req).await {
            Ok(out) => {
                let merged = out.merged;
                let mut from = merged.len().saturating_sub(MAX_TEST_OUTPUT);
                while !merged.is_char_boundary(from) {
                    from += 1;
                }
                TestResult {
                    command: command.clone(),
                    exit_code: out.exit_code,
                    passed: out.exit_code == Some(0) && !out.timed_out,
                    output: merged[from..].to_string(),
                }
            }
            Err(e) => TestResult {
                command: command.clone(),
                exit_code: None,
                passed: false,
                output: e.to_string(),
            },
        };
        results.push(result);
    }
    let _ = env.shutdown().await;
    Ok(results)
}

impl Swebench {
    /// Prepares the workspaces, runs the agent on every instance without a result (as
    /// `rondo eval` runs its cases), then takes each patch and runs each instance's tests.
    pub async fn run(self) -> Result<Report, String> {
        // Git runs in other folders: every path it is given is absolute.
        let out =
            std::path::absolute(&self.out).map_err(|e| format!("{}: {e}", self.out.display()))?;
        std::fs::create_dir_all(&out)
            .map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        let setup_text = serde_json::to_string_pretty(&self.setup).unwrap_or_default();
        rundir::write_atomic(&out.join(SETUP_FILE), setup_text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.join(SETUP_FILE).display()))?;
        let mut done = super::read_jsonl(&out.join(RESULTS_FILE), |r: &InstanceResult| {
            r.instance_id.clone()
        });
        let workspaces = out.join(WORKSPACES_DIR);
        let git_dirs = out.join(GIT_DIR);
        let mut cases = Vec::new();
        for inst in &self.instances {
            let ws = workspaces.join(&inst.run_id);
            if !done.contains_key(&inst.id) {
                prepare(inst, &ws, &git_dirs.join(format!("{}.git", inst.run_id)))?;
            }
            cases.push(Case {
                id: inst.id.clone(),
                run_id: inst.run_id.clone(),
                inputs: vec![(TASK_INPUT.to_string(), inst.problem_statement.clone())],
                expect: Default::default(),
                workspace: Some(std::fs::canonicalize(&ws).unwrap_or(ws)),
                image: inst.image.clone(),
            });
        }
        let eval = Eval {
            workflow: self.workflow.clone(),
            cases: cases.clone(),
            weights: super::Rubrics::default().weights(),
            setup: super::Setup {
                workflow: self.setup.workflow.clone(),
                dataset: self.setup.dataset.clone(),
                rubrics: None,
                provider: self.setup.provider.clone(),
                script: self.setup.script.clone(),
                concurrency: self.setup.concurrency,
            },
            out: out.clone(),
            progress: self.progress,
            no_demos: false,
        };
        let report = eval.run().await?;
        let ran: BTreeMap<&str, &CaseResult> =
            report.results.iter().map(|r| (r.id.as_str(), r)).collect();
        let site = test_site(&self.workflow);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.join(RESULTS_FILE))
            .map_err(|e| format!("cannot open {}: {e}", out.join(RESULTS_FILE).display()))?;
        for (inst, case) in self.instances.iter().zip(&cases) {
            if done.contains_key(&inst.id) {
                continue;
            }
            let Some(result) = ran.get(inst.id.as_str()) else {
                continue;
            };
            let ws = case.workspace.clone().unwrap_or_default();
            let run_dir = rundir::runs_in_workspace(&ws).join(&inst.run_id);
            let skip = run_files(&run_dir, &ws);
            let git_dir = git_dirs.join(format!("{}.git", inst.run_id));
            let (patch, patch_cut, patch_error) = match patch(&ws, &git_dir, &skip) {
                Ok((p, cut)) => (p, cut, None),
                Err(e) => (String::new(), false, Some(e)),
            };
            let (tests, tests_error) = if inst.test_commands.is_empty() {
                (Vec::new(), None)
            } else {
                match run_tests(inst, &ws, &site).await {
                    Ok(t) => (t, None),
                    Err(e) => (Vec::new(), Some(e)),
                }
            };
            let resolved = (!tests.is_empty()).then(|| tests.iter().all(|t| t.passed));
            let line = InstanceResult {
                instance_id: inst.id.clone(),
                run_id: inst.run_id.clone(),
                exit: result.exit.clone(),
                exit_code: result.exit_code,
                reason: result.reason.clone(),
                patch,
                patch_cut,
                patch_error,
                resolved,
                tests,
                tests_error,
                cost_usd: result.cost_usd,
                llm_calls: result.llm_calls,
                steps: result.steps,
                latency_sec: result.latency_sec,
                workspace: ws,
            };
            let text = serde_json::to_string(&line).unwrap_or_default();
            writeln!(file, "{text}")
                .and_then(|()| file.flush())
                .map_err(|e| format!("cannot write {RESULTS_FILE}: {e}"))?;
            done.insert(inst.id.clone(), line);
        }
        let results: Vec<InstanceResult> = self
            .instances
            .iter()
            .filter_map(|i| done.get(&i.id).cloned())
            .collect();
        super::write_jsonl(&out.join(RESULTS_FILE), &results)?;
        let model = self
            .setup
            .model
            .clone()
            .or_else(|| self.setup.provider.clone())
            .unwrap_or_else(|| "rondo".into());
        let preds: BTreeMap<&str, Value> = results
            .iter()
            .map(|r| {
                (
                    r.instance_id.as_str(),
                    serde_json::json!({
                        "model_name_or_path": model,
                        "instance_id": r.instance_id,
                        "model_patch": r.patch,
                    }),
                )
            })
            .collect();
        let preds_text = serde_json::to_string_pretty(&preds).unwrap_or_default();
        rundir::write_atomic(&out.join(PREDS_FILE), preds_text.as_bytes())
            .map_err(|e| format!("cannot write {PREDS_FILE}: {e}"))?;
        let summary = Summary::of(&results);
        let summary_text = serde_json::to_string_pretty(&summary).unwrap_or_default();
        rundir::write_atomic(&out.join(REPORT_FILE), summary_text.as_bytes())
            .map_err(|e| format!("cannot write {REPORT_FILE}: {e}"))?;
        Ok(Report {
            unfinished: self.instances.len() - results.len(),
            results,
            summary,
        })
    }
}

/// The results as the terminal shows them: one row an instance, then the totals.
pub fn render_table(report: &Report) -> String {
    let mut out = format!(
        "{:<28} {:<14} {:>6} {:<10} {:>9}\n",
        "instance", "exit", "patch", "resolved", "cost"
    );
    for r in &report.results {
        let resolved = match r.resolved {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let lines = r.patch.lines().count();
        out.push_str(&format!(
            "{:<28} {:<14} {:>6} {:<10} {:>9.4}\n",
            r.instance_id, r.exit, lines, resolved, r.cost_usd
        ));
    }
    let s = &report.summary;
    out.push_str(&format!(
        "\n{} resolved of {} ({:.1}%), {} unresolved, {} not tested; {} with a patch; cost ${:.4}",
        s.resolved,
        s.n,
        s.resolve_rate * 100.0,
        s.unresolved,
        s.not_tested,
        s.with_patch,
        s.cost_usd
    ));
    if report.unfinished > 0 {
        out.push_str(&format!(
            "; {} unfinished (continue with --resume)",
            report.unfinished
        ));
    }
    out.push('\n');
    out
}
