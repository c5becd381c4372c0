//! `rondo swebench`: SWE-bench on `rondo eval`'s machinery. Each instance's repository is
//! copied into its own git workspace (from a folder of this machine, or out of the
//! instance's image, SWE-bench's `/testbed`), the agent workflow runs there with
//! `--workspace` (one container per run), the patch is that workspace's `git diff` against
//! the base commit, and the patch is then evaluated as SWE-bench's harness evaluates it
//! ([`harness`]): a fresh container, the test patch, each test's status from the log.
//! `--predictions` evaluates patches made elsewhere, with no agent.

pub mod harness;
pub mod log_parsers;
pub mod parquet_rows;

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
use harness::{InstanceReport, Outcome, Target};
use log_parsers::Parser;

pub const SETUP_FILE: &str = "swebench.json";
pub const RESULTS_FILE: &str = "results.jsonl";
pub const REPORT_FILE: &str = "report.json";
pub const PREDS_FILE: &str = "preds.json";
pub const WORKSPACES_DIR: &str = "workspaces";
/// Each instance's evaluation: `eval/<run-id>/` (patches, test log, the harness's report).
pub const EVAL_DIR: &str = "eval";
/// The git directories the patches are taken with, out of every container's reach.
pub const GIT_DIR: &str = "git";
/// The workflow input that receives the problem statement.
pub const TASK_INPUT: &str = "task";
/// The workflow input that, when the workflow has it, receives where the repository is in
/// the container (`/testbed` for an instance whose repository is its image's).
pub const REPO_INPUT: &str = "repo_dir";
/// The workflow input that receives the instance's reproduction script (`--reproductions`).
pub const REPRODUCTION_INPUT: &str = "reproduction_script";
/// The workflow input that says where the reproduction script is, relative to the
/// repository: that file is left out of the patch.
pub const REPRODUCTION_FILE_INPUT: &str = "reproduction_file";
/// Where SWE-bench's images keep the repository.
pub const TESTBED: &str = "/testbed";

/// A reproduction script longer than this is refused: it reaches the container as one
/// command-line argument, which Linux limits to 128 KiB.
const MAX_REPRODUCTION: u64 = 120 << 10;
/// A patch longer than this is cut (and the result says so).
const MAX_PATCH: usize = 4 << 20;
/// The tests of one evaluation get this long unless `--eval-timeout` says otherwise (the
/// harness's default).
pub const DEFAULT_EVAL_TIMEOUT_SEC: u64 = 1800;

/// The fields of an instance: SWE-bench's, and Rondo's (`image`, `test_commands`,
/// `log_parser`, `split`, `subset`).
const FIELDS: &[&str] = &[
    "instance_id",
    "repo",
    "image",
    "problem_statement",
    "test_commands",
    "base_commit",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "log_parser",
    "split",
    "subset",
];
const IGNORED: &[&str] = &[
    "patch",
    "hints_text",
    "created_at",
    "version",
    "environment_setup_commit",
    "difficulty",
];
const INSTANCE_HELP: &str = "an instance is one JSON object a line, SWE-bench's row: {\"instance_id\": \"...\", \"repo\": \"owner/name (in the image at /testbed), or a folder relative to the dataset\", \"base_commit\": \"...\", \"problem_statement\": \"...\", \"test_patch\": \"diff ...\", \"FAIL_TO_PASS\": \"[\\\"test ...\\\"]\", \"PASS_TO_PASS\": \"[...]\", \"image\": \"optional\", \"test_commands\": [\"optional\"], \"log_parser\": \"pytest|unittest|django|sympy\"}";

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
    /// `--predictions FILE`: evaluate these patches; no agent runs.
    #[serde(default)]
    pub predictions: Option<PathBuf>,
    /// `--image TEMPLATE`: the image of an instance without one (`{id}` is its id).
    #[serde(default)]
    pub image: Option<String>,
    /// `--build DIR`: a missing image is built from `DIR/<id>/Dockerfile`.
    #[serde(default)]
    pub build: Option<PathBuf>,
    /// Seconds the tests of one evaluation may take.
    #[serde(default = "default_eval_timeout")]
    pub eval_timeout_sec: u64,
    /// `--engine`: where the agents' environments and the evaluations run.
    #[serde(default)]
    pub engine: rondo_env::SandboxEngine,
    /// `--reproductions DIR`: `DIR/<instance id>.py` is the instance's reproduction script,
    /// given to the workflow's `reproduction_script` input.
    #[serde(default)]
    pub reproductions: Option<PathBuf>,
}

fn default_eval_timeout() -> u64 {
    DEFAULT_EVAL_TIMEOUT_SEC
}

/// One line of the dataset.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub run_id: String,
    /// `repo` as the dataset writes it.
    pub repo_name: String,
    /// The repository folder of this machine (absolute); `None`: the repository is in the
    /// image, at `/testbed`.
    pub repo: Option<PathBuf>,
    pub image: Option<String>,
    pub problem_statement: String,
    /// Rondo's: the commands that run the tests, instead of the harness's for the repository.
    pub test_commands: Vec<String>,
    pub base_commit: Option<String>,
    pub test_patch: String,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
    pub log_parser: Parser,
    pub split: Option<String>,
    pub subset: Option<String>,
}

impl Instance {
    /// The shell commands that run its tests: its own, else the harness's for its repository.
    pub fn test_command(&self) -> String {
        if self.test_commands.is_empty() {
            return harness::default_test_command(&self.repo_name, &self.test_patch);
        }
        let mut script = String::from("rc=0\n");
        for c in &self.test_commands {
            script.push_str(&format!("{{ {c}\n}} || rc=$?\n"));
        }
        script.push_str("exit $rc\n");
        script
    }
}

