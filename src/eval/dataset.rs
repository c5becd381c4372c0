//! The dataset (JSON Lines, one case a line) and the rubrics (YAML): read and checked
//! against the workflow before anything runs, every problem located in its file.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::compile::{Expr, Workflow};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, did_you_mean};
use crate::source::{SourceFile, Span};

/// One case: a run's inputs and what its result must show.
#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    /// The run's id (a plain folder name made from `id`, unique in the dataset).
    pub run_id: String,
    /// `--input name=value` pairs: strings as they are, other values as JSON.
    pub inputs: Vec<(String, String)>,
    pub expect: Expect,
    /// `--workspace` of the case's run (its records go to `WORKSPACE/.rondo/runs/`).
    pub workspace: Option<PathBuf>,
    /// [`crate::run::RunOptions::image`] of the case's run.
    pub image: Option<String>,
}

/// What a case expects; absent parts always hold.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    pub contains: Option<String>,
    pub keys: Vec<String>,
    pub tools: Vec<String>,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub text: String,
    pub expr: Expr,
}

/// How the parts of a case weigh in its score (micro-agent's `contains_weight` and
/// `key_weight`, plus tools and checks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub contains: f64,
    pub keys: f64,
    pub tools: f64,
    pub checks: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            contains: 1.0,
            keys: 1.0,
            tools: 1.0,
            checks: 1.0,
        }
    }
}

/// The expectations of a case as written (dataset line or rubrics), before checking.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectSpec {
    pub contains: Option<String>,
    pub keys: Option<Vec<String>>,
    pub tools: Option<Vec<String>>,
    pub checks: Option<Vec<String>>,
}

/// `--rubrics FILE`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rubrics {
    pub contains_weight: Option<f64>,
    pub key_weight: Option<f64>,
    pub tools_weight: Option<f64>,
    pub checks_weight: Option<f64>,
    /// Expectations of every case, field by field, where neither the case nor `cases` says.
    #[serde(default)]
    pub default: ExpectSpec,
    /// Expectations by case id.
    #[serde(default)]
    pub cases: BTreeMap<String, ExpectSpec>,
}

impl Rubrics {
    pub fn weights(&self) -> Weights {
        let d = Weights::default();
        Weights {
            contains: self.contains_weight.unwrap_or(d.contains),
            keys: self.key_weight.unwrap_or(d.keys),
            tools: self.tools_weight.unwrap_or(d.tools),
            checks: self.checks_weight.unwrap_or(d.checks),
        }
    }
}

/// A file's problems, rendered against its text.
pub struct Problems {
    pub file: SourceFile,
    pub diagnostics: Diagnostics,
}

/// Reads `--rubrics FILE`.
pub fn read_rubrics(path: &Path) -> Result<Rubrics, Box<Problems>> {
    let file = read_file(path, Code::EvalBadCase)?;
    let fail = |message: String, span: Span| {
        let mut diagnostics = Diagnostics::default();
        diagnostics.push(
            Diagnostic::error(Code::EvalBadRubrics, message)
                .label(span, "here")
                .help("weights `contains_weight`, `key_weight`, `tools_weight`, `checks_weight`; expectations under `default:` and `cases: {ID: ...}` with `contains`, `keys`, `tools`, `checks`"),
        );
        Box::new(Problems {
            file: file.clone(),
            diagnostics,
        })
    };
    let rubrics: Rubrics = if file.text.trim().is_empty() {
        Rubrics::default()
    } else {
        rondo_config::yaml::from_str(&file.text).map_err(|e| {
            let text = e.to_string();
            let what = text.lines().next().unwrap_or("").to_string();
            fail(
                format!("{} is not a rubrics file: {what}", path.display()),
                Span::new(0, 0),
            )
        })?
    };
    for (key, w) in [
        ("contains_weight", rubrics.contains_weight),
        ("key_weight", rubrics.key_weight),
        ("tools_weight", rubrics.tools_weight),
        ("checks_weight", rubrics.checks_weight),
    ] {
        if let Some(w) = w
            && !(w.is_finite() && w >= 0.0)
        {
            let at = find(&file.text, 0, key).unwrap_or_default();
            return Err(fail(
                format!("`{key}` must be a number of at least 0, not {w}"),
                at,
            ));
        }
    }
    Ok(rubrics)
}