/// The image of an instance: its own, else `--image`'s template with `{id}` its id (and
/// `{hub_id}` the id as SWE-bench's Docker Hub names spell it).
pub fn image_of(inst_image: Option<&str>, template: Option<&str>, id: &str) -> Option<String> {
    inst_image.map(str::to_string).or_else(|| {
        template.map(|t| {
            t.replace("{id}", id)
                .replace("{hub_id}", &id.replace("__", "_1776_").to_lowercase())
        })
    })
}

/// Reads the dataset, JSON Lines or Parquet ([`parquet_rows`]); every problem is located in
/// the file and nothing runs. `image` is
/// `--image`'s template, which lets an instance's repository be the image's own.
pub fn read_instances(
    path: &Path,
    workflow: &Workflow,
    image: Option<&str>,
    needs_task: bool,
) -> Result<Vec<Instance>, Box<Problems>> {
    let file = if parquet_rows::is_parquet(path) {
        parquet_rows::rows_as_jsonl(path)?
    } else {
        read_file(path, Code::SwebenchBadInstance)?
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut diags = Diagnostics::default();
    if needs_task && !workflow.inputs.iter().any(|i| i.name == TASK_INPUT) {
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
    let mut ctx = Ctx {
        base,
        image,
        diags: &mut diags,
        ids: &mut ids,
        run_ids: &mut run_ids,
    };
    for (start, line) in jsonl_lines(&file.text) {
        if let Some(i) = ctx.instance(line, start) {
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

struct Ctx<'a> {
    base: &'a Path,
    image: Option<&'a str>,
    diags: &'a mut Diagnostics,
    ids: &'a mut HashSet<String>,
    run_ids: &'a mut HashSet<String>,
}

impl Ctx<'_> {
    fn instance(&mut self, line: &str, start: usize) -> Option<Instance> {
        let obj = json_object(self.diags, line, start)?;
        let mut r = Reader {
            obj: &obj,
            line,
            start,
            ok: true,
        };
        r.known_fields(self.diags);
        let diags = &mut *self.diags;
        let id = r.text("instance_id", true, diags);
        let repo = r.text("repo", true, diags);
        let problem_statement = r.text("problem_statement", true, diags);
        let own_image = r.text("image", false, diags);
        let base_commit = r.text("base_commit", false, diags);
        let split = r.text("split", false, diags);
        let subset = r.text("subset", false, diags);
        let test_patch = r.text("test_patch", false, diags).unwrap_or_default();
        let parser_name = r.text("log_parser", false, diags);
        let test_commands = r.list("test_commands", diags);
        let fail_to_pass = r.list("FAIL_TO_PASS", diags);
        let pass_to_pass = r.list("PASS_TO_PASS", diags);
        let (id, repo, problem_statement) = (id?, repo?, problem_statement?);
        if !self.ids.insert(id.clone()) {
            bad(
                diags,
                format!("two instances have the id {id:?}"),
                r.at("\"instance_id\""),
                "repeated",
            );
            return None;
        }
        let log_parser = r.log_parser(parser_name.as_deref(), &repo, diags)?;
        if fail_to_pass.is_empty() {
            bad(
                diags,
                "this instance has no `FAIL_TO_PASS` tests: nothing would tell a fix from no fix"
                    .into(),
                r.at("\"FAIL_TO_PASS\""),
                "needs at least one test",
            );
            r.ok = false;
        }
        let image = image_of(own_image.as_deref(), self.image, &id);
        let folder = self.repo_folder(&r, &id, &repo, base_commit.is_some(), image.is_some())?;
        if !r.ok {
            return None;
        }
        Some(Instance {
            run_id: unique_run_id(&id, self.run_ids),
            id,
            repo_name: repo,
            repo: folder,
            image,
            problem_statement,
            test_commands,
            base_commit,
            test_patch,
            fail_to_pass,
            pass_to_pass,
            log_parser,
            split,
            subset,
        })
    }

    /// The repository's folder under the base, when it is one (a git repository if the
    /// instance has a `base_commit`); `Some(None)` when only its image holds it.
    fn repo_folder(
        &mut self,
        r: &Reader<'_>,
        id: &str,
        repo: &str,
        base_commit: bool,
        image: bool,
    ) -> Option<Option<PathBuf>> {
        let diags = &mut *self.diags;
        let repo_path = self.base.join(repo);
        if repo_path.is_dir() {
            if base_commit && !repo_path.join(".git").exists() {
                bad(
                    diags,
                    format!("`base_commit` needs a git repository, and `{repo}` is not one"),
                    r.at("\"base_commit\""),
                    "not a git repository",
                );
                return None;
            }
            return Some(Some(std::fs::canonicalize(&repo_path).unwrap_or(repo_path)));
        }
        if image {
            return Some(None);
        }
        bad(
            diags,
            format!(
                "the repository `{repo}` is not a folder ({}), and no image holds it",
                repo_path.display()
            ),
            r.at(&format!("\"{repo}\"")),
            "no such folder",
        );
        diags.push(
            Diagnostic::error(
                Code::SwebenchBadInstance,
                format!("instance {id:?} has no image to find `{repo}` in at {TESTBED}"),
            )
            .label(r.at(&format!("\"{repo}\"")), "here")
            .help("give the instance an `image`, or the batch `--image 'swebench/sweb.eval.x86_64.{hub_id}:latest'`"),
        );
        None
    }
}

/// A line of the instances file as a JSON object, or `None` (reported).
fn json_object(
    diags: &mut Diagnostics,
    line: &str,
    start: usize,
) -> Option<serde_json::Map<String, Value>> {
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
            Span::new(start, start + line.len()),
            "not an object",
        );
        return None;
    };
    Some(obj)
}

/// An instance's fields read from its line, each problem reported at its place; `ok`
/// turns false at the first one.
struct Reader<'a> {
    obj: &'a serde_json::Map<String, Value>,
    line: &'a str,
    start: usize,
    ok: bool,
}

impl Reader<'_> {
    fn whole(&self) -> Span {
        Span::new(self.start, self.start + self.line.len())
    }

    /// Where `needle` is in the line, or the whole line.
    fn at(&self, needle: &str) -> Span {
        find(self.line, self.start, needle).unwrap_or(self.whole())
    }

    /// Every key is a field of an instance or one SWE-bench has that is ignored.
    fn known_fields(&mut self, diags: &mut Diagnostics) {
        for key in self.obj.keys() {
            if !FIELDS.contains(&key.as_str()) && !IGNORED.contains(&key.as_str()) {
                let span = self.at(&format!("\"{key}\""));
                let hint = did_you_mean(key, FIELDS.iter().copied());
                diags.push(
                    Diagnostic::error(
                        Code::SwebenchBadInstance,
                        format!("`{key}` is not a field of an instance"),
                    )
                    .label(span, "unknown field")
                    .help(hint.unwrap_or_else(|| INSTANCE_HELP.into())),
                );
                self.ok = false;
            }
        }
    }

    /// A non-empty string field; an optional one may be absent, null or blank.
    fn text(&mut self, name: &str, required: bool, diags: &mut Diagnostics) -> Option<String> {
        match self.obj.get(name) {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            None | Some(Value::Null) if !required => None,
            Some(Value::String(_)) if !required => None,
            None => {
                bad(
                    diags,
                    format!("this instance has no `{name}`"),
                    self.whole(),
                    &format!("needs \"{name}\""),
                );
                self.ok = false;
                None
            }
            Some(_) => {
                bad(
                    diags,
                    format!("`{name}` is a non-empty string"),
                    self.at(&format!("\"{name}\"")),
                    "not a string",
                );
                self.ok = false;
                None
            }
        }
    }

    /// A list of strings (empty when absent).
    fn list(&mut self, name: &str, diags: &mut Diagnostics) -> Vec<String> {
        match self.obj.get(name) {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => match list_of_strings(v) {
                Some(l) => l,
                None => {
                    bad(
                        diags,
                        format!(
                            "`{name}` is a list of strings, or one written as a JSON string (as SWE-bench publishes it)"
                        ),
                        self.at(&format!("\"{name}\"")),
                        "not a list of strings",
                    );
                    self.ok = false;
                    Vec::new()
                }
            },
        }
    }

    /// The named log parser, or the repository's.
    fn log_parser(
        &self,
        name: Option<&str>,
        repo: &str,
        diags: &mut Diagnostics,
    ) -> Option<Parser> {
        let Some(name) = name else {
            return Some(Parser::for_repo(repo));
        };
        if let Some(p) = Parser::from_name(name) {
            return Some(p);
        }
        let hint = did_you_mean(name, log_parsers::NAMES.iter().copied());
        diags.push(
            Diagnostic::error(
                Code::SwebenchBadInstance,
                format!("`{name}` is not a log parser"),
            )
            .label(self.at(&format!("\"{name}\"")), "unknown")
            .help(hint.unwrap_or_else(|| format!("one of {}", log_parsers::NAMES.join(", ")))),
        );
        None
    }
}

/// A list of strings, or one JSON-encoded in a string (SWE-bench's `FAIL_TO_PASS`); a lone
/// string that is not a JSON list is a list of one.
fn list_of_strings(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect(),
        Value::String(s) if s.trim_start().starts_with('[') => {
            serde_json::from_str::<Vec<String>>(s).ok()
        }
        Value::String(s) => Some(vec![s.clone()]),
        _ => None,
    }
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
    /// The agent run's exit (`prediction` when the patch came from `--predictions`).
    pub exit: String,
    pub exit_code: i32,
    pub reason: String,
    /// The `git diff` of the workspace against its base commit, the run's own files left
    /// out; or the prediction's `model_patch` (`null` there is `patch_is_None`).
    pub patch: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub patch_cut: bool,
    /// Why no patch could be taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_error: Option<String>,
    /// The harness's report of the instance.
    pub report: InstanceReport,
    /// The tests ran and were graded: `report.resolved`; `null` for an empty patch or an
    /// evaluation that ended in an error.
    pub resolved: Option<bool>,
    /// Why the evaluation gave no verdict: the patch did not apply, the tests timed out...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_error: Option<String>,
    /// Why tests that ran gave no verdict (no test status in their log): unresolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_note: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval_timed_out: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_exit_code: Option<i64>,
    /// Wall time of the evaluation.
    pub eval_sec: f64,
    /// `OUT/eval/<run-id>`: its patches, test log and report.
    pub eval_dir: PathBuf,
    pub cost_usd: f64,
    pub llm_calls: u64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    pub steps: u64,
    /// Wall time of the agent's run.
    pub latency_sec: f64,
    /// The instance's repository as the agent left it; its run is in `.rondo/runs/<run_id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
}

impl InstanceResult {
    fn empty_patch(&self) -> bool {
        self.report.patch_is_none || !self.report.patch_exists
    }
}

/// Rondo's figures of one instance in `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spend {
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub agent_sec: f64,
    pub eval_sec: f64,
}