/// The text of a dataset-like file, or its unreadability as a `code` diagnostic.
/// The non-blank lines of a JSON Lines text, each with its byte offset (for diagnostics).
pub(crate) fn jsonl_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive('\n')
        .scan(0, |offset, raw| {
            let start = *offset;
            *offset += raw.len();
            Some((start, raw.trim_end_matches(['\n', '\r'])))
        })
        .filter(|(_, line)| !line.trim().is_empty())
}

pub(crate) fn read_file(path: &Path, code: Code) -> Result<SourceFile, Box<Problems>> {
    SourceFile::read(path).map_err(|e| {
        let mut diagnostics = Diagnostics::default();
        diagnostics.push(
            Diagnostic::error(code, format!("cannot read {}: {e}", path.display()))
                .label(Span::new(0, 0), "unreadable"),
        );
        Box::new(Problems {
            file: SourceFile::new(path, ""),
            diagnostics,
        })
    })
}

/// Reads the dataset and checks every line against the workflow (inputs, tools, checks)
/// and the rubrics: every problem of the file at once, each at its line.
pub fn read_dataset(
    path: &Path,
    workflow: &Workflow,
    rubrics: &Rubrics,
    rubrics_file: Option<&Path>,
) -> Result<Vec<Case>, Box<Problems>> {
    let file = read_file(path, Code::EvalBadCase)?;
    let mut diags = Diagnostics::default();
    let mut cases = Vec::new();
    let mut ids: HashSet<String> = HashSet::new();
    let mut run_ids: HashSet<String> = HashSet::new();
    for (start, line) in jsonl_lines(&file.text) {
        let mut ctx = LineCtx {
            text: line,
            start,
            diags: &mut diags,
        };
        if let Some(case) = ctx.case(workflow, rubrics, rubrics_file, &mut ids, &mut run_ids) {
            cases.push(case);
        }
    }
    if diags.has_errors() {
        return Err(Box::new(Problems {
            file,
            diagnostics: diags,
        }));
    }
    Ok(cases)
}

struct LineCtx<'a> {
    text: &'a str,
    start: usize,
    diags: &'a mut Diagnostics,
}

const CASE_HELP: &str = "a case is one JSON object a line: {\"id\": \"c1\", \"inputs\": {...}, \"expect\": {\"contains\": \"...\", \"keys\": [...], \"tools\": [...], \"checks\": [\"<rondo expression>\"]}}";