/// `report.json`: the harness's run report (its field names and counts), then Rondo's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub total_instances: usize,
    pub submitted_instances: usize,
    pub completed_instances: usize,
    pub resolved_instances: usize,
    pub unresolved_instances: usize,
    pub empty_patch_instances: usize,
    pub error_instances: usize,
    pub completed_ids: Vec<String>,
    pub incomplete_ids: Vec<String>,
    pub empty_patch_ids: Vec<String>,
    pub submitted_ids: Vec<String>,
    pub resolved_ids: Vec<String>,
    pub unresolved_ids: Vec<String>,
    pub error_ids: Vec<String>,
    pub schema_version: u32,
    /// resolved / total.
    pub resolve_rate: f64,
    pub cost_usd: f64,
    pub avg_cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// By instance id.
    pub instances: BTreeMap<String, Spend>,
}

impl Summary {
    /// The harness's counts over the selected instances `ids`: one without a result is
    /// incomplete, an empty patch is not evaluated, an evaluation that gave no verdict
    /// (the patch did not apply, the tests timed out) is an error.
    pub fn of(ids: &[String], results: &[InstanceResult]) -> Summary {
        let by_id: BTreeMap<&str, &InstanceResult> = results
            .iter()
            .map(|r| (r.instance_id.as_str(), r))
            .collect();
        let mut s = Summary {
            total_instances: ids.len(),
            submitted_instances: 0,
            completed_instances: 0,
            resolved_instances: 0,
            unresolved_instances: 0,
            empty_patch_instances: 0,
            error_instances: 0,
            completed_ids: Vec::new(),
            incomplete_ids: Vec::new(),
            empty_patch_ids: Vec::new(),
            submitted_ids: Vec::new(),
            resolved_ids: Vec::new(),
            unresolved_ids: Vec::new(),
            error_ids: Vec::new(),
            schema_version: 2,
            resolve_rate: 0.0,
            cost_usd: 0.0,
            avg_cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
            instances: BTreeMap::new(),
        };
        for id in ids {
            let Some(r) = by_id.get(id.as_str()) else {
                s.incomplete_ids.push(id.clone());
                continue;
            };
            s.submitted_ids.push(id.clone());
            s.cost_usd += r.cost_usd;
            s.input_tokens += r.input_tokens;
            s.output_tokens += r.output_tokens;
            s.instances.insert(
                id.clone(),
                Spend {
                    cost_usd: r.cost_usd,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    agent_sec: r.latency_sec,
                    eval_sec: r.eval_sec,
                },
            );
            if r.empty_patch() {
                s.empty_patch_ids.push(id.clone());
            } else if r.eval_error.is_some() {
                s.error_ids.push(id.clone());
            } else {
                s.completed_ids.push(id.clone());
                if r.report.resolved {
                    s.resolved_ids.push(id.clone());
                } else {
                    s.unresolved_ids.push(id.clone());
                }
            }
        }
        for list in [
            &mut s.completed_ids,
            &mut s.incomplete_ids,
            &mut s.empty_patch_ids,
            &mut s.submitted_ids,
            &mut s.resolved_ids,
            &mut s.unresolved_ids,
            &mut s.error_ids,
        ] {
            list.sort();
        }
        s.submitted_instances = s.submitted_ids.len();
        s.completed_instances = s.completed_ids.len();
        s.resolved_instances = s.resolved_ids.len();
        s.unresolved_instances = s.unresolved_ids.len();
        s.empty_patch_instances = s.empty_patch_ids.len();
        s.error_instances = s.error_ids.len();
        let n = ids.len();
        if n > 0 {
            s.resolve_rate = s.resolved_instances as f64 / n as f64;
        }
        if s.submitted_instances > 0 {
            s.avg_cost_usd = s.cost_usd / s.submitted_instances as f64;
        }
        s
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
    /// Ctrl-C or SIGTERM stopped the batch.
    pub interrupted: bool,
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
    match &instance.repo {
        Some(repo) if repo.join(".git").exists() => {
            let name = tmp.to_string_lossy().into_owned();
            let repo = repo.to_string_lossy().into_owned();
            git(cwd, &["clone", "-q", "--no-hardlinks", &repo, &name])?;
            if let Some(commit) = &instance.base_commit {
                git(&tmp, &["checkout", "-q", "--detach", commit])?;
            }
        }
        Some(repo) => {
            copy_dir(repo, &tmp)?;
            git(&tmp, &["init", "-q"])?;
            git(&tmp, &["add", "-A"])?;
            git(&tmp, &["commit", "-q", "--allow-empty", "-m", "base"])?;
        }
        None => {
            let image = instance
                .image
                .as_deref()
                .ok_or_else(|| format!("{}: no image holds its repository", instance.id))?;
            copy_out_of_image(
                image,
                TESTBED,
                &tmp,
                &dir.parent()
                    .and_then(Path::parent)
                    .unwrap_or(Path::new(""))
                    .to_string_lossy(),
            )?;
            if !tmp.join(".git").exists() {
                git(&tmp, &["init", "-q"])?;
                git(&tmp, &["add", "-A"])?;
                git(&tmp, &["commit", "-q", "--allow-empty", "-m", "base"])?;
            } else {
                // The image's /testbed is at the base commit already, with the changes its
                // build made to tracked files (SWE-bench's pre-install steps); those stay,
                // committed, so the agent's patch leaves them out as the harness expects.
                if let Some(commit) = &instance.base_commit {
                    let head = git(&tmp, &["rev-parse", "HEAD"])?;
                    let want = git(&tmp, &["rev-parse", &format!("{commit}^{{commit}}")])?;
                    if head.trim() != want.trim() {
                        git(&tmp, &["checkout", "-q", "-f", "--detach", commit])?;
                    }
                }
                if !git(&tmp, &["status", "--porcelain"])?.trim().is_empty() {
                    git(&tmp, &["add", "-A"])?;
                    git(&tmp, &["commit", "-q", "-m", "the image's own changes"])?;
                }
            }
        }
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

/// `image` in the local engine: there already, or built from `dir/Dockerfile` when that
/// exists (no registry is asked).
pub fn ensure_image(image: &str, dir: &Path) -> Result<(), String> {
    let present = std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .output()
        .is_ok_and(|o| o.status.success());
    if present || !dir.join("Dockerfile").is_file() {
        return Ok(());
    }
    let out = std::process::Command::new("docker")
        .args(["build", "-q", "-t", image])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run docker build: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(10).collect();
        return Err(format!(
            "docker build of {image} from {}: {}",
            dir.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from.join("."))
        .arg(to)
        .status()
        .map_err(|e| format!("cannot run cp: {e}"))?;
    if !status.success() {
        return Err(format!("cannot copy {}", from.display()));
    }
    Ok(())
}

/// `path` of `image` (SWE-bench's `/testbed`) copied to the folder `to`, through a
/// container that is created and never started.
fn copy_out_of_image(image: &str, path: &str, to: &Path, batch: &str) -> Result<(), String> {
    let docker = |args: &[&str]| -> Result<String, String> {
        let out = std::process::Command::new("docker")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run docker: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "docker {}: {}",
                args.first().unwrap_or(&""),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let label = format!("rondo.owner_pid={}", std::process::id());
    let id = docker(&[
        "create",
        "--label",
        "rondo.managed=true",
        "--label",
        &label,
        "--label",
        "rondo.role=copy",
        "--label",
        &format!("rondo.batch={batch}"),
        image,
        "true",
    ])
    .map_err(|e| format!("image `{image}`: {e}"))?;
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let copied = docker(&[
        "cp",
        &format!("{id}:{}/.", path.trim_end_matches('/')),
        &to.to_string_lossy(),
    ]);
    let _ = docker(&["rm", "-f", &id]);
    copied
        .map(|_| ())
        .map_err(|e| format!("{path} of `{image}`: {e}"))
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

/// The predictions of a file as SWE-bench's harness reads them: a JSON list or object of
/// `{instance_id, model_name_or_path, model_patch}`, or JSON Lines of them. A
/// `model_patch` of `null` is kept as `None` (`patch_is_None`).
pub fn read_predictions(path: &Path) -> Result<BTreeMap<String, Option<String>>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let items: Vec<Value> =
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => items,
            Ok(Value::Object(map)) if map.contains_key("instance_id") => vec![Value::Object(map)],
            Ok(Value::Object(map)) => map.into_iter().map(|(_, v)| v).collect(),
            Ok(_) => return Err(format!("{}: not a list of predictions", path.display())),
            Err(_) => {
                let mut items = Vec::new();
                for (n, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    items.push(serde_json::from_str(line).map_err(|e| {
                        format!("{}:{}: not a prediction: {e}", path.display(), n + 1)
                    })?);
                }
                items
            }
        };
    let mut preds = BTreeMap::new();
    for (n, item) in items.iter().enumerate() {
        let id = item
            .get("instance_id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!(
                    "{}: prediction {} has no `instance_id`",
                    path.display(),
                    n + 1
                )
            })?;
        let patch = match item.get("model_patch") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) => Some(p.clone()),
            Some(_) => {
                return Err(format!(
                    "{}: the `model_patch` of {id} is not a string",
                    path.display()
                ));
            }
        };
        preds.insert(id.to_string(), patch);
    }
    Ok(preds)
}