impl LineCtx<'_> {
    fn whole(&self) -> Span {
        Span::new(self.start, self.start + self.text.len())
    }

    /// Where `needle` is written on the line (its first place), else the whole line.
    fn at(&self, needle: &str) -> Span {
        find(self.text, self.start, needle).unwrap_or_else(|| self.whole())
    }

    fn bad(&mut self, message: String, span: Span, label: &str) {
        self.diags.push(
            Diagnostic::error(Code::EvalBadCase, message)
                .label(span, label)
                .help(CASE_HELP),
        );
    }

    fn case(
        &mut self,
        workflow: &Workflow,
        rubrics: &Rubrics,
        rubrics_file: Option<&Path>,
        ids: &mut HashSet<String>,
        run_ids: &mut HashSet<String>,
    ) -> Option<Case> {
        let value: Value = match serde_json::from_str(self.text) {
            Ok(v) => v,
            Err(e) => {
                let (message, span) = not_json(&e, self.text, self.start);
                self.bad(message, span, "here");
                return None;
            }
        };
        let Value::Object(obj) = value else {
            self.bad(
                "a case is a JSON object".into(),
                self.whole(),
                "not an object",
            );
            return None;
        };
        let mut ok = self.known_fields(&obj);
        let id = self.case_id(&obj, ids)?;
        let inputs = self.inputs(&obj, workflow, &id);
        let own: ExpectSpec = match obj.get("expect") {
            None | Some(Value::Null) => ExpectSpec::default(),
            Some(v) => match ExpectSpec::deserialize(v) {
                Ok(spec) => spec,
                Err(e) => {
                    let span = self.at("\"expect\"");
                    self.bad(
                        format!("`expect` of case {id:?}: {e}"),
                        span,
                        "not an expectation",
                    );
                    return None;
                }
            },
        };
        let from_rubric = rubrics.cases.get(&id);
        let pick = |f: fn(&ExpectSpec) -> Option<&Vec<String>>| -> Vec<String> {
            f(&own)
                .or_else(|| from_rubric.and_then(f))
                .or_else(|| f(&rubrics.default))
                .cloned()
                .unwrap_or_default()
        };
        let contains = own
            .contains
            .clone()
            .or_else(|| from_rubric.and_then(|r| r.contains.clone()))
            .or_else(|| rubrics.default.contains.clone());
        let keys = pick(|s| s.keys.as_ref());
        let tools = pick(|s| s.tools.as_ref());
        ok &= self.known_tools(workflow, &tools);
        // Checks add up: the rubrics' default ones, the case's in the rubrics, its own.
        let texts = [
            rubrics.default.checks.as_ref(),
            from_rubric.and_then(|r| r.checks.as_ref()),
            own.checks.as_ref(),
        ];
        let (checks, checks_ok) = self.checks(workflow, texts, rubrics_file);
        ok &= checks_ok;
        if !ok || inputs.is_none() {
            return None;
        }
        let run_id = unique_run_id(&id, run_ids);
        Some(Case {
            id,
            run_id,
            inputs: inputs.unwrap_or_default(),
            expect: Expect {
                contains,
                keys,
                tools,
                checks,
            },
            workspace: None,
            image: None,
        })
    }

    /// Whether every field of a case is one a case has; reports each other one.
    fn known_fields(&mut self, obj: &serde_json::Map<String, Value>) -> bool {
        let mut ok = true;
        for key in obj.keys() {
            if !["id", "inputs", "expect"].contains(&key.as_str()) {
                let hint = did_you_mean(key, ["id", "inputs", "expect"]);
                let span = self.at(&format!("\"{key}\""));
                self.diags.push(
                    Diagnostic::error(
                        Code::EvalBadCase,
                        format!("`{key}` is not a field of a case"),
                    )
                    .label(span, "unknown field")
                    .help(hint.unwrap_or_else(|| CASE_HELP.into())),
                );
                ok = false;
            }
        }
        ok
    }

    /// The case's `id`, a string (or a number) no case before it has.
    fn case_id(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        ids: &mut HashSet<String>,
    ) -> Option<String> {
        let id = match obj.get("id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => {
                let span = self.at("\"id\"");
                self.bad(
                    "a case's `id` is a non-empty string".into(),
                    span,
                    "not a string",
                );
                return None;
            }
            None => {
                self.bad("this case has no `id`".into(), self.whole(), "needs \"id\"");
                return None;
            }
        };
        if !ids.insert(id.clone()) {
            let span = self.at("\"id\"");
            self.diags.push(
                Diagnostic::error(Code::EvalBadCase, format!("two cases have the id {id:?}"))
                    .label(span, "id used before")
                    .help("give every case its own id: results and `--resume` go by it"),
            );
            return None;
        }
        Some(id)
    }

    /// Whether every tool a case expects is a tool of the workflow; reports each other one.
    fn known_tools(&mut self, workflow: &Workflow, tools: &[String]) -> bool {
        let mut ok = true;
        for tool in tools {
            if !workflow.tools.iter().any(|t| t.name() == tool) {
                let names: Vec<&str> = workflow.tools.iter().map(|t| t.name()).collect();
                let span = self.at(&format!("\"{tool}\""));
                self.diags.push(
                    Diagnostic::error(
                        Code::EvalBadCase,
                        format!("`{tool}` is not a tool of {}", workflow.name),
                    )
                    .label(span, "unknown tool")
                    .help(
                        did_you_mean(tool, names.iter().copied())
                            .unwrap_or_else(|| format!("its tools: {}", names.join(", "))),
                    ),
                );
                ok = false;
            }
        }
        ok
    }

    /// The checks of a case, compiled, from its lists of `texts`; and whether every one
    /// compiled.
    fn checks(
        &mut self,
        workflow: &Workflow,
        texts: [Option<&Vec<String>>; 3],
        rubrics_file: Option<&Path>,
    ) -> (Vec<Check>, bool) {
        let mut ok = true;
        let mut checks = Vec::new();
        for text in texts.into_iter().flatten().flatten().cloned() {
            match crate::compile::condition_over(workflow, &text) {
                Ok(expr) => checks.push(Check { text, expr }),
                Err(problems) => {
                    ok = false;
                    self.check_problems(&text, problems, rubrics_file);
                }
            }
        }
        (checks, ok)
    }

    /// A check that does not compile: its diagnostics, moved onto the check's text in
    /// the line when it is written there unescaped.
    fn check_problems(&mut self, text: &str, problems: Diagnostics, rubrics_file: Option<&Path>) {
        let quoted = serde_json::to_string(text).unwrap_or_default();
        let base = self
            .text
            .find(&quoted)
            .filter(|_| quoted.len() == text.len() + 2)
            .map(|at| self.start + at + 1);
        for mut d in problems.sorted() {
            d.message = format!("check `{text}`: {}", d.message);
            match base {
                Some(base) => {
                    for label in &mut d.labels {
                        label.span = Span::new(base + label.span.start, base + label.span.end);
                    }
                }
                None => {
                    let detail: Vec<String> = d.labels.iter().map(|l| l.text.clone()).collect();
                    let from = match rubrics_file {
                        Some(r) if !self.text.contains(&quoted) => {
                            format!(" (from {})", r.display())
                        }
                        _ => String::new(),
                    };
                    d.labels = vec![crate::diagnostics::Label {
                        span: self.whole(),
                        text: format!("{}{from}", detail.join("; ")),
                    }];
                }
            }
            self.diags.push(d);
        }
    }

    fn inputs(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        workflow: &Workflow,
        id: &str,
    ) -> Option<Vec<(String, String)>> {
        let given = match obj.get("inputs") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                let span = self.at("\"inputs\"");
                self.bad(
                    format!("`inputs` of case {id:?} is an object of the workflow's inputs"),
                    span,
                    "not an object",
                );
                return None;
            }
        };
        let mut ok = true;
        let mut out = Vec::new();
        for (name, value) in &given {
            let Some(input) = workflow.inputs.iter().find(|i| &i.name == name) else {
                let names: Vec<&str> = workflow.inputs.iter().map(|i| i.name.as_str()).collect();
                let span = self.at(&format!("\"{name}\""));
                self.diags.push(
                    Diagnostic::error(
                        Code::EvalBadCase,
                        format!("`{name}` is not an input of {}", workflow.name),
                    )
                    .label(span, "unknown input")
                    .help(
                        did_you_mean(name, names.iter().copied())
                            .unwrap_or_else(|| format!("its inputs: {}", names.join(", "))),
                    ),
                );
                ok = false;
                continue;
            };
            let mut checked = value.clone();
            if let Value::String(s) = value
                && !(input.ty.is_stringy()
                    || matches!(input.ty.strip_optional(), crate::compile::types::Type::Any))
            {
                checked = serde_json::from_str(s).unwrap_or(Value::String(s.clone()));
            }
            if let Err(e) = input.ty.validate(&checked) {
                let span = self.at(&format!("\"{name}\""));
                self.diags.push(
                    Diagnostic::error(
                        Code::EvalBadCase,
                        format!("input `{name}` of case {id:?} does not fit its type"),
                    )
                    .label(span, e)
                    .help(format!("the input is declared as `{}`", input.ty.display())),
                );
                ok = false;
                continue;
            }
            out.push((name.clone(), crate::run::input_text(value)));
        }
        for input in &workflow.inputs {
            let required =
                input.default.is_none() && input.env.is_none() && !input.ty.is_optional();
            if required && !given.contains_key(&input.name) {
                let span = self.at("\"inputs\"");
                self.diags.push(
                    Diagnostic::error(
                        Code::EvalBadCase,
                        format!("case {id:?} lacks the required input `{}`", input.name),
                    )
                    .label(span, "missing an input")
                    .help(format!("add it: \"inputs\": {{\"{}\": ...}}", input.name)),
                );
                ok = false;
            }
        }
        ok.then_some(out)
    }
}

/// What is wrong with a dataset line that is not JSON, and where (`start`: the line's offset).
pub(crate) fn not_json(e: &serde_json::Error, line: &str, start: usize) -> (String, Span) {
    let at = start + e.column().saturating_sub(1).min(line.len());
    let what = e.to_string();
    let what = what.split(" at line").next().unwrap_or(&what).to_string();
    (
        format!("this line is not JSON: {what}"),
        Span::new(at, (at + 1).min(start + line.len())),
    )
}

pub(crate) fn find(text: &str, base: usize, needle: &str) -> Option<Span> {
    text.find(needle)
        .map(|at| Span::new(base + at, base + at + needle.len()))
}

/// A plain folder name from a case id, unique among the dataset's.
pub(crate) fn unique_run_id(id: &str, taken: &mut HashSet<String>) -> String {
    let mut slug: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(80)
        .collect();
    if slug.trim_matches('-').is_empty() {
        slug = "case".into();
    }
    let mut candidate = slug.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{slug}-{n}");
        n += 1;
    }
    candidate
}