/// An instance's patch and what made it, before its evaluation.
struct Submitted {
    index: usize,
    exit: String,
    exit_code: i32,
    reason: String,
    patch: Option<String>,
    patch_cut: bool,
    patch_error: Option<String>,
    cost_usd: f64,
    llm_calls: u64,
    input_tokens: u64,
    output_tokens: u64,
    steps: u64,
    latency_sec: f64,
    workspace: Option<PathBuf>,
}

/// Ctrl-C / SIGTERM for the evaluations: the first stops them (each container removed),
/// the next ends the process at once.
#[derive(Default)]
pub struct StopFlag {
    pub stopping: std::sync::atomic::AtomicBool,
    pub notify: tokio::sync::Notify,
}

impl StopFlag {
    pub fn stopped(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.stopped() {
                return;
            }
            notified.await;
        }
    }
}

impl Swebench {
    /// The instance's reproduction script, `--reproductions DIR/<id>.py`, when the workflow
    /// takes one; `None` when there is none (the agent writes its own).
    fn reproduction_of(&self, inst: &Instance) -> Result<Option<String>, String> {
        let Some(dir) = &self.setup.reproductions else {
            return Ok(None);
        };
        if !self
            .workflow
            .inputs
            .iter()
            .any(|i| i.name == REPRODUCTION_INPUT)
        {
            return Ok(None);
        }
        let path = dir.join(format!("{}.py", inst.id));
        match std::fs::metadata(&path) {
            Err(_) => Ok(None),
            Ok(m) if m.len() > MAX_REPRODUCTION => Err(format!(
                "{}: a reproduction script is at most {} KiB (it is passed as one argument)",
                path.display(),
                MAX_REPRODUCTION >> 10
            )),
            Ok(_) => std::fs::read_to_string(&path)
                .map(Some)
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
        }
    }

    /// The reproduction script of the workspace (the one written for the agent, or the one it
    /// wrote), to leave out of the patch: the workflow's `reproduction_file`, when the base
    /// commit has no file of that name.
    fn reproduction_file(&self, workspace: &Path, git_dir: &Path) -> Option<String> {
        let input = self
            .workflow
            .inputs
            .iter()
            .find(|i| i.name == REPRODUCTION_FILE_INPUT)?;
        let name = input.default.as_ref()?.as_str()?.trim_start_matches("./");
        if name.is_empty() || Path::new(name).is_absolute() || name.split('/').any(|c| c == "..") {
            return None;
        }
        let in_base = git(
            workspace,
            &[
                &format!("--git-dir={}", git_dir.display()),
                "cat-file",
                "-e",
                &format!("HEAD:{name}"),
            ],
        )
        .is_ok();
        (!in_base).then(|| name.to_string())
    }

    fn target(&self, inst: &Instance, site: &TestSite, git_dir: &Path) -> Result<Target, String> {
        let image = inst.image.clone().or_else(|| site.image.clone()).ok_or(
            "no image to evaluate in: give the instance an `image`, the batch `--image`, or the workflow a Docker environment",
        )?;
        let host = inst.repo.is_some();
        Ok(Target {
            engine: self.setup.engine,
            instance_id: inst.id.clone(),
            run_id: inst.run_id.clone(),
            image,
            workdir: if host {
                site.path.clone()
            } else {
                TESTBED.into()
            },
            host_git_dir: host.then(|| git_dir.to_path_buf()),
            replace: site.replace,
            env: if host {
                site.env.clone()
            } else {
                BTreeMap::new()
            },
            base_commit: if host { None } else { inst.base_commit.clone() },
            test_patch: inst.test_patch.clone(),
            test_command: inst.test_command(),
            parser: inst.log_parser,
            fail_to_pass: inst.fail_to_pass.clone(),
            pass_to_pass: inst.pass_to_pass.clone(),
        })
    }

    /// Runs the agent on every instance without a result (as `rondo eval` runs its cases)
    /// and takes each patch, or takes them from `--predictions`; then evaluates each patch
    /// as SWE-bench's harness does, `concurrency` at a time.
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
        self.build_images(&done)?;
        // Every container of the batch is labelled with its folder; what a crashed batch of
        // this folder left, and any container whose rondo process is gone, is removed.
        let batch = out.to_string_lossy().into_owned();
        rondo_env::set_batch_label(&batch);
        let docker = rondo_env::connect().await.ok();
        if let Some(docker) = &docker {
            let _ = rondo_env::remove_batch(docker, &batch).await;
            let _ = rondo_env::cleanup_stale(docker).await;
        }
        let stop = Arc::new(StopFlag::default());
        let watcher = tokio::spawn(watch_signals(stop.clone()));
        let submitted = match &self.setup.predictions {
            Some(path) => self.predicted(path, &out, &done)?,
            None => self.agents(&out, &done, &stop).await?,
        };
        self.evaluate_all(submitted, &out, &stop, &mut done).await?;
        watcher.abort();
        if stop.stopped()
            && let Some(docker) = &docker
        {
            let _ = rondo_env::remove_batch(docker, &batch).await;
        }
        let results: Vec<InstanceResult> = self
            .instances
            .iter()
            .filter_map(|i| done.get(&i.id).cloned())
            .collect();
        super::write_jsonl(&out.join(RESULTS_FILE), &results)?;
        if self.setup.predictions.is_none() {
            self.write_predictions(&out, &results)?;
        }
        let ids: Vec<String> = self.instances.iter().map(|i| i.id.clone()).collect();
        let summary = Summary::of(&ids, &results);
        let summary_text = serde_json::to_string_pretty(&summary).unwrap_or_default();
        rundir::write_atomic(&out.join(REPORT_FILE), summary_text.as_bytes())
            .map_err(|e| format!("cannot write {REPORT_FILE}: {e}"))?;
        Ok(Report {
            unfinished: self.instances.len() - results.len(),
            results,
            summary,
            interrupted: stop.stopped(),
        })
    }

    /// With `--build`, each instance left to evaluate has its image built when missing.
    fn build_images(&self, done: &BTreeMap<String, InstanceResult>) -> Result<(), String> {
        let Some(build) = &self.setup.build else {
            return Ok(());
        };
        for inst in &self.instances {
            if let Some(image) = &inst.image
                && !done.contains_key(&inst.id)
            {
                ensure_image(image, &build.join(&inst.id))?;
            }
        }
        Ok(())
    }

    /// `--predictions`: each instance without a result takes its patch from the file (its
    /// repository prepared when it has one); an instance the file lacks is left out.
    fn predicted(
        &self,
        path: &Path,
        out: &Path,
        done: &BTreeMap<String, InstanceResult>,
    ) -> Result<Vec<Submitted>, String> {
        let workspaces = out.join(WORKSPACES_DIR);
        let preds = read_predictions(path)?;
        let mut submitted = Vec::new();
        for (index, inst) in self.instances.iter().enumerate() {
            if done.contains_key(&inst.id) {
                continue;
            }
            let Some(patch) = preds.get(&inst.id) else {
                continue;
            };
            if inst.repo.is_some() {
                prepare(inst, &workspaces.join(&inst.run_id), &git_dir_of(out, inst))?;
            }
            submitted.push(Submitted {
                index,
                exit: "prediction".into(),
                exit_code: 0,
                reason: format!("from {}", path.display()),
                patch: patch.clone(),
                patch_cut: false,
                patch_error: None,
                cost_usd: 0.0,
                llm_calls: 0,
                input_tokens: 0,
                output_tokens: 0,
                steps: 0,
                latency_sec: 0.0,
                workspace: None,
            });
        }
        Ok(submitted)
    }

    /// Evaluates each submitted patch, `concurrency` at a time until `stop`; each result
    /// is appended to the results file as it comes and put in `done`.
    async fn evaluate_all(
        &self,
        submitted: Vec<Submitted>,
        out: &Path,
        stop: &Arc<StopFlag>,
        done: &mut BTreeMap<String, InstanceResult>,
    ) -> Result<(), String> {
        let site = test_site(&self.workflow);
        let limit = Duration::from_secs(self.setup.eval_timeout_sec.max(1));
        let permits = Arc::new(tokio::sync::Semaphore::new(self.setup.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<InstanceResult>();
        let quiet = self.progress == progress::Mode::Quiet;
        for sub in submitted {
            let inst = &self.instances[sub.index];
            let dir = out.join(EVAL_DIR).join(&inst.run_id);
            let target = self.target(inst, &site, &git_dir_of(out, inst));
            let (permits, stop, tx) = (permits.clone(), stop.clone(), tx.clone());
            tasks.spawn(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return;
                };
                if stop.stopped() {
                    return;
                }
                if let Some(outcome) = evaluate_one(&target, &sub, dir, limit, &stop).await {
                    let _ = tx.send(result_line(sub, outcome));
                }
            });
        }
        drop(tx);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.join(RESULTS_FILE))
            .map_err(|e| format!("cannot open {}: {e}", out.join(RESULTS_FILE).display()))?;
        while let Some(mut line) = rx.recv().await {
            let inst = self
                .instances
                .iter()
                .find(|i| i.run_id == line.run_id)
                .map(|i| i.id.clone())
                .unwrap_or_default();
            line.instance_id = inst;
            if !quiet {
                let _ = writeln!(std::io::stderr(), "{}", progress_line(&line));
            }
            let text = serde_json::to_string(&line).unwrap_or_default();
            writeln!(file, "{text}")
                .and_then(|()| file.flush())
                .map_err(|e| format!("cannot write {RESULTS_FILE}: {e}"))?;
            done.insert(line.instance_id.clone(), line);
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// `preds.json` in SWE-bench's form: one `model_patch` (null for none) per instance.
    fn write_predictions(&self, out: &Path, results: &[InstanceResult]) -> Result<(), String> {
        let model = self
            .setup
            .model
            .clone()
            .or_else(|| self.setup.provider.clone())
            .unwrap_or_else(|| "rondo".into());
        let preds: BTreeMap<&str, Value> = results
            .iter()
            .map(|r| {
                let patch = if r.report.patch_is_none {
                    Value::Null
                } else {
                    Value::String(r.patch.clone())
                };
                (
                    r.instance_id.as_str(),
                    serde_json::json!({
                        "model_name_or_path": model,
                        "instance_id": r.instance_id,
                        "model_patch": patch,
                    }),
                )
            })
            .collect();
        let preds_text = serde_json::to_string_pretty(&preds).unwrap_or_default();
        rundir::write_atomic(&out.join(PREDS_FILE), preds_text.as_bytes())
            .map_err(|e| format!("cannot write {PREDS_FILE}: {e}"))
    }

    /// The agent's part: a workspace each, the runs, then each finished run's patch.
    async fn agents(
        &self,
        out: &Path,
        done: &BTreeMap<String, InstanceResult>,
        stop: &StopFlag,
    ) -> Result<Vec<Submitted>, String> {
        let workspaces = out.join(WORKSPACES_DIR);
        let git_dirs = out.join(GIT_DIR);
        let mut cases = Vec::new();
        for inst in &self.instances {
            let ws = workspaces.join(&inst.run_id);
            if !done.contains_key(&inst.id) {
                prepare(inst, &ws, &git_dirs.join(format!("{}.git", inst.run_id)))?;
            }
            let mut inputs = vec![(TASK_INPUT.to_string(), inst.problem_statement.clone())];
            if inst.repo.is_none() && self.workflow.inputs.iter().any(|i| i.name == REPO_INPUT) {
                inputs.push((REPO_INPUT.to_string(), TESTBED.to_string()));
            }
            if let Some(script) = self.reproduction_of(inst)? {
                inputs.push((REPRODUCTION_INPUT.to_string(), script));
            }
            cases.push(Case {
                id: inst.id.clone(),
                run_id: inst.run_id.clone(),
                inputs,
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
                engine: self.setup.engine,
            },
            out: out.to_path_buf(),
            progress: self.progress,
            no_demos: false,
        };
        let report = eval.run().await?;
        let ran: BTreeMap<&str, &CaseResult> =
            report.results.iter().map(|r| (r.id.as_str(), r)).collect();
        let mut submitted = Vec::new();
        for (index, (inst, case)) in self.instances.iter().zip(&cases).enumerate() {
            if done.contains_key(&inst.id) || stop.stopped() {
                continue;
            }
            let Some(result) = ran.get(inst.id.as_str()) else {
                continue;
            };
            let ws = case.workspace.clone().unwrap_or_default();
            let run_dir = rundir::runs_in_workspace(&ws).join(&inst.run_id);
            let mut skip = run_files(&run_dir, &ws);
            skip.extend(
                self.reproduction_file(&ws, &git_dirs.join(format!("{}.git", inst.run_id))),
            );
            let git_dir = git_dirs.join(format!("{}.git", inst.run_id));
            let (patch, patch_cut, patch_error) = match patch(&ws, &git_dir, &skip) {
                Ok((p, cut)) => (p, cut, None),
                Err(e) => (String::new(), false, Some(e)),
            };
            let totals = rundir::read_state(&run_dir, &self.workflow)
                .map(|s| s.totals)
                .unwrap_or_default();
            submitted.push(Submitted {
                index,
                exit: result.exit.clone(),
                exit_code: result.exit_code,
                reason: result.reason.clone(),
                patch: Some(patch),
                patch_cut,
                patch_error,
                cost_usd: result.cost_usd,
                llm_calls: result.llm_calls,
                input_tokens: totals.input_tokens,
                output_tokens: totals.output_tokens,
                steps: result.steps,
                latency_sec: result.latency_sec,
                workspace: Some(ws),
            });
        }
        Ok(submitted)
    }
}

/// The bare git folder of an instance's repository in the batch's folder.
fn git_dir_of(out: &Path, inst: &Instance) -> PathBuf {
    out.join(GIT_DIR).join(format!("{}.git", inst.run_id))
}

/// One patch evaluated in its target, or the outcome of a target that could not be made;
/// `None` when `stop` came first (the evaluation's container then removed).
async fn evaluate_one(
    target: &Result<Target, String>,
    sub: &Submitted,
    dir: PathBuf,
    limit: Duration,
    stop: &StopFlag,
) -> Option<Outcome> {
    match target {
        Ok(target) => {
            let run = harness::evaluate(target, sub.patch.as_deref(), &dir, limit);
            tokio::select! {
                o = run => Some(o),
                () = stop.wait() => {
                    // Dropping the evaluation drops its container; make sure.
                    if let Ok(docker) = rondo_env::connect().await {
                        let _ = rondo_env::remove_run(&docker, &format!("{}-eval", target.run_id)).await;
                    }
                    None
                }
            }
        }
        Err(e) => Some(Outcome {
            report: harness::not_evaluated(sub.patch.as_deref()).unwrap_or(InstanceReport {
                patch_exists: true,
                ..Default::default()
            }),
            error: Some(e.clone()),
            note: None,
            timed_out: false,
            test_exit_code: None,
            eval_sec: 0.0,
            dir,
        }),
    }
}

fn result_line(sub: Submitted, outcome: Outcome) -> InstanceResult {
    let completed = outcome.completed();
    InstanceResult {
        instance_id: String::new(),
        run_id: outcome
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        exit: sub.exit,
        exit_code: sub.exit_code,
        reason: sub.reason,
        patch: sub.patch.unwrap_or_default(),
        patch_cut: sub.patch_cut,
        patch_error: sub.patch_error,
        resolved: completed.then_some(outcome.report.resolved),
        report: outcome.report,
        eval_error: outcome.error,
        eval_note: outcome.note,
        eval_timed_out: outcome.timed_out,
        test_exit_code: outcome.test_exit_code,
        eval_sec: outcome.eval_sec,
        eval_dir: outcome.dir,
        cost_usd: sub.cost_usd,
        llm_calls: sub.llm_calls,
        input_tokens: sub.input_tokens,
        output_tokens: sub.output_tokens,
        steps: sub.steps,
        latency_sec: sub.latency_sec,
        workspace: sub.workspace,
    }
}

fn progress_line(r: &InstanceResult) -> String {
    let verdict = match (&r.eval_error, r.resolved) {
        _ if r.report.patch_is_none || !r.report.patch_exists => "empty patch".to_string(),
        (Some(e), _) => format!("error: {}", e.lines().next().unwrap_or_default()),
        (None, Some(true)) => "resolved".into(),
        _ => "unresolved".into(),
    };
    format!(
        "evaluated {}: {verdict} ({:.1}s)",
        r.instance_id, r.eval_sec
    )
}

/// The first Ctrl-C or SIGTERM stops the batch; the next one ends the process now, after
/// removing this process's containers.
async fn watch_signals(stop: Arc<StopFlag>) {
    while super::batch::interrupted().await {
        if stop.stopped() {
            remove_own_containers();
            std::process::exit(130);
        }
        stop.stop();
    }
}

/// Every container this process labelled, removed with the engine's command line (the
/// process is about to end: nothing asynchronous runs after).
pub fn remove_own_containers() {
    let filter = format!("label=rondo.owner_pid={}", std::process::id());
    let Ok(out) = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &filter])
        .output()
    else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .output();
    }
}

/// The results as the terminal shows them: one row an instance, then the harness's counts.
pub fn render_table(report: &Report) -> String {
    let mut out = format!(
        "{:<28} {:<14} {:>6} {:<12} {:>9} {:>8}\n",
        "instance", "exit", "patch", "resolved", "cost", "eval s"
    );
    for r in &report.results {
        let resolved = match (r.resolved, &r.eval_error) {
            _ if r.report.patch_is_none || !r.report.patch_exists => "empty patch",
            (Some(true), _) => "yes",
            (Some(false), _) => "no",
            (None, Some(_)) => "error",
            (None, None) => "-",
        };
        let lines = r.patch.lines().count();
        out.push_str(&format!(
            "{:<28} {:<14} {:>6} {:<12} {:>9.4} {:>8.1}\n",
            r.instance_id, r.exit, lines, resolved, r.cost_usd, r.eval_sec
        ));
    }
    let s = &report.summary;
    out.push_str(&format!(
        "\n{} resolved of {} ({:.1}%), {} unresolved, {} empty patches, {} errors; {} submitted, {} completed; cost ${:.4}",
        s.resolved_instances,
        s.total_instances,
        s.resolve_rate * 100.0,
        s.unresolved_instances,
        s.empty_patch_instances,
        s.error_instances,
        s.submitted_instances,
        s.completed_instances,
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
